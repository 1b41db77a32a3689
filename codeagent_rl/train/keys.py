"""Every random key of a run, derived from one root: `key(seed)`.

The root is split into named streams, one per job that draws randomness:

  sft        the actor's initialisation, then SFT step k
  sft_eval   the SFT model's held-out evaluation
  ppo        the critic's initialisation, then PPO iteration k: its rollout,
             update and evaluation; within the update, epoch e's row
             permutation and each minibatch's step key
  eval_job   the evaluation job (`config.job = "evaluate"`)

Below a stream, indices (step, iteration, epoch, minibatch, sample) enter
by `fold_in`, one level per index, never by arithmetic on them: two
different index tuples never meet on one key, and every stream of one seed
differs from every stream of another (tests/train/keys_test.py). A stream
is the root folded with its position in `STREAMS`, so a stream added at the
end leaves the keys of the others as they were.

The host-side functions make no implicit transfer (the main job runs under
`jax.transfer_guard("disallow")`): the seed and each index go to the
device by `device_put`, beside the key they are folded into. Their keys are
on the default device; whoever feeds one to a computation on a mesh places
it there (`device_put` to a replicated sharding).
"""

from __future__ import annotations

import jax

from codeagent_rl.parallel import transfers

# Seeds are uint32 on the device (`transfers.key`); config validation keeps
# them in range.
MAX_SEED = transfers.MAX_INDEX

STREAMS = ("sft", "sft_eval", "ppo", "eval_job", "value_pretrain")


def stream(seed: int, name: str) -> jax.Array:
  """The key of stream `name` (one of `STREAMS`) of a run with `seed`."""
  if name not in STREAMS:
    raise ValueError(f"no key stream {name!r}; expected one of {STREAMS}.")
  return transfers.fold_in(transfers.key(seed), STREAMS.index(name))


def sft_init(seed: int) -> jax.Array:
  """Initialises the actor before SFT."""
  return transfers.fold_in(stream(seed, "sft"), 0)


def sft_step(seed: int, step: int) -> jax.Array:
  """The key of SFT step `step` (0-based)."""
  return transfers.fold_in(transfers.fold_in(stream(seed, "sft"), 1), step)


def sft_eval(seed: int) -> jax.Array:
  """Samples the SFT model's held-out evaluation."""
  return stream(seed, "sft_eval")


def eval_job(seed: int) -> jax.Array:
  """Samples the evaluation job (`config.job = "evaluate"`)."""
  return stream(seed, "eval_job")


def ppo(seed: int) -> jax.Array:
  """The PPO stream: what the checkpoint stores as the run's key."""
  return stream(seed, "ppo")


def ppo_init(seed: int) -> jax.Array:
  """Initialises the critic (and copies the actor) before PPO."""
  return transfers.fold_in(ppo(seed), 0)


def ppo_iteration(seed: int, iteration: int) -> dict[str, jax.Array]:
  """Keys of PPO iteration `iteration`: "rollout", "update" and "eval"."""
  it = transfers.fold_in(transfers.fold_in(ppo(seed), 1), iteration)
  rollout, update, evaluation = jax.random.split(it, 3)
  return {"rollout": rollout, "update": update, "eval": evaluation}


def dynamic_sampling_round(rollout: jax.Array, round_index: int) -> jax.Array:
  """The rollout key of dynamic sampling's round `round_index` (>= 1).

  Round 0 is the iteration's own rollout key, so a run with dynamic
  sampling samples the same first round as one without.
  """
  if round_index < 1:
    raise ValueError(f"dynamic sampling round {round_index}: must be >= 1.")
  return transfers.fold_in(transfers.fold_in(rollout, 0xD5), round_index)


def value_pretrain(seed: int, step: int) -> dict[str, jax.Array]:
  """Keys of value pre-training round `step`: "rollout", "update"."""
  it = transfers.fold_in(stream(seed, "value_pretrain"), step)
  rollout, update = jax.random.split(it, 2)
  return {"rollout": rollout, "update": update}


def epoch(update: jax.Array, epoch_index: jax.Array) -> jax.Array:
  """Permutes the rows in epoch `epoch_index` (traceable)."""
  return jax.random.fold_in(jax.random.fold_in(update, 0), epoch_index)


def minibatch(
  update: jax.Array, epoch_index: jax.Array, minibatch_index: jax.Array
) -> jax.Array:
  """The step key of one minibatch of one epoch (traceable)."""
  per_epoch = jax.random.fold_in(jax.random.fold_in(update, 1), epoch_index)
  return jax.random.fold_in(per_epoch, minibatch_index)


def eval_sample(rng: jax.Array, sample: int, start: int) -> jax.Array:
  """Sample `sample` of the evaluation batch starting at task `start`."""
  return transfers.fold_in(transfers.fold_in(rng, sample), start)
