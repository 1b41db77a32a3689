"""The layout of a run's workdir: every name the jobs read and write.

  config.json          the validated experiment (`CONFIG`)
  sft_data.npz         rendered demonstrations, a cache (`SFT_DATA`)
  isolation.json       the data-isolation check of those demonstrations
  sft/                 the SFT checkpoint: PPO's start and KL reference
  checkpoints/         PPO checkpoints; a resume picks up the newest
  metrics.jsonl        one JSON object per PPO iteration
  tensorboard/         event files (`tensorboard --logdir=WORKDIR`)
  eval_sft.json        held-out pass@1 of the SFT model (and per task)
  eval_final.json      per-task pass rates of PPO's last evaluation
  eval_final_samples.jsonl  its episodes as a samples file
                       (`codeagent_rl.samples`), gradable against
                       eval_tasks.jsonl
  eval_tasks.jsonl     the held-out tasks
  summary.json         SFT vs final pass@1 and where things are
  humaneval.jsonl      the evaluation job's converted tasks (a cache)
  eval_humaneval.json  the evaluation job's result

Only this module spells these names; the jobs ask a `Workdir` for paths.
"""

from __future__ import annotations

import os
import pathlib

CONFIG = "config.json"
SFT_DATA = "sft_data.npz"
ISOLATION = "isolation.json"
SFT_DIR = "sft"
PPO_DIR = "checkpoints"
METRICS = "metrics.jsonl"
VALUE_PRETRAIN = "value_pretrain.jsonl"
TENSORBOARD = "tensorboard"
EVAL_SFT = "eval_sft.json"
EVAL_FINAL = "eval_final.json"
EVAL_FINAL_SAMPLES = "eval_final_samples.jsonl"
EVAL_TASKS = "eval_tasks.jsonl"
SUMMARY = "summary.json"
HUMANEVAL_TASKS = "humaneval.jsonl"
HUMANEVAL_RESULT = "eval_humaneval.json"


class Workdir:
  """Paths of one run's workdir (module docstring).

  Attributes:
    root: the workdir itself; every other attribute is a path in it, named
      as in the module docstring (`sft` and `checkpoints` are folders).
  """

  def __init__(self, root: str | os.PathLike[str]):
    self.root = pathlib.Path(root)
    self.config = self.root / CONFIG
    self.sft_data = self.root / SFT_DATA
    self.isolation = self.root / ISOLATION
    self.sft = self.root / SFT_DIR
    self.checkpoints = self.root / PPO_DIR
    self.metrics = self.root / METRICS
    self.value_pretrain = self.root / VALUE_PRETRAIN
    self.tensorboard = self.root / TENSORBOARD
    self.eval_sft = self.root / EVAL_SFT
    self.eval_final = self.root / EVAL_FINAL
    self.eval_final_samples = self.root / EVAL_FINAL_SAMPLES
    self.eval_tasks = self.root / EVAL_TASKS
    self.summary = self.root / SUMMARY
    self.humaneval_tasks = self.root / HUMANEVAL_TASKS
    self.humaneval_result = self.root / HUMANEVAL_RESULT
