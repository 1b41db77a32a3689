r"""The generated suite: tests from a task's reference, beside its suite B.

  python -m codeagent_rl.tasks.suite_b.plus --tasks=IN.jsonl --out=OUT.jsonl \
      [--per_task=100] [--seed=0] [--backend=gvisor|process]

As EvalPlus does for HumanEval+, for every function task with a reference
solution: the inputs of the task's visible tests, suite A and its own suite
B are the seeds of `augment.augment` (type-aware mutation, `mutate.py`, and
boundary, structured and random draws over the seeds' types, `generate.py`);
the reference runs on the candidates *in the sandbox*, batched, under the
trace-event budget; a candidate is dropped when it repeats an input of any
of the task's tests or an earlier candidate, or when the reference raises,
runs past the budget or the time limit, or returns data that is not plain.
The kept cases become `{"args", "kwargs", "expected"}` tests in the task's
`generated_tests` (up to `--per_task`), *beside* `heldout_tests`, which stay
as the task file gave them; stage 2 demands both (`anticheat/stage2.py`).

Tasks that get no generated suite (the report counts each reason,
`SKIP_REASONS`):

- `stdio`: the generators draw function arguments, not stdin.
- `no_reference`: an empty reference solution.
- `probe`: an interactive task (`metadata["probe"]`): its reference asks
  the host, which a batch job does not answer.
- `checker`: a test of the task is a checker (a property, not equality,
  e.g. "any zero of the polynomial"), so the reference's output on a new
  input need not be the only right one. HumanEval tasks are the exception:
  their rules (`humaneval_rules.py`: input contracts, HumanEval/32's unique
  zeros, the property checker where a zero is not unique) apply as when
  their suite B was built, so their generated tests are safe too.
- `reference_fails`: the reference does not pass the task's own tests (an
  expected value it disagrees with means its outputs are no oracle).
- `none_kept`: no candidate survived.

Every generated test passes the reference as the judge compares (checked on
the host), so the reference keeps full reward. The output is deterministic:
the same tasks, flags and sandbox interpreter give the same bytes (the
random stream is salted with the task id; the budget counts trace events,
not time).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from collections.abc import Sequence
import concurrent.futures
import dataclasses
import sys
from typing import Any

from absl import app
from absl import flags

from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import pools
from codeagent_rl.tasks import humaneval
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks.suite_b import augment

SKIP_REASONS = (
  "stdio",
  "no_reference",
  "probe",
  "checker",
  "reference_fails",
  "none_kept",
)
# Mixed into each task's random stream, so that a HumanEval task's
# generated suite (salt "plus:<id>") is not its given suite B drawn again
# (salt "<id>", the same default seed).
SALT_PREFIX = "plus:"
# The metadata key that records the generation seed.
SEED_METADATA_KEY = "generated_tests_seed"


@dataclasses.dataclass(frozen=True)
class PlusConfig:
  """How generated suites are built.

  Attributes:
    augment: candidates, limits and seed (`augment.AugmentConfig`); its
      `max_tests` is the most generated tests per task (`--per_task`).
  """

  augment: augment.AugmentConfig = augment.AugmentConfig()

  def __post_init__(self):
    if not isinstance(self.augment, augment.AugmentConfig):
      raise ValueError(
        f"PlusConfig.augment={self.augment!r}: must be an AugmentConfig."
      )


@dataclasses.dataclass(frozen=True)
class _Rules:
  """Task-specific hooks of `augment.augment` and the test of a case."""

  precondition: Callable[[list, dict], bool] | None = None
  accept: Callable[[augment.Case], bool] | None = None
  extra: Callable | None = None
  make_test: Callable[[augment.Case], dict] | None = None


def _is_humaneval(task: schema.Task) -> bool:
  source = task.metadata.get("source")
  return isinstance(source, str) and source.startswith(humaneval.PACKAGE)


def _expected_test(case: augment.Case) -> dict:
  return {"args": case.args, "kwargs": case.kwargs, "expected": case.output}


def _rules(task: schema.Task) -> _Rules | str:
  """The task's rules, or the reason it gets no generated suite."""
  if task.kind != "function":
    return "stdio"
  if not task.reference_solution.strip():
    return "no_reference"
  if schema.PROBE_METADATA_KEY in task.metadata:
    return "probe"
  if _is_humaneval(task):
    task_id = task.task_id

    def make_test(case: augment.Case) -> dict:
      return humaneval.make_heldout_test(
        task_id, case.args, case.kwargs, case.output
      )

    return _Rules(
      precondition=humaneval.precondition(task_id),
      accept=humaneval.accept_for(task_id),
      extra=humaneval.EXTRA_INPUTS.get(task_id),
      make_test=make_test,
    )
  tests = (*task.visible_tests, *task.hidden_tests, *task.heldout_tests)
  if any("checker" in t for t in tests):
    return "checker"
  config = judge.task_config(task, judge.JudgeConfig())

  def accept(case: augment.Case) -> bool:
    run = jobs.TestRun(status="ok", output=case.output)
    test = _expected_test(case)
    return judge.judge_test(task.kind, test, run, config).passed

  return _Rules(accept=accept, make_test=_expected_test)


def seeds_of(task: schema.Task) -> list[tuple[list, dict]]:
  """The inputs of the task's visible tests, suite A and suite B."""
  tests = (*task.visible_tests, *task.hidden_tests, *task.heldout_tests)
  return [(list(t["args"]), dict(t.get("kwargs", {}))) for t in tests]


def reference_passes(pool: Any, task: schema.Task) -> bool:
  """Whether the reference passes every test of suites A and B."""
  bare = dataclasses.replace(task, generated_tests=())
  grade = judge.grade(pool, bare, task.reference_solution)
  return all(s.passed == s.total for s in (grade.suite_a, grade.suite_b))


def generate_tests(
  pool: Any, task: schema.Task, config: PlusConfig
) -> tuple[dict, ...] | str:
  """The generated tests of one task, or the reason it gets none.

  Args:
    pool: runs sandbox jobs (`run` and `submit`, a `SandboxPool`).
    task: the task; its reference runs in the sandbox only.
    config: sizes, limits and the seed.

  Returns:
    Up to `config.augment.max_tests` tests, or one of `SKIP_REASONS`.
  """
  rules = _rules(task)
  if isinstance(rules, str):
    return rules
  if not reference_passes(pool, task):
    return "reference_fails"
  cases = augment.augment(
    pool,
    task.reference_solution,
    task.entry_point,
    seeds_of(task),
    config.augment,
    salt=SALT_PREFIX + task.task_id,
    precondition=rules.precondition,
    accept=rules.accept,
    extra=rules.extra,
  )
  tests = tuple(rules.make_test(c) for c in cases)
  return tests or "none_kept"


@dataclasses.dataclass(frozen=True)
class Report:
  """What `add_generated` did.

  Attributes:
    tasks: tasks read.
    generated: tasks that got a generated suite.
    tests: generated tests in all.
    skipped: reason (`SKIP_REASONS`) -> tasks.
  """

  tasks: int
  generated: int
  tests: int
  skipped: dict[str, int]


def add_generated(
  pool: Any,
  tasks: Sequence[schema.Task],
  config: PlusConfig = PlusConfig(),
  progress: Callable[[int, int], None] | None = None,
) -> tuple[list[schema.Task], Report]:
  """The tasks with their generated suites (tasks run concurrently).

  A task that gets none keeps `generated_tests` empty (any it had go: they
  came from an earlier run).

  Args:
    pool: a `SandboxPool` (anything with its `run`, `submit` and
      `parallelism`).
    tasks: the tasks, in the order they are returned.
    config: sizes, limits and the seed.
    progress: called as progress(done, total) as tasks finish.
  """
  workers = 2 * pool.parallelism
  with concurrent.futures.ThreadPoolExecutor(workers) as executor:
    futures = [executor.submit(generate_tests, pool, t, config) for t in tasks]
    for done, _ in enumerate(concurrent.futures.as_completed(futures), 1):
      if progress is not None:
        progress(done, len(futures))
    results = [f.result() for f in futures]
  out, skipped = [], collections.Counter()
  for task, tests in zip(tasks, results, strict=True):
    if isinstance(tests, str):
      skipped[tests] += 1
      out.append(dataclasses.replace(task, generated_tests=()))
      continue
    metadata = {**task.metadata, SEED_METADATA_KEY: config.augment.seed}
    out.append(
      dataclasses.replace(task, generated_tests=tests, metadata=metadata)
    )
  report = Report(
    tasks=len(tasks),
    generated=sum(not isinstance(r, str) for r in results),
    tests=sum(len(r) for r in results if not isinstance(r, str)),
    skipped={r: skipped[r] for r in SKIP_REASONS if skipped[r]},
  )
  return out, report


# --- Command line -------------------------------------------------------------


def define_flags() -> None:
  """Registers the program's flags, the sandbox's included."""
  flags.DEFINE_string("tasks", None, "Task file to read (JSONL).")
  flags.DEFINE_string("out", None, "Where to write the tasks (JSONL).")
  flags.DEFINE_integer("per_task", 100, "Most generated tests per task.")
  flags.DEFINE_integer("seed", 0, "Seed of the draws and mutations.")
  harness.define_backend_flag()
  harness.define_flags(limits=True)
  flags.mark_flags_as_required(["tasks", "out"])


def _progress(done: int, total: int) -> None:
  if done == total or done % 10 == 0:
    print(f"plus: {done}/{total} tasks", file=sys.stderr, flush=True)


def main(argv: list[str]) -> None:
  """Reads `--tasks`, writes `--out` with generated suites, prints a report."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  values = flags.FLAGS
  try:
    config = PlusConfig(
      augment.AugmentConfig(seed=values.seed, max_tests=values.per_task)
    )
    sandbox = harness.config_from_cli_flags(values.backend)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  try:
    tasks = schema.read_tasks(values.tasks, schema.PROGRAM_KINDS)
  except (schema.TaskFormatError, OSError) as e:
    sys.exit(f"plus: {e}")
  try:
    with pools.open_pool(sandbox) as pool:
      tasks, report = add_generated(pool, tasks, config, _progress)
  except gvisor.SetupError as e:
    sys.exit(f"plus: {e}")
  schema.write_tasks(values.out, tasks)
  print(
    f"plus: {report.generated}/{report.tasks} tasks got a generated suite"
    f" ({report.tests} tests); skipped: {report.skipped or 'none'};"
    f" wrote {values.out}"
  )


if __name__ == "__main__":
  define_flags()
  app.run(main)
