"""The layout of a run's workdir: every name the jobs read and write.

  config.json          the validated experiment (`CONFIG`)
  environment.json     versions, commit, CPU and devices of each start
                       (`codeagent_rl.provenance`)
  sft_data.npz         rendered demonstrations, a cache (`SFT_DATA`)
  isolation.json       the data-isolation check of those demonstrations
  task_audit.json      the audit of the task files (`tasks/audit.py`);
                       a resume of the same files reuses it
  sft/                 the SFT checkpoint: PPO's start and KL reference
  sft_fingerprint.json what the SFT model is made from (`fingerprint.py`)
  checkpoints/         PPO checkpoints; a resume picks up the newest
                       (step 0: the value-pretrained critic)
  value_pretrain.jsonl explained variance per value pre-training round
  value_pretrain_fingerprint.json  what the pre-trained critic is made from
  replaced/N/          what `--config.sft.retrain` or
                       `--config.ppo.value_pretrain_retrain` set aside
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
ENVIRONMENT = "environment.json"
SFT_DATA = "sft_data.npz"
ISOLATION = "isolation.json"
TASK_AUDIT = "task_audit.json"
SFT_DIR = "sft"
SFT_FINGERPRINT = "sft_fingerprint.json"
VALUE_PRETRAIN_FINGERPRINT = "value_pretrain_fingerprint.json"
REPLACED = "replaced"
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

# What PPO leaves (trained from the SFT model and the pre-trained critic),
# and what the SFT model adds: a retrain sets these aside together.
PPO_OUTPUTS = (
  PPO_DIR,
  VALUE_PRETRAIN,
  VALUE_PRETRAIN_FINGERPRINT,
  METRICS,
  TENSORBOARD,
  EVAL_FINAL,
  EVAL_FINAL_SAMPLES,
  SUMMARY,
)
SFT_OUTPUTS = (SFT_DIR, SFT_FINGERPRINT, EVAL_SFT, *PPO_OUTPUTS)


class Workdir:
  """Paths of one run's workdir (module docstring).

  Attributes:
    root: the workdir itself; every other attribute is a path in it, named
      as in the module docstring (`sft` and `checkpoints` are folders).
  """

  def __init__(self, root: str | os.PathLike[str]):
    self.root = pathlib.Path(root)
    self.config = self.root / CONFIG
    self.environment = self.root / ENVIRONMENT
    self.sft_data = self.root / SFT_DATA
    self.isolation = self.root / ISOLATION
    self.task_audit = self.root / TASK_AUDIT
    self.sft = self.root / SFT_DIR
    self.sft_fingerprint = self.root / SFT_FINGERPRINT
    self.value_pretrain_fingerprint = self.root / VALUE_PRETRAIN_FINGERPRINT
    self.replaced = self.root / REPLACED
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
