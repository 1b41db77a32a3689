"""The main job on repository tasks, end to end: configs/repo.py:smoke.

One run of `python -m codeagent_rl.main` as a user starts it: generated
repository tasks, their demonstrations rendered through the repository
environment (every run in the sandbox), SFT, a PPO iteration whose
rollouts use the file tools, and the held-out evaluation.
"""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from codeagent_rl.models import tokenizer as tokenizer_lib
from tests.helpers import processes

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# One worker runs the module's tests, so the run below happens once: split
# over two workers each ran it (47 s and 44 s in one suite).
pytestmark = pytest.mark.xdist_group("repo_e2e")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("repo") / "run"
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "codeagent_rl.main",
      "--config=configs/repo.py:smoke",
      f"--workdir={workdir}",
      "--sandbox_backend=process",
    ],
    cwd=REPO_ROOT,
    env=processes.one_device_env(llvm_optimised=True),
    capture_output=True,
    text=True,
    timeout=900,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-6000:]
  return workdir, proc.stdout + proc.stderr


def test_the_run_trains_and_evaluates_on_repository_tasks(run):
  workdir, output = run
  assert "preset repo:smoke" in output
  assert "rendered 8 demonstrations (0 cut by a budget and dropped)" in output
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["iterations_done"] == 1
  for stage in ("sft_eval", "final_eval"):
    assert summary[stage]["eval/greedy/episodes"] == 4.0
  tasks = [json.loads(line) for line in open(workdir / "eval_tasks.jsonl")]
  assert len(tasks) == 4 and {t["kind"] for t in tasks} == {"repo"}
  metrics = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
  rollout = next(m for m in metrics if "episode/count" in m)
  assert rollout["episode/count"] == 4.0


def test_the_demonstrations_are_tool_calls_with_sandbox_observations(run):
  workdir, _ = run
  data = np.load(workdir / "sft_data.npz")
  tok = tokenizer_lib.ByteTokenizer()
  texts = [
    tok.decode(row[valid].tolist())
    for row, valid in zip(
      data["tokens"], data["valid"].astype(bool), strict=True
    )
  ]
  assert set(data["kinds"]) <= {"direct", "give_up", "weakened_test"}
  for text in texts:
    assert "<run>run test_" in text
    assert "run test_" in text and ": exit code 1" in text
    assert text.rstrip().endswith("</submit>")
  direct = [
    t for t, k in zip(texts, data["kinds"], strict=True) if k == "direct"
  ]
  assert direct and all(": exit code 0" in t for t in direct)
  # The trainable mask covers the actions only, never an observation.
  for row, trainable in zip(
    data["tokens"], data["trainable"].astype(bool), strict=True
  ):
    assert "exit code" not in tok.decode(row[trainable].tolist())
