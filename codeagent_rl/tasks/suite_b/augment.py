"""Suite B: differential testing against the reference on generated inputs.

  cases = augment.augment(pool, reference_code, "f", seeds, AugmentConfig())
  heldout = augment.expected_tests(cases)

Seeds are the `(args, kwargs)` of existing tests (suite A). Candidate
inputs come from five sources (`SOURCES`), each tried up to
`candidates_per_kind` times:

- `extra`: inputs the caller builds for its task (e.g. polynomials with one
  real root), tried first.
- `boundary`, `structured`, `random`: drawn afresh over the types, ranges
  and alphabets the seeds show (`generate.Generator`): edge values, shaped
  strings and lists (brackets, palindromes, sorted, ...), random draws at
  several sizes and magnitudes.
- `mutation`: `rounds` rounds of one to `max_mutations` type-aware
  mutations of the seeds and of the mutants accepted so far
  (`mutate.Mutator`), which stay near suite A.

A candidate is tried only if it is new (not a seed, not tried before; by
its tagged encoding), at most `max_input_chars` long, and satisfies the
caller's `precondition` (the task's input contract). The expected values
come from running the reference *in the sandbox* (the differential oracle),
many inputs per job, each call under a `sys.settrace` event counter. A
candidate is dropped when the reference raises, takes more than
`max_events` trace events (or, as a backstop, times out), returns data
that is not plain (or longer than `max_output_chars` encoded), or fails the
caller's `accept`. Suite B takes the kept cases of the sources in turn
(one of each, in `SOURCES` order, then again) up to `max_tests`, so that
no source crowds out the others. Nothing depends on timing: the same
seed, salt, reference and interpreter give the same cases.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
import copy
import dataclasses
import random
from typing import Any

from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import wire
from codeagent_rl.tasks.suite_b import generate
from codeagent_rl.tasks.suite_b import mutate

# Attempts to find a new candidate, per candidate wanted (mutations often
# hit an input that exists already, e.g. a shuffle of a one-item list).
_ATTEMPTS_PER_CANDIDATE = 20
# Where candidates come from, in the order suite B takes them.
SOURCES = ("extra", *generate.KINDS, "mutation")


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
  """How suite B is generated.

  Attributes:
    seed: random seed of the draws and mutations.
    max_tests: most cases kept (the cap of suite B).
    candidates_per_kind: new distinct inputs tried per generated kind
      (boundary, structured, random) and of the caller's extra inputs; 0
      leaves mutation only (suite B as it was before generation, for
      comparisons).
    rounds: mutation rounds; inputs accepted in a round seed the next ones.
    candidates_per_round: new distinct mutants tried per round.
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
  max_tests: int = 100
  candidates_per_kind: int = 60
  rounds: int = 2
  candidates_per_round: int = 40
  max_mutations: int = 2
  batch_size: int = 64
  max_events: int = 200_000
  test_timeout_s: float = 1.0
  job_timeout_s: float = 30.0
  max_input_chars: int = 2000
  max_output_chars: int = 20000

  def __post_init__(self):
    def bad(name: str, why: str) -> ValueError:
      value = getattr(self, name)
      return ValueError(f"AugmentConfig.{name}={value!r}: {why}")

    if type(self.seed) is not int:
      raise bad("seed", "must be an integer.")
    if (
      type(self.candidates_per_kind) is not int or self.candidates_per_kind < 0
    ):
      raise bad("candidates_per_kind", "must be an integer >= 0.")
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
  """An input, the reference's output on it, and where it came from.

  Attributes:
    args: positional arguments.
    kwargs: keyword arguments.
    output: the reference's output.
    source: one of `SOURCES`.
  """

  args: list
  kwargs: dict
  output: Any
  source: str = "mutation"


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
# A local int of more bits than this ends the reference's call as over
# budget. Big-int arithmetic costs time but few trace events: on a drawn
# n = 1000, HumanEval/139's product of factorials takes ~10 s in ~3000
# events; an expected value of this size (~80k digits) would be dropped
# as longer than `max_output_chars` anyway.
MAX_INT_BITS = 1 << 18
# Appended to the reference: calls the entry point under a `sys.settrace`
# counter and returns [over budget, output]. Past the budget (or on a
# local int past MAX_INT_BITS, checked every 16 events) the trace function
# raises (a BaseException, which `except Exception` in the reference does
# not catch) and the call ends early.
_COUNTER = """

def _codeagent_counted(entry_point, budget, max_bits, args, kwargs):
  import sys as _sys

  target = globals()[entry_point]
  count = [0]

  class OverBudget(BaseException):
    pass

  def trace(frame, event, arg):
    count[0] += 1
    if count[0] > budget:
      raise OverBudget()
    if count[0] % 16 == 0:
      for value in frame.f_locals.values():
        if type(value) is int and value.bit_length() > max_bits:
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
      [
        ([entry_point, config.max_events, MAX_INT_BITS, a, k], {})
        for a, k in batch
      ],
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
  extra: Callable[[random.Random], Iterable[tuple[list, dict]]] | None = None,
) -> list[Case]:
  """New inputs from `seeds`' types, with the reference's outputs.

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
    extra: the caller's own inputs for the task, drawn with the random
      stream it is given (the `extra` source).

  Returns:
    At most `config.max_tests` cases, the sources in turn (`SOURCES`).
  """
  rng = random.Random(f"augment:{config.seed}:{salt}")
  seeds = [(list(a), dict(k)) for a, k in seeds]
  domain = mutate.Domain.from_seeds(seeds)
  seen = {input_key(a, k) for a, k in seeds}

  def admit(new: tuple[list, dict]) -> bool:
    try:
      key = input_key(*new)
    except (wire.EncodeError, RecursionError):
      return False
    if key in seen or len(key) > config.max_input_chars:
      return False
    seen.add(key)
    return precondition is None or _holds(precondition, *new)

  def keep(source: str, candidates: list) -> list[Case]:
    runs = run_reference(pool, code, entry_point, candidates, config)
    kept = []
    for (args, kwargs), run in zip(candidates, runs, strict=True):
      if run is None:
        continue
      case = Case(args, kwargs, run.output, source)
      if accept is None or _holds(accept, case):
        kept.append(case)
    return kept

  by_source = {}
  generator = generate.Generator(rng, domain, seeds)
  streams = {kind: generator.candidates(kind) for kind in generate.KINDS}
  streams["extra"] = iter(() if extra is None else extra(rng))
  for source in SOURCES[:-1]:
    candidates = _take(streams[source], admit, config.candidates_per_kind)
    by_source[source] = keep(source, candidates)
  by_source["mutation"] = _mutants(rng, domain, seeds, admit, keep, config)
  return _interleave([by_source[s] for s in SOURCES], config.max_tests)


def _take(stream: Iterator, admit: Callable, wanted: int) -> list:
  """Up to `wanted` admitted items of `stream` (a bounded number tried)."""
  taken = []
  for _ in range(_ATTEMPTS_PER_CANDIDATE * wanted):
    if len(taken) >= wanted:
      break
    new = next(stream, None)
    if new is None:
      break
    if admit(new):
      taken.append(new)
  return taken


def _mutants(
  rng: random.Random,
  domain: mutate.Domain,
  seeds: list,
  admit: Callable,
  keep: Callable,
  config: AugmentConfig,
) -> list[Case]:
  """Rounds of mutations of the seeds and of the mutants kept so far."""
  mutator = mutate.Mutator(rng, domain)
  pool_inputs = list(seeds)
  kept: list[Case] = []
  for _ in range(config.rounds):
    if len(kept) >= config.max_tests or not pool_inputs:
      break
    candidates = []
    attempts = _ATTEMPTS_PER_CANDIDATE * config.candidates_per_round
    for _ in range(attempts):
      if len(candidates) >= config.candidates_per_round:
        break
      args, kwargs = rng.choice(pool_inputs)
      times = rng.randint(1, config.max_mutations)
      new = mutator.mutate_input(args, kwargs, times)
      if admit(new):
        candidates.append(new)
    for case in keep("mutation", candidates):
      kept.append(case)
      pool_inputs.append((case.args, case.kwargs))
  return kept


def _interleave(lists: list[list], limit: int) -> list:
  """One item of each list in turn (skipping exhausted ones), `limit` in all."""
  out = []
  for i in range(max(map(len, lists), default=0)):
    out += [items[i] for items in lists if i < len(items)]
  return out[:limit]


def _holds(check: Callable, *args) -> bool:
  """True when a trusted host-side check returns exactly True."""
  try:
    return check(*copy.deepcopy(args)) is True
  except Exception:  # a check that raises rejects
    return False
