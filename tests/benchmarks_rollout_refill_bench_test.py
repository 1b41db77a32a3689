"""benchmarks/rollout_refill_bench.py --quick runs and writes what it promises.

One run of the script in a subprocess on one CPU device, as the benchmark
is run by hand (the test process forces 8 fake devices): lockstep and one
slot-refill variant over the same scripted episodes. The test checks the
rows' keys, that both modes built the same trajectories, the refill
count, and that refill idles on fewer decode row-steps than lockstep (the
schedule is fixed by the scripts). Timings are not asserted: they belong
to the benchmark.
"""

import json
import pathlib
import subprocess
import sys

import pytest

from tests.helpers import processes

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "benchmarks" / "rollout_refill_bench.py"
ROW_KEYS = {
  "variant",
  "rows",
  "wall_s",
  "generate_s",
  "env_s",
  "generated_tokens",
  "tokens_per_s",
  "decode_calls",
  "decode_steps",
  "row_steps",
  "idle_row_share",
  "ended_early_share",
  "not_generating_share",
  "restarts",
  "speedup_vs_lockstep",
}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
  out = tmp_path_factory.mktemp("rollout_refill_bench") / "result.json"
  proc = subprocess.run(
    [sys.executable, SCRIPT, "--quick", f"--out={out}"],
    cwd=REPO_ROOT,
    env=processes.one_device_env(),
    capture_output=True,
    text=True,
    timeout=600,
  )
  if proc.returncode:
    pytest.fail(f"the benchmark failed:\n{(proc.stdout + proc.stderr)[-6000:]}")
  return json.loads(out.read_text()), proc.stdout


def test_the_quick_run_writes_what_it_promises(result):
  data, stdout = result
  settings = data["settings"]
  episodes, (slots,) = settings["episodes"], settings["slots"]
  assert data["same_trajectories"] is True
  assert len(data["turns"]) == episodes
  assert max(data["turns"]) == settings["max_turns"]
  lock, refill = data["rows"]
  for row in (lock, refill):
    assert ROW_KEYS <= set(row), row.keys()
    assert row["generated_tokens"] > 0 and row["tokens_per_s"] > 0
    assert 0.0 <= row["not_generating_share"] <= 1.0
  assert (lock["variant"], lock["rows"], lock["restarts"]) == (
    "lockstep",
    episodes,
    0,
  )
  assert (refill["variant"], refill["rows"]) == ("refill", slots)
  assert refill["restarts"] == episodes - slots
  assert lock["generated_tokens"] == refill["generated_tokens"]
  # Lockstep's rows idle once their episode is over; refill's only when
  # no task is left.
  assert refill["idle_row_share"] < lock["idle_row_share"]
  assert "same trajectories in every variant: True" in stdout
