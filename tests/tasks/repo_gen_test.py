"""The repository task generator: valid, deterministic, judged as it says.

The generator computes expected values by running its own clean package
in a subprocess; these tests check them against the sandbox and the
judge: the reference change passes every hidden test, the buggy start
fails the visible test and some of each suite.
"""

import ast
import collections
import difflib
import json
import subprocess
import sys

import pytest

from codeagent_rl.sandbox import jobs
from codeagent_rl.tasks import repo_gen
from codeagent_rl.tasks import repo_judge
from codeagent_rl.tasks import schema

REPO_ROOT = __file__.rsplit("/tests/", 1)[0]


@pytest.fixture(scope="module")
def tasks():
  return repo_gen.generate(16, seed=3)


def test_the_same_seed_makes_the_same_tasks(tasks):
  again = repo_gen.generate(4, seed=3)
  assert [schema.task_to_json(t) for t in again] == [
    schema.task_to_json(t) for t in tasks[:4]
  ]
  other = repo_gen.generate(4, seed=4)
  assert schema.task_to_json(other[0]) != schema.task_to_json(tasks[0])


def test_tasks_are_valid_and_round_trip(tmp_path, tasks):
  path = tmp_path / "repo.jsonl"
  schema.write_tasks(path, tasks)
  assert schema.read_tasks(path) == tasks
  for task in tasks:
    meta = task.metadata
    assert 3 <= meta["modules"] <= 8
    assert 1 <= meta["depth"] <= meta["modules"]
    assert meta["mutation"] in repo_gen.MUTATIONS
    # The reference change is the mutated lines of one module.
    (path,) = task.workspace["reference"]
    assert path == meta["bug_path"]
    diff = [
      line
      for line in difflib.unified_diff(
        task.repo.start[path].splitlines(),
        task.repo.reference[path].splitlines(),
        lineterm="",
        n=0,
      )
      if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]
    assert 1 <= len(diff) <= 8, diff
    for text in task.repo.start.values():
      ast.parse(text)


def test_depths_and_mutations_spread(tasks):
  depths = collections.Counter(t.metadata["depth"] for t in tasks)
  kinds = collections.Counter(t.metadata["mutation"] for t in tasks)
  assert len(depths) >= 4, depths
  assert len(kinds) >= 4, kinds


def test_the_sandbox_agrees_with_the_generator(pool, tasks):
  for task in tasks[:8]:
    grade, graded = repo_judge.grade_workspace(pool, task, task.repo.reference)
    assert grade.suite_a.passed == grade.suite_a.total, grade.to_json()
    assert grade.suite_b.passed == grade.suite_b.total, grade.to_json()
    assert graded.restored == ()
    start, _ = repo_judge.grade_workspace(pool, task, task.repo.start)
    assert start.suite_a.passed <= start.suite_a.total - 2
    assert start.suite_b.passed <= start.suite_b.total - 2
    (test_path,) = task.repo.test_paths
    for workspace, code in ((task.repo.start, 1), (task.repo.reference, 0)):
      job = jobs.Job.workspace_program(tuple(workspace.items()), test_path)
      run = pool.run(job).tests[0]
      assert run.exit_code == code, run
    assert run.stdout.endswith("passed\n")


def test_the_issue_states_the_failing_behaviour(tasks):
  task = tasks[0]
  assert task.hidden_tests[0]["call"].endswith(".report.summary")
  assert task.prompt.startswith("report.summary([")
  assert "it should return" in task.prompt
  assert task.repo.test_paths[0] in task.prompt


def test_mutants_of_each_kind():
  source = repo_gen.render_module(
    ast.parse(
      "def f(xs, k=2):\n    out = []\n    for x in xs:\n"
      "        if x > k:\n            out.append(x * k)\n"
      "        else:\n            out.append(x - 1)\n    return out\n"
    )
  )
  made = collections.defaultdict(list)
  for kind, text in repo_gen.mutants(source, "f"):
    made[kind].append(text)
  assert set(made) == set(repo_gen.MUTATIONS)
  assert any("out.append(x + k)" in t for t in made["operator"])
  assert any("if x >= k:" in t for t in made["comparison"])
  assert any("out.append(x - 2)" in t for t in made["off_by_one"])
  assert any("def f(xs, k=3):" in t for t in made["wrong_default"])
  assert any("out.append(out * k)" in t for t in made["wrong_variable"])
  assert any("if" not in t for t in made["missing_branch"])
  for texts in made.values():
    for text in texts:
      assert text != source
      ast.parse(text)


def test_evaluation_survives_mutants_that_hang_or_recurse():
  files = {
    "p/__init__.py": "",
    "p/m.py": (
      "def grow(xs):\n    for x in xs:\n        xs.append(x)\n    return xs\n"
      "def ok(xs):\n    return len(xs)\n"
      "def loop(xs):\n    return loop(xs)\n"
      "def me(xs):\n    xs.append(xs)\n    return xs\n"
    ),
    "cli.py": "import sys\nfrom p import m\nprint(m.ok([1]))\n",
  }
  answers = repo_gen.evaluate(
    [files],
    [("p.m", "ok", [[1, 2]]), ("p.m", "grow", [[1]])],
    ["\n"],
  )
  assert answers[0]["calls"][0] == ["ok", 2]
  assert answers[0]["calls"][1][0] == "limit"
  for name in ("loop", "me"):
    (answer,) = repo_gen.evaluate([files], [("p.m", name, [[1]])], [])
    assert answer["calls"][0][0] == "limit"


def test_the_command_writes_tasks_and_names_bad_flags(tmp_path):
  out = tmp_path / "repo.jsonl"
  cmd = [sys.executable, "-m", "codeagent_rl.tasks.repo_gen"]
  proc = subprocess.run(
    [*cmd, f"--out={out}", "--num_tasks=2", "--seed=1"],
    capture_output=True,
    text=True,
    cwd=REPO_ROOT,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  assert len(schema.read_tasks(out)) == 2
  assert "wrote 2 tasks" in proc.stdout
  bad = subprocess.run(
    [*cmd, f"--out={out}", "--max_modules=40"],
    capture_output=True,
    text=True,
    cwd=REPO_ROOT,
    check=False,
  )
  assert bad.returncode != 0 and "max_modules" in bad.stderr
  missing = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
  assert missing.returncode != 0 and "--out" in missing.stderr
  assert json.loads(out.read_text().splitlines()[0])["kind"] == "repo"
