"""Tests of suite-B augmentation: sources, reference runs, filtering."""

import dataclasses

import pytest

from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.tasks.suite_b import augment

# Short limits: the references here are tiny, except the ones meant to fail.
SANDBOX = config_lib.SandboxConfig(
  backend="process", pool_size=2, timeout_s=10.0, test_timeout_s=1.0
)
CONFIG = augment.AugmentConfig(
  max_tests=30,
  rounds=2,
  candidates_per_round=40,
  test_timeout_s=0.5,
  job_timeout_s=8.0,
)

# Misbehaves on chosen inputs: raises on negatives, loops on 7, sleeps on 8
# (no trace events: only the time limit stops it), returns a non-plain value
# on 3, a huge value on 5, and kills its job process on 4.
TRICKY = """
import os
import time


def f(x):
  if x < 0:
    raise ValueError("negative")
  if x == 7:
    while True:
      pass
  if x == 8:
    time.sleep(30)
  if x == 3:
    return object()
  if x == 5:
    return "y" * 100_000
  if x == 4:
    os._exit(3)
  return x * x
"""

PAIR = """
def f(n, s):
  return (n + len(s), s[::-1])
"""
PAIR_SEEDS = [([2, "ab"], {}), ([5, "xyz"], {}), ([0, ""], {})]


def _host_pair(n, s):
  return (n + len(s), s[::-1])


@pytest.fixture(scope="module")
def pool():
  with harness.SandboxPool(SANDBOX) as pool:
    yield pool


# --- Config -------------------------------------------------------------------


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("max_tests", 0, "max_tests=0"),
    ("candidates_per_kind", -1, "candidates_per_kind=-1"),
    ("batch_size", 1.5, "batch_size=1.5"),
    ("max_events", -1, "max_events=-1"),
    ("seed", "0", "seed='0'"),
    ("test_timeout_s", 0, "test_timeout_s=0"),
    ("test_timeout_s", 60.0, "must not exceed job_timeout_s"),
  ],
)
def test_config_rejects_bad_values(field, value, match):
  with pytest.raises(ValueError, match=match):
    augment.AugmentConfig(**{field: value})


def test_config_is_frozen():
  with pytest.raises(dataclasses.FrozenInstanceError):
    augment.AugmentConfig().seed = 1


# --- Running the reference ----------------------------------------------------


def test_run_reference_drops_what_is_not_a_clean_return(pool):
  inputs = [([x], {}) for x in (2, -1, 7, 8, 3, 5, 4, 6)]
  config = dataclasses.replace(CONFIG, max_output_chars=1000, batch_size=8)
  runs = augment.run_reference(pool, TRICKY, "f", inputs, config)
  outputs = {
    args[0]: None if run is None else run.output
    for (args, _), run in zip(inputs, runs, strict=True)
  }
  # 4 kills the batch; the inputs it took with it run again one per job.
  assert outputs == {
    2: 4,
    -1: None,  # raised
    7: None,  # over the event budget
    8: None,  # timed out
    3: None,  # not plain data
    5: None,  # longer than max_output_chars
    4: None,  # its job process died
    6: 36,
  }


def test_event_budget_drops_slow_inputs(pool):
  code = "def f(n):\n  return sum([i for i in range(n)])\n"
  config = dataclasses.replace(CONFIG, max_events=1000)
  runs = augment.run_reference(
    pool, code, "f", [([10], {}), ([100_000], {})], config
  )
  assert runs[0].output == 45
  assert runs[1] is None


# --- augment ------------------------------------------------------------------


def test_outputs_are_the_references(pool):
  cases = augment.augment(pool, PAIR, "f", PAIR_SEEDS, CONFIG)
  assert 10 <= len(cases) <= CONFIG.max_tests
  for case in cases:
    assert case.kwargs == {}
    assert [type(a) for a in case.args] == [int, str]
    assert case.output == _host_pair(*case.args)
    assert type(case.output) is tuple


def test_dedup_against_seeds_and_each_other(pool):
  cases = augment.augment(pool, PAIR, "f", PAIR_SEEDS, CONFIG)
  keys = [augment.input_key(c.args, c.kwargs) for c in cases]
  assert len(set(keys)) == len(keys)
  assert not set(keys) & {augment.input_key(a, k) for a, k in PAIR_SEEDS}


def test_cap(pool):
  config = dataclasses.replace(CONFIG, max_tests=5)
  cases = augment.augment(pool, PAIR, "f", PAIR_SEEDS, config)
  assert len(cases) == 5
  # The cap keeps the first ones generated.
  assert cases == augment.augment(pool, PAIR, "f", PAIR_SEEDS, CONFIG)[:5]


def test_failing_inputs_are_dropped(pool):
  seeds = [([x], {}) for x in (0, 1, 2, 6, 9, 10)]
  config = dataclasses.replace(CONFIG, max_output_chars=1000)
  cases = augment.augment(pool, TRICKY, "f", seeds, config)
  kept = {c.args[0] for c in cases}
  assert kept and not kept & {3, 4, 5, 7, 8}
  assert all(x >= 0 and c.output == x * x for c in cases for x in c.args)


def test_deterministic_by_seed_and_salt(pool):
  first = augment.augment(pool, PAIR, "f", PAIR_SEEDS, CONFIG, salt="t")
  assert augment.augment(pool, PAIR, "f", PAIR_SEEDS, CONFIG, salt="t") == (
    first
  )
  other_seed = dataclasses.replace(CONFIG, seed=1)
  assert augment.augment(pool, PAIR, "f", PAIR_SEEDS, other_seed) != first
  assert augment.augment(pool, PAIR, "f", PAIR_SEEDS, CONFIG, salt="u") != (
    first
  )


def test_precondition_and_accept(pool):
  cases = augment.augment(
    pool,
    PAIR,
    "f",
    PAIR_SEEDS,
    CONFIG,
    precondition=lambda args, kwargs: args[0] % 2 == 0,
    accept=lambda case: case.output[0] < 8,
  )
  assert cases
  assert all(c.args[0] % 2 == 0 and c.output[0] < 8 for c in cases)


def test_raising_checks_reject(pool):
  def broken(*_):
    raise RuntimeError("bug")

  assert not augment.augment(
    pool, PAIR, "f", PAIR_SEEDS, CONFIG, precondition=broken
  )
  assert not augment.augment(pool, PAIR, "f", PAIR_SEEDS, CONFIG, accept=broken)


def test_every_source_contributes_in_turn(pool):
  cases = augment.augment(pool, PAIR, "f", PAIR_SEEDS, CONFIG)
  sources = [c.source for c in cases]
  assert set(sources) == {"boundary", "structured", "random", "mutation"}
  # The first of each source, in SOURCES order, then the second of each.
  assert sources[:4] == ["boundary", "structured", "random", "mutation"]
  # Generated inputs reach beyond the seeds: empty and long strings, large
  # ints (the seeds have n <= 5 and len(s) <= 3).
  assert any(c.args[1] == "" for c in cases)
  assert any(c.args[0] > 100 for c in cases)


def test_extra_inputs_come_first(pool):
  def extra(rng):
    while True:
      yield [rng.randint(1000, 2000), "extra"], {}

  cases = augment.augment(pool, PAIR, "f", PAIR_SEEDS, CONFIG, extra=extra)
  assert cases[0].source == "extra" and cases[0].args[1] == "extra"
  assert sum(c.source == "extra" for c in cases) >= 5


def test_mutation_only(pool):
  config = dataclasses.replace(CONFIG, candidates_per_kind=0)
  cases = augment.augment(pool, PAIR, "f", PAIR_SEEDS, config)
  assert cases and {c.source for c in cases} == {"mutation"}


SQUARES = """
def f(n):
  x = 3
  for _ in range(n):
    x = x * x
  return x % 1000
"""


def test_huge_ints_end_the_reference_early(pool):
  # Squaring 40 times builds a 2**40-bit int in ~120 trace events: the bit
  # cap ends the call as over budget, not the time limit.
  job = jobs.Job.function(
    SQUARES + augment._COUNTER,
    augment._COUNTED_ENTRY,
    [
      (["f", CONFIG.max_events, augment.MAX_INT_BITS, [n], {}], {})
      for n in (5, 40)
    ],
    timeout_s=8.0,
    test_timeout_s=5.0,
  )
  small, huge = pool.submit(job).result().tests
  assert small.status == "ok" and small.output == [False, pow(3, 32, 1000)]
  assert huge.status == "ok" and huge.output == [True, None]


def test_expected_tests():
  cases = [augment.Case([1], {"k": 2}, (3,))]
  assert augment.expected_tests(cases) == [
    {"args": [1], "kwargs": {"k": 2}, "expected": (3,)}
  ]


def test_gvisor_gives_the_same_cases(pool):
  """The reference runs under gVisor as under the process backend."""
  config = dataclasses.replace(CONFIG, max_tests=10)
  gvisor = dataclasses.replace(SANDBOX, backend="gvisor", pool_size=1)
  with harness.SandboxPool(gvisor) as gvisor_pool:
    got = augment.augment(gvisor_pool, PAIR, "f", PAIR_SEEDS, config)
  assert got == augment.augment(pool, PAIR, "f", PAIR_SEEDS, config)
  assert len(got) == 10
