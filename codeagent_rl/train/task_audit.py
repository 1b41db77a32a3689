"""The trainer's audit of the task files it is given (`tasks/audit.py`).

Before anything is written, the tasks of `config.data.train_tasks` and
`config.data.eval_tasks` are audited (each reference run on every test of
its task, each checker loaded and run on the reference's outputs), and
`config.data.bad_tasks` decides: "skip" drops the tasks with a problem,
with a warning that names each (task, field, what was found) and counts
them; "error" stops the run with the same list; "off" audits nothing.
Demonstration plans of a dropped train task go with it.

The audit's record goes to WORKDIR/task_audit.json, keyed by a digest of
the audited tasks: a resume of the same files reuses it, so it drops the
same tasks even where a reference's time limit would fall differently on
a busier machine. With several processes, process 0 audits and the others
take its report. Synthetic tasks are not audited (their generator runs
every reference on every test and raises on a disagreement).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from codeagent_rl.parallel import distributed
from codeagent_rl.sandbox import config as sandbox_config_lib
from codeagent_rl.sandbox import pools
from codeagent_rl.tasks import audit
from codeagent_rl.tasks import schema
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import workdir as workdir_lib

# Version of task_audit.json's layout.
VERSION = 1


class BadTasksError(exp_lib.SetupError):
  """Bad tasks and `bad_tasks="error"`; the message lists them."""


@dataclasses.dataclass(frozen=True)
class Audited:
  """The task sets after the audit.

  Attributes:
    task_sets: the tasks and plans to use.
    record: what to write to task_audit.json (None: nothing audited).
    lines: what to tell the user (a summary per split, warnings).
  """

  task_sets: data_lib.TaskSets
  record: dict[str, Any] | None
  lines: tuple[str, ...]


def _splits(exp: exp_lib.Experiment, sets: data_lib.TaskSets) -> dict:
  """Field name -> tasks, for the splits read from files."""
  out = {}
  if exp.data.train_tasks is not None:
    out["train_tasks"] = sets.train
  if exp.data.eval_tasks is not None:
    out["eval_tasks"] = sets.eval
  return out


def digest(tasks: Any) -> str:
  """A digest of the tasks' records, in order."""
  h = hashlib.sha256()
  for task in tasks:
    line = json.dumps(schema.task_to_json(task), sort_keys=True)
    h.update(line.encode("utf-8") + b"\n")
  return h.hexdigest()


def _saved(paths: workdir_lib.Workdir) -> dict | None:
  try:
    record = json.loads(paths.task_audit.read_text())
  except (OSError, ValueError):
    return None  # absent or damaged: audit again
  if not isinstance(record, dict) or record.get("version") != VERSION:
    return None
  return record


def audit_files(
  exp: exp_lib.Experiment,
  paths: workdir_lib.Workdir,
  task_sets: data_lib.TaskSets,
  sandbox: sandbox_config_lib.SandboxConfig,
) -> Audited:
  """Audits the splits read from files and applies `config.data.bad_tasks`.

  Raises:
    BadTasksError: "error" mode and a task has a problem, or every task of
      a split has one.
  """
  splits = _splits(exp, task_sets)
  if exp.data.bad_tasks == "off" or not splits:
    return Audited(task_sets, None, ())
  saved = _saved(paths) or {}
  reports, todo = {}, {}
  for field, tasks in splits.items():
    entry = saved.get(field)
    key = digest(tasks)
    if isinstance(entry, dict) and entry.get("digest") == key:
      reports[field] = audit.Report.from_json(entry["report"])
    else:
      todo[field] = tasks
  if todo:
    found = None
    if distributed.is_primary():  # one audit, so every process drops alike
      with pools.open_pool(sandbox) as pool:
        found = {f: audit.audit(pool, t).to_json() for f, t in todo.items()}
    found = distributed.gather(found)[0]
    reports.update({f: audit.Report.from_json(r) for f, r in found.items()})
  kept, lines = {}, []
  for field, tasks in splits.items():
    report = reports[field]
    try:
      kept[field], warning = audit.apply(
        tasks, report, exp.data.bad_tasks, f"config.data.{field}"
      )
    except audit.BadTasksError as e:
      raise BadTasksError(str(e)) from None
    lines.append(f"task audit: config.data.{field}: {report.summary()}")
    lines.extend(warning)
  train = tuple(kept.get("train_tasks", task_sets.train))
  ids = {t.task_id for t in train}
  plans = tuple(p for p in task_sets.plans if p.task_id in ids)
  if len(plans) < len(task_sets.plans):
    lines.append(
      f"task audit: dropped {len(task_sets.plans) - len(plans)} demonstration"
      " plans of skipped train tasks"
    )
  record = {"version": VERSION, "mode": exp.data.bad_tasks}
  for field, tasks in splits.items():
    record[field] = {
      "digest": digest(tasks),
      "report": reports[field].to_json(),
    }
  sets = data_lib.TaskSets(
    train, tuple(kept.get("eval_tasks", task_sets.eval)), plans
  )
  return Audited(sets, record, tuple(lines))
