"""Grading a repository task: the agent's change, run on clean tests.

`grade_workspace` grades the *change*, not the agent's workspace: the
hidden suites run against `workspace.graded_copy` of it, where every file
the task marks as a test and every hook file (`conftest.py`,
`sitecustomize.py`, `*.pth`, ...) is the task's own. The tests are then run
as sandbox jobs that carry the graded files (`jobs.Job.workspace_calls`:
one job per called function, so a module that fails to import fails only
the tests that call into it; `jobs.Job.workspace_program`: one job for all
runs of the entry point) and judged here, exactly as a function or stdio
task's tests are (`judge.judge_test`): the jobs return outputs as data and
expected values never leave the host.

A test whose module cannot be imported (missing, raising or exiting at
import) fails with the reason; a change that does not fit the task's files
(a file where the task has a folder, or past the size limits) fails every
test without a job.
"""

from __future__ import annotations

from collections.abc import Sequence

from codeagent_rl import status as status_lib
from codeagent_rl.sandbox import jobs
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import repo_schema
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import workspace as workspace_lib

# Which job status a merged result takes: the first of these any job had.
_SEVERITY = (
  status_lib.JobStatus.SANDBOX_ERROR,
  status_lib.JobStatus.OUTPUT_LIMIT,
  status_lib.JobStatus.TIMEOUT,
  status_lib.JobStatus.MEMORY,
  status_lib.JobStatus.CRASH,
)


def tests_jobs(
  task: schema.Task,
  tests: Sequence[dict],
  workspace: workspace_lib.Workspace,
  timeout_s: float | None = None,
) -> list[tuple[list[int], jobs.Job]]:
  """The jobs that run `tests` (tests of `task`) on `workspace`'s files.

  Only inputs go in. Returns (the positions in `tests` each job runs, the
  job); calls are grouped by target in order of first use, runs of the
  entry point come last.
  """
  files = tuple(workspace.items())
  calls: dict[str, list[int]] = {}
  runs = []
  for i, test in enumerate(tests):
    if "call" in test:
      calls.setdefault(test["call"], []).append(i)
    else:
      runs.append(i)
  out = []
  for call, positions in calls.items():
    module, function = repo_schema.split_call(call)
    inputs = [(tests[i]["args"], tests[i].get("kwargs", {})) for i in positions]
    out.append(
      (
        positions,
        jobs.Job.workspace_calls(
          files, module, function, inputs, timeout_s=timeout_s
        ),
      )
    )
  if runs:
    main = task.entry_point
    if main not in workspace:
      # The agent deleted the program: every run fails, with the reason.
      main = None
    stdins = [tests[i]["stdin"] for i in runs]
    if main is not None:
      job = jobs.Job.workspace_program(files, main, stdins, timeout_s=timeout_s)
      out.append((runs, job))
    else:
      out.append((runs, None))
  return out


def _failed_result(kinds: Sequence[str], reason: str) -> jobs.JobResult:
  """A result in which every test (of these kinds) failed for `reason`."""
  tests = tuple(
    jobs.TestRun(
      status="error",
      stdout="" if kind == jobs.STDIO else None,
      error=reason,
    )
    for kind in kinds
  )
  return jobs.JobResult(
    status=status_lib.JobStatus.CRASH, tests=tests, reason=reason
  )


def _kind(test: dict) -> str:
  return jobs.STDIO if "stdin" in test else jobs.FUNCTION


class PendingTests:
  """Tests of a workspace whose jobs are in a pool; `result` waits."""

  def __init__(
    self,
    pool,
    task: schema.Task,
    tests: Sequence[dict],
    workspace: workspace_lib.Workspace,
    timeout_s: float | None = None,
  ):
    """Submits the jobs of `tests` on `workspace` (`tests_jobs`) to `pool`."""
    self.pool = pool
    self.task = task
    self.num_tests = len(tests)
    self._planned = [
      (positions, job, None if job is None else pool.submit(job))
      for positions, job in tests_jobs(task, tests, workspace, timeout_s)
    ]

  def result(self, retries: int = 0) -> jobs.JobResult:
    """One merged `JobResult` of the tests, in their order.

    Its status is the most severe of the jobs'; its stdout and stderr the
    jobs' joined; its duration their sum. A job that hit a sandbox error
    (the sandbox failed, not the code) is resubmitted up to `retries` times.
    """
    runs: list = [None] * self.num_tests
    results = []
    for positions, job, future in self._planned:
      if future is None:
        missing = f"the program {self.task.entry_point} is not in the workspace"
        result = _failed_result([jobs.STDIO] * len(positions), missing)
      else:
        result = future.result()
        for _ in range(retries):
          if result.status != status_lib.JobStatus.SANDBOX_ERROR:
            break
          result = self.pool.submit(job).result()
      results.append(result)
      for i, run in zip(positions, result.tests, strict=True):
        runs[i] = run
    statuses = {r.status for r in results}
    status = next(
      (s for s in _SEVERITY if s in statuses), status_lib.JobStatus.OK
    )
    return jobs.JobResult(
      status=status,
      tests=tuple(runs),
      stdout="".join(r.stdout for r in results),
      stderr="".join(r.stderr for r in results),
      duration_s=sum(r.duration_s for r in results),
      reason=next((r.reason for r in results if r.reason), ""),
      sandbox=",".join(sorted({r.sandbox for r in results if r.sandbox})),
    )


def run_tests(
  pool,
  task: schema.Task,
  tests: Sequence[dict],
  workspace: workspace_lib.Workspace,
  timeout_s: float | None = None,
) -> jobs.JobResult:
  """Runs `tests` on `workspace` in `pool` (`PendingTests(...).result()`)."""
  return PendingTests(pool, task, tests, workspace, timeout_s).result()


class PendingGrade:
  """A change being graded on suites A, B and the generated one.

  The constructor makes the graded copy and submits its jobs; `result`
  waits for them and judges. So many episodes' submissions run at once.
  """

  def __init__(
    self,
    pool,
    task: schema.Task,
    agent: workspace_lib.Workspace,
    config: judge.JudgeConfig | None = None,
    timeout_s: float | None = None,
  ):
    """See `grade_workspace` for the arguments."""
    self.task = task
    self.config = config or judge.JudgeConfig()
    spec = task.repo
    tests = judge.graded_tests(task)
    self.graded, self._pending, self._failed = None, None, None
    try:
      self.graded = workspace_lib.graded_copy(
        spec.start, agent, spec.test_paths
      )
    except workspace_lib.WorkspaceError as e:
      reason = f"the change does not fit the task's files: {e}"
      self._failed = _failed_result([_kind(t) for t in tests], reason)
      return
    self._pending = PendingTests(
      pool, task, tests, self.graded.workspace, timeout_s
    )

  def result(
    self, retries: int = 0
  ) -> tuple[judge.Grade, workspace_lib.GradedCopy | None]:
    """(the grade, the graded copy; None when the change did not fit)."""
    if self._pending is None:
      result = self._failed
    else:
      result = self._pending.result(retries)
    return judge.grade_result(self.task, result, self.config), self.graded


def grade_workspace(
  pool,
  task: schema.Task,
  agent: workspace_lib.Workspace,
  config: judge.JudgeConfig | None = None,
  timeout_s: float | None = None,
) -> tuple[judge.Grade, workspace_lib.GradedCopy | None]:
  """Grades the agent's change on suites A, B and the generated one.

  Args:
    pool: anything with `submit(job) -> Future[JobResult]`.
    task: a repo task (its expected values stay in this process).
    agent: the agent's workspace at submission.
    config: the judge's config (the task's options apply over it; None:
      the default).
    timeout_s: each job's limit (None: the pool's).

  Returns:
    (the grade, the graded copy: what was restored and removed to make it;
    None when the change does not fit the task's files and every test
    failed without a job).
  """
  return PendingGrade(pool, task, agent, config, timeout_s).result()
