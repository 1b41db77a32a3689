"""The console lines of a run: progress with ETA, and the end-of-run table.

Pure string formatting of the scalars `metrics.MetricsWriter` records (the
metric names are its docstring's contract); nothing here writes a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import math
import numbers
from typing import Any

# (label, metric key, format) of the progress line, in order.
_PROGRESS_FIELDS = (
  ("reward", "reward/total_mean", "{:6.3f}"),
  ("pass A", "reward/pass_a", "{:5.3f}"),
  ("A&B", "reward/pass_ab", "{:5.3f}"),
  ("KL", "kl/ref_mean", "{:8.2e}"),
  ("critic", "loss/critic", "{:8.2e}"),
  ("clip", "policy/clip_frac", "{:5.3f}"),
  ("tok/s", "perf/tokens_per_s", "{:7.0f}"),
  ("sandbox", "time/sandbox_wait_share", "{:4.0%}"),
)


def _format_value(scalars: Mapping[str, Any], key: str, fmt: str) -> str:
  width = len(fmt.format(0.0))
  value = scalars.get(key)  # a metric the iteration did not produce is "-"
  if value is None:
    return "-".rjust(width)
  try:
    value = float(value)
  except (TypeError, ValueError):
    return "?".rjust(width)
  if not math.isfinite(value):
    return str(value).rjust(width)
  return fmt.format(value)


def format_duration(seconds: float) -> str:
  """Formats seconds as "45s", "12m05s" or "3h07m"; "-" when not finite."""
  if not isinstance(seconds, numbers.Real) or not math.isfinite(seconds):
    return "-"
  seconds = max(round(seconds), 0)
  if seconds < 60:
    return f"{seconds}s"
  if seconds < 3600:
    return f"{seconds // 60}m{seconds % 60:02d}s"
  return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def format_progress(
  iteration: int,
  num_iterations: int,
  scalars: Mapping[str, Any],
  elapsed_s: float,
  *,
  start_iteration: int = 0,
) -> str:
  """One console line for a finished iteration.

  Args:
    iteration: 0-based index of the iteration just finished (as in
      metrics.jsonl); the line shows `iteration + 1` of `num_iterations`.
    num_iterations: iterations of the whole run.
    scalars: the iteration's metrics (module docstring); a missing key
      prints as "-", a non-finite value as "nan"/"inf".
    elapsed_s: wall seconds since this process started iterating (at
      `start_iteration`).
    start_iteration: the first iteration of this process (after a resume),
      so the ETA uses only iterations timed here.

  Returns:
    e.g. "it   13/200 | reward  0.412 | pass A 0.500 A&B 0.375 | ...
    | ETA 12m34s".
  """
  done = iteration + 1
  width = len(str(num_iterations))
  parts = [f"it {done:>{width}}/{num_iterations}"]
  pieces = [
    f"{label} {_format_value(scalars, key, fmt)}"
    for label, key, fmt in _PROGRESS_FIELDS
  ]
  parts += [pieces[0], " ".join(pieces[1:3]), *pieces[3:]]
  timed = done - start_iteration
  eta = math.nan
  if timed > 0 and isinstance(elapsed_s, numbers.Real) and elapsed_s >= 0:
    eta = elapsed_s / timed * max(num_iterations - done, 0)
  parts.append(f"elapsed {format_duration(elapsed_s)}")
  parts.append(f"ETA {format_duration(eta)}")
  return " | ".join(parts)


def format_sft_progress(
  step: int,
  num_steps: int,
  scalars: Mapping[str, Any],
  elapsed_s: float,
  *,
  start_step: int = 0,
) -> str:
  """One console line for SFT's progress, with an ETA as `format_progress`.

  Args:
    step: optimiser steps done (1-based, as in "SFT 250/1300").
    num_steps: `sft.steps`.
    scalars: "sft/loss", "sft/token_accuracy", "sft/steps_per_s" ("-" when
      missing).
    elapsed_s: wall seconds since this process started at `start_step`.
    start_step: the first step of this process (after a resume), so the ETA
      uses only steps timed here.

  Returns:
    e.g. "SFT  250/1300 | loss 0.1417 | token acc 0.954 | 2.6 steps/s |
    elapsed 1m35s | ETA 6m40s".
  """
  width = len(str(num_steps))
  timed = step - start_step
  eta = math.nan
  if timed > 0 and isinstance(elapsed_s, numbers.Real) and elapsed_s >= 0:
    eta = elapsed_s / timed * max(num_steps - step, 0)
  return " | ".join(
    [
      f"SFT {step:>{width}}/{num_steps}",
      f"loss {_format_value(scalars, 'sft/loss', '{:.4f}').strip()}",
      "token acc"
      f" {_format_value(scalars, 'sft/token_accuracy', '{:.3f}').strip()}",
      f"{_format_value(scalars, 'sft/steps_per_s', '{:.1f}').strip()} steps/s",
      f"elapsed {format_duration(elapsed_s)}",
      f"ETA {format_duration(eta)}",
    ]
  )


def format_summary(
  rows: Sequence[tuple[str, Any, Any]],
  locations: Mapping[str, str] | None = None,
  notes: Sequence[str] = (),
) -> str:
  """The end-of-run table: pass@1 per stage, notes, then where things are.

  Args:
    rows: (stage, pass@1 on suite A, pass@1 on A-and-B) per line, e.g.
      [("SFT", 0.25, 0.125), ("PPO final", 0.5, 0.375)]; None prints "-".
    locations: label -> path lines printed under the table, e.g.
      {"checkpoint": ".../checkpoints/200", "metrics": ".../metrics.jsonl"}.
    notes: lines printed right under the table, before the locations.

  Returns:
    A plain-text table with fixed column widths (no trailing newline).
  """
  header = ("stage", "pass@1 A", "pass@1 A&B")
  stage_width = max([len(header[0])] + [len(str(row[0])) for row in rows])
  number_width = max(len(header[1]), len(header[2]))

  def cell(value: Any) -> str:
    if value is None:
      return "-".rjust(number_width)
    value = float(value)
    if not math.isfinite(value):
      return str(value).rjust(number_width)
    return f"{value:{number_width}.3f}"

  lines = [
    f"{header[0]:<{stage_width}}  {header[1]:>{number_width}}"
    f"  {header[2]:>{number_width}}",
    f"{'-' * stage_width}  {'-' * number_width}  {'-' * number_width}",
  ]
  for row in rows:
    if len(row) != 3:
      raise ValueError(
        f"summary row {row!r}: expected (stage, pass@1 A, pass@1 A&B)."
      )
    stage, pass_a, pass_ab = row
    lines.append(
      f"{str(stage):<{stage_width}}  {cell(pass_a)}  {cell(pass_ab)}"
    )
  lines += list(notes)
  if locations:
    label_width = max(len(label) for label in locations)
    lines.append("")
    lines += [
      f"{label + ':':<{label_width + 1}} {path}"
      for label, path in locations.items()
    ]
  return "\n".join(lines)
