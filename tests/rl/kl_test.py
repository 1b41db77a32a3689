"""Tests of codeagent_rl.rl.kl."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.rl import kl


def test_estimators_match_formulas():
  rng = np.random.default_rng(0)
  logp = rng.normal(-2, 0.5, size=(3, 5)).astype(np.float32)
  ref = rng.normal(-2, 0.5, size=(3, 5)).astype(np.float32)
  log_r = ref - logp
  np.testing.assert_allclose(kl.kl_estimate(logp, ref, "k1"), -log_r, rtol=1e-6)
  np.testing.assert_allclose(
    kl.kl_estimate(logp, ref, "k2"), 0.5 * log_r**2, rtol=1e-6
  )
  np.testing.assert_allclose(
    kl.kl_estimate(logp, ref, "k3"),
    np.exp(log_r) - 1 - log_r,
    rtol=1e-5,
    atol=1e-7,
  )
  assert np.all(np.asarray(kl.kl_estimate(logp, ref, "k3")) >= 0)
  with pytest.raises(ValueError, match="unknown estimator 'k4'"):
    kl.kl_estimate(logp, ref, "k4")


def test_k1_and_k3_are_unbiased_k2_close():
  p = jnp.array([0.5, 0.3, 0.15, 0.05])
  q = jnp.array([0.4, 0.4, 0.1, 0.1])
  exact = float(jnp.sum(p * jnp.log(p / q)))
  samples = jax.random.categorical(
    jax.random.PRNGKey(0), jnp.log(p), shape=(1, 400_000)
  )
  logp, ref = jnp.log(p)[samples], jnp.log(q)[samples]
  for name, tol in (("k1", 0.003), ("k3", 0.003), ("k2", 0.01)):
    est = float(jnp.mean(kl.kl_estimate(logp, ref, name)))
    assert est == pytest.approx(exact, abs=tol), name


def test_k3_is_finite_for_extreme_ratios():
  logp = jnp.array([[-80.0, 0.0]])
  ref = jnp.array([[0.0, -80.0]])
  out = kl.kl_estimate(logp, ref, "k3")
  assert bool(jnp.all(jnp.isfinite(out)))


def test_reward_penalty_only_on_trainable_and_without_gradient():
  rewards = jnp.array([[0.0, 0.0, 1.0, 0.0]])
  logp = jnp.array([[-1.0, -1.0, -1.0, -1.0]])
  ref = jnp.array([[-2.0, -2.0, -1.5, -2.0]])
  trainable = jnp.array([[False, True, True, False]])
  out, per_token = kl.kl_reward_penalty(
    rewards, logp, ref, trainable, coef=0.1, estimator="k1"
  )
  np.testing.assert_allclose(out, [[0.0, -0.1, 0.95, 0.0]], rtol=1e-6)
  np.testing.assert_allclose(per_token, [[0.0, 1.0, 0.5, 0.0]], rtol=1e-6)
  grad = jax.grad(
    lambda lp: jnp.sum(
      kl.kl_reward_penalty(rewards, lp, ref, trainable, coef=0.1)[0]
    )
  )(logp)
  np.testing.assert_array_equal(grad, jnp.zeros_like(logp))


def test_kl_loss_value_and_gradient():
  logp = jnp.array([[-1.0, -0.5, -3.0]])
  ref = jnp.array([[-1.5, -0.5, -2.0]])
  mask = jnp.array([[True, True, False]])
  loss = kl.kl_loss(logp, ref, mask, estimator="k3")
  log_r = np.array([-0.5, 0.0])
  np.testing.assert_allclose(
    loss, np.mean(np.exp(log_r) - 1 - log_r), rtol=1e-6
  )
  grad = jax.grad(lambda lp: kl.kl_loss(lp, ref, mask, estimator="k3"))(logp)
  # d k3 / d logp = 1 - exp(ref - logp); averaged over 2 tokens.
  np.testing.assert_allclose(
    grad, [[(1 - np.exp(-0.5)) / 2, 0.0, 0.0]], rtol=1e-5, atol=1e-7
  )
  ref_grad = jax.grad(lambda r: kl.kl_loss(logp, r, mask))(ref)
  np.testing.assert_array_equal(ref_grad, jnp.zeros_like(ref))
