"""Every random key of a run, derived from its seed in one place.

The jobs ask this module for keys and never build one themselves: SFT
(initialisation and steps), the SFT model's evaluation, PPO (the critic's
initialisation, then per iteration the rollout, the update and the
evaluation; per epoch the row permutation and per minibatch the step key)
and the evaluation job.
"""

from __future__ import annotations

import jax

# Where the PPO stream's initialisation key sits among the iteration keys.
_PPO_INIT = 0x7FFFFFFF


def sft_init(seed: int) -> jax.Array:
  """Initialises the actor before SFT."""
  return jax.random.fold_in(jax.random.key(seed), 0)


def sft_step(seed: int, step: int) -> jax.Array:
  """The key of SFT step `step` (0-based)."""
  del seed
  return jax.random.key(step)


def sft_eval(seed: int) -> jax.Array:
  """Samples the SFT model's held-out evaluation."""
  return jax.random.key(seed + 2)


def eval_job(seed: int) -> jax.Array:
  """Samples the evaluation job (`config.job = "evaluate"`)."""
  return jax.random.key(seed + 3)


def ppo(seed: int) -> jax.Array:
  """The PPO stream: what the checkpoint stores as the run's key."""
  return jax.random.key(seed + 1)


def ppo_init(seed: int) -> jax.Array:
  """Initialises the critic (and copies the actor) before PPO."""
  return jax.random.fold_in(ppo(seed), _PPO_INIT)


def ppo_iteration(seed: int, iteration: int) -> dict[str, jax.Array]:
  """Keys of PPO iteration `iteration`: "rollout", "update" and "eval"."""
  it = jax.random.fold_in(ppo(seed), iteration)
  return {
    "rollout": jax.random.fold_in(it, 0),
    "update": jax.random.fold_in(it, 1),
    "eval": jax.random.fold_in(it, 2),
  }


def epoch(update: jax.Array, epoch_index: jax.Array) -> jax.Array:
  """Permutes the rows in epoch `epoch_index` (traceable)."""
  return jax.random.fold_in(update, epoch_index)


def minibatch(
  update: jax.Array, epoch_index: jax.Array, minibatch_index: jax.Array
) -> jax.Array:
  """The step key of one minibatch of one epoch (traceable)."""
  return jax.random.fold_in(update, 1000 + epoch_index * 100 + minibatch_index)


def eval_sample(rng: jax.Array, sample: int, start: int) -> jax.Array:
  """Sample `sample` of the evaluation batch starting at task `start`."""
  return jax.random.fold_in(rng, sample * 100_003 + start)
