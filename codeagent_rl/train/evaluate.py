"""pass@1 of the actor on held-out tasks, through the sandbox.

Modes: `greedy` (temperature 0, one episode per task) and `sampled` (the
training sampling settings, `eval.samples_per_task` episodes per task). The
episode is the same multi-turn agent loop as training, graded by the same
judge; pass@1 on suite A is the share of episodes whose submission passed
every hidden test, on A-and-B of those that also passed every held-out test
(what stage 2 requires). With k samples per task the sampled pass@1 is the
mean over tasks of (passing samples / k): the unbiased pass@1 estimate of
the Codex paper, with less noise than one sample per task.
"""

from __future__ import annotations

from collections.abc import Sequence
import math
from typing import Any

import jax
import numpy as np

from codeagent_rl.envs import code_env
from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.models import transformer
from codeagent_rl.rollout import agent_loop
from codeagent_rl.tasks import schema
from codeagent_rl.train import experiment as exp_lib


def make_sampler(
  exp: exp_lib.Experiment, temperature: float
) -> sampler_lib.Sampler:
  """A sampler of the actor for one turn of `env.max_tokens_per_turn`."""
  sampling = exp.sampling
  cfg = sampler_lib.SamplerConfig(
    temperature=temperature,
    top_k=sampling.top_k if temperature else 0,
    top_p=sampling.top_p if temperature else 1.0,
    max_new_tokens=exp.env.max_tokens_per_turn,
    vocab_limit=exp.tokenizer().vocab_size,
  )
  return sampler_lib.Sampler(
    transformer.Actor(exp.model),
    exp.model,
    cfg,
    pad_id=exp.tokenizer().pad_id,
  )


def episode_scalars(
  rollout: agent_loop.Rollout, total: np.ndarray | None = None
) -> dict[str, float]:
  """Pass rates and lengths of a rollout's episodes.

  Args:
    rollout: finished episodes.
    total: [B] rewards after anti-cheat (defaults to the raw `rewards.total`).

  Returns:
    "pass_a", "pass_ab" (shares of episodes passing every test of suite A /
    of suites A and B), "suite_a", "suite_b" (mean pass fractions),
    "turns_mean", "tokens_mean" and "truncated" (share cut by a budget).
  """
  outcomes = [e.outcome for e in rollout.episodes]
  pass_a = np.asarray([passed_a(o) for o in outcomes], np.float32)
  pass_ab = np.asarray(
    [passed_a(o) and passed_b(o) for o in outcomes], np.float32
  )
  turns = np.asarray([len(e.turns) for e in rollout.episodes], np.float32)
  tokens = np.asarray(rollout.batch.length, np.float32)
  scalars = {
    "pass_a": float(pass_a.mean()),
    "pass_ab": float(pass_ab.mean()),
    "suite_a": float(np.mean([o.suite_a for o in outcomes])),
    "suite_b": float(np.mean([o.suite_b for o in outcomes])),
    "turns_mean": float(turns.mean()),
    "tokens_mean": float(tokens.mean()),
    "truncated": float(np.mean(np.asarray(rollout.batch.truncated))),
  }
  if total is not None:
    scalars["total_mean"] = float(np.mean(total))
  return scalars


def passed_a(outcome: code_env.Outcome) -> bool:
  """Whether the submission passed every test of suite A."""
  return outcome.suite_a_total > 0 and (
    outcome.suite_a_passed == outcome.suite_a_total
  )


def passed_b(outcome: code_env.Outcome) -> bool:
  """Whether the submission passed every test of suite B."""
  return outcome.suite_b_total > 0 and (
    outcome.suite_b_passed == outcome.suite_b_total
  )


class Evaluator:
  """pass@1 on a fixed task list (module docstring).

  After each call, `last_per_task` holds that evaluation's per-task rates
  (`per_task_rates`), for paired comparisons of two models on the same
  tasks (`paired_difference`).
  """

  def __init__(
    self,
    exp: exp_lib.Experiment,
    env: code_env.CodeEnv,
    tasks: Sequence[schema.Task],
    *,
    batch_size: int,
  ):
    """Builds one jitted sampler per mode.

    Args:
      exp: the experiment (modes in `exp.eval`).
      env: the environment (and its sandbox pool).
      tasks: held-out tasks.
      batch_size: episodes run together.
    """
    self._exp = exp
    self._env = env
    self._tasks = list(tasks)
    self._batch_size = batch_size
    temperature = {"greedy": 0.0, "sampled": exp.sampling.temperature}
    self._samplers = {
      mode: make_sampler(exp, temperature[mode]) for mode in exp.eval.modes
    }
    longest = max(len(env.reset(t).prompt_ids) for t in self._tasks)
    self._cache_len = agent_loop.cache_len_for(env.config, longest)
    self.last_per_task: dict[str, dict[str, list]] = {}

  def __call__(self, params: Any, rng: jax.Array) -> dict[str, float]:
    """{"eval/<mode>/pass_a": ..., "eval/<mode>/pass_ab": ..., ...}.

    Per mode: the `episode_scalars` over its episodes and "episodes", how
    many ran (tasks x samples per task).
    """
    out, per_task = {}, {}
    for k, (mode, sampler) in enumerate(self._samplers.items()):
      # Greedy decoding gives every copy of a task the same episode.
      copies = self._exp.eval.samples_per_task if mode == "sampled" else 1
      tasks = [t for t in self._tasks for _ in range(copies)]
      rollouts = []
      for start in range(0, len(tasks), self._batch_size):
        chunk = tasks[start : start + self._batch_size]
        policy = agent_loop.SamplerPolicy(
          sampler, {"params": params}, self._env.tokenizer, self._cache_len
        )
        rollouts.append(
          agent_loop.collect(
            self._env,
            policy,
            chunk,
            list(range(len(chunk))),
            jax.random.fold_in(rng, k * 100_003 + start),
          )
        )
      scalars = _merge([episode_scalars(r) for r in rollouts], rollouts)
      scalars["episodes"] = float(len(tasks))
      out.update({f"eval/{mode}/{name}": v for name, v in scalars.items()})
      per_task[mode] = per_task_rates([e for r in rollouts for e in r.episodes])
    self.last_per_task = per_task
    return out


def per_task_rates(
  episodes: Sequence[code_env.EpisodeState],
) -> dict[str, list]:
  """Per-task pass rates of finished episodes (k per task with k samples).

  Returns:
    {"task_id": [...], "pass_a": [...], "pass_ab": [...]}: one entry per
    distinct task, in order of first appearance; a rate is the share of
    that task's episodes passing suite A (and suite B).
  """
  counts: dict[str, list[int]] = {}
  for episode in episodes:
    a = passed_a(episode.outcome)
    ab = a and passed_b(episode.outcome)
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
