"""`python -m codeagent_rl.sandbox`: the contract external checks rely on."""

import json
import pathlib
import subprocess
import sys

import pytest

from codeagent_rl.tasks import schema

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-m", "codeagent_rl.sandbox", *args],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    check=False,
    timeout=120,
  )


def test_run_program(tmp_path):
  prog = tmp_path / "prog.py"
  prog.write_text(
    "import sys\ndata = sys.stdin.read()\nprint(data.upper(), end='')\n"
    "print('warn', file=sys.stderr)\nsys.exit(4)\n"
  )
  stdin = tmp_path / "in.txt"
  stdin.write_text("hello\n")
  proc = run_cli(f"--code_file={prog}", f"--stdin_file={stdin}")
  assert proc.returncode == 0, proc.stderr
  out = json.loads(proc.stdout)
  assert out["status"] == "crash"  # a non-zero exit
  assert out["exit_code"] == 4
  assert out["stdout"] == "HELLO\n"
  assert out["stderr"] == "warn\n"
  assert 0 < out["duration_s"] < 10


def test_run_program_timeout(tmp_path):
  prog = tmp_path / "loop.py"
  prog.write_text("print('start', flush=True)\nwhile True:\n  pass\n")
  proc = run_cli(f"--code_file={prog}", "--timeout_s=1")
  assert proc.returncode == 0, proc.stderr
  out = json.loads(proc.stdout)
  assert out["status"] == "timeout"
  assert out["exit_code"] is None
  assert out["stdout"] == "start\n"
  assert 1.0 <= out["duration_s"] < 5


def _task(task_id: str, hidden: list, heldout: list) -> schema.Task:
  return schema.Task(
    task_id=task_id,
    prompt="Add two numbers.",
    entry_point="add",
    kind="function",
    visible_tests=(),
    hidden_tests=tuple(hidden),
    heldout_tests=tuple(heldout),
    reference_solution="def add(a, b):\n  return a + b\n",
    metadata={"source": "test"},
  )


def test_grade_solution(tmp_path):
  tasks = tmp_path / "tasks.jsonl"
  schema.write_tasks(
    tasks,
    [
      _task("other", [{"args": [0, 0], "expected": 1}], []),
      _task(
        "add",
        [
          {"args": [1, 2], "expected": 3},
          {"args": [(1,), (2,)], "expected": (1, 2)},
          {"args": [0.1, 0.2], "expected": 0.3},
        ],
        [
          {"args": [2, 2], "expected": 4},
          {"args": [-1, 1], "expected": 1},
          {
            "args": [5, 5],
            "checker": "def check(a, k, out):\n  return out == 10\n",
          },
        ],
      ),
    ],
  )
  sol = tmp_path / "sol.py"
  sol.write_text("def add(a, b):\n  return a + b\n")
  proc = run_cli(f"--task_file={tasks}", "--task_id=add", f"--code_file={sol}")
  assert proc.returncode == 0, proc.stderr
  out = json.loads(proc.stdout)
  assert out["status"] == "ok"
  assert out["task_id"] == "add"
  assert (out["suite_a"]["passed"], out["suite_a"]["total"]) == (3, 3)
  assert (out["suite_b"]["passed"], out["suite_b"]["total"]) == (2, 3)
  assert out["suite_b"]["verdicts"][1] == {
    "passed": False,
    "reason": "0 != 1",
  }


@pytest.mark.parametrize(
  "args,fragment",
  [
    (["--runsc_path=/nonexistent/runsc"], "apt-get install -y runsc"),
    (["--task_file={bad}", "--task_id=x"], "bad.jsonl:2: not valid JSON"),
    (["--sandbox_memory_mb=1"], "--sandbox_memory_mb=1"),
  ],
  ids=["no_runsc", "bad_task_file", "bad_flag"],
)
def test_setup_errors_stop_with_a_message(tmp_path, args, fragment):
  prog = tmp_path / "prog.py"
  prog.write_text("print(1)\n")
  bad = tmp_path / "bad.jsonl"
  bad.write_text("\n{not json\n")
  args = [a.format(bad=bad) for a in args]
  proc = run_cli(f"--code_file={prog}", *args)
  assert proc.returncode != 0
  assert proc.stdout == ""
  assert fragment in proc.stderr, proc.stderr
