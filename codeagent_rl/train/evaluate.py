"""pass@1 of the actor on held-out tasks, through the sandbox.

Modes: `greedy` (temperature 0, one episode per task) and `sampled` (the
training sampling settings, `eval.samples_per_task` episodes per task). The
episode is the same multi-turn agent loop as training, graded by the same
judge, without the pre-submit gate (every submission runs); anti-cheat
stage 1 (`exp.anticheat`) then judges each finished episode. pass@1 on
suite A is the share of episodes that are solved, on A-and-B of those
solved on suites A and B, as `codeagent_rl.solved` defines them (a
submission stage 1 rejects is never solved). With k samples per task the
sampled pass@1 is the mean over tasks of (solved samples / k): the unbiased
pass@1 estimate of the Codex paper, with less noise than one sample per
task.

With several processes (`parallel/distributed.py`) each one runs its
contiguous share of every batch of episodes, with its own sandbox pool and
a copy of the params on its own devices, drawing from the batch's keys as
one process would (`sampler.BatchPart`, or per-episode keys with slot
refill); the episodes are gathered, so every process returns the same
pass rates and holds every episode. All processes must call the evaluator
together.
"""

from __future__ import annotations

from collections.abc import Sequence
import math
from typing import Any

import jax
import numpy as np

from codeagent_rl import solved
from codeagent_rl import types
from codeagent_rl.anticheat import config as anticheat_config
from codeagent_rl.anticheat import pipeline
from codeagent_rl.envs import code_env
from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.models import transformer
from codeagent_rl.parallel import distributed
from codeagent_rl.rollout import agent_loop
from codeagent_rl.rollout import continuous
from codeagent_rl.tasks import oracle as oracle_lib
from codeagent_rl.tasks import schema
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import keys


def make_sampler(
  exp: exp_lib.Experiment, temperature: float
) -> sampler_lib.Sampler:
  """A sampler of the actor for one turn of `env.max_tokens_per_turn`.

  Its KV cache is sharded by the experiment's mesh rules (see
  `sampler.state_shardings`) when the params are on a mesh.
  """
  sampling = exp.sampling
  cfg = sampler_lib.SamplerConfig(
    temperature=temperature,
    top_k=sampling.top_k if temperature else 0,
    top_p=sampling.top_p if temperature else 1.0,
    max_new_tokens=exp.env.max_tokens_per_turn,
    vocab_limit=exp.conversation.vocab_size,
  )
  return sampler_lib.Sampler(
    transformer.Actor(exp.model),
    exp.model,
    cfg,
    pad_id=exp.conversation.pad_id,
    rules=exp.mesh.rules,
  )


def episode_scalars(
  rollout: agent_loop.Rollout,
  rejected: np.ndarray,
  total: np.ndarray | None = None,
) -> dict[str, float]:
  """Pass rates and lengths of a rollout's episodes.

  Args:
    rollout: finished episodes.
    rejected: [B] bool, whether anti-cheat stage 1 rejected each episode
      (`stage1_rejected`).
    total: [B] rewards after anti-cheat (defaults to the raw `rewards.total`).

  Returns:
    "pass_a", "pass_ab" (shares of episodes solved on suite A / on suites A
    and B: `solved_a`, `solved_ab`), "rejected" (share stage 1 rejected),
    "suite_a", "suite_b" (mean pass fractions), "turns_mean", "tokens_mean"
    and "truncated" (share cut by a budget).
  """
  outcomes = [e.outcome for e in rollout.episodes]
  rejected = _check_rejected(rejected, len(outcomes))
  pass_a = np.asarray(
    [solved_a(o, r) for o, r in zip(outcomes, rejected, strict=True)],
    np.float32,
  )
  pass_ab = np.asarray(
    [solved_ab(o, r) for o, r in zip(outcomes, rejected, strict=True)],
    np.float32,
  )
  turns = np.asarray([len(e.turns) for e in rollout.episodes], np.float32)
  tokens = np.asarray(rollout.batch.length, np.float32)
  scalars = {
    "pass_a": float(pass_a.mean()),
    "pass_ab": float(pass_ab.mean()),
    "rejected": float(rejected.mean()),
    "suite_a": float(np.mean([o.suite_a for o in outcomes])),
    "suite_b": float(np.mean([o.suite_b for o in outcomes])),
    "turns_mean": float(turns.mean()),
    "tokens_mean": float(tokens.mean()),
    "truncated": float(np.mean(np.asarray(rollout.batch.truncated))),
  }
  if total is not None:
    scalars["total_mean"] = float(np.mean(total))
  return scalars


def solved_a(outcome: code_env.Outcome, rejected: bool) -> bool:
  """Whether an episode is solved on suite A (`codeagent_rl.solved`).

  Args:
    outcome: the episode's outcome.
    rejected: whether anti-cheat stage 1 rejected it.
  """
  return solved.suite_a(
    passed=outcome.suite_a_passed,
    total=outcome.suite_a_total,
    executed=outcome.executed,
    rejected=bool(rejected),
  )


def solved_ab(outcome: code_env.Outcome, rejected: bool) -> bool:
  """Whether an episode is solved on suites A and B (`codeagent_rl.solved`).

  Args:
    outcome: the episode's outcome.
    rejected: whether anti-cheat stage 1 rejected it.
  """
  return solved.suites_a_and_b(
    a_passed=outcome.suite_a_passed,
    a_total=outcome.suite_a_total,
    b_passed=outcome.suite_b_passed,
    b_total=outcome.suite_b_total,
    gen_passed=outcome.suite_gen_passed,
    gen_total=outcome.suite_gen_total,
    executed=outcome.executed,
    rejected=bool(rejected),
  )


def stage1_rejected(
  anticheat: pipeline.AntiCheat, episodes: Sequence[code_env.EpisodeState]
) -> np.ndarray:
  """[B] bool: whether stage 1 rejects each finished episode.

  Args:
    anticheat: the anti-cheat (its config and classifier).
    episodes: finished episodes.
  """
  rewards, _ = anticheat.episode_rewards(episodes)
  return pipeline.rejected(rewards, anticheat.config)


def _check_rejected(rejected: np.ndarray, num_episodes: int) -> np.ndarray:
  rejected = np.asarray(rejected, bool)
  if rejected.shape != (num_episodes,):
    raise ValueError(
      f"rejected has shape {rejected.shape}; expected ({num_episodes},), one"
      " per episode."
    )
  return rejected


class Evaluator:
  """pass@1 on a fixed task list (module docstring).

  After each call, `last_per_task` holds that evaluation's per-task rates
  (`per_task_rates`), for paired comparisons of two models on the same
  tasks (`paired_difference`), and `last_episodes` its episodes.

  Attributes:
    anticheat: the anti-cheat of `exp.anticheat`, whose stage 1 says which
      episodes are rejected (never solved).
    last_per_task: per mode, the per-task rates of the last call.
    last_episodes: per mode, the finished episodes of the last call.
  """

  def __init__(
    self,
    exp: exp_lib.Experiment,
    env: code_env.CodeEnv,
    tasks: Sequence[schema.Task],
    *,
    batch_size: int,
    slots: int = 0,
  ):
    """Builds one jitted sampler per mode, and the anti-cheat.

    Args:
      exp: the experiment (modes in `exp.eval`, the anti-cheat in
        `exp.anticheat`).
      env: the environment (and its sandbox pool).
      tasks: held-out tasks.
      batch_size: episodes run together (lockstep, `slots` 0).
      slots: > 0: a mode's episodes all go through one slot-refill loop
        (`rollout.continuous`) of that many rows (at most the episodes), so
        no batch waits for its longest episode; 0: lockstep batches.
    """
    if type(slots) is not int or slots < 0:
      raise ValueError(f"Evaluator slots={slots!r}: must be an int >= 0.")
    self._exp = exp
    self._env = env
    self._tasks = list(tasks)
    self._batch_size = batch_size
    self._slots = slots
    temperature = {"greedy": 0.0, "sampled": exp.sampling.temperature}
    self._samplers = {
      mode: make_sampler(exp, temperature[mode]) for mode in exp.eval.modes
    }
    longest = max(len(env.reset(t).prompt_ids) for t in self._tasks)
    self._cache_len = agent_loop.cache_len_for(env.config, longest, env.format)
    self.anticheat = pipeline.AntiCheat.from_config(exp.anticheat)
    self.last_per_task: dict[str, dict[str, list]] = {}
    self.last_episodes: dict[str, list[code_env.EpisodeState]] = {}

  @classmethod
  def of_run(
    cls,
    exp: exp_lib.Experiment,
    env: code_env.CodeEnv,
    tasks: Sequence[schema.Task],
  ) -> Evaluator:
    """The main job's evaluator: PPO's rollout batch and slots."""
    return cls(
      exp,
      env,
      tasks,
      batch_size=exp.ppo.rollouts_per_iteration,
      slots=exp.ppo.rollout_slots,
    )

  def __call__(self, params: Any, rng: jax.Array) -> dict[str, float]:
    """{"eval/<mode>/pass_a": ..., "eval/<mode>/pass_ab": ..., ...}.

    Per mode: the `episode_scalars` over its episodes, "episodes", how
    many ran (tasks x samples per task), and where the tasks have an
    oracle suite `oracle.rates` named "oracle_<name>" ("oracle_pass" is
    pass@1 on the oracle).
    """
    out, per_task, episodes = {}, {}, {}
    params = distributed.host_copy(params)
    for k, (mode, sampler) in enumerate(self._samplers.items()):
      # Greedy decoding gives every copy of a task the same episode.
      copies = self._exp.eval.samples_per_task if mode == "sampled" else 1
      tasks = [t for t in self._tasks for _ in range(copies)]
      if self._slots:
        batches = [(tasks, keys.eval_sample(rng, k, 0))]
      else:
        batches = [
          (
            tasks[start : start + self._batch_size],
            keys.eval_sample(rng, k, start),
          )
          for start in range(0, len(tasks), self._batch_size)
        ]
      rollouts = [
        self._share(sampler, params, batch, key) for batch, key in batches
      ]
      if jax.process_count() > 1:
        every = distributed.gather(rollouts)
        rollouts = [
          agent_loop.concat([r[b] for r in every if r[b] is not None])
          for b in range(len(batches))
        ]
      rejected = [stage1_rejected(self.anticheat, r.episodes) for r in rollouts]
      scalars = _merge(
        [
          episode_scalars(r, x) for r, x in zip(rollouts, rejected, strict=True)
        ],
        rollouts,
      )
      scalars["episodes"] = float(len(tasks))
      episodes[mode] = [e for r in rollouts for e in r.episodes]
      # Tasks with an oracle suite: pass@1 on it too (metrics only).
      scalars.update(
        oracle_lib.episode_rates(
          self._env.pool, episodes[mode], self._env.judge_config, "oracle_"
        )
      )
      out.update({f"eval/{mode}/{name}": v for name, v in scalars.items()})
      per_task[mode] = per_task_rates(episodes[mode], np.concatenate(rejected))
    self.last_per_task = per_task
    self.last_episodes = episodes
    return out

  def _share(
    self,
    sampler: sampler_lib.Sampler,
    params: Any,
    tasks: Sequence[schema.Task],
    rng: jax.Array,
  ) -> agent_loop.Rollout | None:
    """This process's share of one batch of episodes (None if empty).

    A batch is `batch_size` episodes in lockstep, or with slots all of a
    mode's episodes in one slot-refill loop; one process runs it whole.
    """
    first, last, part = 0, len(tasks), None
    if jax.process_count() > 1:
      first, last = distributed.even_share(len(tasks))
      if first == last:
        return None
      part = sampler_lib.BatchPart(first, len(tasks))
    groups = list(range(len(tasks)))[first:last]
    policy = agent_loop.SamplerPolicy(
      sampler,
      {"params": params},
      self._env.format,
      self._cache_len,
      part=part,
    )
    if self._slots:
      return continuous.collect(
        self._env,
        policy,
        tasks[first:last],
        groups,
        rng,
        slots=min(self._slots, last - first),
        first_episode=first,
      )
    return agent_loop.collect(self._env, policy, tasks[first:last], groups, rng)


def per_task_rates(
  episodes: Sequence[code_env.EpisodeState], rejected: np.ndarray
) -> dict[str, list]:
  """Per-task pass rates of finished episodes (k per task with k samples).

  Args:
    episodes: finished episodes.
    rejected: [B] bool, whether stage 1 rejected each (`stage1_rejected`).

  Returns:
    {"task_id": [...], "pass_a": [...], "pass_ab": [...]}: one entry per
    distinct task, in order of first appearance; a rate is the share of
    that task's episodes solved on suite A (on suites A and B).
  """
  rejected = _check_rejected(rejected, len(episodes))
  counts: dict[str, list[int]] = {}
  for episode, r in zip(episodes, rejected, strict=True):
    a = solved_a(episode.outcome, r)
    ab = solved_ab(episode.outcome, r)
    n = counts.setdefault(episode.task.task_id, [0, 0, 0])
    n[0] += 1
    n[1] += int(a)
    n[2] += int(ab)
  return {
    "task_id": list(counts),
    "pass_a": [a / n for n, a, _ in counts.values()],
    "pass_ab": [ab / n for n, _, ab in counts.values()],
  }


def _merge(parts: list[dict[str, float]], rollouts) -> dict[str, float]:
  """Episode-weighted means of per-chunk scalars."""
  weights = np.asarray([len(r.episodes) for r in rollouts], np.float64)
  return {
    name: float(np.average([p[name] for p in parts], weights=weights))
    for name in parts[0]
  }


def paired_difference(
  before: dict[str, list], after: dict[str, list], rate: str = "pass_ab"
) -> dict[str, float] | None:
  """`after` minus `before` per task (`per_task_rates` of two models).

  Both models ran on the same tasks, so the difference is paired: its
  standard error (over tasks) leaves out how hard each task is, which
  dominates the noise of either rate alone.

  Args:
    before: per-task rates of the first model.
    after: per-task rates of the second; tasks are matched by task_id.
    rate: "pass_ab" or "pass_a".

  Returns:
    {"tasks", "mean", "se", "up", "down"}: tasks in both, the mean
    difference, its standard error (NaN for one task), and how many tasks
    rose or fell; None when no task is in both.
  """
  old = dict(zip(before["task_id"], before[rate], strict=True))
  new = dict(zip(after["task_id"], after[rate], strict=True))
  common = [t for t in new if t in old]
  if not common:
    return None
  diff = np.asarray([new[t] - old[t] for t in common], np.float64)
  se = diff.std(ddof=1) / np.sqrt(diff.size) if diff.size > 1 else math.nan
  return {
    "tasks": int(diff.size),
    "mean": float(diff.mean()),
    "se": float(se),
    "up": int((diff > 0).sum()),
    "down": int((diff < 0).sum()),
  }


def group_ratios(group_ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
  """Per group (in order of first appearance): max over min of `lengths`.

  Lengths are at least 1 here (an episode takes a turn and has a prompt);
  a zero is counted as 1.
  """
  ratios = []
  for g in dict.fromkeys(group_ids.tolist()):
    values = np.maximum(lengths[group_ids == g], 1)
    ratios.append(values.max() / values.min())
  return np.asarray(ratios, np.float64)


def rollout_metrics(
  rollout: agent_loop.Rollout,
  rewards: types.Rewards,
  anticheat: anticheat_config.AntiCheatConfig,
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
  """Reward, pass-rate and length scalars, and length histograms.

  Args:
    rollout: the iteration's episodes.
    rewards: their rewards after the anti-cheat.
    anticheat: the anti-cheat config: which stage-1 flags and scores
      reject, so a rejected episode is never counted as solved.

  Returns:
    (scalars, histograms) of a PPO iteration's rollouts.
  """
  total = np.asarray(rewards.total)
  rejected = pipeline.rejected(rewards, anticheat)
  s = episode_scalars(rollout, rejected, total)
  outcomes = [e.outcome for e in rollout.episodes]
  passing = np.asarray(
    [solved_a(o, r) for o, r in zip(outcomes, rejected, strict=True)],
    bool,
  )
  turns = np.asarray([len(e.turns) for e in rollout.episodes], np.float32)
  tokens = np.asarray(rollout.batch.length, np.float32)
  codes = [e.final_code for e in rollout.episodes]
  chars = np.asarray([len(c) for c in codes if c is not None], np.float32)
  scalars = {
    "reward/total_mean": s["total_mean"],
    "reward/pass_a": s["pass_a"],
    "reward/pass_ab": s["pass_ab"],
    "reward/suite_a": s["suite_a"],
    "reward/suite_b": s["suite_b"],
    "episode/count": float(len(rollout.episodes)),
    "episode/turns_mean": s["turns_mean"],
    "episode/tokens_mean": s["tokens_mean"],
    "episode/truncated": s["truncated"],
    "code/chars_mean": float(chars.mean()) if chars.size else float("nan"),
  }
  # The horizon's spread, not only its mean: a code agent's episodes for one
  # prompt run from a few turns to hundreds.
  for what, values in (("turns", turns), ("tokens", tokens)):
    scalars[f"episode/{what}_p50"] = float(np.percentile(values, 50))
    scalars[f"episode/{what}_p90"] = float(np.percentile(values, 90))
    scalars[f"episode/{what}_p95"] = float(np.percentile(values, 95))
    scalars[f"episode/{what}_max"] = float(values.max())
  # Within one prompt's group (GRPO's normalisation unit): longest over
  # shortest episode, in turns.
  ratios = group_ratios(np.asarray(rollout.batch.group_id), turns)
  scalars["episode/group_turns_ratio_p50"] = float(np.median(ratios))
  scalars["episode/group_turns_ratio_max"] = float(ratios.max())
  if rollout.render_ok is not None:
    # Share of episodes whose ids differ from a full render of their
    # messages (env.render_check): what the learner trains on is not what
    # the chat template would give the model for the same conversation.
    scalars["episode/render_mismatch"] = float(1.0 - rollout.render_ok.mean())
  hists = {}
  for label, rows in (("passing", passing), ("failing", ~passing)):
    for what, values in (("turns", turns), ("tokens", tokens)):
      name = f"length/{label}_{what}"
      scalars[name] = float(values[rows].mean()) if rows.any() else math.nan
      if rows.any():
        hists[name] = values[rows]
  return scalars, hists
