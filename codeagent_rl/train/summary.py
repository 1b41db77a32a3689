"""The run's summary: SFT vs final pass@1, paired per task, and the paths.

Pure functions of the evaluations, the metrics records and the workdir's
paths; `run.train_and_evaluate` writes what `make` returns to
summary.json and prints its table.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
from typing import Any

from codeagent_rl.anticheat import monitors
from codeagent_rl.train import console_lines
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import workdir as workdir_lib


def eval_line(scalars: dict[str, float]) -> str:
  """One line of an evaluation's pass@1, e.g. for the SFT model."""
  parts = []
  for mode in ("greedy", "sampled"):
    if f"eval/{mode}/pass_a" in scalars:
      parts.append(
        f"{mode} pass@1 A {scalars[f'eval/{mode}/pass_a']:.3f}"
        f" A&B {scalars[f'eval/{mode}/pass_ab']:.3f}"
      )
  return "; ".join(parts)


def last_eval(records: list[dict]) -> dict[str, float]:
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


def read_per_task(path: pathlib.Path) -> dict[str, dict] | None:
  """The "per_task" rates saved in `path` (None if absent or unreadable)."""
  try:
    saved = json.loads(path.read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError):
    return None
  per_task = saved.get("per_task") if isinstance(saved, dict) else None
  return per_task if isinstance(per_task, dict) else None


def paired(
  exp: exp_lib.Experiment,
  sft_per_task: dict[str, dict] | None,
  final_per_task: dict[str, dict] | None,
) -> dict[str, dict]:
  """PPO final minus SFT on pass@1 A&B, paired per task, for each mode."""
  if not sft_per_task or not final_per_task:
    return {}
  out = {}
  for mode in exp.eval.modes:
    if mode in sft_per_task and mode in final_per_task:
      diff = eval_lib.paired_difference(
        sft_per_task[mode], final_per_task[mode]
      )
      if diff is not None:
        out[mode] = diff
  return out


def _paired_lines(
  exp, pairs: dict[str, dict], last: str = "PPO final"
) -> list[str]:
  lines = []
  for mode, d in pairs.items():
    lines.append(
      f"{last} - SFT ({_mode_label(exp, mode)}), pass@1 A&B paired over"
      f" {d['tasks']} tasks: {d['mean']:+.3f} (s.e. {d['se']:.3f};"
      f" tasks up {d['up']}, down {d['down']})"
    )
  return lines


def _alarm_line(counts: dict[str, int], iterations: int) -> str:
  if not counts:
    return "monitor alarms: none"
  fired = ", ".join(
    f"{name} at {n} of {iterations} iterations" for name, n in counts.items()
  )
  return f"monitor alarms: {fired} (warnings above; monitor/* in metrics)"


def _tensorboard_command(root: pathlib.Path) -> str:
  """How to view the run's event files, with the install step if needed."""
  command = f"tensorboard --logdir={root}"
  if importlib.util.find_spec("tensorboard") is None:
    return f"pip install tensorboard, then {command}"
  return command


def make(
  exp: exp_lib.Experiment,
  workdir: workdir_lib.Workdir,
  sft_eval: dict[str, float],
  final_eval: dict[str, float],
  iterations_done: int,
  stopped_early: bool,
  pairs: dict[str, dict],
  records: list[dict],
) -> dict[str, Any]:
  """The summary dict, with its printable `table`.

  Args:
    exp: the experiment.
    workdir: the run's workdir.
    sft_eval: the SFT model's evaluation scalars.
    final_eval: PPO's last evaluation scalars.
    iterations_done: PPO iterations done.
    stopped_early: whether a stop request ended PPO early.
    pairs: `paired(...)`.
    records: the metrics records of every iteration.
  """
  rows = []
  # After an early stop the last evaluation is of an unfinished run.
  last = (
    f"PPO it {iterations_done}/{exp.ppo.iterations} (stopped early)"
    if stopped_early
    else "PPO final"
  )
  for mode in exp.eval.modes:
    for stage, scalars in (("SFT", sft_eval), (last, final_eval)):
      rows.append(
        (
          f"{stage} ({_mode_label(exp, mode)})",
          scalars.get(f"eval/{mode}/pass_a"),
          scalars.get(f"eval/{mode}/pass_ab"),
        )
      )
  # Without SFT steps the run starts from (and its KL reference is) the
  # Hugging Face checkpoint; nothing is saved under sft/.
  start = (
    exp.hf_checkpoint_dir
    if exp.hf_checkpoint_dir is not None and not exp.sft.steps
    else str(workdir.sft)
  )
  locations = {
    "checkpoints": str(workdir.checkpoints),
    "SFT checkpoint": start,
    "metrics": str(workdir.metrics),
    "tensorboard": _tensorboard_command(workdir.root),
  }
  counts = monitors.alarm_counts(records)
  notes = [*_paired_lines(exp, pairs, last), _alarm_line(counts, len(records))]
  if stopped_early:
    notes.insert(
      0,
      f"stopped early after iteration {iterations_done} of"
      f" {exp.ppo.iterations} (a stop request, e.g. SIGTERM); the same"
      " command resumes",
    )
  table = console_lines.format_summary(rows, locations, notes)
  return {
    "preset": exp.preset,
    "estimator": exp.rl.advantage.estimator,
    "seed": exp.seed,
    "iterations_done": iterations_done,
    "stopped_early": stopped_early,
    "sft_eval": sft_eval,
    "final_eval": final_eval,
    "alarms": counts,
    "paired": pairs,
    "table": table,
    **{f"path/{k}": v for k, v in locations.items()},
  }
