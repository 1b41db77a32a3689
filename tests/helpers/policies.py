"""Policy wrappers that tests share (no side effects on import)."""

import numpy as np


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
