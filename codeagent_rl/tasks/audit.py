r"""Finds the tasks of a file that cannot be trusted, before anything trains.

    python -m codeagent_rl.tasks.audit --tasks=TASKS.jsonl \
        [--backend=gvisor|process] [--json=REPORT.json]

A task file is the user's input, and a bad task does not announce itself:
a checker that raises on every output fails every policy, so the task
reads as "hard"; a reference that disagrees with an expected value means
that test rewards wrong code; a checker that hangs would stall the judge.
`audit` runs every task's reference solution on all its tests (visible,
suite A, suite B, generated) in the sandbox and judges the outputs as
training will (`judge`, checkers through `checkers.CheckerRunner`), and
loads every checker on its own. Each problem names the task, the field and
what was found (`Problem.KINDS`):

- `checker_broken`: a checker's module raises, hangs or defines no
  `check` (found whether or not the task has a reference);
- `checker_raises`, `checker_hangs`, `checker_not_bool`: on the
  reference's output, the checker raised, ran past its time limit (or
  ended its process), or returned something other than True or False;
- `reference_fails`: the reference's output fails a test (a wrong expected
  value, a checker that rejects it, or the reference raising or timing out
  on that input);
- `reference_error`: the reference's job as a whole failed (a syntax
  error, the job's time limit).

Tasks without a reference (LiveCodeBench ships none) and interactive probe
tasks (their reference asks the host, which a batch job does not answer)
are counted as unverified; only their checkers are loaded.

What to do with the bad tasks is the caller's choice (`apply`): "error"
stops with every problem listed, "skip" drops them with a warning and
counts them. The trainer audits the task files it is given
(`config.data.bad_tasks`, `train/task_audit.py`); the CLI prints the report
and exits 1 when a task has a problem.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from collections.abc import Sequence
import concurrent.futures
import dataclasses
import json
import sys
from typing import Any

from absl import app
from absl import flags

from codeagent_rl import status as status_lib
from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import pools
from codeagent_rl.tasks import checkers
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import probes
from codeagent_rl.tasks import schema

# What `apply` does with tasks that have a problem: stop, or drop them.
MODES = ("error", "skip")
# Problems shown in an error message or a warning before "and N more".
SHOWN = 5
# The suites a reference runs on, in job order.
_SUITES = ("visible_tests", *schema.SUITES[1:])
_CHECKER_PROBLEMS = {
  "raised": "checker_raises",
  "timed_out": "checker_hangs",
  "died": "checker_hangs",
  "returned": "checker_not_bool",
  "unencodable": "checker_raises",
}


@dataclasses.dataclass(frozen=True)
class Problem:
  """One thing wrong with one task.

  Attributes:
    task_id: the task.
    field: where, e.g. "hidden_tests[3].checker" or "reference_solution".
    kind: one of `KINDS`.
    detail: what was found, one line.
  """

  KINDS = (
    "checker_broken",
    "checker_raises",
    "checker_hangs",
    "checker_not_bool",
    "reference_fails",
    "reference_error",
  )

  task_id: str
  field: str
  kind: str
  detail: str

  def line(self) -> str:
    """The problem for a person: task, field, what was found."""
    return f"task {self.task_id!r} {self.field}: {self.detail}"

  def to_json(self) -> dict:
    """JSON-safe dict."""
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Report:
  """What `audit` found.

  Attributes:
    tasks: tasks audited.
    verified: tasks whose reference ran on their tests.
    problems: every problem, in task order.
  """

  tasks: int
  verified: int
  problems: tuple[Problem, ...]

  @property
  def bad(self) -> list[str]:
    """Ids of the tasks with a problem, in task order, once each."""
    return list(dict.fromkeys(p.task_id for p in self.problems))

  def counts(self) -> dict[str, int]:
    """Problem kind -> tasks with a problem of that kind."""
    seen = {(p.kind, p.task_id) for p in self.problems}
    counter = collections.Counter(kind for kind, _ in seen)
    return {k: counter[k] for k in Problem.KINDS if counter[k]}

  def summary(self) -> str:
    """One line: tasks, verified, bad by kind."""
    counts = ", ".join(f"{k} {n}" for k, n in self.counts().items())
    return (
      f"{self.tasks} tasks, {self.verified} references run,"
      f" {len(self.bad)} with a problem" + (f" ({counts})" if counts else "")
    )

  def lines(self, limit: int | None = SHOWN) -> list[str]:
    """One line per problem, the first `limit` of them (None: all)."""
    shown = self.problems if limit is None else self.problems[:limit]
    out = [p.line() for p in shown]
    if len(shown) < len(self.problems):
      out.append(f"... and {len(self.problems) - len(shown)} more")
    return out

  def to_json(self) -> dict:
    """JSON-safe dict."""
    return {
      "tasks": self.tasks,
      "verified": self.verified,
      "bad": self.bad,
      "counts": self.counts(),
      "problems": [p.to_json() for p in self.problems],
    }

  @classmethod
  def from_json(cls, data: dict) -> Report:
    """The report `to_json` wrote."""
    return cls(
      tasks=data["tasks"],
      verified=data["verified"],
      problems=tuple(Problem(**p) for p in data["problems"]),
    )


class BadTasksError(ValueError):
  """Tasks with problems in "error" mode; the message lists them."""


def _checker_tests(task: schema.Task):
  for suite in _SUITES:
    for i, test in enumerate(getattr(task, suite)):
      if "checker" in test:
        yield f"{suite}[{i}]", test


def _load_checkers(
  task: schema.Task, runner: checkers.CheckerRunner
) -> list[Problem]:
  problems, loaded = [], {}
  for where, test in _checker_tests(task):
    source = test["checker"]
    if source not in loaded:
      loaded[source] = runner.load(source)
    outcome = loaded[source]
    if outcome.problem:
      problems.append(
        Problem(
          task.task_id, f"{where}.checker", "checker_broken", outcome.detail
        )
      )
  return problems


def _verifiable(task: schema.Task) -> bool:
  return bool(task.reference_solution.strip()) and probes.spec_of(task) is None


def _judge_reference(
  task: schema.Task,
  result: jobs.JobResult,
  tests: list[tuple[str, dict]],
  runner: checkers.CheckerRunner,
  broken: set[str],
) -> list[Problem]:
  config = judge.task_config(task, judge.JudgeConfig())
  errors = {run.error for run in result.tests if run.status == "error"}
  if len(errors) == 1 and all(run.status == "error" for run in result.tests):
    # One cause for every test (a syntax error, a missing entry point).
    return [
      Problem(
        task.task_id,
        "reference_solution",
        "reference_error",
        f"the reference fails every test: {errors.pop()}",
      )
    ]
  problems = []
  for (where, test), run in zip(tests, result.tests, strict=True):
    if run.status != "ok":
      detail = f"{run.status}: {run.error}".rstrip(": ")
      problems.append(
        Problem(
          task.task_id,
          where,
          "reference_fails",
          f"the reference's run ended with {detail}",
        )
      )
      continue
    if "checker" not in test:
      verdict = judge.judge_test(task.kind, test, run, config)
      if not verdict.passed:
        problems.append(
          Problem(
            task.task_id,
            where,
            "reference_fails",
            f"the reference fails it: {verdict.reason}",
          )
        )
      continue
    if f"{where}.checker" in broken:
      continue  # reported as checker_broken already
    outcome = runner.run(
      test["checker"], test["args"], test.get("kwargs", {}), run.output
    )
    if outcome.problem:
      kind = _CHECKER_PROBLEMS[outcome.problem]
      problems.append(
        Problem(
          task.task_id,
          f"{where}.checker",
          kind,
          f"on the reference's output, {outcome.detail}",
        )
      )
    elif not outcome.passed:
      problems.append(
        Problem(
          task.task_id,
          f"{where}.checker",
          "reference_fails",
          "the checker rejects the reference's output",
        )
      )
  return problems


def audit_task(
  pool: Any, task: schema.Task, runner: checkers.CheckerRunner
) -> tuple[bool, list[Problem]]:
  """(whether the reference ran, the task's problems)."""
  problems = _load_checkers(task, runner)
  if not _verifiable(task):
    return False, problems
  broken = {p.field for p in problems}
  tests = [
    (f"{suite}[{i}]", test)
    for suite in _SUITES
    for i, test in enumerate(getattr(task, suite))
  ]
  if not tests:
    return False, problems
  result = pool.run(
    judge.tests_job(task, [t for _, t in tests], task.reference_solution)
  )
  if result.status != status_lib.JobStatus.OK or len(result.tests) != len(
    tests
  ):
    status = jobs.status_name(result.status)
    why = (result.reason or result.stderr or "").strip().splitlines()
    detail = f"the reference's job ended with {status}" + (
      f": {why[-1][:200]}" if why else ""
    )
    problems.append(
      Problem(task.task_id, "reference_solution", "reference_error", detail)
    )
    return True, problems
  problems += _judge_reference(task, result, tests, runner, broken)
  return True, problems


def audit(
  pool: Any,
  tasks: Sequence[schema.Task],
  runner: checkers.CheckerRunner | None = None,
  progress: Callable[[int, int], None] | None = None,
) -> Report:
  """Audits `tasks` (references run concurrently in `pool`).

  Args:
    pool: a `SandboxPool` (anything with `run` and `parallelism`).
    tasks: the tasks.
    runner: runs the checkers (default: the judge's own).
    progress: called as progress(done, total) as tasks finish.

  Returns:
    The report; its problems in task order.
  """
  runner = runner or checkers.default_runner()
  workers = max(1, 2 * getattr(pool, "parallelism", 1))
  with concurrent.futures.ThreadPoolExecutor(workers) as executor:
    futures = [executor.submit(audit_task, pool, t, runner) for t in tasks]
    if progress is not None:
      for done, _ in enumerate(concurrent.futures.as_completed(futures), 1):
        progress(done, len(futures))
    results = [f.result() for f in futures]
  return Report(
    tasks=len(tasks),
    verified=sum(ran for ran, _ in results),
    problems=tuple(p for _, found in results for p in found),
  )


def apply(
  tasks: Sequence[schema.Task], report: Report, mode: str, where: str
) -> tuple[list[schema.Task], list[str]]:
  """The tasks to keep, and the lines to warn with.

  Args:
    tasks: the audited tasks.
    report: their audit.
    mode: "error" or "skip" (`MODES`).
    where: what the tasks are, for messages (e.g. "config.data.train_tasks").

  Raises:
    BadTasksError: in "error" mode when a task has a problem; in "skip"
      mode when no task is left.
  """
  if mode not in MODES:
    raise ValueError(f"mode={mode!r}: must be one of {MODES}.")
  bad = set(report.bad)
  if not bad:
    return list(tasks), []
  if mode == "error":
    raise BadTasksError(
      "\n".join(
        [
          f"{where}: {len(bad)} of {report.tasks} tasks cannot be trusted"
          f" ({report.summary()}):",
          *report.lines(),
          "Fix them in the task file (python -m codeagent_rl.tasks.audit"
          " lists all), or drop them with --config.data.bad_tasks=skip.",
        ]
      )
    )
  kept = [t for t in tasks if t.task_id not in bad]
  if not kept:
    raise BadTasksError(
      f"{where}: every one of the {report.tasks} tasks has a problem"
      f" ({report.summary()}); first: {report.problems[0].line()}"
    )
  warning = [
    f"WARNING: {where}: skipped {len(bad)} of {report.tasks} tasks"
    f" ({report.summary()}):",
    *report.lines(),
  ]
  return kept, warning


# --- Command line -------------------------------------------------------------


def define_flags() -> None:
  """Registers the program's flags, the sandbox's included."""
  flags.DEFINE_string("tasks", None, "Task file to audit (JSONL).")
  flags.DEFINE_string("json", None, "Also write the report here (JSON).")
  harness.define_backend_flag()
  harness.define_flags(limits=True)
  flags.mark_flags_as_required(["tasks"])


def _progress(done: int, total: int) -> None:
  if done == total or done % 50 == 0:
    print(f"audit: {done}/{total} tasks", file=sys.stderr, flush=True)


def main(argv: list[str]) -> None:
  """Audits `--tasks`; prints every problem; exits 1 when there is one."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  values = flags.FLAGS
  try:
    sandbox = harness.config_from_cli_flags(values.backend)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  try:
    tasks = schema.read_tasks(values.tasks, schema.PROGRAM_KINDS)
  except (schema.TaskFormatError, OSError) as e:
    sys.exit(f"audit: {e}")
  try:
    with pools.open_pool(sandbox) as pool:
      report = audit(pool, tasks, progress=_progress)
  except gvisor.SetupError as e:
    sys.exit(f"audit: {e}")
  for line in report.lines(limit=None):
    print(line)
  print(f"audit: {values.tasks}: {report.summary()}")
  if values.json:
    with open(values.json, "w") as f:
      json.dump(report.to_json(), f, indent=1)
  if report.problems:
    sys.exit(1)


if __name__ == "__main__":
  define_flags()
  app.run(main)
