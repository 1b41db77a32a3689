"""The audit of a task file: every bad task named, with its field."""

import json
import subprocess
import sys

import pytest

from codeagent_rl.tasks import audit
from codeagent_rl.tasks import checkers
from codeagent_rl.tasks import schema

DOUBLE = "def f(x):\n  return 2 * x\n"


def _task(task_id, hidden, reference=DOUBLE, **fields):
  values = {
    "task_id": task_id,
    "prompt": "Double x.",
    "entry_point": "f",
    "kind": "function",
    "visible_tests": ({"args": [1], "expected": 2},),
    "hidden_tests": tuple(hidden),
    "heldout_tests": ({"args": [7], "expected": 14},),
    "reference_solution": reference,
    "metadata": {},
  }
  values.update(fields)
  return schema.Task(**values)


def _checker(body):
  return {
    "args": [2],
    "checker": f"def check(args, kwargs, output):\n  {body}\n",
  }


# task id -> (the task, the problems expected: (field, kind)).
CASES = {
  "good": (_task("good", [{"args": [2], "expected": 4}]), []),
  "good_checker": (_task("good_checker", [_checker("return output == 4")]), []),
  "raises": (
    _task("raises", [_checker("return 1 / 0")]),
    [("hidden_tests[0].checker", "checker_raises")],
  ),
  "hangs": (
    _task("hangs", [_checker("while True: pass")]),
    [("hidden_tests[0].checker", "checker_hangs")],
  ),
  "not_bool": (
    _task("not_bool", [_checker("return output")]),
    [("hidden_tests[0].checker", "checker_not_bool")],
  ),
  "rejects": (
    _task("rejects", [_checker("return output == 5")]),
    [("hidden_tests[0].checker", "reference_fails")],
  ),
  "wrong_expected": (
    _task(
      "wrong_expected",
      [{"args": [2], "expected": 4}, {"args": [3], "expected": 7}],
    ),
    [("hidden_tests[1]", "reference_fails")],
  ),
  "wrong_heldout": (
    _task(
      "wrong_heldout",
      [{"args": [2], "expected": 4}],
      heldout_tests=({"args": [7], "expected": "14"},),
    ),
    [("heldout_tests[0]", "reference_fails")],
  ),
  "no_check": (
    _task("no_check", [{"args": [2], "checker": "x = 1\n"}]),
    [("hidden_tests[0].checker", "checker_broken")],
  ),
  "syntax_error": (
    _task("syntax_error", [{"args": [2], "expected": 4}], "def f(x) return\n"),
    [("reference_solution", "reference_error")],
  ),
  "raises_on_one": (
    _task(
      "raises_on_one",
      [{"args": [2], "expected": 4}, {"args": [0], "expected": 0}],
      "def f(x):\n  return 2 * x // (x != 0)\n",
    ),
    [("hidden_tests[1]", "reference_fails")],
  ),
  "no_reference": (
    _task("no_reference", [{"args": [2], "expected": 5}], ""),
    [],  # unverified: nothing to run
  ),
  "no_reference_bad_checker": (
    _task(
      "no_reference_bad_checker",
      [_checker("return 1")],
      "",
    ),
    [],  # the module loads and defines check: fine without a reference
  ),
  "no_reference_hanging_module": (
    _task(
      "no_reference_hanging_module",
      [{"args": [2], "checker": "while True:\n  pass\n"}],
      "",
    ),
    [("hidden_tests[0].checker", "checker_broken")],
  ),
}


@pytest.fixture(scope="module")
def runner():
  r = checkers.CheckerRunner(timeout_s=1.0)
  yield r
  r.close()


@pytest.fixture(scope="module")
def report(pool, runner):
  return audit.audit(pool, [task for task, _ in CASES.values()], runner)


def test_every_problem_is_found_with_its_field(report):
  found = {}
  for p in report.problems:
    found.setdefault(p.task_id, []).append((p.field, p.kind))
  for task_id, (_, expected) in CASES.items():
    assert found.get(task_id, []) == expected, task_id
  assert report.tasks == len(CASES)
  assert report.verified == len(CASES) - 3  # the three without a reference


def test_details_say_what_was_found(report):
  lines = {p.task_id: p.line() for p in report.problems}
  assert lines["raises"] == (
    "task 'raises' hidden_tests[0].checker: on the reference's output,"
    " checker raised ZeroDivisionError: division by zero"
  )
  assert "timed out after 1 s" in lines["hangs"]
  assert "returned int, not True or False" in lines["not_bool"]
  assert lines["wrong_expected"] == (
    "task 'wrong_expected' hidden_tests[1]: the reference fails it: 6 != 7"
  )
  assert "SyntaxError" in lines["syntax_error"]
  assert "ZeroDivisionError" in lines["raises_on_one"]


def test_report_round_trips_and_counts_tasks(report):
  again = audit.Report.from_json(json.loads(json.dumps(report.to_json())))
  assert again == report
  counts = report.counts()
  assert counts["reference_fails"] == 4
  assert sum(counts.values()) == len(report.bad)
  assert f"{len(report.bad)} with a problem" in report.summary()


def test_error_mode_lists_them_skip_mode_drops_them(report):
  tasks = [task for task, _ in CASES.values()]
  with pytest.raises(audit.BadTasksError) as info:
    audit.apply(tasks, report, "error", "config.data.train_tasks")
  message = str(info.value)
  assert message.startswith(
    f"config.data.train_tasks: {len(report.bad)} of {len(tasks)} tasks"
  )
  assert "task 'raises' hidden_tests[0].checker" in message
  assert "--config.data.bad_tasks=skip" in message
  kept, warning = audit.apply(tasks, report, "skip", "train")
  assert [t.task_id for t in kept] == [
    tid for tid, (_, problems) in CASES.items() if not problems
  ]
  assert warning[0].startswith(f"WARNING: train: skipped {len(report.bad)}")
  assert warning[-1] == f"... and {len(report.problems) - audit.SHOWN} more"
  bad = [t for t in tasks if t.task_id in report.bad]
  with pytest.raises(audit.BadTasksError, match="every one of the"):
    audit.apply(bad, report, "skip", "train")
  with pytest.raises(ValueError, match="mode"):
    audit.apply(tasks, report, "off", "train")


def test_cli_exits_1_listing_every_problem(tmp_path):
  bad = tmp_path / "bad.jsonl"
  schema.write_tasks(bad, [CASES["good"][0], CASES["wrong_expected"][0]])
  good = tmp_path / "good.jsonl"
  schema.write_tasks(good, [CASES["good"][0], CASES["good_checker"][0]])
  out = tmp_path / "report.json"

  def run(path):
    return subprocess.run(
      [
        sys.executable,
        "-m",
        "codeagent_rl.tasks.audit",
        f"--tasks={path}",
        "--backend=process",
        f"--json={out}",
      ],
      capture_output=True,
      text=True,
      timeout=120,
    )

  proc = run(bad)
  assert proc.returncode == 1, proc.stderr
  assert "task 'wrong_expected' hidden_tests[1]:" in proc.stdout
  assert json.loads(out.read_text())["bad"] == ["wrong_expected"]
  proc = run(good)
  assert proc.returncode == 0, proc.stderr
  assert "2 tasks, 2 references run, 0 with a problem" in proc.stdout
