"""Data isolation: planted leaks are found, clean data is not flagged."""

import json
import pathlib
import subprocess
import sys

import pytest

from codeagent_rl.tasks import isolation
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
REFERENCE = (
  "def merge_runs(items, sep='-'):\n"
  '  """Joins runs of equal items."""\n'
  "  out = []\n"
  "  for item in items:\n"
  "    if out and out[-1][0] == item:\n"
  "      out[-1].append(item)\n"
  "    else:\n"
  "      out.append([item])\n"
  "  return [sep.join(run) for run in out]\n"
)


def _hidden(i):
  return {
    "args": [["a" * i, "a" * i, f"b{i}"]],
    "kwargs": {"sep": "+"},
    "expected": [f"{'a' * i}+{'a' * i}", f"b{i}"],
  }


def _heldout(i):
  return {
    "args": [[f"x{i}", f"y{i}", f"y{i}"]],
    "expected": [f"x{i}", f"y{i}-y{i}"],
  }


def _task(task_id="merge", **changes) -> schema.Task:
  fields = dict(
    task_id=task_id,
    prompt="Write merge_runs(items, sep='-'): join runs of equal items.",
    entry_point="merge_runs",
    kind="function",
    visible_tests=(
      {"args": [["p", "p"]], "expected": ["p-p"]},
      {"args": [["q"]], "kwargs": {"sep": "+"}, "expected": ["q"]},
    ),
    hidden_tests=tuple(_hidden(i) for i in range(1, 7)),
    heldout_tests=tuple(_heldout(i) for i in range(10, 30)),
    reference_solution=REFERENCE,
    metadata={},
  )
  fields.update(changes)
  return schema.Task(**fields)


def _other_task() -> schema.Task:
  """Same entry point and shapes as `_task`, different tests."""
  return _task(
    "other",
    hidden_tests=tuple(_heldout(i) for i in range(40, 46)),
    heldout_tests=tuple(_hidden(i) for i in range(8, 12)),
  )


def _stdio_task() -> schema.Task:
  return schema.Task(
    task_id="grid",
    prompt="Count the # cells of a grid.",
    entry_point=None,
    kind="stdio",
    visible_tests=({"stdin": "1 2\n#.\n", "expected_stdout": "1\n"},),
    hidden_tests=(
      {"stdin": "2 3\n#.#\n.##\n", "expected_stdout": "4\n"},
      {"stdin": "3 3\n###\n#.#\n###\n", "expected_stdout": "8\n"},
      {"stdin": "1\n", "expected_stdout": "0\n"},
    ),
    heldout_tests=({"stdin": "1 4\n.#.#\n", "expected_stdout": "2\n"},),
    reference_solution=(
      "h, w = map(int, input().split())\n"
      "print(sum(input().count('#') for _ in range(h)))\n"
    ),
    metadata={},
  )


def _check(tasks, texts, **kwargs):
  return isolation.check(tasks, isolation.Corpus.from_texts(texts), **kwargs)


def _asserts(entry, tests):
  return "\n".join(
    "assert " + isolation.assertion_text(entry, t) for t in tests
  )


def _by_id(report):
  return {r.task_id: r for r in report.results}


# --- Planted leaks ------------------------------------------------------------


def test_exact_copy_inside_a_larger_document():
  test = _task().hidden_tests[3]
  doc = (
    "Notes on lists.\n" * 50
    + isolation.assertion_text("merge_runs", test)
    + "\nMore notes.\n" * 50
  )
  report = _check([_task()], ["unrelated", doc])
  hidden = report.results[0].suites["hidden_tests"]
  assert hidden.found == (3,) and hidden.found_in == ("texts[1]",)
  assert report.results[0].suites["heldout_tests"].found == ()
  assert [r.task_id for r in report.leaks] == ["merge"]
  assert report.documents == 2


def test_reformatted_copy_is_found():
  # hidden_tests[1]: merge_runs(["aa", "aa", "b2"], sep="+") == ["aa+aa", "b2"]
  doc = (
    "def test_it():\n"
    "    assert merge_runs(\n"
    "        [ 'aa','aa',\n"
    "          'b2' ],\n"
    "        sep = '+' ,\n"
    "    )==[ 'aa+aa' , 'b2' ]   # ok\n"
  )
  report = _check([_task()], [doc])
  assert report.results[0].suites["hidden_tests"].found == (1,)
  unittest_style = (
    "self.assertEqual(merge_runs(['a', 'a', 'b1'], sep='+'),\n ['a+a', 'b1'])"
  )
  report = _check([_task()], [unittest_style])
  assert report.results[0].suites["hidden_tests"].found == (0,)


def test_partial_copy_of_heldout_suite_is_counted():
  task = _task()
  half = task.heldout_tests[:10]
  report = _check(
    [task], ["# regression tests\n" + _asserts("merge_runs", half)]
  )
  result = report.results[0]
  heldout = result.suites["heldout_tests"]
  assert heldout.found == tuple(range(10))
  assert heldout.tests == 20 and heldout.skipped == 0
  # Half the suite's text, pasted in order: about half of its n-grams.
  assert 0.4 < heldout.containment < 0.55
  assert result.suites["hidden_tests"].found == ()
  assert result.suites["hidden_tests"].containment == 0.0
  assert result.leak
  assert any(r.startswith("heldout_tests: 10 test(s)") for r in result.reasons)


def test_whole_suite_pasted_reaches_the_threshold():
  task = _task()
  report = _check([task], [_asserts("merge_runs", task.heldout_tests)])
  heldout = report.results[0].suites["heldout_tests"]
  assert heldout.containment == 1.0 and len(heldout.found) == 20
  assert any("containment 1.00" in r for r in report.results[0].reasons)


def test_reference_copied_with_comments_and_reformatting():
  copy = (
    "Here is my solution:\n```python\n"
    'def merge_runs(items, sep="-"):  # entry point\n'
    '    """Joins runs of equal items."""\n'
    "    out = [ ]  # the runs so far\n"
    "    for item in items:\n"
    "        # extend the last run, or start a new one\n"
    "        if out and out[ -1 ][ 0 ]==item:\n"
    "            out[-1].append( item )\n"
    "        else:\n"
    "            out.append([item])\n"
    "    return [sep.join(run) for run in out]  # joined\n```\n"
  )
  report = _check([_task()], [copy], check_tests=False)
  result = report.results[0]
  assert result.suites == {}
  assert result.reference.exact and result.reference.found_in == "texts[0]"
  assert result.reference.containment == 1.0
  assert result.reasons == (
    "reference: found exactly",
    "reference: containment 1.00 >= 0.5",
  )


def test_half_a_reference_is_not_exact_but_contained():
  half = REFERENCE[: len(REFERENCE) // 2]
  result = _check([_task()], [half], check_tests=False).results[0]
  assert not result.reference.exact
  assert 0.2 < result.reference.containment < 0.6


def test_data_form_in_a_jsonl_record(tmp_path):
  task = _task()
  record = {
    "source": "scraped",
    "cases": [
      {"args": [["x12", "y12", "y12"]], "expected": ["x12", "y12-y12"]}
    ],
  }
  path = tmp_path / "corpus.jsonl"
  path.write_text(
    json.dumps({"text": "hello"}) + "\nnot json at all\n" + json.dumps(record)
  )
  report = isolation.check([task], isolation.Corpus.from_path(path))
  heldout = report.results[0].suites["heldout_tests"]
  assert heldout.found == (2,) and heldout.found_in == (f"{path}:3",)
  assert report.documents == 3


def test_short_data_form_needs_a_key_name():
  task = _task(
    task_id="add",
    entry_point="add",
    hidden_tests=({"args": [13, 20], "expected": 33},),
    heldout_tests=(),
    reference_solution="def add(a, b): return a + b",
  )
  keyed = '{"args": [13, 20], "expected": 33}'
  assert _check([task], [keyed]).results[0].suites["hidden_tests"].found == (0,)
  bare = "xs = [[13, 20], 33]"
  assert not _check([task], [bare]).leaks


def test_tagged_values_are_found():
  test = {"args": [(1, 2), {3, 1}], "expected": frozenset({"z", "y"})}
  task = _task(hidden_tests=(test,), heldout_tests=())
  doc = "merge_runs((1, 2), {1, 3}) == frozenset({'y', 'z'})"
  assert _check([task], [doc]).results[0].suites["hidden_tests"].found == (0,)
  tagged = json.dumps(
    {
      "args": [{"$tuple": [1, 2]}, {"$set": [1, 3]}],
      "expected": {"$frozenset": ["y", "z"]},
    }
  )
  assert _check([task], [tagged]).results[0].suites["hidden_tests"].found == (
    0,
  )


def test_stdio_test_copied():
  task = _stdio_task()
  chat = {
    "messages": [
      {"role": "user", "content": "Input:\n3 3\n###\n#.#\n###\nOutput?"},
      {"role": "assistant", "content": "The answer is\n8\n"},
    ]
  }
  doc = isolation.jsonl_document_text(json.dumps(chat))
  result = _check([task], [doc]).results[0]
  hidden = result.suites["hidden_tests"]
  assert hidden.found == (1,)
  assert hidden.skipped == 1  # "1\n" -> "0\n" is too short
  assert result.suites["heldout_tests"].found == ()
  # The input alone, or input and output in different documents: clean.
  assert not _check([task], ["3 3\n###\n#.#\n###\n", "8"]).leaks


def test_checker_test_uses_its_call_when_long_enough():
  checker = "def check(args, kwargs, output):\n  return bool(output)\n"
  long_test = {"args": [["k1", "k2", "k2", "k3"]], "checker": checker}
  short_test = {"args": [[]], "checker": checker}
  task = _task(hidden_tests=(long_test, short_test), heldout_tests=())
  doc = "print(merge_runs(['k1', 'k2', 'k2', 'k3']))\nmerge_runs([])"
  hidden = _check([task], [doc]).results[0].suites["hidden_tests"]
  assert hidden.found == (0,) and hidden.skipped == 1


def test_large_file_chunks_overlap(tmp_path, monkeypatch):
  monkeypatch.setattr(isolation, "MAX_DOC_CHARS", 1000)
  monkeypatch.setattr(isolation, "OVERLAP_CHARS", 300)
  lines = [f"filler line {i}\n" for i in range(300)]
  # A test split over three lines, across where chunks end.
  test = (
    "merge_runs(['aaaaa', 'aaaaa', 'b5'],\n sep='+')\n"
    " == ['aaaaa+aaaaa', 'b5']\n"
  )
  for cut in range(55, 75):
    path = tmp_path / f"dump{cut}.txt"
    path.write_text("".join(lines[:cut]) + test + "".join(lines[cut:]))
    corpus = isolation.Corpus.from_path(path)
    assert len(list(corpus.documents())) > 3
    hidden = (
      isolation.check([_task()], corpus).results[0].suites["hidden_tests"]
    )
    assert hidden.found == (4,), cut


# --- Clean data ---------------------------------------------------------------


def test_clean_data_gives_no_leak():
  task, other = _task(), _other_task()
  docs = [
    _asserts("merge_runs", other.hidden_tests + other.heldout_tests),
    _asserts("merge_runs", task.visible_tests),
    task.prompt,
    "def merge_runs(items):\n  return items\n",
  ]
  report = _check([task], docs)
  assert report.leaks == []
  result = report.results[0]
  # Other tasks' tests share some structure, never whole tests.
  assert result.suites["hidden_tests"].found == ()
  assert result.suites["heldout_tests"].found == ()
  assert result.suites["hidden_tests"].containment < 0.05
  assert result.suites["heldout_tests"].containment < 0.05
  assert result.reference.containment < 0.2
  assert report.summary().startswith("isolation: 0/1 tasks leak")
  assert report.table() == [report.table()[0]]


def test_near_misses_are_not_exact():
  # hidden_tests[1] is merge_runs(["aa", "aa", "b2"], sep="+") == [...].
  docs = [
    "assert merge_runs(['aa', 'aa', 'b2'], sep='+') == ['aa+aa', 'b3']",
    "assert merge_runs(['aa', 'aa', 'b2'], sep='+') == ['aa+aa']",
    "assert merge_runs(['aa', 'aa', 'b2'], sep='-') == ['aa+aa', 'b2']",
    "merge_runs(['aa', 'aa', 'b2'], sep='+') == ['aa+aa', 'b2', 'c']",
  ]
  assert not _check([_task()], docs, check_reference=False).leaks
  num = _task(
    task_id="num",
    hidden_tests=(
      {"args": [[3, 4, 5, 6]], "expected": 3},
      *({"args": [[i, i]], "expected": i} for i in range(10, 16)),
    ),
    heldout_tests=(),
  )
  misses = [
    "merge_runs([3, 4, 5, 6]) == 3.5",
    "merge_runs([3, 4, 5, 6]) == -3",
    "merge_runs([3, 4, 5, 6]) == 4\nmerge_runs([1]) == 3",
    '{"args": [[3, 4, 5, 6]], "expected": 4}, {"args": [3]}',
    '{"args": [[3, 4, 5, 6]], "expected": [3]}',
  ]
  report = _check([num], misses, check_reference=False)
  assert report.results[0].suites["hidden_tests"].found == ()
  assert report.results[0].suites["hidden_tests"].containment < 0.1
  assert not report.leaks
  hit = _check([num], ["merge_runs([3, 4, 5, 6]) == 3."], check_reference=False)
  assert hit.results[0].suites["hidden_tests"].found == (0,)


def test_each_task_is_judged_on_its_own():
  task, other = _task(), _other_task()
  doc = _asserts("merge_runs", other.hidden_tests[:2])
  report = _check([task, other], [doc])
  assert [r.task_id for r in report.leaks] == ["other"]
  assert _by_id(report)["other"].suites["hidden_tests"].found == (0, 1)
  assert _by_id(report)["merge"].suites["hidden_tests"].found == ()
  payload = report.to_json()
  assert json.loads(json.dumps(payload)) == payload
  assert payload["leaks"] == ["other"] and payload["tasks"] == 2


def test_bad_arguments():
  with pytest.raises(ValueError, match="threshold"):
    _check([_task()], [""], threshold=0)
  with pytest.raises(ValueError, match="threshold"):
    _check([_task()], [""], threshold=1.5)
  with pytest.raises(ValueError, match="ngram"):
    isolation.Corpus.from_texts([""], ngram=0)
  with pytest.raises(ValueError, match="both False"):
    _check([_task()], [""], check_tests=False, check_reference=False)


def test_corpus_path_errors(tmp_path):
  with pytest.raises(isolation.CorpusError, match="no such file"):
    isolation.Corpus.from_path(tmp_path / "missing")
  (tmp_path / "blob.bin").write_bytes(b"\x00\x01")
  with pytest.raises(isolation.CorpusError, match="no readable file"):
    isolation.Corpus.from_path(tmp_path)
  (tmp_path / "sub").mkdir()
  (tmp_path / "sub" / "a.md").write_text("hi")
  corpus = isolation.Corpus.from_path(tmp_path)
  assert corpus.files == (str(tmp_path / "sub" / "a.md"),)
  assert corpus.skipped == 1


# --- Command line -------------------------------------------------------------


def _cli(*args) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-m", "codeagent_rl.tasks.isolation", *map(str, args)],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=60,
  )


def test_cli_end_to_end(tmp_path):
  tasks = tmp_path / "tasks.jsonl"
  schema.write_tasks(tasks, [_task(), _other_task(), _stdio_task()])
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  (corpus / "clean.md").write_text(_task().prompt)
  out = tmp_path / "report.json"
  clean = _cli(f"--tasks={tasks}", f"--against={corpus}", f"--report={out}")
  assert clean.returncode == 0, clean.stderr
  assert clean.stdout.strip().startswith("isolation: 0/3 tasks leak")
  assert json.loads(out.read_text())["leaks"] == []

  (corpus / "sft.py").write_text(_asserts("merge_runs", _task().hidden_tests))
  leak = _cli(f"--tasks={tasks}", f"--against={corpus}", f"--report={out}")
  assert leak.returncode == 1
  assert (
    leak.stderr.strip().splitlines()[-1].startswith("error: 1 of 3 tasks leak")
  )
  assert "merge" in leak.stdout and "6/6" in leak.stdout
  report = json.loads(out.read_text())
  assert report["leaks"] == ["merge"]
  merge = report["results"][0]
  assert merge["hidden_tests"]["found"] == list(range(6))
  assert merge["reference_solution"]["exact"] is False

  refs_only = _cli(
    f"--tasks={tasks}", f"--against={corpus}", "--check=reference"
  )
  assert refs_only.returncode == 0, refs_only.stderr


@pytest.mark.parametrize(
  "args, message",
  [
    (["--against={corpus}", "--tasks={tmp}/nope.jsonl"], "--tasks: "),
    (["--tasks={tasks}", "--against={tmp}/nope"], "no such file"),
    (["--tasks={tasks}", "--against={corpus}", "--ngram=0"], "--ngram=0"),
    (["--tasks={tasks}", "--against={corpus}", "--threshold=2"], "(0, 1]"),
    (["--tasks={tasks}", "--against={corpus}", "--check=tests,x"], "--check"),
    (["--tasks={tmp}/bad.jsonl", "--against={corpus}"], "not valid JSON"),
    (["--tasks={tasks}", "--against={empty}"], "no readable file"),
  ],
)
def test_cli_errors(tmp_path, args, message):
  tasks = tmp_path / "tasks.jsonl"
  schema.write_tasks(tasks, [_task()])
  (tmp_path / "bad.jsonl").write_text('{"task_id": \n')
  corpus = tmp_path / "c.txt"
  corpus.write_text("hi")
  empty = tmp_path / "empty"
  empty.mkdir()
  names = {"tasks": tasks, "corpus": corpus, "tmp": tmp_path, "empty": empty}
  args = [a.format(**names) for a in args]
  proc = _cli(*args)
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
  assert message in lines[0]


# --- Synthetic tasks ----------------------------------------------------------


def test_synthetic_tests_do_not_leak_into_train_demonstrations(tmp_path):
  demos = dict.fromkeys(synthetic.DEMO_KINDS, 1.0)
  train, plans = synthetic.generate(
    synthetic.SyntheticConfig(num_tasks=40, split="train", seed=3, **demos)
  )
  test, _ = synthetic.generate(
    synthetic.SyntheticConfig(num_tasks=40, split="test", seed=3)
  )
  path = tmp_path / "demos.jsonl"
  synthetic.write_demo_plans(path, plans)
  corpus = isolation.Corpus.from_path(path)
  assert len(plans) > 80
  for tasks in (train, test):
    report = isolation.check(tasks, corpus, check_reference=False)
    assert report.leaks == [], report.leaks[:3]
    assert report.documents == len(plans)
  # The plans do hold the train references (single_turn submits them).
  report = isolation.check(train, corpus, check_tests=False)
  assert all(r.reference.exact for r in report.results)


def test_public_tests_are_skipped_not_searched():
  task = schema.Task(
    task_id="t",
    prompt="p",
    entry_point="scale",
    kind="function",
    visible_tests=({"args": [1], "expected": 3},),
    hidden_tests=(
      {"args": [12345], "expected": 37035},
      {"args": [67890], "expected": 203670},
    ),
    heldout_tests=({"args": [-4242], "expected": -12726},),
    reference_solution="def scale(x):\n  return 3 * x\n",
    metadata={},
  )
  text = "assert scale(12345) == 37035\nassert scale(67890) == 203670\n"
  corpus = isolation.Corpus.from_texts([text])
  [found] = isolation.check([task], corpus, check_reference=False).results
  assert found.leak and found.suites["hidden_tests"].found == (0, 1)
  public = {isolation.assertion_text("scale", task.hidden_tests[0])}
  [result] = isolation.check(
    [task], corpus, check_reference=False, public=public
  ).results
  hidden = result.suites["hidden_tests"]
  assert hidden.skipped == 1
  assert hidden.found == (1,)  # the other one is still found
  public.add(isolation.assertion_text("scale", task.hidden_tests[1]))
  [clean] = isolation.check(
    [task], corpus, check_reference=False, public=public
  ).results
  assert not clean.leak and clean.suites["hidden_tests"].skipped == 2
