"""`python -m codeagent_rl.grade --sandbox_backend=ray` on all of HumanEval.

The public command lines, as a user runs them on one machine: the tasks
are imported (with the process backend: the import only records suite A's
outputs of the canonical solutions, and is the slow part), then the
canonical solutions are graded by Ray sandbox actors, each with a gVisor
pool; the grader starts its own local Ray cluster (`--ray_address=local`).
Every one must pass suites A and B, as with the local pool.
"""

import json
import subprocess
import sys

import pytest

from codeagent_rl import solved
from codeagent_rl.tasks import humaneval
from tests.helpers import processes

pytestmark = pytest.mark.xdist_group("ray")


def _run(args: list[str]) -> str:
  proc = subprocess.run(
    [sys.executable, *args],
    capture_output=True,
    text=True,
    cwd=processes.REPO_ROOT,
    timeout=900,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout


def test_ray_fleet_grades_humaneval_canonical_164_of_164(tmp_path):
  tasks = tmp_path / "tasks.jsonl"
  _run(
    [
      "-m",
      "codeagent_rl.tasks.humaneval",
      f"--out={tasks}",
      "--backend=process",
    ]
  )
  problems = humaneval.load_problems()
  samples = tmp_path / "samples.jsonl"
  samples.write_text(
    "".join(
      json.dumps(
        {"task_id": p["task_id"], "completion": humaneval.reference_solution(p)}
      )
      + "\n"
      for p in problems
    )
  )
  out = tmp_path / "results.jsonl"
  stdout = _run(
    [
      "-m",
      "codeagent_rl.grade",
      f"--tasks={tasks}",
      f"--samples={samples}",
      f"--out={out}",
      "--sandbox_backend=ray",
      "--sandbox_ray_backend=gvisor",
      "--sandbox_ray_actors=2",
      "--sandbox_pool_size=1",
      "--ray_address=local",
      "--anticheat=none",
    ]
  )
  summary = json.loads(stdout.strip().splitlines()[-1])
  lines = [json.loads(line) for line in out.read_text().splitlines()]
  assert len(problems) == len(lines) == 164
  assert summary["statuses"] == {"ok": 164}
  failed = sorted(r["task_id"] for r in lines if not solved.line_a_and_b(r))
  assert failed == []
