r"""Exports a run's trained actor as a Hugging Face checkpoint.

  python -m codeagent_rl.export_hf --workdir=WORKDIR --out=OUT [--step=N] \
      [--dtype=float32|bfloat16]

The run's experiment is read from WORKDIR/config.json (what the train job
wrote). The actor of the newest PPO checkpoint is restored (PPO iteration N
with `--step`; the SFT checkpoint when PPO has saved none), on the run's
mesh as the evaluation job does, and written to OUT as `config.json` and
`model.safetensors` (`models/hf_export.py`):
`transformers.AutoModelForCausalLM.from_pretrained(OUT)` loads it.

A run that started from a Hugging Face checkpoint (the experiment's
`hf_checkpoint_dir`) exports with that checkpoint's model_type, keeps the
other fields of its config.json (token ids, max_position_embeddings, ...) and
gets its tokenizer files (`TOKENIZER_FILES`, those present). Without one (the
tiny byte-level model) the model exports as "llama", or "qwen2" when it has
q/k/v biases, with no tokenizer files: its ids are those of
`codeagent_rl.models.tokenizer.ByteTokenizer`.

OUT must be absent or an empty directory. Everything is written into OUT.tmp,
which is renamed to OUT once complete, so a failed export leaves nothing.
Problems stop the program with a one-line message and a non-zero exit.
"""

from __future__ import annotations

from collections.abc import Callable
import json
import os
import pathlib
import shutil
import sys
from typing import Any

from absl import app
from absl import flags
import ml_collections

from codeagent_rl import logs
from codeagent_rl.models import hf_export
from codeagent_rl.models import hf_import
from codeagent_rl.models import transformer
from codeagent_rl.parallel import checkpoint as ckpt_lib
from codeagent_rl.parallel import transfers
from codeagent_rl.train import eval_job
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import workdir as workdir_lib

# Tokenizer files copied from the run's `hf_checkpoint_dir`, where present.
# transformers >= 5 saves the chat template in chat_template.jinja.
TOKENIZER_FILES = (
  "tokenizer.json",
  "tokenizer_config.json",
  "chat_template.jinja",
  "generation_config.json",
  "special_tokens_map.json",
  "vocab.json",
  "merges.txt",
)
# Suffix of the directory an export is written into before its rename.
TMP_SUFFIX = ".tmp"


class ExportError(Exception):
  """The export cannot be done; the message says why and what to do."""


def define_flags() -> None:
  """Registers the program's flags."""
  flags.DEFINE_string(
    "workdir", None, "The run's workdir (python -m codeagent_rl.main's)."
  )
  flags.DEFINE_string(
    "out", None, "Directory to write the checkpoint to; absent or empty."
  )
  flags.DEFINE_integer(
    "step",
    None,
    "PPO iteration to export; default: the newest PPO checkpoint, else SFT.",
    lower_bound=0,
  )
  flags.DEFINE_enum(
    "dtype", "float32", ["float32", "bfloat16"], "Dtype of the saved weights."
  )
  flags.mark_flags_as_required(["workdir", "out"])


def read_experiment(workdir: str | os.PathLike[str]) -> exp_lib.Experiment:
  """The run's experiment, from its config.json.

  Raises:
    ExportError: the workdir or its config.json is missing or unreadable.
    ValueError: config.json is not a valid experiment (names the field),
      e.g. its hf_checkpoint_dir is gone.
  """
  paths = workdir_lib.Workdir(workdir)
  if not paths.root.is_dir():
    raise ExportError(f"--workdir={paths.root} does not exist.")
  if not paths.config.is_file():
    raise ExportError(
      f"{paths.config} is missing: {paths.root} is not the workdir of a"
      " training run (python -m codeagent_rl.main writes it)."
    )
  try:
    raw = json.loads(paths.config.read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ExportError(f"{paths.config} cannot be read: {e}") from e
  if not isinstance(raw, dict):
    raise ExportError(f"{paths.config} is not a JSON object.")
  # config.json is `experiment.to_dict`, which leaves out the job.
  return exp_lib.Experiment.from_config(
    ml_collections.ConfigDict({**raw, "job": "train"})
  )


def restore_actor(
  exp: exp_lib.Experiment,
  workdir: str | os.PathLike[str],
  step: int | None = None,
) -> tuple[Any, str]:
  """The actor's params, `{"params": ...}`, on the run's mesh.

  Args:
    exp: the run's experiment (the restore target).
    workdir: the run's workdir.
    step: a PPO iteration, or None for the newest PPO checkpoint (the SFT
      one when PPO has saved none).

  Returns:
    (variables, a description of the checkpoint).

  Raises:
    ExportError: no checkpoint, or none for `step`.
  """
  paths = workdir_lib.Workdir(workdir)
  mesh, rules = exp.make_mesh()
  if step is None:
    try:
      # The train config is named only in the error, replaced below.
      params, what = eval_job.restore_actor_params(
        exp, paths.root, mesh, rules, "CONFIG"
      )
    except eval_job.CheckpointNotFoundError as e:
      raise ExportError(
        f"{paths.root} has no PPO ({paths.checkpoints}) or SFT"
        f" ({paths.sft}) checkpoint to export; train first."
      ) from e
    return {"params": params}, what
  cfg = ckpt_lib.CheckpointConfig(keep=1, save_every=1, async_save=False)
  if not paths.checkpoints.is_dir():
    raise ExportError(
      f"--step={step}: {paths.root} has no PPO checkpoints"
      f" ({paths.checkpoints})."
    )
  with ckpt_lib.Checkpointer(paths.checkpoints, cfg, read_only=True) as ckpt:
    steps = ckpt.all_steps()
    if step not in steps:
      raise ExportError(
        f"--step={step}: no PPO checkpoint of that iteration in"
        f" {paths.checkpoints}; its iterations: {steps}."
      )
    actor, critic = eval_job._abstract_states(exp, exp.optim, mesh, rules)
    restored = ckpt.restore(
      step,
      actor=actor,
      critic=critic if exp.uses_critic else None,
      rng=transfers.key(0),
    )
  what = f"PPO iteration {step} ({paths.checkpoints})"
  return {"params": restored.actor.params}, what


def _tmp_dir(out: pathlib.Path) -> pathlib.Path:
  return out.with_name(out.name + TMP_SUFFIX)


def check_out(out: str | os.PathLike[str]) -> None:
  """Raises ExportError unless `out` (and its .tmp) may be written.

  `out` must be absent or an empty directory; `out.tmp` must be absent.
  """
  out = pathlib.Path(out)
  if out.exists() and (not out.is_dir() or any(out.iterdir())):
    raise ExportError(
      f"--out={out} exists and is not an empty directory; choose another"
      " --out or remove it."
    )
  tmp = _tmp_dir(out)
  if tmp.exists():
    raise ExportError(
      f"{tmp} exists (an export that did not finish?); remove it first."
    )


def export_params(
  params: Any,
  config: transformer.TransformerConfig,
  out: str | os.PathLike[str],
  *,
  hf_checkpoint_dir: str | os.PathLike[str] | None,
  dtype: str = "float32",
  console: Callable[[str], None] = print,
) -> None:
  """Writes the checkpoint into `out` via `out.tmp` (module docstring).

  Args:
    params: the actor's variables, `{"params": ...}`.
    config: their model config.
    out: the directory to create (absent or empty).
    hf_checkpoint_dir: the Hugging Face checkpoint the run started from, or
      None.
    dtype: "float32" or "bfloat16".
    console: where the progress lines go.

  Raises:
    ExportError: `out` is taken, or `hf_checkpoint_dir` has no config.json.
    ValueError: the model cannot be saved as that model_type.
  """
  out = pathlib.Path(out)
  check_out(out)
  base = None
  if hf_checkpoint_dir is None:
    model_type = "qwen2" if config.qkv_bias else "llama"
    console(
      f"the run has no hf_checkpoint_dir: exporting as model_type"
      f" {model_type!r} without tokenizer files (token ids are"
      " codeagent_rl.models.tokenizer.ByteTokenizer's)"
    )
  else:
    try:
      base = hf_import.read_hf_config(hf_checkpoint_dir)
    except (OSError, json.JSONDecodeError) as e:
      raise ExportError(
        f"hf_checkpoint_dir={str(hf_checkpoint_dir)!r}: {e}"
      ) from e
    model_type = base.get("model_type")
  tmp = _tmp_dir(out)
  tmp.mkdir(parents=True)
  try:
    hf_export.save_params(
      params, config, tmp, model_type=model_type, base_config=base, dtype=dtype
    )
    copied = []
    if hf_checkpoint_dir is not None:
      for name in TOKENIZER_FILES:
        src = pathlib.Path(hf_checkpoint_dir) / name
        if src.is_file():
          shutil.copy2(src, tmp / name)
          copied.append(name)
      console(
        f"from {hf_checkpoint_dir}: its config.json as the base, tokenizer"
        f" files {', '.join(copied) or 'none'}"
      )
    os.replace(tmp, out)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  console(f"wrote {out}: model_type {model_type!r}, {dtype} weights")


def export(
  workdir: str | os.PathLike[str],
  out: str | os.PathLike[str],
  *,
  step: int | None = None,
  dtype: str = "float32",
  console: Callable[[str], None] = print,
) -> str:
  """Exports a run's actor (module docstring); returns what was exported.

  Raises:
    ExportError: as `read_experiment`, `restore_actor`, `export_params`.
    ValueError: config.json is not a valid experiment, or the model cannot
      be saved as its model_type.
  """
  exp = read_experiment(workdir)
  check_out(out)  # before the restore, which can take a while
  params, what = restore_actor(exp, workdir, step)
  console(f"restored the actor of {what}")
  export_params(
    params,
    exp.model,
    out,
    hf_checkpoint_dir=exp.hf_checkpoint_dir,
    dtype=dtype,
    console=console,
  )
  return what


def main(argv: list[str]) -> None:
  """Entry point of `python -m codeagent_rl.export_hf`."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logs.quiet_library_logs()
  try:
    export(
      flags.FLAGS.workdir,
      flags.FLAGS.out,
      step=flags.FLAGS.step,
      dtype=flags.FLAGS.dtype,
    )
  except (ExportError, ValueError, OSError) as e:
    sys.exit("error: " + " ".join(str(e).split()))


if __name__ == "__main__":
  define_flags()
  app.run(main)
