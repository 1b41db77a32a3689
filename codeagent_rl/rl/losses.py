"""PPO policy and value losses, entropy, and exact loss aggregation.

Every loss here is computed per token ([B, T]) and reduced by `aggregate`.
The reduction's denominator is a `Normalizer` computed once for the whole
minibatch; micro-batches of a gradient-accumulation loop pass that same
normaliser, so the sum of their losses (and of their gradients) equals the
full minibatch's, exactly, in every aggregation mode.

Diagnostics (clip fractions, approximate KL, ...) are token means over the
minibatch with the same deferred normalisation, so they add up over
micro-batches too.
"""

from __future__ import annotations

import chex
from flax import struct
import jax
import jax.numpy as jnp

AGG_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")


@struct.dataclass
class Normalizer:
  """Denominators of a whole minibatch, shared by its micro-batches.

  Attributes:
    num_tokens: scalar, trainable tokens in the minibatch (at least 1).
    num_seqs: scalar, rows with at least one trainable token (at least 1).
  """

  num_tokens: jax.Array
  num_seqs: jax.Array


def normalizer_for(mask: jax.Array) -> Normalizer:
  """The `Normalizer` of a [B, T] trainable mask (the full minibatch)."""
  chex.assert_rank(mask, 2)
  mask = mask.astype(jnp.float32)
  num_tokens = jnp.maximum(jnp.sum(mask), 1.0)
  num_seqs = jnp.maximum(jnp.sum(jnp.any(mask > 0, axis=1)), 1.0)
  return Normalizer(num_tokens=num_tokens, num_seqs=num_seqs)


def aggregate(
  loss: jax.Array,
  mask: jax.Array,
  mode: str,
  *,
  norm: Normalizer | None = None,
  norm_length: float | None = None,
) -> jax.Array:
  """Reduces a [B, T] per-token loss to a scalar.

  Modes:
    token_mean: sum over trainable tokens / trainable tokens in the minibatch.
    seq_mean_token_mean: each row's mean over its trainable tokens, averaged
      over the minibatch's rows that have any.
    seq_mean_token_sum_norm: each row's sum divided by the constant
      `norm_length`, averaged over rows as above (Dr.GRPO: no length bias).

  Args:
    loss: [B, T] per-token loss.
    mask: [B, T] trainable mask; other positions do not contribute.
    mode: one of `AGG_MODES`.
    norm: denominators of the full minibatch; defaults to this batch's own.
    norm_length: the constant of `seq_mean_token_sum_norm` (e.g. the maximum
      response length). Required by that mode only.

  Returns:
    Scalar loss.
  """
  chex.assert_rank([loss, mask], 2)
  chex.assert_equal_shape([loss, mask])
  if norm is None:
    norm = normalizer_for(mask)
  maskf = mask.astype(jnp.float32)
  masked = jnp.where(mask.astype(bool), loss.astype(jnp.float32), 0.0)
  if mode == "token_mean":
    return jnp.sum(masked) / norm.num_tokens
  if mode == "seq_mean_token_mean":
    per_seq = jnp.sum(masked, axis=1) / jnp.maximum(jnp.sum(maskf, axis=1), 1)
    return jnp.sum(per_seq) / norm.num_seqs
  if mode == "seq_mean_token_sum_norm":
    if norm_length is None or norm_length <= 0:
      raise ValueError(
        "aggregate: mode 'seq_mean_token_sum_norm' needs a positive"
        f" norm_length, got {norm_length!r}."
      )
    per_seq = jnp.sum(masked, axis=1) / norm_length
    return jnp.sum(per_seq) / norm.num_seqs
  raise ValueError(
    f"aggregate: unknown mode {mode!r}; expected one of {AGG_MODES}."
  )


def token_mean(x: jax.Array, mask: jax.Array, norm: Normalizer) -> jax.Array:
  """Sum of `x` over trainable tokens / the minibatch's trainable tokens."""
  return jnp.sum(jnp.where(mask.astype(bool), x, 0.0)) / norm.num_tokens


def ppo_policy_loss(
  logp: jax.Array,
  old_logp: jax.Array,
  advantages: jax.Array,
  mask: jax.Array,
  *,
  eps_low: float,
  eps_high: float,
  dual_clip: float | None = None,
  agg_mode: str = "token_mean",
  norm: Normalizer | None = None,
  norm_length: float | None = None,
  behaviour_logp: jax.Array | None = None,
  behaviour_cap: float = 2.0,
) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Clipped surrogate policy loss.

  Per token, with ratio = exp(logp - old_logp):
    loss = max(-A * ratio, -A * clip(ratio, 1 - eps_low, 1 + eps_high)).
  With `dual_clip` = c > 1, tokens with A < 0 are further capped at -A * c, so
  a huge ratio on a negative advantage cannot blow up the loss.

  Off-policy rollouts (sampled by an older policy than `old_logp`'s, as
  when generation overlaps the previous update): `old_logp` is then the
  proximal policy's (the parameters at the start of this update), and each
  token's loss is weighted by the truncated importance weight
  w = min(exp(old_logp - behaviour_logp), behaviour_cap) of the proximal
  against the behaviour policy (decoupled PPO). When the rollouts are on
  policy, w = 1 exactly and the loss is the plain one.

  Args:
    logp: [B, T] log-probs of the sampled tokens under the current policy.
    old_logp: [B, T] log-probs under the policy that sampled them.
    advantages: [B, T] advantages (no gradient flows through them).
    mask: [B, T] trainable mask.
    eps_low: lower clip range (ratio >= 1 - eps_low).
    eps_high: upper clip range (ratio <= 1 + eps_high).
    dual_clip: optional constant c > 1 of dual-clip PPO.
    agg_mode: one of `AGG_MODES`.
    norm: denominators of the full minibatch (for gradient accumulation).
    norm_length: constant of the `seq_mean_token_sum_norm` mode.
    behaviour_logp: [B, T] log-probs under the policy that sampled the
      tokens, when it is older than `old_logp`'s; None: the same.
    behaviour_cap: the truncation of the behaviour importance weight (> 0).

  Returns:
    (loss, diagnostics) with diagnostics `clip_frac` (share of tokens whose
    clipped term was taken), `dual_clip_frac`, `approx_kl` (k3 estimate of
    KL(old || new)) and `ratio_mean`, all token means over the minibatch;
    with `behaviour_logp` also `behaviour_weight_mean` and
    `behaviour_cap_frac` (share of tokens whose weight was truncated).
  """
  chex.assert_rank([logp, old_logp, advantages, mask], 2)
  chex.assert_equal_shape([logp, old_logp, advantages, mask])
  if dual_clip is not None and dual_clip <= 1.0:
    raise ValueError(
      f"ppo_policy_loss: dual_clip must be > 1, got {dual_clip}."
    )
  if not behaviour_cap > 0:
    raise ValueError(
      f"ppo_policy_loss: behaviour_cap must be > 0, got {behaviour_cap}."
    )
  if norm is None:
    norm = normalizer_for(mask)
  advantages = jax.lax.stop_gradient(advantages.astype(jnp.float32))
  old_logp = jax.lax.stop_gradient(old_logp.astype(jnp.float32))
  log_ratio = jnp.where(mask.astype(bool), logp - old_logp, 0.0)
  ratio = jnp.exp(log_ratio)
  unclipped = -advantages * ratio
  clipped = -advantages * jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high)
  per_token = jnp.maximum(unclipped, clipped)
  clip_hit = clipped > unclipped
  if dual_clip is not None:
    cap = -advantages * dual_clip
    dual_hit = (advantages < 0) & (per_token > cap)
    per_token = jnp.where(
      advantages < 0, jnp.minimum(per_token, cap), per_token
    )
  else:
    dual_hit = jnp.zeros_like(clip_hit)
  behaviour = {}
  if behaviour_logp is not None:
    chex.assert_equal_shape([logp, behaviour_logp])
    stale = old_logp - behaviour_logp.astype(jnp.float32)
    stale = jax.lax.stop_gradient(jnp.where(mask.astype(bool), stale, 0.0))
    raw = jnp.exp(stale)
    weight = jnp.minimum(raw, behaviour_cap)
    per_token = per_token * weight
    behaviour = {
      "behaviour_weight_mean": token_mean(weight, mask, norm),
      "behaviour_cap_frac": token_mean(
        (raw > behaviour_cap).astype(jnp.float32), mask, norm
      ),
    }
  loss = aggregate(
    per_token, mask, agg_mode, norm=norm, norm_length=norm_length
  )
  # k3 estimate of KL(old || new) from samples of the old policy.
  approx_kl = jnp.exp(-log_ratio) - 1.0 + log_ratio
  diagnostics = {
    "clip_frac": token_mean(clip_hit.astype(jnp.float32), mask, norm),
    "dual_clip_frac": token_mean(dual_hit.astype(jnp.float32), mask, norm),
    "approx_kl": token_mean(jax.lax.stop_gradient(approx_kl), mask, norm),
    "ratio_mean": token_mean(jax.lax.stop_gradient(ratio), mask, norm),
    **behaviour,
  }
  return loss, diagnostics


def clipped_value_loss(
  values: jax.Array,
  old_values: jax.Array,
  returns: jax.Array,
  mask: jax.Array,
  *,
  clip_eps: float | None,
  agg_mode: str = "token_mean",
  norm: Normalizer | None = None,
  norm_length: float | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Clipped value loss 0.5 * max((v - R)^2, (v_clip - R)^2).

  v_clip = old_v + clip(v - old_v, -clip_eps, clip_eps). With `clip_eps`
  None the loss is the plain 0.5 * (v - R)^2.

  Args:
    values: [B, T] current critic values.
    old_values: [B, T] critic values at rollout time.
    returns: [B, T] value targets (no gradient flows through them).
    mask: [B, T] trainable mask.
    clip_eps: clip range around the old value, or None for no clipping.
    agg_mode: one of `AGG_MODES`.
    norm: denominators of the full minibatch (for gradient accumulation).
    norm_length: constant of the `seq_mean_token_sum_norm` mode.

  Returns:
    (loss, diagnostics) with `value_clip_frac` (share of tokens whose clipped
    error was the larger) and `value_mean`, token means over the minibatch.
  """
  chex.assert_rank([values, old_values, returns, mask], 2)
  chex.assert_equal_shape([values, old_values, returns, mask])
  if norm is None:
    norm = normalizer_for(mask)
  values = values.astype(jnp.float32)
  old_values = jax.lax.stop_gradient(old_values.astype(jnp.float32))
  returns = jax.lax.stop_gradient(returns.astype(jnp.float32))
  err_unclipped = jnp.square(values - returns)
  if clip_eps is None:
    per_token = 0.5 * err_unclipped
    clip_hit = jnp.zeros_like(err_unclipped, dtype=bool)
  else:
    v_clip = old_values + jnp.clip(values - old_values, -clip_eps, clip_eps)
    err_clipped = jnp.square(v_clip - returns)
    per_token = 0.5 * jnp.maximum(err_unclipped, err_clipped)
    # Inside the range v_clip is v only up to rounding (old + (v - old)): a
    # comparison of the two errors alone counted 1.8% of a random batch of
    # values near zero as clipped, by their last bit (losses_test).
    outside = jnp.abs(values - old_values) > clip_eps
    clip_hit = outside & (err_clipped > err_unclipped)
  loss = aggregate(
    per_token, mask, agg_mode, norm=norm, norm_length=norm_length
  )
  diagnostics = {
    "value_clip_frac": token_mean(clip_hit.astype(jnp.float32), mask, norm),
    "value_mean": token_mean(jax.lax.stop_gradient(values), mask, norm),
  }
  return loss, diagnostics


def explained_variance(
  values: jax.Array, returns: jax.Array, mask: jax.Array
) -> jax.Array:
  """1 - Var[R - v] / Var[R] over trainable tokens (NaN-free: 0 if Var[R]=0).

  Not additive over micro-batches: compute it on the whole batch.
  """
  chex.assert_equal_shape([values, returns, mask])
  m = mask.astype(jnp.float32)
  n = jnp.maximum(jnp.sum(m), 1.0)

  def _var(x):
    mean = jnp.sum(x * m) / n
    return jnp.sum(jnp.square(x - mean) * m) / n

  values = jnp.where(m > 0, values.astype(jnp.float32), 0.0)
  returns = jnp.where(m > 0, returns.astype(jnp.float32), 0.0)
  var_returns = _var(returns)
  ev = 1.0 - _var(returns - values) / jnp.where(var_returns > 0, var_returns, 1)
  return jnp.where(var_returns > 0, ev, 0.0)
