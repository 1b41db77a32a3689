"""The whole job: SFT -> evaluation -> PPO -> evaluation -> summary.

`train_and_evaluate(config, workdir, sandbox_config)` is what
`python -m codeagent_rl.main` calls, and what a notebook can call. The
workdir holds everything the run produces:

  config.json          the validated experiment
  sft_data.npz         rendered demonstrations (cache)
  sft/                 the SFT checkpoint (PPO start and KL reference)
  checkpoints/         PPO checkpoints (resume picks up the newest)
  metrics.jsonl        one JSON object per PPO iteration
  tensorboard/         event files (`tensorboard --logdir=WORKDIR`)
  eval_sft.json        held-out pass@1 of the SFT model (and per task)
  eval_final.json      per-task pass rates of PPO's last evaluation
  eval_final_samples.jsonl  its episodes as a samples file (codeagent_rl/
                       samples.py: trajectory, observations, final code,
                       "mode"), gradable against eval_tasks.jsonl
  eval_tasks.jsonl     the held-out tasks
  summary.json         SFT vs final pass@1 and where things are

Running the same command again in the same workdir resumes: the SFT
checkpoint and its evaluation are reused, PPO continues from its newest
checkpoint with the same data order and randomness.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import time
from typing import Any

from absl import logging
import jax
import ml_collections
import numpy as np

from codeagent_rl import samples as samples_lib
from codeagent_rl.anticheat import features as features_lib
from codeagent_rl.anticheat import monitors
from codeagent_rl.anticheat import pipeline
from codeagent_rl.anticheat import stage1 as stage1_lib
from codeagent_rl.envs import code_env
from codeagent_rl.parallel import checkpoint as ckpt_lib
from codeagent_rl.sandbox import config as sandbox_config_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import schema
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import eval_job
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import metrics as metrics_lib
from codeagent_rl.train import ppo as ppo_lib
from codeagent_rl.train import sft as sft_lib

EVAL_SFT = "eval_sft.json"
EVAL_FINAL = "eval_final.json"
EVAL_FINAL_SAMPLES = "eval_final_samples.jsonl"
EVAL_TASKS = "eval_tasks.jsonl"
SUMMARY = "summary.json"


def _write_json(path: pathlib.Path, obj: Any) -> None:
  tmp = path.with_suffix(path.suffix + ".tmp")
  tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str))
  os.replace(tmp, path)


# Bumped when what an evaluation counts as solved changes (2: episodes that
# stage 1 rejects are unsolved; numbers compared by the expected type).
_EVAL_MEASURE = 2


def _sft_eval_key(exp: exp_lib.Experiment) -> dict[str, Any]:
  """What the saved SFT evaluation depends on.

  The SFT length, the evaluation settings, the anti-cheat (its config and
  the weights file's contents: rejected episodes count as unsolved) and
  `_EVAL_MEASURE`.
  """
  weights = pathlib.Path(exp.anticheat.weights_path).read_bytes()
  key = {
    "sft_steps": exp.sft.steps,
    "eval": dataclasses.asdict(exp.eval),
    "anticheat": dataclasses.asdict(exp.anticheat),
    "weights_sha256": hashlib.sha256(weights).hexdigest(),
    "measure": _EVAL_MEASURE,
  }
  # As the saved file will hold it (tuples become lists), to compare equal.
  return json.loads(json.dumps(key))


def _saved_sft_eval(path: pathlib.Path, key: dict[str, Any]) -> dict | None:
  """The saved evaluation of the SFT model, if it was made under `key`.

  `key` (`_sft_eval_key`) holds the SFT length, the evaluation settings and
  the anti-cheat: a run resumed with more `sft.steps` trains SFT further,
  and one with other `config.eval` or `config.anticheat` settings (or
  weights) measures differently; the saved evaluation is then stale and is
  done again.
  """
  if not path.exists():
    return None
  try:
    saved = json.loads(path.read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    logging.warning("%s cannot be read (%s); evaluating again", path, e)
    return None
  if not isinstance(saved, dict):
    logging.warning("%s is not an object; evaluating again", path)
    return None
  if saved.get("key") != key or "eval" not in saved:
    logging.info(
      "%s is for another SFT length, evaluation or anti-cheat setting;"
      " evaluating again",
      path,
    )
    return None
  return saved["eval"]


class AntiCheatRewards:
  """Both anti-cheat stages over a rollout's episodes (`ppo.RewardFn`)."""

  def __init__(self, anticheat: pipeline.AntiCheat):
    self.anticheat = anticheat

  def __call__(self, rollout, tasks):
    """(rewards after both stages, anti-cheat scalars) of a rollout."""
    del tasks  # each episode carries its task
    rewards, _ = self.anticheat.episode_rewards(rollout.episodes)
    flags = np.asarray(rewards.stage1_flags)
    skipped = [
      e.outcome.reason == pipeline.SKIP_REASON for e in rollout.episodes
    ]
    # flag_rate (what the flag-rate monitor reads) is the share stage 1
    # rejected; most flags are classifier features, so a raised flag (e.g.
    # code that does not parse) is not a rejection: flagged_rate.
    scalars = {
      k: float(v)
      for k, v in stage1_lib.summary(rewards, self.anticheat.config).items()
    }
    scalars.update(
      {
        "anticheat/flagged_rate": float(flags.any(axis=1).mean()),
        "anticheat/skipped_rate": float(np.mean(skipped)),
        "anticheat/stage2_fail_rate": float(
          1.0 - np.mean(np.asarray(rewards.stage2_ok, np.float32))
        ),
      }
    )
    return rewards, scalars


def monitor_fn(exp: exp_lib.Experiment, warn=logging.warning):
  """The PPO loop's `monitor_fn`: alarms of the last iteration -> metrics.

  An alarm is warned about when it starts firing (or first fires in this
  process, after a resume), not again while it keeps firing; the
  `monitor/<name>` metrics record every iteration, and the summary counts
  them (`alarm_counts`).
  """
  previous: set[str] = set()  # alarms of the last call

  def fn(history):
    alarms = monitors.check(history, exp.monitors)
    current = [a for a in alarms if a.iteration == history[-1]["iteration"]]
    for alarm in current:
      if alarm.name not in previous:
        warn(
          "monitor %s (not repeated while it keeps firing; monitor/%s in"
          " metrics.jsonl has every iteration): %s",
          alarm.name,
          alarm.name,
          alarm.message,
        )
    previous.clear()
    previous.update(alarm.name for alarm in current)
    return monitors.alarm_metrics(current, monitors.MONITOR_NAMES)

  return fn


def alarm_counts(records: list[dict]) -> dict[str, int]:
  """Iterations at which each monitor fired, from metrics records."""
  counts = {}
  for name in monitors.MONITOR_NAMES:
    n = sum(1 for r in records if r.get(f"monitor/{name}") == 1.0)
    if n:
      counts[name] = n
  return counts


def _alarm_line(counts: dict[str, int], iterations: int) -> str:
  if not counts:
    return "monitor alarms: none"
  fired = ", ".join(
    f"{name} at {n} of {iterations} iterations" for name, n in counts.items()
  )
  return f"monitor alarms: {fired} (warnings above; monitor/* in metrics)"


def _latest_step(directory: pathlib.Path) -> int | None:
  """The newest checkpoint step in `directory` (None without one)."""
  if not directory.is_dir():
    return None
  cfg = ckpt_lib.CheckpointConfig(keep=1, save_every=1, async_save=False)
  with ckpt_lib.Checkpointer(directory, cfg, read_only=True) as ckpt:
    return ckpt.latest_step()


def _ppo_done(workdir: pathlib.Path) -> int:
  """Iterations already done in `workdir` (0 without a PPO checkpoint)."""
  return _latest_step(workdir / ppo_lib.PPO_DIR) or 0


def _check_checkpoints(
  workdir: pathlib.Path, sft_steps: int, ppo_done: int
) -> None:
  """Refuses `sft.steps` that do not match the workdir's checkpoints.

  Runs before anything in the workdir is written. An SFT checkpoint past
  `sft.steps` is refused (as `run_sft` would, but before config.json is
  rewritten). A run resumed with a larger `sft.steps` would continue SFT
  from its checkpoint; under PPO checkpoints, PPO would then resume from a
  policy trained from the shorter SFT, with the longer one as its KL
  reference and in the summary.

  Raises:
    SetupError: the SFT checkpoint is past `sft_steps`, or PPO checkpoints
      exist (`ppo_done` iterations) and the SFT checkpoint is short of
      `sft_steps`. Nothing was changed.
  """
  sft_done = _latest_step(workdir / sft_lib.SFT_DIR)
  sft_lib.check_not_past_steps(workdir / sft_lib.SFT_DIR, sft_done, sft_steps)
  if ppo_done and sft_done is not None and sft_done < sft_steps:
    raise exp_lib.SetupError(
      f"{workdir / ppo_lib.PPO_DIR} holds PPO checkpoints (to iteration"
      f" {ppo_done}) trained from the {sft_done}-step SFT checkpoint in"
      f" {workdir / sft_lib.SFT_DIR}, but config.sft.steps={sft_steps} would"
      " train SFT further first; nothing was trained or deleted. Set"
      f" --config.sft.steps={sft_done} to resume PPO, or start PPO again from"
      " the longer SFT in a fresh --workdir (copy the sft/ folder and"
      " sft_data.npz into it to keep the SFT done so far)."
    )


def train_and_evaluate(
  config: ml_collections.ConfigDict,
  workdir: str | os.PathLike[str],
  sandbox: sandbox_config_lib.SandboxConfig,
  *,
  stop: ppo_lib.Stop | None = None,
  iterations: int | None = None,
  console=print,
) -> dict[str, Any]:
  """Runs (or resumes) the experiment; returns the summary dict.

  Args:
    config: an experiment config (e.g. `configs/tiny.py`).
    workdir: the run directory (created if missing).
    sandbox: the sandbox pool's settings (from the absl flags).
    stop: a `ppo.Stop` to end PPO early (tests; SIGTERM sets one too).
    iterations: run PPO only up to this many iterations (tests).
    console: where progress lines and the summary go.

  Returns:
    The summary: pass@1 of the SFT model and the final one, paths, times.
  """
  start = time.perf_counter()
  exp = exp_lib.Experiment.from_config(config)
  workdir = pathlib.Path(workdir)
  done_before = _ppo_done(workdir)  # SFT below leaves PPO's folder alone
  _check_checkpoints(workdir, exp.sft.steps, done_before)
  workdir.mkdir(parents=True, exist_ok=True)
  _write_json(workdir / "config.json", exp_lib.to_dict(exp))
  mesh, rules = exp.make_mesh()
  task_sets = data_lib.make_task_sets(exp.data, exp.seed)
  # The held-out tasks beside the evaluation's samples: graded again with
  # `python -m codeagent_rl.grade --tasks=... --samples=...`.
  schema.write_tasks(workdir / EVAL_TASKS, task_sets.eval)
  tok = exp.tokenizer()
  console(
    f"codeagent_rl: preset {exp.preset}, {exp.model.num_params():,} params,"
    f" {len(task_sets.train)} train / {len(task_sets.eval)} held-out tasks,"
    f" sandbox {sandbox.backend} x{sandbox.pool_size}, workdir {workdir}"
  )
  anticheat = pipeline.AntiCheat.from_config(exp.anticheat)
  with harness.SandboxPool(sandbox) as pool:
    # Demonstrations and evaluation run without the pre-submit gate: every
    # submission runs, and the evaluation counts the ones stage 1 rejects
    # as unsolved afterwards.
    env = code_env.CodeEnv(pool, tok, exp.env)
    rl_env = code_env.CodeEnv(
      pool, tok, exp.env, pre_submit=anticheat.pre_submit
    )
    arrays = None
    if exp.sft.steps:
      arrays = data_lib.sft_arrays(env, task_sets, workdir)
    t0 = time.perf_counter()
    sft_params, sft_metrics = sft_lib.run_sft(exp, arrays, workdir, mesh, rules)
    sft_s = time.perf_counter() - t0
    loss = sft_metrics.get("sft/loss")  # absent without SFT steps
    console(
      f"SFT: {exp.sft.steps} steps,"
      f" loss {'n/a' if loss is None else f'{float(loss):.4f}'} ({sft_s:.0f} s)"
    )
    evaluator = eval_lib.Evaluator(
      exp,
      env,
      task_sets.eval,
      batch_size=exp.ppo.rollouts_per_iteration,
    )
    eval_path = workdir / EVAL_SFT
    key = _sft_eval_key(exp)
    sft_eval = _saved_sft_eval(eval_path, key)
    if sft_eval is None:
      sft_eval = evaluator(sft_params, jax.random.key(exp.seed + 2))
      _write_json(
        eval_path,
        {"key": key, "eval": sft_eval, "per_task": evaluator.last_per_task},
      )
    console("SFT held-out: " + _eval_line(sft_eval))
    learner = ppo_lib.Learner(exp, mesh, rules)
    with metrics_lib.MetricsWriter(
      str(workdir), start_iteration=done_before
    ) as writer:
      result = ppo_lib.run_ppo(
        exp,
        learner,
        rl_env,
        list(task_sets.train),
        sft_params,
        workdir,
        reward_fn=AntiCheatRewards(anticheat),
        evaluator=evaluator,
        writer=writer,
        monitor_fn=monitor_fn(exp),
        num_flags=features_lib.NUM_FLAGS,
        stop=stop,
        iterations=iterations,
        console=console,
      )
  final_eval = result.last_eval
  if final_eval:
    _write_json(
      workdir / EVAL_FINAL,
      {
        "iteration": result.iterations_done,
        "per_task": evaluator.last_per_task,
      },
    )
    samples_lib.write_samples(
      workdir / EVAL_FINAL_SAMPLES,
      (
        samples_lib.episode_line(episode, mode=mode)
        for mode, episodes in evaluator.last_episodes.items()
        for episode in episodes
      ),
    )
  records = ppo_lib.writer_history(workdir)
  if not final_eval:  # resumed a finished run: nothing was evaluated
    final_eval = _last_eval(records)
  paired = _paired(
    exp, _read_per_task(eval_path), _read_per_task(workdir / EVAL_FINAL)
  )
  summary = _summary(
    exp, workdir, sft_eval, final_eval, result, paired, records
  )
  summary["elapsed_s"] = round(time.perf_counter() - start, 1)
  _write_json(workdir / SUMMARY, summary)
  console(summary["table"])
  return summary


JOBS = ("train", "evaluate")


def run_job(
  config: ml_collections.ConfigDict,
  workdir: str | os.PathLike[str],
  sandbox: sandbox_config_lib.SandboxConfig,
) -> dict[str, Any]:
  """Dispatches on `config.job`: "train" or "evaluate" (eval_job.py)."""
  job = config.job if "job" in config else None
  if job == "train":
    return train_and_evaluate(config, workdir, sandbox)
  if job == "evaluate":
    return eval_job.evaluate_checkpoint(config, workdir, sandbox)
  raise ValueError(f"config.job={job!r}: expected one of {JOBS}.")


def _eval_line(scalars: dict[str, float]) -> str:
  parts = []
  for mode in ("greedy", "sampled"):
    if f"eval/{mode}/pass_a" in scalars:
      parts.append(
        f"{mode} pass@1 A {scalars[f'eval/{mode}/pass_a']:.3f}"
        f" A&B {scalars[f'eval/{mode}/pass_ab']:.3f}"
      )
  return "; ".join(parts)


def _last_eval(records: list[dict]) -> dict[str, float]:
  """The eval/* scalars of the newest metrics record that has them."""
  for record in reversed(records):
    evals = {k: v for k, v in record.items() if k.startswith("eval/")}
    if evals:
      return evals
  return {}


def _mode_label(exp: exp_lib.Experiment, mode: str) -> str:
  """The mode as the summary names it, e.g. "sampled, 4 per task"."""
  k = exp.eval.samples_per_task
  return f"{mode}, {k} per task" if mode == "sampled" and k > 1 else mode


def _read_per_task(path: pathlib.Path) -> dict[str, dict] | None:
  """The "per_task" rates saved in `path` (None if absent or unreadable)."""
  try:
    saved = json.loads(path.read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError):
    return None
  per_task = saved.get("per_task") if isinstance(saved, dict) else None
  return per_task if isinstance(per_task, dict) else None


def _paired(exp, sft_per_task, final_per_task) -> dict[str, dict]:
  """PPO final minus SFT on pass@1 A&B, paired per task, for each mode."""
  if not sft_per_task or not final_per_task:
    return {}
  paired = {}
  for mode in exp.eval.modes:
    if mode in sft_per_task and mode in final_per_task:
      diff = eval_lib.paired_difference(
        sft_per_task[mode], final_per_task[mode]
      )
      if diff is not None:
        paired[mode] = diff
  return paired


def _paired_lines(exp, paired: dict[str, dict]) -> list[str]:
  lines = []
  for mode, d in paired.items():
    lines.append(
      f"PPO final - SFT ({_mode_label(exp, mode)}), pass@1 A&B paired over"
      f" {d['tasks']} tasks: {d['mean']:+.3f} (s.e. {d['se']:.3f};"
      f" tasks up {d['up']}, down {d['down']})"
    )
  return lines


def _summary(
  exp, workdir, sft_eval, final_eval, result, paired, records
) -> dict[str, Any]:
  rows = []
  for mode in exp.eval.modes:
    for stage, scalars in (("SFT", sft_eval), ("PPO final", final_eval)):
      rows.append(
        (
          f"{stage} ({_mode_label(exp, mode)})",
          scalars.get(f"eval/{mode}/pass_a"),
          scalars.get(f"eval/{mode}/pass_ab"),
        )
      )
  locations = {
    "checkpoints": str(workdir / ppo_lib.PPO_DIR),
    "SFT checkpoint": str(workdir / sft_lib.SFT_DIR),
    "metrics": str(workdir / metrics_lib.METRICS_FILE),
    "tensorboard": f"tensorboard --logdir={workdir}",
  }
  counts = alarm_counts(records)
  notes = [*_paired_lines(exp, paired), _alarm_line(counts, len(records))]
  table = metrics_lib.format_summary(rows, locations, notes)
  return {
    "preset": exp.preset,
    "estimator": exp.rl.advantage.estimator,
    "seed": exp.seed,
    "iterations_done": result.iterations_done,
    "stopped_early": result.stopped_early,
    "sft_eval": sft_eval,
    "final_eval": final_eval,
    "alarms": counts,
    "paired": paired,
    "table": table,
    **{f"path/{k}": v for k, v in locations.items()},
  }
