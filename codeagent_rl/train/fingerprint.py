"""What the SFT model and the value-pretrained critic were made from.

A resumed run reuses the workdir's SFT checkpoint (finished or interrupted)
only when it was made from the same inputs, and the value-pretrained critic
(PPO checkpoint step 0) only when it was made from the same SFT model and
the same settings. The inputs are recorded beside the checkpoints when
training starts (`sft_fingerprint.json`, `value_pretrain_fingerprint.json`)
and compared on every later start:

- SFT: the demonstrations (plans, and what the policy sees of their tasks,
  and the env budgets that cut them), the tokenizer (its files, or the byte
  vocabulary), the model (its config, and a sample of the starting
  checkpoint's files) and the SFT settings (`config.sft`, `config.optim`'s
  AdamW fields). The seed is not part of it: a comparison shares one SFT
  model between seeds (`experiments/compare.py --sft=shared`); a plain run
  of another seed draws other tasks (`config.data.seed` unset), so its
  demonstrations differ.
- Value pre-training: the SFT inputs, the seed and every section that the
  pre-training's rollouts and updates read (all but PPO's iteration count
  and evaluation period).

On a difference the run stops before writing anything, naming what
changed and the flag that trains it again (`--config.sft.retrain=True`,
`--config.ppo.value_pretrain_retrain=True`). A workdir from before these
records were kept is judged by its config.json, the config of the run that
last trained in it: the same SFT fields there and the checkpoint is kept
(and its record written), else the run stops the same way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Any

from codeagent_rl.models import chat_template
from codeagent_rl.models import hf_import
from codeagent_rl.tasks import schema
from codeagent_rl.train import experiment as exp_lib

# Bumped when what a record holds changes; a record of another version is
# treated as missing.
VERSION = 1
# SFT settings that do not change the model (how often it logs and saves,
# and this very switch).
_SFT_UNUSED = ("log_every", "save_every", "retrain")
# PPO settings that value pre-training does not read.
_VALUE_UNUSED = ("iterations", "eval_every", "value_pretrain_retrain")
# Bytes hashed from each end of a checkpoint's weight files: enough to tell
# two checkpoints apart without reading gigabytes on every start.
_SAMPLE_BYTES = 1 << 20


def _digest(obj: Any) -> str:
  text = json.dumps(obj, sort_keys=True, default=str)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain(obj: Any) -> Any:
  """`obj` as the saved JSON holds it (tuples become lists), to compare."""
  return json.loads(json.dumps(obj, sort_keys=True, default=str))


def _file_digest(path: pathlib.Path, whole: bool) -> str:
  """sha256 of a file, or of its size and first and last `_SAMPLE_BYTES`."""
  h = hashlib.sha256()
  size = path.stat().st_size
  with path.open("rb") as f:
    if whole or size <= 2 * _SAMPLE_BYTES:
      h.update(f.read())
    else:
      h.update(str(size).encode())
      h.update(f.read(_SAMPLE_BYTES))
      f.seek(size - _SAMPLE_BYTES)
      h.update(f.read())
  return h.hexdigest()[:16]


def tokenizer_digest(exp: exp_lib.Experiment) -> str:
  """The tokenizer: its checkpoint files' contents, or the byte vocabulary."""
  if exp.hf_checkpoint_dir is None:
    return f"byte-{exp.conversation.vocab_size}"
  root = pathlib.Path(exp.hf_checkpoint_dir)
  names = (
    chat_template.TOKENIZER_FILE,
    chat_template.TOKENIZER_CONFIG_FILE,
    chat_template.SPECIAL_TOKENS_MAP_FILE,
    chat_template.TEMPLATE_FILE,
    chat_template.GENERATION_CONFIG_FILE,
  )
  return _digest(
    {
      name: _file_digest(root / name, whole=True)
      for name in names
      if (root / name).is_file()
    }
  )


def _checkpoint_digest(directory: str | None) -> str | None:
  """config.json and a sample of each weight file of a HF checkpoint."""
  if directory is None:
    return None
  root = pathlib.Path(directory)
  files = [root / hf_import.CONFIG_FILE, *sorted(root.glob("*.safetensors"))]
  return _digest(
    {
      f.name: _file_digest(f, whole=f.suffix == ".json")
      for f in files
      if f.is_file()
    }
  )


def _demonstrations(exp: exp_lib.Experiment, task_sets: Any) -> str:
  """The plans, what the policy sees of their tasks, and the env budgets."""
  wanted = {plan.task_id for plan in task_sets.plans}
  tasks = []
  for task in task_sets.train:
    if task.task_id in wanted:
      shown = schema.task_to_json(task)
      tasks.append(
        {
          k: shown[k]
          for k in ("task_id", "prompt", "entry_point", "kind", "visible_tests")
        }
      )
  plans = [[p.task_id, p.kind, p.actions] for p in task_sets.plans]
  return _digest([dataclasses.asdict(exp.env), plans, tasks])


def sft_settings(exp: exp_lib.Experiment) -> dict[str, Any]:
  """The config fields SFT trains with (`config.sft`, AdamW's fields)."""
  sft = {
    k: v for k, v in dataclasses.asdict(exp.sft).items() if k not in _SFT_UNUSED
  }
  optim = {
    k: getattr(exp.optim, k)
    for k in ("weight_decay", "b1", "b2", "eps", "grad_clip_norm")
  }
  return _plain({"sft": sft, "optim": optim})


def sft_inputs(exp: exp_lib.Experiment, task_sets: Any) -> dict[str, Any]:
  """The record of what the run's SFT model is made from."""
  return _plain(
    {
      "version": VERSION,
      "demonstrations": _demonstrations(exp, task_sets),
      "tokenizer": tokenizer_digest(exp),
      "model": {
        **dataclasses.asdict(exp.model),
        "checkpoint": _checkpoint_digest(exp.hf_checkpoint_dir),
      },
      "settings": sft_settings(exp),
    }
  )


def value_pretrain_inputs(
  exp: exp_lib.Experiment, sft: dict[str, Any]
) -> dict[str, Any]:
  """The record of what the value-pretrained critic is made from."""
  view = exp_lib.to_dict(exp)
  settings = {
    name: view[name]
    for name in ("seed", "rl", "optim", "sampling", "env", "anticheat")
  }
  settings["sandbox"] = view["sandbox"]
  settings["critic"] = view["critic"]
  settings["critic_checkpoint"] = _checkpoint_digest(exp.critic_checkpoint_dir)
  settings["ppo"] = {
    k: v for k, v in view["ppo"].items() if k not in _VALUE_UNUSED
  }
  return _plain({"version": VERSION, "sft": _digest(sft), "settings": settings})


def differences(saved: Any, now: Any, prefix: str = "") -> list[str]:
  """What differs between two records, one entry per field ("a.b: x -> y")."""
  if isinstance(saved, dict) and isinstance(now, dict):
    out = []
    for key in sorted(set(saved) | set(now)):
      where = f"{prefix}.{key}" if prefix else str(key)
      if key not in saved or key not in now:
        out.append(f"{where}: {saved.get(key)!r} -> {now.get(key)!r}")
      else:
        out += differences(saved[key], now[key], where)
    return out
  if saved != now:
    return [f"{prefix}: {_short(saved)} -> {_short(now)}"]
  return []


def _short(value: Any) -> str:
  text = repr(value)
  return text if len(text) <= 60 else text[:57] + "..."


def read(path: pathlib.Path) -> dict[str, Any] | None:
  """A saved record; None when missing, unreadable or of another version."""
  try:
    saved = json.loads(path.read_text())
  except (OSError, ValueError):
    return None
  if not isinstance(saved, dict) or saved.get("version") != VERSION:
    return None
  return saved


def write(path: pathlib.Path, record: dict[str, Any]) -> None:
  """Writes a record atomically."""
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
  os.replace(tmp, path)


# The SFT fields of a legacy workdir's config.json that decide its model
# (the demonstrations come from `data`, budgets from `env`).
_LEGACY_SECTIONS = ("data", "env", "model", "hf_checkpoint_dir")


def legacy_differences(
  saved_config: dict[str, Any] | None, exp: exp_lib.Experiment
) -> list[str] | None:
  """How a legacy workdir's config.json differs from `exp` on SFT's fields.

  Returns None when there is no readable config.json to judge by. Seeds
  count only through the tasks they draw (the data seed).
  """
  if not isinstance(saved_config, dict):
    return None
  now = exp_lib.to_dict(exp)
  out = []
  for name in _LEGACY_SECTIONS:
    if name in saved_config:
      out += differences(saved_config[name], _plain(now[name]), name)
  saved_data_seed = (saved_config.get("data") or {}).get("seed")
  if saved_data_seed is None:
    saved_data_seed = saved_config.get("seed")
  if saved_data_seed != exp.data_seed:
    out.append(f"data seed: {saved_data_seed!r} -> {exp.data_seed!r}")
  sft = {**(saved_config.get("sft") or {})}
  optim = saved_config.get("optim") or {}
  saved = {
    "sft": {k: v for k, v in sft.items() if k not in _SFT_UNUSED},
    "optim": {k: optim.get(k) for k in sft_settings(exp)["optim"]},
  }
  out += differences(saved, sft_settings(exp))
  return out
