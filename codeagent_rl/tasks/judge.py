"""The judge: compares sandbox outputs with expected values, on the host.

Expected values and checker code never enter the sandbox: `solution_job`
builds a job from a task's test *inputs*, and `grade_result` compares what
came back (decoded tagged plain data, or captured stdout) with the task
here.
Because outputs are inert plain data (exact built-in types, rebuilt by
`wire.decode`), no object from the untrusted code can take part in a
comparison: an "always equal" object cannot even cross the boundary.

Comparison (`values_match`) follows the type of the *expected* value, at
every level of nesting:

- None, bool and str need the same type and an equal value (bool is not
  int).
- An int needs an int (not a bool, not a float), compared exactly. A task
  may relax this with `metadata["judge"]["int_accepts_float"] = true`
  (validated by `schema`): then a float that equals the int exactly also
  passes (Python's `==`, what HumanEval's asserts do).
- A float takes a float, or an int compared numerically, within
  `math.isclose(rel_tol, abs_tol)` of `JudgeConfig`; an int too large for
  a float is not close. NaN matches only NaN, an infinity only the same
  infinity.
- A list or tuple needs the same type and length and matches item by item.
- A set or frozenset needs the same type and size. Elements equal in type
  and value pair first; the rest (at most `FUZZY_PAIRS_MAX` of them) must
  pair one to one under these rules. A dict needs the same size; its items
  pair by keys equal in type and value first, the rest by key and value
  under these rules (again at most `FUZZY_PAIRS_MAX`), and the values of
  paired keys must match.
- Nothing else matches: a subclass of a built-in (which cannot cross the
  sandbox boundary) is not plain data.

Stdout compares after removing trailing whitespace on each line and
trailing blank lines.

The judge never raises on what untrusted code returned: reasons show
values through `plain_repr` (cut, huge ints as `<int of ~N digits>`) and
are cut to `REASON_MAX_CHARS`; an unexpected exception while judging fails
the test with the reason `judge could not compare: <exception type>`.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
import math
from typing import Any

from codeagent_rl import plain_repr
from codeagent_rl import status as status_lib
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import checkers
from codeagent_rl.tasks import schema

SUITE_NAMES = {
  "suite_a": "hidden_tests",
  "suite_b": "heldout_tests",
  "suite_gen": "generated_tests",
}
# Cap on a verdict's reason, in characters (reasons go to result files and,
# through checkers, to observations).
REASON_MAX_CHARS = 400
# Cap on one value shown inside a reason, in characters.
VALUE_MAX_CHARS = 80
# Most set elements (or dict keys) left without an exact partner that are
# paired under the comparison rules (a perfect matching: quadratic checks).
FUZZY_PAIRS_MAX = 16


@dataclasses.dataclass(frozen=True)
class JudgeConfig:
  """How the judge compares numbers.

  Attributes:
    rel_tol: relative tolerance where a float is expected (`math.isclose`).
    abs_tol: absolute tolerance where a float is expected.
    int_accepts_float: where an int is expected, a float exactly equal to
      it passes too. A task sets it in `metadata["judge"]`
      (`task_config`).
  """

  rel_tol: float = 1e-6
  abs_tol: float = 1e-9
  int_accepts_float: bool = False

  def __post_init__(self):
    for name in ("rel_tol", "abs_tol"):
      value = getattr(self, name)
      if not (isinstance(value, int | float) and 0 <= value < 1):
        raise ValueError(f"JudgeConfig.{name}={value!r}: must be in [0, 1).")
    if type(self.int_accepts_float) is not bool:
      raise ValueError(
        f"JudgeConfig.int_accepts_float={self.int_accepts_float!r}: must be"
        " a bool."
      )


def task_config(task: schema.Task, config: JudgeConfig) -> JudgeConfig:
  """`config` with the task's `metadata["judge"]` options applied over it."""
  options = task.metadata.get(schema.JUDGE_METADATA_KEY)
  return dataclasses.replace(config, **options) if options else config


def _show(value: Any) -> str:
  return plain_repr.plain_repr(value, VALUE_MAX_CHARS)


def _cut(reason: str) -> str:
  """`reason` within `REASON_MAX_CHARS`; the middle of a long path goes."""
  if len(reason) <= REASON_MAX_CHARS:
    return reason
  head = REASON_MAX_CHARS // 3
  tail = REASON_MAX_CHARS - head - 3
  return reason[:head] + "..." + reason[-tail:]


def _canonical(value: Any) -> str | None:
  """A string that identifies plain data with its types (None: not plain)."""
  try:
    return wire.dumps(wire.encode(value))
  except (wire.EncodeError, RecursionError):
    return None


def _differ(got: Any, want: Any) -> str:
  return f"{_show(got)} != {_show(want)}"


def _match_int(got: Any, want: int, config: JudgeConfig) -> str | None:
  if type(got) is int or (type(got) is float and config.int_accepts_float):
    # Python compares int and float exactly, without converting either.
    return None if got == want else _differ(got, want)
  return f"type {type(got).__name__} where int was expected"


def _match_float(got: Any, want: float, config: JudgeConfig) -> str | None:
  if type(got) is float:
    number = got
  elif type(got) is int:
    try:
      number = float(got)
    except OverflowError:
      return f"{_differ(got, want)} (int too large for a float)"
  else:
    return f"type {type(got).__name__} where float was expected"
  if math.isnan(number) or math.isnan(want):
    same = math.isnan(number) and math.isnan(want)
    return None if same else _differ(got, want)
  # isclose is exact for infinities: inf is close only to inf.
  if math.isclose(number, want, rel_tol=config.rel_tol, abs_tol=config.abs_tol):
    return None
  return f"{_differ(got, want)} (beyond tolerance)"


def _perfect_matching(ok: list[list[bool]]) -> list[int] | int:
  """Pairs every row of a square `ok` with its own column where it is True.

  Kuhn's augmenting paths (the matrix is at most `FUZZY_PAIRS_MAX` wide).

  Returns:
    The row of each column, or the first row that could not be paired.
  """
  owner = [-1] * len(ok)

  def augment(row: int, seen: list[bool]) -> bool:
    for col, good in enumerate(ok[row]):
      if good and not seen[col]:
        seen[col] = True
        if owner[col] < 0 or augment(owner[col], seen):
          owner[col] = row
          return True
    return False

  for row in range(len(ok)):
    if not augment(row, [False] * len(ok)):
      return row
  return owner


def _pair(
  got: list, want: list, fits: Callable[[int, int], bool]
) -> tuple[list[tuple[int, int]], str]:
  """Pairs the elements of two equally long collections (sets, dict keys).

  Elements equal in type and value pair first; the rest pair where
  `fits(index in got, index in want)`, one to one.

  Returns:
    ((index in got, index in want) pairs, ""), or ([], why not).
  """
  free: dict[str, list[int]] = {}
  for i, item in enumerate(got):
    key = _canonical(item)
    if key is None:
      return [], f"{type(item).__name__} is not plain data"
    free.setdefault(key, []).append(i)
  pairs, want_left = [], []
  for j, item in enumerate(want):
    slot = free.get(_canonical(item))
    if slot:
      pairs.append((slot.pop(), j))
    else:
      want_left.append(j)
  if not want_left:
    return pairs, ""
  if len(want_left) > FUZZY_PAIRS_MAX:
    return [], f"{len(want_left)} without an equal element"
  got_left = [i for slot in free.values() for i in slot]
  ok = [[fits(i, j) for i in got_left] for j in want_left]
  owner = _perfect_matching(ok)
  if isinstance(owner, int):
    return [], f"nothing matches {_show(want[want_left[owner]])}"
  fuzzy = [(i, want_left[row]) for i, row in zip(got_left, owner, strict=True)]
  return pairs + fuzzy, ""


def _match_set(got: Any, want: Any, config: JudgeConfig) -> str | None:
  if len(got) != len(want):
    return f"sets differ: size {len(got)} != {len(want)}"
  got, want = list(got), list(want)

  def fits(i: int, j: int) -> bool:
    return _match(got[i], want[j], config) is None

  _, why = _pair(got, want, fits)
  return f"sets differ: {why}" if why else None


def _match_dict(got: dict, want: dict, config: JudgeConfig) -> str | None:
  if len(got) != len(want):
    return f"dict keys differ: {len(got)} keys where {len(want)} expected"
  got_items, want_items = list(got.items()), list(want.items())

  def fits(i: int, j: int) -> bool:
    (g_key, g_value), (w_key, w_value) = got_items[i], want_items[j]
    return (
      _match(g_key, w_key, config) is None
      and _match(g_value, w_value, config) is None
    )

  pairs, why = _pair([k for k, _ in got_items], list(want), fits)
  if why:
    return f"dict keys differ: {why}"
  for i, j in sorted(pairs, key=lambda pair: pair[1]):
    why = _match(got_items[i][1], want_items[j][1], config)
    if why is not None:
      return f"[{plain_repr.plain_repr(want_items[j][0], 40)}]: {why}"
  return None


def _match(got: Any, want: Any, config: JudgeConfig) -> str | None:
  """Why `got` does not match `want` (None: it matches)."""
  kind = type(want)
  if kind is float:
    return _match_float(got, want, config)
  if kind is int:
    return _match_int(got, want, config)
  if type(got) is not kind:
    return f"type {type(got).__name__} where {kind.__name__} was expected"
  if want is None or kind is bool or kind is str:
    return None if got == want else _differ(got, want)
  if kind is list or kind is tuple:
    if len(got) != len(want):
      return f"length {len(got)} != {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
      why = _match(g, w, config)
      if why is not None:
        return f"[{i}]: {why}"
    return None
  if kind is set or kind is frozenset:
    return _match_set(got, want, config)
  if kind is dict:
    return _match_dict(got, want, config)
  return f"{kind.__name__} is not plain data"


def values_match(
  got: Any, want: Any, config: JudgeConfig = JudgeConfig()
) -> tuple[bool, str]:
  """Compares by the expected value's type (see the module docstring).

  Never raises: a value it cannot compare does not match.

  Args:
    got: the decoded output of the sandbox.
    want: the expected value from the task (plain data).
    config: float tolerance and the int/float relaxation.

  Returns:
    (match, why not) with an empty reason on a match; the reason is at
    most `REASON_MAX_CHARS` long.
  """
  try:
    why = _match(got, want, config)
  except Exception as e:  # noqa: BLE001 - the judge decides every value
    why = f"judge could not compare: {type(e).__name__}"
  return (True, "") if why is None else (False, _cut(why))


def normalize_stdout(text: str) -> str:
  """Drops trailing whitespace on every line and trailing blank lines."""
  lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
  while lines and not lines[-1]:
    lines.pop()
  return "\n".join(lines)


def run_checker(source: str, args: list, kwargs: dict, output: Any) -> bool:
  """Whether a trusted checker accepts `output` (exactly True).

  The checker runs in `checkers.default_runner()`'s child process, on
  copies, within its time and memory limits.

  Raises:
    CheckerFailed: the checker raised, returned a non-bool, timed out or
      ended its process (the caller fails the test).
  """
  outcome = checkers.default_runner().run(source, args, kwargs, output)
  if outcome.problem:
    raise CheckerFailed(outcome)
  return outcome.passed


class CheckerFailed(Exception):
  """A checker gave no verdict; `outcome` says why."""

  def __init__(self, outcome: checkers.Outcome):
    super().__init__(outcome.detail)
    self.outcome = outcome


@dataclasses.dataclass(frozen=True)
class Verdict:
  """The judge's decision on one test."""

  passed: bool
  reason: str = ""

  def to_json(self) -> dict:
    """JSON-safe dict."""
    return {"passed": self.passed, "reason": self.reason}


def _judge(
  kind: str, test: dict, run: jobs.TestRun, config: JudgeConfig
) -> Verdict:
  if run.status != "ok":
    return Verdict(False, f"{run.status}: {run.error}".rstrip(": "))
  if kind == jobs.STDIO or (kind == "repo" and "stdin" in test):
    got = normalize_stdout(run.stdout or "")
    want = normalize_stdout(test["expected_stdout"])
    return Verdict(True) if got == want else Verdict(False, "stdout differs")
  if "checker" in test:
    # A checker that raises, hangs or returns a non-bool fails the test.
    outcome = checkers.default_runner().run(
      test["checker"], test["args"], test.get("kwargs", {}), run.output
    )
    return Verdict(outcome.passed, outcome.reason)
  ok, why = values_match(run.output, test["expected"], config)
  return Verdict(ok, why)


def judge_test(
  kind: str, test: dict, run: jobs.TestRun, config: JudgeConfig
) -> Verdict:
  """Decides one test from the task's test and what the sandbox returned.

  Never raises: anything unexpected while judging fails the test.

  Args:
    kind: the task's kind ("function", "stdio", or "repo": a run of the
      entry point is judged as a stdio test, a call as a function test).
    test: the task's test (expected value, checker or expected stdout).
    run: what the sandbox reported for it.
    config: the judge's config; `task_config` applies a task's options.

  Returns:
    The verdict; its reason is at most `REASON_MAX_CHARS` long.
  """
  try:
    verdict = _judge(kind, test, run, config)
  except Exception as e:  # noqa: BLE001 - every test gets a verdict
    return Verdict(False, f"judge could not compare: {type(e).__name__}")
  return dataclasses.replace(verdict, reason=_cut(verdict.reason))


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


EMPTY_SUITE = SuiteScore(passed=0, total=0, verdicts=())


@dataclasses.dataclass(frozen=True)
class Grade:
  """A solution graded on suites A, B and the generated one (`suite_gen`).

  `suite_gen` is `EMPTY_SUITE` for a task without generated tests.
  """

  task_id: str
  status: status_lib.JobStatus
  suite_a: SuiteScore
  suite_b: SuiteScore
  result: jobs.JobResult
  suite_gen: SuiteScore = EMPTY_SUITE

  def to_json(self) -> dict:
    """JSON-safe dict; `status` is the lowercase `JobStatus` name."""
    return {
      "task_id": self.task_id,
      "status": jobs.status_name(self.status),
      "suite_a": self.suite_a.to_json(),
      "suite_b": self.suite_b.to_json(),
      "suite_gen": self.suite_gen.to_json(),
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

  Raises:
    ValueError: for a repo task (`repo_judge` runs its tests on a
      workspace, not on a program).
  """
  if task.kind == "repo":
    raise ValueError(
      f"task {task.task_id!r} is a repo task: its tests run on a workspace"
      " (codeagent_rl.tasks.repo_judge), not on one program."
    )
  if task.kind == jobs.FUNCTION:
    inputs = [(t["args"], t.get("kwargs", {})) for t in tests]
    return jobs.Job.function(
      code, task.entry_point, inputs, timeout_s=timeout_s
    )
  stdins = [t["stdin"] for t in tests]
  return jobs.Job.program(code, stdins, timeout_s=timeout_s)


def graded_tests(task: schema.Task) -> list[dict]:
  """Suite A's tests, then suite B's, then the generated ones: job order."""
  return [*task.hidden_tests, *task.heldout_tests, *task.generated_tests]


def solution_job(
  task: schema.Task, code: str, timeout_s: float | None = None
) -> jobs.Job:
  """The job that runs `code` on suite A's inputs, then B's, then generated.

  Only inputs go in: `expected`, `expected_stdout` and `checker` stay here.
  """
  tests = graded_tests(task)
  return tests_job(task, tests, code, timeout_s)


def grade_result(
  task: schema.Task,
  result: jobs.JobResult,
  config: JudgeConfig = JudgeConfig(),
) -> Grade:
  """Judges a `solution_job` result against the task's expected values.

  Args:
    task: the task; its `metadata["judge"]` options apply over `config`.
    result: what the sandbox returned for `solution_job(task, ...)`.
    config: the judge's config.

  Returns:
    The `Grade` (every test judged; judging never raises).

  Raises:
    ValueError: when `result` does not have one test run per test.
  """
  tests = graded_tests(task)
  if len(result.tests) != len(tests):
    raise ValueError(
      f"result has {len(result.tests)} tests, task {task.task_id!r} has"
      f" {len(tests)}."
    )
  config = task_config(task, config)
  verdicts = [
    judge_test(task.kind, test, run, config)
    for test, run in zip(tests, result.tests, strict=True)
  ]
  n_a, n_b = len(task.hidden_tests), len(task.heldout_tests)
  suites = []
  parts = (verdicts[:n_a], verdicts[n_a : n_a + n_b], verdicts[n_a + n_b :])
  for part in parts:
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
    suite_gen=suites[2],
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
    config: the judge's config (the task's options apply over it).
    timeout_s: job-level limit (None: the pool's).

  Returns:
    The `Grade`.
  """
  result = pool.run(solution_job(task, code, timeout_s))
  return grade_result(task, result, config)
