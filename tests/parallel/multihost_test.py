"""Two JAX processes on 127.0.0.1 train as one process does.

The main job runs the smoke preset (2 PPO iterations; fewer SFT steps and
held-out tasks) from scratch twice, at the same time: as two processes
with 2 fake CPU devices each, joined by
`jax.distributed` through the JAX_* variables a launcher sets (a
coordinator on a free local port), and as one process with 4 devices. Both
learners run the same 4-device program; in the two-process run each
process renders half of the demonstrations, rolls out and evaluates half
of every batch on its own devices with its own sandbox pool, and feeds its
half of every batch to the learner. Everything the runs leave must agree:
metrics of every iteration, evaluations, sampled episodes.

One override, `rl.kl.coef=0`: the smoke model never solves a task, so
every reward is 0 and, with a KL penalty, the advantages are the penalty
between an actor and a reference that differ only by float rounding;
whitening blows that rounding up to unit size, and the second update
follows it. Two one-process runs on 1 and on 4 devices then differ too (20
of 274 metrics beyond 1e-4, and the final evaluation's episodes). Without
the penalty every quantity stays well conditioned.

Tolerances: the learners sum in another order (gloo's all-reduce across
processes against XLA's within one; a process's half batch of rollouts
against the whole), so floats agree to a few units in the last place per
operation, ~1e-7 relative; a metric goes through a few dozen operations,
and rtol 1e-4 leaves room for that while a different episode or batch
row moves a mean over 8 episodes by percents. `kl/*` and
`policy/approx_kl` measure a divergence that is 0 up to rounding here
(the log-probs of ~-5 differ in the last place, ~3e-7), so they are
compared absolutely, to 1e-5. The episodes themselves (and the evaluation
files) are compared exactly: their tokens are sampled from logits that
agree to rounding; a draw whose two best candidates are within that
rounding would flip, which is possible but rare (about one in 1e6 draws;
a run draws ~7000).
"""

import json
import math
import pathlib
import shutil
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers import presets
from tests.helpers import processes

pytestmark = pytest.mark.xdist_group("multihost")

# Each run takes ~1.5 minutes alone on 2 idle cores; three share them here.
TIMEOUT_S = 900
EVAL_TASKS = 4
ARGS = (
  "--config=configs/tiny.py:smoke",
  "--config.rl.kl.coef=0",
  # The suite's smaller smoke shapes (tests/helpers/presets.py), with
  # sampled evaluation on 4 held-out tasks: the runs are compared, not
  # judged. One padded length compiles each step once.
  *presets.cli_flags(
    {
      **presets.SMALL_SMOKE,
      "eval.sampled": True,
      "data.num_eval_tasks": EVAL_TASKS,
    }
  ),
  "--sandbox_backend=process",
)
ENV_VARS = ("JAX_COORDINATOR_ADDRESS", "JAX_PROCESS_COUNT", "JAX_PROCESS_ID")
# Wall-clock metrics, different in every run.
UNTIMED = ("time/", "perf/tokens_per_s")
# Divergences that are 0 up to rounding in these runs (module docstring).
DIVERGENCES = ("kl/", "policy/approx_kl")


def _env(devices: int, **jax_vars: str) -> dict[str, str]:
  """A CPU subprocess's environment with `devices` fake devices."""
  # Level 0: the three runs compile more than they execute (the module took
  # 75 s alone instead of 108 s, 118 user seconds instead of 185).
  env = processes.one_device_env()
  for name in ENV_VARS:
    env.pop(name, None)
  flag = f"--xla_force_host_platform_device_count={devices}"
  env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
  env.update(jax_vars)
  return env


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start(workdir, log, env, *args):
  return subprocess.Popen(
    [sys.executable, "-m", "codeagent_rl.main", f"--workdir={workdir}", *args],
    cwd=processes.REPO_ROOT,
    env=env,
    stdout=log.open("w"),
    stderr=subprocess.STDOUT,
  )


def _wait_all(procs: dict[str, subprocess.Popen], logs, timeout: float):
  """Waits for every process; the first failure or the deadline kills all.

  A process of a multi-process run that dies leaves the others waiting in a
  collective until the coordinator notices, so nothing is waited on
  without a deadline.
  """
  deadline = time.monotonic() + timeout
  failed = None
  while failed is None and any(p.poll() is None for p in procs.values()):
    failed = next(
      (name for name, p in procs.items() if p.poll() not in (None, 0)), None
    )
    if time.monotonic() > deadline:
      failed = "timeout"
    time.sleep(1)
  for p in procs.values():
    if p.poll() is None:
      p.kill()
    p.wait()
  failed = failed or next(
    (name for name, p in procs.items() if p.returncode), None
  )
  if failed:
    tails = "\n".join(
      f"--- {name} (rc {procs[name].returncode}):\n"
      + "\n".join(logs[name].read_text().splitlines()[-25:])
      for name in procs
    )
    pytest.fail(f"{failed} failed or ran past {timeout} s:\n{tails}")


def _launch_pair(workdir, logs, *names):
  """The two processes of one run on `workdir`, as a launcher starts them."""
  port = _free_port()
  return {
    name: _start(
      workdir,
      logs[name],
      _env(
        2,
        JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
        JAX_PROCESS_COUNT="2",
        JAX_PROCESS_ID=str(index),
      ),
      *ARGS,
    )
    for index, name in enumerate(names)
  }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Both runs from scratch, side by side: (workdirs, logs, seconds)."""
  root = tmp_path_factory.mktemp("multihost")
  workdirs = {"one": root / "one", "two": root / "two"}
  logs = {name: root / f"{name}.log" for name in ("one", "p0", "p1")}
  start = time.monotonic()
  procs = {"one": _start(workdirs["one"], logs["one"], _env(4), *ARGS)}
  procs.update(_launch_pair(workdirs["two"], logs, "p0", "p1"))
  _wait_all(procs, logs, TIMEOUT_S)
  return workdirs, logs, time.monotonic() - start


def _metrics(workdir: pathlib.Path) -> list[dict]:
  return [json.loads(line) for line in (workdir / "metrics.jsonl").open()]


def _close(name: str, a, b) -> bool:
  if a is None or b is None:  # a mean over no episode is written as null
    return a is b
  if name.startswith(DIVERGENCES):
    return abs(a - b) <= 1e-5
  return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)


def test_metrics_of_every_iteration_match(runs):
  workdirs, _, _ = runs
  one, two = _metrics(workdirs["one"]), _metrics(workdirs["two"])
  assert (
    [r["iteration"] for r in two] == [r["iteration"] for r in one] == [0, 1]
  )
  for a, b in zip(one, two, strict=True):
    names = {n for n in a if not n.startswith(UNTIMED)}
    assert names == {n for n in b if not n.startswith(UNTIMED)}
    # The iteration did something to compare: an update on 8 episodes,
    # the last one evaluated.
    assert b["episode/count"] == 8 and b["policy/actor_trained"] == 1
    assert b["policy/entropy"] > 0 and b["episode/tokens_mean"] > 0
    differ = {
      n: (a[n], b[n]) for n in sorted(names) if not _close(n, a[n], b[n])
    }
    assert not differ, f"iteration {a['iteration']}: {differ}"
  assert "eval/sampled/pass_a" in two[-1]


def test_evaluations_and_episodes_are_the_same(runs):
  workdirs, _, _ = runs
  for name in ("eval_sft.json", "eval_final.json", "eval_final_samples.jsonl"):
    text = (workdirs["two"] / name).read_text()
    assert text == (workdirs["one"] / name).read_text(), name
  samples = (workdirs["two"] / "eval_final_samples.jsonl").read_text()
  assert len(samples.splitlines()) == 2 * EVAL_TASKS  # greedy and sampled


def test_only_process_zero_writes_and_prints(runs):
  workdirs, logs, _ = runs
  two = workdirs["two"]
  progress = [
    [
      line
      for line in logs[p].read_text().splitlines()
      if line.startswith("it ")
    ]
    for p in ("p0", "p1")
  ]
  assert len(progress[0]) == 2 and not progress[1]
  assert len(_metrics(two)) == 2  # one line per iteration, not per process
  assert len(list((two / "tensorboard").iterdir())) == 1
  assert json.loads((two / "summary.json").read_text())["iterations_done"] == 2
  # The checkpoints every process saved together.
  assert sorted(p.name for p in (two / "checkpoints").iterdir()) == ["1", "2"]


def test_a_finished_run_resumes_in_two_processes(runs, tmp_path):
  """Both restore the SFT and the last PPO checkpoint, and train no more."""
  workdir = tmp_path / "two"
  shutil.copytree(runs[0]["two"], workdir)
  logs = {name: tmp_path / f"{name}.log" for name in ("p0", "p1")}
  _wait_all(_launch_pair(workdir, logs, "p0", "p1"), logs, TIMEOUT_S)
  assert _metrics(workdir) == _metrics(runs[0]["two"])
  text = logs["p0"].read_text()
  assert "PPO: resumed at iteration 2" in text
  assert "SFT: restored the finished run" in text


def test_an_incomplete_launch_stops_with_one_line(tmp_path):
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "codeagent_rl.main",
      f"--workdir={tmp_path / 'run'}",
      *ARGS,
    ],
    cwd=processes.REPO_ROOT,
    env={**_env(1), "JAX_PROCESS_COUNT": "2", "JAX_PROCESS_ID": "0"},
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode != 0
  assert "Traceback" not in proc.stderr
  last = [line for line in proc.stderr.splitlines() if line.strip()][-1]
  assert last.startswith("error: JAX_PROCESS_COUNT, JAX_PROCESS_ID set but")
  assert "JAX_COORDINATOR_ADDRESS not" in last
  assert not (tmp_path / "run").exists()
