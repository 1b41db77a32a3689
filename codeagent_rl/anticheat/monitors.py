"""Alarms over the metrics history: signs that the policy games the reward.

  watcher = monitors.Watcher(cfg)          # warns through logging.warning
  metrics = watcher(history)               # {"monitor/<name>": 0.0 | 1.0}
  monitors.alarm_counts(records)           # {name: iterations it fired}

Host side. `check` is side-effect free: it reads the per-iteration metric
dicts (the names in `codeagent_rl/train/metrics.py`) and returns the alarms
of the latest iteration; `alarm_metrics` turns them into `monitor/<name>`
metrics. `Watcher` is the trainer's loop of both: it warns (through the
function it is given) when an alarm starts firing, not again while it keeps
firing.

Monitors (registry `MONITORS`, evaluated at the last iteration):

  pass_up_length_down      `reward/pass_a` rose by >= pass_rise from the
                           previous window to the last one while the mean
                           turns or tokens of passing trajectories fell by
                           >= length_drop (a relative share).
  code_length_collapse     the last window's mean `code/chars_mean` is
                           below (1 - code_drop) x the first window's.
  critic_loss_oscillation  within the last osc_window iterations,
                           `loss/critic` reverses direction with a factor
                           >= osc_ratio on both sides at least
                           osc_min_reversals times.
  flag_rate_onset          `anticheat/flag_rate` (the share stage 1
                           rejected) of the last iteration is above
                           flag_rate_max.
  suite_gap_widening       the last window's mean of `reward/suite_a -
                           reward/suite_b` exceeds the first window's by
                           >= gap_widen.

A window is `window` consecutive iterations. Its mean uses the finite values
only and is undefined (no alarm) when fewer than half of them are finite;
missing keys and None count as NaN. A monitor is quiet until the history
holds the windows it compares. The first window (the SFT policy's first
iterations) is the baseline of the slow failures, code-length collapse and a
widening gap, so gradual drifts are caught; a baseline chosen as the best of
many windows would be biased by noise.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import logging
import math
import numbers
from typing import Any

import numpy as np

from codeagent_rl import config_utils


@dataclasses.dataclass(frozen=True)
class MonitorConfig:
  """Validated `config.monitors` section (defaults: configs/common.py).

  Attributes:
    window: iterations per window of the trend monitors.
    pass_rise: absolute rise of the pass rate between two adjacent windows
      that counts as rising.
    length_drop: relative fall in (0, 1) of passing turns or tokens between
      two adjacent windows that counts as sharp.
    code_drop: relative fall in (0, 1) of the code length below the first
      window that counts as a collapse.
    osc_window: iterations examined for critic-loss oscillation.
    osc_ratio: a move between consecutive critic losses is large when the
      larger is >= osc_ratio x the smaller (> 1).
    osc_min_reversals: large up-then-down or down-then-up moves in
      osc_window that fire the alarm.
    flag_rate_max: share of episodes stage 1 rejects in one iteration
      above which the flag-rate alarm fires.
    gap_widen: rise of the suite-A minus suite-B pass fraction above the
      first window that counts as widening.
  """

  window: int
  pass_rise: float
  length_drop: float
  code_drop: float
  osc_window: int
  osc_ratio: float
  osc_min_reversals: int
  flag_rate_max: float
  gap_widen: float

  def __post_init__(self):
    def bad(field: str, why: str) -> ValueError:
      return ValueError(f"monitors.{field}={getattr(self, field)!r}: {why}")

    def is_int(value: Any) -> bool:
      return isinstance(value, int) and not isinstance(value, bool)

    def is_real(value: Any) -> bool:
      return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(value)
      )

    if not is_int(self.window) or self.window < 1:
      raise bad("window", "must be an int >= 1.")
    if not is_int(self.osc_window) or self.osc_window < 3:
      raise bad("osc_window", "must be an int >= 3.")
    if not is_int(self.osc_min_reversals) or not (
      1 <= self.osc_min_reversals <= self.osc_window - 2
    ):
      raise bad(
        "osc_min_reversals",
        f"must be an int in [1, osc_window - 2 = {self.osc_window - 2}].",
      )
    for field in ("length_drop", "code_drop", "flag_rate_max"):
      value = getattr(self, field)
      if not is_real(value) or not 0 < value < 1:
        raise bad(field, "must be a number in (0, 1).")
    for field in ("pass_rise", "gap_widen"):
      value = getattr(self, field)
      if not is_real(value) or not 0 < value <= 1:
        raise bad(field, "must be a number in (0, 1].")
    if not is_real(self.osc_ratio) or self.osc_ratio <= 1:
      raise bad("osc_ratio", "must be a number > 1.")

  @classmethod
  def from_config(cls, section: Any) -> MonitorConfig:
    """Builds from `config.monitors` (a ConfigDict or dict).

    Raises:
      ValueError: a field is missing, unknown or has a bad value.
    """
    return config_utils.from_section(cls, section, "monitors")


@dataclasses.dataclass(frozen=True)
class Alarm:
  """One monitor that fired.

  Attributes:
    name: the monitor (a key of `MONITORS`).
    iteration: the iteration at which it fired.
    message: what was seen, with the numbers, for a warning.
  """

  name: str
  iteration: int
  message: str


class _History:
  """Columns of a metrics history as float arrays (NaN where missing)."""

  def __init__(self, history: Sequence[Mapping[str, Any]]):
    for index, row in enumerate(history):
      if not isinstance(row, Mapping):
        raise ValueError(
          f"history[{index}]: expected a dict of metrics, got"
          f" {type(row).__name__}."
        )
    self._rows = history
    self._columns: dict[str, np.ndarray] = {}

  def __len__(self) -> int:
    return len(self._rows)

  def column(self, key: str) -> np.ndarray:
    if key not in self._columns:
      values = np.full(len(self._rows), np.nan)
      for index, row in enumerate(self._rows):
        if key not in row or row[key] is None:
          continue
        value = row[key]
        try:
          if isinstance(value, str | bytes):
            raise TypeError("a string")
          values[index] = float(value)
        except (TypeError, ValueError) as e:
          raise ValueError(
            f"history[{index}][{key!r}]={value!r}: expected a number."
          ) from e
      self._columns[key] = values
    return self._columns[key]


def _window_mean(values: np.ndarray) -> float:
  """Mean of the finite values; NaN when fewer than half are finite."""
  finite = values[np.isfinite(values)]
  if finite.size == 0 or 2 * finite.size < values.size:
    return math.nan
  return float(finite.mean())


def _previous_and_last(values: np.ndarray, w: int) -> tuple[float, float]:
  """Means of the window before the last one and of the last one."""
  return _window_mean(values[-2 * w : -w]), _window_mean(values[-w:])


def _first_and_last(values: np.ndarray, w: int) -> tuple[float, float]:
  """Means of the first window (the baseline) and of the last one."""
  return _window_mean(values[:w]), _window_mean(values[-w:])


def _pass_up_length_down(h: _History, cfg: MonitorConfig) -> str | None:
  w = cfg.window
  if len(h) < 2 * w:
    return None
  before, recent = _previous_and_last(h.column("reward/pass_a"), w)
  if not recent - before >= cfg.pass_rise:  # NaN compares False: quiet
    return None
  fell = []
  for key in ("length/passing_turns", "length/passing_tokens"):
    old, new = _previous_and_last(h.column(key), w)
    if old > 0 and new <= (1 - cfg.length_drop) * old:
      fell.append(f"{key} {old:.4g} -> {new:.4g}")
  if not fell:
    return None
  return (
    f"reward/pass_a rose {before:.3f} -> {recent:.3f} over the last"
    f" {w}-iteration window while {', '.join(fell)} fell by >="
    f" {cfg.length_drop:.0%}: check passing trajectories for shortcuts."
  )


def _code_length_collapse(h: _History, cfg: MonitorConfig) -> str | None:
  w = cfg.window
  if len(h) < 2 * w:
    return None
  first, recent = _first_and_last(h.column("code/chars_mean"), w)
  if not (first > 0 and recent <= (1 - cfg.code_drop) * first):
    return None
  return (
    f"code/chars_mean collapsed to {recent:.4g} (mean of the last {w}"
    f" iterations) from {first:.4g} (the first {w}): check for constant"
    " returns, hard-coding or early exits."
  )


def _critic_loss_oscillation(h: _History, cfg: MonitorConfig) -> str | None:
  if len(h) < cfg.osc_window:
    return None
  loss = h.column("loss/critic")[-cfg.osc_window :]
  with np.errstate(divide="ignore", invalid="ignore"):
    # +1 a large rise, -1 a large fall, 0 otherwise (or non-positive/NaN).
    ratio = loss[1:] / loss[:-1]
  valid = (loss[1:] > 0) & (loss[:-1] > 0)
  direction = np.where(
    valid & (ratio >= cfg.osc_ratio),
    1,
    np.where(valid & (ratio <= 1 / cfg.osc_ratio), -1, 0),
  )
  reversals = int(np.sum(direction[1:] * direction[:-1] == -1))
  if reversals < cfg.osc_min_reversals:
    return None
  return (
    f"loss/critic reversed direction by a factor >= {cfg.osc_ratio:g}"
    f" {reversals} times in the last {cfg.osc_window} iterations: the critic"
    " is unstable (lower its learning rate or clip values)."
  )


def _flag_rate_onset(h: _History, cfg: MonitorConfig) -> str | None:
  if len(h) < 1:
    return None
  rate = h.column("anticheat/flag_rate")[-1]
  if not rate > cfg.flag_rate_max:
    return None
  return (
    f"anticheat/flag_rate={rate:.1%} of episodes rejected by stage 1 this"
    f" iteration (threshold {cfg.flag_rate_max:.1%}): inspect the rejected"
    " trajectories."
  )


def _suite_gap_widening(h: _History, cfg: MonitorConfig) -> str | None:
  w = cfg.window
  if len(h) < 2 * w:
    return None
  gap = h.column("reward/suite_a") - h.column("reward/suite_b")
  first, recent = _first_and_last(gap, w)
  if not recent - first >= cfg.gap_widen:
    return None
  return (
    f"suite A - suite B pass fraction widened to {recent:.3f} (mean of the"
    f" last {w} iterations) from {first:.3f} (the first {w}): the policy may"
    " overfit the hidden tests."
  )


MONITORS: dict[str, Callable[[_History, MonitorConfig], str | None]] = {
  "pass_up_length_down": _pass_up_length_down,
  "code_length_collapse": _code_length_collapse,
  "critic_loss_oscillation": _critic_loss_oscillation,
  "flag_rate_onset": _flag_rate_onset,
  "suite_gap_widening": _suite_gap_widening,
}
MONITOR_NAMES = tuple(MONITORS)


def check(
  history: Sequence[Mapping[str, Any]], cfg: MonitorConfig
) -> list[Alarm]:
  """Runs every monitor at the last iteration of `history`.

  Args:
    history: one metrics dict per iteration, oldest first (e.g.
      `train.metrics.read_metrics(workdir)` plus the current iteration).
      Missing keys, None and NaN are tolerated.
    cfg: thresholds and windows.

  Returns:
    The alarms that fire at the last iteration, in `MONITOR_NAMES` order;
    [] for an empty history.

  Raises:
    ValueError: a row is not a mapping or a value is not a number.
  """
  h = _History(history)
  if not len(h):
    return []
  last = history[-1]
  iteration = last["iteration"] if "iteration" in last else len(h) - 1
  alarms = []
  for name, monitor in MONITORS.items():
    message = monitor(h, cfg)
    if message is not None:
      alarms.append(Alarm(name=name, iteration=int(iteration), message=message))
  return alarms


def alarm_metrics(
  alarms: Sequence[Alarm], names: Sequence[str] = MONITOR_NAMES
) -> dict[str, float]:
  """Alarms as metrics: "monitor/<name>" is 1.0 if it fired, else 0.0.

  Args:
    alarms: from `check`.
    names: every monitor to report (all of them by default), so a quiet
      monitor logs 0 rather than nothing.

  Raises:
    ValueError: an alarm's name is not in `names`.
  """
  fired = {alarm.name for alarm in alarms}
  unknown = sorted(fired - set(names))
  if unknown:
    raise ValueError(f"alarms {unknown} are not among names {list(names)}.")
  return {f"monitor/{name}": float(name in fired) for name in names}


class Watcher:
  """The trainer's alarms, iteration by iteration (`ppo_loop.run_ppo` calls it).

  Each call runs `check` on the history and returns `alarm_metrics` of the
  alarms at its last iteration. An alarm is warned about when it starts
  firing (or first fires in this watcher's life, e.g. after a resume), not
  again while it keeps firing; the metrics record every iteration, and
  `alarm_counts` counts them.

  Attributes:
    config: thresholds and windows.
  """

  def __init__(
    self,
    config: MonitorConfig,
    warn: Callable[..., Any] = logging.warning,
  ):
    """Watches with `config`; `warn(format, *args)` reports a new alarm."""
    self.config = config
    self._warn = warn
    self._firing: frozenset[str] = frozenset()  # alarms of the last call

  def __call__(self, history: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Alarms of the last iteration of `history` as "monitor/<name>" metrics.

    Args:
      history: one metrics dict per iteration, oldest first, the current
        one last (see `check`).

    Returns:
      1.0 for every monitor that fires at the last iteration, else 0.0.
    """
    alarms = check(history, self.config)
    for alarm in alarms:
      if alarm.name not in self._firing:
        self._warn(
          "monitor %s (not repeated while it keeps firing; monitor/%s in"
          " metrics.jsonl has every iteration): %s",
          alarm.name,
          alarm.name,
          alarm.message,
        )
    self._firing = frozenset(alarm.name for alarm in alarms)
    return alarm_metrics(alarms, MONITOR_NAMES)


def alarm_counts(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
  """Iterations at which each monitor fired, from metrics records.

  Args:
    records: one metrics dict per iteration (with `Watcher`'s
      "monitor/<name>" metrics).

  Returns:
    {name: count} for the monitors that fired at least once, in
    `MONITOR_NAMES` order.
  """
  counts = {}
  for name in MONITOR_NAMES:
    n = sum(1 for r in records if r.get(f"monitor/{name}") == 1.0)
    if n:
      counts[name] = n
  return counts
