"""Loading repo tasks: a valid line round-trips, a bad one names its field."""

import copy
import dataclasses
import json

import pytest

from codeagent_rl.tasks import schema
from tests.helpers import repo_tasks


def _read_one(tmp_path, obj):
  path = tmp_path / "tasks.jsonl"
  path.write_text(json.dumps(obj) + "\n")
  return schema.read_tasks(path)[0]


def test_a_repo_task_round_trips_and_parses(tmp_path):
  task = _read_one(tmp_path, repo_tasks.line())
  assert task.kind == "repo"
  assert task.repo.test_paths == ("test_stock.py",)
  assert task.repo.start["inventory/stock.py"] == repo_tasks.STOCK_BUGGY
  assert task.repo.reference["inventory/stock.py"] == repo_tasks.STOCK_FIXED
  path = tmp_path / "out.jsonl"
  schema.write_tasks(path, [task])
  assert schema.read_tasks(path) == [task]
  assert json.loads(path.read_text()) == repo_tasks.line()


def test_other_kinds_have_no_workspace(tmp_path):
  line = {
    "task_id": "f",
    "prompt": "p",
    "entry_point": "f",
    "kind": "function",
    "visible_tests": [],
    "hidden_tests": [{"args": [], "expected": 1}],
    "heldout_tests": [],
    "reference_solution": "def f(): return 1",
    "metadata": {},
  }
  task = _read_one(tmp_path, line)
  with pytest.raises(ValueError, match="not repo"):
    _ = task.repo
  with pytest.raises(schema.TaskFormatError, match="only a repo task"):
    _read_one(tmp_path, {**line, "workspace": repo_tasks.line()["workspace"]})
  out = tmp_path / "out.jsonl"
  schema.write_tasks(out, [task])
  assert "workspace" not in json.loads(out.read_text())


def _workspace(**changes):
  workspace = copy.deepcopy(repo_tasks.line()["workspace"])
  workspace.update(changes)
  return workspace


def _files(**changes):
  files = dict(repo_tasks.FILES)
  files.update(changes)
  return files


BAD_LINES = [
  # (overrides of the line, what the message must say)
  ({"workspace": None}, "workspace: a repo task needs an object"),
  ({"workspace": _workspace(extra=1)}, "workspace: keys must be"),
  (
    {"workspace": _workspace(files=_files(**{"../evil.py": "x"}))},
    "workspace.files: path '../evil.py'",
  ),
  (
    {"workspace": _workspace(files=_files(**{"/etc/passwd": "x"}))},
    "workspace.files: path '/etc/passwd': must be relative",
  ),
  (
    {"workspace": _workspace(files=_files(**{"a\\b.py": "x"}))},
    "holds '\\\\'; use '/' between folders",
  ),
  (
    {"workspace": _workspace(files=_files(**{"blob.bin": "\x00\x01"}))},
    "blob.bin: binary content",
  ),
  (
    {"workspace": _workspace(files=_files(big="x" * 40000))},
    "big: 40000 bytes, more than the 32768",
  ),
  (
    {
      "workspace": _workspace(
        files={f"m{i}.py": "" for i in range(1000)} | repo_tasks.FILES
      )
    },
    "more than the 64 it may hold",
  ),
  (
    {"workspace": _workspace(files=_files(**{"inventory": "x"}))},
    "inventory is a file, so it cannot be a folder too",
  ),
  (
    {"workspace": _workspace(test_paths=["missing_test.py"])},
    "workspace.test_paths[0]: 'missing_test.py' is not a file",
  ),
  (
    {"workspace": _workspace(test_paths="test_stock.py")},
    "workspace.test_paths: must be a list",
  ),
  (
    {"workspace": _workspace(reference={})},
    "workspace.reference: must be a non-empty object",
  ),
  (
    {"workspace": _workspace(reference={"test_stock.py": "x = 1\n"})},
    "may not change a test or hook file",
  ),
  (
    {"workspace": _workspace(reference={"pkg/conftest.py": "x = 1\n"})},
    "may not change a test or hook file",
  ),
  (
    {"workspace": _workspace(reference={"gone.py": None})},
    "deletes a file that is not there",
  ),
  (
    {"workspace": _workspace(reference={"cli.py": repo_tasks.CLI})},
    "workspace.reference: changes nothing",
  ),
  (
    {"workspace": _workspace(reference={"ok.py": 3})},
    "ok.py: content must be text",
  ),
  ({"reference_solution": "x = 1"}, "reference_solution: must be"),
  ({"entry_point": "missing.py"}, "entry_point: 'missing.py' must be null"),
  ({"entry_point": "inventory"}, "entry_point: 'inventory' must be null"),
  (
    {"entry_point": None},
    "hidden_tests[4]: a run test (stdin / expected_stdout) needs the task's"
    " entry_point",
  ),
  (
    {
      "hidden_tests": [
        {"call": "inventory.nothere.f", "args": [], "expected": 1}
      ]
    },
    "hidden_tests[0]: call: module 'inventory.nothere' is not a file",
  ),
  (
    {"hidden_tests": [{"call": "restock", "args": [], "expected": 1}]},
    "hidden_tests[0]: call: 'restock' must be 'module.function'",
  ),
  (
    {
      "hidden_tests": [
        {"call": "inventory.stock.f()", "args": [], "expected": 1}
      ]
    },
    "must be dotted Python identifiers",
  ),
  (
    {"hidden_tests": [{"args": [], "expected": 1}]},
    "hidden_tests[0]: a repo task's function test names its target in 'call'",
  ),
  (
    {"hidden_tests": [{"call": "inventory.stock.total", "args": []}]},
    "hidden_tests[0]: needs exactly one of 'expected' and 'checker'",
  ),
  (
    {
      "heldout_tests": [
        {"call": "inventory.stock.total", "args": {}, "expected": 1}
      ]
    },
    "heldout_tests[0].args: must be a JSON array",
  ),
  ({"hidden_tests": []}, "hidden_tests: needs at least one test"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_LINES)
def test_a_malformed_repo_task_names_its_line_and_field(
  tmp_path, overrides, message
):
  path = tmp_path / "tasks.jsonl"
  good = json.dumps(repo_tasks.line(task_id="good"))
  path.write_text(good + "\n" + json.dumps(repo_tasks.line(**overrides)) + "\n")
  with pytest.raises(schema.TaskFormatError) as raised:
    schema.read_tasks(path)
  text = str(raised.value)
  assert f"{path}:2" in text
  assert "'inventory-restock'" in text or "workspace" in text
  assert message in text, text


def test_readers_of_program_tasks_refuse_a_repo_task_by_name(tmp_path):
  path = tmp_path / "tasks.jsonl"
  path.write_text(json.dumps(repo_tasks.line()) + "\n")
  assert len(schema.read_tasks(path)) == 1
  with pytest.raises(schema.TaskFormatError) as raised:
    schema.read_tasks(path, schema.PROGRAM_KINDS)
  assert f"{path}:1: task 'inventory-restock': kind: 'repo' is not taken" in (
    str(raised.value)
  )
  assert "repo_judge" in str(raised.value)


def test_the_trainer_names_a_repo_task_file_it_cannot_train_on(tmp_path):
  from codeagent_rl.train import data
  from codeagent_rl.train import experiment
  from configs import tiny

  path = tmp_path / "tasks.jsonl"
  path.write_text(json.dumps(repo_tasks.line()) + "\n")
  exp = experiment.Experiment.from_config(tiny.get_config("smoke"))
  config = dataclasses.replace(exp.data, train_tasks=str(path))
  with pytest.raises(
    data.TaskFileError, match="config.data.train_tasks: .*'repo'"
  ):
    data.make_task_sets(config, seed=0)
