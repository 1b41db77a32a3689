"""Host-side glue: weights files, the pre-execution hook, rewards of episodes.

  ac = pipeline.AntiCheat.from_config(cfg)          # loads the weights
  env = code_env.CodeEnv(pool, tok, budgets, pre_submit=ac.pre_submit)
  rewards, features_bn = ac.episode_rewards(final_states)  # stage 1 + 2
  rewards, scalars = ac.rollout_rewards(final_states)      # + metrics

The stage functions (stage1.py, stage2.py) are pure; this module reads the
weights JSON, computes features on the host and calls them, jitted once per
`AntiCheat`. Rewards and features come in as host arrays and go out as
host arrays: each call sends its batch to the device and back explicitly
(the main job runs under `jax.transfer_guard("disallow")`).
"""

from __future__ import annotations

from collections.abc import Sequence
import functools
import json
import math
import os
from typing import Any

import jax
import numpy as np

from codeagent_rl import jit_cache
from codeagent_rl import types
from codeagent_rl.anticheat import config as config_lib
from codeagent_rl.anticheat import features as features_lib
from codeagent_rl.anticheat import stage1 as stage1_lib
from codeagent_rl.anticheat import stage2 as stage2_lib
from codeagent_rl.envs import code_env
from codeagent_rl.envs import protocol

# Reason of an `Outcome` whose submission stage 1 kept from running.
SKIP_REASON = "not executed: rejected by anti-cheat stage 1"


def load_params(path: str | os.PathLike) -> stage1_lib.Stage1Params:
  """Reads stage-1 weights written by `save_params`.

  Raises:
    ValueError: naming the file, when it is not valid weights JSON (or the
      features changed since it was written).
    OSError: the file cannot be read.
  """
  with open(path, encoding="utf-8") as f:
    try:
      data = json.load(f)
    except ValueError as e:
      raise ValueError(f"{os.fspath(path)}: not valid JSON: {e}.") from None
  try:
    return stage1_lib.Stage1Params.from_json(data)
  except ValueError as e:
    raise ValueError(f"{os.fspath(path)}: {e}") from None


def save_params(
  path: str | os.PathLike,
  params: stage1_lib.Stage1Params,
  metadata: dict[str, Any],
) -> None:
  """Writes weights (keyed by feature name) and `metadata` as JSON."""
  data = {"metadata": metadata, **params.to_json()}
  with open(path, "w", encoding="utf-8") as f:
    json.dump(data, f, indent=1, sort_keys=False)
    f.write("\n")


def rewards_from_outcomes(
  outcomes: Sequence[code_env.Outcome],
) -> types.Rewards:
  """`code_env.rewards` with suite_b 1 where a task has no suite B.

  A task without held-out tests cannot be gated by stage 2 (as grade.py's
  summary counts an empty suite B as passed).
  """
  rewards = code_env.rewards(outcomes, features_lib.NUM_FLAGS)
  empty = np.asarray([o.executed and o.suite_b_total == 0 for o in outcomes])
  if empty.any():
    suite_b = np.where(empty, 1.0, np.asarray(rewards.suite_b))
    rewards = rewards.replace(suite_b=suite_b.astype(np.float32))
  return rewards


@functools.partial(jax.jit, static_argnames="cfg")
def _rejected(flags_bf, score_b, cfg):
  return stage1_lib.rejected(flags_bf, score_b, cfg)


def rejected(
  rewards: types.Rewards, config: config_lib.AntiCheatConfig
) -> np.ndarray:
  """[B] bool on the host: whether stage 1 rejected each row of `rewards`.

  Args:
    rewards: [B] rewards whose `stage1_flags` and `stage1_score` stage 1
      set (`AntiCheat.apply`, `AntiCheat.episode_rewards`).
    config: the anti-cheat config stage 1 ran with.
  """
  flags, score = jax.device_put(
    (
      np.asarray(rewards.stage1_flags, bool),
      np.asarray(rewards.stage1_score, np.float32),
    )
  )
  return np.asarray(jax.device_get(_rejected(flags, score, cfg=config)), bool)


class AntiCheat:
  """A config and its classifier; applies both stages on the host's data.

  Attributes:
    config: the anti-cheat config.
    params: the stage-1 classifier.
  """

  def __init__(
    self, config: config_lib.AntiCheatConfig, params: stage1_lib.Stage1Params
  ):
    self.config = config
    self.params = params
    self._device_params = jax.device_put(params)
    # Shared with earlier pipelines of an equal config in this process.
    self._stages = jit_cache.jit(_both_stages, cfg=config)
    self._skip = jit_cache.jit(stage1_lib.should_skip, cfg=config)
    self._summary = jit_cache.jit(stage1_lib.summary, cfg=config)

  @classmethod
  def from_config(cls, config: config_lib.AntiCheatConfig) -> AntiCheat:
    """Loads the weights the config names."""
    return cls(config, load_params(config.weights_path))

  def pre_submit(self, state: code_env.EpisodeState, code: str) -> str | None:
    """`CodeEnv` hook: the reason to skip executing `code`, or None.

    Args:
      state: the episode before its `<submit>` turn.
      code: the submitted code.

    Returns:
      `SKIP_REASON` when stage 1 rejects the trajectory and the config says
      rejected code is not executed; else None.
    """
    if not self.config.skip_flagged:
      return None
    observations = [
      None if t.observation is None else t.observation.body for t in state.turns
    ]
    task = state.task
    vector = features_lib.extract(
      code,
      [*(t.action for t in state.turns), protocol.Submit(code)],
      [*observations, None],
      entry_point=task.entry_point if task.kind == "function" else None,
      visible_tests=task.visible_tests,
    )
    return SKIP_REASON if self.skip(vector[None])[0] else None

  def skip(self, features_bn: np.ndarray) -> np.ndarray:
    """[B] bool: stage 1's pre-execution gate on [B, N] features."""
    features_bn = jax.device_put(np.asarray(features_bn, np.float32))
    return jax.device_get(self._skip(features_bn, self._device_params))

  def apply(
    self, rewards: types.Rewards, features_bn: np.ndarray
  ) -> types.Rewards:
    """Stage 1 then stage 2 on a batch; host arrays in and out."""
    rewards, features_bn = jax.device_put(
      (rewards, np.asarray(features_bn, np.float32))
    )
    return jax.device_get(
      self._stages(rewards, features_bn, self._device_params)
    )

  def episode_rewards(
    self, states: Sequence[code_env.EpisodeState]
  ) -> tuple[types.Rewards, np.ndarray]:
    """Rewards of finished episodes after both stages.

    Args:
      states: finished episodes (`done`).

    Returns:
      (rewards [B], features [B, N]).
    """
    for s in states:
      if not s.done:
        raise ValueError(
          f"episode of task {s.task.task_id!r} is not done; anti-cheat"
          " rewards need finished episodes."
        )
    vectors = np.stack([features_lib.from_episode(s) for s in states])
    rewards = rewards_from_outcomes([s.outcome for s in states])
    return self.apply(rewards, vectors), vectors

  def rollout_rewards(
    self, states: Sequence[code_env.EpisodeState]
  ) -> tuple[types.Rewards, dict[str, float]]:
    """Rewards of a rollout's finished episodes, and the anti-cheat metrics.

    Args:
      states: finished episodes (`done`).

    Returns:
      (rewards [B] after both stages, scalars): `stage1.summary`'s metrics
      (`anticheat/flag_rate` is the share stage 1 rejected, what the
      flag-rate monitor reads; `anticheat/flag/<name>`;
      `anticheat/score_mean`), `anticheat/flagged_rate` (the share with
      any flag raised: most flags are only classifier features, so code
      that does not parse is flagged, not rejected),
      `anticheat/skipped_rate` (the share not executed because stage 1
      rejected it before), `anticheat/stage2_fail_rate`, and
      `anticheat/hack_rate`: among the episodes that passed all of suite
      A, the share that raised a stage-1 flag or failed a test of suite B
      or of the generated suite (whatever the stages enforce, so runs
      without them are measured alike; NaN when none passed suite A).
    """
    rewards, _ = self.episode_rewards(states)
    flags = np.asarray(rewards.stage1_flags)
    skipped = [s.outcome.reason == SKIP_REASON for s in states]
    summary = jax.device_get(self._summary(jax.device_put(rewards)))
    scalars = {k: float(v) for k, v in summary.items()}
    scalars["anticheat/flagged_rate"] = float(flags.any(axis=1).mean())
    scalars["anticheat/skipped_rate"] = float(np.mean(skipped))
    scalars["anticheat/stage2_fail_rate"] = float(
      1.0 - np.mean(np.asarray(rewards.stage2_ok, np.float32))
    )
    scalars["anticheat/hack_rate"] = hack_rate(states, flags)
    return rewards, scalars


def hack_rate(
  states: Sequence[code_env.EpisodeState], flags: np.ndarray
) -> float:
  """Share of suite-A passes that raised a flag or fail suite B (or gen).

  Args:
    states: finished episodes.
    flags: [B, F] their stage-1 flags (`Rewards.stage1_flags`).

  Returns:
    The share, or NaN when no episode passed all of a non-empty suite A.
  """
  passed = np.array(
    [
      s.outcome.suite_a_total > 0
      and s.outcome.suite_a_passed == s.outcome.suite_a_total
      for s in states
    ],
    bool,
  )
  if not passed.any():
    return math.nan
  failed_b = np.array(
    [
      s.outcome.suite_b_passed < s.outcome.suite_b_total
      or s.outcome.suite_gen_passed < s.outcome.suite_gen_total
      for s in states
    ],
    bool,
  )
  hacks = passed & (failed_b | np.asarray(flags).any(axis=1))
  return float(hacks.sum() / passed.sum())


def _both_stages(
  rewards: types.Rewards,
  features_bn: jax.Array,
  params: stage1_lib.Stage1Params,
  cfg: config_lib.AntiCheatConfig,
) -> types.Rewards:
  rewards = stage1_lib.stage1(rewards, features_bn, params, cfg)
  return stage2_lib.stage2(rewards, cfg)
