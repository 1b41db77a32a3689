"""Tests of per-row and length-adaptive lambdas and turn-level credit (gae)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.rl import gae
from tests.helpers import gae_reference

METHODS = sorted(gae.GAE_METHODS)
compute_gae = jax.jit(gae.compute_gae, static_argnames=("method",))
compute_turn_gae = jax.jit(gae.compute_turn_gae, static_argnames=("method",))


def numpy_gae_rows(rewards, values, trainable, gamma, lams, truncated, boot):
  """The reference loop with one lambda per row."""
  adv = np.zeros(rewards.shape)
  ret = np.zeros(rewards.shape)
  for i, lam in enumerate(lams):
    a, r = gae_reference.numpy_gae(
      rewards[i : i + 1],
      values[i : i + 1],
      trainable[i : i + 1],
      gamma,
      float(lam),
      truncated[i : i + 1],
      boot[i : i + 1],
    )
    adv[i], ret[i] = a[0], r[0]
  return adv, ret


def numpy_turn_gae(rewards, values, trainable, gamma, lam, truncated, boot):
  """Reference: lists of turns per row, GAE over them, spread to tokens."""
  adv = np.zeros(rewards.shape)
  ret = np.zeros(rewards.shape)
  for i in range(rewards.shape[0]):
    turns, current = [], []
    for t in range(rewards.shape[1]):
      if trainable[i, t]:
        current.append(t)
      elif current:
        turns.append(current)
        current = []
    if current:
      turns.append(current)
    next_value = boot[i] if truncated[i] else 0.0
    running = 0.0
    for turn in turns[::-1]:
      value = values[i, turn[0]]
      reward = sum(rewards[i, t] for t in turn)
      running = reward + gamma * next_value - value + gamma * lam * running
      adv[i, turn] = running
      ret[i, turn] = running + value
      next_value = value
  return adv, ret


@pytest.mark.parametrize("method", METHODS)
def test_per_row_lambda_matches_one_row_at_a_time(method):
  rng = np.random.default_rng(5)
  rewards, values, trainable, truncated, boot = gae_reference.random_ragged(
    rng, 12, 80
  )
  lams = rng.random(12).astype(np.float32)
  lams[:2] = (0.0, 1.0)
  adv, ret = compute_gae(
    rewards,
    values,
    trainable,
    gamma=0.99,
    lam=jnp.asarray(lams),
    truncated=truncated,
    bootstrap_value=boot,
    method=method,
  )
  want_adv, want_ret = numpy_gae_rows(
    rewards, values, trainable, 0.99, lams, truncated, boot
  )
  np.testing.assert_allclose(adv, want_adv, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(ret, want_ret, rtol=1e-4, atol=1e-4)


def test_a_scalar_and_equal_per_row_lambdas_agree():
  rng = np.random.default_rng(6)
  rewards, values, trainable, truncated, boot = gae_reference.random_ragged(
    rng, 6, 40
  )
  kw = dict(truncated=truncated, bootstrap_value=boot, gamma=1.0)
  for method in METHODS:
    a, r = compute_gae(rewards, values, trainable, lam=0.9, method=method, **kw)
    b, s = compute_gae(
      rewards, values, trainable, lam=jnp.full((6,), 0.9), method=method, **kw
    )
    np.testing.assert_allclose(a, b, atol=1e-6)
    np.testing.assert_allclose(r, s, atol=1e-6)


def test_a_lambda_outside_the_unit_interval_is_refused():
  x = np.zeros((1, 3), np.float32)
  with pytest.raises(ValueError, match="lambda 1.5"):
    gae.compute_gae(x, x, np.ones((1, 3), bool), gamma=1.0, lam=1.5)


def test_length_adaptive_lambda_formula_and_clamp():
  n = jnp.asarray([0, 10, 20, 40, 2000])
  lam = np.asarray(gae.length_adaptive_lambda(n, 0.05))
  # alpha * n = 0, 0.5, 1, 2, 100: 1 - 1/(alpha n) clamped to [0, 1].
  np.testing.assert_allclose(lam, [0.0, 0.0, 0.0, 0.5, 0.99], atol=1e-6)
  with pytest.raises(ValueError, match="alpha=0"):
    gae.length_adaptive_lambda(n, 0.0)


def test_length_adaptive_lambda_weighs_the_first_token_alike_at_any_length():
  """The first token keeps about e^(-1/alpha) of R, whatever the length.

  (1 - 1/(alpha n))^n -> e^(-1/alpha): the horizon is a fixed share of the
  row. With one lambda of 0.95 per token, a 2,000-token row's first token
  gets 0.95^1999 (about 1e-45) of the terminal reward and a 200-token
  row's 3.6e-5.
  """
  alpha = 0.5
  weights = []
  for n in (200, 2000):
    trainable = np.ones((1, n), bool)
    rewards = np.zeros((1, n), np.float32)
    rewards[0, -1] = 1.0
    values = np.zeros((1, n), np.float32)
    lam = gae.length_adaptive_lambda(jnp.asarray([n]), alpha)
    adv, _ = compute_gae(rewards, values, trainable, gamma=1.0, lam=lam)
    weights.append(float(adv[0, 0]))
    fixed, _ = compute_gae(rewards, values, trainable, gamma=1.0, lam=0.95)
    assert float(fixed[0, 0]) < 1e-4
  np.testing.assert_allclose(weights, np.exp(-1 / alpha), rtol=0.05)


@pytest.mark.parametrize("method", METHODS)
def test_turn_credit_hand_worked(method):
  # prompt | turn 1 (2 tokens) | obs | turn 2 (3 tokens) | padding.
  trainable = np.array([[0, 1, 1, 0, 1, 1, 1, 0]], bool)
  rewards = np.array([[9, -0.1, -0.1, 9, 0.0, -0.1, 1.0, 9]], np.float32)
  values = np.array([[9, 0.4, 7, 9, 0.6, 7, 7, 9]], np.float32)
  adv, ret = compute_turn_gae(
    rewards, values, trainable, gamma=1.0, lam=0.5, method=method
  )
  # turn 2: r = 0.9, V = 0.6: delta = 0.3, A = 0.3, R = 0.9.
  # turn 1: r = -0.2, V = 0.4: delta = -0.2 + 0.6 - 0.4 = 0, A = 0.15.
  np.testing.assert_allclose(
    adv, [[0, 0.15, 0.15, 0, 0.3, 0.3, 0.3, 0]], atol=1e-6
  )
  np.testing.assert_allclose(
    ret, [[0, 0.55, 0.55, 0, 0.9, 0.9, 0.9, 0]], atol=1e-6
  )


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("lam", [1.0, 0.9, 0.0])
def test_turn_credit_parity_with_numpy_loop(method, lam):
  rng = np.random.default_rng(int(lam * 10) + 1)
  rewards, values, trainable, truncated, boot = gae_reference.random_ragged(
    rng, 16, 97
  )
  adv, ret = compute_turn_gae(
    rewards,
    values,
    trainable,
    gamma=0.99,
    lam=lam,
    truncated=truncated,
    bootstrap_value=boot,
    method=method,
  )
  want_adv, want_ret = numpy_turn_gae(
    rewards, values, trainable, 0.99, lam, truncated, boot
  )
  np.testing.assert_allclose(adv, want_adv, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(ret, want_ret, rtol=1e-4, atol=1e-4)


def test_turn_credit_reads_only_each_turns_first_value():
  rng = np.random.default_rng(9)
  rewards, values, trainable, truncated, boot = gae_reference.random_ragged(
    rng, 8, 64
  )
  kw = dict(gamma=1.0, lam=0.8, truncated=truncated, bootstrap_value=boot)
  adv, ret = compute_turn_gae(rewards, values, trainable, **kw)
  starts = np.asarray(gae.turn_starts(trainable))
  noisy = np.where(starts, values, rng.normal(size=values.shape) * 1e3)
  adv2, ret2 = compute_turn_gae(
    rewards, noisy.astype(np.float32), trainable, **kw
  )
  np.testing.assert_array_equal(adv, adv2)
  np.testing.assert_array_equal(ret, ret2)


def test_turn_and_token_credit_agree_when_every_turn_is_one_token():
  rng = np.random.default_rng(10)
  b, t = 6, 30
  trainable = np.zeros((b, t), bool)
  trainable[:, 3:28:2] = True  # one action token, one observation token
  rewards = rng.normal(size=(b, t)).astype(np.float32)
  values = rng.normal(size=(b, t)).astype(np.float32)
  truncated = rng.random(b) < 0.5
  boot = rng.normal(size=b).astype(np.float32)
  kw = dict(gamma=0.97, lam=0.9, truncated=truncated, bootstrap_value=boot)
  a_tok, r_tok = compute_gae(rewards, values, trainable, **kw)
  a_turn, r_turn = compute_turn_gae(rewards, values, trainable, **kw)
  np.testing.assert_allclose(a_tok, a_turn, atol=1e-5)
  np.testing.assert_allclose(r_tok, r_turn, atol=1e-5)


def test_turn_credit_reaches_the_first_turn_of_a_long_episode():
  """50 turns of 40 tokens: per token 0.95 loses the reward, per turn not."""
  turns, width = 50, 40
  row = np.zeros(turns * (width + 5), bool)
  for k in range(turns):
    row[k * (width + 5) : k * (width + 5) + width] = True
  trainable = row[None]
  rewards = np.asarray(gae.place_terminal_reward(jnp.ones(1), trainable))
  values = np.zeros(trainable.shape, np.float32)
  tok, _ = compute_gae(rewards, values, trainable, gamma=1.0, lam=0.95)
  turn, _ = compute_turn_gae(rewards, values, trainable, gamma=1.0, lam=0.95)
  assert float(tok[0, 0]) < 1e-30
  np.testing.assert_allclose(float(turn[0, 0]), 0.95**49, rtol=1e-4)


def test_turn_helpers():
  trainable = np.array([[1, 1, 0, 1, 0, 0, 1, 1, 1]], bool)
  np.testing.assert_array_equal(
    gae.turn_starts(trainable), [[1, 0, 0, 1, 0, 0, 1, 0, 0]]
  )
  x = np.arange(1, 10, dtype=np.float32)[None]
  np.testing.assert_allclose(
    gae.turn_sums(x, trainable), [[3, 0, 0, 4, 0, 0, 24, 0, 0]]
  )
  np.testing.assert_allclose(
    gae.spread_over_turns(x, trainable), [[1, 1, 0, 4, 0, 0, 7, 7, 7]]
  )
