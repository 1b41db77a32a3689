"""A repository task's workspace: what it may hold, and its text tools.

Paths that leave the workspace, binary or oversize content, too many
files: refused with a message naming the path. The tools (view, listing,
search, replace, replace_lines, create, delete) are pure: they return
text or a new workspace and leave the old one as it was. Whatever
arguments a policy writes, a tool raises nothing but `WorkspaceError`.
"""

import random
import string

import pytest

from codeagent_rl.tasks import workspace as ws_lib

FILES = {
  "calc/__init__.py": "",
  "calc/ops.py": (
    "def add(a, b):\n  return a - b\n\n\ndef neg(a):\n  return -a\n"
  ),
  "calc/cli.py": "import sys\nfrom calc import ops\nprint(ops.add(1, 2))\n",
  "tests/test_ops.py": "from calc import ops\n\nassert ops.add(1, 2) == 3\n",
}


def _ws(**limits):
  return ws_lib.Workspace(FILES, ws_lib.Limits(**limits))


def test_a_workspace_is_a_read_only_mapping_of_its_files():
  ws = _ws()
  assert dict(ws) == FILES and ws.files() == FILES
  assert list(ws) == sorted(FILES)
  assert ws.total_bytes == sum(len(t.encode()) for t in FILES.values())
  with pytest.raises(TypeError):
    ws["calc/ops.py"] = "x"
  copy = ws.files()
  copy["calc/ops.py"] = "changed"
  assert ws["calc/ops.py"] == FILES["calc/ops.py"]
  assert ws == ws_lib.Workspace(dict(FILES)) and hash(ws) == hash(_ws())


@pytest.mark.parametrize(
  "path, message",
  [
    ("../secret.py", "'..'"),
    ("calc/../../etc/passwd", "'..'"),
    ("/etc/passwd", "not absolute"),
    ("./calc/ops.py", "'.'"),
    ("calc//ops.py", "empty"),
    ("calc/", "empty"),
    ("calc\\ops.py", "'\\\\'"),
    ("C:ops.py", "':'"),
    ("calc/o\x00ps.py", "'\\x00'"),
    ("calc/o\nps.py", "'\\n'"),
    ("", "must name a file"),
    ("a/" * 7 + "x.py", "deeper than 6"),
    ("x" * 200 + ".py", "longer than 160"),
    (7, "must be a string"),
  ],
)
def test_paths_that_leave_the_workspace_or_cannot_be_files_are_refused(
  path, message
):
  files = {**FILES, path: "x = 1\n"}
  with pytest.raises(ws_lib.WorkspaceError, match=None) as e:
    ws_lib.Workspace(files)
  assert message in str(e.value), str(e.value)
  # The same rule for an agent's tools.
  for call in (
    lambda ws: ws.create(path, "x"),
    lambda ws: ws.view(path),
    lambda ws: ws.delete(path),
    lambda ws: ws.replace(path, "a", "b"),
  ):
    with pytest.raises(ws_lib.WorkspaceError):
      call(_ws())


@pytest.mark.parametrize(
  "text, message",
  [
    (b"def f(): pass\n", "binary content"),
    ("x = 1\n\x00\x01", "control character '\\x00' on line 2"),
    ("print('\x1b[31m')\n", "control character '\\x1b' on line 1"),
    ("s = '\ud800'\n", "lone surrogate"),
    (None, "must be text, not NoneType"),
    ("#" * (32 * 1024 + 1), "more than the 32768 a file may hold"),
  ],
)
def test_binary_or_oversize_content_is_refused(text, message):
  with pytest.raises(ws_lib.WorkspaceError) as e:
    ws_lib.Workspace({**FILES, "calc/new.py": text})
  assert "calc/new.py" in str(e.value) and message in str(e.value), e.value
  with pytest.raises(ws_lib.WorkspaceError) as e:
    _ws().create("calc/new.py", text)
  assert message in str(e.value)


def test_text_with_tabs_form_feeds_and_unicode_is_text():
  text = "\tx = 'héllo ☃'\r\n\f# end\n"
  assert ws_lib.Workspace({"a.py": text})["a.py"] == text


def test_file_count_and_total_size_are_bounded():
  many = {f"m{i}.py": "" for i in range(65)}
  with pytest.raises(ws_lib.WorkspaceError, match="65 files, more than the 64"):
    ws_lib.Workspace(many)
  big = {f"m{i}.py": "#" * 30_000 for i in range(9)}
  with pytest.raises(ws_lib.WorkspaceError, match="more than the 262144"):
    ws_lib.Workspace(big)
  ws = ws_lib.Workspace({f"m{i}.py": "" for i in range(64)})
  with pytest.raises(ws_lib.WorkspaceError, match="65 files"):
    ws.create("one_more.py", "")
  with pytest.raises(ValueError, match="max_files must be a positive int"):
    ws_lib.Limits(max_files=0)


def test_a_path_is_never_both_a_file_and_a_folder():
  with pytest.raises(ws_lib.WorkspaceError, match="calc is a file"):
    ws_lib.Workspace({"calc": "", "calc/ops.py": ""})
  with pytest.raises(ws_lib.WorkspaceError, match="calc/ops.py is a file"):
    _ws().create("calc/ops.py/x.py", "")
  with pytest.raises(ws_lib.WorkspaceError, match="calc is a file"):
    _ws().create("calc", "")


def test_from_json_names_where_the_workspace_came_from():
  with pytest.raises(ws_lib.WorkspaceError) as e:
    ws_lib.from_json({"../x": ""}, "tasks.jsonl:3: workspace")
  assert str(e.value).startswith("tasks.jsonl:3: workspace: path '../x'")
  with pytest.raises(ws_lib.WorkspaceError, match="path -> text, not list"):
    ws_lib.from_json(["a.py"], "here")


def test_view_numbers_lines_and_names_a_bad_range():
  ws = _ws()
  assert ws.view("calc/ops.py", 1, 2) == "1| def add(a, b):\n2|   return a - b"
  assert ws.view("calc/ops.py", 5).splitlines() == [
    "5| def neg(a):",
    "6|   return -a",
  ]
  assert ws.view("calc/__init__.py") == "calc/__init__.py: empty file"
  with pytest.raises(ws_lib.WorkspaceError, match="outside the file's 1-6"):
    ws.view("calc/ops.py", 7)
  with pytest.raises(ws_lib.WorkspaceError, match="start must be a line"):
    ws.view("calc/ops.py", "1")
  with pytest.raises(ws_lib.WorkspaceError, match="did you mean 'calc/ops.py'"):
    ws.view("ops.py")


def test_long_outputs_are_cut_and_say_how_much_is_left():
  text = "".join(f"line {i}\n" for i in range(1000))
  ws = ws_lib.Workspace({"big.py": text}, ws_lib.Limits(max_view_chars=200))
  shown = ws.view("big.py")
  assert len(shown) <= 200 + 40
  assert shown.splitlines()[-1].endswith("more lines not shown]")
  hits = ws.search("line")
  assert hits.splitlines()[-1].endswith("more matching lines not shown]")


def test_listing_shows_files_under_a_folder():
  ws = _ws()
  assert ws.listing("calc").splitlines() == [
    "calc/__init__.py (0 lines)",
    "calc/cli.py (3 lines)",
    "calc/ops.py (6 lines)",
  ]
  assert len(ws.listing().splitlines()) == len(FILES)
  with pytest.raises(ws_lib.WorkspaceError, match="no such folder"):
    ws.listing("nothing")
  with pytest.raises(ws_lib.WorkspaceError, match="'..'"):
    ws.listing("../")


def test_search_is_literal_and_may_ignore_case():
  ws = _ws()
  assert ws.search("ops.add").splitlines() == [
    "calc/cli.py:3: print(ops.add(1, 2))",
    "tests/test_ops.py:3: assert ops.add(1, 2) == 3",
  ]
  assert ws.search("ops.add", folder="tests").count("\n") == 0
  # Regular-expression characters are themselves.
  assert ws.search("a.d") == "no line holds 'a.d'"
  assert ws.search("(a+)+$") == "no line holds '(a+)+$'"
  assert ws.search("DEF ADD", ignore_case=True).startswith("calc/ops.py:1:")
  for bad in ("", "two\nlines", None, "x" * 201):
    with pytest.raises(ws_lib.WorkspaceError):
      ws.search(bad)


def test_replace_edits_one_occurrence_and_leaves_the_old_workspace():
  ws = _ws()
  fixed = ws.replace("calc/ops.py", "return a - b", "return a + b")
  assert "return a + b" in fixed["calc/ops.py"]
  assert ws["calc/ops.py"] == FILES["calc/ops.py"]
  assert {p: fixed[p] for p in fixed if p != "calc/ops.py"} == {
    p: t for p, t in FILES.items() if p != "calc/ops.py"
  }
  with pytest.raises(ws_lib.WorkspaceError, match="not in the file"):
    ws.replace("calc/ops.py", "return a * b", "x")
  with pytest.raises(ws_lib.WorkspaceError, match="occurs 2 times"):
    ws.replace("calc/ops.py", "return", "yield")
  with pytest.raises(ws_lib.WorkspaceError, match="search text is empty"):
    ws.replace("calc/ops.py", "", "x")
  with pytest.raises(ws_lib.WorkspaceError, match="binary content"):
    ws.replace("calc/ops.py", "return a - b", "return a\x00")


def test_replace_lines_replaces_the_lines_view_numbers():
  ws = _ws()
  # "def add(a, b):" is line 1, "  return a - b" line 2, as view shows.
  assert "2|   return a - b" in ws.view("calc/ops.py", 2, 2)
  fixed = ws.replace_lines("calc/ops.py", 2, 2, "  return a + b\n")
  assert fixed["calc/ops.py"] == FILES["calc/ops.py"].replace("a - b", "a + b")
  assert ws["calc/ops.py"] == FILES["calc/ops.py"]
  # Two lines become three; a missing final newline is added before the
  # lines that follow; nothing deletes them.
  grown = ws.replace_lines(
    "calc/ops.py", 1, 2, "def add(a, b):\n  s = a\n  return s + b"
  )
  assert grown["calc/ops.py"].startswith(
    "def add(a, b):\n  s = a\n  return s + b\n\n\ndef neg"
  )
  assert ws.replace_lines("calc/ops.py", 3, 4, "")["calc/ops.py"] == (
    "def add(a, b):\n  return a - b\ndef neg(a):\n  return -a\n"
  )
  # The last line, and other line ends than \n, are kept as they were.
  crlf = ws_lib.Workspace({"m.py": "a = 1\r\nb = 2\r\nc = 3"})
  assert crlf.replace_lines("m.py", 2, 2, "b = 5\n")["m.py"] == (
    "a = 1\r\nb = 5\nc = 3"
  )
  assert crlf.replace_lines("m.py", 3, 3, "c = 4")["m.py"] == (
    "a = 1\r\nb = 2\r\nc = 4"
  )
  for start, end in ((0, 1), (2, 1), (1, 7), (7, 7)):
    with pytest.raises(ws_lib.WorkspaceError, match="not a range"):
      ws.replace_lines("calc/ops.py", start, end, "x\n")
  with pytest.raises(ws_lib.WorkspaceError, match="must be a line number"):
    ws.replace_lines("calc/ops.py", "2", 2, "x\n")
  with pytest.raises(ws_lib.WorkspaceError, match="must be a line number"):
    ws.replace_lines("calc/ops.py", 1, True, "x\n")
  with pytest.raises(ws_lib.WorkspaceError, match="binary content"):
    ws.replace_lines("calc/ops.py", 1, 1, "x\x00\n")
  with pytest.raises(ws_lib.WorkspaceError, match="outside the workspace"):
    ws.replace_lines("calc/../../etc/passwd", 1, 1, "x\n")
  with pytest.raises(ws_lib.WorkspaceError, match="no such file"):
    ws.replace_lines("calc/new.py", 1, 1, "x\n")
  with pytest.raises(ws_lib.WorkspaceError):
    _ws(max_file_bytes=200).replace_lines("calc/ops.py", 1, 1, "x" * 500)


def test_create_and_delete():
  ws = _ws()
  more = ws.create("calc/util.py", "X = 1\n")
  assert more["calc/util.py"] == "X = 1\n" and "calc/util.py" not in ws
  less = more.delete("tests/test_ops.py")
  assert "tests/test_ops.py" not in less and "tests/test_ops.py" in more
  with pytest.raises(ws_lib.WorkspaceError, match="already exists"):
    ws.create("calc/ops.py", "")
  with pytest.raises(ws_lib.WorkspaceError, match="no such file"):
    ws.delete("calc/missing.py")


def _junk(rng):
  """A value of the kinds a policy's tool call may carry."""
  pick = rng.randrange(8)
  if pick == 0:
    return rng.choice(list(FILES))
  if pick == 1:
    return "".join(
      rng.choice(string.printable) for _ in range(rng.randrange(9))
    )
  if pick == 2:
    return rng.choice(["..", "/", "calc/../x", "a" * 300, "\x00", "calc/"])
  if pick == 3:
    return rng.randrange(-3, 12)
  if pick == 4:
    return rng.choice([None, True, 1.5, [], {}, b"x"])
  if pick == 5:
    return "return a - b"
  if pick == 6:
    return "\ud800" if rng.random() < 0.5 else "é☃\t"
  return rng.choice(list(FILES)).split("/")[0]


def test_any_arguments_a_policy_writes_raise_only_workspace_errors():
  rng = random.Random(0)
  ws = _ws(max_view_chars=300)
  tools = {
    "view": 3,
    "listing": 1,
    "search": 3,
    "replace": 3,
    "replace_lines": 4,
    "create": 2,
    "delete": 1,
  }
  outcomes = {"ok": 0, "error": 0}
  for _ in range(3000):
    name = rng.choice(list(tools))
    args = [_junk(rng) for _ in range(rng.randrange(tools[name] + 1))]
    try:
      out = getattr(ws, name)(*args)
    except ws_lib.WorkspaceError as e:
      assert str(e)
      outcomes["error"] += 1
      continue
    except TypeError as e:  # a wrong number of arguments, not a value
      assert "argument" in str(e)
      continue
    outcomes["ok"] += 1
    if isinstance(out, ws_lib.Workspace):
      ws = out  # a valid workspace by construction
      ws_lib.Workspace(ws.files(), ws.limits)
    else:
      assert isinstance(out, str) and len(out) <= 300 + 60
  assert outcomes["ok"] > 100 and outcomes["error"] > 100


def test_the_graded_copy_keeps_the_change_and_the_tasks_own_tests():
  task = _ws()
  agent = (
    task.replace("calc/ops.py", "return a - b", "return a + b")
    .replace("tests/test_ops.py", "== 3", "== -1")  # weakens the test
    .create("calc/extra.py", "Y = 2\n")
    .create("conftest.py", "import os\nos._exit(0)\n")
    .create("calc/sitecustomize.py", "import sys\n")
    .create("hack.pth", "import calc\n")
    .create("tests/pytest.ini", "[pytest]\n")
  )
  graded = ws_lib.graded_copy(task, agent, ("tests/test_ops.py",))
  files = graded.workspace.files()
  assert files["calc/ops.py"] == agent["calc/ops.py"]  # the change
  assert files["calc/extra.py"] == "Y = 2\n"
  assert files["tests/test_ops.py"] == FILES["tests/test_ops.py"]
  assert set(files) == set(FILES) | {"calc/extra.py"}
  assert graded.restored == ("tests/test_ops.py",)
  assert graded.removed == (
    "calc/sitecustomize.py",
    "conftest.py",
    "hack.pth",
    "tests/pytest.ini",
  )
  # A deleted test comes back; the task's own hook files stay its own.
  own = ws_lib.Workspace({**FILES, "conftest.py": "X = 1\n"})
  gone = own.delete("tests/test_ops.py").replace("conftest.py", "1", "2")
  graded = ws_lib.graded_copy(own, gone, ("tests/test_ops.py",))
  assert graded.workspace == own
  assert graded.restored == ("conftest.py", "tests/test_ops.py")
  assert ws_lib.graded_copy(task, task).restored == ()


def test_a_change_the_tasks_tests_cannot_sit_beside_is_an_error():
  task = _ws()
  agent = task.delete("tests/test_ops.py").create("tests", "not a folder\n")
  with pytest.raises(ws_lib.WorkspaceError, match="tests is a file"):
    ws_lib.graded_copy(task, agent, ("tests/test_ops.py",))
  with pytest.raises(ws_lib.WorkspaceError, match="'..'"):
    ws_lib.graded_copy(task, task, ("../tests/x.py",))


def test_lines_are_numbered_as_python_numbers_them():
  # A form feed or vertical tab does not end a line for Python's
  # tracebacks, so it does not here; \r\n and \r do.
  text = "a = 1\f\nb = 2\vc\r\nd = 3\re = 4\n"
  ws = ws_lib.Workspace({"m.py": text})
  assert ws.view("m.py").split("\n") == [
    "1| a = 1\f",
    "2| b = 2\vc",
    "3| d = 3",
    "4| e = 4",
  ]
  assert ws_lib.source_lines(text) == ["a = 1\f", "b = 2\vc", "d = 3", "e = 4"]
  assert ws.search("e = 4") == "m.py:4: e = 4"
  assert ws.listing() == "m.py (4 lines)"
  assert ws_lib.source_lines("") == [] and ws_lib.source_lines("x") == ["x"]


def test_a_line_longer_than_the_budget_is_shown_cut():
  ws = ws_lib.Workspace(
    {"long.py": "x = '" + "y" * 5000 + "'\nz = 1\n"},
    ws_lib.Limits(max_view_chars=200),
  )
  first, rest = ws.view("long.py").split("\n")
  assert first.startswith("1| x = 'yyy") and first.endswith(
    "[line cut at 160 characters]"
  )
  assert rest == "2| z = 1"  # what fits after the cut line is shown
