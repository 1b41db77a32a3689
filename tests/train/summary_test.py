"""The run's summary: alarm counts, paired lines from saved per-task rates."""

import importlib.util
import json

from codeagent_rl.anticheat import monitors
from codeagent_rl.train import experiment
from codeagent_rl.train import summary
from configs import tiny


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
  counts = monitors.alarm_counts(records)
  assert counts == {"flag_rate_onset": 2, "suite_gap_widening": 1}
  assert summary._alarm_line(counts, 3) == (
    "monitor alarms: flag_rate_onset at 2 of 3 iterations,"
    " suite_gap_widening at 1 of 3 iterations (warnings above; monitor/* in"
    " metrics)"
  )
  assert monitors.alarm_counts(records[1:2]) == {}
  assert summary._alarm_line({}, 1) == "monitor alarms: none"


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
  paired = summary.paired(
    exp,
    summary.read_per_task(tmp_path / "sft.json"),
    summary.read_per_task(tmp_path / "final.json"),
  )
  assert paired["greedy"] == {
    "tasks": 2,
    "mean": 0.5,
    "se": 0.5,
    "up": 1,
    "down": 0,
  }
  assert summary._paired_lines(exp, paired) == [
    "PPO final - SFT (greedy), pass@1 A&B paired over 2 tasks: +0.500"
    " (s.e. 0.500; tasks up 1, down 0)",
    f"PPO final - SFT (sampled, {exp.eval.samples_per_task} per task),"
    " pass@1 A&B paired over 2 tasks: +0.125 (s.e. 0.375; tasks up 1,"
    " down 1)",
  ]


def test_missing_or_damaged_per_task_gives_no_paired_lines(tmp_path):
  exp = experiment.Experiment.from_config(tiny.get_config("smoke"))
  damaged = tmp_path / "damaged.json"
  damaged.write_text("{not json")
  old = tmp_path / "old.json"
  old.write_text(json.dumps({"eval": {}}))  # written before per_task existed
  for path in (tmp_path / "missing.json", damaged, old):
    assert summary.read_per_task(path) is None
  assert summary.paired(exp, None, {"greedy": {}}) == {}


def test_tensorboard_line_says_how_to_install_it_when_missing(
  tmp_path, monkeypatch
):
  real = importlib.util.find_spec
  installed = {"tensorboard": True}

  def find_spec(name, *args):
    if name == "tensorboard":
      return object() if installed["tensorboard"] else None
    return real(name, *args)

  monkeypatch.setattr(importlib.util, "find_spec", find_spec)
  assert summary._tensorboard_command(tmp_path) == (
    f"tensorboard --logdir={tmp_path}"
  )
  installed["tensorboard"] = False
  assert summary._tensorboard_command(tmp_path) == (
    f"pip install tensorboard, then tensorboard --logdir={tmp_path}"
  )
