"""Tests of codeagent_rl/anticheat/monitors.py."""

import dataclasses
import math

import numpy as np
import pytest

from codeagent_rl.anticheat import monitors
from configs import common

CFG = monitors.MonitorConfig.from_config(common.get_monitor_config())
W = CFG.window


def normal_history(n, seed, noise=1.0, flag_rate=1 / 64):
  """A healthy run: pass rate rising, lengths steady, critic loss decaying.

  `noise` scales every metric's iteration-to-iteration noise; 1.0 is about
  what a 64-episode batch gives.
  """
  rng = np.random.default_rng(seed)
  t = np.arange(n)

  def jitter(std):
    return rng.normal(0.0, std * noise, n)

  pass_a = np.clip(0.2 + 0.4 * t / (n - 1) + jitter(0.04), 0, 1)
  suite_a = np.clip(pass_a + 0.15 + jitter(0.03), 0, 1)
  suite_b = np.clip(suite_a - 0.08 + jitter(0.03), 0, 1)
  columns = {
    "reward/pass_a": pass_a,
    "reward/pass_ab": pass_a * 0.8,
    "reward/suite_a": suite_a,
    "reward/suite_b": suite_b,
    # Agents get a little more efficient as they learn: slow, not sharp.
    "length/passing_turns": (6 - 2 * t / (n - 1)) * (1 + jitter(0.1)),
    "length/passing_tokens": 300 * (1 + jitter(0.15)),
    "code/chars_mean": 400 * (1 + jitter(0.15)),
    "loss/critic": (0.3 * np.exp(-t / 30) + 0.02) * np.exp(jitter(0.25)),
    "anticheat/flag_rate": rng.choice([0.0, flag_rate], n),
  }
  return [
    {"iteration": i, **{k: float(v[i]) for k, v in columns.items()}}
    for i in range(n)
  ]


def fired_at(history, cfg=CFG):
  """{monitor: first iteration it fired}, checking every prefix."""
  first = {}
  for k in range(1, len(history) + 1):
    for alarm in monitors.check(history[:k], cfg):
      assert alarm.iteration == history[k - 1]["iteration"]
      first.setdefault(alarm.name, alarm.iteration)
  return first


def with_column(history, key, values):
  return [{**row, key: v} for row, v in zip(history, values, strict=True)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("noise", [0.5, 1.0, 1.5])
def test_quiet_on_normal_histories(seed, noise):
  assert fired_at(normal_history(80, seed, noise)) == {}


def test_quiet_on_a_plateau_and_a_dip():
  history = normal_history(60, seed=7)
  # A plateau with a temporary dip and recovery of the pass rate.
  dip = [0.5] * 20 + [0.35] * 10 + [0.5] * 30
  history = with_column(history, "reward/pass_a", dip)
  assert fired_at(history) == {}


def test_pass_up_length_down_fires_after_a_shortcut():
  history = normal_history(60, seed=1)
  switch = 40
  # From `switch` on, passing trajectories get short while passing more.
  for row in history[switch:]:
    row["reward/pass_a"] += 0.25
    row["length/passing_turns"] = 1.0
    row["length/passing_tokens"] *= 0.3
  first = fired_at(history)
  assert set(first) == {"pass_up_length_down"}
  assert switch <= first["pass_up_length_down"] < switch + W
  (alarm,) = monitors.check(history[: switch + W], CFG)
  assert "length/passing_turns" in alarm.message
  assert "length/passing_tokens" in alarm.message


def test_pass_up_length_down_needs_both_signals():
  history = normal_history(60, seed=2)
  # A pass rate that has stopped rising (the normal history rises ~0.07 per
  # window, which counts as rising).
  history = with_column(history, "reward/pass_a", [0.4, 0.42] * 30)
  for row in history[40:]:
    row["length/passing_tokens"] *= 0.3  # shorter, but no more passing
  assert fired_at(history) == {}
  history = normal_history(60, seed=2)
  for row in history[40:]:
    row["reward/pass_a"] += 0.25  # more passing, same lengths
  assert fired_at(history) == {}
  # Tokens alone falling, with the pass rate rising, is enough.
  for row in history[40:]:
    row["length/passing_tokens"] *= 0.3
  assert set(fired_at(history)) == {"pass_up_length_down"}


def test_code_length_collapse_fires_on_a_slow_collapse():
  history = normal_history(80, seed=3)
  # 400 chars for 20 iterations, then down 2% per iteration.
  chars = [400.0] * 20 + [400.0 * 0.98**k for k in range(1, 61)]
  first = fired_at(with_column(history, "code/chars_mean", chars))
  assert set(first) == {"code_length_collapse"}
  # Fires once the last window's mean is below half the first window's.
  window_means = [np.mean(chars[i - W + 1 : i + 1]) for i in range(W, 80)]
  expected = W + next(i for i, m in enumerate(window_means) if m <= 200.0)
  assert first["code_length_collapse"] == expected


def test_critic_loss_oscillation_fires():
  history = normal_history(40, seed=4)
  loss = [r["loss/critic"] for r in history]
  loss[25:] = [0.03, 0.3] * 7 + [0.03]
  first = fired_at(with_column(history, "loss/critic", loss))
  assert set(first) == {"critic_loss_oscillation"}
  # Reversals at 25 (the loss fell ~5x into it from 0.15), 26, 27, 28: the
  # fourth is complete with iteration 29's loss.
  assert loss[24] / loss[25] > CFG.osc_ratio
  assert first["critic_loss_oscillation"] == 29


def test_critic_loss_decaying_fast_is_not_oscillation():
  history = normal_history(40, seed=5)
  loss = [1.0 / 3.5**k for k in range(40)]  # big moves, one direction
  assert fired_at(with_column(history, "loss/critic", loss)) == {}


def test_flag_rate_onset_fires_on_the_first_step_above_2_percent():
  history = normal_history(30, seed=6, flag_rate=0.0)
  rates = [0.0] * 12 + [0.02] * 3 + [0.05] + [0.0] * 14
  history = with_column(history, "anticheat/flag_rate", rates)
  assert fired_at(history) == {"flag_rate_onset": 15}
  assert monitors.check(history[:15], CFG) == []  # exactly 2% is allowed
  (alarm,) = monitors.check(history[:16], CFG)
  assert "5.0%" in alarm.message
  assert monitors.check(history, CFG) == []  # quiet again once it drops


def test_suite_gap_widening_fires_on_slow_overfitting():
  history = normal_history(80, seed=8)
  # Suite A keeps improving, suite B stalls: the gap widens 0.006 a step.
  for i, row in enumerate(history):
    row["reward/suite_a"] = 0.4 + 0.006 * i
    row["reward/suite_b"] = 0.35
  first = fired_at(history)
  assert set(first) == {"suite_gap_widening"}
  # Window means differ by 0.006 * (k - 9) when the last window ends at k:
  # >= 0.1 from k = 26 on.
  assert first["suite_gap_widening"] == 26


def test_short_histories_stay_quiet():
  history = normal_history(2 * W - 1, seed=9)
  for row in history[W:]:
    row["reward/pass_a"] += 0.4
    row["length/passing_turns"] = 1.0
    row["code/chars_mean"] = 10.0
    row["reward/suite_b"] = 0.0
  assert fired_at(history) == {}
  assert monitors.check([], CFG) == []


def test_missing_keys_and_none_are_tolerated():
  history = [{"iteration": i} for i in range(30)]
  assert fired_at(history) == {}
  history = [{} for _ in range(30)]  # no iteration either: use the index
  assert monitors.check(history, CFG) == []
  history = normal_history(30, seed=10)
  assert fired_at(with_column(history, "loss/critic", [None] * 30)) == {}
  history[-1]["anticheat/flag_rate"] = 0.5
  del history[-1]["iteration"]
  (alarm,) = monitors.check(history, CFG)
  assert alarm.iteration == 29


def test_nan_handling():
  history = normal_history(80, seed=11)
  for i, row in enumerate(history):
    row["reward/suite_a"] = 0.4 + 0.005 * i
    row["reward/suite_b"] = 0.35
  clean = fired_at(history)["suite_gap_widening"]
  # NaN in fewer than half of a window's values: the window mean uses the
  # rest, and the alarm still fires.
  for row in history[::4]:
    row["reward/suite_a"] = math.nan
  assert set(fired_at(history)) == {"suite_gap_widening"}
  assert abs(fired_at(history)["suite_gap_widening"] - clean) <= 2
  # A last window that is mostly NaN says nothing: quiet.
  for row in history[-W:][: W // 2 + 1]:
    row["reward/suite_b"] = math.nan
  assert monitors.check(history, CFG) == []
  # NaN critic losses break reversals instead of counting as moves.
  loss = [0.03, 0.3] * 20
  loss[30::2] = [math.nan] * 5
  history = with_column(normal_history(40, seed=12), "loss/critic", loss)
  assert "critic_loss_oscillation" not in {
    a.name for a in monitors.check(history, CFG)
  }
  # A NaN flag rate is not above the threshold.
  history[-1]["anticheat/flag_rate"] = math.nan
  assert monitors.check(history, CFG) == []


def test_bad_history_values_are_named():
  history = normal_history(30, seed=13)
  history[1]["loss/critic"] = "0.3"
  with pytest.raises(ValueError, match=r"history\[1\]\['loss/critic'\]"):
    monitors.check(history, CFG)
  with pytest.raises(ValueError, match=r"history\[0\]: expected a dict"):
    monitors.check([[1, 2]], CFG)


def test_alarm_metrics_report_every_monitor():
  history = normal_history(30, seed=14)
  history[-1]["anticheat/flag_rate"] = 0.5
  alarms = monitors.check(history, CFG)
  values = monitors.alarm_metrics(alarms)
  assert values == {
    "monitor/pass_up_length_down": 0.0,
    "monitor/code_length_collapse": 0.0,
    "monitor/critic_loss_oscillation": 0.0,
    "monitor/flag_rate_onset": 1.0,
    "monitor/suite_gap_widening": 0.0,
  }
  assert monitors.alarm_metrics([], ["flag_rate_onset"]) == {
    "monitor/flag_rate_onset": 0.0
  }
  with pytest.raises(ValueError, match="flag_rate_onset"):
    monitors.alarm_metrics(alarms, ["code_length_collapse"])


@pytest.mark.parametrize(
  "field, value",
  [
    ("window", 0),
    ("window", 2.0),
    ("osc_window", 2),
    ("osc_min_reversals", 9),
    ("osc_min_reversals", 0),
    ("length_drop", 1.0),
    ("code_drop", 0.0),
    ("flag_rate_max", -0.1),
    ("pass_rise", 0.0),
    ("gap_widen", math.nan),
    ("osc_ratio", 1.0),
    ("window", True),
  ],
)
def test_bad_config_values_name_the_field(field, value):
  with pytest.raises(ValueError, match=rf"monitors\.{field}={value!r}"):
    dataclasses.replace(CFG, **{field: value})


def test_config_fields_are_checked():
  section = common.get_monitor_config().to_dict()
  section["windw"] = 3
  with pytest.raises(ValueError, match=r"unknown fields \['windw'\]"):
    monitors.MonitorConfig.from_config(section)
  del section["windw"], section["gap_widen"]
  with pytest.raises(ValueError, match=r"missing fields \['gap_widen'\]"):
    monitors.MonitorConfig.from_config(section)


def _flag_rates(rates):
  return [
    {"iteration": i, "anticheat/flag_rate": rate}
    for i, rate in enumerate(rates)
  ]


def test_watcher_warns_when_an_alarm_starts_and_records_every_iteration():
  assert CFG.flag_rate_max == 0.02
  warned = []
  watcher = monitors.Watcher(CFG, warn=lambda fmt, *args: warned.append(args))
  rates = [0.0, 0.5, 0.5, 0.5, 0.0, 0.25, 0.0]
  history, fired = [], []
  for record in _flag_rates(rates):
    history.append(record)
    metrics = watcher(history)
    assert set(metrics) == {f"monitor/{n}" for n in monitors.MONITOR_NAMES}
    fired.append(metrics["monitor/flag_rate_onset"])
  assert fired == [0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]
  names = [args[0] for args in warned]
  assert names == ["flag_rate_onset", "flag_rate_onset"]
  assert "50.0%" in warned[0][2]
  assert "25.0%" in warned[1][2]


def test_a_new_watcher_warns_about_an_alarm_already_firing():
  # After a resume the process starts a new watcher: the first alarm is news.
  history = _flag_rates([0.5, 0.5])
  warned = []
  first = monitors.Watcher(CFG, warn=lambda fmt, *args: warned.append(args))
  first(history[:1])
  first(history)
  monitors.Watcher(CFG, warn=lambda fmt, *args: warned.append(args))(history)
  assert [args[0] for args in warned] == ["flag_rate_onset"] * 2


def test_alarm_counts():
  records = [
    {"iteration": 0, "monitor/flag_rate_onset": 1.0},
    {"iteration": 1, "monitor/flag_rate_onset": 0.0},
    {
      "iteration": 2,
      "monitor/flag_rate_onset": 1.0,
      "monitor/suite_gap_widening": 1.0,
    },
  ]
  assert monitors.alarm_counts(records) == {
    "flag_rate_onset": 2,
    "suite_gap_widening": 1,
  }
  assert monitors.alarm_counts(records[1:2]) == {}
  assert monitors.alarm_counts([]) == {}
