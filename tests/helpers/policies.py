"""Policy wrappers and rollouts that tests share (no side effects on import)."""

import gc

import jax
import numpy as np

from codeagent_rl import types


class LogProbRecorder:
  """A policy that keeps the log-prob of every token the inner one samples."""

  def __init__(self, inner):
    self.inner = inner
    self.log_probs = []

  def begin(self, prompts):
    self.log_probs = [[] for _ in prompts]
    self.inner.begin(prompts)

  def generate(self, budgets, rng):
    out = self.inner.generate(budgets, rng)
    for row, (_, logp) in zip(self.log_probs, out, strict=True):
      row.extend(logp)
    return out

  def observe(self, observations):
    self.inner.observe(observations)

  def end(self):
    self.inner.end()

  def on_tokens(self, trainable):
    """[B, T] the recorded log-probs at the trainable positions, else 0."""
    out = np.zeros(trainable.shape, np.float32)
    for i, row in enumerate(self.log_probs):
      out[i, trainable[i]] = row
    return out


class EpisodeLogProbs:
  """Keeps each episode's sampled log-probs, whichever row it ran in.

  For `agent_loop.collect` and `continuous.collect`; an episode is known by
  its prompt, so the tasks' prompts must differ.
  """

  def __init__(self, inner, env, tasks):
    self.inner = inner
    self.by_prompt = {
      tuple(env.reset(t).prompt_ids): i for i, t in enumerate(tasks)
    }
    self.log_probs = [[] for _ in tasks]
    self.episode = []

  def begin(self, prompts):
    self.episode = [self.by_prompt[tuple(p)] for p in prompts]
    self.inner.begin(prompts)

  def restart(self, rows, prompts):
    for row, prompt in zip(rows, prompts, strict=True):
      self.episode[row] = self.by_prompt[tuple(prompt)] if prompt else None
    self.inner.restart(rows, prompts)

  def generate(self, budgets, rng):
    out = self.inner.generate(budgets, rng)
    for e, (_, logp) in zip(self.episode, out, strict=True):
      if e is not None:
        self.log_probs[e].extend(logp)
    return out

  def observe(self, observations):
    self.inner.observe(observations)

  def end(self):
    self.inner.end()


def ragged_rollout(batch: int, length: int, prompt: int, *, seed: int = 0):
  """A hand-made `TrajectoryBatch` of right-padded rows of ragged lengths.

  Lengths are drawn from [length / 2, length], the first row full; the
  first `prompt` tokens of a row are not trainable; ids in [16, 272);
  groups of 4 rows share a prompt id.
  """
  rng = np.random.default_rng(seed)
  lengths = rng.integers(length // 2, length + 1, size=batch)
  lengths[0] = length
  pos = np.arange(length)[None, :]
  valid = pos < lengths[:, None]
  tokens = np.where(valid, rng.integers(16, 272, (batch, length)), 0)
  out = types.TrajectoryBatch(
    tokens=tokens.astype(np.int32),
    trainable=valid & (pos >= prompt),
    valid=valid,
    length=lengths.astype(np.int32),
    truncated=np.zeros((batch,), bool),
    group_id=np.repeat(np.arange(batch // 4), 4).astype(np.int32),
  )
  out.check()
  return out


def live_cache_arrays(config, cache_len: int) -> list:
  """Live device arrays shaped like a KV cache of `cache_len` slots.

  Its keys and values ([B, kv_heads, cache_len, head_dim]); after a rollout
  there should be none, so the learner's passes do not share the device
  with the rollout's cache.
  """
  gc.collect()
  return [
    x
    for x in jax.live_arrays()
    if x.ndim == 4
    and x.shape[1:] == (config.num_kv_heads, cache_len, config.head_dim)
  ]
