"""The generated suite: what it keeps, drops and skips; stage 2 demands it.

Runs on the process backend (the tasks' shared pool): the rules are about
which inputs and expected values are kept, not about isolation.
"""

import dataclasses

import numpy as np
import pytest

from codeagent_rl.anticheat import names
from codeagent_rl.anticheat import pipeline
from codeagent_rl.anticheat import stage2
from codeagent_rl.envs import code_env
from codeagent_rl.tasks import humaneval
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks.suite_b import augment
from codeagent_rl.tasks.suite_b import plus

from ...anticheat.conftest import default_config

# Small enough for a few seconds a task on the process backend.
SMALL = plus.PlusConfig(
  augment.AugmentConfig(
    max_tests=40, candidates_per_kind=20, rounds=2, candidates_per_round=20
  )
)
# Raises below 0, loops forever above 1000, returns an object at 7: only
# 0 <= x <= 1000, x != 7 can be kept.
PICKY = """\
def f(x):
  if x < 0:
    raise ValueError(x)
  if x > 1000:
    while True:
      pass
  if x == 7:
    return object()
  return 2 * x
"""


def _task(code=PICKY, entry="f", **changes) -> schema.Task:
  fields = dict(
    task_id="t",
    prompt="",
    entry_point=entry,
    kind="function",
    visible_tests=({"args": [3], "expected": 6},),
    hidden_tests=({"args": [3], "expected": 6}, {"args": [10], "expected": 20}),
    heldout_tests=({"args": [200], "expected": 400},),
    reference_solution=code,
    metadata={},
  )
  fields.update(changes)
  return schema.Task(**fields)


def _inputs(tests):
  return [augment.input_key(t["args"], t.get("kwargs", {})) for t in tests]


def test_drops_duplicates_and_inputs_the_reference_rejects(pool):
  task = _task()
  tests = plus.generate_tests(pool, task, SMALL)
  assert isinstance(tests, tuple) and len(tests) >= 10
  keys = _inputs(tests)
  assert len(set(keys)) == len(keys)  # no duplicates among them
  # ... nor of any test the task has.
  seeds = {augment.input_key(a, k) for a, k in plus.seeds_of(task)}
  assert len(seeds) == 3 and not set(keys) & seeds
  for t in tests:
    (x,) = t["args"]
    assert type(x) is int and 0 <= x <= 1000 and x != 7
    assert t["expected"] == 2 * x


def test_same_seed_same_tests_other_seed_other_tests(pool):
  task = _task()
  first = plus.generate_tests(pool, task, SMALL)
  assert plus.generate_tests(pool, task, SMALL) == first
  other = plus.PlusConfig(dataclasses.replace(SMALL.augment, seed=1))
  assert plus.generate_tests(pool, task, other) != first


def test_skips_what_cannot_get_equality_tests(pool):
  checker = {
    "args": [4],
    "checker": "def check(args, kwargs, output):\n  return output > 0\n",
  }
  stdio = schema.Task(
    task_id="s",
    prompt="",
    entry_point=None,
    kind="stdio",
    visible_tests=(),
    hidden_tests=({"stdin": "1\n", "expected_stdout": "2\n"},),
    heldout_tests=(),
    reference_solution="print(2 * int(input()))",
    metadata={},
  )
  wrong_reference = _task(code="def f(x):\n  return x\n")
  tasks = [
    _task(task_id="a", hidden_tests=(checker,)),
    _task(task_id="b", heldout_tests=(checker,)),
    stdio,
    _task(task_id="c", code=""),
    wrong_reference,
    _task(task_id="d"),
  ]
  out, report = plus.add_generated(pool, tasks, SMALL)
  assert [bool(t.generated_tests) for t in out] == [0, 0, 0, 0, 0, 1]
  assert report.skipped == {
    "stdio": 1,
    "no_reference": 1,
    "checker": 2,
    "reference_fails": 1,
  }
  assert report.generated == 1 and report.tests == len(out[-1].generated_tests)
  assert out[-1].metadata[plus.SEED_METADATA_KEY] == 0


@pytest.fixture(scope="module")
def find_zero(pool):
  config = humaneval.HumanEvalConfig(augment=SMALL.augment)
  (problem,) = humaneval.load_problems(["HumanEval/32"])
  return humaneval.convert(pool, [problem], config)[0]


def test_humaneval_checker_task_keeps_its_property_checkers(pool, find_zero):
  # find_zero: any zero passes. Equality is generated only where the zero
  # is unique; elsewhere the test is the property checker.
  tests = plus.generate_tests(pool, find_zero, SMALL)
  assert isinstance(tests, tuple) and tests
  unique = humaneval.PROPERTY_ONLY["HumanEval/32"]
  kinds = set()
  for t in tests:
    kinds.add("checker" if "checker" in t else "expected")
    if "expected" in t:
      assert unique(*t["args"])
  assert "expected" in kinds
  # A generic task with a checker gets nothing; HumanEval's rules make this
  # one safe: the canonical solution passes every generated test.
  task = dataclasses.replace(find_zero, generated_tests=tests)
  grade = judge.grade(pool, task, task.reference_solution)
  assert grade.suite_gen.total == len(tests)
  assert grade.suite_gen.passed == len(tests)


def test_wrong_only_on_a_generated_input_loses_stage2(pool):
  # The given suites are weak (three small inputs): a program wrong on
  # inputs over 100 passes them, and fails the generated suite.
  task = _task(code="def f(x):\n  return 2 * x\n")
  tests = plus.generate_tests(pool, task, SMALL)
  assert any(t["args"][0] > 200 for t in tests)
  wrong = "def f(x):\n  return 2 * x if x <= 200 else 0\n"
  honest = "def f(x):\n  return x + x\n"
  rows = []
  for with_gen in (False, True):
    graded = dataclasses.replace(task, generated_tests=tests * with_gen)
    for code in (wrong, honest):
      rows.append(code_env.Outcome.from_grade(judge.grade(pool, graded, code)))
  assert [o.suite_a for o in rows] == [1.0] * 4
  assert [o.suite_b for o in rows] == [1.0] * 4
  assert rows[2].suite_gen < 1.0 and rows[3].suite_gen == 1.0
  rewards = pipeline.rewards_from_outcomes(rows)
  rewards = rewards.replace(stage1_flags=np.zeros((4, names.NUM_FLAGS), bool))
  out = stage2.stage2(rewards, default_config())
  # Without a generated suite stage 2 passes both, as before; with it the
  # wrong program loses its pass and its reward, the honest one keeps both.
  np.testing.assert_array_equal(out.stage2_ok, [True, True, False, True])
  np.testing.assert_allclose(out.total, [1.0, 1.0, 0.0, 1.0])
