"""The judge: compares sandbox outputs with expected values, on the host.

Expected values and checker code never enter the sandbox: `solution_job`
builds a job from a task's test *inputs*, and `grade_result` compares what
came back (decoded tagged plain data, or captured stdout) with the task
here.
Because outputs are inert plain data (exact built-in types, rebuilt by
`wire.decode`), no object from the untrusted code can take part in a
comparison: an "always equal" object cannot even cross the boundary.

Comparison (`values_match`) is type-aware: bool is not int, tuple is not
list, set is not frozenset, str is not bytes. Numbers compare with a
tolerance when either side is a float (NaN equals NaN; infinities must
match exactly). Stdout compares after removing trailing whitespace on each
line and trailing blank lines.
"""

from __future__ import annotations

from collections.abc import Sequence
import copy
import dataclasses
import math
from typing import Any

from codeagent_rl import status as status_lib
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import schema

SUITE_NAMES = {"suite_a": "hidden_tests", "suite_b": "heldout_tests"}


@dataclasses.dataclass(frozen=True)
class JudgeConfig:
  """Float tolerance of the judge: `math.isclose(rel_tol, abs_tol)`."""

  rel_tol: float = 1e-6
  abs_tol: float = 1e-9

  def __post_init__(self):
    for name in ("rel_tol", "abs_tol"):
      value = getattr(self, name)
      if not (isinstance(value, int | float) and 0 <= value < 1):
        raise ValueError(f"JudgeConfig.{name}={value!r}: must be in [0, 1).")


def _is_number(value: Any) -> bool:
  return type(value) is int or type(value) is float


def _canonical(value: Any) -> str:
  """A string that identifies a plain value with its types (for sets)."""
  return wire.dumps(wire.encode(value))


def values_match(
  got: Any, want: Any, config: JudgeConfig = JudgeConfig()
) -> tuple[bool, str]:
  """Type-aware equality of plain data.

  Args:
    got: the decoded output of the sandbox.
    want: the expected value from the task.
    config: float tolerance.

  Returns:
    (match, why not) with an empty reason on a match.
  """
  if _is_number(got) and _is_number(want):
    if type(got) is int and type(want) is int:
      return (got == want, "" if got == want else f"{got!r} != {want!r}")
    if math.isnan(got) or math.isnan(want):
      same = math.isnan(got) and math.isnan(want)
      return same, "" if same else f"{got!r} != {want!r}"
    close = math.isclose(
      got, want, rel_tol=config.rel_tol, abs_tol=config.abs_tol
    )
    return close, "" if close else f"{got!r} != {want!r} (beyond tolerance)"
  if type(got) is not type(want):
    return False, (
      f"type {type(got).__name__} where {type(want).__name__} was expected"
    )
  if got is None or type(got) in (bool, str):
    return got == want, "" if got == want else f"{got!r:.80} != {want!r:.80}"
  if type(got) in (list, tuple):
    if len(got) != len(want):
      return False, f"length {len(got)} != {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
      ok, why = values_match(g, w, config)
      if not ok:
        return False, f"[{i}]: {why}"
    return True, ""
  if type(got) in (set, frozenset):
    same = {_canonical(v) for v in got} == {_canonical(v) for v in want}
    return same, "" if same else "sets differ"
  if type(got) is dict:
    got_keys = {_canonical(k): k for k in got}
    want_keys = {_canonical(k): k for k in want}
    if got_keys.keys() != want_keys.keys():
      return False, "dict keys differ"
    for key, w_key in want_keys.items():
      ok, why = values_match(got[got_keys[key]], want[w_key], config)
      if not ok:
        return False, f"[{w_key!r:.40}]: {why}"
    return True, ""
  return False, f"{type(got).__name__} is not plain data"


def normalize_stdout(text: str) -> str:
  """Drops trailing whitespace on every line and trailing blank lines."""
  lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
  while lines and not lines[-1]:
    lines.pop()
  return "\n".join(lines)


def run_checker(source: str, args: list, kwargs: dict, output: Any) -> bool:
  """Runs a trusted checker on the host over returned data only.

  The checker source defines `check(args, kwargs, output)`; it gets copies,
  and passes the test only by returning exactly True.

  Raises:
    Exception: whatever the checker raises (the caller fails the test).
  """
  namespace: dict[str, Any] = {"__name__": "checker"}
  exec(compile(source, "<checker>", "exec"), namespace)  # trusted task code
  verdict = namespace["check"](
    copy.deepcopy(args), copy.deepcopy(kwargs), copy.deepcopy(output)
  )
  return verdict is True


@dataclasses.dataclass(frozen=True)
class Verdict:
  """The judge's decision on one test."""

  passed: bool
  reason: str = ""

  def to_json(self) -> dict:
    """JSON-safe dict."""
    return {"passed": self.passed, "reason": self.reason}


def judge_test(
  kind: str, test: dict, run: jobs.TestRun, config: JudgeConfig
) -> Verdict:
  """Decides one test from the task's test and what the sandbox returned."""
  if run.status != "ok":
    return Verdict(False, f"{run.status}: {run.error}".rstrip(": "))
  if kind == jobs.STDIO:
    got = normalize_stdout(run.stdout or "")
    want = normalize_stdout(test["expected_stdout"])
    return Verdict(True) if got == want else Verdict(False, "stdout differs")
  if "checker" in test:
    try:
      ok = run_checker(
        test["checker"], test["args"], test.get("kwargs", {}), run.output
      )
    except Exception as e:  # a checker that raises fails the test
      return Verdict(False, f"checker raised {type(e).__name__}: {e}")
    return Verdict(ok, "" if ok else "checker returned a non-True value")
  ok, why = values_match(run.output, test["expected"], config)
  return Verdict(ok, why)


@dataclasses.dataclass(frozen=True)
class SuiteScore:
  """Passed / total of one suite, with a verdict per test."""

  passed: int
  total: int
  verdicts: tuple[Verdict, ...]

  @property
  def fraction(self) -> float:
    """Pass fraction (0 for an empty suite)."""
    return self.passed / self.total if self.total else 0.0

  def to_json(self) -> dict:
    """JSON-safe dict."""
    return {
      "passed": self.passed,
      "total": self.total,
      "verdicts": [v.to_json() for v in self.verdicts],
    }


@dataclasses.dataclass(frozen=True)
class Grade:
  """A solution graded on suite A (hidden) and suite B (held out)."""

  task_id: str
  status: status_lib.JobStatus
  suite_a: SuiteScore
  suite_b: SuiteScore
  result: jobs.JobResult

  def to_json(self) -> dict:
    """JSON-safe dict; `status` is the lowercase `JobStatus` name."""
    return {
      "task_id": self.task_id,
      "status": jobs.status_name(self.status),
      "suite_a": self.suite_a.to_json(),
      "suite_b": self.suite_b.to_json(),
      "reason": self.result.reason,
      "duration_s": self.result.duration_s,
      "stderr": self.result.stderr,
    }


def tests_job(
  task: schema.Task,
  tests: Sequence[dict],
  code: str,
  timeout_s: float | None = None,
) -> jobs.Job:
  """The job that runs `code` on the inputs of `tests` (tests of `task`).

  Only inputs go in: `expected`, `expected_stdout` and `checker` stay here.
  """
  if task.kind == jobs.FUNCTION:
    inputs = [(t["args"], t.get("kwargs", {})) for t in tests]
    return jobs.Job.function(
      code, task.entry_point, inputs, timeout_s=timeout_s
    )
  stdins = [t["stdin"] for t in tests]
  return jobs.Job.program(code, stdins, timeout_s=timeout_s)


def solution_job(
  task: schema.Task, code: str, timeout_s: float | None = None
) -> jobs.Job:
  """The job that runs `code` on the inputs of suite A, then suite B.

  Only inputs go in: `expected`, `expected_stdout` and `checker` stay here.
  """
  tests = [*task.hidden_tests, *task.heldout_tests]
  return tests_job(task, tests, code, timeout_s)


def grade_result(
  task: schema.Task,
  result: jobs.JobResult,
  config: JudgeConfig = JudgeConfig(),
) -> Grade:
  """Judges a `solution_job` result against the task's expected values."""
  tests = [*task.hidden_tests, *task.heldout_tests]
  if len(result.tests) != len(tests):
    raise ValueError(
      f"result has {len(result.tests)} tests, task {task.task_id!r} has"
      f" {len(tests)}."
    )
  verdicts = [
    judge_test(task.kind, test, run, config)
    for test, run in zip(tests, result.tests, strict=True)
  ]
  n_a = len(task.hidden_tests)
  suites = []
  for part in (verdicts[:n_a], verdicts[n_a:]):
    suites.append(
      SuiteScore(
        passed=sum(v.passed for v in part),
        total=len(part),
        verdicts=tuple(part),
      )
    )
  return Grade(
    task_id=task.task_id,
    status=result.status,
    suite_a=suites[0],
    suite_b=suites[1],
    result=result,
  )


def grade(
  pool,
  task: schema.Task,
  code: str,
  config: JudgeConfig = JudgeConfig(),
  timeout_s: float | None = None,
) -> Grade:
  """Runs `code` on the task's suites in `pool` and judges it here.

  Args:
    pool: anything with `run(job) -> JobResult` (a `SandboxPool`).
    task: the task (its expected values stay in this process).
    code: the solution.
    config: float tolerance.
    timeout_s: job-level limit (None: the pool's).

  Returns:
    The `Grade`.
  """
  result = pool.run(solution_job(task, code, timeout_s))
  return grade_result(task, result, config)
