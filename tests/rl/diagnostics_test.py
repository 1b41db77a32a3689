"""Batch diagnostics (`rl/diagnostics.py`): by length, by turn depth."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.rl import advantages as adv_lib
from codeagent_rl.rl import diagnostics

B, T = 6, 10


def test_terciles_split_the_batch_by_length():
  length = jnp.asarray([5, 1, 9, 3, 7, 2])
  bucket = np.asarray(diagnostics.length_buckets(length))
  np.testing.assert_array_equal(bucket, [1, 0, 2, 1, 2, 0])
  # Ties stay balanced: equal lengths fill the buckets by index.
  tied = np.asarray(diagnostics.length_buckets(jnp.full((6,), 4)))
  np.testing.assert_array_equal(tied, [0, 0, 1, 1, 2, 2])


def _inputs():
  lengths = np.asarray([2, 3, 4, 6, 8, 10])
  pos = np.arange(T)[None, :]
  trainable = pos < lengths[:, None]
  reward = np.asarray([1, 0, 1, 0, 1, 1], np.float32)
  rewards = np.zeros((B, T), np.float32)
  rewards[np.arange(B), lengths - 1] = reward
  rng = np.random.default_rng(0)
  values = np.where(trainable, 0.3 * rng.random((B, T)), 0).astype(np.float32)
  return (
    adv_lib.AdvantageInputs(
      rewards=jnp.asarray(rewards),
      values=jnp.asarray(values),
      trainable=jnp.asarray(trainable),
      truncated=jnp.zeros((B,), bool),
      bootstrap_value=jnp.zeros((B,), jnp.float32),
      group_id=jnp.asarray([0, 0, 0, 1, 1, 1]),
    ),
    jnp.asarray(lengths),
  )


def _cfg(estimator):
  return adv_lib.AdvantageConfig(
    estimator=estimator,
    gamma=1.0,
    lam=0.95,
    lam_critic=0.95,
    lam_length_alpha=0.0,
    credit="token",
    critic_trust="none",
    gae_method="scan",
    group_eps=1e-6,
    whiten=False,
  )


@pytest.mark.parametrize("in_use", ["gae", "rloo"])
def test_by_length_is_each_terciles_mean_and_variance(in_use):
  inputs, length = _inputs()
  got = diagnostics.by_length(inputs, length, _cfg(in_use))
  names = {"gae", "grpo", in_use}
  assert set(got) == {
    f"advantage_by_length/{n}/{b}_{s}"
    for n in names
    for b in diagnostics.BUCKETS
    for s in ("mean", "var")
  }
  mask = np.asarray(inputs.trainable)
  for name in names:
    adv, _ = adv_lib.compute_advantages(inputs, _cfg(name))
    per = (np.asarray(adv) * mask).sum(1) / mask.sum(1)
    for i, bucket in enumerate(diagnostics.BUCKETS):
      rows = per[2 * i : 2 * i + 2]  # lengths ascend with the row index
      key = f"advantage_by_length/{name}/{bucket}"
      np.testing.assert_allclose(got[f"{key}_mean"], rows.mean(), rtol=1e-5)
      np.testing.assert_allclose(
        got[f"{key}_var"], rows.var(), rtol=1e-5, atol=1e-7
      )


def test_turn_index_counts_runs_of_trainable_tokens():
  trainable = np.asarray(
    [
      [0, 0, 1, 1, 0, 1, 0, 0, 1, 1],  # the third turn reaches the end
      [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],  # nothing trainable
      [1, 1, 0, 1, 1, 1, 0, 0, 0, 0],  # starts at column 0, then padding
      [1, 0, 1, 0, 1, 0, 1, 0, 1, 0],  # one-token turns
    ],
    bool,
  )
  got = diagnostics.turn_index(jnp.asarray(trainable))
  assert got.dtype == jnp.int32
  np.testing.assert_array_equal(
    got,
    [
      [0, 0, 1, 1, 0, 2, 0, 0, 3, 3],
      [0] * 10,
      [1, 1, 0, 2, 2, 2, 0, 0, 0, 0],
      [1, 0, 2, 0, 3, 0, 4, 0, 5, 0],
    ],
  )


def test_depth_buckets_follow_the_edges():
  assert diagnostics.DEPTH_BUCKETS == (
    "turn_1",
    "turn_2_3",
    "turn_4_7",
    "turn_8_15",
    "turn_16_31",
    "turn_32_plus",
  )
  turn = jnp.asarray([[0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 60]])
  np.testing.assert_array_equal(
    diagnostics.depth_buckets(turn), [[-1, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]]
  )


def _multi_turn_batch(seed, b=6, t=240):
  """Rows of prompt | (action | observation)* | padding, values, returns.

  Values off the mask are NaN: they must not reach any statistic.
  """
  rng = np.random.default_rng(seed)
  trainable = np.zeros((b, t), bool)
  for i in range(b):
    pos = int(rng.integers(0, 4))  # prompt
    end = int(rng.integers(t // 4, t + 1))  # padding after `end`
    while pos < end:
      run = int(rng.integers(1, 5))
      trainable[i, pos : min(pos + run, end)] = True
      pos += run + int(rng.integers(1, 4))
  returns = rng.normal(size=(b, t)).astype(np.float32)
  values = (0.7 * returns + 0.5 * rng.normal(size=(b, t))).astype(np.float32)
  values[~trainable] = np.nan
  return values, returns, trainable


def _value_by_depth_reference(values, returns, trainable):
  """Straight NumPy: walk each row, then per bucket over its tokens."""
  turn = np.zeros(trainable.shape, int)
  for i, row in enumerate(trainable):
    k = 0
    for j, on in enumerate(row):
      if on and (j == 0 or not row[j - 1]):
        k += 1
      turn[i, j] = k if on else 0
  bounds = [(1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 10**9)]
  out = {}
  for label, (lo, hi) in zip(diagnostics.DEPTH_BUCKETS, bounds, strict=True):
    sel = (turn >= lo) & (turn <= hi)
    v, r = values[sel].astype(np.float64), returns[sel].astype(np.float64)
    key = f"value_by_depth/{label}"
    if sel.any() and r.var() > 0:
      out[f"{key}/explained_variance"] = 1 - (r - v).var() / r.var()
    else:
      out[f"{key}/explained_variance"] = 0.0
    out[f"{key}/value_loss"] = 0.5 * ((v - r) ** 2).mean() if sel.any() else 0
    out[f"{key}/token_share"] = sel.sum() / max(trainable.sum(), 1)
  return out


def test_value_by_depth_matches_numpy_and_jits_once():
  # Jitted, as the learner calls it; two batches of one shape, one trace.
  jitted = jax.jit(chex.assert_max_traces(diagnostics.value_by_depth, n=1))
  for seed in (0, 1):
    values, returns, trainable = _multi_turn_batch(seed)
    want = _value_by_depth_reference(values, returns, trainable)
    got = jitted(
      jnp.asarray(values), jnp.asarray(returns), jnp.asarray(trainable)
    )
    assert set(got) == set(want)
    for key, value in want.items():
      np.testing.assert_allclose(
        got[key], value, rtol=1e-4, atol=1e-6, err_msg=key
      )
    # The batch reaches every bucket, so the comparison covers all of them.
    shares = [
      got[f"value_by_depth/{b}/token_share"] for b in diagnostics.DEPTH_BUCKETS
    ]
    assert min(shares) > 0
    np.testing.assert_allclose(sum(shares), 1.0, rtol=1e-5)


def test_empty_buckets_and_constant_returns_give_zero():
  # Two turns: tokens 1-2 (turn 1, returns constant) and 4-5 (turn 2).
  trainable = np.zeros((2, 8), bool)
  trainable[0, [1, 2, 4, 5]] = True
  values = np.asarray([[9, 1, 2, 9, 3, 6, 9, 9], [9] * 8], np.float32)
  returns = np.asarray([[0, 2, 2, 0, 4, 5, 0, 0], [0] * 8], np.float32)
  value_by_depth = jax.jit(diagnostics.value_by_depth)  # one compile, fast
  got = value_by_depth(
    jnp.asarray(values), jnp.asarray(returns), jnp.asarray(trainable)
  )
  assert all(np.isfinite(v) for v in got.values())
  first, second = "value_by_depth/turn_1", "value_by_depth/turn_2_3"
  assert float(got[f"{first}/explained_variance"]) == 0  # Var[R] = 0
  np.testing.assert_allclose(got[f"{first}/value_loss"], 0.5 * (1 + 0) / 2)
  np.testing.assert_allclose(got[f"{first}/token_share"], 0.5)
  # Turn 2: R - v = (1, -1), Var 1; R = (4, 5), Var 0.25: 1 - 1 / 0.25.
  np.testing.assert_allclose(got[f"{second}/explained_variance"], -3.0)
  np.testing.assert_allclose(got[f"{second}/value_loss"], 0.5)
  np.testing.assert_allclose(got[f"{second}/token_share"], 0.5)
  for label in diagnostics.DEPTH_BUCKETS[2:]:
    for stat in ("explained_variance", "value_loss", "token_share"):
      assert float(got[f"value_by_depth/{label}/{stat}"]) == 0
  # No trainable token at all: every statistic is 0, none NaN.
  none = value_by_depth(
    jnp.asarray(values), jnp.asarray(returns), jnp.zeros((2, 8), bool)
  )
  assert all(float(v) == 0 for v in none.values())
