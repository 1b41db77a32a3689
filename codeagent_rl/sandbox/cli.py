"""Command line: run a program, or grade a solution against a task.

  # Run PROG.py once (stdin from IN, else empty); prints one JSON object with
  # status, exit_code, stdout, stderr, duration_s (and reason).
  python -m codeagent_rl.sandbox --code_file=PROG.py [--stdin_file=IN] \
      [--timeout_s=S]

  # Grade SOL.py on a task's suite A (hidden) and suite B (held out); prints
  # status, suite_a {passed, total, verdicts}, suite_b {...}.
  python -m codeagent_rl.sandbox --task_file=TASKS.jsonl --task_id=ID \
      --code_file=SOL.py

The `--sandbox_*` / `--runsc_*` flags of `harness.py` choose the backend and
limits; one sandbox is started. The exit code is 0 whenever a JSON object
is printed, whatever the job's status; setup problems (no runsc, a bad task
file, a missing file) stop with a message and a non-zero code.
"""

from __future__ import annotations

import json
import sys

from absl import app
from absl import flags

from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema

_CODE_FILE = flags.DEFINE_string(
  "code_file", None, "The program (or, with --task_file, the solution)."
)
_STDIN_FILE = flags.DEFINE_string(
  "stdin_file", None, "Stdin of the program (default: empty)."
)
_TIMEOUT_S = flags.DEFINE_float(
  "timeout_s",
  None,
  "Job time limit in seconds (default: --sandbox_timeout_s). A single"
  " program run gets it as its per-test limit too.",
)
_TASK_FILE = flags.DEFINE_string(
  "task_file", None, "JSONL task file; grade --code_file against --task_id."
)
_TASK_ID = flags.DEFINE_string("task_id", None, "The task to grade against.")


def _read(path: str, what: str) -> str:
  try:
    with open(path, encoding="utf-8") as f:
      return f.read()
  except OSError as e:
    raise app.UsageError(f"--{what}={path}: cannot read: {e}") from None


def run_program(pool: harness.SandboxPool, code: str, stdin: str) -> dict:
  """Runs `code` once; the CLI's JSON object for it."""
  timeout = _TIMEOUT_S.value
  job = jobs.Job.program(
    code,
    [stdin],
    timeout_s=timeout,
    test_timeout_s=timeout or pool.config.timeout_s,
  )
  result = pool.run(job)
  out = result.to_json()
  del out["tests"]
  return out


def grade_task(pool: harness.SandboxPool, task: schema.Task, code: str) -> dict:
  """Grades `code` on `task`; the CLI's JSON object for it."""
  grade = judge.grade(pool, task, code, timeout_s=_TIMEOUT_S.value)
  return grade.to_json()


def main(argv: list[str]) -> None:
  """Entry point of `python -m codeagent_rl.sandbox`."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if _CODE_FILE.value is None:
    raise app.UsageError("--code_file is required.")
  if (_TASK_FILE.value is None) != (_TASK_ID.value is None):
    raise app.UsageError("--task_file and --task_id go together.")
  code = _read(_CODE_FILE.value, "code_file")
  task = None
  if _TASK_FILE.value is not None:
    if _STDIN_FILE.value is not None:
      raise app.UsageError("--stdin_file does not apply with --task_file.")
    try:
      tasks = {t.task_id: t for t in schema.read_tasks(_TASK_FILE.value)}
    except (OSError, schema.TaskFormatError) as e:
      sys.exit(f"--task_file: {e}")
    if _TASK_ID.value not in tasks:
      sys.exit(f"--task_id={_TASK_ID.value!r} is not in {_TASK_FILE.value}.")
    task = tasks[_TASK_ID.value]
  stdin = (
    "" if _STDIN_FILE.value is None else _read(_STDIN_FILE.value, "stdin_file")
  )
  try:
    config = harness.config_from_flags(pool_size=1)
  except ValueError as e:
    sys.exit(str(e))
  try:
    pool = harness.SandboxPool(config)
  except gvisor.SetupError as e:
    sys.exit(str(e))
  with pool:
    out = (
      grade_task(pool, task, code) if task else run_program(pool, code, stdin)
    )
  print(json.dumps(out))
