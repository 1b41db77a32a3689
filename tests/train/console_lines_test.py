"""Tests of codeagent_rl/train/console_lines.py."""

import math
import textwrap

import pytest

from codeagent_rl.train import console_lines

FULL = {
  "reward/total_mean": 0.4123,
  "reward/pass_a": 0.5,
  "reward/pass_ab": 0.375,
  "kl/ref_mean": 0.0123,
  "loss/critic": 0.0451,
  "policy/clip_frac": 0.081,
  "perf/tokens_per_s": 1234.4,
  "time/sandbox_wait_share": 0.234,
}


def test_progress_line_shows_every_field_and_eta():
  # 13 iterations in 130 s: 10 s each, 187 left.
  line = console_lines.format_progress(12, 200, FULL, elapsed_s=130.0)
  assert line == (
    "it  13/200 | reward  0.412 | pass A 0.500 A&B 0.375 | KL 1.23e-02"
    " | critic 4.51e-02 | clip 0.081 | tok/s    1234 | sandbox  23%"
    " | elapsed 2m10s | ETA 31m10s"
  )


def test_progress_line_eta_counts_iterations_since_resume():
  line = console_lines.format_progress(
    149, 200, FULL, elapsed_s=100.0, start_iteration=100
  )
  # 50 iterations in 100 s, 50 left.
  assert line.endswith("| ETA 1m40s")
  assert "it 150/200" in line


def test_progress_line_with_missing_and_bad_values():
  scalars = {"reward/total_mean": math.nan, "loss/critic": None}
  line = console_lines.format_progress(0, 10, scalars, elapsed_s=math.nan)
  assert "reward    nan" in line
  assert "critic        -" in line
  assert "pass A     - A&B     -" in line
  assert line.endswith("| elapsed - | ETA -")
  # Fixed widths: the line is as long as a full one.
  full = console_lines.format_progress(0, 10, FULL, elapsed_s=1.0)
  assert line.index("| KL") == full.index("| KL")
  assert line.index("| sandbox") == full.index("| sandbox")


def test_sft_progress_line_and_its_eta_after_a_resume():
  scalars = {
    "sft/loss": 0.14171,
    "sft/token_accuracy": 0.9541,
    "sft/steps_per_s": 2.63,
  }
  # 250 steps in 95 s: 1050 left at 0.38 s each.
  assert console_lines.format_sft_progress(250, 1300, scalars, 95.0) == (
    "SFT  250/1300 | loss 0.1417 | token acc 0.954 | 2.6 steps/s"
    " | elapsed 1m35s | ETA 6m39s"
  )
  # Resumed at 1000: 50 steps in 20 s, 250 left.
  line = console_lines.format_sft_progress(
    1050, 1300, scalars, 20.0, start_step=1000
  )
  assert line.endswith("| elapsed 20s | ETA 1m40s")
  bad = console_lines.format_sft_progress(
    5, 10, {"sft/loss": math.inf}, elapsed_s=math.nan
  )
  assert bad == (
    "SFT  5/10 | loss inf | token acc - | - steps/s | elapsed - | ETA -"
  )


@pytest.mark.parametrize(
  "seconds, text",
  [(0, "0s"), (59.4, "59s"), (60, "1m00s"), (3599, "59m59s"), (7500, "2h05m")],
)
def test_format_duration(seconds, text):
  assert console_lines.format_duration(seconds) == text


def test_summary_table():
  table = console_lines.format_summary(
    [("SFT", 0.25, 0.125), ("PPO final", 0.5, None)],
    {"checkpoint": "/w/checkpoints/200", "metrics": "/w/metrics.jsonl"},
  )
  assert table == textwrap.dedent(
    """\
    stage        pass@1 A  pass@1 A&B
    ---------  ----------  ----------
    SFT             0.250       0.125
    PPO final       0.500           -

    checkpoint: /w/checkpoints/200
    metrics:    /w/metrics.jsonl"""
  )
  lines = table.splitlines()
  assert len({len(line) for line in lines[:4]}) == 1


def test_summary_notes_go_between_table_and_locations():
  table = console_lines.format_summary(
    [("SFT", 0.25, 0.125)], {"metrics": "/w/m.jsonl"}, ["a note", "another"]
  )
  assert table.splitlines()[3:] == [
    "a note",
    "another",
    "",
    "metrics: /w/m.jsonl",
  ]


def test_summary_rejects_bad_rows():
  with pytest.raises(ValueError, match="expected \\(stage, pass@1 A"):
    console_lines.format_summary([("SFT", 0.25)])
