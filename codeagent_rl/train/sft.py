"""Supervised fine-tuning of the actor on rendered demonstrations.

The loss is next-token cross-entropy on the trainable (action) tokens only:
prompts and sandbox observations are context, never targets. The result is
saved as an orbax checkpoint in `<workdir>/sft/`; it is both the PPO
starting point and the KL reference. A run that finds that checkpoint
(resume) restores it instead of training again. Every `sft.save_every`
steps the actor and its optimiser state are saved there too (the newest
only), so an SFT interrupted before its end resumes from its last save with
the same batches and rates; a resumed SFT equals one run straight through.
A checkpoint past `sft.steps` (the steps were lowered in the same workdir)
is an error: it is neither trained over nor deleted.
"""

from __future__ import annotations

import os
import pathlib
import time
from typing import Any

from absl import logging
import jax
import numpy as np

from codeagent_rl import jit_cache
from codeagent_rl.models import hf_import
from codeagent_rl.models import transformer
from codeagent_rl.parallel import checkpoint as ckpt_lib
from codeagent_rl.parallel import distributed
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.parallel import transfers
from codeagent_rl.train import console_lines
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import keys
from codeagent_rl.train import steps
from codeagent_rl.train import workdir as workdir_lib


def sft_optim(exp: exp_lib.Experiment) -> state_lib.OptimConfig:
  """`config.optim` with the SFT rate and warmup (critic unused)."""
  return state_lib.OptimConfig(
    actor_lr=exp.sft.learning_rate,
    critic_lr=exp.sft.learning_rate,
    weight_decay=exp.optim.weight_decay,
    b1=exp.optim.b1,
    b2=exp.optim.b2,
    eps=exp.optim.eps,
    grad_clip_norm=exp.optim.grad_clip_norm,
    warmup_steps=exp.sft.warmup_steps,
    decay_steps=(
      exp.sft.steps
      if exp.sft.final_lr_fraction < 1.0
      and exp.sft.steps > exp.sft.warmup_steps
      else 0
    ),
    final_lr_fraction=exp.sft.final_lr_fraction,
  )


def _checkpointer(workdir: pathlib.Path, exp: exp_lib.Experiment):
  config = ckpt_lib.CheckpointConfig(
    keep=1, save_every=max(1, exp.sft.steps), async_save=False
  )
  return ckpt_lib.Checkpointer(workdir_lib.Workdir(workdir).sft, config)


def check_not_past_steps(
  directory: pathlib.Path, latest: int | None, steps: int
) -> None:
  """Refuses an SFT checkpoint past `steps` (lowered in the same workdir).

  Args:
    directory: the SFT checkpoint folder (for the message).
    latest: its newest step, None without one.
    steps: `config.sft.steps`.

  Raises:
    SetupError: `latest` is past `steps`.
  """
  if latest is not None and latest > steps:
    raise exp_lib.SetupError(
      f"{directory} holds an SFT checkpoint at step {latest}, past"
      f" config.sft.steps={steps}; nothing was trained or deleted."
      " Use a fresh --workdir, or set"
      f" --config.sft.steps={latest} to reuse that checkpoint."
    )


def run_sft(
  exp: exp_lib.Experiment,
  arrays: dict[str, np.ndarray] | None,
  workdir: str | os.PathLike[str],
  mesh: jax.sharding.Mesh,
  rules: Any,
  *,
  log_metrics=None,
  console=None,
) -> tuple[Any, dict[str, float]]:
  """Trains (or restores) the SFT actor.

  The actor starts from `exp.hf_checkpoint_dir`'s weights when the run has
  one (with `sft.steps` 0 they are the SFT model as they are), else from a
  random initialisation.

  Args:
    exp: the experiment.
    arrays: `data.sft_arrays(...)` (None when a finished SFT checkpoint is
      known to exist and only needs restoring).
    workdir: the run directory; the checkpoint goes to `<workdir>/sft`.
    mesh: the device mesh.
    rules: logical-axis rules.
    log_metrics: optional `fn(step, scalars)` called every `log_every` steps.
    console: optional `fn(line)` given a progress line with an ETA every
      `log_every` steps (`console_lines.format_sft_progress`).

  Returns:
    (actor params, final scalars {"sft/loss", "sft/token_accuracy", ...}).

  Raises:
    SetupError: `<workdir>/sft` holds a checkpoint past `sft.steps`.
    ValueError: there is nothing to train on (`arrays` is None).
  """
  workdir = pathlib.Path(workdir)
  optim = sft_optim(exp)
  init_rng = keys.sft_init(exp.seed)
  shardings, _ = state_lib.train_state_shardings(exp.model, optim, mesh, rules)
  if exp.hf_checkpoint_dir is not None:
    params = hf_import.load_params(
      exp.hf_checkpoint_dir, exp.model, {"params": shardings.params}
    )["params"]
    if exp.sft.steps == 0:
      logging.info("SFT: none; the actor is %s", exp.hf_checkpoint_dir)
      return params, {}
    with sharding.axis_rules(mesh, rules):
      actor, _ = state_lib.states_from_actor_params(
        params, exp.model, optim, mesh, rules, init_rng, "random"
      )
  else:
    with sharding.axis_rules(mesh, rules):
      actor, _ = state_lib.create_train_states(
        exp.model, optim, mesh, rules, init_rng
      )
  with _checkpointer(workdir, exp) as ckpt:
    latest = ckpt.latest_step()
    check_not_past_steps(ckpt.directory, latest, exp.sft.steps)
    if latest == exp.sft.steps:
      restored = ckpt.restore(
        exp.sft.steps, actor=actor, critic=None, rng=transfers.key(0)
      )
      logging.info("SFT: restored the finished run from %s", ckpt.directory)
      return restored.actor.params, dict(restored.data_position["metrics"])
    if exp.sft.steps == 0:
      return actor.params, {}
    if arrays is None:
      raise ValueError("run_sft: no demonstrations and no SFT checkpoint.")
    start = 0
    if latest is not None and latest < exp.sft.steps:
      actor = ckpt.restore(
        latest, actor=actor, critic=None, rng=transfers.key(0)
      ).actor
      start = latest
      logging.info("SFT: resuming at step %d of %d", start, exp.sft.steps)

    # Made here: `save` also runs under the training loop's mesh, where
    # making a key would copy it to every device (an implicit transfer).
    no_key = transfers.key(0)

    def save(actor, step, metrics):
      ckpt.save(
        ckpt_lib.TrainCheckpoint(
          actor=actor,
          critic=None,
          step=step,
          rng=no_key,
          data_position={"metrics": metrics},
        ),
        force=True,
      )

    actor, metrics = _train(
      exp,
      arrays,
      actor,
      shardings,
      optim,
      mesh,
      rules,
      log_metrics,
      start=start,
      save=save,
      console=console,
    )
    save(actor, exp.sft.steps, metrics)
    return actor.params, metrics


def length_grouped_batches(
  lengths: np.ndarray,
  batch_size: int,
  bucket: int,
  max_width: int,
  rng: np.random.Generator,
):
  """Endless (row indices, width) batches of demonstrations of similar length.

  Rows are grouped by their length rounded up to `bucket`; each epoch
  shuffles every group, cuts it into batches of `batch_size` (a group's
  last, short batch is topped up with random rows of the same group, so
  every batch has the same size and a group's width; a group smaller than
  one batch joins the next wider group), and shuffles the
  batch order. Padding a single-turn demonstration of 250 tokens to the
  600 of the longest multi-turn one would more than double the cost of
  SFT; this way a handful of widths compile and little is padding.
  """
  widths = np.asarray(
    [data_lib.bucket_width(int(n), bucket, max_width) for n in lengths]
  )
  groups, carry = {}, np.empty((0,), np.int64)
  for w in np.unique(widths):  # ascending; a group smaller than one batch
    rows = np.concatenate([carry, np.flatnonzero(widths == w)])
    carry = rows if len(rows) < batch_size else np.empty((0,), np.int64)
    if not len(carry):  # joins the next wider one (never oversampled)
      groups[w] = rows
  if len(carry):  # the widest rows: the widest group takes their width
    rows = groups.pop(max(groups)) if groups else np.empty((0,), np.int64)
    groups[int(widths.max())] = np.concatenate([rows, carry])
  while True:
    epoch = []
    for width, rows in groups.items():
      rows = rng.permutation(rows)
      short = -len(rows) % batch_size
      if short:
        rows = np.concatenate([rows, rng.choice(rows, short)])
      epoch += [(chunk, int(width)) for chunk in rows.reshape(-1, batch_size)]
    for k in rng.permutation(len(epoch)):
      yield epoch[k]


def _train(
  exp,
  arrays,
  actor,
  shardings,
  optim,
  mesh,
  rules,
  log_metrics,
  start,
  save,
  console=None,
):
  """Runs SFT steps `start` .. `sft.steps`; returns (actor, last metrics).

  `save(actor, step, metrics)` is called every `sft.save_every` steps
  before the last (the caller saves the last).
  """
  cfg = exp.sft
  model = transformer.Actor(exp.model)
  tx = state_lib.make_optimizer(optim, optim.actor_lr)
  num_micro = 1
  batch_sharding = sharding.batch_sharding(mesh, rules)
  # The rows of each batch this process feeds (all, with one process).
  mine = sharding.process_rows(batch_sharding, cfg.batch_size)
  # Shared with earlier SFT runs of equal settings in this process.
  step_fn = jit_cache.jit(
    steps.sft_step,
    context=rules,
    jit_kwargs={
      "in_shardings": (shardings, batch_sharding, None),
      "out_shardings": (shardings, None),
      "donate_argnums": (0,),
    },
    model=model,
    tx=tx,
    num_micro=num_micro,
  )
  batches = length_grouped_batches(
    arrays["valid"].sum(axis=1),
    cfg.batch_size,
    cfg.length_bucket,
    arrays["tokens"].shape[1],
    np.random.default_rng([exp.seed, 0x5F7]),
  )
  for _ in range(start):  # the batches of the steps already done
    next(batches)
  replicated = sharding.replicated(mesh)
  t0 = time.perf_counter()
  window: list[dict[str, float]] = []
  metrics: dict[str, float] = {}
  # Made before the mesh is set: under it, making a key on one device would
  # copy it to every device (an implicit transfer).
  step_keys = [keys.sft_step(exp.seed, step) for step in range(cfg.steps)]
  with sharding.axis_rules(mesh, rules):
    for step in range(start, cfg.steps):
      rows, width = next(batches)
      rows = rows[mine]
      batch = {
        k: arrays[k][rows, :width] for k in ("tokens", "valid", "trainable")
      }
      batch = sharding.shard_batch(batch, mesh, rules)
      rng = distributed.put_replicated(step_keys[step], replicated)
      actor, out = step_fn(actor, batch, rng)
      window.append(out)
      done = step + 1
      save_now = (
        cfg.save_every > 0 and done % cfg.save_every == 0 and done < cfg.steps
      )
      # A save is checked like a log step: no non-finite actor is saved.
      if done % cfg.log_every == 0 or done == cfg.steps or save_now:
        # Averaged on the host, in float32 as the device would.
        means = jax.tree.map(
          lambda *xs: sum(xs) / len(xs), *jax.device_get(window)
        )
        metrics = {k: float(v) for k, v in means.items()}
        if not np.isfinite(metrics["sft/loss"]):
          raise FloatingPointError(
            f"SFT step {done}: the loss is {metrics['sft/loss']}; lower"
            " config.sft.learning_rate. Nothing after the last periodic"
            " save (sft.save_every) was saved."
          )
        elapsed = time.perf_counter() - t0
        metrics["sft/steps_per_s"] = (done - start) / elapsed
        line = console_lines.format_sft_progress(
          done, cfg.steps, metrics, elapsed, start_step=start
        )
        if console is not None:
          console(line)
        else:
          logging.info("%s", line)
        if log_metrics is not None:
          log_metrics(done, metrics)
        window = []
      if save_now:
        save(actor, done, metrics)
  return actor, metrics
