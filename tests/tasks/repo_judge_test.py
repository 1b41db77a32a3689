"""Grading repo tasks: the change is graded on clean tests, hacks pay nothing.

Each hack is what an agent with file tools can do to a repository: edit or
delete the task's tests, add files that hook an interpreter or a test run,
exit or raise at import, special-case the visible inputs, patch what runs
the tests, or break the layout the tests need.
"""

import pytest

from codeagent_rl import status as status_lib
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import repo_judge
from codeagent_rl.tasks import workspace as workspace_lib
from tests.helpers import repo_tasks

TASK = repo_tasks.task()
N_A, N_B = len(repo_tasks.HIDDEN), len(repo_tasks.HELDOUT)


def _agent(**changes) -> workspace_lib.Workspace:
  """The task's start with `changes` (path -> text, or None to delete)."""
  files = TASK.repo.start.files()
  for path, text in changes.items():
    if text is None:
      files.pop(path, None)
    else:
      files[path] = text
  return workspace_lib.Workspace(files)


def _fixed(**changes) -> workspace_lib.Workspace:
  return _agent(**{"inventory/stock.py": repo_tasks.STOCK_FIXED, **changes})


def _grade(pool, agent, timeout_s=None):
  grade, graded = repo_judge.grade_workspace(
    pool, TASK, agent, timeout_s=timeout_s
  )
  return grade, graded


def _passed(grade) -> tuple[int, int]:
  return grade.suite_a.passed, grade.suite_b.passed


def test_the_reference_passes_and_the_start_does_not(pool):
  grade, graded = _grade(pool, TASK.repo.reference)
  assert _passed(grade) == (N_A, N_B), grade.to_json()
  assert grade.status == status_lib.JobStatus.OK
  assert graded.restored == graded.removed == ()
  start, _ = _grade(pool, TASK.repo.start)
  # total() and the empty summary pass even with the bug.
  assert _passed(start) == (1, 1), start.to_json()


def test_the_tests_run_in_parallel_jobs_one_per_target(pool):
  planned = repo_judge.tests_jobs(
    TASK, judge.graded_tests(TASK), TASK.repo.start
  )
  targets = [
    job.code.split()[1] + "." + job.code.split()[3] for _, job in planned[:-1]
  ]
  assert targets == [
    "inventory.stock.restock",
    "inventory.stock.total",
    "inventory.report.summary",
  ]
  assert planned[-1][1].main_path == "cli.py"
  assert sorted(i for positions, _ in planned for i in positions) == list(
    range(N_A + N_B)
  )


def test_a_function_task_job_is_refused_for_a_repo_task():
  with pytest.raises(ValueError, match="repo task"):
    judge.solution_job(TASK, "def f(): pass")


def test_editing_or_deleting_the_visible_test_changes_nothing(pool):
  weakened = "def test_restock():\n  pass\n"
  honest, _ = _grade(pool, TASK.repo.start)
  for changes in ({"test_stock.py": weakened}, {"test_stock.py": None}):
    grade, graded = _grade(pool, _agent(**changes))
    assert graded.restored == ("test_stock.py",)
    assert graded.workspace["test_stock.py"] == repo_tasks.VISIBLE_TEST
    assert _passed(grade) == _passed(honest)


@pytest.mark.parametrize(
  "path",
  [
    "conftest.py",
    "inventory/conftest.py",
    "sitecustomize.py",
    "usercustomize.py",
    "inventory/evil.pth",
    "pytest.ini",
  ],
)
def test_hook_files_the_agent_adds_are_removed(pool, path):
  hook = "import os\nos._exit(0)\n" if path.endswith(".py") else "import os\n"
  grade, graded = _grade(pool, _fixed(**{path: hook}))
  assert graded.removed == (path,)
  assert path not in graded.workspace
  assert _passed(grade) == (N_A, N_B)


@pytest.mark.parametrize(
  "prefix",
  [
    "import os\nos._exit(0)\n",
    "raise SystemExit(0)\n",
    "import sys\nsys.exit()\n",
    "raise KeyboardInterrupt\n",
    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "while True:\n  pass\n",
    "print('1 passed')\nraise ImportError('no')\n",
  ],
)
def test_exiting_or_raising_at_import_fails_the_tests(pool, prefix):
  stock = prefix + repo_tasks.STOCK_FIXED
  # A loop at import spins each job to its limit: the pool's 10 s made this
  # case take 20 s of both cores.
  grade, _ = _grade(
    pool, _agent(**{"inventory/stock.py": stock}), timeout_s=2.0
  )
  assert _passed(grade) == (0, 0), grade.to_json()


def test_special_casing_the_visible_inputs_earns_nothing_hidden(pool):
  special = repo_tasks.STOCK_BUGGY.replace(
    "  levels = dict(levels)\n",
    "  if (levels, item, amount) == ({'a': 1}, 'a', 2):\n"
    "    return {'a': 3}\n"
    "  levels = dict(levels)\n",
  )
  grade, _ = _grade(pool, _agent(**{"inventory/stock.py": special}))
  start, _ = _grade(pool, TASK.repo.start)
  assert _passed(grade) == _passed(start)


def test_patching_what_runs_the_tests_changes_only_its_own_outputs(pool):
  # At import the module patches the guest's encoder and frame writer, the
  # json and random modules and builtins: the values the host judges are
  # still what restock returned (the bug's), and nothing else passes.
  patch = (
    "import builtins, json, random, sys\n"
    "for name, module in list(sys.modules.items()):\n"
    "  if 'sandbox' in name or 'guest' in name:\n"
    "    for attr in dir(module):\n"
    "      if 'encode' in attr or 'write' in attr or 'frame' in attr:\n"
    "        try:\n"
    "          setattr(module, attr, lambda *a, **k: None)\n"
    "        except Exception:\n"
    "          pass\n"
    "json.dumps = lambda *a, **k: '{\"a\": 5}'\n"
    "random.shuffle = lambda x, *a: None\n"
    "builtins.sorted = lambda x, *a, **k: list(x)\n"
  )
  stock = patch + repo_tasks.STOCK_BUGGY
  grade, _ = _grade(pool, _agent(**{"inventory/stock.py": stock}))
  start, _ = _grade(pool, TASK.repo.start)
  assert _passed(grade) == _passed(start), grade.to_json()


def test_a_module_the_agent_deleted_fails_only_the_tests_that_need_it(pool):
  grade, _ = _grade(pool, _fixed(**{"inventory/report.py": None}))
  verdicts = [v.passed for v in grade.suite_a.verdicts]
  # restock x2 and total pass; summary and the program (which imports
  # report) fail, with the import's reason.
  assert verdicts == [True, True, True, False, False]
  assert "report" in grade.suite_a.verdicts[3].reason


def test_deleting_the_program_fails_its_runs_with_the_reason(pool):
  grade, _ = _grade(pool, _fixed(**{"cli.py": None}))
  run = grade.suite_a.verdicts[4]
  assert not run.passed and "cli.py is not in the workspace" in run.reason
  assert _passed(grade) == (N_A - 1, N_B - 1)


def test_a_change_that_does_not_fit_the_task_fails_every_test(pool):
  # The agent made test_stock.py a folder; the task's own file cannot go
  # back beside it.
  agent = _fixed(**{"test_stock.py": None, "test_stock.py/x.py": "pass\n"})
  grade, graded = _grade(pool, agent)
  assert graded is None
  assert _passed(grade) == (0, 0)
  assert "does not fit" in grade.suite_a.verdicts[0].reason


def test_output_the_program_floods_is_judged_not_crashed(pool):
  flood = repo_tasks.CLI.replace(
    "print(report", "print('x' * 10_000_000)\nprint(report"
  )
  grade, _ = _grade(pool, _fixed(**{"cli.py": flood}))
  assert not grade.suite_a.verdicts[4].passed
  assert grade.suite_a.passed == N_A - 1
