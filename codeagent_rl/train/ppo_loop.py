"""PPO's loop: `run_ppo` runs (or resumes) `ppo.Learner`'s iterations.

The loop draws each iteration's prompts (`data.iteration_prompts`: a
function of seed and iteration), evaluates every `ppo.eval_every`
iterations, saves a checkpoint every `checkpoint.save_every`, lets the
anti-cheat's `monitors.Watcher` read the metrics and writes them. With
`ppo.max_staleness` = 1 a thread collects iteration k + 1's rollouts while
iteration k updates (the `ppo` module docstring says how they are
weighted). With a critic and `ppo.value_pretrain_iterations`, the critic
is pre-trained (`value_pretrain.pretrain_value`) before the first
iteration and saved as checkpoint step 0.

Resume: the checkpoint holds both states and the iteration; the keys of
iteration k are a function of the seed and k (`keys.ppo_iteration`), so a
run interrupted and resumed draws the same prompts and samples as one that
was not (with overlapped rollouts, the first iteration after a resume is
on policy: the stale rollouts were not saved). A non-finite loss stops the
run before anything of that iteration is saved, so the last checkpoint is
the last good one. SIGTERM finishes the current iteration, saves, and
returns.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import concurrent.futures
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

from codeagent_rl.anticheat import monitors
from codeagent_rl.parallel import checkpoint as ckpt_lib
from codeagent_rl.parallel import distributed
from codeagent_rl.tasks import schema
from codeagent_rl.train import console_lines
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import keys
from codeagent_rl.train import metrics as metrics_lib
from codeagent_rl.train import ppo
from codeagent_rl.train import value_pretrain
from codeagent_rl.train import workdir as workdir_lib

# The data position's flag of the checkpoint saved after value pre-training.
VALUE_PRETRAINED = "value_pretrained"


@dataclasses.dataclass
class PPOResult:
  """What `run_ppo` leaves behind."""

  actor_params: Any
  iterations_done: int
  last_eval: dict[str, float]
  stopped_early: bool


def _install_sigterm(stop: ppo.Stop):
  if threading.current_thread() is not threading.main_thread():
    return None

  def handler(signum, frame):
    del signum, frame
    logging.warning("SIGTERM: finishing this iteration, then saving.")
    stop.requested = True

  return signal.signal(signal.SIGTERM, handler)


def run_ppo(
  learner: ppo.Learner,
  train_tasks: Sequence[schema.Task],
  sft_params: Any,
  workdir: str | pathlib.Path,
  *,
  evaluator: eval_lib.Evaluator,
  writer: metrics_lib.MetricsWriter | metrics_lib.NullWriter,
  stop: ppo.Stop | None = None,
  iterations: int | None = None,
  console: Callable[[str], None] = print,
) -> PPOResult:
  """Runs (or resumes) PPO up to `iterations` (default `ppo.iterations`).

  Args:
    learner: the experiment's learner, with its environment, anti-cheat and
      KL reference.
    train_tasks: prompts to draw from.
    sft_params: the SFT actor params: the starting point.
    workdir: checkpoints go to its `checkpoints/`; its metrics.jsonl is the
      history a resumed run's monitors read.
    evaluator: held-out pass@1.
    writer: metrics.jsonl / TensorBoard writer (a `NullWriter` on the
      processes other than process 0).
    stop: set `requested` to stop after the current iteration (SIGTERM
      does it when running in the main thread).
    iterations: stop after this many iterations in total (tests).
    console: where the progress lines go.

  Returns:
    The final actor params, iterations done, the last evaluation and whether
    a stop request ended the run early.

  Raises:
    ppo.NonFiniteLossError: a loss went NaN/inf; the newest checkpoint is the
      last good iteration.
  """
  exp = learner.exp
  total_iterations = exp.ppo.iterations if iterations is None else iterations
  stop = stop or ppo.Stop()
  previous = _install_sigterm(stop)
  paths = workdir_lib.Workdir(workdir)
  run_key = keys.ppo(exp.seed)
  actor, critic = learner.initial_states(sft_params, keys.ppo_init(exp.seed))
  # Process 0 writes metrics.jsonl (and its monitors' metrics); another
  # process would read it while that one rewrites it.
  history = writer_history(paths.root) if distributed.is_primary() else []
  watcher = monitors.Watcher(exp.monitors)
  last_eval: dict[str, float] = {}
  start_time = time.perf_counter()
  overlap = exp.ppo.max_staleness > 0
  executor = (
    concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rollouts")
    if overlap
    else None
  )
  try:
    with ckpt_lib.Checkpointer(paths.checkpoints, exp.checkpoint) as ckpt:
      restored = ckpt.restore_latest(actor=actor, critic=critic, rng=run_key)
      start, pretrained = 0, False
      if restored is not None:
        actor, critic = restored.actor, restored.critic
        start = int(restored.data_position["iteration"])
        pretrained = bool(restored.data_position.get(VALUE_PRETRAINED))
        logging.info(
          "PPO: resumed at iteration %d from %s", start, ckpt.directory
        )
      if (
        start == 0
        and not pretrained
        and critic is not None
        and exp.ppo.value_pretrain_iterations
      ):
        actor, critic = value_pretrain.pretrain_value(
          learner, (actor, critic), train_tasks, paths.value_pretrain, console
        )
        # Step 0 holds the pre-trained critic: a resume starts PPO from it
        # instead of pre-training again.
        ckpt.save(
          ckpt_lib.TrainCheckpoint(
            actor=actor,
            critic=critic,
            step=0,
            rng=run_key,
            data_position={"iteration": 0, VALUE_PRETRAINED: True},
          ),
          force=True,
        )
      done = start
      pending = None  # (future of iteration it's rollouts, their params)
      for it in range(start, total_iterations):
        timer = metrics_lib.PhaseTimer()
        it_keys = keys.ppo_iteration(exp.seed, it)
        behaviour = None
        if pending is not None:
          future, behaviour, started = pending
          pending = None
          with timer.phase("rollout_wait"):
            collected = learner.score(future.result(), started)
        else:
          prompts = data_lib.iteration_prompts(
            train_tasks, exp.seed, it, exp.ppo.prompts_per_iteration
          )
          collected = learner.collect(
            actor.params,
            critic,
            prompts,
            it_keys,
            index=it,
            more_prompts=functools.partial(
              _dynamic_round_prompts, train_tasks, exp, it
            ),
          )
        if overlap and it + 1 < total_iterations and not stop.requested:
          # The update donates the actor's buffers: the thread samples from
          # a copy, which the next update also needs (behaviour log-probs).
          snapshot = jax.tree.map(jnp.copy, actor.params)
          next_prompts = data_lib.iteration_prompts(
            train_tasks, exp.seed, it + 1, exp.ppo.prompts_per_iteration
          )
          # Steps taken with the other processes (the host copy, the gather
          # in `score`) stay in this thread; the thread only rolls out.
          future = executor.submit(
            learner.rollouts,
            learner.sampling_params(snapshot),
            next_prompts,
            keys.ppo_iteration(exp.seed, it + 1),
          )
          pending = (future, snapshot, time.perf_counter())
        (actor, critic), metrics = learner.learn(
          (actor, critic),
          collected,
          it_keys,
          index=it,
          timer=timer,
          behaviour_params=behaviour,
        )
        scalars = metrics.scalars
        if (it + 1) % exp.ppo.eval_every == 0 or it + 1 == total_iterations:
          with timer.phase("eval"):
            last_eval = evaluator(actor.params, it_keys["eval"])
          scalars.update(last_eval)
        checkpoint = ckpt_lib.TrainCheckpoint(
          actor=actor,
          critic=critic,
          step=it + 1,
          rng=run_key,
          data_position={"iteration": it + 1},
        )
        with timer.phase("checkpoint"):
          saved = ckpt.save(
            checkpoint, force=stop.requested or it + 1 == total_iterations
          )
        scalars.update(timer.scalars())
        history.append({"iteration": it, **scalars})
        scalars.update(watcher(history))
        writer.write_scalars(it, scalars)
        writer.write_histograms(it, metrics.histograms)
        writer.flush()
        done = it + 1
        console(
          console_lines.format_progress(
            it,
            total_iterations,
            scalars,
            time.perf_counter() - start_time,
            start_iteration=start,
          )
        )
        if stop.requested:  # also when it arrived after the save above
          if not saved:
            ckpt.save(checkpoint, force=True)
          break
  finally:
    if executor is not None:  # a collection still running is not needed
      executor.shutdown(wait=True, cancel_futures=True)
    if previous is not None:
      signal.signal(signal.SIGTERM, previous)
  return PPOResult(
    actor_params=actor.params,
    iterations_done=done,
    last_eval=last_eval,
    stopped_early=done < total_iterations,
  )


def _dynamic_round_prompts(
  train_tasks: Sequence[schema.Task],
  exp: exp_lib.Experiment,
  iteration: int,
  round_index: int,
) -> list[schema.Task]:
  """The prompts of dynamic sampling's round `round_index` of `iteration`."""
  return data_lib.iteration_prompts(
    train_tasks,
    exp.seed,
    iteration,
    exp.ppo.prompts_per_iteration,
    salt=data_lib.DYNAMIC_SAMPLING_PROMPTS + round_index,
  )


def writer_history(workdir: pathlib.Path) -> list[dict]:
  """The metrics of earlier iterations (a resumed run's monitor history)."""
  try:
    return metrics_lib.read_metrics(str(workdir))
  except FileNotFoundError:
    return []
