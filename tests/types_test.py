"""Tests of codeagent_rl.types."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl import types


def make_batch(b=3, t=5):
  return types.TrajectoryBatch(
    tokens=jnp.zeros((b, t), jnp.int32),
    trainable=jnp.zeros((b, t), bool),
    valid=jnp.ones((b, t), bool),
    length=jnp.full((b,), t, jnp.int32),
    truncated=jnp.zeros((b,), bool),
    group_id=jnp.arange(b, dtype=jnp.int32),
  )


def test_trajectory_batch_is_a_pytree_and_checks_shapes():
  batch = make_batch()
  batch.check()
  assert batch.shape == (3, 5)
  leaves = jax.tree.leaves(batch)
  assert len(leaves) == 6
  doubled = jax.jit(lambda x: x.replace(length=x.length * 2))(batch)
  np.testing.assert_array_equal(doubled.length, [10, 10, 10])
  with pytest.raises(AssertionError):
    batch.replace(valid=jnp.zeros((3, 4), bool)).check()
  with pytest.raises(AssertionError):
    batch.replace(truncated=jnp.zeros((3,), jnp.float32)).check()


def test_rewards_from_suites_and_check():
  r = types.Rewards.from_suites(
    suite_a=np.array([1.0, 0.5]),
    suite_b=np.array([1.0, 0.0]),
    executed=np.array([True, True]),
    status=np.array([types.JobStatus.OK, types.JobStatus.TIMEOUT]),
    num_flags=4,
  )
  r.check()
  assert r.stage1_flags.shape == (2, 4)
  np.testing.assert_array_equal(r.total, [1.0, 0.5])
  np.testing.assert_array_equal(r.stage2_ok, [True, True])
  vmapped = jax.vmap(lambda x: x.replace(total=x.total * x.suite_b))(r)
  np.testing.assert_array_equal(vmapped.total, [1.0, 0.0])
  with pytest.raises(AssertionError):
    r.replace(stage1_flags=jnp.zeros((3, 4), bool)).check()


def test_job_status_codes_are_stable():
  # Stored as ints in logs and checkpoints: renumbering would corrupt them.
  assert [s.value for s in types.JobStatus] == list(range(7))
  assert types.JobStatus(1).name == "TIMEOUT"
