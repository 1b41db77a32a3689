"""Generalised advantage estimation over multi-turn token trajectories.

The MDP steps of a row are its trainable tokens (the ones the policy
produced). Prompt, observation and padding tokens are not steps: they carry
the running advantage and the next value through unchanged, receive advantage
0, and neither their rewards nor their values enter the result. For trainable
positions t_1 < ... < t_n of one row,

  delta_k = r[t_k] + gamma * V_next(k) - V[t_k]
  A_k     = delta_k + gamma * lam * A_{k+1},   A_{n+1} = 0

where V_next(k) = V[t_{k+1}] for k < n and, after the last trainable token,
`bootstrap_value` if the row was truncated by a budget, else 0.

Two implementations give the same numbers: a reverse `lax.scan` (T sequential
steps) and a reverse `lax.associative_scan` over affine maps (O(log T) depth).
"""

from __future__ import annotations

import functools

import chex
import jax
from jax import lax
import jax.numpy as jnp


def place_terminal_reward(scores: jax.Array, trainable: jax.Array) -> jax.Array:
  """Puts each row's score on its last trainable token.

  The score lands on the last token the policy produced, also when the row
  ends with observation or padding tokens. A row without trainable tokens gets
  no reward.

  Args:
    scores: [B] per-trajectory scalar reward.
    trainable: [B, T] bool (or 0/1) mask of policy tokens.

  Returns:
    [B, T] float32 rewards, zero everywhere except the last trainable token.
  """
  chex.assert_rank(trainable, 2)
  chex.assert_shape(scores, trainable.shape[:1])
  mask = trainable.astype(bool)
  t = mask.shape[1]
  last = t - 1 - jnp.argmax(mask[:, ::-1], axis=1)
  has_any = jnp.any(mask, axis=1)
  at_last = (jnp.arange(t)[None, :] == last[:, None]) & has_any[:, None]
  return jnp.where(at_last, scores.astype(jnp.float32)[:, None], 0.0)


def _terminal_value(
  batch: int,
  truncated: jax.Array | None,
  bootstrap_value: jax.Array | None,
) -> jax.Array:
  """[B] value after the last trainable token: bootstrap where truncated."""
  if bootstrap_value is None:
    if truncated is not None:
      # A truncated row with no value to bootstrap from would silently be
      # treated as terminal, which biases the critic on long trajectories.
      raise ValueError(
        "compute_gae got `truncated` without `bootstrap_value`; pass the"
        " critic value where each truncated trajectory stopped."
      )
    return jnp.zeros((batch,), jnp.float32)
  chex.assert_shape(bootstrap_value, (batch,))
  bootstrap_value = bootstrap_value.astype(jnp.float32)
  if truncated is None:
    raise ValueError(
      "compute_gae got `bootstrap_value` without `truncated`; pass which"
      " rows were stopped by a budget."
    )
  chex.assert_shape(truncated, (batch,))
  return jnp.where(truncated.astype(bool), bootstrap_value, 0.0)


def _gae_scan_step(carry, inputs, *, gamma, lam):
  """One reverse step: a trainable token updates the carry, others pass it."""
  next_value, next_adv = carry
  reward, value, mask = inputs
  delta = reward + gamma * next_value - value
  adv = delta + gamma * lam * next_adv
  carry = (jnp.where(mask, value, next_value), jnp.where(mask, adv, next_adv))
  return carry, jnp.where(mask, adv, 0.0)


def _gae_scan(rewards, values, mask, terminal_value, gamma, lam):
  """[B, T] advantages by a reverse `lax.scan` over time."""
  step = functools.partial(_gae_scan_step, gamma=gamma, lam=lam)
  init = (terminal_value, jnp.zeros_like(terminal_value))
  _, adv_tb = lax.scan(step, init, (rewards.T, values.T, mask.T), reverse=True)
  return adv_tb.T


def _compose_affine(later, earlier):
  """Composes x -> b + c * x maps: `earlier` applied after `later`.

  `associative_scan(..., reverse=True)` folds from the end of the sequence,
  so the accumulated operand is the map of later positions.
  """
  c_later, b_later = later
  c_earlier, b_earlier = earlier
  return c_earlier * c_later, b_earlier + c_earlier * b_later


def _reverse_affine_scan(c, b, x_end):
  """Solves x_t = b_t + c_t * x_{t+1} along axis 1 with x_T = x_end ([B])."""
  c_acc, b_acc = lax.associative_scan(
    _compose_affine, (c, b), reverse=True, axis=1
  )
  return b_acc + c_acc * x_end[:, None]


def _gae_associative(rewards, values, mask, terminal_value, gamma, lam):
  """[B, T] advantages by two reverse associative scans over affine maps."""
  # y_t: value of the first trainable token at or after t (terminal if none).
  held_value = _reverse_affine_scan(
    jnp.where(mask, 0.0, 1.0), jnp.where(mask, values, 0.0), terminal_value
  )
  next_value = jnp.concatenate(
    [held_value[:, 1:], terminal_value[:, None]], axis=1
  )
  delta = jnp.where(mask, rewards + gamma * next_value - values, 0.0)
  decay = jnp.where(mask, gamma * lam, 1.0)
  adv = _reverse_affine_scan(decay, delta, jnp.zeros_like(terminal_value))
  return jnp.where(mask, adv, 0.0)


GAE_METHODS = {
  "scan": _gae_scan,
  "associative": _gae_associative,
}


def compute_gae(
  rewards: jax.Array,
  values: jax.Array,
  trainable: jax.Array,
  *,
  gamma: float,
  lam: float,
  truncated: jax.Array | None = None,
  bootstrap_value: jax.Array | None = None,
  method: str = "scan",
) -> tuple[jax.Array, jax.Array]:
  """GAE advantages and value targets over trainable tokens.

  Args:
    rewards: [B, T] per-token rewards; entries at non-trainable positions are
      ignored.
    values: [B, T] critic values; entries at non-trainable positions are
      ignored.
    trainable: [B, T] bool (or 0/1) mask of policy tokens, the MDP steps.
    gamma: discount per MDP step.
    lam: GAE lambda.
    truncated: [B] bool, rows stopped by a budget. Required together with
      `bootstrap_value`.
    bootstrap_value: [B] critic value where a truncated row stopped; used as
      the next value after its last trainable token.
    method: "scan" (reverse `lax.scan`) or "associative"
      (`lax.associative_scan`). They agree to float32 rounding.

  Returns:
    (advantages, returns), both [B, T] float32 and zero at non-trainable
    positions; `returns = advantages + values` at trainable positions.
  """
  if method not in GAE_METHODS:
    raise ValueError(
      f"compute_gae: unknown method {method!r}; expected one of"
      f" {sorted(GAE_METHODS)}."
    )
  chex.assert_rank([rewards, values, trainable], 2)
  chex.assert_equal_shape([rewards, values, trainable])
  mask = trainable.astype(bool)
  values = values.astype(jnp.float32)
  rewards = jnp.where(mask, rewards.astype(jnp.float32), 0.0)
  values = jnp.where(mask, values, 0.0)
  terminal_value = _terminal_value(mask.shape[0], truncated, bootstrap_value)
  advantages = GAE_METHODS[method](
    rewards, values, mask, terminal_value, gamma, lam
  )
  returns = jnp.where(mask, advantages + values, 0.0)
  return advantages, returns
