"""Advantages by episode length (`rl/diagnostics.py`)."""

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
