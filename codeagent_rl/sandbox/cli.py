"""Command line: run one program in the sandbox.

  # Run PROG.py once (stdin from IN, else empty); prints one JSON object with
  # status, exit_code, stdout, stderr, duration_s (and reason).
  python -m codeagent_rl.sandbox --code_file=PROG.py [--stdin_file=IN] \
      [--timeout_s=S]

Grading a solution against a task (expected values, the judge) is
`python -m codeagent_rl.grade --tasks=TASKS.jsonl --task_id=ID
--code_file=SOL.py`: the sandbox knows nothing of tasks.

The `--sandbox_*` / `--runsc_*` flags of `harness.py` choose the backend and
limits; one sandbox is started. The exit code is 0 whenever a JSON object
is printed, whatever the job's status; setup problems (no runsc, a missing
file, a bad flag value) stop with a message and a non-zero code.
"""

from __future__ import annotations

import json
import sys

from absl import app
from absl import flags

from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import pools


def define_flags() -> None:
  """Registers the program's flags, the sandbox's (limits included)."""
  flags.DEFINE_string("code_file", None, "The program to run.")
  flags.DEFINE_string(
    "stdin_file", None, "Stdin of the program (default: empty)."
  )
  flags.DEFINE_float(
    "timeout_s",
    None,
    "Job time limit in seconds (default: --sandbox_timeout_s). A single"
    " program run gets it as its per-test limit too.",
  )
  harness.define_flags(limits=True)


def _read(path: str, what: str) -> str:
  try:
    with open(path, encoding="utf-8") as f:
      return f.read()
  except OSError as e:
    raise app.UsageError(f"--{what}={path}: cannot read: {e}") from None


def run_program(pool: harness.SandboxPool, code: str, stdin: str) -> dict:
  """Runs `code` once; the CLI's JSON object for it."""
  timeout = flags.FLAGS.timeout_s
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


def main(argv: list[str]) -> None:
  """Entry point of `python -m codeagent_rl.sandbox`."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if flags.FLAGS.code_file is None:
    raise app.UsageError("--code_file is required.")
  code = _read(flags.FLAGS.code_file, "code_file")
  stdin = (
    ""
    if flags.FLAGS.stdin_file is None
    else _read(flags.FLAGS.stdin_file, "stdin_file")
  )
  try:
    config = harness.config_from_flags(pool_size=1)
  except ValueError as e:
    sys.exit(str(e))
  try:
    pool = pools.open_pool(config)
  except gvisor.SetupError as e:
    sys.exit(str(e))
  with pool:
    out = run_program(pool, code, stdin)
  print(json.dumps(out))
