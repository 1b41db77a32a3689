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

`lam` may differ per row (a [B] array): the length-adaptive lambda of VAPO
gives each row its own. Advantages and value targets may use different
lambdas (`advantages.AdvantageConfig.lam_critic`): call `compute_gae` once
per lambda; the recursion is the same.

Two implementations give the same numbers: a reverse `lax.scan` (T sequential
steps) and a reverse `lax.associative_scan` over affine maps (O(log T) depth).

Turn-level credit (`compute_turn_gae`): the MDP steps are the agent's turns
instead of its tokens. A turn is a maximal run of trainable tokens (the
observation between two actions is never trainable, so no new field is
needed). The state of turn k is the one in which its first token is
produced, so its value is the critic's value at that token; its reward is
the sum of the token rewards of its tokens (the terminal score sits in the
last turn, per-token KL penalties add up per turn). GAE runs over those
steps with the same recursion, terminal rule and truncation bootstrap, and
every token of a turn gets its turn's advantage and value target. With
turn credit a lambda below 1 discounts credit per turn, not per token: the
terminal reward reaches the first turn of a 50-turn episode weighted
lam^49, not lam^2000.
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
  """[B, T] advantages by a reverse `lax.scan` over time; `lam` is [B]."""
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
  """[B, T] advantages by two reverse associative scans; `lam` is [B]."""
  # y_t: value of the first trainable token at or after t (terminal if none).
  held_value = _reverse_affine_scan(
    jnp.where(mask, 0.0, 1.0), jnp.where(mask, values, 0.0), terminal_value
  )
  next_value = jnp.concatenate(
    [held_value[:, 1:], terminal_value[:, None]], axis=1
  )
  delta = jnp.where(mask, rewards + gamma * next_value - values, 0.0)
  decay = jnp.where(mask, gamma * lam[:, None], 1.0)
  adv = _reverse_affine_scan(decay, delta, jnp.zeros_like(terminal_value))
  return jnp.where(mask, adv, 0.0)


GAE_METHODS = {
  "scan": _gae_scan,
  "associative": _gae_associative,
}


def row_lambdas(lam: float | jax.Array, batch: int) -> jax.Array:
  """[B] float32 lambda of each row from a scalar or a [B] array.

  Raises:
    ValueError: a Python number outside [0, 1] (arrays are the caller's to
      keep in range, see `length_adaptive_lambda`).
  """
  if isinstance(lam, (int, float)):
    if not 0.0 <= lam <= 1.0:
      raise ValueError(f"GAE lambda {lam}: must be in [0, 1].")
    return jnp.full((batch,), lam, jnp.float32)
  lam = jnp.asarray(lam, jnp.float32)
  if lam.ndim == 0:
    return jnp.full((batch,), lam, jnp.float32)
  chex.assert_shape(lam, (batch,))
  return lam


def length_adaptive_lambda(num_steps: jax.Array, alpha: float) -> jax.Array:
  """[B] VAPO's lambda per row: 1 - 1 / (alpha * n), clamped to [0, 1].

  The effective horizon of GAE, 1 / (1 - lambda), becomes `alpha * n`: a
  fixed share of the row's own length, so the terminal reward reaches the
  start of a long row as it does a short one's (VAPO, arXiv 2504.05118,
  uses alpha = 0.05 over response tokens).

  Args:
    num_steps: [B] the row's MDP steps (its trainable tokens); a row with
      none gets lambda 0 (it has no advantage to weigh).
    alpha: > 0.
  """
  if not alpha > 0:
    raise ValueError(f"length_adaptive_lambda: alpha={alpha} must be > 0.")
  n = jnp.asarray(num_steps, jnp.float32)
  lam = 1.0 - 1.0 / jnp.maximum(alpha * n, 1e-6)
  return jnp.clip(lam, 0.0, 1.0)


def compute_gae(
  rewards: jax.Array,
  values: jax.Array,
  trainable: jax.Array,
  *,
  gamma: float,
  lam: float | jax.Array,
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
    lam: GAE lambda: a number in [0, 1] or a [B] array of one per row.
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
    rewards, values, mask, terminal_value, gamma, row_lambdas(lam, len(mask))
  )
  returns = jnp.where(mask, advantages + values, 0.0)
  return advantages, returns


def turn_starts(trainable: jax.Array) -> jax.Array:
  """[B, T] bool: the first token of each turn (a run of trainable tokens)."""
  chex.assert_rank(trainable, 2)
  mask = trainable.astype(bool)
  before = jnp.pad(mask[:, :-1], ((0, 0), (1, 0)))
  return mask & ~before


def turn_sums(x: jax.Array, trainable: jax.Array) -> jax.Array:
  """[B, T] each turn's sum of `x` at its first token; 0 elsewhere.

  A reverse affine scan: s_t = x_t + s_{t+1} while t + 1 is in t's turn.
  """
  mask = trainable.astype(bool)
  after = jnp.pad(mask[:, 1:], ((0, 0), (0, 1)))
  x = jnp.where(mask, x.astype(jnp.float32), 0.0)
  suffix = _reverse_affine_scan(
    (mask & after).astype(jnp.float32), x, jnp.zeros((mask.shape[0],))
  )
  return jnp.where(turn_starts(mask), suffix, 0.0)


def spread_over_turns(x: jax.Array, trainable: jax.Array) -> jax.Array:
  """[B, T] the value of `x` at each turn's first token on all its tokens."""
  mask = trainable.astype(bool)
  starts = turn_starts(mask)
  # A forward scan as a reverse one over the flipped rows: y_t = x_t at a
  # start, y_{t-1} inside a turn, 0 off the mask.
  carry = (mask & ~starts).astype(jnp.float32)[:, ::-1]
  first = jnp.where(starts, x.astype(jnp.float32), 0.0)[:, ::-1]
  spread = _reverse_affine_scan(carry, first, jnp.zeros((mask.shape[0],)))
  return jnp.where(mask, spread[:, ::-1], 0.0)


def compute_turn_gae(
  rewards: jax.Array,
  values: jax.Array,
  trainable: jax.Array,
  *,
  gamma: float,
  lam: float | jax.Array,
  truncated: jax.Array | None = None,
  bootstrap_value: jax.Array | None = None,
  method: str = "scan",
) -> tuple[jax.Array, jax.Array]:
  """GAE over the agent's turns (module docstring), spread over their tokens.

  Args:
    rewards: [B, T] per-token rewards; each turn's steps sum to its reward.
    values: [B, T] critic values; only each turn's first token's is read.
    trainable: [B, T] bool mask of policy tokens; its runs are the turns.
    gamma: discount per turn.
    lam: GAE lambda per turn: a number or a [B] array.
    truncated: as in `compute_gae`.
    bootstrap_value: as in `compute_gae`: the value after the last turn of
      a truncated row.
    method: as in `compute_gae`.

  Returns:
    (advantages, returns), [B, T] float32: every token of a turn holds its
    turn's; zero off the trainable mask.
  """
  chex.assert_rank([rewards, values, trainable], 2)
  chex.assert_equal_shape([rewards, values, trainable])
  starts = turn_starts(trainable)
  adv, ret = compute_gae(
    turn_sums(rewards, trainable),
    values,
    starts,
    gamma=gamma,
    lam=lam,
    truncated=truncated,
    bootstrap_value=bootstrap_value,
    method=method,
  )
  return spread_over_turns(adv, trainable), spread_over_turns(ret, trainable)
