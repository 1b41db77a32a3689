"""Stage 2: the suite-B gate; min(suite A, suite B); jit and vmap."""

import functools

import chex
import jax
import numpy as np

from codeagent_rl import types
from codeagent_rl.anticheat import names
from codeagent_rl.anticheat import stage2

from .conftest import default_config


def _rewards(suite_a, suite_b, flagged=()):
  r = types.Rewards.from_suites(
    suite_a=np.asarray(suite_a),
    suite_b=np.asarray(suite_b),
    executed=np.ones(len(suite_a), bool),
    status=np.zeros(len(suite_a), int),
    num_flags=names.NUM_FLAGS,
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
  r = _rewards(rng.uniform(size=9), rng.uniform(size=9) ** 0.2, flagged=[2])
  cfg = default_config(stage2_threshold=0.7, total_min_suites=True)
  fn = functools.partial(stage2.stage2, cfg=cfg)
  eager = fn(r)
  chex.assert_trees_all_close(jax.jit(fn)(r), eager)
  chex.assert_trees_all_close(jax.vmap(fn)(r), eager)
