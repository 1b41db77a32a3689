"""NumPy references of GAE and ragged random rollouts that tests share."""

import numpy as np


def numpy_gae(rewards, values, trainable, gamma, lam, truncated, bootstrap):
  """Reference: explicit loop over each row's trainable positions."""
  b, t = rewards.shape
  adv = np.zeros((b, t), np.float64)
  ret = np.zeros((b, t), np.float64)
  for i in range(b):
    steps = np.flatnonzero(trainable[i])
    next_value = bootstrap[i] if truncated[i] else 0.0
    running = 0.0
    for pos in steps[::-1]:
      delta = rewards[i, pos] + gamma * next_value - values[i, pos]
      running = delta + gamma * lam * running
      adv[i, pos] = running
      ret[i, pos] = running + values[i, pos]
      next_value = values[i, pos]
  return adv, ret


def random_ragged(rng, b, t):
  """Rows of prompt | (action obs)* | padding, with random lengths."""
  trainable = np.zeros((b, t), bool)
  for i in range(b):
    pos = rng.integers(0, t // 4 + 1)  # prompt
    end = rng.integers(pos, t + 1)  # then padding
    while pos < end:
      run = rng.integers(1, 6)
      trainable[i, pos : min(pos + run, end)] = True
      pos += run + rng.integers(0, 6)  # observation tokens
  trainable[0] = False  # one row without any trainable token
  rewards = rng.normal(size=(b, t)).astype(np.float32)
  values = rng.normal(size=(b, t)).astype(np.float32)
  truncated = rng.random(b) < 0.5
  bootstrap = rng.normal(size=b).astype(np.float32)
  return rewards, values, trainable, truncated, bootstrap
