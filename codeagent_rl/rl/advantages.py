"""Advantage estimators, chosen by a config string.

`gae` uses the critic and is the recipe's default. `grpo`, `dr_grpo` and
`rloo` are critic-free group baselines kept so that the claim "a critic beats
in-group normalisation on long, ragged agent trajectories" can be measured
under the same budget. Group estimators score a trajectory by the sum of its
token rewards over trainable positions (the terminal reward plus any per-token
KL penalty) and broadcast one advantage to all its trainable tokens.
"""

from __future__ import annotations

import dataclasses
import functools

import chex
from flax import struct
import jax
import jax.numpy as jnp

from codeagent_rl.rl import gae
from codeagent_rl.rl import losses


@struct.dataclass
class AdvantageInputs:
  """What an estimator may look at.

  Attributes:
    rewards: [B, T] token rewards (terminal score on the last trainable token,
      plus any per-token KL penalty).
    values: [B, T] critic values at rollout time (ignored by group estimators).
    trainable: [B, T] bool mask of policy tokens.
    truncated: [B] bool, rows stopped by a budget.
    bootstrap_value: [B] critic value where a truncated row stopped.
    group_id: [B] int prompt id; group estimators compare rows with equal ids
      (groups need not be contiguous or of equal size).
  """

  rewards: jax.Array
  values: jax.Array
  trainable: jax.Array
  truncated: jax.Array
  bootstrap_value: jax.Array
  group_id: jax.Array


@dataclasses.dataclass(frozen=True)
class AdvantageConfig:
  """Validated `config.rl.advantage` section.

  Attributes:
    estimator: key of `ADVANTAGE_ESTIMATORS`.
    gamma: discount per MDP step (gae).
    lam: GAE lambda of the actor's advantages (gae).
    lam_critic: GAE lambda of the critic's targets, `returns` (gae); 1.0
      gives Monte-Carlo returns (VC-PPO / VAPO's decoupled GAE).
    lam_length_alpha: 0, or alpha > 0 of the length-adaptive actor lambda
      `1 - 1 / (alpha * n)` per row, n its trainable tokens, clamped to
      [0, 1] (VAPO: 0.05); it replaces `lam` then.
    credit: "token" (each trainable token is an MDP step) or "turn" (each
      turn is one; `gae.compute_turn_gae`).
    critic_trust: "none", or "explained_variance": the actor's lambda is
      moved towards 1 by how little of the batch's returns the critic
      explains (`actor_lambda`).
    gae_method: "scan" or "associative" (see `gae.compute_gae`).
    group_eps: added to the group std of `grpo`.
    whiten: whiten advantages over trainable tokens after estimation.
  """

  estimator: str
  gamma: float
  lam: float
  lam_critic: float
  lam_length_alpha: float
  credit: str
  critic_trust: str
  gae_method: str
  group_eps: float
  whiten: bool

  def __post_init__(self):
    if self.estimator not in ADVANTAGE_ESTIMATORS:
      raise ValueError(
        f"advantage.estimator={self.estimator!r}: expected one of"
        f" {sorted(ADVANTAGE_ESTIMATORS)}."
      )
    if not 0.0 <= self.gamma <= 1.0:
      raise ValueError(f"advantage.gamma={self.gamma}: must be in [0, 1].")
    for name in ("lam", "lam_critic"):
      value = getattr(self, name)
      if type(value) not in (int, float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"advantage.{name}={value!r}: must be in [0, 1].")
    alpha = self.lam_length_alpha
    if type(alpha) not in (int, float) or not 0.0 <= alpha < float("inf"):
      raise ValueError(
        f"advantage.lam_length_alpha={alpha!r}: must be 0 (off) or a"
        " finite number > 0 (VAPO: 0.05)."
      )
    if self.critic_trust not in CRITIC_TRUSTS:
      raise ValueError(
        f"advantage.critic_trust={self.critic_trust!r}: expected one of"
        f" {CRITIC_TRUSTS}."
      )
    if self.credit not in CREDITS:
      raise ValueError(
        f"advantage.credit={self.credit!r}: expected one of {CREDITS}."
      )
    if self.gae_method not in gae.GAE_METHODS:
      raise ValueError(
        f"advantage.gae_method={self.gae_method!r}: expected one of"
        f" {sorted(gae.GAE_METHODS)}."
      )
    if self.group_eps <= 0.0:
      raise ValueError(f"advantage.group_eps={self.group_eps}: must be > 0.")


# What an MDP step is for "gae": a trainable token, or a turn.
CREDITS = ("token", "turn")
# How the actor's lambda follows the critic's fit (`actor_lambda`).
CRITIC_TRUSTS = ("none", "explained_variance")


def _gae_runner(inputs: AdvantageInputs, cfg: AdvantageConfig):
  """`lam` -> (advantages, returns) of the configured credit on `inputs`."""
  fn = gae.compute_turn_gae if cfg.credit == "turn" else gae.compute_gae
  return functools.partial(
    fn,
    inputs.rewards,
    inputs.values,
    inputs.trainable,
    gamma=cfg.gamma,
    truncated=inputs.truncated,
    bootstrap_value=inputs.bootstrap_value,
    method=cfg.gae_method,
  )


def critic_trust(inputs: AdvantageInputs, cfg: AdvantageConfig) -> jax.Array:
  """How far the actor may bootstrap on the critic: a scalar in [0, 1].

  With `cfg.critic_trust` "explained_variance": the explained variance of
  the rollout-time values against the batch's Monte-Carlo returns
  (lambda 1), clipped to [0, 1]; "none": 1 (the configured lambda as is).
  """
  if cfg.critic_trust == "none":
    return jnp.ones((), jnp.float32)
  _, monte_carlo = _gae_runner(inputs, cfg)(lam=1.0)
  ev = losses.explained_variance(inputs.values, monte_carlo, inputs.trainable)
  return jnp.clip(ev, 0.0, 1.0)


def actor_lambda(inputs: AdvantageInputs, cfg: AdvantageConfig) -> jax.Array:
  """[B] the actor's GAE lambda of each row.

  `cfg.lam`, or the length-adaptive 1 - 1 / (alpha * n) (n the row's
  trainable tokens); then moved towards 1 as the critic's trust falls:
  1 - (1 - lambda) * trust (`critic_trust`). With a lambda below 1 most of
  a long row's advantage is the critic's value differences, which before
  the critic has learnt the returns are noise: measured on the long-horizon
  tasks, one actor update on an unlearnt critic at lambda 0.95 moved the
  policy by a KL of 0.045 per token and its reward from 0.75 to 0.06; at
  lambda 1 (or GRPO) by 0.0009 (0.0006) without harm.
  """
  b = inputs.trainable.shape[0]
  if cfg.lam_length_alpha:
    n = jnp.sum(inputs.trainable.astype(jnp.float32), axis=1)
    lam = gae.length_adaptive_lambda(n, cfg.lam_length_alpha)
  else:
    lam = jnp.full((b,), cfg.lam, jnp.float32)
  trust = critic_trust(inputs, cfg)
  return 1.0 - (1.0 - lam) * trust


def _gae(inputs: AdvantageInputs, cfg: AdvantageConfig):
  """Advantages at the actor's lambda, returns at the critic's."""
  run = _gae_runner(inputs, cfg)
  advantages, returns = run(lam=actor_lambda(inputs, cfg))
  if not (
    cfg.lam_length_alpha == 0
    and cfg.critic_trust == "none"
    and cfg.lam_critic == cfg.lam
  ):
    _, returns = run(lam=cfg.lam_critic)
  return advantages, returns


def _group_stats(scores: jax.Array, group_id: jax.Array):
  """Per-row (group size, group sum, group sum of squares), each [B]."""
  same = (group_id[:, None] == group_id[None, :]).astype(jnp.float32)
  count = jnp.sum(same, axis=1)
  total = same @ scores
  total_sq = same @ jnp.square(scores)
  return count, total, total_sq


def _trajectory_scores(inputs: AdvantageInputs) -> jax.Array:
  mask = inputs.trainable.astype(bool)
  return jnp.sum(jnp.where(mask, inputs.rewards.astype(jnp.float32), 0), 1)


def _broadcast(adv_b: jax.Array, inputs: AdvantageInputs):
  """Per-row advantage on every trainable token; returns = the row's score."""
  mask = inputs.trainable.astype(bool)
  scores = _trajectory_scores(inputs)
  advantages = jnp.where(mask, adv_b[:, None], 0.0)
  returns = jnp.where(mask, scores[:, None], 0.0)
  return advantages, returns


def _grpo(inputs: AdvantageInputs, cfg: AdvantageConfig):
  """(s - mean_g) / (std_g + eps), std with Bessel's correction."""
  scores = _trajectory_scores(inputs)
  count, total, total_sq = _group_stats(scores, inputs.group_id)
  mean = total / count
  var = (total_sq - count * jnp.square(mean)) / jnp.maximum(count - 1, 1)
  std = jnp.sqrt(jnp.maximum(var, 0.0))
  adv = jnp.where(count > 1, (scores - mean) / (std + cfg.group_eps), 0.0)
  return _broadcast(adv, inputs)


def _dr_grpo(inputs: AdvantageInputs, cfg: AdvantageConfig):
  """Score minus the group mean (Dr.GRPO: no division by the std)."""
  del cfg
  scores = _trajectory_scores(inputs)
  count, total, _ = _group_stats(scores, inputs.group_id)
  return _broadcast(scores - total / count, inputs)


def _rloo(inputs: AdvantageInputs, cfg: AdvantageConfig):
  """Score minus the mean of the group's other rows; 0 when alone."""
  del cfg
  scores = _trajectory_scores(inputs)
  count, total, _ = _group_stats(scores, inputs.group_id)
  others = (total - scores) / jnp.maximum(count - 1, 1)
  return _broadcast(jnp.where(count > 1, scores - others, 0.0), inputs)


ADVANTAGE_ESTIMATORS = {
  "gae": _gae,
  "grpo": _grpo,
  "dr_grpo": _dr_grpo,
  "rloo": _rloo,
}


def masked_whiten(
  x: jax.Array, mask: jax.Array, *, shift_mean: bool = True, eps=1e-8
) -> jax.Array:
  """Whitens [B, T] `x` with mean and std over `mask`; 0 off the mask.

  Args:
    x: [B, T] values.
    mask: [B, T] trainable mask.
    shift_mean: subtract the mean (False only rescales, keeping the sign).
    eps: added to the variance.

  Returns:
    [B, T] float32 whitened values, zero where `mask` is False.
  """
  chex.assert_equal_shape([x, mask])
  m = mask.astype(bool)
  n = jnp.maximum(jnp.sum(m), 1)
  x = jnp.where(m, x.astype(jnp.float32), 0.0)
  mean = jnp.sum(x) / n
  var = jnp.sum(jnp.where(m, jnp.square(x - mean), 0.0)) / n
  out = (x - mean) if shift_mean else x
  return jnp.where(m, out * jax.lax.rsqrt(var + eps), 0.0)


def compute_advantages(
  inputs: AdvantageInputs, cfg: AdvantageConfig
) -> tuple[jax.Array, jax.Array]:
  """Runs the configured estimator, then optional whitening.

  Args:
    inputs: rollout arrays, see `AdvantageInputs`.
    cfg: validated advantage config.

  Returns:
    (advantages, returns), both [B, T] float32, zero off the trainable mask.
    Returns are computed before whitening.
  """
  chex.assert_rank([inputs.rewards, inputs.values, inputs.trainable], 2)
  chex.assert_equal_shape([inputs.rewards, inputs.values, inputs.trainable])
  chex.assert_shape(
    [inputs.truncated, inputs.bootstrap_value, inputs.group_id],
    inputs.rewards.shape[:1],
  )
  advantages, returns = ADVANTAGE_ESTIMATORS[cfg.estimator](inputs, cfg)
  if cfg.whiten:
    advantages = masked_whiten(advantages, inputs.trainable)
  return advantages, returns
