"""Evaluating a trained checkpoint on HumanEval through the sandbox.

    python -m codeagent_rl.main --config=configs/eval_humaneval.py:tiny \
        --workdir=/tmp/tiny

The config is the training config of the run (so that the restore target
matches what was saved) with `job = "evaluate"` and a `humaneval` section.
The newest PPO checkpoint in the workdir is evaluated (the SFT checkpoint
if PPO has not saved one). Tasks come from `humaneval.tasks_file`, or are
converted now (tasks/humaneval.py: suite A is HumanEval's own `check`,
suite B an augmented held-out suite) and cached as `humaneval.jsonl` in the
workdir. The cache holds the first problems in HumanEval order: a run that
asks for more converts the missing ones and adds them; a cache that does not
read as such (damaged, other tasks) is converted again. The result, pass@1
on suite A (the HumanEval metric) and on A-and-B, greedy and sampled, goes to
`eval_humaneval.json` and the console.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

from absl import logging
import jax
import ml_collections

from codeagent_rl import provenance
from codeagent_rl.envs import code_env
from codeagent_rl.parallel import checkpoint as ckpt_lib
from codeagent_rl.parallel import distributed
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.parallel import transfers
from codeagent_rl.sandbox import config as sandbox_config_lib
from codeagent_rl.sandbox import pools
from codeagent_rl.tasks import humaneval
from codeagent_rl.tasks import schema
from codeagent_rl.train import config as train_config
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import keys
from codeagent_rl.train import sft as sft_lib
from codeagent_rl.train import workdir as workdir_lib


@dataclasses.dataclass(frozen=True)
class HumanEvalConfig:
  """Validated `config.humaneval`.

  Attributes:
    train_config: the training config of the run, "name[:presets]" as
      configs/eval_humaneval.py takes it (named in the message that says to
      train first).
    tasks_file: HumanEval tasks JSONL (from `python -m
      codeagent_rl.tasks.humaneval --out=...`); "" converts them now.
    num_tasks: evaluate the first N problems; 0 for all 164.
    batch_size: episodes run together.
  """

  train_config: str
  tasks_file: str
  num_tasks: int
  batch_size: int

  def __post_init__(self):
    if not isinstance(self.train_config, str) or not self.train_config:
      raise ValueError(
        f"config.humaneval.train_config={self.train_config!r}: must name the"
        ' training config, e.g. "tiny:smoke".'
      )
    if (
      type(self.num_tasks) is not int
      or not 0 <= self.num_tasks <= humaneval.NUM_PROBLEMS
    ):
      raise ValueError(
        f"config.humaneval.num_tasks={self.num_tasks!r}: must be an integer"
        f" from 0 (all) to {humaneval.NUM_PROBLEMS}."
      )
    if type(self.batch_size) is not int or self.batch_size < 1:
      raise ValueError(
        f"config.humaneval.batch_size={self.batch_size!r}: must be an"
        " integer >= 1."
      )


class CheckpointNotFoundError(FileNotFoundError):
  """The workdir has no checkpoint to evaluate; the message says what to run."""


def _first_ids(n: int) -> list[str]:
  return [f"HumanEval/{i}" for i in range(n)]


def _cached_tasks(path: pathlib.Path) -> list[schema.Task]:
  """The problems in the cache; [] if it is missing or not a valid cache.

  A valid cache holds HumanEval/0 .. HumanEval/k-1 in that order (what
  `_tasks` writes); anything else is converted again rather than trusted.
  """
  if not path.exists():
    return []
  try:
    tasks = schema.read_tasks(path)
  except (schema.TaskFormatError, UnicodeDecodeError) as e:
    logging.warning("%s is damaged (%s); converting again", path, e)
    return []
  if [t.task_id for t in tasks] != _first_ids(len(tasks)):
    logging.warning(
      "%s does not hold the first HumanEval problems in order; converting"
      " again",
      path,
    )
    return []
  return tasks


def _tasks(
  cfg: HumanEvalConfig, workdir: pathlib.Path, pool: Any
) -> list[schema.Task]:
  """The first `cfg.num_tasks` problems (all if 0), from file or cache.

  Without `cfg.tasks_file`, problems the cache in `workdir` lacks are
  converted in `pool` and added to it.
  """
  if cfg.tasks_file:
    try:
      tasks = schema.read_tasks(cfg.tasks_file, schema.PROGRAM_KINDS)
    except (OSError, schema.TaskFormatError, UnicodeDecodeError) as e:
      raise exp_lib.SetupError(
        f"config.humaneval.tasks_file={cfg.tasks_file!r} cannot be read:"
        f" {e}. Write it with: python -m codeagent_rl.tasks.humaneval"
        f" --out={cfg.tasks_file} (or set it to '' to convert now)."
      ) from e
    if len(tasks) < cfg.num_tasks:
      raise exp_lib.SetupError(
        f"config.humaneval.tasks_file={cfg.tasks_file!r} holds"
        f" {len(tasks)} problems, fewer than"
        f" config.humaneval.num_tasks={cfg.num_tasks}; set num_tasks to at"
        " most that (0: all of the file)."
      )
    return tasks[: cfg.num_tasks] if cfg.num_tasks else tasks
  wanted = _first_ids(cfg.num_tasks or humaneval.NUM_PROBLEMS)
  path = workdir_lib.Workdir(workdir).humaneval_tasks
  tasks = _cached_tasks(path)
  if len(tasks) < len(wanted):
    missing = wanted[len(tasks) :]
    logging.info("converting %d HumanEval problems", len(missing))
    tasks += humaneval.convert(pool, humaneval.load_problems(missing))
    if distributed.is_primary():  # each process converted the same
      tmp = path.with_suffix(path.suffix + ".tmp")
      schema.write_tasks(tmp, tasks)
      os.replace(tmp, path)  # a crash mid-write leaves the old cache
  return tasks[: len(wanted)]


def restore_actor_params(
  exp: exp_lib.Experiment,
  workdir: pathlib.Path,
  mesh,
  rules,
  train_config: str,
) -> tuple[Any, str]:
  """The newest PPO actor params of a run, else its SFT params.

  Args:
    exp: the run's training experiment (the restore target).
    workdir: the run's workdir.
    mesh: the device mesh to restore onto.
    rules: the logical axis rules.
    train_config: the run's training config, "name[:presets]" (named in
      the error).

  Returns:
    (params, a description of the checkpoint).

  Raises:
    CheckpointNotFoundError: the workdir has neither checkpoint.
    SetupError: its newest checkpoint is of another model.
  """
  cfg = ckpt_lib.CheckpointConfig(keep=1, save_every=1, async_save=False)
  ppo_dir = workdir_lib.Workdir(workdir).checkpoints
  sft_dir = workdir_lib.Workdir(workdir).sft
  for directory, optim, with_critic, what in (
    (ppo_dir, exp.optim, exp.uses_critic, "PPO iteration"),
    (sft_dir, sft_lib.sft_optim(exp), False, "SFT step"),
  ):
    if not directory.is_dir():
      continue
    with ckpt_lib.Checkpointer(directory, cfg, read_only=True) as ckpt:
      step = ckpt.latest_step()
      if step is None:
        continue
      actor, critic = _abstract_states(exp, optim, mesh, rules)
      try:
        restored = ckpt.restore(
          step,
          actor=actor,
          critic=critic if with_critic else None,
          rng=transfers.key(0),
        )
      except ValueError as e:
        raise exp_lib.SetupError(
          f"{directory} step {step} is not a checkpoint of the model of"
          f" {train_config!r} ({_first_line(e)}); pass the workdir of a run"
          " of that config, or the config its run was trained with."
        ) from None
      return restored.actor.params, f"{what} {step} ({directory})"
  name, colon, presets = train_config.partition(":")
  flag = f"configs/{name}.py{colon}{presets}"
  raise CheckpointNotFoundError(
    f"{workdir} has no PPO ({ppo_dir}) or SFT ({sft_dir}) checkpoint; train"
    f" first: python -m codeagent_rl.main --config={flag}"
    f" --workdir={workdir}"
  )


def _first_line(error: BaseException) -> str:
  text = str(error).strip()
  line = text.splitlines()[0] if text else type(error).__name__
  return line if len(line) <= 300 else line[:297] + "..."


def _abstract_states(exp, optim, mesh, rules):
  """(actor, critic) train states as ShapeDtypeStructs with shardings."""
  with sharding.axis_rules(mesh, rules):
    states = jax.eval_shape(
      lambda: state_lib.create_train_states(
        exp.model,
        optim,
        mesh,
        rules,
        jax.random.key(0),
        critic_cfg=exp.critic_model,
      )
    )
  shardings = state_lib.train_state_shardings(
    exp.model, optim, mesh, rules, exp.critic_model
  )
  return tuple(
    _with_shardings(a, sh) for a, sh in zip(states, shardings, strict=True)
  )


def _with_shardings(abstract, shardings):
  return jax.tree.map(
    lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
    abstract,
    shardings,
  )


def validate_config(
  config: ml_collections.ConfigDict,
) -> tuple[HumanEvalConfig, exp_lib.Experiment]:
  """The evaluation job's settings and its run's experiment.

  Raises:
    ValueError: naming the first bad field.
  """
  he_cfg = train_config.section(HumanEvalConfig, config, "humaneval")
  train_cfg = ml_collections.ConfigDict(config.to_dict())
  del train_cfg["humaneval"]
  train_cfg.job = "train"
  return he_cfg, exp_lib.Experiment.from_config(train_cfg)


def evaluate_checkpoint(
  he_cfg: HumanEvalConfig,
  exp: exp_lib.Experiment,
  workdir: str | os.PathLike[str],
  sandbox: sandbox_config_lib.SandboxConfig,
  *,
  console=print,
) -> dict[str, Any]:
  """Runs the evaluation job; returns (and writes) its result.

  Args:
    he_cfg: the job's settings (`validate_config`).
    exp: the experiment of the run evaluated (`validate_config`).
    workdir: that run's workdir; the result is written there.
    sandbox: the machine's sandbox settings; the job limits are the run's
      (`exp.sandbox`), those its rewards were measured under.
    console: where the result lines go.
  """
  sandbox = exp.sandbox.apply(sandbox)
  workdir = pathlib.Path(workdir)
  mesh, rules = exp.make_mesh()
  params, what = restore_actor_params(
    exp, workdir, mesh, rules, he_cfg.train_config
  )
  if distributed.is_primary():
    provenance.record_run(workdir_lib.Workdir(workdir).environment, console)
    console(f"evaluating {what} on HumanEval")
  with pools.open_pool(sandbox) as pool:
    tasks = _tasks(he_cfg, workdir, pool)
    env = code_env.CodeEnv(pool, exp.conversation, exp.env)
    evaluator = eval_lib.Evaluator(
      exp, env, tasks, batch_size=he_cfg.batch_size
    )
    scalars = evaluator(params, keys.eval_job(exp.seed))
  result = {
    "checkpoint": what,
    "num_tasks": len(tasks),
    **{k.replace("eval/", "humaneval/"): v for k, v in scalars.items()},
  }
  path = workdir_lib.Workdir(workdir).humaneval_result
  if not distributed.is_primary():  # process 0 writes and prints
    return result
  path.write_text(json.dumps(result, indent=1, sort_keys=True))
  for mode in exp.eval.modes:
    console(
      f"HumanEval ({len(tasks)} problems, {mode}): pass@1"
      f" {result[f'humaneval/{mode}/pass_a']:.3f}, with held-out suite B"
      f" {result[f'humaneval/{mode}/pass_ab']:.3f}"
    )
  logging.info("wrote %s", path)
  return result
