"""The jobs: train (SFT, evaluation, PPO, evaluation, summary) and evaluate.

`job_from_config(config)` validates a config once and says which job it is;
`run_job(job, workdir, sandbox)` runs it. `python -m codeagent_rl.main`
does both, a notebook can too. The workdir's layout is `workdir.py`'s.

Running the same train job again in the same workdir resumes: the SFT
checkpoint and its evaluation are reused, PPO continues from its newest
checkpoint with the same data order and randomness. Models made from other
inputs than the run's stop it before anything is written (`check_inputs`,
`fingerprint.py`).

With several processes (`parallel/distributed.py`) every process runs the
job on one workdir that all of them see (a shared file system, as orbax
needs for checkpoints). They compute the same metrics and evaluations;
process 0 alone writes the workdir's files and prints, while checkpoints
are saved by all together. A process reads a file before any process can
write it in this run (each write follows a step taken together), so all
make the same decisions (resume, reuse of the SFT evaluation).
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

from codeagent_rl import provenance
from codeagent_rl import samples as samples_lib
from codeagent_rl.anticheat import pipeline
from codeagent_rl.parallel import checkpoint as ckpt_lib
from codeagent_rl.parallel import distributed
from codeagent_rl.parallel import transfers
from codeagent_rl.rollout import agent_loop
from codeagent_rl.sandbox import config as sandbox_config_lib
from codeagent_rl.sandbox import pools
from codeagent_rl.tasks import schema
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import eval_job
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import fingerprint as fingerprint_lib
from codeagent_rl.train import keys
from codeagent_rl.train import metrics as metrics_lib
from codeagent_rl.train import ppo as ppo_lib
from codeagent_rl.train import ppo_loop
from codeagent_rl.train import sft as sft_lib
from codeagent_rl.train import summary as summary_lib
from codeagent_rl.train import task_audit
from codeagent_rl.train import workdir as workdir_lib


def _write_json(path: pathlib.Path, obj: Any) -> None:
  tmp = path.with_suffix(path.suffix + ".tmp")
  tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str))
  os.replace(tmp, path)


# Bumped when what an evaluation counts as solved changes (2: episodes that
# stage 1 rejects are unsolved; numbers compared by the expected type).
_EVAL_MEASURE = 2


def _sft_eval_key(exp: exp_lib.Experiment) -> dict[str, Any]:
  """What the saved SFT evaluation depends on.

  The SFT length, the held-out tasks (their generator, seed and number,
  or their file), the evaluation settings, the anti-cheat (its config and
  the weights file's contents: rejected episodes count as unsolved) and
  `_EVAL_MEASURE`.
  """
  weights = pathlib.Path(exp.anticheat.weights_path).read_bytes()
  key = {
    "sft_steps": exp.sft.steps,
    "held_out": {
      "generator": exp.data.generator,
      "data_seed": exp.data_seed,
      "num_eval_tasks": exp.data.num_eval_tasks,
      "eval_tasks": exp.data.eval_tasks,
    },
    "eval": dataclasses.asdict(exp.eval),
    "anticheat": dataclasses.asdict(exp.anticheat),
    "weights_sha256": hashlib.sha256(weights).hexdigest(),
    "measure": _EVAL_MEASURE,
  }
  if exp.data.suite_a != "strong" or exp.data.oracle_tests:
    # Other suites, or oracle metrics, on the same held-out prompts.
    key["held_out"]["suite_a"] = exp.data.suite_a
    key["held_out"]["oracle_tests"] = exp.data.oracle_tests
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


def _latest_step(directory: pathlib.Path) -> int | None:
  """The newest checkpoint step in `directory` (None without one)."""
  if not directory.is_dir():
    return None
  cfg = ckpt_lib.CheckpointConfig(keep=1, save_every=1, async_save=False)
  with ckpt_lib.Checkpointer(directory, cfg, read_only=True) as ckpt:
    return ckpt.latest_step()


def saved_state(workdir: str | os.PathLike[str]) -> str:
  """What a resume of `workdir` starts from, for a person (one phrase)."""
  paths = workdir_lib.Workdir(workdir)
  try:
    ppo = _latest_step(paths.checkpoints)
    sft = _latest_step(paths.sft)
  except Exception:  # noqa: BLE001 - a damaged directory: say so, go on
    return f"the checkpoints in {paths.root} could not be read"
  if ppo:
    return f"PPO checkpoint of iteration {ppo} in {paths.checkpoints}"
  if sft is not None:
    return f"SFT checkpoint of step {sft} in {paths.sft}"
  return f"no checkpoint yet in {paths.root}"


def _check_checkpoints(
  paths: workdir_lib.Workdir, sft_steps: int, ppo_done: int | None
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
  sft_done = _latest_step(paths.sft)
  sft_lib.check_not_past_steps(paths.sft, sft_done, sft_steps)
  if ppo_done and sft_done is not None and sft_done < sft_steps:
    raise exp_lib.SetupError(
      f"{paths.checkpoints} holds PPO checkpoints (to iteration"
      f" {ppo_done}) trained from the {sft_done}-step SFT checkpoint in"
      f" {paths.sft}, but config.sft.steps={sft_steps} would"
      " train SFT further first; nothing was trained or deleted. Set"
      f" --config.sft.steps={sft_done} to resume PPO, or start PPO again from"
      " the longer SFT in a fresh --workdir (copy the sft/ folder and"
      " sft_data.npz into it to keep the SFT done so far)."
    )


@dataclasses.dataclass(frozen=True)
class Resume:
  """What a start does to the workdir before training (`check_inputs`).

  Attributes:
    records: fingerprint files to write (path -> record).
    set_aside: workdir entries to move to `replaced/N/` (a retrain).
    notes: console lines saying what was decided.
  """

  records: dict[pathlib.Path, dict[str, Any]]
  set_aside: tuple[str, ...] = ()
  notes: tuple[str, ...] = ()


def _read_config(paths: workdir_lib.Workdir) -> dict[str, Any] | None:
  try:
    return json.loads(paths.config.read_text())
  except (OSError, ValueError):
    return None


def _listed(diffs: list[str], limit: int = 6) -> str:
  more = len(diffs) - limit
  return "; ".join(diffs[:limit]) + (f" (and {more} more)" if more > 0 else "")


def _stale_sft(
  exp: exp_lib.Experiment,
  paths: workdir_lib.Workdir,
  record: dict[str, Any],
) -> tuple[str | None, str | None]:
  """(why the workdir's SFT model is stale or None, a note on adopting it)."""
  saved = fingerprint_lib.read(paths.sft_fingerprint)
  if saved is not None:
    diffs = fingerprint_lib.differences(saved, record)
    return (f"its inputs changed: {_listed(diffs)}" if diffs else None), None
  # Made before records were kept: config.json is the config of the run
  # that last trained here.
  diffs = fingerprint_lib.legacy_differences(_read_config(paths), exp)
  if diffs is None:
    return (
      f"what it was made from is unknown (no {paths.sft_fingerprint.name},"
      f" no readable {paths.config.name})"
    ), None
  if diffs:
    return (f"its config.json differs on SFT's inputs: {_listed(diffs)}"), None
  return None, (
    f"{paths.sft_fingerprint.name} is missing (a workdir from before it was"
    f" kept); {paths.config.name} agrees with this config on SFT's inputs,"
    " so the SFT model is kept and its inputs are recorded now."
  )


def check_inputs(
  exp: exp_lib.Experiment,
  paths: workdir_lib.Workdir,
  task_sets: data_lib.TaskSets,
) -> Resume:
  """Checks that the workdir's models were made from this run's inputs.

  The SFT model (its checkpoint, or the PPO checkpoints trained from it
  when there is none) and a value-pretrained critic (PPO checkpoint step
  0) are compared with what this run would make them from
  (`fingerprint.py`). Nothing is written here.

  Returns:
    What to write and set aside before training.

  Raises:
    SetupError: a model was made from other inputs and its retrain flag is
      off; the message names what changed and the flag.
  """
  sft_record = fingerprint_lib.sft_inputs(exp, task_sets)
  ppo_latest = _latest_step(paths.checkpoints)
  trained = _latest_step(paths.sft) is not None or ppo_latest is not None
  records = {paths.sft_fingerprint: sft_record}
  notes, stale = [], ()
  why, note = _stale_sft(exp, paths, sft_record) if trained else (None, None)
  if note:
    notes.append(note)
  if why is not None:
    if not exp.sft.retrain:
      held = (
        f"{paths.sft} holds an SFT model"
        if _latest_step(paths.sft) is not None
        else f"{paths.checkpoints} holds PPO checkpoints of a starting model"
      )
      raise exp_lib.SetupError(
        f"{held} that this run would not make: {why}. Nothing was trained"
        " or deleted. Pass --config.sft.retrain=True to train SFT and PPO"
        f" again (the old models are set aside in {paths.replaced}/), or"
        " run with the settings they were made with."
      )
    stale = workdir_lib.SFT_OUTPUTS
    notes.append(f"SFT: retraining ({why}); the old model is set aside.")
    ppo_latest = None
  if exp.uses_critic and exp.ppo.value_pretrain_iterations:
    value_record = fingerprint_lib.value_pretrain_inputs(exp, sft_record)
    if ppo_latest == 0:  # only the pre-trained critic: PPO starts from it
      why = _stale_value(paths, value_record)
      if why is not None and not exp.ppo.value_pretrain_retrain:
        raise exp_lib.SetupError(
          f"{paths.checkpoints} holds a critic pre-trained (step 0) with"
          f" other settings than this run's: {why}. Nothing was trained or"
          " deleted. Pass --config.ppo.value_pretrain_retrain=True to"
          f" pre-train it again (the old one is set aside in {paths.replaced}"
          "/), or run with the settings it was made with."
        )
      if why is not None:
        stale = workdir_lib.PPO_OUTPUTS
        notes.append(f"value pre-training: again ({why}).")
        ppo_latest = None
    if ppo_latest is None:
      records[paths.value_pretrain_fingerprint] = value_record
  return Resume(records, stale, tuple(notes))


def _stale_value(
  paths: workdir_lib.Workdir, record: dict[str, Any]
) -> str | None:
  """Why the pre-trained critic is stale, or None."""
  saved = fingerprint_lib.read(paths.value_pretrain_fingerprint)
  if saved is None:
    return (
      f"what it was made from is unknown (no"
      f" {paths.value_pretrain_fingerprint.name})"
    )
  diffs = fingerprint_lib.differences(saved, record)
  if diffs:
    return f"its inputs changed: {_listed(diffs)}"
  return None


def set_aside(paths: workdir_lib.Workdir, names: tuple[str, ...]) -> None:
  """Moves the workdir entries `names` (those present) into `replaced/N/`.

  N is the first number not taken: nothing earlier is overwritten.
  """
  present = [n for n in names if (paths.root / n).exists()]
  if not present:
    return
  paths.replaced.mkdir(exist_ok=True)
  taken = {p.name for p in paths.replaced.iterdir()}
  n = 1
  while str(n) in taken:
    n += 1
  dest = paths.replaced / str(n)
  dest.mkdir()
  for name in present:
    os.replace(paths.root / name, dest / name)
  logging.info("moved %s to %s", present, dest)


def train_and_evaluate(
  exp: exp_lib.Experiment,
  workdir: str | os.PathLike[str],
  sandbox: sandbox_config_lib.SandboxConfig,
  *,
  stop: ppo_lib.Stop | None = None,
  iterations: int | None = None,
  console=print,
) -> dict[str, Any]:
  """Runs (or resumes) the experiment; returns the summary dict.

  Args:
    exp: a validated experiment (`job_from_config(config).exp`).
    workdir: the run directory (created if missing).
    sandbox: the machine's sandbox settings (backend, pool size, runsc);
      the job limits are the experiment's (`exp.sandbox`).
    stop: a `ppo.Stop` to end PPO early (tests; SIGTERM sets one too).
    iterations: run PPO only up to this many iterations (tests).
    console: where progress lines and the summary go.

  Returns:
    The summary: pass@1 of the SFT model and the final one, paths, times.
  """
  start = time.perf_counter()
  exp.check_process_count(jax.process_count())
  primary = distributed.is_primary()
  if not primary:  # process 0 prints what every process computes
    console = _silent
  sandbox = exp.sandbox.apply(sandbox)
  paths = workdir_lib.Workdir(workdir)
  if not exp.sft.retrain:  # a retrain sets a mismatched SFT aside instead
    _check_checkpoints(paths, exp.sft.steps, _latest_step(paths.checkpoints))
  task_sets = data_lib.make_task_sets(exp.data, exp.data_seed)
  # Task files: bad tasks dropped (or the run stopped) before any write.
  audited = task_audit.audit_files(exp, paths, task_sets, sandbox)
  task_sets = audited.task_sets
  # Before anything is written: refuses models made from other inputs.
  resume = check_inputs(exp, paths, task_sets)
  paths.root.mkdir(parents=True, exist_ok=True)
  if primary:
    provenance.record_run(paths.environment, console)
    for line in audited.lines:
      console(line)
    if audited.record is not None:
      _write_json(paths.task_audit, audited.record)
    for line in resume.notes:
      console(line)
    set_aside(paths, resume.set_aside)
    for path, record in resume.records.items():
      fingerprint_lib.write(path, record)
    _write_json(paths.config, exp_lib.to_dict(exp))
  distributed.barrier("workdir prepared")  # what the others read next
  done_before = _latest_step(paths.checkpoints) or 0  # SFT leaves it alone
  mesh, rules = exp.make_mesh()
  if primary:
    # The held-out tasks beside the evaluation's samples: graded again with
    # `python -m codeagent_rl.grade --tasks=... --samples=...`.
    schema.write_tasks(paths.eval_tasks, task_sets.eval)
  fmt = exp.conversation
  critic = ""
  if exp.uses_critic and exp.critic_checkpoint_dir is not None:
    critic = (
      f" (critic {exp.critic_model.num_params():,} params from"
      f" {exp.critic_checkpoint_dir})"
    )
  console(
    f"codeagent_rl: preset {exp.preset}, {exp.model.num_params():,} params"
    f"{critic}, {len(task_sets.train)} train / {len(task_sets.eval)} held-out"
    " tasks,"
    f" sandbox {sandbox.describe()}, workdir {paths.root}"
  )
  anticheat = pipeline.AntiCheat.from_config(exp.anticheat)
  with pools.open_pool(sandbox) as pool:
    # Demonstrations and evaluation run without the pre-submit gate: every
    # submission runs, and the evaluation counts the ones stage 1 rejects
    # as unsolved afterwards.
    generator = exp.data.generator
    env = data_lib.make_env(pool, fmt, exp.env, generator)
    rl_env = data_lib.make_env(
      pool, fmt, exp.env, generator, pre_submit=anticheat.pre_submit
    )
    arrays = None
    if exp.sft.steps:
      arrays = data_lib.sft_arrays(
        env,
        task_sets,
        paths.root,
        format_key=fingerprint_lib.tokenizer_digest(exp),
      )
      report = data_lib.check_isolation(
        exp.data.isolation, arrays, fmt, task_sets, paths.root
      )
      if report is not None:
        console(report.summary())
        if report.leaks:  # "warn": "error" raised before
          console("\n".join(["WARNING: leaking tasks:", *report.table()]))
    t0 = time.perf_counter()
    sft_params, sft_metrics = sft_lib.run_sft(
      exp, arrays, paths.root, mesh, rules, console=console
    )
    sft_s = time.perf_counter() - t0
    loss = sft_metrics.get("sft/loss")  # absent without SFT steps
    console(
      f"SFT: {exp.sft.steps} steps,"
      f" loss {'n/a' if loss is None else f'{float(loss):.4f}'} ({sft_s:.0f} s)"
    )
    evaluator = eval_lib.Evaluator.of_run(exp, env, task_sets.eval)
    key = _sft_eval_key(exp)
    sft_eval = _saved_sft_eval(paths.eval_sft, key)
    if sft_eval is None:
      sft_eval = evaluator(sft_params, keys.sft_eval(exp.seed))
      if primary:
        _write_json(
          paths.eval_sft,
          {"key": key, "eval": sft_eval, "per_task": evaluator.last_per_task},
        )
    console("SFT held-out: " + summary_lib.eval_line(sft_eval))
    cache_len = agent_loop.cache_len_for(
      exp.env, data_lib.longest_prompt(env, task_sets.train), fmt
    )
    learner = ppo_lib.Learner(
      exp,
      mesh,
      rules,
      ref_params=sft_params,
      env=rl_env,
      anticheat=anticheat,
      cache_len=cache_len,
    )
    if exp.ppo.reference_on_host:
      # Only the host copy stays: PPO's actor is made from it.
      sft_params = learner.ref_params
    writer = (
      metrics_lib.MetricsWriter(str(paths.root), start_iteration=done_before)
      if primary
      else metrics_lib.NullWriter()
    )
    with writer:
      result = ppo_loop.run_ppo(
        learner,
        task_sets.train,
        sft_params,
        paths.root,
        evaluator=evaluator,
        writer=writer,
        stop=stop,
        iterations=iterations,
        console=console,
      )
  final_eval = result.last_eval
  if final_eval and primary:
    _write_json(
      paths.eval_final,
      {
        "iteration": result.iterations_done,
        "per_task": evaluator.last_per_task,
      },
    )
    samples_lib.write_samples(
      paths.eval_final_samples,
      (
        samples_lib.episode_line(episode, mode=mode)
        for mode, episodes in evaluator.last_episodes.items()
        for episode in episodes
      ),
    )
  # The others read what process 0 wrote (metrics, evaluations).
  distributed.barrier("final evaluation written")
  records = ppo_loop.writer_history(paths.root)
  if not final_eval:  # resumed a finished run: nothing was evaluated
    final_eval = summary_lib.last_eval(records)
  pairs = summary_lib.paired(
    exp,
    summary_lib.read_per_task(paths.eval_sft),
    summary_lib.read_per_task(paths.eval_final),
  )
  summary = summary_lib.make(
    exp,
    paths,
    sft_eval,
    final_eval,
    result.iterations_done,
    result.stopped_early,
    pairs,
    records,
  )
  summary["elapsed_s"] = round(time.perf_counter() - start, 1)
  if primary:
    _write_json(paths.summary, summary)
  console(summary["table"])
  return summary


def _silent(line: str) -> None:
  del line


JOBS = ("train", "evaluate")


@dataclasses.dataclass(frozen=True)
class Job:
  """A validated job: what `config.job` names and its settings.

  Attributes:
    kind: "train" or "evaluate".
    exp: the experiment (for "evaluate": the one of the run evaluated).
    humaneval: the evaluation job's settings (None for "train").
  """

  kind: str
  exp: exp_lib.Experiment
  humaneval: eval_job.HumanEvalConfig | None = None


def job_from_config(config: ml_collections.ConfigDict) -> Job:
  """Validates `config` once; the job it describes.

  Raises:
    ValueError: `config.job` is not one of `JOBS`, or a field is bad (the
      message names it).
  """
  kind = config.job if "job" in config else None
  if kind == "train":
    return Job(kind, exp_lib.Experiment.from_config(config))
  if kind == "evaluate":
    humaneval, exp = eval_job.validate_config(config)
    return Job(kind, exp, humaneval)
  raise ValueError(f"config.job={kind!r}: expected one of {JOBS}.")


def run_job(
  job: Job,
  workdir: str | os.PathLike[str],
  sandbox: sandbox_config_lib.SandboxConfig,
) -> dict[str, Any]:
  """Runs a validated job: `train_and_evaluate` or the evaluation job.

  The job, in all its threads, refuses implicit transfers
  (`transfers.disallow_implicit`): every copy between host and devices is
  an explicit `device_put` / `device_get`, so a copy that would stall the
  devices on every step cannot slip in unseen.
  """
  with transfers.disallow_implicit():
    if job.kind == "train":
      return train_and_evaluate(job.exp, workdir, sandbox)
    return eval_job.evaluate_checkpoint(
      job.humaneval, job.exp, workdir, sandbox
    )
