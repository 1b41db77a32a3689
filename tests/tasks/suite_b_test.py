"""Suite B catches wrong solutions that suite A passes (a few problems).

Converts the problems of `wrong_solutions.WRONG`, a few with input
contracts and HumanEval/4 (process backend), with the default suite B and
with mutation only (suite B before generation), and grades them.
`benchmarks/humaneval_grade_bench.py` measures the same over all 164.
"""

import dataclasses
import statistics

import pytest

from codeagent_rl.sandbox import jobs
from codeagent_rl.tasks import humaneval
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks.suite_b import augment
from codeagent_rl.tasks.suite_b import wrong_solutions

# Problems with an input contract that generation would otherwise break.
CONTRACTED = ("HumanEval/11", "HumanEval/20", "HumanEval/78", "HumanEval/143")
WRONG_IDS = tuple(sorted({w.task_id for w in wrong_solutions.WRONG}))
SUBSET = tuple(sorted({*WRONG_IDS, *CONTRACTED, "HumanEval/4"}))
# Suite B as it was: mutants of suite A's inputs only, at most 40.
MUTATION_ONLY = humaneval.HumanEvalConfig(
  augment=augment.AugmentConfig(max_tests=40, rounds=3, candidates_per_kind=0)
)


@pytest.fixture(scope="module")
def problems():
  return {p["task_id"]: p for p in humaneval.load_problems(SUBSET)}


@pytest.fixture(scope="module")
def tasks(pool, problems):
  return {t.task_id: t for t in humaneval.convert(pool, problems.values())}


@pytest.fixture(scope="module")
def mutation_only(pool, problems):
  chosen = [problems[t] for t in WRONG_IDS]
  converted = humaneval.convert(pool, chosen, MUTATION_ONLY)
  return {t.task_id: t for t in converted}


def _grade(pool, task, problem, body):
  code = humaneval.body_completion(problem, body)
  return judge.grade(pool, task, code)


def _all_passed(suite) -> bool:
  return suite.passed == suite.total


def test_wrong_solutions_pass_suite_a_and_fail_suite_b(
  pool, problems, tasks, mutation_only
):
  passed_before = []
  for wrong in wrong_solutions.WRONG:
    problem = problems[wrong.task_id]
    now = _grade(pool, tasks[wrong.task_id], problem, wrong.body)
    assert _all_passed(now.suite_a), wrong.name  # fitted to suite A
    assert not _all_passed(now.suite_b), wrong.name  # caught by suite B
    before = _grade(pool, mutation_only[wrong.task_id], problem, wrong.body)
    if _all_passed(before.suite_b):
      passed_before.append(wrong.name)
  # Mutants of suite A's inputs miss about half of them (6 of 13 measured):
  # empty lists, all-negative lists, large n, zeros beyond [-100, 100].
  assert len(passed_before) >= 4, passed_before


def test_canonical_solutions_pass_both_suites(pool, tasks):
  for task in tasks.values():
    grade = judge.grade(pool, task, task.reference_solution)
    assert _all_passed(grade.suite_a), task.task_id
    assert _all_passed(grade.suite_b), task.task_id


def test_suite_b_is_larger_and_new(tasks, mutation_only):
  for task_id, task in tasks.items():
    visible = {
      augment.input_key(t["args"], t["kwargs"]) for t in task.visible_tests
    }
    hidden = {
      augment.input_key(t["args"], t["kwargs"]) for t in task.hidden_tests
    }
    heldout = [
      augment.input_key(t["args"], t["kwargs"]) for t in task.heldout_tests
    ]
    assert len(set(heldout)) == len(heldout), task_id
    assert not set(heldout) & (hidden | visible), task_id
  sizes = [len(t.heldout_tests) for t in tasks.values()]
  assert statistics.median(sizes) == augment.AugmentConfig().max_tests
  assert all(len(t.heldout_tests) <= 40 for t in mutation_only.values())


def test_suite_b_keeps_the_contracts(tasks):
  for task_id in (*CONTRACTED, "HumanEval/32"):
    contract = humaneval.CONTRACTS[task_id]
    heldout = tasks[task_id].heldout_tests
    assert len(heldout) >= 20, task_id
    assert all(contract(*t["args"]) for t in heldout), task_id


def test_suite_b_reaches_past_the_seeds(tasks):
  # Empty and single-item inputs where suite A has none.
  task = tasks["HumanEval/52"]
  assert all(len(t["args"][0]) >= 4 for t in task.hidden_tests)
  lists = [t["args"][0] for t in task.heldout_tests]
  assert [] in lists and any(len(x) == 1 for x in lists)
  # Magnitudes far beyond suite A's n <= 5.
  ns = [t["args"][0] for t in tasks["HumanEval/83"].heldout_tests]
  assert max(ns) > 100


def test_float_tasks_expect_plain_values(tasks):
  for task_id in ("HumanEval/2", "HumanEval/4"):
    task = tasks[task_id]
    assert all("checker" in t for t in task.hidden_tests)  # the original
    assert all("expected" in t for t in task.heldout_tests)
    assert task.metadata["oracle"] == "reference"


ALTERNATIVES = {
  # Other correct float algorithms: the judge's tolerance must accept them.
  "HumanEval/2": (
    "return number - int(number)",
    "import math\nreturn number - math.floor(number)",
    "return float(number) % 1",
  ),
  "HumanEval/4": (
    "import statistics\nm = statistics.fmean(numbers)\n"
    "return statistics.fmean(abs(x - m) for x in numbers)",
    "import math\nm = math.fsum(numbers) / len(numbers)\n"
    "return math.fsum(abs(x - m) for x in numbers) / len(numbers)",
    "m = sum(sorted(numbers)) / len(numbers)\n"
    "return sum(sorted(abs(x - m) for x in numbers)) / len(numbers)",
  ),
}


@pytest.mark.parametrize(
  "task_id,body",
  [(t, b) for t, bodies in ALTERNATIVES.items() for b in bodies],
)
def test_other_correct_float_algorithms_pass(
  pool, problems, tasks, task_id, body
):
  grade = _grade(pool, tasks[task_id], problems[task_id], body)
  assert _all_passed(grade.suite_a) and _all_passed(grade.suite_b)


def test_find_zero_is_differential_where_the_zero_is_unique(tasks):
  task = tasks["HumanEval/32"]
  assert task.metadata["oracle"] == "property"
  expected = [t for t in task.heldout_tests if "expected" in t]
  checked = [t for t in task.heldout_tests if "checker" in t]
  assert len(expected) >= 30 and checked
  for t in expected:
    assert humaneval.real_zeros(t["args"][0]) == (1, True)
    assert type(t["expected"]) is float
  for t in checked:
    assert humaneval.real_zeros(t["args"][0]) != (1, True)


def test_find_zero_expected_values_are_strict():
  # x^3 + x - 2 = (x - 1)(x^2 + x + 2): the one real zero is 1.
  test = humaneval.make_heldout_test("HumanEval/32", [[-2, 1, 0, 1]], {}, 1.0)
  assert test["expected"] == 1.0

  def passes(output):
    run = jobs.TestRun(status="ok", output=output)
    return judge.judge_test("function", test, run, judge.JudgeConfig()).passed

  assert passes(1.0) and passes(1.0 + 5e-7)
  # Within the original checker's |poly| < 1e-4 but not at the zero.
  assert not passes(1.0 + 2e-5)
  # Several real zeros: the property checker stays.
  several = humaneval.make_heldout_test(
    "HumanEval/32", [[-2, -1, 2, 1]], {}, 1.0
  )
  assert "checker" in several and "expected" not in several


@pytest.mark.parametrize(
  "xs,want",
  [
    ([-2, -1, 2, 1], (3, True)),  # (x - 1)(x + 1)(x + 2)
    ([1, 0, 1], (0, True)),  # x^2 + 1
    ([-1, 1], (1, True)),
    ([1, -3, 3, -1], (1, False)),  # (1 - x)^3
    ([5, 0, 0, 1], (1, True)),
    ([0, 0, 0, 1], (1, False)),
    ([-2, 1, 0, 1], (1, True)),
    ([4, 0, -5, 0, 1], (4, True)),  # (x^2 - 1)(x^2 - 4)
  ],
)
def test_real_zeros_by_hand(xs, want):
  assert humaneval.real_zeros(xs) == want


def test_oracle_metadata_is_checked(tasks):
  for task in tasks.values():
    humaneval.check_oracle(task)
  task = tasks["HumanEval/32"]
  for bad in ("reference", "any", None):
    metadata = dict(task.metadata, oracle=bad)
    wrong = dataclasses.replace(task, metadata=metadata)
    with pytest.raises(ValueError, match="metadata.oracle"):
      humaneval.check_oracle(wrong)
  schema.validate(task)
