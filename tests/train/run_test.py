"""Monitor alarms: warned once when they start, counted in the summary."""

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
