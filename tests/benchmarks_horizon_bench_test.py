"""benchmarks/horizon_bench.py: its statistics, and one run on a smoke SFT.

The statistics are checked on hand-made episodes (known turns, groups and
stop reasons), and bad arguments here; the script's run on a trained
model is in tests/experiments/compare_test.py, on the comparison's smoke
SFT model (one SFT fewer in the suite).
"""

import types

import numpy as np
import pytest

from benchmarks import horizon_bench
from codeagent_rl.envs import code_env
from tests.helpers import processes


def _episode(turns, reason=code_env.STOP_SUBMIT, suite_a=0.0):
  outcome = None
  if reason == code_env.STOP_SUBMIT:
    outcome = types.SimpleNamespace(suite_a=suite_a)
  return types.SimpleNamespace(
    turns=[None] * turns, stop_reason=reason, outcome=outcome
  )


def test_horizon_row_counts_turns_groups_and_stops():
  episodes = [
    _episode(2, suite_a=1.0),
    _episode(20),
    _episode(4, suite_a=1.0),
    _episode(4),
    _episode(64, code_env.STOP_MAX_TURNS),
    _episode(3, code_env.STOP_MAX_TOKENS_PER_TURN),
  ]
  groups = np.asarray([0, 0, 1, 1, 2, 2])
  row = horizon_bench.horizon_row(episodes, groups)
  turns = np.asarray([2, 20, 4, 4, 64, 3])
  assert row["episodes"] == 6
  assert row["turns_p50"] == np.percentile(turns, 50) == 4.0
  assert row["turns_p95"] == pytest.approx(np.percentile(turns, 95))
  assert row["turns_max"] == 64
  assert row["share_20_turns"] == pytest.approx(2 / 6)
  # Groups: 20/2, 4/4, 64/3.
  assert row["group_ratio_max"] == pytest.approx(64 / 3)
  assert row["group_ratio_p50"] == pytest.approx(10.0)
  assert row["group_ratio_ge5"] == pytest.approx(2 / 3)
  assert row["budget_share"] == pytest.approx(2 / 6)
  assert row["pass_a"] == pytest.approx(2 / 6)
  assert row["stop_reasons"] == {
    "max_tokens_per_turn": 1,
    "max_turns": 1,
    "submit": 4,
  }


def _bench(*args):
  return processes.run_python("benchmarks/horizon_bench.py", *args)


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
  config = "--config=configs/long_horizon.py:smoke"
  (tmp_path / "sft").mkdir()
  bad = _bench(config, f"--workdir={tmp_path}", "--checkpoint=best")
  assert bad.returncode != 0
  assert "--checkpoint='best'" in bad.stderr
  empty = tmp_path / "empty"
  empty.mkdir()
  bad = _bench(config, f"--workdir={empty}")
  assert bad.returncode != 0
  assert "has no SFT checkpoint" in bad.stderr
  assert "Traceback" not in bad.stderr
