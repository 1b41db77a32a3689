"""The host-side judge: type-aware comparison, stdout, checkers, grading."""

import dataclasses
import math

import pytest

from codeagent_rl import types
from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema

TOL = judge.JudgeConfig(rel_tol=1e-6, abs_tol=1e-9)


@pytest.mark.parametrize(
  "got,want",
  [
    (1, 1),
    (1, 1.0),  # an int where a float is expected compares numerically
    (10**20, 1e20),
    (-(2**60), -1.152921504606847e18),
    (0.1 + 0.2, 0.3),
    (-0.0, 0.0),
    (math.nan, math.nan),
    (math.inf, math.inf),
    (-math.inf, -math.inf),
    ([(1, 2.5000000001)], [(1, 2.5)]),
    ({0.1 + 0.2, 1}, {0.3, 1}),  # float tolerance inside sets too
    ({-0.0}, {0.0}),
    ({math.nan, 2.0}, {math.nan, 2.0}),
    ({0.1 + 0.2: "a"}, {0.3: "a"}),
    ({1: 2.0000000001, "k": [3]}, {"k": [3], 1: 2.0}),
    ([1, (2, {3})], [1, (2, {3})]),
    ({"a": [1.0000000001]}, {"a": [1.0]}),
    ({(1, 2): None}, {(1, 2): None}),
    (frozenset({1, "a"}), frozenset({"a", 1})),
    ("x", "x"),
    (None, None),
    (True, True),
  ],
)
def test_values_match(got, want):
  assert judge.values_match(got, want, TOL) == (True, "")


@pytest.mark.parametrize(
  "got,want,why",
  [
    (True, 1, "type bool where int"),
    (1, True, "type int where bool"),
    ([1, 2], (1, 2), "type list where tuple"),
    ({1, 2}, frozenset({1, 2}), "type set where frozenset"),
    ({1, 2}, [1, 2], "type set where list"),
    ({True}, {1}, "sets differ"),
    ({1.0}, {1}, "sets differ"),
    (1.001, 1.0, "beyond tolerance"),
    (math.inf, -math.inf, "beyond tolerance"),
    (1e308, math.inf, "beyond tolerance"),
    (math.inf, 1e308, "beyond tolerance"),
    (math.nan, 0.0, "nan"),
    (0.0, math.nan, "nan"),
    (math.inf, math.nan, "inf != nan"),
    (1, math.nan, "1 != nan"),
    # An int expected needs an int: floats fail however close they are.
    (1.0, 1, "type float where int was expected"),
    (5050.0, 5050, "type float where int was expected"),
    (5000.0, 5050, "type float where int was expected"),
    (True, 1.0, "type bool where float was expected"),
    ([1, 2.0], [1, 2], "[1]: type float where int was expected"),
    ((3.0,), (3,), "[0]: type float where int was expected"),
    ({"a": 2.0}, {"a": 2}, "['a']: type float where int was expected"),
    ({1.0: "a"}, {1: "a"}, "dict keys differ"),
    ({0.5: 1}, {0.5: 2}, "[0.5]: 1 != 2"),
    ({1.5, 2.5}, {1.5, 2.75}, "sets differ: nothing matches 2.75"),
    ({1, 2}, {1, 2, 3}, "sets differ: size 2 != 3"),
    # Too large for a float: not close, and no OverflowError.
    (10**400, 1.5, "(int too large for a float)"),
    (-(10**400), -math.inf, "(int too large for a float)"),
    pytest.param(10**5000, 7, "<int of ~5001 digits> != 7", id="int5001"),
    ("1", 1, "type str where int"),
    ([1, 2], [1, 2, 3], "length 2 != 3"),
    ([1, [2, 3]], [1, [2, 4]], "[1]: [1]: 3 != 4"),
    ({"a": 1}, {"b": 1}, "dict keys differ"),
    ({"a": 1}, {"a": 2}, "['a']: 1 != 2"),
    (None, 0, "type NoneType where int"),
  ],
)
def test_values_differ(got, want, why):
  ok, reason = judge.values_match(got, want, TOL)
  assert not ok
  assert why in reason


def test_tri_with_true_division_fails():
  # n * n / 2 is off by n / 2, far inside 1e-6 relative tolerance for a
  # large n; `//` vs `/` is exactly what an int expected must catch.
  n = 10**9
  want = n * (n + 1) // 2
  assert math.isclose(n * (n + 1) / 2 + n / 2 - n / 2, want, rel_tol=1e-6)
  assert not judge.values_match(n * n / 2, want, TOL)[0]
  assert not judge.values_match(n * (n + 1) / 2, want, TOL)[0]
  assert judge.values_match(want, want, TOL)[0]


RELAXED = judge.JudgeConfig(int_accepts_float=True)


@pytest.mark.parametrize(
  "got,want",
  [
    (3.0, 3),
    (-0.0, 0),
    (float(2**60), 2**60),
    ([1.0, 2], [1, 2]),
    ({"a": (4.0,)}, {"a": (4,)}),
    ({1.0, 2}, {1, 2}),
    ({1.0: "a"}, {1: "a"}),
    (2.5, 2.5),
  ],
)
def test_int_accepts_float_matches_exactly_equal_floats(got, want):
  assert judge.values_match(got, want, RELAXED) == (True, "")


@pytest.mark.parametrize(
  "got,want,why",
  [
    (3.5, 3, "3.5 != 3"),
    (3.0000000001, 3, "3.0000000001 != 3"),  # exact, no tolerance
    (float(2**53), 2**53 + 1, "!="),
    (math.inf, 10**400, "inf != 100000"),
    (math.nan, 1, "nan != 1"),
    (True, 1, "type bool where int was expected"),
    ("3", 3, "type str where int was expected"),
  ],
)
def test_int_accepts_float_is_exact(got, want, why):
  ok, reason = judge.values_match(got, want, RELAXED)
  assert not ok
  assert why in reason


def test_tolerance_is_configurable():
  loose = judge.JudgeConfig(rel_tol=1e-2, abs_tol=0.0)
  assert judge.values_match(1.001, 1.0, loose)[0]
  assert not judge.values_match(1.001, 1.0, TOL)[0]
  with pytest.raises(ValueError, match="JudgeConfig.rel_tol=-1"):
    judge.JudgeConfig(rel_tol=-1)
  with pytest.raises(ValueError, match="int_accepts_float=1: must be a bool"):
    judge.JudgeConfig(int_accepts_float=1)


def test_judge_options_are_config_fields():
  fields = {f.name: f.type for f in dataclasses.fields(judge.JudgeConfig)}
  for name, kind in schema.JUDGE_OPTIONS.items():
    assert fields[name] == kind.__name__


def test_task_config_applies_the_tasks_options():
  task = _task(metadata={"judge": {"int_accepts_float": True}})
  assert judge.task_config(task, TOL) == judge.JudgeConfig(
    rel_tol=1e-6, abs_tol=1e-9, int_accepts_float=True
  )
  assert judge.task_config(_task(), RELAXED) is RELAXED
  off = _task(metadata={"judge": {"int_accepts_float": False}})
  assert not judge.task_config(off, RELAXED).int_accepts_float


def test_objects_from_untrusted_code_never_compare():
  class Anything:
    def __eq__(self, other):
      return True

  # The judge only ever sees decoded plain data; anything else is refused.
  assert not judge.values_match(Anything(), 1, TOL)[0]
  assert not judge.values_match([Anything()], [1], TOL)[0]


@pytest.mark.parametrize(
  "got,want",
  [
    ("1 2\n3\n", "1 2\n3"),
    ("1 2   \n3\t\n\n\n", "1 2\n3\n"),
    ("a\r\nb\r\n", "a\nb"),
  ],
)
def test_stdout_normalisation(got, want):
  assert judge.normalize_stdout(got) == judge.normalize_stdout(want)


def test_stdout_normalisation_keeps_leading_and_inner_space():
  assert judge.normalize_stdout(" a\n") != judge.normalize_stdout("a\n")
  assert judge.normalize_stdout("a\n\nb") != judge.normalize_stdout("a\nb")


def _task(kind="function", **changes):
  if kind == "function":
    hidden = (
      {"args": [2, 3], "expected": 5},
      {"args": [1.5, 1.5], "kwargs": {}, "expected": 3.0},
      {
        "args": [10, 5],
        "checker": "def check(args, kwargs, output):\n"
        "  return output == sum(args)\n",
      },
    )
    heldout = ({"args": [0, 0], "expected": 0},)
    fields = dict(entry_point="add", hidden_tests=hidden, heldout_tests=heldout)
  else:
    fields = dict(
      entry_point=None,
      hidden_tests=({"stdin": "1 2\n", "expected_stdout": "3\n"},),
      heldout_tests=({"stdin": "5 5\n", "expected_stdout": "10\n"},),
    )
  fields = dict(metadata={}, **fields)
  fields.update(changes)
  return schema.Task(
    task_id="t",
    prompt="p",
    kind=kind,
    visible_tests=(),
    reference_solution="",
    **fields,
  )


def _result(runs, status=types.JobStatus.OK):
  return jobs.JobResult(status=status, tests=tuple(runs))


def test_grade_function_task():
  task = _task()
  runs = [
    jobs.TestRun("ok", output=5),
    jobs.TestRun("ok", output=3.0000000001),
    jobs.TestRun("ok", output=15),
    jobs.TestRun("error", error="ZeroDivisionError"),
  ]
  grade = judge.grade_result(task, _result(runs), TOL)
  assert (grade.suite_a.passed, grade.suite_a.total) == (3, 3)
  assert (grade.suite_b.passed, grade.suite_b.total) == (0, 1)
  assert grade.suite_b.verdicts[0].reason == "error: ZeroDivisionError"
  assert grade.to_json()["status"] == "ok"


def test_checker_failures_fail_the_test():
  task = _task(
    hidden_tests=(
      {"args": [1], "checker": "def check(args, kwargs, output):\n  1 / 0\n"},
      {
        "args": [1],
        "checker": "def check(args, kwargs, output):\n  return 1\n",
      },
      {
        "args": [[1]],
        "checker": "def check(args, kwargs, output):\n"
        "  args[0].append(2)\n  return True\n",
      },
    ),
    heldout_tests=(),
  )
  runs = [jobs.TestRun("ok", output=1)] * 3
  grade = judge.grade_result(task, _result(runs), TOL)
  verdicts = grade.suite_a.verdicts
  assert not verdicts[0].passed and "ZeroDivisionError" in verdicts[0].reason
  assert not verdicts[1].passed  # 1 is truthy but not True
  assert verdicts[2].passed
  assert task.hidden_tests[2]["args"] == [[1]]  # the checker got a copy


def test_grade_stdio_task():
  task = _task("stdio")
  runs = [
    jobs.TestRun("ok", stdout="3  \n\n", exit_code=0),
    jobs.TestRun("ok", stdout="11\n", exit_code=0),
  ]
  grade = judge.grade_result(task, _result(runs), TOL)
  assert (grade.suite_a.passed, grade.suite_b.passed) == (1, 0)
  assert grade.suite_b.verdicts[0].reason == "stdout differs"


def test_grade_applies_the_tasks_int_accepts_float():
  runs = [
    jobs.TestRun("ok", output=5.0),
    jobs.TestRun("ok", output=3),  # an int where 3.0 is expected
    jobs.TestRun("ok", output=15.0),  # the checker sees the float itself
    jobs.TestRun("ok", output=0.0),
  ]
  strict = judge.grade_result(_task(), _result(runs), TOL)
  assert [v.passed for v in strict.suite_a.verdicts] == [False, True, True]
  assert strict.suite_a.verdicts[0].reason == (
    "type float where int was expected"
  )
  assert not strict.suite_b.verdicts[0].passed
  relaxed = judge.grade_result(
    _task(metadata={"judge": {"int_accepts_float": True}}), _result(runs), TOL
  )
  assert (relaxed.suite_a.passed, relaxed.suite_b.passed) == (3, 1)
  runs[0] = jobs.TestRun("ok", output=5.5)
  relaxed = judge.grade_result(
    _task(metadata={"judge": {"int_accepts_float": True}}), _result(runs), TOL
  )
  assert relaxed.suite_a.verdicts[0].reason == "5.5 != 5"


def test_checker_exception_reasons_are_bounded():
  raises = (
    "def check(args, kwargs, output):\n  raise AssertionError(output)\n",
    "def check(args, kwargs, output):\n"
    "  raise AssertionError(f'got {output!r}' if output < 10**4000 else 1)\n",
    "def check(args, kwargs, output):\n  raise KeyError(output)\n",
    "def check(args, kwargs, output):\n  raise ValueError(output, output)\n",
    "def check(args, kwargs, output):\n  raise ValueError('x' * 10**6)\n",
  )
  task = _task(
    hidden_tests=tuple({"args": [1], "checker": c} for c in raises),
    heldout_tests=(),
  )
  runs = [jobs.TestRun("ok", output=10**5000)] * len(raises)
  verdicts = judge.grade_result(task, _result(runs), TOL).suite_a.verdicts
  reasons = [v.reason for v in verdicts]
  assert not any(v.passed for v in verdicts)
  assert all(len(r) <= judge.REASON_MAX_CHARS for r in reasons), reasons
  assert reasons[0] == "checker raised AssertionError: <int of ~5001 digits>"
  assert reasons[1] == "checker raised AssertionError: 1"
  assert reasons[2] == "checker raised KeyError: <message not printable>"
  assert reasons[3] == (
    "checker raised ValueError: (<int of ~5001 digits>, <int of ~5001 digits>)"
  )
  assert reasons[4].startswith("checker raised ValueError: xxx")


def test_grade_rejects_mismatched_result():
  with pytest.raises(ValueError, match="has 1 tests"):
    judge.grade_result(_task(), _result([jobs.TestRun("ok", output=1)]))


def test_solution_job_carries_inputs_only():
  secret = 987654321987654321
  task = _task(
    hidden_tests=(
      {"args": [1, 2], "kwargs": {"z": (3,)}, "expected": secret},
      {
        "args": [4, 5],
        "checker": f"def check(args, kwargs, output):\n  return {secret}",
      },
    ),
    heldout_tests=({"args": [0, 0], "expected": secret + 1},),
  )
  job = judge.solution_job(task, "def add(a, b, z=()):\n  return a + b\n")
  frame = job.to_frame(7, config_lib.SandboxConfig())
  text = wire.dumps(frame)
  assert str(secret)[:10] not in text
  assert "check" not in text and "expected" not in text
  assert [t["args"] for t in frame["tests"]] == [[1, 2], [4, 5], [0, 0]]
  assert frame["tests"][0]["kwargs"] == {"z": {"$tuple": [3]}}


def test_stdio_job_carries_stdin_only():
  task = _task("stdio")
  frame = judge.solution_job(task, "print(1)").to_frame(
    1, config_lib.SandboxConfig()
  )
  assert frame["tests"] == [{"stdin": "1 2\n"}, {"stdin": "5 5\n"}]
  assert "expected" not in wire.dumps(frame)
