"""Tests of `codeagent_rl.tasks.swe_convert`: SWE-style records by hand.

Each record is a small `calc` package whose `add` subtracts; its patches
are real git diffs made here with difflib and applied by `git apply`. The
converted tasks are graded in the process sandbox (`module_pool`).
"""

import concurrent.futures
import difflib
import json
import pathlib
import subprocess
import sys
import tempfile

import pytest

from codeagent_rl.sandbox import jobs
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import repo_judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import swe_convert

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
OPS = '''def add(a, b):
  """The sum of a and b."""
  return a - b


def pair(a, b):
  return [a, b]


def neg(a):
  return -a
'''
FIXED = OPS.replace("a - b", "a + b").replace("[a, b]", "(a, b)")
TESTS = """from calc.ops import neg


def test_neg():
  assert neg(2) == -2
"""
# What the test patch adds: FAIL_TO_PASS tests that use each import form,
# and PASS_TO_PASS ones, one of which takes a fixture (dropped).
NEW_TESTS = '''import calc.ops
import calc.ops as o
from calc import ops
from calc.ops import add
from calc.ops import pair as make_pair
from calc.ops import neg

SMALL = 1


def test_neg():
  assert neg(2) == -2


def test_add():
  """Adds."""
  assert add(1, 2) == 3
  assert 5 == o.add(b=3, a=2)
  assert ops.add(1, 0) == 1


def test_pair():
  assert make_pair(1, "x") == (1, "x")
  assert calc.ops.add(a=0.5, b=0.5) == 1


def test_neg_fixture(tmp_path):
  assert neg(0) == 0
'''
FILES = {
  "calc/__init__.py": "",
  "calc/ops.py": OPS,
  "tests/test_ops.py": TESTS,
  "cli.py": "import sys\nfrom calc import ops\nprint(ops.add(1, 2))\n",
}
F2P = ["tests/test_ops.py::test_add", "tests/test_ops.py::test_pair"]
P2P = ["tests/test_ops.py::test_neg", "tests/test_ops.py::test_neg_fixture"]


def _diff(old: dict, new: dict) -> str:
  """A git diff (a/PATH, b/PATH) from `old` to `new` (path -> text)."""
  out = []
  for path in sorted(set(old) | set(new)):
    a, b = old.get(path), new.get(path)
    if a == b:
      continue
    assert (a or "\n").endswith("\n") and (b or "\n").endswith("\n")
    out.append(f"diff --git a/{path} b/{path}\n")
    if a is None:
      out.append("new file mode 100644\n")
    if b is None:
      out.append("deleted file mode 100644\n")
    out += difflib.unified_diff(
      (a or "").splitlines(True),
      (b or "").splitlines(True),
      "/dev/null" if a is None else f"a/{path}",
      "/dev/null" if b is None else f"b/{path}",
    )
  return "".join(out)


def _record(**overrides) -> dict:
  """The `calc` record, with `overrides`.

  Besides the record's fields, `fixed` overrides the files the gold patch
  changes, `tests` those the test patch changes (path -> new text).
  """
  fixed = overrides.pop("fixed", {"calc/ops.py": FIXED})
  tests = overrides.pop("tests", {"tests/test_ops.py": NEW_TESTS})
  record = {
    "instance_id": "calc-1",
    "problem_statement": "add() subtracts.",
    "files": FILES,
    "patch": _diff(FILES, {**FILES, **fixed}),
    "test_patch": _diff(FILES, {**FILES, **tests}),
    "FAIL_TO_PASS": F2P,
    "PASS_TO_PASS": P2P,
    "entry_point": "cli.py",
  }
  record.update(overrides)
  return record


def _write(path, records, extra_lines=()) -> str:
  with open(path, "w", encoding="utf-8") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")
    for line in extra_lines:
      f.write(line + "\n")
  return str(path)


def _verdicts(pool, task, tests, workspace) -> list[bool]:
  result = repo_judge.run_tests(pool, task, tests, workspace)
  config = judge.task_config(task, judge.JudgeConfig())
  return [
    judge.judge_test(task.kind, test, run, config).passed
    for test, run in zip(tests, result.tests, strict=True)
  ]


def test_a_record_converts_and_its_task_grades(tmp_path, module_pool):
  src = _write(tmp_path / "in.jsonl", [_record()])
  out = tmp_path / "out.jsonl"
  report = swe_convert.convert(src, str(out), pool=module_pool)
  assert (report.read, report.written, report.skip_reasons) == (1, 1, {})
  assert report.dropped_tests == {"test takes fixtures": 1}
  assert report.checks == {"passed": 1}
  (task,) = schema.read_tasks(out)
  assert (task.task_id, task.kind, task.entry_point) == (
    "swe/calc-1",
    "repo",
    "cli.py",
  )
  assert task.prompt == "add() subtracts." and task.visible_tests == ()
  # The workspace is the snapshot: the hidden tests are not in it.
  assert task.repo.start.files() == FILES
  assert task.repo.test_paths == ("tests/test_ops.py",)
  assert task.workspace["reference"] == {"calc/ops.py": FIXED}
  add, pair = "calc.ops.add", "calc.ops.pair"
  # FAIL_TO_PASS asserts (5), then PASS_TO_PASS (1), dealt A, B, A, ...
  assert task.hidden_tests == (
    {"call": add, "args": [1, 2], "expected": 3},
    {"call": add, "args": [1, 0], "expected": 1},
    # add returns 1.0, which passes as with `==` (metadata["judge"]).
    {"call": add, "args": [], "kwargs": {"a": 0.5, "b": 0.5}, "expected": 1},
  )
  assert task.heldout_tests == (
    {"call": add, "args": [], "kwargs": {"b": 3, "a": 2}, "expected": 5},
    {"call": pair, "args": [1, "x"], "expected": (1, "x")},
    {"call": "calc.ops.neg", "args": [2], "expected": -2},
  )
  meta = task.metadata
  assert meta["tests"] == {
    "FAIL_TO_PASS": {"converted": 2, "asserts": 5},
    "PASS_TO_PASS": {
      "converted": 1,
      "asserts": 1,
      "dropped": {"test takes fixtures": 1},
    },
  }
  assert meta["suites"] == {
    "hidden_tests": {"FAIL_TO_PASS": 3},
    "heldout_tests": {"FAIL_TO_PASS": 2, "PASS_TO_PASS": 1},
  }
  assert not meta["fail_to_pass_in_both"] and meta["checks"] == "passed"
  tests = judge.graded_tests(task)
  assert all(_verdicts(module_pool, task, tests, task.repo.reference))
  start = _verdicts(module_pool, task, tests, task.repo.start)
  # The bug shows in add (but for 1 + 0) and pair (a list where a tuple is
  # expected); neg passes either way.
  assert start == [False, True, False, False, False, True]


def test_a_lone_fail_to_pass_assert_goes_to_both_suites():
  one = NEW_TESTS + "\n\ndef test_one():\n  assert add(2, 2) == 4\n"
  # A node id listed twice, or in both lists, counts once.
  record = _record(
    tests={"tests/test_ops.py": one},
    FAIL_TO_PASS=["tests/test_ops.py::test_one"] * 2,
    PASS_TO_PASS=[*P2P[:1], "tests/test_ops.py::test_one"],
  )
  task, f2p = swe_convert.draft_task(record)
  lone = {"call": "calc.ops.add", "args": [2, 2], "expected": 4}
  neg = {"call": "calc.ops.neg", "args": [2], "expected": -2}
  assert f2p == (lone,)
  assert (task.hidden_tests, task.heldout_tests) == ((lone, neg), (lone,))
  assert task.metadata["fail_to_pass_in_both"]
  assert task.metadata["suites"] == {
    "hidden_tests": {"FAIL_TO_PASS": 1, "PASS_TO_PASS": 1},
    "heldout_tests": {"FAIL_TO_PASS": 1},
  }


PREFIX = "import pytest\nfrom calc.ops import add\n\n\n"


@pytest.mark.parametrize(
  "source, name, reason",
  [
    (
      "class TestAdd:\n  def test_x(self):\n    assert add(1, 2) == 3\n",
      "TestAdd::test_x",
      "test in a class",
    ),
    (
      "def test_x():\n  assert add(1, 2) == 3\n",
      "test_x[1]",
      "parametrized test",
    ),
    ("def test_y():\n  assert add(1, 2) == 3\n", "test_x", "test not found"),
    (
      "def test_x(tmp_path):\n  assert add(1, 2) == 3\n",
      "test_x",
      "test takes fixtures",
    ),
    (
      "@pytest.mark.slow\ndef test_x():\n  assert add(1, 2) == 3\n",
      "test_x",
      "decorated test",
    ),
    (
      "def test_x():\n  with pytest.raises(TypeError):\n    add(1)\n",
      "test_x",
      "with statement in the body",
    ),
    (
      "def test_x():\n  for i in range(2):\n    assert add(i, 0) == i\n",
      "test_x",
      "for statement in the body",
    ),
    (
      "ONE = 1\n\n\ndef test_x():\n  assert add(ONE, 1) == 2\n",
      "test_x",
      "argument is not a literal",
    ),
    (
      "def test_x():\n  assert add(*[1, 2]) == 3\n",
      "test_x",
      "argument is not a literal",
    ),
    (
      "def test_x():\n  assert add(b'a', b'b') == 'ab'\n",
      "test_x",
      "argument is not plain data",
    ),
    (
      "def test_x():\n  assert add(1, 2) == 3j\n",
      "test_x",
      "expected value is not plain data",
    ),
    (
      "def test_x():\n  assert add(1, 2) == add(2, 1)\n",
      "test_x",
      "expected value is not a literal",
    ),
    (
      "def test_x():\n  assert add(1, 2) != 4\n",
      "test_x",
      "assert is not one ==",
    ),
    (
      "def test_x():\n  assert 0 < add(1, 2) == 3\n",
      "test_x",
      "assert is not one ==",
    ),
    ("def test_x():\n  assert add(1, 2)\n", "test_x", "assert is not one =="),
    ("def test_x():\n  assert 3 == 3\n", "test_x", "assert compares no call"),
    (
      "from tests.test_ops import test_neg\n\n\n"
      "def test_x():\n  assert test_neg() == None\n",
      "test_x",
      "call of no workspace function",
    ),
    (
      "from os.path import *\n\n\ndef test_x():\n  assert add(1, 2) == 3\n",
      "test_x",
      "call of no workspace function",
    ),
    (
      "import functools\n\n\n@functools.cache\ndef helper():\n  pass\n\n\n"
      "def test_x():\n  assert add(1, 2) == 3\n",
      "test_x",
      "module runs code at import",
    ),
    (
      "def helper(x=add(1, 2)):\n  pass\n\n\n"
      "def test_x():\n  assert add(1, 2) == 3\n",
      "test_x",
      "module runs code at import",
    ),
    (
      "def test_x():\n  assert add(1, 2) == 3\n\n\nprint('collected')\n",
      "test_x",
      "module runs code at import",
    ),
    (
      "def test_x():\n  assert add(1, 2) == 3\n\n\ndef test_x(tmp_path):\n"
      "  pass\n",
      "test_x",
      "test takes fixtures",
    ),
    (
      "def test_x():\n  assert add(1, 2) == 3\n  x = 1\n",
      "test_x",
      "assign statement in the body",
    ),
    (
      "def test_x():\n  assert add(1, 2) == 3\n  add(1, 2)\n",
      "test_x",
      "expr statement in the body",
    ),
    (
      "def test_x():\n  assert add([1], None) == (\n",
      "test_x",
      "test module does not parse",
    ),
    (
      "def test_x():\n  assert len([1]) == 1\n",
      "test_x",
      "call of no workspace function",
    ),
    (
      "from math import floor\n\n\ndef test_x():\n  assert floor(1.5) == 1\n",
      "test_x",
      "call of no workspace function",
    ),
    (
      "def helper():\n  return add\n\n\ndef test_x():\n"
      "  assert helper()(1, 2) == 3\n",
      "test_x",
      "call of no workspace function",
    ),
    (
      "import sys\nsys.path.insert(0, 'calc')\n\n\ndef test_x():\n"
      "  assert add(1, 2) == 3\n",
      "test_x",
      "module runs code at import",
    ),
    (
      "def setup_module():\n  pass\n\n\n"
      "def test_x():\n  assert add(1, 2) == 3\n",
      "test_x",
      "module runs code at import",
    ),
    (
      "@pytest.fixture(autouse=True)\ndef patch():\n  pass\n\n\n"
      "def test_x():\n  assert add(1, 2) == 3\n",
      "test_x",
      "autouse fixture",
    ),
    (
      "def test_x():\n  '''Only a docstring.'''\n",
      "test_x",
      "test has no assert",
    ),
  ],
)
def test_test_shapes_that_do_not_convert(source, name, reason):
  tests = {"tests/test_shape.py": PREFIX + source}
  record = _record(tests=tests, FAIL_TO_PASS=[f"tests/test_shape.py::{name}"])
  with pytest.raises(swe_convert.NotConverted) as caught:
    swe_convert.draft_task(record)
  assert caught.value.reason == f"FAIL_TO_PASS: {reason}", str(caught.value)
  # As a PASS_TO_PASS test it is dropped and counted instead.
  record["FAIL_TO_PASS"], record["PASS_TO_PASS"] = F2P, record["FAIL_TO_PASS"]
  record["test_patch"] = _diff(
    FILES, {**FILES, **tests, "tests/test_ops.py": NEW_TESTS}
  )
  task, _ = swe_convert.draft_task(record)
  assert task.metadata["tests"]["PASS_TO_PASS"]["dropped"] == {reason: 1}


def test_test_modules_that_only_define_things_convert():
  source = (
    "LIMIT: int = 10\n\n\n@pytest.fixture\n"
    "def numbers(n=3):\n  return [1, 2]\n\n\nclass TestMore:\n"
    "  @pytest.mark.slow\n  def test_y(self):\n    pass\n\n\n"
    "def test_x():\n  assert add(1, 2) == 3\n\n\n"
    "if __name__ == '__main__':\n  test_x()\n"
  )
  tests = {"tests/test_shape.py": '"""Tests of add."""\n' + PREFIX + source}
  record = _record(tests=tests, FAIL_TO_PASS=["tests/test_shape.py::test_x"])
  del record["entry_point"]  # optional
  task, f2p = swe_convert.draft_task(record)
  assert f2p == ({"call": "calc.ops.add", "args": [1, 2], "expected": 3},)
  assert task.entry_point is None


def test_the_reference_change_holds_deletions_but_not_tests():
  files = {**FILES, "calc/old.py": "OLD = 1\n"}
  fixed = {**files, "calc/ops.py": FIXED, "tests/test_ops.py": NEW_TESTS}
  del fixed["calc/old.py"]
  record = _record(files=files, patch=_diff(files, fixed))
  task, _ = swe_convert.draft_task(record)
  assert task.workspace["reference"] == {
    "calc/old.py": None,
    "calc/ops.py": FIXED,
  }
  assert task.metadata["reference_left_out"] == ["tests/test_ops.py"]
  assert "calc/old.py" not in task.repo.reference


def test_patches_apply_in_a_temporary_folder_inside_a_git_checkout(
  tmp_path, monkeypatch
):
  # git must not take the checkout around the folder for the repository
  # (it would apply the patch relative to the checkout's top, or not at all).
  subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
  (tmp_path / "tmp").mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
  task, _ = swe_convert.draft_task(_record())
  assert task.workspace["reference"] == {"calc/ops.py": FIXED}


def test_an_autouse_fixture_in_a_conftest_above_is_refused():
  conftest = (
    "import pytest\n\n\n@pytest.fixture(autouse=True)\ndef f():\n  pass\n"
  )
  record = _record(
    tests={"tests/test_ops.py": NEW_TESTS, "tests/conftest.py": conftest}
  )
  with pytest.raises(swe_convert.NotConverted, match="tests/conftest.py"):
    swe_convert.draft_task(record)
  # A conftest.py elsewhere does not apply.
  other = {"tests/test_ops.py": NEW_TESTS, "calc/conftest.py": conftest}
  assert swe_convert.draft_task(_record(tests=other))[0].hidden_tests


# What `git diff --no-index --binary /dev/null logo.png` printed for the
# bytes 89 50 4e 47 ff 00 01 (not UTF-8).
BINARY_PATCH = (
  "diff --git a/logo.png b/logo.png\nnew file mode 100644\nindex "
  + "0" * 40
  + "..230c1b530d237d0b1e458d664aad0984ef438b66\nGIT binary patch\n"
  "literal 7\nOcmeAS@N@sqzz6^fMgngD\n\nliteral 0\nHcmV?d00001\n\n"
)


def test_malformed_records_are_reported_not_fatal(tmp_path):
  gold = _diff(FILES, {**FILES, "calc/ops.py": FIXED})
  symlink = (
    "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n"
    "+++ b/link\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"
  )
  escape = _diff({}, {"x.py": "x = 1\n"}).replace("x.py", "../x.py")
  stale = _diff(
    {"calc/ops.py": OPS.replace("a - b", "a * b")}, {"calc/ops.py": FIXED}
  )
  no_patch = {k: v for k, v in _record().items() if k != "patch"}
  # Each record, and the start of its message after "<file>:<line>: ".
  bad = [
    (no_patch, "patch: missing."),
    (_record(FAIL_TO_PASS="tests/x.py::t"), "FAIL_TO_PASS: not a list"),
    (_record(patch=stale), "patch: does not apply: error: patch failed"),
    (
      _record(files={**FILES, "../up.py": "x = 1\n"}),
      "files: not a valid workspace: path '../up.py'",
    ),
    (
      _record(files={**FILES, "logo.png": "\x89PNG\x00\x01"}),
      "files: not a valid workspace: logo.png: binary content",
    ),
    (
      _record(files={**FILES, ".git/config": "[core]\n"}),
      "files: not a valid workspace: .git/config",
    ),
    (_record(patch=gold + symlink), "patch: makes a symlink or special file"),
    (_record(patch=gold + BINARY_PATCH), "patch: makes a binary file: logo"),
    (_record(patch=gold + "+\udcff\n"), "patch: not text: a lone surrogate"),
    (_record(patch=escape), "patch: does not apply: error: invalid path"),
    (
      _record(fixed={"tests/test_ops.py": NEW_TESTS}),
      "patch: changes only tests: tests/test_ops.py",
    ),
    (
      _record(entry_point="main.py"),
      "entry_point: not a .py file of files: 'main.py'",
    ),
    (["not", "an", "object"], "not a JSON object."),
  ]
  good = [_record(), _record(instance_id="two", FAIL_TO_PASS=json.dumps(F2P))]
  records = [*good, *(record for record, _ in bad), _record()]
  src = _write(tmp_path / "in.jsonl", records, ["{not json"])
  out = tmp_path / "out.jsonl"
  report = swe_convert.convert(src, str(out))
  assert (report.read, report.written) == (len(records) + 1, 2)
  assert report.checks == {"not_run": 2}
  wanted = [want for _, want in bad]
  wanted += [f"instance_id: duplicate: {src}:1", "not JSON: "]
  assert len(report.problems) == len(wanted)
  for line, (problem, want) in enumerate(
    zip(report.problems, wanted, strict=True), 3
  ):
    assert problem.startswith(f"{src}:{line}: {want}"), problem
  assert report.skip_reasons == {
    "FAIL_TO_PASS: not a list of node ids": 1,
    "entry_point: not a .py file of files": 1,
    "files: not a valid workspace": 3,
    "instance_id: duplicate": 1,
    "not JSON": 1,
    "not a JSON object": 1,
    "patch: changes only tests": 1,
    "patch: does not apply": 2,
    "patch: makes a binary file": 1,
    "patch: makes a symlink or special file": 1,
    "patch: missing": 1,
    "patch: not text": 1,
  }
  tasks = schema.read_tasks(out)
  assert [t.task_id for t in tasks] == ["swe/calc-1", "swe/two"]


def test_the_sandbox_checks_skip_a_gold_patch_that_fixes_nothing(
  tmp_path, module_pool
):
  half = OPS.replace("[a, b]", "(a, b)")  # add still subtracts
  noop = OPS.replace('"""The sum of a and b."""', '"""Sums."""')
  records = [
    _record(instance_id="half", fixed={"calc/ops.py": half}),
    # The start passes the only FAIL_TO_PASS test: nothing to fix.
    _record(
      instance_id="noop",
      fixed={"calc/ops.py": noop},
      FAIL_TO_PASS=P2P[:1],
      PASS_TO_PASS=[],
    ),
  ]
  src = _write(tmp_path / "in.jsonl", records)
  report = swe_convert.convert(
    src, str(tmp_path / "out.jsonl"), pool=module_pool
  )
  assert report.written == 0
  assert report.skip_reasons == {
    "check: the reference fails a test": 1,
    "check: the start passes FAIL_TO_PASS": 1,
  }
  assert (
    "the reference fails a test: calc.ops.add: -1 != 3" in (report.problems[0])
  )
  unchecked = swe_convert.convert(src, str(tmp_path / "o.jsonl"))
  assert unchecked.written == 2


class _FailingSandbox:
  """A pool whose first `failures` jobs come back as sandbox errors."""

  def __init__(self, pool, failures):
    self.pool, self.failures, self.submitted = pool, failures, 0
    self.parallelism = pool.parallelism

  def submit(self, job):
    self.submitted += 1
    if self.submitted <= self.failures:
      future = concurrent.futures.Future()
      future.set_result(jobs.sandbox_error_result(job, "runsc died", 0.0))
      return future
    return self.pool.submit(job)


def test_a_sandbox_failure_is_retried_and_never_read_as_failing_code(
  tmp_path, module_pool
):
  src = _write(tmp_path / "in.jsonl", [_record()])
  # One failure: the retry passes the checks.
  flaky = _FailingSandbox(module_pool, 1)
  report = swe_convert.convert(src, str(tmp_path / "a.jsonl"), pool=flaky)
  assert report.written == 1 and report.checks == {"passed": 1}
  # The sandbox keeps failing: a skip that says so, not "the reference
  # fails a test" (the record's code never ran).
  dead = _FailingSandbox(module_pool, 10**6)
  report = swe_convert.convert(src, str(tmp_path / "b.jsonl"), pool=dead)
  assert report.written == 0
  assert report.skip_reasons == {
    "check: the sandbox failed (convert the record again)": 1
  }
  assert "runsc died" in report.problems[0]
  # Without retries, one failure is enough to skip.
  task, f2p = swe_convert.draft_task(_record())
  with pytest.raises(swe_convert.NotConverted, match="sandbox failed"):
    swe_convert.check_task(_FailingSandbox(module_pool, 1), task, f2p, 0)
  assert swe_convert.check_task(module_pool, task, f2p, 0).metadata[
    "checks"
  ] == ("passed")


def _cli(*args) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-m", "codeagent_rl.tasks.swe_convert", *args],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=120,
    check=False,
  )


def test_cli(tmp_path):
  src = _write(
    tmp_path / "in.jsonl",
    [_record(), _record(instance_id="x", patch="not a diff\n")],
  )
  out = tmp_path / "out.jsonl"
  proc = _cli(f"--input={src}", f"--out={out}", "--backend=process")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "swe_convert: read 2 records, wrote 1 tasks, skipped 1" in proc.stdout
  assert "  skipped patch: does not apply: 1" in proc.stdout
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary["checks"] == {"passed": 1}
  assert f"swe_convert: skipped {src}:2: patch: does not apply" in proc.stderr
  # The process backend's banner once (absl's log reaches stderr here).
  assert proc.stderr.count("NO isolation") == 1
  assert len(schema.read_tasks(out)) == 1

  none = _write(tmp_path / "none.jsonl", [_record(patch="not a diff\n")])
  proc = _cli(f"--input={none}", f"--out={out}", "--norun_checks")
  assert proc.returncode == 1
  last = proc.stderr.strip().splitlines()[-1]
  assert last == f"swe_convert: no task written from {none} (see above)."

  missing = tmp_path / "missing.jsonl"
  proc = _cli(f"--input={missing}", f"--out={out}", "--norun_checks")
  assert proc.returncode == 1
  assert (
    proc.stderr.strip()
    .splitlines()[-1]
    .startswith(f"swe_convert: {missing}: cannot read")
  )
