"""The trainer's config sections as frozen, self-validating dataclasses.

Defaults live in the experiment configs (`configs/tiny.py`, built on
`configs/common.py`); this module only converts and checks. A wrong value
raises `ValueError` naming the field (`config.ppo.epochs=0: ...`).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

from codeagent_rl import config_utils
from codeagent_rl.rollout import repo_demos
from codeagent_rl.tasks import probes as probes_lib
from codeagent_rl.tasks import repo_gen
from codeagent_rl.tasks import synthetic

# The bound of `config.seed` (keys.MAX_SEED), without importing jax here.
MAX_DATA_SEED = 2**32 - 1

# Task generators of `config.data.generator`.
GENERATORS = ("synthetic", "probes", "repo")
# What the audit of the task files does with a task that has a problem
# (`tasks/audit.py`): drop it, stop the run, or no audit.
BAD_TASKS = ("skip", "error", "off")
# What a leak found by the data-isolation check before SFT does.
ISOLATION_MODES = ("error", "warn", "off")


def _int_at_least(section: str, obj: Any, names: tuple[str, ...], low: int):
  for name in names:
    value = getattr(obj, name)
    if type(value) is not int or value < low:
      raise ValueError(
        f"config.{section}.{name}={value!r}: must be an integer >= {low}."
      )


def _positive_float(section: str, obj: Any, names: tuple[str, ...]):
  for name in names:
    value = getattr(obj, name)
    if type(value) not in (int, float) or not 0 < value < math.inf:
      raise ValueError(
        f"config.{section}.{name}={value!r}: must be a finite number > 0."
      )


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Validated `config.data`: task files, or the synthetic task sets.

  A split comes from its task file when one is named (`train_tasks`,
  `eval_tasks`: JSONL in the task schema, e.g. written by
  `python -m codeagent_rl.tasks.convert`), else from the generator named
  by `generator`: "synthetic" (function families, tasks/synthetic.py, the
  fields from `difficulty_weights` to `oracle_tests`), "probes"
  (interactive tasks with heavy-tailed horizons, tasks/probes.py, the
  `probe_*` fields) or "repo" (repository tasks, tasks/repo_gen.py, with
  the demonstrations of rollout/repo_demos.py; the `repo_*` fields).

  Attributes:
    train_tasks: JSONL task file of the train split (PPO prompts), or None.
      Tasks from a file come without demonstrations (`sft.steps` must be 0).
    eval_tasks: JSONL task file of the held-out split, or None.
    demonstrations: JSONL of demonstration plans of train tasks
      (`synthetic.write_demo_plans`' format: task_id, kind, actions), or
      None; with it, SFT trains on these instead of the synthetic plans
      (file train tasks need it for `sft.steps` > 0).
    num_train_tasks: synthetic tasks of the train split (SFT demonstrations
      and PPO prompts); unused with `train_tasks`.
    num_eval_tasks: synthetic held-out tasks of the test split (disjoint
      parameters); unused with `eval_tasks`.
    difficulty_weights: relative weights of levels 1, 2, 3.
    families: family names to draw from; empty means all.
    single_turn: probability of a `single_turn` demonstration per task.
    multi_turn: probability of a `multi_turn` demonstration.
    wrong_final: probability of a flawed `wrong_final` demonstration.
    hardcoded: probability of a flawed `hardcoded` demonstration.
    early_exit: probability of a flawed `early_exit` demonstration.
    weak_assert: probability of a flawed `weak_assert` demonstration.
    swallow: probability of a flawed `swallow` demonstration.
    suite_a: "strong" or "weak" synthetic suite A (`synthetic.SUITE_A_MODES`).
    oracle_tests: tests of each synthetic task's oracle suite, which only
      metrics read (`tasks/oracle.py`); 0: none.
    generator: "synthetic", "probes" or "repo".
    probe_bisect: probability of a `bisect` demonstration (probe tasks).
    probe_scan: probability of a long `scan` demonstration.
    probe_give_up: probability of a flawed early `give_up` demonstration.
    probe_off_by_one: probability of a flawed `off_by_one` demonstration.
    repo_min_modules: fewest modules of a generated package (>= 3).
    repo_max_modules: most modules of a generated package (<= 15).
    repo_direct: weight of a `direct` repo demonstration (each train task
      gets one demonstration, its kind drawn by these weights).
    repo_probing: weight of a long `probing` demonstration.
    repo_give_up: weight of a flawed `give_up` demonstration.
    repo_weakened_test: weight of a flawed `weakened_test` demonstration
      (a hack: graded runs use the task's own test file).
    repo_edit_tool: the tool the repo demonstrations change files with:
      "edit" (a search/replace block) or "replace_lines" (line numbers as
      `view` shows them, and the new lines); the policy has both.
    isolation: the data-isolation check of the SFT data before SFT
      (`tasks/isolation.py`): "error" (a leak stops the run), "warn" (it
      is reported) or "off".
    bad_tasks: what the audit of the task files (`train_tasks`,
      `eval_tasks`; `tasks/audit.py`: references run on every test,
      checkers loaded and run on their outputs) does with a task that has a
      problem: "skip" (dropped with a warning, counted in
      WORKDIR/task_audit.json), "error" (the run stops before anything is
      written, listing them) or "off" (no audit). Synthetic tasks are not
      audited: their generator checks its references.
    seed: the seed of the generated tasks and demonstrations, or None for
      the run's `config.seed`. Runs that differ only in `config.seed` then
      share their tasks (and can share one SFT model: the estimator
      comparison's `--sft=shared`).
  """

  train_tasks: str | None
  eval_tasks: str | None
  demonstrations: str | None
  num_train_tasks: int
  num_eval_tasks: int
  difficulty_weights: tuple[float, ...]
  families: tuple[str, ...]
  single_turn: float
  multi_turn: float
  wrong_final: float
  hardcoded: float
  early_exit: float
  weak_assert: float
  swallow: float
  suite_a: str
  oracle_tests: int
  generator: str
  probe_bisect: float
  probe_scan: float
  probe_give_up: float
  probe_off_by_one: float
  repo_min_modules: int
  repo_max_modules: int
  repo_direct: float
  repo_probing: float
  repo_give_up: float
  repo_weakened_test: float
  repo_edit_tool: str
  isolation: str
  bad_tasks: str
  seed: int | None

  def __post_init__(self):
    if self.seed is not None and (
      type(self.seed) is not int or not 0 <= self.seed <= MAX_DATA_SEED
    ):
      raise ValueError(
        f"config.data.seed={self.seed!r}: must be None (the run's seed) or"
        f" an integer in [0, {MAX_DATA_SEED}]."
      )
    for name in ("train_tasks", "eval_tasks", "demonstrations"):
      path = getattr(self, name)
      if path is None:
        continue
      if not isinstance(path, str) or not path:
        raise ValueError(
          f"config.data.{name}={path!r}: must be the path of a JSONL task"
          " file, or None for synthetic tasks."
        )
      if not os.path.isfile(path):
        raise ValueError(
          f"config.data.{name}={path!r}: no such file. Write one with"
          " python -m codeagent_rl.tasks.convert, or leave it unset for"
          " synthetic tasks."
        )
    _int_at_least("data", self, ("num_train_tasks", "num_eval_tasks"), low=1)
    object.__setattr__(self, "families", tuple(self.families))
    object.__setattr__(
      self, "difficulty_weights", tuple(self.difficulty_weights)
    )
    if self.isolation not in ISOLATION_MODES:
      raise ValueError(
        f"config.data.isolation={self.isolation!r}: must be one of"
        f" {ISOLATION_MODES}."
      )
    if self.bad_tasks not in BAD_TASKS:
      raise ValueError(
        f"config.data.bad_tasks={self.bad_tasks!r}: must be one of {BAD_TASKS}."
      )
    if self.generator not in GENERATORS:
      raise ValueError(
        f"config.data.generator={self.generator!r}: must be one of"
        f" {GENERATORS}."
      )
    try:  # the generators' own checks, reported under config.data
      self.synthetic("train", 0)
    except ValueError as e:
      raise ValueError(
        f"config.data: {str(e).replace('SyntheticConfig.', '')}"
      ) from e
    try:
      self.probes("train", 0)
    except ValueError as e:
      raise ValueError(
        f"config.data: {str(e).replace('ProbeConfig.', 'probe_')}"
      ) from e
    try:
      self.repo()
    except (TypeError, ValueError) as e:
      raise ValueError(f"config.data: repo tasks: {e}") from e
    if self.repo_edit_tool not in repo_demos.EDIT_TOOLS:
      raise ValueError(
        f"config.data.repo_edit_tool={self.repo_edit_tool!r}: must be one"
        f" of {repo_demos.EDIT_TOOLS}."
      )
    weights = self.repo_weights()
    bad = {k: w for k, w in weights.items() if type(w) not in (int, float)}
    if (
      bad
      or any(not 0 <= w < math.inf for w in weights.values())
      or not any(weights.values())
    ):
      raise ValueError(
        f"config.data.repo_*: demonstration weights {weights} must be"
        " finite numbers >= 0, not all 0."
      )

  def repo(self) -> repo_gen.GenConfig:
    """The repository task generator's config."""
    return repo_gen.GenConfig(
      min_modules=self.repo_min_modules, max_modules=self.repo_max_modules
    )

  def repo_weights(self) -> dict[str, float]:
    """The weight of each repo demonstration kind (`repo_demos.PLAN_KINDS`)."""
    return {
      "direct": self.repo_direct,
      "probing": self.repo_probing,
      "give_up": self.repo_give_up,
      "weakened_test": self.repo_weakened_test,
    }

  def probes(self, split: str, seed: int) -> probes_lib.ProbeConfig:
    """The probe generator's config of `split` ("train" | "test")."""
    return probes_lib.ProbeConfig(
      num_tasks=self.num_train_tasks
      if split == "train"
      else self.num_eval_tasks,
      seed=seed,
      split=split,
      bisect=self.probe_bisect,
      scan=self.probe_scan,
      give_up=self.probe_give_up,
      off_by_one=self.probe_off_by_one,
    )

  def synthetic(self, split: str, seed: int) -> synthetic.SyntheticConfig:
    """The generator config of `split` ("train" | "test")."""
    return synthetic.SyntheticConfig(
      num_tasks=self.num_train_tasks
      if split == "train"
      else self.num_eval_tasks,
      seed=seed,
      split=split,
      difficulty_weights=self.difficulty_weights,
      families=self.families,
      single_turn=self.single_turn,
      multi_turn=self.multi_turn,
      wrong_final=self.wrong_final,
      hardcoded=self.hardcoded,
      early_exit=self.early_exit,
      weak_assert=self.weak_assert,
      swallow=self.swallow,
      suite_a=self.suite_a,
      oracle_tests=self.oracle_tests,
    )


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
  """Validated `config.sampling`: how rollouts sample the policy.

  Attributes:
    temperature: softmax temperature of training rollouts (> 0); log-probs
      for the PPO ratio and the KL use the same temperature.
    top_k: keep the k most likely tokens (0: no limit).
    top_p: nucleus mass (1.0: no limit).
  """

  temperature: float
  top_k: int
  top_p: float

  def __post_init__(self):
    _positive_float("sampling", self, ("temperature",))
    _int_at_least("sampling", self, ("top_k",), low=0)
    if type(self.top_p) not in (int, float) or not 0 < self.top_p <= 1:
      raise ValueError(
        f"config.sampling.top_p={self.top_p!r}: must be in (0, 1]."
      )


@dataclasses.dataclass(frozen=True)
class SFTConfig:
  """Validated `config.sft`: supervised training on demonstrations.

  The optimiser is `config.optim`'s AdamW with this section's rate.

  Attributes:
    steps: optimiser steps (0 skips SFT: PPO starts from the init).
    batch_size: demonstrations per step.
    learning_rate: peak learning rate.
    warmup_steps: linear warmup steps.
    final_lr_fraction: the rate at the last step as a fraction of the peak,
      reached by a cosine decay after warmup; 1.0 keeps the peak rate.
    length_bucket: demonstrations are batched with others of the same length
      rounded up to a multiple of this (smaller: less padding, more
      compiled widths).
    log_every: steps between progress lines / metrics.
    save_every: steps between checkpoints an interrupted SFT resumes from
      (0: only the finished SFT is saved).
    retrain: a workdir's SFT model made from other inputs than this run's
      (`train/fingerprint.py`) is set aside and trained again; False: the
      run stops, naming what changed.
  """

  steps: int
  batch_size: int
  learning_rate: float
  warmup_steps: int
  final_lr_fraction: float
  length_bucket: int
  log_every: int
  save_every: int
  retrain: bool

  def __post_init__(self):
    _int_at_least("sft", self, ("steps", "warmup_steps", "save_every"), low=0)
    _int_at_least(
      "sft", self, ("batch_size", "length_bucket", "log_every"), low=1
    )
    _positive_float("sft", self, ("learning_rate",))
    if type(self.retrain) is not bool:
      raise ValueError(f"config.sft.retrain={self.retrain!r}: must be a bool.")
    if not 0.0 <= self.final_lr_fraction <= 1.0:
      raise ValueError(
        f"config.sft.final_lr_fraction={self.final_lr_fraction}: must be in"
        " [0, 1]."
      )


@dataclasses.dataclass(frozen=True)
class PPOConfig:
  """Validated `config.ppo`: the learner loop.

  Attributes:
    iterations: rollout + update rounds.
    prompts_per_iteration: distinct tasks per iteration.
    samples_per_prompt: rollouts per task (the group of GRPO/RLOO).
    epochs: passes over one iteration's rollouts.
    minibatches: optimiser steps per epoch (rollouts split evenly).
    micro_batch_size: rows per forward/backward; gradients of a minibatch
      are accumulated over its micro-batches (exactly: one normaliser).
    logprob_micro_batch_size: rows per forward of the log-prob and value
      passes over an iteration's rollouts (one group after another, so a
      forward never holds every rollout's activations); divides
      `rollouts_per_iteration`.
    rollout_slots: 0: an iteration's rollouts run in lockstep, one KV-cache
      row each (`agent_loop.collect`); > 0: that many rows, an episode
      that ends handing its row to the next one (`continuous.collect`);
      at most `rollouts_per_iteration`.
    max_staleness: 0: an iteration's rollouts are sampled by the policy it
      updates; 1: the rollouts of iteration k + 1 are generated (and
      scored) while iteration k updates, by the policy before that update,
      and the loss weights them by `rl.loss.behaviour_cap`'s truncated
      importance weight.
    critic_warmup_iterations: first iterations that train only the critic
      (the actor is frozen while the value head learns the returns).
    skip_actor_on_flat_rewards: the actor does not update in an iteration
      whose rollouts all got the same `Rewards.total` (the critic still
      does): the task then gives no policy gradient, and whitening would
      scale the advantages' noise (critic errors, KL shaping) to unit size.
    length_bucket: trajectories are padded to a multiple of this (at most
      `env.max_total_tokens`), so few shapes compile and short batches stay
      cheap.
    packing: the learner's forwards run on packed rows: each micro-batch's
      trajectories placed one after another in rows of the batch's length,
      attention and positions per trajectory (`train/packing.py`); same
      losses and gradients, less padding when lengths differ widely.
    reference_on_host: the frozen KL reference's params live in pinned host
      memory and are copied to the devices for its log-prob pass each
      iteration: a model's parameter bytes freed on the devices.
    eval_every: iterations between evaluations (the last one always runs).
    value_pretrain_iterations: before the first PPO iteration, at most this
      many rounds that regress the critic on Monte-Carlo returns (lambda 1)
      of rollouts of the frozen SFT policy (VAPO's value pre-training);
      0: none. Only with a critic.
    value_pretrain_patience: value pre-training stops once the explained
      variance gained over this many rounds is below
      `value_pretrain_min_gain` (it has levelled off).
    value_pretrain_min_gain: see `value_pretrain_patience`.
    value_pretrain_retrain: a workdir's pre-trained critic (PPO checkpoint
      step 0) made with other inputs than this run's is set aside and
      pre-trained again; False: the run stops, naming what changed.
    dynamic_sampling: DAPO's dynamic sampling: a group whose rollouts all
      got the same `Rewards.total` is dropped and more prompts are drawn
      (`train/dynamic_sampling.py`) until the batch has
      `prompts_per_iteration` groups with a reward spread, or
      `dynamic_sampling_max_rounds` rounds have run; then the batch is
      filled with flat groups.
    dynamic_sampling_max_rounds: the most rounds of prompt draws of one
      iteration, the first included (>= 1).
  """

  iterations: int
  prompts_per_iteration: int
  samples_per_prompt: int
  epochs: int
  minibatches: int
  micro_batch_size: int
  logprob_micro_batch_size: int
  rollout_slots: int
  max_staleness: int
  critic_warmup_iterations: int
  skip_actor_on_flat_rewards: bool
  length_bucket: int
  packing: bool
  reference_on_host: bool
  eval_every: int
  value_pretrain_iterations: int
  value_pretrain_patience: int
  value_pretrain_min_gain: float
  value_pretrain_retrain: bool
  dynamic_sampling: bool
  dynamic_sampling_max_rounds: int

  def __post_init__(self):
    _int_at_least(
      "ppo",
      self,
      (
        "critic_warmup_iterations",
        "value_pretrain_iterations",
        "rollout_slots",
      ),
      low=0,
    )
    _int_at_least(
      "ppo",
      self,
      ("value_pretrain_patience", "dynamic_sampling_max_rounds"),
      low=1,
    )
    gain = self.value_pretrain_min_gain
    if type(gain) not in (int, float) or not 0 <= gain < math.inf:
      raise ValueError(
        f"config.ppo.value_pretrain_min_gain={gain!r}: must be a finite"
        " number >= 0."
      )
    for name in (
      "skip_actor_on_flat_rewards",
      "packing",
      "reference_on_host",
      "value_pretrain_retrain",
      "dynamic_sampling",
    ):
      if type(getattr(self, name)) is not bool:
        raise ValueError(
          f"config.ppo.{name}={getattr(self, name)!r}: must be a bool."
        )
    _int_at_least(
      "ppo",
      self,
      (
        "iterations",
        "prompts_per_iteration",
        "samples_per_prompt",
        "epochs",
        "minibatches",
        "micro_batch_size",
        "logprob_micro_batch_size",
        "length_bucket",
        "eval_every",
      ),
      low=1,
    )
    rows = self.rollouts_per_iteration
    if rows % self.minibatches:
      raise ValueError(
        f"config.ppo.minibatches={self.minibatches}: must divide the"
        f" {rows} rollouts per iteration (prompts_per_iteration x"
        " samples_per_prompt)."
      )
    if (rows // self.minibatches) % self.micro_batch_size:
      raise ValueError(
        f"config.ppo.micro_batch_size={self.micro_batch_size}: must divide"
        f" the minibatch of {rows // self.minibatches} rollouts."
      )
    if rows % self.logprob_micro_batch_size:
      raise ValueError(
        "config.ppo.logprob_micro_batch_size="
        f"{self.logprob_micro_batch_size}: must divide the"
        f" {rows} rollouts of an iteration."
      )
    if self.max_staleness not in (0, 1) or type(self.max_staleness) is not int:
      raise ValueError(
        f"config.ppo.max_staleness={self.max_staleness!r}: must be 0"
        " (synchronous) or 1 (rollouts overlap the previous update)."
      )
    if self.rollout_slots > rows:
      raise ValueError(
        f"config.ppo.rollout_slots={self.rollout_slots}: must be <= the"
        f" {rows} rollouts per iteration (prompts_per_iteration x"
        " samples_per_prompt); 0 runs them in lockstep."
      )

  @property
  def rollouts_per_iteration(self) -> int:
    """prompts_per_iteration x samples_per_prompt."""
    return self.prompts_per_iteration * self.samples_per_prompt


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """Validated `config.eval`: pass@1 on the held-out tasks.

  Attributes:
    greedy: evaluate greedy decoding (temperature 0).
    sampled: also evaluate samples at `config.sampling`.
    samples_per_task: episodes per task in the sampled mode; pass@1 is
      their mean (less noise for the same tasks).
  """

  greedy: bool
  sampled: bool
  samples_per_task: int

  def __post_init__(self):
    _int_at_least("eval", self, ("samples_per_task",), low=1)
    for name in ("greedy", "sampled"):
      if type(getattr(self, name)) is not bool:
        raise ValueError(
          f"config.eval.{name}={getattr(self, name)!r}: must be a bool."
        )
    if not (self.greedy or self.sampled):
      raise ValueError(
        "config.eval: greedy and sampled are both False; enable one."
      )

  @property
  def modes(self) -> tuple[str, ...]:
    """The enabled modes, "greedy" first."""
    return tuple(m for m in ("greedy", "sampled") if getattr(self, m))


def section(cls, config: Any, name: str):
  """`cls` built from `config[name]`, naming a missing section."""
  if name not in config:
    raise ValueError(f"config has no section {name!r}.")
  return config_utils.from_section(cls, config[name], name)
