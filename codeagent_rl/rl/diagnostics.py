"""Batch diagnostics: advantages by episode length, critic fit by turn depth.

The case for a critic is that GRPO's in-group normalisation gives the
tokens of a 3-turn give-up and of a 200-turn success advantages of the same
size, noise where the horizon is long. These statistics show it on the
batch being trained: the episodes are split into length terciles (by
tokens, within the batch), and for each tercile the mean and variance over
episodes of their per-token mean advantage, for GAE and GRPO computed on
the same batch (and the estimator in use, when it is neither).

The critic's fit by turn depth asks the same question of the critic: does
it track the returns of late turns of long episodes as well as those of the
first turn? `value_by_depth` buckets the trainable tokens by the index of
the policy turn they belong to (`turn_index`) and reports, per bucket, the
explained variance and value loss of the rollout-time values and the
bucket's share of the trainable tokens.

Empty buckets report 0, as `by_length` does (its means and variances divide
by max(n, 1)): every iteration's scalars stay finite (a NaN is a null in
metrics.jsonl and a gap in TensorBoard), and `token_share` 0 tells an empty
bucket from a real 0.
"""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp

from codeagent_rl.rl import advantages as adv_lib
from codeagent_rl.rl import losses

BUCKETS = ("short", "medium", "long")
COMPARED = ("gae", "grpo")

# First turn (1-based) of each turn-depth bucket; the last bucket is open.
# Powers of two: early turns get fine buckets, and long-horizon episodes
# (50+ turns) still get one of their own past turn 32.
DEPTH_EDGES = (1, 2, 4, 8, 16, 32)


def _depth_label(i: int) -> str:
  lo = DEPTH_EDGES[i]
  if i + 1 == len(DEPTH_EDGES):
    return f"turn_{lo}_plus"
  hi = DEPTH_EDGES[i + 1] - 1
  return f"turn_{lo}" if hi == lo else f"turn_{lo}_{hi}"


# "turn_1", "turn_2_3", "turn_4_7", ..., "turn_32_plus".
DEPTH_BUCKETS = tuple(_depth_label(i) for i in range(len(DEPTH_EDGES)))


def length_buckets(length: jax.Array) -> jax.Array:
  """[B] int32 tercile of each episode's length within the batch (0-2).

  Ties go by index (a stable sort), so equal lengths may fall on both
  sides of an edge and every bucket holds a third of the batch (+-1).
  """
  b = length.shape[0]
  rank = jnp.argsort(jnp.argsort(length, stable=True), stable=True)
  return jnp.minimum(rank * len(BUCKETS) // b, len(BUCKETS) - 1).astype(
    jnp.int32
  )


def episode_means(x: jax.Array, mask: jax.Array) -> jax.Array:
  """[B] mean of [B, T] `x` over each row's `mask` (0 for an empty row)."""
  mask = mask.astype(jnp.float32)
  return jnp.sum(x * mask, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1.0)


def by_length(
  inputs: adv_lib.AdvantageInputs,
  length: jax.Array,
  cfg: adv_lib.AdvantageConfig,
) -> dict[str, jax.Array]:
  """Per-tercile mean and variance of episodes' mean advantage.

  Args:
    inputs: the batch's advantage inputs (token rewards, values, ...).
    length: [B] episode lengths in tokens.
    cfg: the run's advantage config; GAE and GRPO use it with their own
      estimator (a critic-free run's GAE sees zero values: discounted
      returns).

  Returns:
    {"advantage_by_length/<estimator>/<bucket>_mean" and "..._var"}.
  """
  bucket = length_buckets(length)
  estimators = dict.fromkeys((*COMPARED, cfg.estimator))
  out = {}
  for name in estimators:
    adv, _ = adv_lib.compute_advantages(
      inputs, dataclasses.replace(cfg, estimator=name)
    )
    per_episode = episode_means(adv, inputs.trainable)
    has = jnp.any(inputs.trainable, axis=1)
    for i, label in enumerate(BUCKETS):
      rows = (bucket == i) & has
      n = jnp.maximum(jnp.sum(rows), 1)
      mean = jnp.sum(jnp.where(rows, per_episode, 0.0)) / n
      var = jnp.sum(jnp.where(rows, (per_episode - mean) ** 2, 0.0)) / n
      key = f"advantage_by_length/{name}/{label}"
      out[f"{key}_mean"] = mean
      out[f"{key}_var"] = var
  return out


def turn_index(trainable: jax.Array) -> jax.Array:
  """1-based index of the policy turn of each trainable token.

  A policy turn is a maximal run of trainable tokens (prompt, observations
  and padding are not trainable), so a token's turn is the number of
  False -> True steps of its row's mask up to and including its position;
  column 0 counts as one when it is trainable. Two actions with no token
  between them would count as one turn.

  Args:
    trainable: [B, T] bool mask of the policy's tokens.

  Returns:
    [B, T] int32 turn index, 0 where `trainable` is False.
  """
  chex.assert_rank(trainable, 2)
  mask = trainable.astype(bool)
  before = jnp.pad(mask[:, :-1], ((0, 0), (1, 0)))
  starts = (mask & ~before).astype(jnp.int32)
  return jnp.where(mask, jnp.cumsum(starts, axis=1), 0).astype(jnp.int32)


def depth_buckets(turn: jax.Array) -> jax.Array:
  """[B, T] int32 `DEPTH_BUCKETS` index of each `turn_index` (-1 for 0)."""
  edges = jnp.asarray(DEPTH_EDGES, jnp.int32)
  return (jnp.sum(turn[..., None] >= edges, axis=-1) - 1).astype(jnp.int32)


def value_by_depth(
  values: jax.Array, returns: jax.Array, trainable: jax.Array
) -> dict[str, jax.Array]:
  """The critic's fit to the returns per turn-depth bucket.

  Args:
    values: [B, T] critic values (those the advantages were computed with).
    returns: [B, T] value targets.
    trainable: [B, T] bool mask of the policy's tokens.

  Returns:
    For each `<bucket>` of `DEPTH_BUCKETS`, over the trainable tokens of
    turns in that bucket, "value_by_depth/<bucket>/" + "explained_variance"
    (`losses.explained_variance`: 0 when the returns are constant),
    "value_loss" (0.5 * mean((values - returns)^2)) and "token_share"
    (the bucket's share of all trainable tokens). Empty buckets give 0.
  """
  chex.assert_rank([values, returns, trainable], 2)
  chex.assert_equal_shape([values, returns, trainable])
  bucket_bt = depth_buckets(turn_index(trainable))
  ids_k = jnp.arange(len(DEPTH_BUCKETS), dtype=jnp.int32)
  # Untrainable tokens are in bucket -1: in none of the masks.
  masks_kbt = bucket_bt[None] == ids_k[:, None, None]
  counts_k = jnp.sum(masks_kbt, axis=(1, 2)).astype(jnp.float32)
  ev_k = jax.vmap(losses.explained_variance, in_axes=(None, None, 0))(
    values, returns, masks_kbt
  )
  sq_err_bt = jnp.square(
    values.astype(jnp.float32) - returns.astype(jnp.float32)
  )
  sq_sum_k = jnp.sum(jnp.where(masks_kbt, sq_err_bt[None], 0.0), axis=(1, 2))
  loss_k = 0.5 * sq_sum_k / jnp.maximum(counts_k, 1.0)
  share_k = counts_k / jnp.maximum(jnp.sum(counts_k), 1.0)
  out = {}
  for i, label in enumerate(DEPTH_BUCKETS):
    key = f"value_by_depth/{label}"
    out[f"{key}/explained_variance"] = ev_k[i]
    out[f"{key}/value_loss"] = loss_k[i]
    out[f"{key}/token_share"] = share_k[i]
  return out
