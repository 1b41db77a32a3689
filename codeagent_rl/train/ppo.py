"""PPO: one iteration, owned by `Learner.iteration`.

One iteration (`Learner.iteration(states, prompts, rng, index=k)`):

  1. the iteration's prompts, each `ppo.samples_per_prompt` times (a group
     per prompt, for group-relative estimators);
  2. rollouts with the current actor (`rollout.agent_loop.collect`; with
     `ppo.rollout_slots` > 0 `rollout.continuous.collect`, whose rows are
     refilled as episodes end), whose submissions the sandbox pool grades
     while generation goes on; with `rl.adaptive_truncation.enabled` the
     current critic ends episodes whose outcome it is sure of
     (`rollout.truncation.Stopper`);
  3. rewards: both anti-cheat stages over the episodes
     (`anticheat.pipeline.AntiCheat.rollout_rewards`);
  4. the batch, cut to its bucketed longest row on the host, goes to the
     devices once; jitted forwards: log-probs under the rollout actor and
     the SFT reference, critic values (skipped by critic-free estimators);
  5. token rewards (terminal score, k1 KL penalty when `rl.kl.placement` is
     "reward") -> advantages (`rl.advantage.estimator`) -> whitening;
  6. `ppo.epochs` epochs, each one jitted call that permutes the rows and
     scans the minibatches through an actor and a critic update
     (accumulated over micro-batches); with a critic the actor stays frozen
     for `ppo.critic_warmup_iterations`, and with
     `ppo.skip_actor_on_flat_rewards` in an iteration whose rollouts all
     got the same `Rewards.total` (`rewards_are_flat`);
  7. the iteration's metrics, fetched from the devices once.

With `ppo.max_staleness` = 1 the loop overlaps steps 1-2 of iteration
k + 1 with steps 4-7 of iteration k: a thread collects the next rollouts
with a copy of the actor as it was before iteration k's update
(`Learner.rollouts`; they are scored when the learner takes them,
`Learner.score`), and iteration k + 1's loss weights them by the
truncated importance weight of the updated (proximal) actor against that
copy (`behaviour_params`; decoupled PPO). Staleness is never more than one
update; with 0 every iteration is on policy and nothing is copied.

With several processes (multi-host, `parallel/distributed.py`) each one
rolls out its contiguous share of an iteration's episodes on its own
devices, with a copy of the actor there and its own sandbox pool; the
episodes are gathered, so that every process scores them all and computes
the metrics a single process would, and each contributes its own rows to
the learner's global batch. The sampling keys are those of the whole
batch (`sampler.BatchPart`), so the episodes are the ones one process
would sample, whatever the process count.

The loop around the iterations (prompts, evaluation, checkpoints, resume,
SIGTERM) is `ppo_loop.run_ppo`.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
import functools
import time
from typing import Any

from absl import logging
import jax
import numpy as np

from codeagent_rl import jit_cache
from codeagent_rl import types
from codeagent_rl.anticheat import pipeline
from codeagent_rl.envs import code_env
from codeagent_rl.models import hf_import
from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.models import transformer
from codeagent_rl.parallel import distributed
from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.rl import diagnostics
from codeagent_rl.rl import losses
from codeagent_rl.rollout import agent_loop
from codeagent_rl.rollout import continuous
from codeagent_rl.rollout import truncation
from codeagent_rl.tasks import oracle as oracle_lib
from codeagent_rl.tasks import schema
from codeagent_rl.train import critic_inputs
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import dynamic_sampling
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import keys
from codeagent_rl.train import metrics as metrics_lib
from codeagent_rl.train import packing
from codeagent_rl.train import steps

# (actor, critic): the critic is None for critic-free estimators.
States = tuple[state_lib.TrainState, state_lib.TrainState | None]


class NonFiniteLossError(FloatingPointError):
  """A loss or gradient became NaN/inf; the message names the checkpoint."""


@dataclasses.dataclass
class Stop:
  """Set by SIGTERM (or a test): finish the iteration, save, return."""

  requested: bool = False


@dataclasses.dataclass(frozen=True)
class Collected:
  """One iteration's rollouts, scored (`Learner.collect`).

  Attributes:
    rollout: the episodes and their batch (host arrays).
    rewards: the anti-cheat's `Rewards`.
    total: [B] `rewards.total` on the host.
    anticheat_scalars: the anti-cheat's metrics.
    stopper: the adaptive-truncation hook that ran, or None.
    anticheat_s: seconds spent scoring.
    wall_s: seconds the whole collection took.
    solved: [B] bool, episodes solved on suites A and B (`solved.py`; a
      stage-1 rejection is never solved).
    sampling_scalars: what dynamic sampling drew beyond the batch
      (`dynamic_sampling/*`); empty without it.
  """

  rollout: Any
  rewards: Any
  total: np.ndarray
  anticheat_scalars: dict[str, float]
  stopper: truncation.Stopper | None
  anticheat_s: float
  wall_s: float
  solved: np.ndarray
  sampling_scalars: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Metrics:
  """What one iteration reports: scalars and length histograms."""

  scalars: dict[str, float]
  histograms: dict[str, np.ndarray]


def actor_trains(exp: exp_lib.Experiment, iteration: int) -> bool:
  """Whether the actor updates in `iteration` (0-based).

  With a critic, the first `ppo.critic_warmup_iterations` train only the
  critic (its value head starts from zero). A critic-free estimator has
  nothing to warm up: the actor trains from the first iteration, so the
  estimators are compared at the same number of actor updates.
  """
  return not exp.uses_critic or iteration >= exp.ppo.critic_warmup_iterations


def rewards_are_flat(total: np.ndarray) -> bool:
  """Whether every rollout got exactly the same task reward.

  Then the task gives no policy gradient (DAPO drops such GRPO groups); the
  advantages are critic errors and KL shaping only, which whitening would
  scale to unit size.

  Args:
    total: [B] `Rewards.total` of the iteration.
  """
  return bool(np.ptp(np.asarray(total, np.float32)) == 0)


def _trim(batch: types.TrajectoryBatch, bucket: int) -> dict[str, np.ndarray]:
  """The host arrays the update needs, cut to the bucketed longest row."""
  width = data_lib.bucket_width(
    int(np.max(batch.length)), bucket, batch.tokens.shape[1]
  )
  return {
    "tokens": batch.tokens[:, :width],
    "valid": batch.valid[:, :width],
    "trainable": batch.trainable[:, :width],
    "length": batch.length,
    "truncated": batch.truncated,
    "group_id": batch.group_id,
  }


def _stacked_means(parts: list[dict[str, jax.Array]]) -> dict[str, float]:
  """Means over every step of every epoch, in step order (on the host)."""
  if not parts:
    return {}
  host = jax.device_get(parts)
  return {
    k: float(np.mean(np.concatenate([p[k] for p in host]))) for k in host[0]
  }


def _ref_log_probs(
  params,
  tokens,
  valid,
  pack=None,
  *,
  on_device,
  model,
  temperature,
  vocab_limit,
  num_groups,
) -> jax.Array:
  """`steps.actor_log_probs` of host-resident reference params.

  They stream to the devices inside the computation (`on_device`: the
  actor's param shardings), layer shards where the actor's are.
  """
  params = jax.device_put(params, on_device)
  return steps.actor_log_probs(
    params,
    tokens,
    valid,
    model=model,
    temperature=temperature,
    vocab_limit=vocab_limit,
    pack=pack,
    num_groups=num_groups,
  )


def _value_after_last(params, tokens, valid, length, *, model) -> jax.Array:
  """[B] the critic's value after each row's last valid token.

  `steps.critic_values`'s `after_last`: what a truncated row bootstraps
  from, so adaptive truncation decides on the value the learner uses.
  """
  return steps.critic_values(params, tokens, valid, length, model=model)[1]


class Learner:
  """One experiment's PPO: its jitted steps, bound once, and the iteration.

  `update` (steps 4-6 of the module docstring) needs only the experiment
  and the mesh; `iteration` (all of them) also the environment, the
  anti-cheat and the SFT reference.
  """

  def __init__(
    self,
    exp: exp_lib.Experiment,
    mesh: jax.sharding.Mesh,
    rules: Any,
    *,
    ref_params: Any = None,
    env: code_env.CodeEnv | None = None,
    anticheat: pipeline.AntiCheat | None = None,
    cache_len: int | None = None,
  ):
    """Binds and jits the steps.

    Args:
      exp: the experiment.
      mesh: the device mesh.
      rules: its logical-axis rules.
      ref_params: the frozen KL reference (the SFT actor's params); with
        `ppo.reference_on_host` it is moved to pinned host memory (see
        `ref_params`).
      env: the environment, with its sandbox pool (for `iteration`).
      anticheat: both stages, for the rollout rewards (for `iteration`).
      cache_len: KV-cache slots of a rollout (`agent_loop.cache_len_for`).
    """
    self.exp = exp
    self.mesh = mesh
    self.rules = rules
    self.env = env
    self.anticheat = anticheat
    self.cache_len = cache_len
    actor = transformer.Actor(exp.model)
    critic = transformer.Critic(exp.critic_model)
    actor_tx, critic_tx = state_lib.make_optimizers(exp.optim)
    self.shardings = state_lib.train_state_shardings(
      exp.model, exp.optim, mesh, rules, exp.critic_model
    )
    self.ref_params = ref_params
    actor_sh, critic_sh = self.shardings
    self.batch_sharding = sharding.batch_sharding(mesh, rules)
    self.replicated = jax.sharding.NamedSharding(
      mesh, jax.sharding.PartitionSpec()
    )
    # This process's rows of an iteration's batch (all, with one process).
    self.process_rows = sharding.process_rows(
      self.batch_sharding, exp.ppo.rollouts_per_iteration
    )
    num_micro = exp.ppo.rollouts_per_iteration // (
      exp.ppo.minibatches * exp.ppo.micro_batch_size
    )
    temperature = exp.sampling.temperature
    vocab_limit = exp.conversation.vocab_size
    groups = exp.ppo.rollouts_per_iteration // exp.ppo.logprob_micro_batch_size
    self._logprob_groups = groups
    self.sampler = eval_lib.make_sampler(exp, temperature)
    # Programs are shared with earlier learners of equal settings in this
    # process (codeagent_rl/jit_cache.py). Outputs laid out like the batch (the
    # epochs' input sharding), also when a packed forward's scatter back
    # would leave them otherwise.
    by_batch = {"out_shardings": self.batch_sharding}
    self.log_probs = jit_cache.jit(
      steps.actor_log_probs,
      jit_kwargs=by_batch,
      context=rules,
      model=actor,
      temperature=temperature,
      vocab_limit=vocab_limit,
      num_groups=groups,
    )
    self.values = jit_cache.jit(
      steps.critic_values,
      jit_kwargs=by_batch,
      context=rules,
      model=critic,
      num_groups=groups,
    )
    self._ref_log_probs = (
      jit_cache.jit(
        _ref_log_probs,
        jit_kwargs=by_batch,
        context=rules,
        on_device=jax.tree.map(
          lambda s: s.with_memory_kind("device"), self.shardings[0].params
        ),
        model=actor,
        temperature=temperature,
        vocab_limit=vocab_limit,
        num_groups=groups,
      )
      if exp.ppo.reference_on_host
      else self.log_probs
    )
    self.targets = jit_cache.jit(steps.targets, rl=exp.rl)
    # Value pre-training regresses the critic on Monte-Carlo returns:
    # lambda 1 (VAPO), whatever lambdas PPO's advantages and targets use.
    monte_carlo = dataclasses.replace(
      exp.rl,
      advantage=dataclasses.replace(
        exp.rl.advantage, lam=1.0, lam_critic=1.0, lam_length_alpha=0.0
      ),
    )
    self._mc_targets = jit_cache.jit(steps.targets, rl=monte_carlo)
    self.explained_variance = jax.jit(losses.explained_variance)
    self.value_by_depth = jax.jit(diagnostics.value_by_depth)
    self._no_values = jax.jit(steps.no_values)
    self.prefix_values = jit_cache.jit(
      _value_after_last, context=rules, model=critic
    )
    self._order = jit_cache.jit(
      steps.epoch_order,
      rows=exp.ppo.rollouts_per_iteration,
      minibatches=exp.ppo.minibatches,
    )
    self._num_micro = num_micro
    # Packed rows are split over the batch's mesh axes like padded ones.
    self._row_shards = mesh_lib.mesh_axis_size(
      mesh, self.batch_sharding.spec[0]
    )
    self._bootstrap = jax.jit(steps.bootstrap_values)
    actor_step = functools.partial(
      steps.actor_step,
      model=actor,
      tx=actor_tx,
      rl=exp.rl,
      temperature=temperature,
      vocab_limit=vocab_limit,
      num_micro=num_micro,
    )
    critic_step = (
      functools.partial(
        steps.critic_step,
        model=critic,
        tx=critic_tx,
        rl=exp.rl,
        num_micro=num_micro,
      )
      if exp.uses_critic
      else None
    )
    critic_in = critic_sh if exp.uses_critic else None
    # One compiled epoch for iterations that train the actor, one for those
    # that do not (critic warm-up, flat rewards).
    self._epochs = {
      trains: jit_cache.jit(
        steps.ppo_epoch,
        context=rules,
        jit_kwargs={
          "in_shardings": (
            actor_sh,
            critic_in,
            self.batch_sharding,
            None,
            None,
            None,
          ),
          "out_shardings": (actor_sh, critic_in, None),
          "donate_argnums": (0, 1),
        },
        actor_step=actor_step if trains else None,
        critic_step=critic_step,
        minibatches=exp.ppo.minibatches,
        batch_sharding=self.batch_sharding,
      )
      for trains in (True, False)
    }

  @property
  def ref_params(self) -> Any:
    """The frozen KL reference's params.

    With `ppo.reference_on_host` they live in pinned host memory (the
    reference has no optimiser state, so this frees a whole model's
    parameter bytes on the devices; each iteration's reference log-prob
    pass copies them in). Assigning places them there.
    """
    return self._ref_params

  @ref_params.setter
  def ref_params(self, params: Any) -> None:
    if params is not None and self.exp.ppo.reference_on_host:
      host = jax.tree.map(
        lambda s: s.with_memory_kind("pinned_host"), self.shardings[0].params
      )
      params = jax.device_put(params, host)
    self._ref_params = params

  def initial_states(self, sft_params: Any, rng: jax.Array) -> States:
    """(actor, critic) states starting from the SFT params.

    The critic is None when the estimator does not use one. With
    `critic_checkpoint_dir` its trunk is that checkpoint's and its value
    head zero.
    """
    exp = self.exp
    critic_params = None
    if exp.uses_critic and exp.critic_checkpoint_dir is not None:
      critic_params = hf_import.critic_from_hf(
        exp.critic_checkpoint_dir,
        exp.critic_model,
        {"params": self.shardings[1].params},
      )["params"]
    # On the devices (a no-op there; the params may be the host-resident
    # reference's).
    sft_params = jax.device_put(sft_params, self.shardings[0].params)
    with sharding.axis_rules(self.mesh, self.rules):
      actor, critic = state_lib.states_from_actor_params(
        sft_params,
        exp.model,
        exp.optim,
        self.mesh,
        self.rules,
        rng,
        exp.rl.critic_init,
        critic_cfg=exp.critic_model,
        critic_params=critic_params,
      )
    return actor, critic if self.exp.uses_critic else None

  def shard(self, tree):
    """Places host arrays on the mesh, split along the batch.

    Every process holds the whole batch (`score` gathers it) and sends the
    rows its devices hold.
    """
    if jax.process_count() > 1:
      rows = sharding.process_rows(
        self.batch_sharding, len(jax.tree.leaves(tree)[0])
      )
      tree = jax.tree.map(lambda x: x[rows], tree)
    return sharding.shard_batch(tree, self.mesh, self.rules)

  def stopper(
    self, critic: state_lib.TrainState | None, index: int
  ) -> truncation.Stopper | None:
    """Iteration `index`'s adaptive-truncation hook, bound to `critic`.

    None when `rl.adaptive_truncation.enabled` is off (or there is no
    critic). Prefix rows are bucketed like the update's rows
    (`ppo.length_bucket`), `ppo.logprob_micro_batch_size` per forward; the
    audit draws derive from the seed and the iteration.
    """
    exp = self.exp
    if not exp.rl.adaptive_truncation.enabled or critic is None:
      return None
    return truncation.Stopper(
      exp.rl.adaptive_truncation,
      self.prefix_values,
      critic.params,
      self.env.format.pad_id,
      seed=(exp.seed, index),
      bucket=exp.ppo.length_bucket,
      max_rows=exp.ppo.logprob_micro_batch_size,
    )

  def collect(
    self,
    actor_params: Any,
    critic: state_lib.TrainState | None,
    prompts: Sequence[schema.Task],
    rng: dict[str, jax.Array],
    *,
    index: int,
    value_only: bool = False,
    more_prompts: Callable[[int], Sequence[schema.Task]] | None = None,
  ) -> Collected:
    """Steps 1-2 of the module docstring: rollouts of `actor_params`, scored.

    `rollouts`, then `score`. With several processes it takes steps
    together with the others: call it from the main thread.

    Args:
      actor_params: the policy that samples (the behaviour policy).
      critic: the critic state for adaptive truncation, or None.
      prompts: the iteration's prompts (`data.iteration_prompts`).
      rng: the iteration's keys (`keys.ppo_iteration`); "rollout" is used.
      index: the iteration's 0-based index.
      value_only: value pre-training (no truncation, no dynamic sampling).
      more_prompts: round r >= 1 -> the prompts of dynamic sampling's
        round r (`ppo.dynamic_sampling`); None: no dynamic sampling.
    """
    start = time.perf_counter()
    # Value pre-training regresses on Monte-Carlo returns: no cuts there.
    stopper = None if value_only else self.stopper(critic, index)
    params = self.sampling_params(actor_params)
    rollout = self.rollouts(params, prompts, rng, stopper=stopper)
    collected = self.score(rollout, start, stopper)
    if value_only or more_prompts is None or not self.exp.ppo.dynamic_sampling:
      return collected

    def more(round_index):
      round_rng = {
        "rollout": keys.dynamic_sampling_round(rng["rollout"], round_index)
      }
      extra = self.score(
        self.rollouts(params, more_prompts(round_index), round_rng),
        time.perf_counter(),
      )
      return extra.rollout, extra.total

    rollout, rounds = dynamic_sampling.sample(
      collected.rollout,
      collected.total,
      more,
      want=self.exp.ppo.prompts_per_iteration,
      max_rounds=self.exp.ppo.dynamic_sampling_max_rounds,
    )
    scored = self.rewards_of(rollout, start, None)
    return dataclasses.replace(scored, sampling_scalars=rounds.scalars())

  def sampling_params(self, actor_params: Any) -> Any:
    """The actor params `rollouts` samples with: on this process's devices.

    With one process, `actor_params` themselves; with several, a copy on
    this process's block of the mesh (`distributed.host_copy`, a step all
    processes take together), so that rollouts never wait on another
    process.
    """
    return distributed.host_copy(actor_params)

  def rollouts(
    self,
    actor_params: Any,
    prompts: Sequence[schema.Task],
    rng: dict[str, jax.Array],
    *,
    stopper: truncation.Stopper | None = None,
  ) -> agent_loop.Rollout:
    """This process's share of the rollouts of `prompts` (steps 1-2).

    Thread-safe with respect to `learn`: it reads only `actor_params` and
    the stopper's critic (None when rollouts overlap an update), which the
    caller keeps alive until it returns, and takes no step with other
    processes.

    Args:
      actor_params: the policy that samples, on this process's devices
        (`sampling_params`).
      prompts: the iteration's prompts (`data.iteration_prompts`).
      rng: the iteration's keys (`keys.ppo_iteration`); "rollout" is used.
      stopper: the adaptive-truncation hook (`stopper`), or None.

    Returns:
      The episodes of this process's rows of the batch (`process_rows`;
      all of them with one process).
    """
    if self.env is None or self.anticheat is None or self.cache_len is None:
      raise ValueError("Learner.collect needs env, anticheat and cache_len.")
    samples = self.exp.ppo.samples_per_prompt
    tasks = [task for task in prompts for _ in range(samples)]
    groups = [g for g in range(len(prompts)) for _ in range(samples)]
    rows, part = self.process_rows, None
    if jax.process_count() > 1:
      part = sampler_lib.BatchPart(rows.start, len(tasks))
      tasks, groups = tasks[rows], groups[rows]
    policy = agent_loop.SamplerPolicy(
      self.sampler,
      {"params": actor_params},
      self.env.format,
      self.cache_len,
      part=part,
    )
    if self.exp.ppo.rollout_slots:
      return continuous.collect(
        self.env,
        policy,
        tasks,
        groups,
        rng["rollout"],
        slots=min(self.exp.ppo.rollout_slots, len(tasks)),
        stopper=stopper,
        first_episode=rows.start,
      )
    return agent_loop.collect(
      self.env, policy, tasks, groups, rng["rollout"], stopper=stopper
    )

  def score(
    self,
    rollout: agent_loop.Rollout,
    start: float,
    stopper: truncation.Stopper | None = None,
  ) -> Collected:
    """Step 3 on `rollouts`' episodes: every process's, scored.

    With several processes the episodes are gathered first (a step all
    processes take together: call it from the main thread), so that every
    process holds the whole batch, in order, and the same rewards.

    Args:
      rollout: this process's episodes (`rollouts`).
      start: when their collection started (`time.perf_counter()`).
      stopper: the adaptive-truncation hook that ran, or None.
    """
    if jax.process_count() > 1:
      rollout = agent_loop.concat(distributed.gather(rollout))
    return self.rewards_of(rollout, start, stopper)

  def rewards_of(
    self,
    rollout: agent_loop.Rollout,
    start: float,
    stopper: truncation.Stopper | None,
  ) -> Collected:
    """`score` on episodes every process already holds (no gather)."""
    anticheat_start = time.perf_counter()
    rewards, ac_scalars = self.anticheat.rollout_rewards(rollout.episodes)
    total = np.asarray(jax.device_get(rewards.total), np.float32)
    rejected = pipeline.rejected(rewards, self.exp.anticheat)
    solved = np.asarray(
      [
        eval_lib.solved_ab(e.outcome, r)
        for e, r in zip(rollout.episodes, rejected, strict=True)
      ],
      bool,
    )
    done = time.perf_counter()
    return Collected(
      rollout=rollout,
      rewards=rewards,
      total=total,
      anticheat_scalars=ac_scalars,
      stopper=stopper,
      anticheat_s=done - anticheat_start,
      wall_s=done - start,
      solved=solved,
    )

  def learn(
    self,
    states: States,
    collected: Collected,
    rng: dict[str, jax.Array],
    *,
    index: int,
    timer: metrics_lib.PhaseTimer | None = None,
    value_only: bool = False,
    behaviour_params: Any = None,
  ) -> tuple[States, Metrics]:
    """Steps 3-7 of the module docstring on `collect`'s rollouts.

    Args:
      states: (actor, critic) before the update (donated).
      collected: the iteration's rollouts (`collect`).
      rng: the iteration's keys; "update" is used.
      index: the iteration's 0-based index (critic warm-up).
      timer: where the phases' times go.
      value_only: a value pre-training round.
      behaviour_params: the actor params that sampled the rollouts when
        they are not `states[0]`'s (overlapped rollouts); None: on policy.

    Raises:
      NonFiniteLossError: a loss or gradient norm is NaN/inf.
    """
    timer = timer or metrics_lib.PhaseTimer()
    rollout = collected.rollout
    timer.add("generation", rollout.timings["generate_s"])
    timer.add("sandbox_wait", rollout.timings["env_s"])
    if collected.stopper is not None:
      timer.add("truncation", rollout.timings["stop_s"])
    timer.add("anticheat", collected.anticheat_s)
    states, scalars = self.update(
      states,
      rollout.batch,
      collected.total,
      index,
      rng["update"],
      timer,
      value_only=value_only,
      behaviour_params=behaviour_params,
      tasks=[e.task for e in rollout.episodes],
      solved=collected.solved,
    )
    episode_scalars, histograms = eval_lib.rollout_metrics(
      rollout, collected.rewards, self.exp.anticheat
    )
    scalars.update(episode_scalars)
    scalars.update(collected.anticheat_scalars)
    # Metrics only, after the rewards: tasks with an oracle suite
    # (tasks/oracle.py) get each episode's code judged on it too.
    oracle_start = time.perf_counter()
    oracle_scalars = {}
    if self.env is not None:
      oracle_scalars = oracle_lib.episode_rates(
        self.env.pool, rollout.episodes, self.env.judge_config
      )
    if oracle_scalars:
      scalars.update(oracle_scalars)
      scalars["perf/oracle_s"] = time.perf_counter() - oracle_start
    if collected.stopper is not None:
      scalars.update(
        collected.stopper.metrics(collected.total, rollout.batch.length)
      )
    generated = float(rollout.batch.trainable.sum())
    scalars["perf/tokens_per_s"] = generated / max(
      rollout.timings["generate_s"], 1e-9
    )
    # What was sampled, kept or not: the budget estimators are compared at.
    scalars["sampling/episodes"] = float(len(rollout.episodes))
    scalars["sampling/tokens"] = generated
    if collected.sampling_scalars:
      scalars.update(collected.sampling_scalars)
      scalars["sampling/episodes"] = collected.sampling_scalars[
        "dynamic_sampling/episodes_sampled"
      ]
      scalars["sampling/tokens"] = collected.sampling_scalars[
        "dynamic_sampling/tokens_sampled"
      ]
    scalars["perf/staleness"] = float(behaviour_params is not None)
    return states, Metrics(scalars, histograms)

  def iteration(
    self,
    states: States,
    prompts: Sequence[schema.Task],
    rng: dict[str, jax.Array],
    *,
    index: int,
    timer: metrics_lib.PhaseTimer | None = None,
    value_only: bool = False,
  ) -> tuple[States, Metrics]:
    """Steps 1-7 of the module docstring, on policy: `collect` + `learn`.

    Args:
      states: (actor, critic) before the iteration (donated).
      prompts: the iteration's prompts (`data.iteration_prompts`).
      rng: the iteration's keys (`keys.ppo_iteration`): "rollout", "update".
      index: the iteration's 0-based index (critic warm-up).
      timer: where the phases' times go.
      value_only: a value pre-training round: the actor stays frozen and
        the critic regresses on Monte-Carlo returns (lambda 1).

    Returns:
      (actor, critic) after the update, and the iteration's metrics.

    Raises:
      NonFiniteLossError: a loss or gradient norm is NaN/inf.
    """
    collected = self.collect(
      states[0].params,
      states[1],
      prompts,
      rng,
      index=index,
      value_only=value_only,
    )
    return self.learn(
      states,
      collected,
      rng,
      index=index,
      timer=timer,
      value_only=value_only,
    )

  def update(
    self,
    states: States,
    batch: types.TrajectoryBatch,
    total: np.ndarray,
    index: int,
    rng: jax.Array,
    timer: metrics_lib.PhaseTimer,
    *,
    value_only: bool = False,
    behaviour_params: Any = None,
    tasks: Sequence[schema.Task] | None = None,
    solved: np.ndarray | None = None,
  ) -> tuple[States, dict[str, float]]:
    """Steps 4-6 of the module docstring on one iteration's rollouts.

    Args:
      states: (actor, critic) (donated).
      batch: the rollouts, host arrays.
      total: [B] `Rewards.total` after the anti-cheat, a host array.
      index: the iteration's 0-based index.
      rng: the iteration's update key.
      timer: where the phases' times go.
      value_only: train only the critic, on Monte-Carlo returns.
      behaviour_params: the actor params that sampled `batch`, when older
        than `states[0]`'s: their log-probs (same pass as the proximal
        ones) weight the loss (`losses.ppo_policy_loss`); None: on policy.
      tasks: the task of each row; needed by a test-aware critic
        (`critic.privileged`), which reads their hidden tests.
      solved: [B] bool, the episodes solved on suites A and B; needed by
        `rl.loss.positive_nll_coef` > 0.

    Returns:
      The updated states and the update's scalars.

    Raises:
      NonFiniteLossError: a loss or gradient norm is NaN/inf.
      jax.errors.JaxRuntimeError: a transfer between host and devices that
        is not one of the update's explicit ones (the batch's `device_put`,
        the metrics' `device_get`): it runs under
        `jax.transfer_guard("disallow")`.
    """
    host = _trim(batch, self.exp.ppo.length_bucket)
    host["total"] = np.asarray(total, np.float32)
    host.update(self._extra_inputs(host, tasks, solved))
    # The passes are traced under the mesh's logical-axis rules, so the
    # activations' constraints (`nn.with_logical_constraint`) take effect:
    # without them XLA placed the 7B actor step of 32k-token rows on the
    # 8-device mesh in 62.0 GiB per device, with them 41.3
    # (benchmarks/mesh_memory_bench.py).
    with (
      sharding.axis_rules(self.mesh, self.rules),
      jax.transfer_guard("disallow"),
    ):
      return self._update(
        states, host, index, rng, timer, value_only, behaviour_params
      )

  def _extra_inputs(self, host, tasks, solved) -> dict[str, np.ndarray]:
    """The test-aware critic's prefix and the solved episodes' tokens."""
    exp = self.exp
    out = {}
    if exp.privileged.enabled:
      if tasks is None or len(tasks) != len(host["total"]):
        raise ValueError(
          "critic.privileged needs the task of every row (Learner.update's"
          " `tasks`)."
        )
      out["critic_prefix"], out["critic_prefix_valid"] = (
        critic_inputs.prefix_arrays(
          exp.conversation, tasks, exp.privileged.max_tokens
        )
      )
    if exp.rl.loss.positive_nll_coef:
      if solved is None or len(solved) != len(host["total"]):
        raise ValueError(
          "rl.loss.positive_nll_coef > 0 needs which episodes are solved"
          " (Learner.update's `solved`)."
        )
      out["positive"] = host["trainable"] & np.asarray(solved, bool)[:, None]
    return out

  def _update(self, states, host, index, rng, timer, value_only, behaviour):
    exp = self.exp
    actor, critic = states
    packed = exp.ppo.packing
    with timer.phase("logprobs_values"):
      arrays = self.shard(host)  # the batch's one trip to the devices
      tokens, valid = arrays["tokens"], arrays["valid"]
      pack = self._whole_batch_pack(host["valid"]) if packed else None
      old_logp = self.log_probs(actor.params, tokens, valid, pack=pack)
      behaviour_logp = None
      if behaviour is not None:
        behaviour_logp = self.log_probs(behaviour, tokens, valid, pack=pack)
      ref_logp = self._ref_log_probs(self.ref_params, tokens, valid, pack=pack)
      prefix = arrays.get("critic_prefix")
      prefix_valid = arrays.get("critic_prefix_valid")
      if critic is not None:
        values, after_last = self.values(
          critic.params,
          tokens,
          valid,
          arrays["length"],
          pack=pack,
          prefix=prefix,
          prefix_valid=prefix_valid,
        )
      else:
        values, after_last = self._no_values(old_logp)
      bootstrap = self._bootstrap(arrays["truncated"], after_last)
      targets = self._mc_targets if value_only else self.targets
      advantages, returns, metrics = targets(
        arrays["total"],
        arrays["trainable"],
        old_logp,
        ref_logp,
        values,
        arrays["truncated"],
        bootstrap,
        arrays["group_id"],
        arrays["length"],
      )
      ppo_batch = steps.PPOBatch(
        tokens=tokens,
        valid=valid,
        trainable=arrays["trainable"],
        old_logp=old_logp,
        ref_logp=ref_logp,
        advantages=advantages,
        returns=returns,
        old_values=values,
        behaviour_logp=behaviour_logp,
        positive=arrays.get("positive"),
        critic_prefix=prefix,
        critic_prefix_valid=prefix_valid,
      )
      if critic is not None:
        metrics["critic/explained_variance"] = self.explained_variance(
          values, returns, arrays["trainable"]
        )
        metrics.update(
          self.value_by_depth(values, returns, arrays["trainable"])
        )
      metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
    after_warmup = actor_trains(exp, index) and not value_only
    flat = rewards_are_flat(host["total"])
    skip_flat = exp.ppo.skip_actor_on_flat_rewards and flat
    train_actor = after_warmup and not skip_flat
    if after_warmup and skip_flat:
      logging.info(
        "PPO iteration %d: every rollout got reward %g, no task signal; only"
        " the critic is updated (ppo.skip_actor_on_flat_rewards).",
        index,
        float(host["total"].flat[0]),
      )
    epoch_fn = self._epochs[train_actor]
    rng = distributed.put_replicated(rng, self.replicated)
    parts = []
    with timer.phase("update"):
      epochs = [
        jax.device_put(np.int32(epoch), self.replicated)
        for epoch in range(exp.ppo.epochs)
      ]
      packs = [None] * len(epochs)
      if packed:
        packs, metrics["perf/pack_density"] = self._epoch_packs(
          host["valid"], rng, epochs
        )
      for at, epoch_packs in zip(epochs, packs, strict=True):
        actor, critic, out = epoch_fn(
          actor, critic, ppo_batch, rng, at, epoch_packs
        )
        parts.append(out)
      for role in ("actor", "critic"):
        metrics.update(_stacked_means([p[role] for p in parts if role in p]))
    metrics["policy/actor_trained"] = float(train_actor)
    metrics["policy/flat_rewards"] = float(flat)
    for name in ("loss/policy", "loss/critic", "grad_norm/actor"):
      if name in metrics and not np.isfinite(metrics[name]):
        raise NonFiniteLossError(
          f"iteration {index}: {name} is {metrics[name]}."
        )
    return (actor, critic), metrics

  def _pack_rows(self, need: int) -> int:
    """Packed rows for `need`: a multiple of the batch's shards."""
    shards = self._row_shards
    return max(1, -(-need // shards)) * shards

  def _whole_batch_pack(self, valid: np.ndarray):
    """(src, dst) of the log-prob and value passes' row groups, on the devices.

    Each of the `ppo.logprob_micro_batch_size`-row groups is packed on its
    own, all into the same number of rows.
    """
    groups = np.array_split(np.arange(valid.shape[0]), self._logprob_groups)
    rows = self._pack_rows(max(packing.rows_needed(valid[g]) for g in groups))
    plans = [packing.plan(valid[g], rows) for g in groups]
    src = np.concatenate([p.src for p in plans])
    dst = np.concatenate([p.dst for p in plans])
    return jax.device_put((src, dst), self.replicated)

  def _epoch_packs(self, valid: np.ndarray, rng: jax.Array, epochs):
    """Each epoch's per-minibatch packing, and the packed slots' density.

    The minibatches are `steps.epoch_order`'s (read back from the devices,
    the order `ppo_epoch` uses); each micro-batch is packed on its own, all
    into the same number of rows, so one compiled step serves them all.
    """
    groups = []
    for at in epochs:
      order = np.asarray(jax.device_get(self._order(rng, at)))
      groups.append(
        [np.array_split(idx, self._num_micro) for idx in order]  # [M][U]
      )
    need = max(
      packing.rows_needed(valid[rows])
      for epoch in groups
      for minibatch in epoch
      for rows in minibatch
    )
    rows = self._pack_rows(need)
    packs = []
    for epoch in groups:
      plans = [[packing.plan(valid[r], rows) for r in mb] for mb in epoch]
      src = np.stack([np.concatenate([p.src for p in mb]) for mb in plans])
      dst = np.stack([np.concatenate([p.dst for p in mb]) for mb in plans])
      packs.append(jax.device_put((src, dst), self.replicated))
    slots = rows * valid.shape[1] * self._num_micro * len(groups[0])
    return packs, float(valid.sum()) / slots
