"""Stage 2: the suite-B gate; min(suite A, suite B); jit and vmap."""

import functools

import chex
import jax
import numpy as np

from codeagent_rl import types
from codeagent_rl.anticheat import names
from codeagent_rl.anticheat import stage2

from .conftest import default_config


def _rewards(suite_a, suite_b, flagged=(), suite_gen=None):
  r = types.Rewards.from_suites(
    suite_a=np.asarray(suite_a),
    suite_b=np.asarray(suite_b),
    executed=np.ones(len(suite_a), bool),
    status=np.zeros(len(suite_a), int),
    num_flags=names.NUM_FLAGS,
    suite_gen=suite_gen,
  )
  flags = np.zeros((len(suite_a), names.NUM_FLAGS), bool)
  total = np.asarray(r.total).copy()
  for i in flagged:
    flags[i, names.FLAG_NAMES.index("process_exit")] = True  # enforced
    total[i] = -1.0  # as stage 1's penalty left it
  return r.replace(stage1_flags=flags, total=total.astype(np.float32))


def test_hand_cases():
  r = _rewards([1.0, 1.0, 0.5, 0.8], [1.0, 0.9, 1.0, 0.95], flagged=[3])
  out = stage2.stage2(r, default_config())
  np.testing.assert_array_equal(out.stage2_ok, [True, False, True, False])
  # Row 3 was rejected by stage 1: its penalty is kept, not replaced.
  np.testing.assert_allclose(out.total, [1.0, 0.0, 0.5, -1.0])
  out.check()


def test_threshold_penalty_and_min():
  r = _rewards([1.0, 1.0, 0.5], [0.9, 0.7, 1.0])
  cfg = default_config(
    stage2_threshold=0.8,
    stage2_action="penalty",
    stage2_penalty=-0.25,
    total_min_suites=True,
  )
  out = stage2.stage2(r, cfg)
  np.testing.assert_array_equal(out.stage2_ok, [True, False, True])
  np.testing.assert_allclose(out.total, [0.9, -0.25, 0.5])
  np.testing.assert_allclose(stage2.gap(r), (0.1 + 0.3 - 0.5) / 3, rtol=1e-5)


def test_jit_and_vmap_agree():
  rng = np.random.default_rng(0)
  r = _rewards(
    rng.uniform(size=9),
    rng.uniform(size=9) ** 0.2,
    flagged=[2],
    suite_gen=rng.uniform(size=9) ** 0.2,
  )
  cfg = default_config(stage2_threshold=0.7, total_min_suites=True)
  fn = functools.partial(stage2.stage2, cfg=cfg)
  eager = fn(r)
  chex.assert_trees_all_close(jax.jit(fn)(r), eager)
  chex.assert_trees_all_close(jax.vmap(fn)(r), eager)


def test_generated_suite_is_demanded_beside_suite_b():
  # Row 1 passes all of suite B but fails one generated test: it loses its
  # stage-2 pass. Row 2 fails suite B though the generated suite passes.
  r = _rewards([1.0, 1.0, 1.0], [1.0, 1.0, 0.9], suite_gen=[1.0, 0.99, 1.0])
  out = stage2.stage2(r, default_config())
  np.testing.assert_array_equal(out.stage2_ok, [True, False, False])
  np.testing.assert_allclose(out.total, [1.0, 0.0, 0.0])


def test_each_suite_meets_the_threshold_on_its_own():
  r = _rewards([1.0, 1.0, 0.5], [0.9, 1.0, 1.0], suite_gen=[0.85, 0.7, 0.9])
  cfg = default_config(stage2_threshold=0.8, total_min_suites=True)
  out = stage2.stage2(r, cfg)
  np.testing.assert_array_equal(out.stage2_ok, [True, False, True])
  np.testing.assert_allclose(out.total, [0.85, 0.0, 0.5])


def test_without_a_generated_suite_stage2_is_unchanged():
  rng = np.random.default_rng(1)
  a, b = rng.uniform(size=7), rng.uniform(size=7) ** 0.3
  b[:3] = 1.0
  cfg = default_config(stage2_threshold=0.9, total_min_suites=True)
  out = stage2.stage2(_rewards(a, b), cfg)
  np.testing.assert_array_equal(out.stage2_ok, b >= 0.9)
  expected = np.where(b >= 0.9, np.minimum(a, b), 0.0)
  np.testing.assert_allclose(out.total, expected, rtol=1e-6)
