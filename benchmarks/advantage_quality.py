r"""Advantage quality: each estimator's per-turn advantages against the truth.

Run from the repository root, on a run directory whose SFT has finished
(`python -m codeagent_rl.main --config=configs/long_horizon.py ...`):

  python -m benchmarks.advantage_quality \
    --config=configs/long_horizon.py --workdir=DIR --prompts=8 \
    --continuations=4 --value_pretrain_rounds=4 --out=/tmp/aq.json

The policy is the run's SFT actor (also the KL reference, so the rewards
carry no KL term), sampling at the training temperature
(`config.sampling`). It plays `--prompts` training tasks (the first ones of
the run's train split), each `ppo.samples_per_prompt` times as one group,
through the PPO environment (anti-cheat gate included). Then:

- Ground truth. At every turn boundary of every episode, the state s_k
  (k turns taken, the k-th observation appended; s_0 is the prompt) is
  restored from the transcript (`states_after_turns`) and continued
  `--continuations` (K) times by the same policy
  (`agent_loop.collect(starts=...)`, many states per batch). V*(s_k) is
  the mean `Rewards.total` (after the anti-cheat) of those continuations;
  the terminal state's value is the episode's own reward. The true
  advantage of turn k + 1 is A*_{k+1} = V*(s_{k+1}) - V*(s_k).
- Estimators (`ESTIMATORS`), each the run's config with a few fields
  changed, computed on the same episodes by the project's own code
  (`steps.targets`: token rewards, the estimator, whitening as
  configured). A turn's advantage is the mean of its tokens'. The critics
  are value-pre-trained first, all on the same rounds of rollouts (the
  prompts and keys `value_pretrain.pretrain_value` uses, every round run:
  the critics see the same data), each on its own estimator's value
  targets: Monte-Carlo returns where `lam_critic` is 1 (`pretrain_value`'s
  targets), else the lambda-returns a critic warm-up iteration trains on.
  Estimators whose critics would train alike share one (`critic_key`).

Printed and written (JSON, and a PNG beside it):

  corr        Pearson correlation of the per-turn advantages with A*,
              over all turns and per episode-length tercile (by turns,
              within the sampled episodes); null where either is constant
  sign        share of turns with A* != 0 whose advantage has A*'s sign
  critic MAE  |V(s_k) - V*(s_k)| of each critic, by turn depth
              (`diagnostics.DEPTH_BUCKETS`; turn k + 1 reads V(s_k))
  ceiling     the most correlation any estimator could reach with A*
              from K continuations (its noise; `truth_reliability`)
  EV pretrain the critic's explained variance of its targets in the last
              pre-training round (of the values before that round's
              update, as `pretrain_value` logs it)
  EV vs V*    1 - Var[V* - V] / Var[V*] over the sampled open states

Writes benchmarks/results/advantage_quality.json (or --out).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
import copy
import dataclasses
import datetime
import functools
import json
import pathlib
import sys
import time
from typing import Any

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np

from benchmarks import horizon_bench
from codeagent_rl.anticheat import pipeline
from codeagent_rl.envs import code_env
from codeagent_rl.parallel import transfers
from codeagent_rl.rl import diagnostics
from codeagent_rl.rollout import agent_loop
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import pools
from codeagent_rl.train import critic_inputs
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import keys
from codeagent_rl.train import ppo as ppo_lib
from codeagent_rl.train import run as run_lib
from codeagent_rl.train import sft as sft_lib
from codeagent_rl.train import steps
from codeagent_rl.train import workdir as workdir_lib

DEFAULT_OUT = "benchmarks/results/advantage_quality.json"
TERCILES = ("all", *diagnostics.BUCKETS)

# What every estimator's config sets: no adaptive truncation (the critic
# would cut the episodes it is measured on); a critic warm-up iteration
# with the actor frozen, so that a critic whose targets are not
# Monte-Carlo returns is pre-trained by `Learner.learn` as PPO's warm-up
# trains it.
_COMMON = {
  "rl.adaptive_truncation.enabled": False,
  "ppo.critic_warmup_iterations": 1,
  "critic.privileged": "none",
  "rl.advantage.credit": "token",
  "rl.advantage.lam_length_alpha": 0.0,
}
_GAE = {
  **_COMMON,
  "rl.advantage.estimator": "gae",
  "rl.advantage.lam": 0.95,
  "rl.advantage.lam_critic": 1.0,
  "rl.advantage.critic_trust": "none",
}
# The estimators compared: the fields of the run's config each changes.
ESTIMATORS = {
  # The recipe before decoupled lambdas: token credit, 0.95 for both.
  "gae_old": {**_GAE, "rl.advantage.lam_critic": 0.95},
  # VAPO: length-adaptive actor lambda, Monte-Carlo value targets.
  "gae_vapo": {**_GAE, "rl.advantage.lam_length_alpha": 0.05},
  # One value and advantage per turn, lambda 0.95 per turn.
  "gae_turn": {**_GAE, "rl.advantage.credit": "turn"},
  # gae_vapo with a critic that reads the hidden tests.
  "gae_tests": {
    **_GAE,
    "rl.advantage.lam_length_alpha": 0.05,
    "critic.privileged": "tests",
  },
  # Token credit, lambda 0.95 moved towards 1 by how little of the
  # returns the critic explains (`advantages.actor_lambda`).
  "gae_trust": {**_GAE, "rl.advantage.critic_trust": "explained_variance"},
  "grpo": {**_COMMON, "rl.advantage.estimator": "grpo"},
  "rloo": {**_COMMON, "rl.advantage.estimator": "rloo"},
  "dr_grpo": {**_COMMON, "rl.advantage.estimator": "dr_grpo"},
}
# Starts longer than this are prefilled in pieces: attention over a whole
# 3,000-token prefix of many rows at once would hold [B, heads, T, S]
# logits (gigabytes); a rollout's own prefills are a prompt or one
# observation.
PREFILL_CHUNK = 256


def define_flags():
  """Registers the benchmark's flags."""
  config_flags.DEFINE_config_file(
    "config", "configs/long_horizon.py", "The run's config."
  )
  flags.DEFINE_string("workdir", None, "Run directory with a finished SFT.")
  flags.DEFINE_integer("prompts", 8, "Training tasks, one group each.")
  flags.DEFINE_integer(
    "continuations", 4, "K: Monte-Carlo continuations of every state."
  )
  flags.DEFINE_integer(
    "value_pretrain_rounds",
    4,
    "Value pre-training rounds of every critic (ppo.prompts_per_iteration"
    " groups each).",
  )
  flags.DEFINE_list(
    "estimators", list(ESTIMATORS), f"Estimators, of {list(ESTIMATORS)}."
  )
  flags.DEFINE_integer(
    "rows", 32, "Continuations per rollout batch (KV-cache rows)."
  )
  flags.DEFINE_float(
    "temperature",
    None,
    "Sampling temperature (default: the run's config.sampling).",
  )
  flags.DEFINE_integer("seed", 0, "Seed of the episodes and continuations.")
  flags.DEFINE_string("out", DEFAULT_OUT, "JSON file to write (PNG beside).")
  harness.define_flags()
  flags.mark_flags_as_required(["workdir"])


# --- Ground truth and agreement (pure) ----------------------------------------


def true_values(
  episode_reward: float, continuation_rewards: np.ndarray
) -> np.ndarray:
  """[n + 1] V*(s_0..s_n) of an episode of n turns.

  Args:
    episode_reward: the episode's own reward: the value of its terminal
      state s_n.
    continuation_rewards: [n, K] rewards of the K continuations of each
      open state s_0..s_{n-1}.
  """
  rewards = np.asarray(continuation_rewards, np.float64)
  if rewards.ndim != 2 or rewards.shape[1] < 1:
    raise ValueError(
      f"continuation rewards of shape {rewards.shape}: expected [n, K >= 1]."
    )
  return np.append(rewards.mean(axis=1), float(episode_reward))


def true_advantages(values: np.ndarray) -> np.ndarray:
  """[n] A*_k = V*(s_k) - V*(s_{k-1}) of turns 1..n from `true_values`."""
  return np.diff(np.asarray(values, np.float64))


def turn_starts(trainable: np.ndarray) -> np.ndarray:
  """Positions of one row's turn starts (first tokens of trainable runs)."""
  mask = np.asarray(trainable, bool)
  before = np.concatenate([[False], mask[:-1]])
  return np.flatnonzero(mask & ~before)


def per_turn_means(x: np.ndarray, trainable: np.ndarray) -> list[np.ndarray]:
  """Per row, [turns] the mean of `x` over each turn's tokens.

  Args:
    x: [B, T] token values (e.g. advantages).
    trainable: [B, T] bool; a turn is a maximal run of trainable tokens.
  """
  turn = np.asarray(diagnostics.turn_index(jnp.asarray(trainable)))
  mask = np.asarray(trainable, bool)
  out = []
  for row in range(mask.shape[0]):
    ids = turn[row][mask[row]]
    n = int(ids.max(initial=0))
    sums = np.bincount(ids, weights=np.asarray(x[row])[mask[row]], minlength=n)
    counts = np.bincount(ids, minlength=n + 1)
    out.append(sums[1 : n + 1] / counts[1 : n + 1])
  return out


def agreement(estimate: np.ndarray, truth: np.ndarray) -> dict[str, Any]:
  """How per-turn advantages agree with the true ones.

  Returns:
    {"corr": Pearson correlation (None when either side is constant or
    there are fewer than 2 turns), "sign_agreement": share of the turns
    with a true advantage != 0 whose estimate has its sign (None without
    such turns), "n": turns, "n_signed": turns with a true advantage != 0}.
  """
  estimate = np.asarray(estimate, np.float64)
  truth = np.asarray(truth, np.float64)
  if estimate.shape != truth.shape:
    raise ValueError(f"shapes {estimate.shape} and {truth.shape} differ.")
  corr = None
  if len(truth) >= 2 and np.ptp(truth) > 0 and np.ptp(estimate) > 0:
    corr = float(np.corrcoef(estimate, truth)[0, 1])
  signed = truth != 0
  sign = None
  if signed.any():
    sign = float(np.mean(np.sign(estimate[signed]) == np.sign(truth[signed])))
  return {
    "corr": corr,
    "sign_agreement": sign,
    "n": int(len(truth)),
    "n_signed": int(signed.sum()),
  }


def terciles(turns: Sequence[int]) -> np.ndarray:
  """[N] `diagnostics.BUCKETS` index of each episode's length in turns."""
  return np.asarray(diagnostics.length_buckets(jnp.asarray(turns)))


def _joined(arrays: Sequence[np.ndarray], keep: Sequence[int]) -> np.ndarray:
  return np.concatenate([arrays[i] for i in keep] or [np.zeros(0)])


def tercile_rows(
  name: str,
  estimates: Sequence[np.ndarray],
  truths: Sequence[np.ndarray],
  buckets: np.ndarray,
) -> list[dict[str, Any]]:
  """`agreement` over all episodes' turns and per length tercile.

  Args:
    name: the estimator.
    estimates: per episode, [turns] its advantages.
    truths: per episode, [turns] the true advantages.
    buckets: [episodes] tercile of each (`terciles`).
  """
  rows = []
  for label in TERCILES:
    keep = [
      i
      for i in range(len(truths))
      if label == "all" or diagnostics.BUCKETS[buckets[i]] == label
    ]
    rows.append(
      {
        "estimator": name,
        "tercile": label,
        **agreement(_joined(estimates, keep), _joined(truths, keep)),
      }
    )
  return rows


def error_by_depth(
  values: Sequence[np.ndarray], truths: Sequence[np.ndarray]
) -> dict[str, dict[str, Any]]:
  """Mean |V(s_k) - V*(s_k)| per `diagnostics.DEPTH_BUCKETS` bucket.

  Args:
    values: per episode, [turns] the critic's V(s_0..s_{n-1}) (read at each
      turn's first token, so V(s_k) belongs to turn k + 1).
    truths: per episode, [turns] V*(s_0..s_{n-1}).

  Returns:
    {bucket: {"mae": float or None when empty, "n": states}}.
  """
  errors = [
    np.abs(np.asarray(v, np.float64) - np.asarray(t, np.float64))
    for v, t in zip(values, truths, strict=True)
  ]
  depth = [np.arange(1, len(e) + 1) for e in errors]
  flat_err = np.concatenate(errors or [np.zeros(0)])
  flat_depth = np.concatenate(depth or [np.zeros(0, int)])
  bucket = np.asarray(diagnostics.depth_buckets(jnp.asarray(flat_depth)))
  out = {}
  for i, label in enumerate(diagnostics.DEPTH_BUCKETS):
    sel = flat_err[bucket == i]
    out[label] = {
      "mae": float(sel.mean()) if len(sel) else None,
      "n": int(len(sel)),
    }
  return out


def explained_variance(
  values: Sequence[np.ndarray], truths: Sequence[np.ndarray]
) -> float | None:
  """1 - Var[V* - V] / Var[V*] over all states; None when V* is constant."""
  v = np.concatenate([np.asarray(x, np.float64) for x in values] or [[]])
  t = np.concatenate([np.asarray(x, np.float64) for x in truths] or [[]])
  if len(t) < 2 or np.var(t) == 0:
    return None
  return float(1.0 - np.var(t - v) / np.var(t))


def truth_reliability(
  episode_rewards: Sequence[float],
  continuation: Sequence[np.ndarray],
  buckets: np.ndarray,
) -> dict[str, dict[str, Any]]:
  """How well A* from K continuations can be predicted at all, per tercile.

  A* is a difference of two means of K rewards: noisy. The true
  advantages from the first K // 2 continuations and from the others
  correlate by r (split halves); by Spearman-Brown the reliability of
  the full-K A* is 2r / (1 + r), and no estimator's correlation with it
  can exceed that's square root (`corr_ceiling`).

  Args:
    episode_rewards: [N] each episode's reward.
    continuation: per episode, [turns, K] its states' continuation rewards.
    buckets: [N] `terciles` of the episodes.

  Returns:
    {tercile: {"split_half_corr", "corr_ceiling" (None where undefined:
    K < 2, constant halves or r <= 0), "n": turns}}.
  """
  halves = []
  for reward, rewards in zip(episode_rewards, continuation, strict=True):
    rewards = np.asarray(rewards, np.float64)
    k = rewards.shape[1] // 2
    if k == 0:
      halves = None
      break
    halves.append(
      tuple(
        true_advantages(true_values(reward, part))
        for part in (rewards[:, :k], rewards[:, k:])
      )
    )
  out = {}
  for label in TERCILES:
    keep = [
      i
      for i in range(len(continuation))
      if label == "all" or diagnostics.BUCKETS[buckets[i]] == label
    ]
    n = int(sum(len(continuation[i]) for i in keep))
    corr = None
    if halves is not None:
      corr = agreement(
        _joined([h[0] for h in halves], keep),
        _joined([h[1] for h in halves], keep),
      )["corr"]
    ceiling = None
    if corr is not None and corr > 0:
      ceiling = float(np.sqrt(2 * corr / (1 + corr)))
    out[label] = {"split_half_corr": corr, "corr_ceiling": ceiling, "n": n}
  return out


def states_after_turns(
  fresh: code_env.EpisodeState,
  final: code_env.EpisodeState,
  tokens: np.ndarray,
  trainable: np.ndarray,
) -> list[tuple[code_env.EpisodeState, list[int]]]:
  """The open states s_0..s_{n-1} of a finished episode, and their ids.

  s_k holds the first k turns (a probe task's answers are computed from
  them) and the ids up to the first token of turn k + 1: prompt, actions
  and observations. Ready for `agent_loop.collect(starts=...)`.

  Args:
    fresh: `env.reset(final.task)`: a new episode (its wall-clock budget
      starts now; not done, no outcome).
    final: the finished episode.
    tokens: [T] its row's ids.
    trainable: [T] its row's trainable mask.

  Raises:
    ValueError: the row's turns are not the episode's.
  """
  starts = turn_starts(trainable)
  if len(starts) != len(final.turns):
    raise ValueError(
      f"task {final.task.task_id!r}: {len(starts)} runs of trainable tokens"
      f" in its row, {len(final.turns)} turns in its episode."
    )
  out = []
  for k, at in enumerate(starts.tolist()):
    ids = np.asarray(tokens[:at]).tolist()
    state = dataclasses.replace(
      fresh, turns=final.turns[:k], num_tokens=len(ids)
    )
    out.append((state, ids))
  return out


# --- The measurement ---------------------------------------------------------


class ChunkedPrefill:
  """A `Policy` whose conversations start from long ids in pieces.

  `begin` prefills the first `chunk` ids of each row, then the rest
  `chunk` at a time as observations; everything else is the inner
  policy's.
  """

  def __init__(self, inner: agent_loop.Policy, chunk: int = PREFILL_CHUNK):
    self.inner = inner
    self.chunk = chunk

  def begin(self, prompts):
    """Starts the rows with their first chunk, then appends the rest."""
    self.inner.begin([list(p[: self.chunk]) for p in prompts])
    longest = max((len(p) for p in prompts), default=0)
    for at in range(self.chunk, longest, self.chunk):
      self.inner.observe([list(p[at : at + self.chunk]) for p in prompts])

  def generate(self, budgets, rng):
    """The inner policy's turn."""
    return self.inner.generate(budgets, rng)

  def observe(self, observations):
    """The inner policy's observe."""
    self.inner.observe(observations)

  def restart(self, rows, prompts):
    """Not used by `agent_loop.collect`."""
    raise NotImplementedError("ChunkedPrefill serves agent_loop.collect only.")

  def end(self):
    """Releases the inner policy's conversations."""
    self.inner.end()


def estimator_experiments(
  config: Any, names: Sequence[str]
) -> dict[str, exp_lib.Experiment]:
  """The validated experiment of each estimator (`ESTIMATORS`)."""
  out = {}
  for name in names:
    cfg = copy.deepcopy(config)
    cfg.update_from_flattened_dict(ESTIMATORS[name])
    out[name] = run_lib.job_from_config(cfg).exp
  return out


def critic_key(exp: exp_lib.Experiment) -> tuple:
  """What an estimator's critic pre-training depends on.

  Estimators with equal keys pre-train the same critic on the same data,
  so one is trained for them all. With `lam_critic` 1 the targets are
  `pretrain_value`'s Monte-Carlo returns, which the actor's lambda (`lam`,
  `lam_length_alpha`, `critic_trust`) does not enter.
  """
  adv = exp.rl.advantage
  if adv.lam_critic == 1.0:
    adv = dataclasses.replace(
      adv, lam=1.0, lam_length_alpha=0.0, critic_trust="none"
    )
  return dataclasses.replace(exp.rl, advantage=adv), exp.privileged


def _reward_totals(learner: ppo_lib.Learner, rollout) -> np.ndarray:
  """[B] `Rewards.total` of a rollout's episodes, after the anti-cheat."""
  return learner.rewards_of(rollout, time.perf_counter(), None).total


def pretrain_critics(
  base: ppo_lib.Learner,
  learners: dict[str, ppo_lib.Learner],
  sft_params: Any,
  train_tasks: Sequence[Any],
  rounds: int,
  console=print,
) -> tuple[dict[str, Any], dict[str, list[dict]]]:
  """Value-pre-trains each learner's critic on the same rollouts.

  Round k rolls out the frozen SFT policy on `pretrain_value`'s prompts
  and keys of round k, once; each critic then takes one update on them
  (`Learner.learn`), on Monte-Carlo returns where its `lam_critic` is 1,
  else on its configured lambda-returns with the actor frozen by the
  warm-up.

  Returns:
    ({estimator: critic state}, {estimator: per round scalars}).
  """
  exp = base.exp
  critics, history, actor = {}, {name: [] for name in learners}, None
  for name, learner in learners.items():
    actor, critics[name] = learner.initial_states(
      sft_params, keys.ppo_init(exp.seed)
    )
  for k in range(rounds):
    t0 = time.perf_counter()
    prompts = data_lib.iteration_prompts(
      train_tasks,
      exp.seed,
      k,
      exp.ppo.prompts_per_iteration,
      salt=data_lib.VALUE_PRETRAIN_PROMPTS,
    )
    rng = keys.value_pretrain(exp.seed, k)
    collected = base.collect(
      actor.params, None, prompts, rng, index=0, value_only=True
    )
    for name, learner in learners.items():
      monte_carlo = learner.exp.rl.advantage.lam_critic == 1.0
      (actor, critics[name]), metrics = learner.learn(
        (actor, critics[name]),
        collected,
        rng,
        index=0,
        value_only=monte_carlo,
      )
      scalars = metrics.scalars
      if scalars["policy/actor_trained"]:
        raise AssertionError(f"{name}: the actor trained in pre-training.")
      history[name].append(
        {
          "round": k,
          "explained_variance": scalars["critic/explained_variance"],
          "loss": scalars["loss/critic"],
          "reward_mean": float(np.mean(collected.total)),
        }
      )
    console(
      f"value pretrain {k + 1}/{rounds} | explained variance "
      + " ".join(
        f"{n} {h[-1]['explained_variance']:.3f}" for n, h in history.items()
      )
      + f" ({time.perf_counter() - t0:.0f} s)"
    )
  return critics, history


def critic_values(
  learner: ppo_lib.Learner,
  critic_params: Any,
  batch: Any,
  tasks: Sequence[Any],
) -> tuple[np.ndarray, np.ndarray]:
  """The critic on a trajectory batch: ([B, T] shifted values, [B] after).

  `Learner.values`' outputs: the value of the state that produces each
  token, and the value after each row's last valid token (what a
  truncated row bootstraps from). Rows go through it
  `ppo.rollouts_per_iteration` at a time (the last group padded with
  copies of its last row), as wide as their longest row, bucketed.
  """
  exp = learner.exp
  size = exp.ppo.rollouts_per_iteration
  b, t = batch.tokens.shape
  values = np.zeros((b, t), np.float32)
  after_last = np.zeros((b,), np.float32)
  for lo in range(0, b, size):
    idx = np.minimum(np.arange(lo, lo + size), b - 1)
    length = np.asarray(batch.length)[idx]
    width = data_lib.bucket_width(int(length.max()), exp.ppo.length_bucket, t)
    host = {
      "tokens": np.asarray(batch.tokens)[idx, :width],
      "valid": np.asarray(batch.valid)[idx, :width],
      "length": length,
    }
    if exp.privileged.enabled:
      host["prefix"], host["prefix_valid"] = critic_inputs.prefix_arrays(
        exp.conversation, [tasks[i] for i in idx], exp.privileged.max_tokens
      )
    arrays = learner.shard(host)
    out = learner.values(
      critic_params,
      arrays["tokens"],
      arrays["valid"],
      arrays["length"],
      prefix=arrays.get("prefix"),
      prefix_valid=arrays.get("prefix_valid"),
    )
    chunk, last = (np.asarray(x) for x in jax.device_get(out))
    n = min(size, b - lo)
    values[lo : lo + n, :width] = chunk[:n]
    after_last[lo : lo + n] = last[:n]
  return values, after_last


def estimator_advantages(
  exp: exp_lib.Experiment,
  batch: Any,
  total: np.ndarray,
  critic: tuple[np.ndarray, np.ndarray] | None,
) -> np.ndarray:
  """[B, T] the estimator's token advantages, whitened as configured.

  `steps.targets` with the estimator's `config.rl`. The policy is the KL
  reference: its log-probs under both are equal and the KL penalty is 0,
  so zeros stand for both.

  Args:
    exp: the estimator's experiment.
    batch: the episodes' trajectory batch.
    total: [B] their `Rewards.total`.
    critic: `critic_values`' (values, after_last), or None without a
      critic.
  """
  trainable = np.asarray(batch.trainable, bool)
  truncated = np.asarray(batch.truncated, bool)
  zeros = np.zeros(trainable.shape, np.float32)
  values, bootstrap = zeros, np.zeros(trainable.shape[:1], np.float32)
  if critic is not None:
    values = critic[0]
    bootstrap = np.asarray(steps.bootstrap_values(truncated, critic[1]))
  targets = jax.jit(functools.partial(steps.targets, rl=exp.rl))
  advantages, _, _ = targets(
    np.asarray(total, np.float32),
    trainable,
    zeros,
    zeros,
    values,
    truncated,
    bootstrap,
    np.asarray(batch.group_id, np.int32),
  )
  return np.asarray(advantages)


def continuation_rewards(
  learner: ppo_lib.Learner,
  policy: agent_loop.Policy,
  starts: Sequence[tuple[code_env.EpisodeState, Sequence[int]]],
  remaining: Sequence[int],
  rows: int,
  rng: jax.Array,
  console=print,
) -> tuple[np.ndarray, dict[str, int]]:
  """The reward of one continuation of each start, and why they stopped.

  The starts run `rows` at a time in lockstep (`agent_loop.collect` with
  `starts`), those with the most turns left in their own episode
  (`remaining`) first, so that a batch's rows end at similar times. Batch
  c uses `fold_in(rng, c)`. Each batch's wall-clock budget
  (`env.max_wall_s`) starts when the batch does, as an episode's does at
  its reset.

  Returns:
    ([len(starts)] rewards, {stop reason: continuations}).
  """
  order = sorted(range(len(starts)), key=lambda j: (-remaining[j], j))
  out = np.zeros((len(starts),), np.float32)
  reasons = collections.Counter()
  env = learner.env
  for c, lo in enumerate(range(0, len(order), rows)):
    picked = order[lo : lo + rows]
    t0 = time.perf_counter()
    now = env.reset(starts[picked[0]][0].task).started_at
    rollout = agent_loop.collect(
      env,
      policy,
      [starts[j][0].task for j in picked],
      list(range(len(picked))),
      transfers.fold_in(rng, c),
      starts=[
        (dataclasses.replace(starts[j][0], started_at=now), starts[j][1])
        for j in picked
      ],
    )
    out[picked] = _reward_totals(learner, rollout)
    reasons.update(e.stop_reason for e in rollout.episodes)
    turns = sum(
      len(e.turns) - len(starts[j][0].turns)
      for e, j in zip(rollout.episodes, picked, strict=True)
    )
    console(
      f"continuations {lo + len(picked)}/{len(starts)}: {len(picked)} rows,"
      f" {turns} turns ({time.perf_counter() - t0:.0f} s)"
    )
  if reasons[code_env.STOP_MAX_WALL_S]:
    console(
      f"WARNING: {reasons[code_env.STOP_MAX_WALL_S]} continuations stopped"
      f" by the wall-clock budget (env.max_wall_s={env.config.max_wall_s}),"
      " not by the policy: their states' V* are biased low. Use fewer"
      " --rows, or a machine less busy."
    )
  return out, dict(sorted(reasons.items()))


@dataclasses.dataclass(frozen=True)
class Measured:
  """What the measurement found on the sampled episodes.

  Attributes:
    rows: `tercile_rows` of every estimator.
    critic_error_by_depth: {critic estimator: `error_by_depth`}.
    critic_explained_variance: {critic estimator: `explained_variance` of
      its V(s_k) against V*(s_k) over the open states}.
    reliability: `truth_reliability` of the ground truth.
    true_values: per episode, [turns + 1] V*(s_0..s_n).
    estimates: {estimator: per episode, [turns] advantages}.
    critic_state_values: {critic estimator: per episode, [turns] V(s_k)}.
  """

  rows: list[dict[str, Any]]
  critic_error_by_depth: dict[str, dict[str, dict[str, Any]]]
  critic_explained_variance: dict[str, float | None]
  reliability: dict[str, dict[str, Any]]
  true_values: list[np.ndarray]
  estimates: dict[str, list[np.ndarray]]
  critic_state_values: dict[str, list[np.ndarray]]


def compare(
  turns: Sequence[int],
  episode_rewards: np.ndarray,
  continuation: Sequence[np.ndarray],
  advantages: dict[str, np.ndarray],
  values: dict[str, np.ndarray],
  trainable: np.ndarray,
) -> Measured:
  """Estimators and critics against the ground truth (pure).

  Args:
    turns: [N] turns of each episode.
    episode_rewards: [N] each episode's reward.
    continuation: per episode, [turns, K] its states' continuation rewards.
    advantages: {estimator: [N, T] token advantages}.
    values: {critic estimator: [N, T] shifted critic values}.
    trainable: [N, T] the episodes' trainable masks.
  """
  truth_v = [
    true_values(r, c)
    for r, c in zip(episode_rewards, continuation, strict=True)
  ]
  truth_a = [true_advantages(v) for v in truth_v]
  for n, a in zip(turns, truth_a, strict=True):
    if len(a) != n:
      raise ValueError(f"{len(a)} true advantages for an episode of {n} turns.")
  buckets = terciles(turns)
  rows, estimates = [], {}
  for name, adv in advantages.items():
    estimates[name] = per_turn_means(adv, trainable)
    rows += tercile_rows(name, estimates[name], truth_a, buckets)
  state_values, errors, fit = {}, {}, {}
  open_truths = [t[:-1] for t in truth_v]
  for name, v in values.items():
    state_values[name] = [
      np.asarray(v[i])[turn_starts(trainable[i])] for i in range(len(turns))
    ]
    errors[name] = error_by_depth(state_values[name], open_truths)
    fit[name] = explained_variance(state_values[name], open_truths)
  reliability = truth_reliability(episode_rewards, continuation, buckets)
  return Measured(
    rows, errors, fit, reliability, truth_v, estimates, state_values
  )


# --- Report ------------------------------------------------------------------


def _fmt(x: float | None, spec: str = ".3f") -> str:
  return "  n/a" if x is None else format(x, spec)


def table_text(result: dict[str, Any]) -> str:
  """The printed table of a result (`main`'s JSON)."""
  by = {(r["estimator"], r["tercile"]): r for r in result["rows"]}
  names = list(dict.fromkeys(r["estimator"] for r in result["rows"]))
  head = " ".join(f"{t:>7}" for t in TERCILES)
  lines = [
    f"{'estimator':<10} | corr with A*: {head} | sign agreement: {head} | turns"
  ]
  for name in names:
    corr = " ".join(f"{_fmt(by[name, t]['corr']):>7}" for t in TERCILES)
    sign = " ".join(
      f"{_fmt(by[name, t]['sign_agreement']):>7}" for t in TERCILES
    )
    lines.append(
      f"{name:<10} | {'':14}{corr} | {'':16}{sign} | {by[name, 'all']['n']}"
    )
  ceiling = result["truth_reliability"]
  cells = " ".join(f"{_fmt(ceiling[t]['corr_ceiling']):>7}" for t in TERCILES)
  lines.append(f"{'(ceiling)':<10} | {'':14}{cells} |")
  errors = result["critic_error_by_depth"]
  if errors:
    depth = list(diagnostics.DEPTH_BUCKETS)
    lines.append("")
    lines.append(
      f"{'critic':<10} | EV pretrain | EV vs V* | MAE |V - V*| by turn: "
      + " ".join(f"{d[5:]:>6}" for d in depth)
    )
    for name, by_depth in errors.items():
      ev = result["critic_explained_variance"].get(name)
      true_ev = result["critic_explained_variance_true"].get(name)
      cells = " ".join(f"{_fmt(by_depth[d]['mae']):>6}" for d in depth)
      lines.append(
        f"{name:<10} | {_fmt(ev):>11} | {_fmt(true_ev):>8} | {'':21}{cells}"
      )
  return "\n".join(lines)


def plot(result: dict[str, Any], path: pathlib.Path) -> None:
  """Correlation per estimator and tercile; critic error by depth (PNG)."""
  import matplotlib  # noqa: PLC0415 (only the report needs it)

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  names = list(dict.fromkeys(r["estimator"] for r in result["rows"]))
  by = {(r["estimator"], r["tercile"]): r for r in result["rows"]}
  fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
  width = 0.8 / len(TERCILES)
  x = np.arange(len(names))
  for j, label in enumerate(TERCILES):
    corr = [by[n, label]["corr"] for n in names]
    left.bar(
      x + (j - (len(TERCILES) - 1) / 2) * width,
      [np.nan if c is None else c for c in corr],
      width,
      label=label,
    )
  left.axhline(0.0, color="black", linewidth=0.6)
  ceiling = result["truth_reliability"]["all"]["corr_ceiling"]
  if ceiling is not None:
    left.axhline(
      ceiling, color="gray", linestyle="--", linewidth=1, label="ceiling"
    )
  left.set_xticks(x, names, rotation=30)
  left.set_ylabel("Pearson corr. with A* (per turn)")
  left.set_title("advantage quality by episode-length tercile")
  left.legend(title="tercile", fontsize=8)
  depth = list(diagnostics.DEPTH_BUCKETS)
  for name, by_depth in result["critic_error_by_depth"].items():
    mae = [by_depth[d]["mae"] for d in depth]
    right.plot(
      range(len(depth)),
      [np.nan if m is None else m for m in mae],
      "o-",
      label=name,
    )
  right.set_xticks(range(len(depth)), [d[5:] for d in depth])
  right.set_xlabel("turn (the critic's V(s_k) is read at turn k + 1)")
  right.set_ylabel("mean |V(s_k) - V*(s_k)|")
  right.set_title("critic error by turn depth")
  if result["critic_error_by_depth"]:
    right.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _check_flags(f) -> None:
  """Refuses bad arguments before anything runs (exits with a message)."""
  unknown = [e for e in f.estimators if e not in ESTIMATORS]
  if unknown or not f.estimators or len(set(f.estimators)) != len(f.estimators):
    sys.exit(
      f"error: --estimators={','.join(f.estimators)}: expected distinct"
      f" names of {list(ESTIMATORS)}."
    )
  for name, low in (
    ("prompts", 1),
    ("continuations", 1),
    ("value_pretrain_rounds", 0),
    ("rows", 1),
  ):
    if getattr(f, name) < low:
      sys.exit(f"error: --{name}={getattr(f, name)}: must be >= {low}.")
  if f.temperature is not None and f.temperature < 0:
    sys.exit(f"error: --temperature={f.temperature}: must be >= 0.")
  if not (pathlib.Path(f.workdir) / workdir_lib.SFT_DIR).is_dir():
    sys.exit(
      f"error: {f.workdir} has no SFT checkpoint ({workdir_lib.SFT_DIR}/):"
      " run the main job on it first."
    )


def main(argv):
  del argv
  f = flags.FLAGS
  _check_flags(f)
  started = time.perf_counter()
  wall = {}
  config = copy.deepcopy(f.config)
  if f.temperature is not None:
    config.sampling.temperature = f.temperature
  exp = run_lib.job_from_config(config).exp
  experiments = estimator_experiments(config, f.estimators)
  sandbox = exp.sandbox.apply(harness.config_from_flags(exp.sandbox))
  mesh, rules = exp.make_mesh()
  task_sets = data_lib.make_task_sets(exp.data, exp.data_seed)
  tasks = task_sets.train[: f.prompts]
  group = exp.ppo.samples_per_prompt
  group_ids = np.repeat(np.arange(len(tasks)), group)
  anticheat = pipeline.AntiCheat.from_config(exp.anticheat)
  key = jax.random.key(f.seed)
  with pools.open_pool(sandbox) as pool:
    # The PPO environment: the anti-cheat's gate before a submission runs.
    env = code_env.CodeEnv(
      pool, exp.conversation, exp.env, pre_submit=anticheat.pre_submit
    )
    sft_params, _ = sft_lib.run_sft(exp, None, f.workdir, mesh, rules)
    cache_len = agent_loop.cache_len_for(
      exp.env, data_lib.longest_prompt(env, task_sets.train), exp.conversation
    )

    def learner_of(e):
      return ppo_lib.Learner(
        e,
        mesh,
        rules,
        ref_params=sft_params,
        env=env,
        anticheat=anticheat,
        cache_len=cache_len,
      )

    base = learner_of(exp)
    # 1. The episodes, a group per prompt (`Learner.collect`'s rollouts).
    t0 = time.perf_counter()
    collected = base.collect(
      sft_params,
      None,
      tasks,
      {"rollout": transfers.fold_in(key, 0)},
      index=0,
      value_only=True,
    )
    episodes = collected.rollout.episodes
    batch = jax.tree.map(np.asarray, collected.rollout.batch)
    total = np.asarray(collected.total, np.float64)
    wall["sample_s"] = time.perf_counter() - t0
    horizon = horizon_bench.horizon_row(episodes, group_ids)
    print(
      f"{len(episodes)} episodes: turns p50 {horizon['turns_p50']:.0f} max"
      f" {horizon['turns_max']:.0f}, reward mean {total.mean():.3f}"
      f" ({wall['sample_s']:.0f} s)",
      flush=True,
    )
    # 2. Critics, value-pre-trained: one per distinct `critic_key`, named
    # by the first estimator that uses it.
    t0 = time.perf_counter()
    owners = {}
    for n, e in experiments.items():
      if e.uses_critic:
        owners.setdefault(critic_key(e), n)
    critic_of = {
      n: owners[critic_key(e)] for n, e in experiments.items() if e.uses_critic
    }
    learners = {n: learner_of(experiments[n]) for n in owners.values()}
    critics, history = pretrain_critics(
      base,
      learners,
      sft_params,
      task_sets.train,
      f.value_pretrain_rounds,
      console=lambda line: print(line, flush=True),
    )
    row_tasks = [e.task for e in episodes]
    trained = {
      n: critic_values(learners[n], critics[n].params, batch, row_tasks)
      for n in learners
    }
    values = {n: trained[c] for n, c in critic_of.items()}
    history = {n: history[c] for n, c in critic_of.items()}
    wall["value_pretrain_s"] = time.perf_counter() - t0
    # 3. Ground truth: K continuations of every open state.
    t0 = time.perf_counter()
    starts, remaining, owner = [], [], []
    for i, episode in enumerate(episodes):
      opened = states_after_turns(
        env.reset(episode.task),
        episode,
        batch.tokens[i],
        batch.trainable[i],
      )
      for k, start in enumerate(opened):
        for _ in range(f.continuations):
          starts.append(start)
          remaining.append(len(episode.turns) - k)
          owner.append(i)
    policy = ChunkedPrefill(
      agent_loop.SamplerPolicy(
        base.sampler, {"params": sft_params}, exp.conversation, cache_len
      )
    )
    rewards, stops = continuation_rewards(
      base,
      policy,
      starts,
      remaining,
      f.rows,
      transfers.fold_in(key, 1),
      console=lambda line: print(line, flush=True),
    )
    owner = np.asarray(owner)
    continuation = [
      rewards[owner == i].reshape(len(e.turns), f.continuations)
      for i, e in enumerate(episodes)
    ]
    wall["continuations_s"] = time.perf_counter() - t0
  # 4. The estimators on the same episodes.
  t0 = time.perf_counter()
  advantages = {
    n: estimator_advantages(
      e, batch, total, (values[n] if e.uses_critic else None)
    )
    for n, e in experiments.items()
  }
  measured = compare(
    [len(e.turns) for e in episodes],
    total,
    continuation,
    advantages,
    {n: v for n, (v, _) in values.items()},
    np.asarray(batch.trainable, bool),
  )
  wall["estimators_s"] = time.perf_counter() - t0
  wall["total_s"] = time.perf_counter() - started
  result = {
    "date": datetime.date.today().isoformat(),
    "rows": measured.rows,
    "critic_error_by_depth": measured.critic_error_by_depth,
    "critic_explained_variance": {
      n: (h[-1]["explained_variance"] if h else None)
      for n, h in history.items()
    },
    "critic_explained_variance_true": measured.critic_explained_variance,
    "truth_reliability": measured.reliability,
    "value_pretrain": history,
    "settings": {
      "config": exp.preset,
      "workdir": str(f.workdir),
      "prompts": len(tasks),
      "samples_per_prompt": group,
      "episodes": len(episodes),
      "states": len(starts) // f.continuations,
      "continuations": f.continuations,
      "value_pretrain_rounds": f.value_pretrain_rounds,
      "value_pretrain_prompts": exp.ppo.prompts_per_iteration,
      "temperature": exp.sampling.temperature,
      "rows": f.rows,
      "seed": f.seed,
      "config_seed": exp.seed,
      "env": {
        "max_turns": exp.env.max_turns,
        "max_total_tokens": exp.env.max_total_tokens,
      },
      "estimators": {
        n: {
          **dataclasses.asdict(e.rl.advantage),
          "critic_privileged": e.privileged.mode,
          # The estimator whose pre-trained critic this one uses.
          "critic": critic_of.get(n),
        }
        for n, e in experiments.items()
      },
    },
    "horizon": horizon,
    "continuation_stop_reasons": stops,
    "reward_mean": float(total.mean()),
    "true_value_s0_mean": float(np.mean([v[0] for v in measured.true_values])),
    "wall_s": {k: round(v, 1) for k, v in wall.items()},
    # Per episode, what the numbers above are made of (for analyses the
    # script does not make).
    "episodes": [
      {
        "task_id": e.task.task_id,
        "group": int(g),
        "turns": len(e.turns),
        "stop_reason": e.stop_reason,
        "reward": float(r),
        "continuation_rewards": np.round(c, 6).tolist(),
        "true_values": np.round(v, 6).tolist(),
        "advantages": {
          n: np.round(a[i], 6).tolist() for n, a in measured.estimates.items()
        },
        "critic_values": {
          n: np.round(a[i], 6).tolist()
          for n, a in measured.critic_state_values.items()
        },
      }
      for i, (e, g, r, c, v) in enumerate(
        zip(
          episodes,
          group_ids,
          total,
          continuation,
          measured.true_values,
          strict=True,
        )
      )
    ],
  }
  text = table_text(result)
  print(text)
  out = pathlib.Path(f.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(result, indent=2) + "\n")
  png = out.with_suffix(".png")
  plot(result, png)
  print(f"wrote {out} and {png}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
