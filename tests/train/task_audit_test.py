"""The trainer audits the task files it is given, before anything is written."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import task_audit
from codeagent_rl.train import workdir as workdir_lib
from configs import tiny

SANDBOX = sandbox_config.SandboxConfig(
  backend="process", pool_size=2, timeout_s=4.0, test_timeout_s=1.0
)
HANGS = "def check(args, kwargs, output):\n  while True:\n    pass\n"


@pytest.fixture(scope="module")
def generated():
  exp = exp_lib.Experiment.from_config(tiny.get_config("smoke"))
  return data_lib.make_task_sets(exp.data, 0)


def _broken(task, how):
  """`task` with its first hidden test made bad in one way."""
  first = dict(task.hidden_tests[0])
  if how == "wrong":
    first["expected"] = ["not", "what", "the", "reference", "returns"]
  else:
    first.pop("expected", None)
    first["checker"] = HANGS
  hidden = (first, *task.hidden_tests[1:])
  return dataclasses.replace(
    task, task_id=f"{task.task_id}_{how}", hidden_tests=hidden
  )


@pytest.fixture(scope="module")
def files(generated, tmp_path_factory):
  root = tmp_path_factory.mktemp("task_files")
  train = [*generated.train[:4], _broken(generated.train[4], "wrong")]
  held_out = [*generated.eval[:2], _broken(generated.eval[2], "hangs")]
  schema.write_tasks(root / "train.jsonl", train)
  schema.write_tasks(root / "eval.jsonl", held_out)
  return root, train, held_out


def _exp(files, mode):
  root, _, _ = files
  config = tiny.get_config("smoke")
  config.data.train_tasks = str(root / "train.jsonl")
  config.data.eval_tasks = str(root / "eval.jsonl")
  config.data.bad_tasks = mode
  config.sft.steps = 0
  return exp_lib.Experiment.from_config(config)


def test_skip_drops_the_bad_tasks_and_a_resume_reuses_the_record(
  files, tmp_path, monkeypatch
):
  _, train, held_out = files
  exp = _exp(files, "skip")
  sets = data_lib.make_task_sets(exp.data, exp.seed)
  paths = workdir_lib.Workdir(tmp_path / "run")
  # The generated references pass everything; the planted bad tasks do not.
  plans = (
    synthetic.DemoPlan(train[4].task_id, "single_turn", (("submit", "pass"),)),
  )
  sets = dataclasses.replace(sets, plans=plans)
  audited = task_audit.audit_files(exp, paths, sets, SANDBOX)
  assert [t.task_id for t in audited.task_sets.train] == [
    t.task_id for t in train[:4]
  ]
  assert [t.task_id for t in audited.task_sets.eval] == [
    t.task_id for t in held_out[:2]
  ]
  assert audited.task_sets.plans == ()  # the skipped task's plan went too
  text = "\n".join(audited.lines)
  assert "WARNING: config.data.train_tasks: skipped 1 of 5 tasks" in text
  assert f"task '{train[4].task_id}' hidden_tests[0]:" in text
  assert f"task '{held_out[2].task_id}' hidden_tests[0].checker:" in text
  assert "timed out" in text
  assert not paths.root.exists()  # the caller writes, after its checks
  paths.root.mkdir()
  paths.task_audit.write_text(json.dumps(audited.record))

  def no_pool(*args, **kwargs):
    raise AssertionError("the saved audit should have been reused")

  monkeypatch.setattr(task_audit.pools, "open_pool", no_pool)
  again = task_audit.audit_files(exp, paths, sets, SANDBOX)
  assert again.task_sets == audited.task_sets
  # Other tasks under the same name: audited again.
  changed = dataclasses.replace(sets, eval=sets.eval[:2])
  with pytest.raises(AssertionError, match="reused"):
    task_audit.audit_files(exp, paths, changed, SANDBOX)


def test_error_mode_stops_and_off_audits_nothing(files, tmp_path):
  exp = _exp(files, "error")
  sets = data_lib.make_task_sets(exp.data, exp.seed)
  paths = workdir_lib.Workdir(tmp_path / "run")
  with pytest.raises(task_audit.BadTasksError) as info:
    task_audit.audit_files(exp, paths, sets, SANDBOX)
  assert str(info.value).startswith(
    "config.data.train_tasks: 1 of 5 tasks cannot be trusted"
  )
  off = task_audit.audit_files(_exp(files, "off"), paths, sets, SANDBOX)
  assert (off.task_sets, off.record, off.lines) == (sets, None, ())


def test_bad_mode_is_refused(files):
  with pytest.raises(ValueError, match=r"config.data.bad_tasks='drop'"):
    _exp(files, "drop")


def test_main_job_names_the_bad_task_and_writes_nothing(files, tmp_path):
  root, train, _ = files
  workdir = tmp_path / "never"
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "codeagent_rl.main",
      "--config=configs/tiny.py:smoke",
      f"--config.data.train_tasks={root / 'train.jsonl'}",
      f"--config.data.eval_tasks={root / 'eval.jsonl'}",
      "--config.data.bad_tasks=error",
      "--config.sft.steps=0",
      "--sandbox_backend=process",
      f"--workdir={workdir}",
    ],
    capture_output=True,
    text=True,
    timeout=300,
    env=env,
  )
  assert proc.returncode == 1, proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr
  assert (
    "error: config.data.train_tasks: 1 of 5 tasks cannot be trusted"
    in proc.stderr
  )
  assert f"task '{train[4].task_id}' hidden_tests[0]:" in proc.stderr
  assert not workdir.exists()
