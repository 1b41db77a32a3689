"""Tests of codeagent_rl.rl.gae against hand-worked cases and a NumPy loop."""

import functools
import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.rl import gae
from tests.helpers import gae_reference

METHODS = sorted(gae.GAE_METHODS)

# Eager associative scans dispatch op by op and are slow; jit like callers do.
compute_gae = jax.jit(gae.compute_gae, static_argnames=("method",))


numpy_gae = gae_reference.numpy_gae
random_ragged = gae_reference.random_ragged


@pytest.mark.parametrize("method", METHODS)
def test_single_turn_hand_worked(method):
  # prompt, 3 action tokens, padding. gamma=0.5, lam=0.5.
  trainable = np.array([[0, 1, 1, 1, 0]], bool)
  rewards = np.array([[9.0, 0.0, 0.0, 1.0, 9.0]], np.float32)
  values = np.array([[9.0, 0.5, 0.25, 0.5, 9.0]], np.float32)
  adv, ret = compute_gae(
    rewards, values, trainable, gamma=0.5, lam=0.5, method=method
  )
  # d3 = 1 + 0 - 0.5 = 0.5;        A3 = 0.5
  # d2 = 0 + 0.5*0.5 - 0.25 = 0;   A2 = 0 + 0.25*0.5 = 0.125
  # d1 = 0 + 0.5*0.25 - 0.5 = -0.375; A1 = -0.375 + 0.25*0.125 = -0.34375
  np.testing.assert_allclose(adv, [[0.0, -0.34375, 0.125, 0.5, 0.0]], atol=1e-6)
  np.testing.assert_allclose(ret, [[0.0, 0.15625, 0.375, 1.0, 0.0]], atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_two_turns_with_observation_between(method):
  # [a a o o a] then one observation token at the end (row ends on obs).
  trainable = np.array([[1, 1, 0, 0, 1, 0]], bool)
  rewards = gae.place_terminal_reward(jnp.array([1.0]), trainable)
  np.testing.assert_allclose(rewards, [[0, 0, 0, 0, 1, 0]])
  # Observation values are garbage on purpose; they must be skipped.
  values = np.array([[0.2, 0.4, 100.0, -100.0, 0.8, 55.0]], np.float32)
  adv, _ = compute_gae(
    rewards, values, trainable, gamma=1.0, lam=1.0, method=method
  )
  # gamma = lam = 1: A_t = R - V_t with R = 1 for every trainable token.
  np.testing.assert_allclose(adv, [[0.8, 0.6, 0, 0, 0.2, 0]], atol=1e-6)
  adv, _ = compute_gae(
    rewards, values, trainable, gamma=1.0, lam=0.0, method=method
  )
  # lam = 0: one-step TD errors, next value taken across the observation.
  # pos4: 1 - 0.8; pos1: 0.8 - 0.4 (value of pos4, not of pos2); pos0: 0.2.
  np.testing.assert_allclose(adv, [[0.2, 0.4, 0, 0, 0.2, 0]], atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_truncated_bootstraps(method):
  trainable = np.array([[1, 1, 0], [1, 1, 0]], bool)
  rewards = np.zeros((2, 3), np.float32)
  values = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]], np.float32)
  adv, ret = compute_gae(
    rewards,
    values,
    trainable,
    gamma=0.9,
    lam=1.0,
    truncated=np.array([True, False]),
    bootstrap_value=np.array([2.0, 2.0], np.float32),
    method=method,
  )
  # Row 0: returns are discounted bootstrap: [0.81 * 2, 0.9 * 2].
  np.testing.assert_allclose(ret[0], [1.62, 1.8, 0.0], atol=1e-6)
  # Row 1 is terminal: bootstrap ignored, all returns 0.
  np.testing.assert_allclose(ret[1], [0.0, 0.0, 0.0], atol=1e-6)
  np.testing.assert_allclose(adv[1], [-0.5, -0.5, 0.0], atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_row_without_trainable_tokens(method):
  trainable = np.zeros((2, 4), bool)
  trainable[1, 1] = True
  rewards = gae.place_terminal_reward(jnp.array([5.0, 1.0]), trainable)
  np.testing.assert_allclose(rewards[0], 0.0)
  adv, ret = compute_gae(
    rewards,
    np.ones((2, 4), np.float32),
    trainable,
    gamma=1.0,
    lam=0.95,
    truncated=np.array([True, False]),
    bootstrap_value=np.array([3.0, 0.0], np.float32),
    method=method,
  )
  assert np.all(np.asarray(adv[0]) == 0) and np.all(np.asarray(ret[0]) == 0)
  np.testing.assert_allclose(adv[1], [0.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize(
  "method,gamma,lam",
  list(itertools.product(METHODS, [1.0, 0.99], [1.0, 0.95, 0.0])),
)
def test_parity_with_numpy_loop(method, gamma, lam):
  rng = np.random.default_rng(int(gamma * 100 + lam * 10))
  rewards, values, trainable, truncated, bootstrap = random_ragged(rng, 16, 97)
  adv, ret = compute_gae(
    rewards,
    values,
    trainable,
    gamma=gamma,
    lam=lam,
    truncated=truncated,
    bootstrap_value=bootstrap,
    method=method,
  )
  ref_adv, ref_ret = numpy_gae(
    rewards, values, trainable, gamma, lam, truncated, bootstrap
  )
  np.testing.assert_allclose(adv, ref_adv, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(ret, ref_ret, rtol=1e-4, atol=1e-4)


def test_methods_agree_on_long_rows():
  rng = np.random.default_rng(7)
  rewards, values, trainable, truncated, bootstrap = random_ragged(rng, 4, 4096)
  kwargs = dict(
    gamma=0.999, lam=0.95, truncated=truncated, bootstrap_value=bootstrap
  )
  a_scan, r_scan = compute_gae(
    rewards, values, trainable, method="scan", **kwargs
  )
  a_assoc, r_assoc = compute_gae(
    rewards, values, trainable, method="associative", **kwargs
  )
  np.testing.assert_allclose(a_scan, a_assoc, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(r_scan, r_assoc, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", METHODS)
def test_non_trainable_values_and_rewards_change_nothing(method):
  rng = np.random.default_rng(3)
  rewards, values, trainable, truncated, bootstrap = random_ragged(rng, 8, 64)
  kwargs = dict(
    gamma=0.99,
    lam=0.95,
    truncated=truncated,
    bootstrap_value=bootstrap,
    method=method,
  )
  adv, ret = compute_gae(rewards, values, trainable, **kwargs)
  noise = rng.normal(size=values.shape).astype(np.float32) * 1e3
  values2 = np.where(trainable, values, noise)
  rewards2 = np.where(trainable, rewards, -noise)
  values2[~trainable][:3] = np.nan  # even NaN off the mask is ignored
  adv2, ret2 = compute_gae(rewards2, values2, trainable, **kwargs)
  np.testing.assert_array_equal(adv, adv2)
  np.testing.assert_array_equal(ret, ret2)


def test_nan_off_mask_is_ignored():
  trainable = np.array([[0, 1, 0, 1, 0]], bool)
  values = np.array([[np.nan, 0.5, np.nan, 0.25, np.inf]], np.float32)
  rewards = np.array([[np.nan, 0.0, np.inf, 1.0, np.nan]], np.float32)
  for method in METHODS:
    adv, ret = compute_gae(
      rewards, values, trainable, gamma=1.0, lam=1.0, method=method
    )
    assert np.all(np.isfinite(adv)) and np.all(np.isfinite(ret)), method
    np.testing.assert_allclose(adv, [[0, 0.5, 0, 0.75, 0]], atol=1e-6)


def test_place_terminal_reward_cases():
  trainable = np.array(
    [
      [1, 1, 1, 0, 0],  # ends in padding
      [0, 1, 0, 1, 0],  # ends on an observation token
      [1, 1, 1, 1, 1],  # ends on a trainable token
      [0, 0, 0, 0, 0],  # nothing trainable
    ],
    bool,
  )
  out = gae.place_terminal_reward(jnp.array([1.0, 2.0, 3.0, 4.0]), trainable)
  expected = np.zeros((4, 5), np.float32)
  expected[0, 2] = 1.0
  expected[1, 3] = 2.0
  expected[2, 4] = 3.0
  np.testing.assert_array_equal(out, expected)


def test_place_terminal_reward_matches_loop_on_random_masks():
  rng = np.random.default_rng(11)
  _, _, trainable, _, _ = random_ragged(rng, 32, 50)
  scores = rng.normal(size=32).astype(np.float32)
  out = np.asarray(gae.place_terminal_reward(scores, trainable))
  for i in range(32):
    steps = np.flatnonzero(trainable[i])
    expected = np.zeros(50, np.float32)
    if steps.size:
      expected[steps[-1]] = scores[i]
    np.testing.assert_array_equal(out[i], expected)


def test_bad_arguments_raise_clear_errors():
  x = np.zeros((2, 3), np.float32)
  m = np.ones((2, 3), bool)
  with pytest.raises(ValueError, match="unknown method 'fast'"):
    gae.compute_gae(x, x, m, gamma=1.0, lam=1.0, method="fast")
  with pytest.raises(ValueError, match="without `bootstrap_value`"):
    gae.compute_gae(x, x, m, gamma=1.0, lam=1.0, truncated=np.ones(2, bool))
  with pytest.raises(ValueError, match="without `truncated`"):
    gae.compute_gae(x, x, m, gamma=1.0, lam=1.0, bootstrap_value=np.ones(2))
  with pytest.raises(AssertionError):
    gae.compute_gae(x, np.zeros((2, 4)), m, gamma=1.0, lam=1.0)


@pytest.mark.parametrize("method", METHODS)
def test_jitted_gae_traces_once_per_shape(method):
  chex.clear_trace_counter()

  @jax.jit
  @chex.assert_max_traces(n=1)
  def step(rewards, values, trainable, truncated, bootstrap, gamma, lam):
    return gae.compute_gae(
      rewards,
      values,
      trainable,
      gamma=gamma,
      lam=lam,
      truncated=truncated,
      bootstrap_value=bootstrap,
      method=method,
    )

  rng = np.random.default_rng(0)
  for _ in range(3):
    rewards, values, trainable, truncated, bootstrap = random_ragged(rng, 4, 32)
    adv, _ = step(rewards, values, trainable, truncated, bootstrap, 0.99, 0.95)
    ref, _ = numpy_gae(
      rewards, values, trainable, 0.99, 0.95, truncated, bootstrap
    )
    np.testing.assert_allclose(adv, ref, rtol=1e-4, atol=1e-4)


def test_jitted_place_terminal_reward_traces_once():
  chex.clear_trace_counter()
  fn = jax.jit(chex.assert_max_traces(gae.place_terminal_reward, n=1))
  rng = np.random.default_rng(1)
  for _ in range(3):
    _, _, trainable, _, _ = random_ragged(rng, 4, 16)
    fn(rng.normal(size=4).astype(np.float32), trainable)


def test_partial_binding_of_hyperparameters_jits():
  fn = jax.jit(functools.partial(gae.compute_gae, gamma=0.9, lam=0.9))
  adv, _ = fn(
    jnp.ones((1, 3)), jnp.zeros((1, 3)), jnp.array([[True, False, True]])
  )
  np.testing.assert_allclose(adv, [[1 + 0.81, 0, 1]], atol=1e-6)
