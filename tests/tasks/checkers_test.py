"""Checkers in their child process: every misbehaviour becomes a verdict.

A checker is the task author's code; a policy's output is anything the
sandbox lets through. Neither may hang, crash or fill the judge's process.
"""

import concurrent.futures
import time

import pytest

from codeagent_rl import status as status_lib
from codeagent_rl.sandbox import jobs
from codeagent_rl.tasks import checkers
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema

DOUBLE = "def check(args, kwargs, output):\n  return output == 2 * args[0]\n"


@pytest.fixture(scope="module")
def runner():
  r = checkers.CheckerRunner(timeout_s=1.0, memory_mb=256)
  yield r
  r.close()


def _check(body: str) -> str:
  return "def check(args, kwargs, output):\n" + "".join(
    f"  {line}\n" for line in body.splitlines()
  )


def test_verdicts_of_a_well_behaved_checker(runner):
  assert runner.run(DOUBLE, [3], {}, 6) == checkers.Outcome(True)
  wrong = runner.run(DOUBLE, [3], {}, 7)
  assert (wrong.passed, wrong.problem, wrong.reason) == (
    False,
    "",
    "checker returned False",
  )
  # Values arrive as the judge decodes them: tuples, sets, big ints.
  kinds = _check("return (type(output), type(args[0])) == (tuple, frozenset)")
  assert runner.run(kinds, [frozenset({1})], {}, (1, 2)).passed
  big = _check("return output == 10**5000 and kwargs == {'k': {1: 2}}")
  assert runner.run(big, [], {"k": {1: 2}}, 10**5000).passed


@pytest.mark.parametrize(
  "body, problem, detail",
  [
    ("return 1 / 0", "raised", "checker raised ZeroDivisionError: division"),
    ("return 1", "returned", "checker returned int, not True or False"),
    ("return None", "returned", "checker returned NoneType, not True"),
    ("return output", "returned", "checker returned list, not True"),
    ("import sys\nsys.exit(0)", "raised", "checker raised SystemExit: 0"),
    ("raise KeyboardInterrupt", "raised", "checker raised KeyboardInterrupt"),
    ("return len(b'x' * 10**10) > 0", "raised", "checker raised MemoryError"),
  ],
)
def test_a_misbehaving_checker_fails_the_test(runner, body, problem, detail):
  outcome = runner.run(_check(body), [1], {}, [1])
  assert not outcome.passed
  assert outcome.problem == problem
  assert outcome.detail.startswith(detail), outcome.detail
  # The runner goes on serving.
  assert runner.run(DOUBLE, [4], {}, 8).passed


def test_a_hanging_checker_times_out_and_the_next_call_works(runner):
  restarts = runner.restarts
  for hang in (_check("while True:\n  pass"), "while True:\n  pass\n"):
    start = time.monotonic()
    outcome = runner.run(hang, [1], {}, 1)
    assert outcome.problem == "timed_out", outcome
    assert outcome.reason == "checker timed out after 1 s"
    # Bounded by the limit plus a fresh child's start, not by the checker.
    assert time.monotonic() - start < 1.0 + checkers.START_S
    assert runner.run(DOUBLE, [5], {}, 10).passed
  assert runner.restarts == restarts + 2


def test_a_checker_that_ends_its_process_is_replaced(runner):
  outcome = runner.run(_check("import os\nos._exit(3)"), [1], {}, 1)
  assert (outcome.problem, outcome.detail) == (
    "died",
    "checker process ended (exit code 3)",
  )
  assert runner.run(DOUBLE, [6], {}, 12).passed


def test_prints_and_mutations_do_not_leak(runner):
  noisy = _check(
    "print('x' * 100000)\nimport sys\nsys.stdout.write('{')\nreturn True"
  )
  assert runner.run(noisy, [1], {}, 1).passed
  grows = _check("args.append(0)\nreturn len(args) == 2")
  assert runner.run(grows, [1], {}, 1).passed
  assert runner.run(grows, [1], {}, 1).passed  # fresh copies each call


def test_unencodable_values_and_a_missing_check(runner):
  outcome = runner.run(DOUBLE, [1], {}, object())
  assert outcome.problem == "unencodable"
  missing = runner.run("def chek(a, k, o):\n  return True\n", [1], {}, 1)
  assert missing.problem == "raised"
  assert "defines no function check" in missing.detail
  assert runner.load("x = 1\n").problem == "raised"
  assert runner.load(DOUBLE) == checkers.Outcome(True)
  assert runner.load("def check(:\n").problem == "raised"


def test_threads_get_their_own_answers(runner):
  def one(i):
    return runner.run(DOUBLE, [i], {}, 2 * i + (i % 3 == 0)).passed

  with concurrent.futures.ThreadPoolExecutor(8) as pool:
    got = list(pool.map(one, range(200)))
  assert got == [i % 3 != 0 for i in range(200)]


def test_bad_limits_are_refused():
  with pytest.raises(ValueError, match="timeout_s"):
    checkers.CheckerRunner(timeout_s=0)
  with pytest.raises(ValueError, match="memory_mb"):
    checkers.CheckerRunner(memory_mb=-1)


def test_the_judge_survives_what_a_policy_output_does_to_a_checker(
  monkeypatch,
):
  runner = checkers.CheckerRunner(timeout_s=0.5)
  monkeypatch.setattr(checkers, "default_runner", lambda: runner)
  # The checker misbehaves only on outputs a policy chose.
  fragile = _check(
    "if output == 'hang':\n  while True: pass\n"
    "if output == 'exit':\n  import os; os._exit(1)\n"
    "if output == 'raise':\n  raise ValueError(output)\n"
    "return output == 'ok'"
  )
  outputs = ["ok", "hang", "exit", "raise", "ok", "no"]
  task = schema.Task(
    task_id="t",
    prompt="p",
    entry_point="f",
    kind="function",
    visible_tests=(),
    hidden_tests=tuple({"args": [i], "checker": fragile} for i in outputs),
    heldout_tests=(),
    reference_solution="",
    metadata={},
  )
  result = jobs.JobResult(
    status=status_lib.JobStatus.OK,
    tests=tuple(jobs.TestRun("ok", output=o) for o in outputs),
  )
  start = time.monotonic()
  grade = judge.grade_result(task, result)
  assert time.monotonic() - start < 0.5 + checkers.START_S + 5
  verdicts = grade.suite_a.verdicts
  assert [v.passed for v in verdicts] == [
    True,
    False,
    False,
    False,
    True,
    False,
  ]
  assert verdicts[1].reason == "checker timed out after 0.5 s"
  assert verdicts[2].reason == "checker process ended (exit code 1)"
  assert verdicts[3].reason == "checker raised ValueError: raise"
  assert verdicts[5].reason == "checker returned False"
  runner.close()
