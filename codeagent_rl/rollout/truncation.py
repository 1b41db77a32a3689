"""Adaptive truncation: end an episode early when the critic is sure of it.

After each turn the agent loop asks a `Stopper` about the episodes still
open (their observation already appended). The stopper runs the critic on
each episode's tokens so far and keeps the value after the last token; once
the values after the last `k` turns are all at or above `threshold` and
within `tolerance` of each other, and at least `min_turns` turns were taken
(`should_cut`), the rest of the episode is judged predictable and the loop
ends it with `CodeEnv.cut` (stop reason `code_env.STOP_ADAPTIVE`, truncated,
no submission).

What the learner makes of a cut row: `Learner._update` (train/ppo.py) runs
the critic over the rows (`steps.critic_values`), takes its output at
`length - 1`, the value after the row's last token (`after_last`), and for
truncated rows uses it as `bootstrap_value` (`steps.bootstrap_values`),
the next value after the last trainable token in GAE: a cut row's return is
bootstrapped exactly as a budget truncation's. The row's last tokens are
the observation the stopper saw, and the critic has not been updated since
the rollout, so the bootstrap is the value the cut was decided on (up to
rounding: the stopper's forward runs on shorter padded rows).

Audits: a deterministic share (`audit_fraction`) of the cut decisions is
only recorded, and the episode runs to its end (and is never cut later),
so the critic's value at the cut can be compared with the reward the
episode actually got (`metrics`).

Turn on with `rl.adaptive_truncation.enabled` (needs the "gae" estimator).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
from typing import Any

import jax
import numpy as np

from codeagent_rl.parallel import transfers
from codeagent_rl.rl import config as rl_config

# Prefix rows are padded to a multiple of this many tokens by default, so
# the critic's forward compiles for a handful of widths.
DEFAULT_BUCKET = 64
# Mixed into the audit draws' seed: a stream of its own, whatever other
# draws use the same seed words.
_AUDIT_STREAM = 0x61756474

# `value_fn(params, tokens [N, W] int32, valid [N, W] bool, length [N]
# int32) -> [N]`: the critic's value after each row's last valid token, as
# the learner computes it (`steps.critic_values(...)[1]`), jitted.
ValueFn = Callable[[Any, jax.Array, jax.Array, jax.Array], jax.Array]


def should_cut(
  values_history: Sequence[float],
  turns: int,
  cfg: rl_config.AdaptiveTruncationConfig,
) -> bool:
  """Whether an open episode is to be cut (the rule, without audits).

  Args:
    values_history: the critic's value after each turn so far, oldest
      first (only the last `cfg.k` are read).
    turns: turns the episode has taken.
    cfg: the validated `rl.adaptive_truncation` section.

  Returns:
    True if `cfg.enabled`, `turns >= cfg.min_turns`, and the last `cfg.k`
    values are all >= `cfg.threshold` with max - min <= `cfg.tolerance`.
  """
  if not cfg.enabled or turns < cfg.min_turns or len(values_history) < cfg.k:
    return False
  last = np.asarray(values_history[-cfg.k :], np.float64)
  return bool(
    np.all(last >= cfg.threshold) and last.max() - last.min() <= cfg.tolerance
  )


@dataclasses.dataclass(frozen=True)
class Decision:
  """One decision to cut an episode (executed, or only audited).

  Attributes:
    episode_id: the episode's output row.
    turn: turns the episode had taken.
    value: the critic's value after its last token then.
    tokens: its tokens then (prompt, actions, observations).
  """

  episode_id: int
  turn: int
  value: float
  tokens: int


def audit_draw(seed: Sequence[int], episode_id: int, turn: int) -> float:
  """A uniform number in [0, 1), a function of its arguments only.

  A decision is audited when the draw is below `audit_fraction`, so which
  ones are does not depend on the order the loop asks in.
  """
  words = (*seed, _AUDIT_STREAM, episode_id, turn)
  return float(np.random.default_rng(words).random())


def metrics(
  cuts: Sequence[Decision],
  audits: Sequence[Decision],
  total: np.ndarray,
  length: np.ndarray,
) -> dict[str, float]:
  """A rollout's truncation metrics.

  Args:
    cuts: the executed cuts.
    audits: the audited decisions (those episodes ran to their end).
    total: [B] `Rewards.total` of every episode, by output row.
    length: [B] each episode's final token count, by output row.

  Returns:
    "truncation/cut_share": cut episodes / all episodes;
    "truncation/tokens_saved_est": an estimate from the audit sample: the
    mean tokens the audited episodes used after their would-be cut,
    times the number of cut episodes;
    "truncation/audit_count": audited episodes;
    "truncation/audit_value_mean": mean critic value at the would-be cut;
    "truncation/audit_reward_mean": mean reward the audited episodes got;
    "truncation/audit_abs_error": mean |value - reward| over them.
    Without episodes, cuts or audits the means and the estimate are 0.

  Raises:
    ValueError: the arrays' shapes differ, or a decision names a row
      outside them.
  """
  total = np.asarray(total, np.float64)
  length = np.asarray(length, np.float64)
  if total.ndim != 1 or total.shape != length.shape:
    raise ValueError(
      f"total {total.shape} and length {length.shape} must be the same [B]."
    )
  rows = total.shape[0]
  for d in (*cuts, *audits):
    if not 0 <= d.episode_id < rows:
      raise ValueError(
        f"decision on episode {d.episode_id}, but there are {rows} episodes."
      )
  out = {
    "truncation/cut_share": len(cuts) / rows if rows else 0.0,
    "truncation/tokens_saved_est": 0.0,
    "truncation/audit_count": float(len(audits)),
    "truncation/audit_value_mean": 0.0,
    "truncation/audit_reward_mean": 0.0,
    "truncation/audit_abs_error": 0.0,
  }
  if audits:
    ids = np.asarray([a.episode_id for a in audits])
    values = np.asarray([a.value for a in audits], np.float64)
    rewards = total[ids]
    after = length[ids] - np.asarray([a.tokens for a in audits], np.float64)
    out["truncation/tokens_saved_est"] = float(after.mean() * len(cuts))
    out["truncation/audit_value_mean"] = float(values.mean())
    out["truncation/audit_reward_mean"] = float(rewards.mean())
    out["truncation/audit_abs_error"] = float(np.abs(values - rewards).mean())
  return out


def _round_up(n: int, multiple: int) -> int:
  return max(1, -(-n // multiple)) * multiple


def _row_bucket(n: int, max_rows: int) -> int:
  """`n` rows padded to a power of two, at most `max_rows` (n <= max_rows)."""
  return min(max_rows, 1 << max(0, n - 1).bit_length())


class Stopper:
  """The agent loops' early-stop hook, deciding by the critic's values.

  A loop calls `reset()` when a rollout starts and `decide(...)` after each
  turn; the stopper keeps each episode's values, the executed cuts and the
  audited decisions of the rollout (`cuts`, `audits`, `metrics`).
  """

  def __init__(
    self,
    cfg: rl_config.AdaptiveTruncationConfig,
    value_fn: ValueFn,
    params: Any,
    pad_id: int,
    *,
    seed: Sequence[int] = (),
    bucket: int = DEFAULT_BUCKET,
    max_rows: int = 64,
  ):
    """Binds the rule to a critic.

    Args:
      cfg: the validated `rl.adaptive_truncation` section.
      value_fn: the critic's value after each row's last token (`ValueFn`).
      params: the critic's params, on the devices (the prefixes are put
        where they are, replicated).
      pad_id: the token that pads prefix rows.
      seed: non-negative ints the audit draws derive from (e.g. the run's
        seed and the iteration).
      bucket: prefix rows are padded to a multiple of this many tokens.
      max_rows: rows per critic forward; more open episodes take several.
    """
    if type(bucket) is not int or bucket < 1:
      raise ValueError(f"bucket={bucket!r}: must be an integer >= 1.")
    if type(max_rows) is not int or max_rows < 1:
      raise ValueError(f"max_rows={max_rows!r}: must be an integer >= 1.")
    self.cfg = cfg
    self._value_fn = value_fn
    self._params = params
    self._placement = transfers.replicated_like(params)
    self._pad_id = pad_id
    self._seed = tuple(int(s) for s in seed)
    self._bucket = bucket
    self._max_rows = max_rows
    self.reset()

  def reset(self) -> None:
    """Forgets the previous rollout: values, cuts and audits."""
    self._history: dict[int, list[float]] = {}
    self._audited: set[int] = set()
    self._cut: set[int] = set()
    self.cuts: list[Decision] = []
    self.audits: list[Decision] = []

  def values(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
    """[N] the critic's value after the last token of each prefix.

    Rows are right-padded to a multiple of `bucket` tokens and their count
    to a power of two (at most `max_rows` per forward).
    """
    out = []
    for start in range(0, len(prefixes), self._max_rows):
      chunk = prefixes[start : start + self._max_rows]
      rows = _row_bucket(len(chunk), self._max_rows)
      width = _round_up(max(len(p) for p in chunk), self._bucket)
      tokens = np.full((rows, width), self._pad_id, np.int32)
      valid = np.zeros((rows, width), bool)
      # Padding rows hold one pad token: a row with no valid token would
      # attend to nothing.
      valid[:, 0] = True
      length = np.ones((rows,), np.int32)
      for i, prefix in enumerate(chunk):
        tokens[i, : len(prefix)] = prefix
        valid[i, : len(prefix)] = True
        length[i] = len(prefix)
      arrays = jax.device_put((tokens, valid, length), self._placement)
      after_last = self._value_fn(self._params, *arrays)
      out.append(np.asarray(jax.device_get(after_last))[: len(chunk)])
    if not out:
      return np.zeros((0,), np.float32)
    return np.concatenate(out).astype(np.float32)

  def decide(
    self,
    episode_ids: Sequence[int],
    prefixes: Sequence[Sequence[int]],
    turns: Sequence[int],
  ) -> list[bool]:
    """Whether to cut each open episode now.

    Args:
      episode_ids: the open episodes' output rows.
      prefixes: their token ids so far (the turn's observation appended).
      turns: the turns each has taken.

    Returns:
      One bool per episode: True where `should_cut` holds and the decision
      is not audited. An audited decision is recorded and answered False,
      and that episode is never cut (nor its value computed) again.

    Raises:
      ValueError: the lengths differ, an id repeats, an episode was
        already cut, or a prefix is empty.
    """
    n = len(episode_ids)
    if len(prefixes) != n or len(turns) != n:
      raise ValueError(
        f"{n} episode ids, {len(prefixes)} prefixes and {len(turns)} turns."
      )
    ids = [int(e) for e in episode_ids]
    if len(set(ids)) != n:
      raise ValueError(f"episode ids repeat: {ids}.")
    for e, prefix in zip(ids, prefixes, strict=True):
      if e in self._cut:
        raise ValueError(f"episode {e} was cut; it takes no more turns.")
      if not len(prefix):
        raise ValueError(f"episode {e}: empty prefix.")
    out = [False] * n
    if not self.cfg.enabled:
      return out
    asked = [j for j in range(n) if ids[j] not in self._audited]
    if not asked:
      return out
    values = self.values([prefixes[j] for j in asked])
    for j, value in zip(asked, values.tolist(), strict=True):
      e, turn = ids[j], int(turns[j])
      history = self._history.setdefault(e, [])
      history.append(value)
      if not should_cut(history, turn, self.cfg):
        continue
      decision = Decision(e, turn, value, len(prefixes[j]))
      if audit_draw(self._seed, e, turn) < self.cfg.audit_fraction:
        self.audits.append(decision)
        self._audited.add(e)
        del self._history[e]  # never asked about again
      else:
        self.cuts.append(decision)
        self._cut.add(e)
        out[j] = True
    return out

  def metrics(self, total: np.ndarray, length: np.ndarray) -> dict[str, float]:
    """This rollout's `metrics` (see there) from its rewards and lengths.

    Args:
      total: [B] `Rewards.total` by output row.
      length: [B] final token count by output row.
    """
    return metrics(self.cuts, self.audits, total, length)
