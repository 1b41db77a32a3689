"""Task sets and SFT demonstrations for the trainer (host side).

The train and held-out task sets are generated deterministically from the
config (`tasks/synthetic.py`), so a resumed run sees the same tasks. The
demonstration plans are rendered into token trajectories by the real
environment (`rollout/demos.render`: every `<run>` observation is what the
sandbox said; a final `<submit>` ends the episode without being graded, as
nothing of its grade enters the tokens) and cached in the workdir as
`sft_data.npz`, with a fingerprint of everything they depend on; a stale or
damaged cache is rebuilt, never trusted.

PPO prompts are drawn by `iteration_prompts`: a pure function of the seed and
the iteration, so data order survives a restart without saving a cursor.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Any

from absl import logging
import numpy as np

from codeagent_rl.envs import code_env
from codeagent_rl.envs import repo_env
from codeagent_rl.parallel import distributed
from codeagent_rl.rollout import demos
from codeagent_rl.rollout import repo_demos
from codeagent_rl.tasks import isolation
from codeagent_rl.tasks import probes
from codeagent_rl.tasks import repo_gen
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic
from codeagent_rl.train import config as train_config
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import workdir as workdir_lib

# Demonstrations rendered per environment batch.
_RENDER_CHUNK = 64


@dataclasses.dataclass(frozen=True)
class TaskSets:
  """The experiment's tasks.

  Attributes:
    train: train-split tasks (PPO prompts).
    eval: held-out test-split tasks (disjoint parameters).
    plans: demonstration plans of the train tasks (`repo_demos.RepoPlan`s
      for repository tasks).
  """

  train: tuple[schema.Task, ...]
  eval: tuple[schema.Task, ...]
  plans: tuple[synthetic.DemoPlan | repo_demos.RepoPlan, ...]


class TaskFileError(exp_lib.SetupError):
  """A task file of `config.data` cannot be used; the message says why."""


def _read_split(path: str, field: str) -> list[schema.Task]:
  try:
    tasks = schema.read_tasks(path, schema.PROGRAM_KINDS)
  except (schema.TaskFormatError, OSError) as e:
    raise TaskFileError(f"config.data.{field}: {e}") from None
  if not tasks:
    raise TaskFileError(f"config.data.{field}={path!r} holds no tasks.")
  return tasks


def _read_demonstrations(
  path: str, train: Sequence[schema.Task]
) -> list[synthetic.DemoPlan]:
  try:
    plans = synthetic.read_demo_plans(path)
  except (synthetic.DemoFormatError, OSError) as e:
    raise TaskFileError(f"config.data.demonstrations: {e}") from None
  known = {t.task_id for t in train}
  unknown = sorted({p.task_id for p in plans} - known)
  if unknown:
    raise TaskFileError(
      f"config.data.demonstrations={path!r}: {len(unknown)} plans name"
      f" tasks that are not train tasks (e.g. {unknown[:3]})."
    )
  if not plans:
    raise TaskFileError(f"config.data.demonstrations={path!r} holds none.")
  return plans


def _generate(
  data: train_config.DataConfig,
  seed: int,
  splits: Sequence[str],
  public: Sequence[schema.Task],
) -> dict[str, tuple[list[schema.Task], list]]:
  """The (tasks, plans) of each split named, by `data.generator`.

  The synthetic splits come from one call, so that no hidden or held-out
  test of either equals a visible test of either, or of `public` (the
  tasks read from a file); the probe tasks are generated as they are.
  """
  try:
    if data.generator == "probes":
      return {s: probes.generate(data.probes(s, seed)) for s in splits}
    if data.generator == "repo":
      return {s: _repo_split(data, s, seed) for s in splits}
    sets = synthetic.generate_sets(
      [data.synthetic(s, seed) for s in splits], public=public
    )
  except synthetic.GenerationError as e:
    # E.g. a task file's visible tests leave a family too few fresh inputs.
    raise TaskFileError(
      f"config.data: the {data.generator} generator could not make the"
      f" {' and '.join(splits)} tasks: {e} Ask for fewer tasks"
      " (num_train_tasks, num_eval_tasks), other families or another"
      " data.seed."
    ) from None
  return dict(zip(splits, sets, strict=True))


def make_task_sets(data: train_config.DataConfig, seed: int) -> TaskSets:
  """The train tasks with their plans, and the held-out tasks.

  Each split is read from its task file (`data.train_tasks`,
  `data.eval_tasks`) when one is named, else generated (both splits in
  one call, `_generate`); the demonstration plans come from
  `data.demonstrations` when named, else from the generator (tasks from a
  file have none).

  Raises:
    TaskFileError: the generator cannot make the tasks asked for, or a task
      or demonstrations file is unreadable or malformed
      (naming the file, line and field) or empty, the splits share task
      ids, or a demonstration names a task that is not a train task.
  """
  files = {"train": data.train_tasks, "test": data.eval_tasks}
  fields = {"train": "train_tasks", "test": "eval_tasks"}
  read = {
    split: _read_split(path, fields[split])
    for split, path in files.items()
    if path is not None
  }
  made = _generate(
    data,
    seed,
    [split for split in files if split not in read],
    [t for tasks in read.values() for t in tasks],
  )
  train, plans = (read["train"], []) if "train" in read else made["train"]
  held_out = read["test"] if "test" in read else made["test"][0]
  if data.demonstrations is not None:
    plans = _read_demonstrations(data.demonstrations, train)
  shared = sorted({t.task_id for t in train} & {t.task_id for t in held_out})
  if shared:
    raise TaskFileError(
      f"config.data: {len(shared)} task ids are in both the train and the"
      f" held-out tasks (e.g. {shared[:3]}); a held-out task must not be"
      " trained on."
    )
  return TaskSets(tuple(train), tuple(held_out), tuple(plans))


# Salts of the prompt draws: PPO iterations, value pre-training rounds,
# dynamic sampling's extra rounds.
PPO_PROMPTS = 0x5EED
VALUE_PRETRAIN_PROMPTS = 0x7A1E
# Dynamic sampling's round r >= 1 of an iteration draws with this + r.
DYNAMIC_SAMPLING_PROMPTS = 0xD5A0


def iteration_prompts(
  tasks: Sequence[schema.Task],
  seed: int,
  iteration: int,
  num_prompts: int,
  salt: int = PPO_PROMPTS,
) -> list[schema.Task]:
  """The prompts of one PPO iteration (or value pre-training round).

  Drawn without replacement within an iteration (with replacement across
  iterations), from a generator seeded by (seed, iteration, salt) only, so
  a resumed run draws the same prompts.
  """
  rng = np.random.default_rng([seed, iteration, salt])
  picks = rng.choice(len(tasks), size=num_prompts, replace=False)
  return [tasks[index] for index in picks.tolist()]


def _repo_split(
  data: train_config.DataConfig, split: str, seed: int
) -> tuple[list[schema.Task], list[repo_demos.RepoPlan]]:
  """A repo split's tasks (and, for train, one plan per task).

  The splits draw from seeds of their own (2 * seed and 2 * seed + 1), so
  their packages and bugs are drawn apart.
  """
  train = split == "train"
  num = data.num_train_tasks if train else data.num_eval_tasks
  tasks = repo_gen.generate(num, 2 * seed + (0 if train else 1), data.repo())
  if not train:
    return tasks, []
  return tasks, repo_demos.plans_for(
    tasks, seed, data.repo_weights(), data.repo_edit_tool
  )


def _plan_actions(plan, env) -> Sequence:
  """What `demos.render` plays of a plan in `env`'s action syntax."""
  if isinstance(plan, repo_demos.RepoPlan):
    return [repo_demos.action_text(env.syntax, n, a) for n, a in plan.calls]
  return plan.actions


def make_env(pool, fmt, config, generator: str, **kwargs):
  """The environment of a run's tasks: `RepoEnv` for the "repo" generator.

  `kwargs` go to the constructor (`judge_config`, `pre_submit`, ...).
  """
  env_class = repo_env.RepoEnv if generator == "repo" else code_env.CodeEnv
  return env_class(pool, fmt, config, **kwargs)


def longest_prompt(env: code_env.CodeEnv, tasks: Sequence[schema.Task]) -> int:
  """Tokens in the longest prompt of `tasks` (sizes the rollout KV cache)."""
  return max(len(env.reset(task).prompt_ids) for task in tasks)


def _fingerprint(
  plans: Sequence[synthetic.DemoPlan], env: code_env.CodeEnv, format_key: str
) -> str:
  """Hash of the plans, the env budgets and the conversation format."""
  h = hashlib.sha256()
  h.update(json.dumps(dataclasses.asdict(env.config), sort_keys=True).encode())
  h.update(f"{type(env.format).__name__}:{env.format.vocab_size}".encode())
  h.update(format_key.encode())
  for plan in plans:
    h.update(json.dumps([plan.task_id, plan.kind, plan.actions]).encode())
  return h.hexdigest()


def _load_cache(path: pathlib.Path, fingerprint: str) -> dict | None:
  if not path.exists():
    return None
  try:
    with np.load(path, allow_pickle=False) as f:
      if str(f["fingerprint"]) != fingerprint:
        logging.info("%s is stale (other config); rebuilding it.", path)
        return None
      return {k: f[k] for k in ("tokens", "valid", "trainable", "kinds")}
  except (OSError, KeyError, ValueError) as e:
    logging.warning("%s is unreadable (%s); rebuilding it.", path, e)
    return None


def _not_graded(state: code_env.EpisodeState, code: str) -> str:
  del state, code
  return "demonstration: not graded"


def sft_arrays(
  env: code_env.CodeEnv,
  task_sets: TaskSets,
  workdir: str | os.PathLike[str],
  *,
  format_key: str = "",
) -> dict[str, np.ndarray]:
  """Rendered demonstrations: tokens, valid, trainable [N, T] and kinds [N].

  They are cached in the workdir under a hash of the plans, the env budgets,
  the format and `format_key` (what else tells two tokenizers of one size
  apart: `fingerprint.tokenizer_digest`).

  Plans that a budget cut before their `<submit>` are dropped (their last
  action would teach the model to stop mid-code); how many is logged.
  `<run>` actions execute in `env`'s pool (their observations are part of
  the trajectory); submissions are not executed: no token depends on their
  grade, and grading every demonstration would cost most of the rendering.

  Raises:
    ValueError: no plan fits the environment's budgets.
  """
  path = workdir_lib.Workdir(workdir).sft_data
  fingerprint = _fingerprint(task_sets.plans, env, format_key)
  cached = _load_cache(path, fingerprint)
  if cached is not None:
    return cached
  by_id = {t.task_id: t for t in task_sets.train}
  env = type(env)(
    env.pool,
    env.format,
    env.config,
    env.judge_config,
    pre_submit=_not_graded,
  )
  # With several processes each renders its share, in its own sandbox
  # pool, and all take every share (in order: the rows one process makes).
  plans = task_sets.plans
  first, last = distributed.even_share(len(plans))
  parts = distributed.gather(_render(env, by_id, plans[first:last]))
  tokens, valid, trainable, kinds = (
    [r for p in parts for r in p[k]] for k in range(4)
  )
  dropped = sum(p[4] for p in parts)
  if not tokens:
    raise ValueError(
      f"none of the {len(plans)} demonstrations fits the env budgets"
      f" ({env.config}); raise env.max_total_tokens or max_tokens_per_turn."
    )
  logging.info(
    "rendered %d demonstrations (%d cut by a budget and dropped)",
    len(tokens),
    dropped,
  )
  arrays = {
    "tokens": np.stack(tokens).astype(np.int32),
    "valid": np.stack(valid),
    "trainable": np.stack(trainable),
    "kinds": np.asarray(kinds),
  }
  if distributed.is_primary():
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, fingerprint=np.asarray(fingerprint), **arrays)
    os.replace(tmp, path)
  return arrays


def check_isolation(
  mode: str,
  arrays: dict[str, np.ndarray],
  fmt: Any,
  task_sets: TaskSets,
  workdir: str | os.PathLike[str],
) -> isolation.Report | None:
  """The data-isolation check of the rendered demonstrations, before SFT.

  Looks for the hidden and held-out tests of every train and held-out task
  in the text SFT trains on (each demonstration decoded: prompt, actions
  and observations), exactly and by n-gram containment
  (`tasks/isolation.py`). Reference solutions are not checked: the
  demonstrations of a train task submit its reference by design. The
  report goes to the workdir's isolation.json (process 0 writes it).

  Args:
    mode: `config.data.isolation`: "error", "warn" or "off".
    arrays: `sft_arrays`' output.
    fmt: the conversation format (`decode`).
    task_sets: the run's tasks.
    workdir: the run directory.

  Returns:
    The report, or None with mode "off".

  Raises:
    IsolationError: mode "error" and a task's tests appear in the data;
      the message names the tasks and the report.
  """
  if mode == "off":
    return None
  texts = [
    fmt.decode(np.asarray(row)[np.asarray(valid, bool)].tolist())
    for row, valid in zip(arrays["tokens"], arrays["valid"], strict=True)
  ]
  corpus = isolation.Corpus.from_texts(texts, name="the SFT demonstrations")
  tasks = [*task_sets.train, *task_sets.eval]
  public, skipped = _public_tests(tasks)
  report = isolation.check(tasks, corpus, check_reference=False, public=public)
  path = workdir_lib.Workdir(workdir).isolation
  if distributed.is_primary():
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    saved = {**report.to_json(), "public_tests_not_checked": skipped}
    tmp.write_text(json.dumps(saved, indent=1) + "\n")
    os.replace(tmp, path)
  if report.leaks and mode == "error":
    ids = [r.task_id for r in report.leaks]
    shown = ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else "")
    raise IsolationError(
      f"{report.summary()}: the hidden or held-out tests of {len(ids)}"
      f" task(s) ({shown}) appear in the SFT data; see {path}. Remove them"
      " from the demonstrations, or set --config.data.isolation=warn to"
      " train anyway."
    )
  return report


def _public_tests(tasks: Sequence[schema.Task]) -> tuple[frozenset[str], int]:
  """Assertions some prompt shows, and how many hidden/held-out tests are one.

  A test whose assertion (`f(args) == expected`) is a visible test of any
  task of the run is public by the task set's design: the demonstrations
  of that task show it, which is no leak. The synthetic generator leaves
  none (`synthetic.generate_sets` replaces them: 37 of 1759 tests at the
  smoke preset, 10,657 of 34,385 at the default); tasks from files may
  have some.
  """
  public = frozenset(
    isolation.assertion_text(t.entry_point, v)
    for t in tasks
    if t.kind == "function"
    for v in t.visible_tests
  )
  count = sum(
    isolation.assertion_text(t.entry_point, x) in public
    for t in tasks
    if t.kind == "function"
    for name in isolation.CHECKED_SUITES
    for x in getattr(t, name)
  )
  return public, count


class IsolationError(exp_lib.SetupError):
  """Hidden or held-out tests appear in the SFT data (`check_isolation`)."""


def _render(
  env: code_env.CodeEnv,
  by_id: dict[str, schema.Task],
  plans: Sequence[synthetic.DemoPlan],
) -> tuple[list, list, list, list, int]:
  """(tokens, valid, trainable, kinds) rows of the plans kept, and dropped.

  A plan is kept when its episode ends by `<submit>`.
  """
  tokens, valid, trainable, kinds = [], [], [], []
  dropped = 0
  for start in range(0, len(plans), _RENDER_CHUNK):
    chunk = plans[start : start + _RENDER_CHUNK]
    rollout = demos.render(
      env,
      [by_id[p.task_id] for p in chunk],
      [_plan_actions(p, env) for p in chunk],
    )
    batch = rollout.batch
    for i, (plan, episode) in enumerate(
      zip(chunk, rollout.episodes, strict=True)
    ):
      if episode.stop_reason != code_env.STOP_SUBMIT:
        dropped += 1
        continue
      tokens.append(np.asarray(batch.tokens[i]))
      valid.append(np.asarray(batch.valid[i]))
      trainable.append(np.asarray(batch.trainable[i]))
      kinds.append(plan.kind)
  return tokens, valid, trainable, kinds, dropped


def bucket_width(length: int, bucket: int, max_width: int) -> int:
  """`length` rounded up to a multiple of `bucket`, at most `max_width`."""
  return min(max_width, max(bucket, -(-length // bucket) * bucket))
