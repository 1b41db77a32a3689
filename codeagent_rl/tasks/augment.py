"""Suite-B inputs by type-aware mutation of seed inputs (EvalPlus-style).

  cases = augment.augment(pool, reference_code, "f", seeds, AugmentConfig())
  heldout = augment.expected_tests(cases)

Seeds are the `(args, kwargs)` of existing tests (suite A). Each round
derives candidates from the seeds and from the inputs accepted so far, with
one to `max_mutations` mutations of `mutate.Mutator` (type-aware, recursive,
within the domain the seeds show; see `mutate.py`). A caller with a real
input contract passes it as `precondition`.

The expected values come from running the reference *in the sandbox*, many
inputs per job, each call under a `sys.settrace` event counter. An input is
dropped when the reference raises, takes more than `max_events` trace events
(or, as a backstop, times out), returns data that is not plain (or longer
than `max_output_chars` encoded), or fails the caller's `accept`. Inputs are
deduplicated (against the seeds too) by their tagged encoding, and at most
`max_tests` are kept, in generation order. Nothing depends on timing, so the
same seed, salt, reference and interpreter give the same cases.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import copy
import dataclasses
import random
from typing import Any

from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import mutate

# Attempts to find a new candidate, per candidate wanted (mutations often
# hit an input that exists already, e.g. a shuffle of a one-item list).
_ATTEMPTS_PER_CANDIDATE = 20


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
  """How suite B is generated.

  Attributes:
    seed: random seed of the mutations.
    max_tests: most cases kept (the cap of suite B).
    rounds: mutation rounds; inputs accepted in a round seed the next ones.
    candidates_per_round: new distinct inputs tried per round.
    max_mutations: mutations applied to one candidate (1 to this many).
    batch_size: inputs per sandbox job.
    max_events: inputs on which the reference takes more trace events
      (`sys.settrace` calls and lines) are dropped. A count, unlike a time,
      does not depend on the machine: this keeps the output deterministic
      and the kept inputs fast (200k events run in well under 0.1 s).
    test_timeout_s: per-input time limit of the reference in the sandbox (a
      backstop: counting stops a slow input long before).
    job_timeout_s: time limit of one batch job.
    max_input_chars: inputs longer than this, tagged JSON, are not tried.
    max_output_chars: outputs longer than this, tagged JSON, are dropped.
  """

  seed: int = 0
  max_tests: int = 40
  rounds: int = 3
  candidates_per_round: int = 40
  max_mutations: int = 2
  batch_size: int = 64
  max_events: int = 200_000
  test_timeout_s: float = 2.0
  job_timeout_s: float = 30.0
  max_input_chars: int = 2000
  max_output_chars: int = 20000

  def __post_init__(self):
    def bad(name: str, why: str) -> ValueError:
      value = getattr(self, name)
      return ValueError(f"AugmentConfig.{name}={value!r}: {why}")

    if type(self.seed) is not int:
      raise bad("seed", "must be an integer.")
    for name in (
      "max_tests",
      "rounds",
      "candidates_per_round",
      "max_mutations",
      "batch_size",
      "max_events",
      "max_input_chars",
      "max_output_chars",
    ):
      value = getattr(self, name)
      if type(value) is not int or value < 1:
        raise bad(name, "must be an integer >= 1.")
    for name in ("test_timeout_s", "job_timeout_s"):
      value = getattr(self, name)
      if not isinstance(value, int | float) or not 0 < value < 86400:
        raise bad(name, "must be a number of seconds in (0, 86400).")
    if self.test_timeout_s > self.job_timeout_s:
      raise bad("test_timeout_s", "must not exceed job_timeout_s.")


@dataclasses.dataclass(frozen=True)
class Case:
  """An input and the reference's output on it."""

  args: list
  kwargs: dict
  output: Any


def input_key(args: Sequence, kwargs: dict) -> str:
  """Identifies an input with its types (1, 1.0 and True differ)."""
  return wire.dumps(wire.encode([list(args), kwargs]))


def expected_tests(cases: Sequence[Case]) -> list[dict]:
  """`{"args", "kwargs", "expected"}` tests of the cases."""
  return [
    {"args": c.args, "kwargs": c.kwargs, "expected": c.output} for c in cases
  ]


# --- Running the reference ----------------------------------------------------

_COUNTED_ENTRY = "_codeagent_counted"
# Appended to the reference: calls the entry point under a `sys.settrace`
# counter and returns [over budget, output]. Past the budget the trace
# function raises (a BaseException, which `except Exception` in the reference
# does not catch) and the call ends early.
_COUNTER = """

def _codeagent_counted(entry_point, budget, args, kwargs):
  import sys as _sys

  target = globals()[entry_point]
  count = [0]

  class OverBudget(BaseException):
    pass

  def trace(frame, event, arg):
    count[0] += 1
    if count[0] > budget:
      raise OverBudget()
    return trace

  _sys.settrace(trace)
  try:
    output = target(*args, **kwargs)
  except OverBudget:
    return [True, None]
  finally:
    _sys.settrace(None)
  if count[0] > budget:
    return [True, None]
  return [False, output]
"""


def run_reference(
  pool: Any,
  code: str,
  entry_point: str,
  inputs: Sequence[tuple[list, dict]],
  config: AugmentConfig,
) -> list[jobs.TestRun | None]:
  """Runs the reference on `inputs` in the sandbox, `batch_size` per job.

  Each call runs under the trace-event counter. Inputs a batch left unrun
  (its job was killed) run again one per job.

  Args:
    pool: anything with `submit(job) -> Future[JobResult]`.
    code: the reference source.
    entry_point: the function to call.
    inputs: `(args, kwargs)` pairs.
    config: batch size, event budget and limits.

  Returns:
    Per input, in input order: a `TestRun` whose output is the reference's
    output, or None when it did not return plain data within the budget
    and the limits.
  """

  def job(batch):
    return jobs.Job.function(
      code + "\n" + _COUNTER,
      _COUNTED_ENTRY,
      [([entry_point, config.max_events, a, k], {}) for a, k in batch],
      timeout_s=config.job_timeout_s,
      test_timeout_s=config.test_timeout_s,
    )

  runs: list[jobs.TestRun | None] = [None] * len(inputs)
  size = config.batch_size
  starts = range(0, len(inputs), size)
  futures = [pool.submit(job(inputs[s : s + size])) for s in starts]
  again = []
  for start, future in zip(starts, futures, strict=True):
    for i, run in enumerate(future.result().tests, start=start):
      if run.status == "not_run":
        again.append(i)
      else:
        runs[i] = run
  futures = [pool.submit(job([inputs[i]])) for i in again]
  for i, future in zip(again, futures, strict=True):
    runs[i] = future.result().tests[0]
  return [_unwrap(run, config) for run in runs]


def _unwrap(run: jobs.TestRun, config: AugmentConfig) -> jobs.TestRun | None:
  """The reference's own output, if it is usable as an expected value."""
  if run.status != "ok":
    return None
  over_budget, output = run.output
  if over_budget:
    return None
  if len(wire.dumps(wire.encode(output))) > config.max_output_chars:
    return None
  return dataclasses.replace(run, output=output)


def augment(
  pool: Any,
  code: str,
  entry_point: str,
  seeds: Sequence[tuple[Sequence, dict]],
  config: AugmentConfig,
  *,
  salt: str = "",
  precondition: Callable[[list, dict], bool] | None = None,
  accept: Callable[[Case], bool] | None = None,
) -> list[Case]:
  """New inputs mutated from `seeds`, with the reference's outputs.

  Args:
    pool: runs sandbox jobs (`submit(job) -> Future[JobResult]`).
    code: the reference solution (runs in the sandbox only).
    entry_point: the function to call.
    seeds: `(args, kwargs)` of the existing tests; never returned again.
    config: sizes, limits and the seed.
    salt: mixed into the seed (e.g. a task id), so that tasks sharing a
      config do not share a random stream.
    precondition: trusted host-side check of an input contract; inputs it
      rejects (or raises on) are not tried.
    accept: trusted host-side check of a case (input and reference
      output); cases it rejects (or raises on) are dropped.

  Returns:
    At most `config.max_tests` cases, in generation order.
  """
  rng = random.Random(f"augment:{config.seed}:{salt}")
  pool_inputs = [(list(a), dict(k)) for a, k in seeds]
  domain = mutate.Domain.from_seeds(pool_inputs)
  mutator = mutate.Mutator(rng, domain)
  seen = {input_key(a, k) for a, k in pool_inputs}
  accepted: list[Case] = []
  for _ in range(config.rounds):
    if len(accepted) >= config.max_tests or not pool_inputs:
      break
    candidates = []
    attempts = _ATTEMPTS_PER_CANDIDATE * config.candidates_per_round
    for _ in range(attempts):
      if len(candidates) >= config.candidates_per_round:
        break
      args, kwargs = rng.choice(pool_inputs)
      times = rng.randint(1, config.max_mutations)
      new = mutator.mutate_input(args, kwargs, times)
      try:
        key = input_key(*new)
      except wire.EncodeError:
        continue
      if key in seen or len(key) > config.max_input_chars:
        continue
      seen.add(key)
      if precondition is not None and not _holds(precondition, *new):
        continue
      candidates.append(new)
    runs = run_reference(pool, code, entry_point, candidates, config)
    for (args, kwargs), run in zip(candidates, runs, strict=True):
      if run is None:
        continue
      case = Case(args, kwargs, run.output)
      if accept is not None and not _holds(accept, case):
        continue
      accepted.append(case)
      pool_inputs.append((args, kwargs))
  return accepted[: config.max_tests]


def _holds(check: Callable, *args) -> bool:
  """True when a trusted host-side check returns exactly True."""
  try:
    return check(*copy.deepcopy(args)) is True
  except Exception:  # a check that raises rejects
    return False
