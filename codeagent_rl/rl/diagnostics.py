"""Advantages by episode length: what the estimators do to long episodes.

The case for a critic is that GRPO's in-group normalisation gives the
tokens of a 3-turn give-up and of a 200-turn success advantages of the same
size, noise where the horizon is long. These statistics show it on the
batch being trained: the episodes are split into length terciles (by
tokens, within the batch), and for each tercile the mean and variance over
episodes of their per-token mean advantage, for GAE and GRPO computed on
the same batch (and the estimator in use, when it is neither).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from codeagent_rl.rl import advantages as adv_lib

BUCKETS = ("short", "medium", "long")
COMPARED = ("gae", "grpo")


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
