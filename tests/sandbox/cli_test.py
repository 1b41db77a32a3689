"""`python -m codeagent_rl.sandbox`: the contract external checks rely on."""

import json
import pathlib
import subprocess
import sys

import pytest

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


@pytest.mark.parametrize(
  "args,fragment",
  [
    (["--runsc_path=/nonexistent/runsc"], "apt-get install -y runsc"),
    (["--sandbox_memory_mb=1"], "--sandbox_memory_mb=1"),
    # Grading moved to `python -m codeagent_rl.grade --code_file`.
    (["--task_file=tasks.jsonl", "--task_id=x"], "Unknown command line flag"),
  ],
  ids=["no_runsc", "bad_flag", "no_task_mode"],
)
def test_setup_errors_stop_with_a_message(tmp_path, args, fragment):
  prog = tmp_path / "prog.py"
  prog.write_text("print(1)\n")
  proc = run_cli(f"--code_file={prog}", *args)
  assert proc.returncode != 0
  assert proc.stdout == ""
  assert fragment in proc.stderr, proc.stderr
