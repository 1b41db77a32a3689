"""KL(policy || reference) estimators, as a reward penalty or a loss term.

With tokens sampled from the policy and log r = ref_logp - logp:
  k1 = -log r                  unbiased, can be negative, high variance
  k2 = 0.5 * (log r)^2         biased, low variance, >= 0
  k3 = r - 1 - log r           unbiased, >= 0, low variance
(J. Schulman, "Approximating KL divergence", 2020.) The usual pairing, which
the config defaults follow: k1 subtracted from the per-token reward, k3 added
to the loss.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from codeagent_rl.rl import losses

# exp() of a log-ratio beyond this overflows float32 soon after; a token with
# such a ratio already dominates the penalty, so clamping changes no decision.
_MAX_LOG_RATIO = 20.0


def _k1(log_r: jax.Array) -> jax.Array:
  return -log_r


def _k2(log_r: jax.Array) -> jax.Array:
  return 0.5 * jnp.square(log_r)


def _k3(log_r: jax.Array) -> jax.Array:
  log_r = jnp.clip(log_r, -_MAX_LOG_RATIO, _MAX_LOG_RATIO)
  return jnp.exp(log_r) - 1.0 - log_r


KL_ESTIMATORS = {"k1": _k1, "k2": _k2, "k3": _k3}


def kl_estimate(
  logp: jax.Array, ref_logp: jax.Array, estimator: str
) -> jax.Array:
  """Per-token estimate of KL(policy || reference).

  Args:
    logp: [B, T] log-probs of the sampled tokens under the policy.
    ref_logp: [B, T] log-probs of the same tokens under the reference.
    estimator: "k1", "k2" or "k3".

  Returns:
    [B, T] float32 per-token estimates (not masked).
  """
  if estimator not in KL_ESTIMATORS:
    raise ValueError(
      f"kl_estimate: unknown estimator {estimator!r}; expected one of"
      f" {sorted(KL_ESTIMATORS)}."
    )
  chex.assert_equal_shape([logp, ref_logp])
  log_r = ref_logp.astype(jnp.float32) - logp.astype(jnp.float32)
  return KL_ESTIMATORS[estimator](log_r)


def kl_reward_penalty(
  rewards: jax.Array,
  logp: jax.Array,
  ref_logp: jax.Array,
  trainable: jax.Array,
  *,
  coef: float,
  estimator: str = "k1",
) -> tuple[jax.Array, jax.Array]:
  """Subtracts coef * KL from the reward of every trainable token.

  Args:
    rewards: [B, T] token rewards (e.g. from `gae.place_terminal_reward`).
    logp: [B, T] rollout log-probs of the policy.
    ref_logp: [B, T] log-probs under the reference (SFT) model.
    trainable: [B, T] trainable mask; other tokens get no penalty.
    coef: penalty coefficient (>= 0).
    estimator: "k1", "k2" or "k3".

  Returns:
    (penalised rewards [B, T], per-token KL [B, T] zero off the mask). No
    gradient flows through the penalty.
  """
  chex.assert_equal_shape([rewards, logp, ref_logp, trainable])
  kl = jax.lax.stop_gradient(kl_estimate(logp, ref_logp, estimator))
  kl = jnp.where(trainable.astype(bool), kl, 0.0)
  return rewards.astype(jnp.float32) - coef * kl, kl


def kl_loss(
  logp: jax.Array,
  ref_logp: jax.Array,
  mask: jax.Array,
  *,
  estimator: str = "k3",
  agg_mode: str = "token_mean",
  norm: losses.Normalizer | None = None,
  norm_length: float | None = None,
) -> jax.Array:
  """KL(policy || reference) as a loss term, aggregated like the PPO loss.

  Args:
    logp: [B, T] log-probs under the current policy (gradient flows).
    ref_logp: [B, T] log-probs under the reference (no gradient).
    mask: [B, T] trainable mask.
    estimator: "k1", "k2" or "k3".
    agg_mode: one of `losses.AGG_MODES`.
    norm: denominators of the full minibatch (for gradient accumulation).
    norm_length: constant of the `seq_mean_token_sum_norm` mode.

  Returns:
    Scalar loss (multiply by the KL coefficient at the call site).
  """
  kl = kl_estimate(logp, jax.lax.stop_gradient(ref_logp), estimator)
  return losses.aggregate(
    kl, mask, agg_mode, norm=norm, norm_length=norm_length
  )
