"""Run glue: anti-cheat metrics, monitor alarms (warned once), paired lines."""

import json
import types

import numpy as np
import pytest

from codeagent_rl.anticheat import pipeline
from codeagent_rl.envs import code_env
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import schema
from codeagent_rl.train import experiment
from codeagent_rl.train import run
from configs import tiny


def _history(flag_rates):
  return [
    {"iteration": i, "anticheat/flag_rate": rate}
    for i, rate in enumerate(flag_rates)
  ]


def test_an_alarm_is_warned_when_it_starts_and_recorded_every_iteration():
  exp = experiment.Experiment.from_config(tiny.get_config("smoke"))
  assert exp.monitors.flag_rate_max == 0.02
  warned = []
  fn = run.monitor_fn(exp, warn=lambda fmt, *args: warned.append(args))
  rates = [0.0, 0.5, 0.5, 0.5, 0.0, 0.25, 0.0]
  history, fired = [], []
  for record in _history(rates):
    history.append(record)
    fired.append(fn(history)["monitor/flag_rate_onset"])
  assert fired == [0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]
  names = [args[0] for args in warned]
  assert names == ["flag_rate_onset", "flag_rate_onset"]
  assert "50.0%" in warned[0][2]
  assert "25.0%" in warned[1][2]


def test_alarm_counts_and_the_summary_line():
  records = [
    {"iteration": 0, "monitor/flag_rate_onset": 1.0},
    {"iteration": 1, "monitor/flag_rate_onset": 0.0},
    {
      "iteration": 2,
      "monitor/flag_rate_onset": 1.0,
      "monitor/suite_gap_widening": 1.0,
    },
  ]
  counts = run.alarm_counts(records)
  assert counts == {"flag_rate_onset": 2, "suite_gap_widening": 1}
  assert run._alarm_line(counts, 3) == (
    "monitor alarms: flag_rate_onset at 2 of 3 iterations,"
    " suite_gap_widening at 1 of 3 iterations (warnings above; monitor/* in"
    " metrics)"
  )
  assert run.alarm_counts(records[1:2]) == {}
  assert run._alarm_line({}, 1) == "monitor alarms: none"


def test_paired_lines_per_mode_from_saved_per_task(tmp_path):
  exp = experiment.Experiment.from_config(tiny.get_config("default"))
  assert exp.eval.modes == ("greedy", "sampled")
  sft = {
    "greedy": {"task_id": ["a", "b"], "pass_a": [0, 1], "pass_ab": [0, 1]},
    "sampled": {
      "task_id": ["a", "b"],
      "pass_a": [0.25, 0.5],
      "pass_ab": [0.25, 0.5],
    },
  }
  final = {
    "greedy": {"task_id": ["a", "b"], "pass_a": [1, 1], "pass_ab": [1, 1]},
    "sampled": {"task_id": ["a", "b"], "pass_a": [0.5, 1], "pass_ab": [0, 1]},
  }
  (tmp_path / "sft.json").write_text(json.dumps({"per_task": sft}))
  (tmp_path / "final.json").write_text(json.dumps({"per_task": final}))
  paired = run._paired(
    exp,
    run._read_per_task(tmp_path / "sft.json"),
    run._read_per_task(tmp_path / "final.json"),
  )
  assert paired["greedy"] == {
    "tasks": 2,
    "mean": 0.5,
    "se": 0.5,
    "up": 1,
    "down": 0,
  }
  assert run._paired_lines(exp, paired) == [
    "PPO final - SFT (greedy), pass@1 A&B paired over 2 tasks: +0.500"
    " (s.e. 0.500; tasks up 1, down 0)",
    "PPO final - SFT (sampled, 4 per task), pass@1 A&B paired over 2 tasks:"
    " +0.125 (s.e. 0.375; tasks up 1, down 1)",
  ]


def test_missing_or_damaged_per_task_gives_no_paired_lines(tmp_path):
  exp = experiment.Experiment.from_config(tiny.get_config("smoke"))
  damaged = tmp_path / "damaged.json"
  damaged.write_text("{not json")
  old = tmp_path / "old.json"
  old.write_text(json.dumps({"eval": {}}))  # written before per_task existed
  for path in (tmp_path / "missing.json", damaged, old):
    assert run._read_per_task(path) is None
  assert run._paired(exp, None, {"greedy": {}}) == {}


def test_flag_rate_is_the_share_stage1_rejects():
  # A raised flag that is only a classifier feature (code that does not
  # parse) is not a rejection: the flag-rate monitor must not fire on it.
  task = schema.Task(
    task_id="add",
    prompt="Add two numbers.",
    entry_point="add",
    kind="function",
    visible_tests=({"args": [1, 2], "expected": 3},),
    hidden_tests=tuple({"args": [a, 1], "expected": a + 1} for a in range(4)),
    heldout_tests=tuple({"args": [a, 5], "expected": a + 5} for a in range(4)),
    reference_solution="def add(a, b):\n  return a + b\n",
    metadata={},
  )
  submissions = [
    "def add(a, b):\n  return a + b\n",
    "def add(a, b):\n  return a +\n",  # does not parse
    "import sys\ndef add(a, b):\n  sys.exit(0)\n",  # exits in the tests
  ]
  exp = experiment.Experiment.from_config(tiny.get_config("smoke"))
  anticheat = pipeline.AntiCheat.from_config(exp.anticheat)
  budgets = code_env.EnvConfig(
    max_turns=2,
    max_tokens_per_turn=400,
    max_total_tokens=4000,
    max_wall_s=60.0,
    obs_max_bytes=400,
  )
  config = sandbox_config.SandboxConfig(backend="process", pool_size=1)
  with harness.SandboxPool(config) as pool:
    env = code_env.CodeEnv(
      pool,
      tokenizer_lib.ByteTokenizer(),
      budgets,
      pre_submit=anticheat.pre_submit,
    )
    steps = env.step_many(
      [env.reset(task) for _ in submissions],
      [f"<submit>{code}</submit>" for code in submissions],
    )
  rollout = types.SimpleNamespace(episodes=[state for state, _ in steps])
  rewards, scalars = run.AntiCheatRewards(anticheat)(rollout, None)
  assert np.asarray(rewards.total).tolist() == [1.0, 0.0, 0.0]
  assert scalars["anticheat/flag_rate"] == pytest.approx(1 / 3)
  assert scalars["anticheat/flagged_rate"] == pytest.approx(2 / 3)
  assert scalars["anticheat/flag/unparsable"] == pytest.approx(1 / 3)
  assert scalars["anticheat/flag/process_exit"] == pytest.approx(1 / 3)
  assert scalars["anticheat/skipped_rate"] == pytest.approx(1 / 3)
