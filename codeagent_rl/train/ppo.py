"""The PPO learner loop: rollouts -> sandbox rewards -> anti-cheat -> updates.

One iteration:

  1. tasks of the iteration (`data.iteration_tasks`: a function of seed and
     iteration, so a resumed run draws the same prompts);
  2. rollouts with the current actor (`rollout.agent_loop.collect`), whose
     submissions the sandbox pool grades while generation goes on;
  3. the anti-cheat stages map the raw rewards to `Rewards.total`;
  4. jitted forwards: log-probs under the rollout actor and the SFT
     reference, critic values (skipped by critic-free estimators);
  5. token rewards (terminal score, k1 KL penalty when `rl.kl.placement` is
     "reward") -> advantages (`rl.advantage.estimator`) -> whitening;
  6. `ppo.epochs` passes over shuffled minibatches, each an actor and a
     critic update accumulated over micro-batches (with a critic, the actor
     stays frozen for `ppo.critic_warmup_iterations`, and with
     `ppo.skip_actor_on_flat_rewards` in an iteration whose rollouts all got
     the same `Rewards.total`: `rewards_are_flat`);
  7. metrics, monitors, evaluation every `ppo.eval_every`, a checkpoint every
     `checkpoint.save_every` iterations.

Resume: the checkpoint holds both states, the RNG key and the iteration;
randomness of iteration k is `fold_in(key, k)`, so a run interrupted and
resumed draws the same prompts and samples as one that was not. A
non-finite loss stops the run before anything of that iteration is saved,
so the last checkpoint is the last good one. SIGTERM finishes the current
iteration, saves, and returns.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
import pathlib
import signal
import threading
import time
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from codeagent_rl import types
from codeagent_rl.envs import code_env
from codeagent_rl.models import transformer
from codeagent_rl.parallel import checkpoint as ckpt_lib
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.rl import losses
from codeagent_rl.rollout import agent_loop
from codeagent_rl.tasks import schema
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import metrics as metrics_lib
from codeagent_rl.train import steps

PPO_DIR = "checkpoints"

# (rollout, tasks) -> (rewards after anti-cheat, scalars to log). Stage 1
# of `exp.anticheat` sets the rewards' stage1_flags and stage1_score: the
# metrics count the episodes it rejects as unsolved.
RewardFn = Callable[
  [agent_loop.Rollout, list[schema.Task]],
  tuple[types.Rewards, dict[str, float]],
]


class NonFiniteLossError(FloatingPointError):
  """A loss or gradient became NaN/inf; the message names the checkpoint."""


@dataclasses.dataclass
class Stop:
  """Set by SIGTERM (or a test): finish the iteration, save, return."""

  requested: bool = False


class Learner:
  """Jitted, sharded steps of one experiment, bound once."""

  def __init__(
    self,
    exp: exp_lib.Experiment,
    mesh: jax.sharding.Mesh,
    rules: Any,
  ):
    self.exp = exp
    self.mesh = mesh
    self.rules = rules
    actor = transformer.Actor(exp.model)
    critic = transformer.Critic(exp.model)
    actor_tx, critic_tx = state_lib.make_optimizers(exp.optim)
    self.shardings = state_lib.train_state_shardings(
      exp.model, exp.optim, mesh, rules
    )
    actor_sh, critic_sh = self.shardings
    batch_sh = sharding.batch_sharding(mesh, rules)
    num_micro = exp.ppo.rollouts_per_iteration // (
      exp.ppo.minibatches * exp.ppo.micro_batch_size
    )
    temperature = exp.sampling.temperature
    vocab_limit = exp.tokenizer().vocab_size
    self.log_probs = jax.jit(
      functools.partial(
        steps.actor_log_probs,
        model=actor,
        temperature=temperature,
        vocab_limit=vocab_limit,
      )
    )
    self.values = jax.jit(functools.partial(steps.critic_values, model=critic))
    self.targets = jax.jit(functools.partial(steps.targets, rl=exp.rl))
    self.actor_step = jax.jit(
      functools.partial(
        steps.actor_step,
        model=actor,
        tx=actor_tx,
        rl=exp.rl,
        temperature=temperature,
        vocab_limit=vocab_limit,
        num_micro=num_micro,
      ),
      in_shardings=(actor_sh, batch_sh, None),
      out_shardings=(actor_sh, None),
      donate_argnums=(0,),
    )
    self.critic_step = jax.jit(
      functools.partial(
        steps.critic_step,
        model=critic,
        tx=critic_tx,
        rl=exp.rl,
        num_micro=num_micro,
      ),
      in_shardings=(critic_sh, batch_sh, None),
      out_shardings=(critic_sh, None),
      donate_argnums=(0,),
    )
    self.explained_variance = jax.jit(losses.explained_variance)

  def initial_states(self, sft_params: Any, rng: jax.Array):
    """(actor, critic) states starting from the SFT params."""
    with sharding.axis_rules(self.mesh, self.rules):
      return state_lib.states_from_actor_params(
        sft_params,
        self.exp.model,
        self.exp.optim,
        self.mesh,
        self.rules,
        rng,
        self.exp.rl.critic_init,
      )

  def shard(self, tree):
    """Places host arrays on the mesh, split along the batch."""
    return sharding.shard_batch(tree, self.mesh, self.rules)


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


def _trim(rollout: agent_loop.Rollout, bucket: int) -> dict[str, np.ndarray]:
  """Host arrays of the batch cut to the bucketed longest row."""
  batch = rollout.batch
  width = data_lib.bucket_width(
    int(np.max(np.asarray(batch.length))), bucket, batch.tokens.shape[1]
  )
  return {
    "tokens": np.asarray(batch.tokens)[:, :width],
    "valid": np.asarray(batch.valid)[:, :width],
    "trainable": np.asarray(batch.trainable)[:, :width],
    "length": np.asarray(batch.length),
    "truncated": np.asarray(batch.truncated),
    "group_id": np.asarray(batch.group_id),
  }


def _episode_metrics(
  rollout: agent_loop.Rollout, rewards: types.Rewards, exp: exp_lib.Experiment
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
  """Reward, pass-rate and length scalars, and length histograms.

  Args:
    rollout: the iteration's episodes.
    rewards: their rewards after the anti-cheat (`RewardFn`).
    exp: the experiment; `exp.anticheat` says which stage-1 flags and
      scores reject, so a rejected episode is never counted as solved.
  """
  total = np.asarray(rewards.total)
  rejected = eval_lib.rejected_by_stage1(rewards, exp.anticheat)
  s = eval_lib.episode_scalars(rollout, rejected, total)
  outcomes = [e.outcome for e in rollout.episodes]
  passing = np.asarray(
    [eval_lib.solved_a(o, r) for o, r in zip(outcomes, rejected, strict=True)],
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
    "episode/turns_mean": s["turns_mean"],
    "episode/tokens_mean": s["tokens_mean"],
    "episode/truncated": s["truncated"],
    "code/chars_mean": float(chars.mean()) if chars.size else float("nan"),
  }
  hists = {}
  for label, rows in (("passing", passing), ("failing", ~passing)):
    scalars[f"length/{label}_turns"] = (
      float(turns[rows].mean()) if rows.any() else float("nan")
    )
    scalars[f"length/{label}_tokens"] = (
      float(tokens[rows].mean()) if rows.any() else float("nan")
    )
    if rows.any():
      hists[f"length/{label}_turns"] = turns[rows]
      hists[f"length/{label}_tokens"] = tokens[rows]
  return scalars, hists


def _rows(tree, idx: np.ndarray):
  """The rows `idx` of every [B, ...] leaf."""
  return jax.tree.map(lambda x: x[idx], tree)


def _mean_metrics(parts: list[dict[str, Any]]) -> dict[str, float]:
  if not parts:
    return {}
  host = jax.device_get(parts)
  return {k: float(np.mean([p[k] for p in host])) for k in host[0]}


def ppo_iteration(
  learner: Learner,
  states: tuple[state_lib.TrainState, state_lib.TrainState | None],
  ref_params: Any,
  rollout: agent_loop.Rollout,
  rewards: types.Rewards,
  iteration: int,
  rng: jax.Array,
  timer: metrics_lib.PhaseTimer,
) -> tuple[tuple[Any, Any], dict[str, float]]:
  """Steps 4-6 of the module docstring on one iteration's rollouts."""
  exp = learner.exp
  actor, critic = states
  host = _trim(rollout, exp.ppo.length_bucket)
  with timer.phase("logprobs_values"):
    arrays = learner.shard(host)
    tokens, valid = arrays["tokens"], arrays["valid"]
    old_logp = learner.log_probs(actor.params, tokens, valid)
    ref_logp = learner.log_probs(ref_params, tokens, valid)
    if critic is not None:
      values, after_last = learner.values(
        critic.params, tokens, valid, arrays["length"]
      )
    else:
      values = jnp.zeros_like(old_logp)
      after_last = jnp.zeros(old_logp.shape[:1], jnp.float32)
    bootstrap = jnp.where(arrays["truncated"], after_last, 0.0)
    advantages, returns, metrics = learner.targets(
      learner.shard(np.asarray(rewards.total, np.float32)),
      arrays["trainable"],
      old_logp,
      ref_logp,
      values,
      arrays["truncated"],
      bootstrap,
      arrays["group_id"],
    )
    batch = steps.PPOBatch(
      tokens=tokens,
      valid=valid,
      trainable=arrays["trainable"],
      old_logp=old_logp,
      ref_logp=ref_logp,
      advantages=advantages,
      returns=returns,
      old_values=values,
    )
    if critic is not None:
      metrics["critic/explained_variance"] = learner.explained_variance(
        values, returns, arrays["trainable"]
      )
    metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
  after_warmup = actor_trains(exp, iteration)
  flat = rewards_are_flat(rewards.total)
  skip_flat = exp.ppo.skip_actor_on_flat_rewards and flat
  train_actor = after_warmup and not skip_flat
  if after_warmup and skip_flat:
    logging.info(
      "PPO iteration %d: every rollout got reward %g, no task signal; only"
      " the critic is updated (ppo.skip_actor_on_flat_rewards).",
      iteration,
      float(np.asarray(rewards.total).flat[0]),
    )
  host_batch = jax.device_get(batch)
  rows = host_batch.tokens.shape[0]
  size = rows // exp.ppo.minibatches
  actor_parts, critic_parts = [], []
  with timer.phase("update"):
    for epoch in range(exp.ppo.epochs):
      perm = np.asarray(
        jax.random.permutation(jax.random.fold_in(rng, epoch), rows)
      )
      for m in range(exp.ppo.minibatches):
        idx = perm[m * size : (m + 1) * size]
        minibatch = learner.shard(_rows(host_batch, idx))
        step_rng = jax.random.fold_in(rng, 1000 + epoch * 100 + m)
        if train_actor:
          actor, out = learner.actor_step(actor, minibatch, step_rng)
          actor_parts.append(out)
        if critic is not None:
          critic, out = learner.critic_step(critic, minibatch, step_rng)
          critic_parts.append(out)
    metrics.update(_mean_metrics(actor_parts))
    metrics.update(_mean_metrics(critic_parts))
  metrics["policy/actor_trained"] = float(train_actor)
  metrics["policy/flat_rewards"] = float(flat)
  for name in ("loss/policy", "loss/critic", "grad_norm/actor"):
    if name in metrics and not np.isfinite(metrics[name]):
      raise NonFiniteLossError(
        f"iteration {iteration}: {name} is {metrics[name]}."
      )
  return (actor, critic), metrics


@dataclasses.dataclass
class PPOResult:
  """What `run_ppo` leaves behind."""

  actor_params: Any
  iterations_done: int
  last_eval: dict[str, float]
  stopped_early: bool


def _install_sigterm(stop: Stop):
  if threading.current_thread() is not threading.main_thread():
    return None

  def handler(signum, frame):
    del signum, frame
    logging.warning("SIGTERM: finishing this iteration, then saving.")
    stop.requested = True

  return signal.signal(signal.SIGTERM, handler)


def run_ppo(
  exp: exp_lib.Experiment,
  learner: Learner,
  env: code_env.CodeEnv,
  train_tasks: list[schema.Task],
  sft_params: Any,
  workdir: str | pathlib.Path,
  *,
  reward_fn: RewardFn,
  evaluator: eval_lib.Evaluator,
  writer: metrics_lib.MetricsWriter,
  monitor_fn: Callable[[list[dict]], dict[str, float]],
  num_flags: int,
  stop: Stop | None = None,
  iterations: int | None = None,
  console: Callable[[str], None] = print,
) -> PPOResult:
  """Runs (or resumes) PPO up to `iterations` (default `ppo.iterations`).

  Args:
    exp: the experiment.
    learner: its jitted steps.
    env: the environment with its sandbox pool.
    train_tasks: prompts to draw from.
    sft_params: the SFT actor params: starting point and KL reference.
    workdir: checkpoints go to `<workdir>/checkpoints`.
    reward_fn: anti-cheat stages over a rollout's raw rewards.
    evaluator: held-out pass@1.
    writer: metrics.jsonl / TensorBoard writer.
    monitor_fn: alarms over the metrics history -> scalars to log.
    num_flags: F of `Rewards.stage1_flags`.
    stop: set `requested` to stop after the current iteration (SIGTERM
      does it when running in the main thread).
    iterations: stop after this many iterations in total (tests).
    console: where the progress lines go.

  Returns:
    The final actor params, iterations done, the last evaluation and whether
    a stop request ended the run early.

  Raises:
    NonFiniteLossError: a loss went NaN/inf; the newest checkpoint is the
      last good iteration.
  """
  total_iterations = exp.ppo.iterations if iterations is None else iterations
  stop = stop or Stop()
  previous = _install_sigterm(stop)
  workdir = pathlib.Path(workdir)
  base_rng = jax.random.key(exp.seed + 1)
  actor, critic = learner.initial_states(
    sft_params, jax.random.fold_in(base_rng, 0x7FFFFFFF)
  )
  if not exp.uses_critic:
    critic = None
  tok = env.tokenizer
  sampler = eval_lib.make_sampler(exp, exp.sampling.temperature)
  longest = max(len(env.reset(t).prompt_ids) for t in train_tasks)
  cache_len = agent_loop.cache_len_for(env.config, longest)
  history = writer_history(workdir)
  last_eval: dict[str, float] = {}
  start_time = time.perf_counter()
  try:
    with ckpt_lib.Checkpointer(workdir / PPO_DIR, exp.checkpoint) as ckpt:
      restored = ckpt.restore_latest(actor=actor, critic=critic, rng=base_rng)
      start = 0
      if restored is not None:
        actor, critic = restored.actor, restored.critic
        start = int(restored.data_position["iteration"])
        logging.info(
          "PPO: resumed at iteration %d from %s", start, ckpt.directory
        )
      done = start
      for it in range(start, total_iterations):
        timer = metrics_lib.PhaseTimer()
        it_rng = jax.random.fold_in(base_rng, it)
        tasks, groups = data_lib.iteration_tasks(
          train_tasks,
          exp.seed,
          it,
          exp.ppo.prompts_per_iteration,
          exp.ppo.samples_per_prompt,
        )
        policy = agent_loop.SamplerPolicy(
          sampler, {"params": actor.params}, tok, cache_len
        )
        rollout = agent_loop.collect(
          env,
          policy,
          tasks,
          groups,
          jax.random.fold_in(it_rng, 0),
          num_flags=num_flags,
        )
        timer.add("generation", rollout.timings["generate_s"])
        timer.add("sandbox_wait", rollout.timings["env_s"])
        with timer.phase("anticheat"):
          rewards, ac_scalars = reward_fn(rollout, tasks)
        (actor, critic), metrics = ppo_iteration(
          learner,
          (actor, critic),
          sft_params,
          rollout,
          rewards,
          it,
          jax.random.fold_in(it_rng, 1),
          timer,
        )
        ep_scalars, hists = _episode_metrics(rollout, rewards, exp)
        metrics.update(ep_scalars)
        metrics.update(ac_scalars)
        generated = float(np.asarray(rollout.batch.trainable).sum())
        metrics["perf/tokens_per_s"] = generated / max(
          rollout.timings["generate_s"], 1e-9
        )
        if (it + 1) % exp.ppo.eval_every == 0 or it + 1 == total_iterations:
          with timer.phase("eval"):
            last_eval = evaluator(actor.params, jax.random.fold_in(it_rng, 2))
          metrics.update(last_eval)
        checkpoint = ckpt_lib.TrainCheckpoint(
          actor=actor,
          critic=critic,
          step=it + 1,
          rng=base_rng,
          data_position={"iteration": it + 1},
        )
        with timer.phase("checkpoint"):
          saved = ckpt.save(
            checkpoint, force=stop.requested or it + 1 == total_iterations
          )
        metrics.update(timer.scalars())
        history.append({"iteration": it, **metrics})
        metrics.update(monitor_fn(history))
        writer.write_scalars(it, metrics)
        writer.write_histograms(it, hists)
        writer.flush()
        done = it + 1
        console(
          metrics_lib.format_progress(
            it,
            total_iterations,
            metrics,
            time.perf_counter() - start_time,
            start_iteration=start,
          )
        )
        if stop.requested:  # also when it arrived after the save above
          if not saved:
            ckpt.save(checkpoint, force=True)
          break
  finally:
    if previous is not None:
      signal.signal(signal.SIGTERM, previous)
  return PPOResult(
    actor_params=actor.params,
    iterations_done=done,
    last_eval=last_eval,
    stopped_early=done < total_iterations,
  )


def writer_history(workdir: pathlib.Path) -> list[dict]:
  """The metrics of earlier iterations (a resumed run's monitor history)."""
  try:
    return metrics_lib.read_metrics(str(workdir))
  except FileNotFoundError:
    return []
