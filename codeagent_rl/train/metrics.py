"""Metrics of the learner loop: metrics.jsonl, TensorBoard, console lines.

`MetricsWriter` keeps one record per iteration and writes it to two places in
the workdir: `metrics.jsonl` (one JSON object per line, with `iteration` and
every scalar) and TensorBoard event files under `tensorboard/`
(`tensorboard --logdir=WORKDIR` finds them). A line is flushed and fsynced
when it is committed, so a killed run loses no committed line; a resumed run
drops what the crashed one wrote past its checkpoint.

The metric names the trainer writes (the contract read by `console_lines`
and `codeagent_rl.anticheat.monitors`):

  reward/total_mean       mean of `Rewards.total` (what RL optimises)
  reward/pass_a           share of episodes passing all of suite A
  reward/pass_ab          share of episodes passing all of suites A and B
  reward/suite_a          mean pass fraction of suite A (hidden tests)
  reward/suite_b          mean pass fraction of suite B (held-out tests)
  kl/ref_mean             mean KL(policy || SFT reference) per token
  loss/critic             value loss (runs with a critic only)
  loss/policy             PPO policy loss (iterations where the actor
                          trained only)
  policy/clip_frac        share of trainable tokens whose ratio was clipped
                          (iterations where the actor trained only)
  policy/actor_trained    1 when the actor updated (0: critic warm-up, or
                          flat rewards with ppo.skip_actor_on_flat_rewards)
  policy/flat_rewards     1 when every rollout got the same Rewards.total
  perf/tokens_per_s       generated tokens per second of generation
  perf/staleness          1 when the iteration's rollouts were sampled by the
                          policy before the previous update (ppo.max_staleness)
  time/sandbox_wait_share share of the iteration spent waiting on the sandbox
  time/iteration_s        wall time of the iteration
  anticheat/flag_rate     share of episodes stage 1 rejected (an enforced
                          flag or the classifier)
  anticheat/flagged_rate  share of episodes with any stage-1 flag raised
  anticheat/flag/<name>   share of episodes with that flag raised
  anticheat/hack_rate     among episodes passing all of suite A, the share
                          with a stage-1 flag raised or a suite-B test
                          failed (null when none passed suite A)
  episode/turns_p50       median turns of the episodes (also _p90, _max,
                          and episode/tokens_p50, _p90, _max)
  advantage_by_length/<estimator>/<short|medium|long>_mean (and _var)
                          mean (variance) over the episodes of a length
                          tercile of their mean advantage, for gae and grpo
                          on the same batch (rl/diagnostics.py)
  value_by_depth/<turn_1|turn_2_3|...|turn_32_plus>/explained_variance
                          (and /value_loss, /token_share) the critic's fit
                          over the trainable tokens of turns at that depth,
                          and their share of the trainable tokens (runs
                          with a critic only; 0 when empty; rl/diagnostics.py)
  length/passing_turns    mean turns of passing trajectories
  length/passing_tokens   mean tokens of passing trajectories
  length/failing_turns    mean turns of failing trajectories
  length/failing_tokens   mean tokens of failing trajectories
  code/chars_mean         mean length of the submitted code, in characters

Runs whose tasks carry an oracle suite (tasks/oracle.py) judge each
episode's code again, on suite A and the oracle, and add `oracle/pass`
(share passing every oracle test), `oracle/suite_a_pass`, `oracle/hack_rate`
(share passing suite A and failing the oracle), `oracle/hack_share` (that
among suite-A passes), `oracle/episodes` and `perf/oracle_s`.

Iterations on stale rollouts add `policy/behaviour_weight_mean` and
`policy/behaviour_cap_frac` (the truncated importance weight of the loss)
and the phase `time/rollout_wait_s` (the learner waiting for them; their
own generation and sandbox phases ran during the previous update, so the
shares may add up to more than 1).

`PhaseTimer` adds `time/<phase>_s` and `time/<phase>_share`; the monitors add
`monitor/<name>`.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Mapping
import contextlib
import json
import math
import numbers
import os
import re
import sys
import tempfile
import time
from typing import Any

import numpy as np

from codeagent_rl.train import workdir as workdir_lib

# Summary statistics a histogram adds to the JSON record, as `<name>/<stat>`.
HISTOGRAM_STATS = ("mean", "p50", "p90", "max", "count")

_PHASE_NAME = re.compile(r"[a-z0-9_]+")


def _check_iteration(iteration: Any, what: str) -> int:
  if isinstance(iteration, bool) or not isinstance(iteration, numbers.Integral):
    raise ValueError(f"{what}={iteration!r}: must be an int >= 0.")
  if iteration < 0:
    raise ValueError(f"{what}={iteration!r}: must be an int >= 0.")
  return int(iteration)


def _to_float(name: str, value: Any) -> float:
  """Converts a scalar (Python, NumPy or 0-d JAX array) to float."""
  if value is None or isinstance(value, str | bytes):
    raise ValueError(
      f"metric {name!r}={value!r}: expected a number (int, float, NumPy or"
      " 0-d array)."
    )
  try:
    array = np.asarray(value)
  except Exception as e:  # an object NumPy cannot convert at all
    raise ValueError(f"metric {name!r}={value!r}: expected a number.") from e
  if array.shape != () or array.dtype.kind not in "biuf":
    raise ValueError(
      f"metric {name!r}: expected one real number, got dtype {array.dtype}"
      f" shape {array.shape}."
    )
  return float(array)


def _check_name(name: Any) -> None:
  if not isinstance(name, str) or not name:
    raise ValueError(f"metric name {name!r}: expected a non-empty str.")


def _json_value(value: float) -> float | None:
  return value if math.isfinite(value) else None


def _parse_lines(path: str, text: str) -> tuple[list[dict[str, Any]], bool]:
  """Parses complete lines of `text`; returns (records, had_partial_tail).

  A last line without its newline is what a crash during a write leaves; it
  is reported, not parsed.
  """
  lines = text.split("\n")
  tail = lines.pop()  # "" when the text ends with a newline
  records = []
  for number, line in enumerate(lines, start=1):
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise ValueError(
        f"{path}:{number}: not a JSON line ({e}); fix or delete the line."
      ) from e
    if not isinstance(record, dict) or not isinstance(
      record.get("iteration"), int
    ):
      raise ValueError(
        f"{path}:{number}: expected an object with an int 'iteration'; fix or"
        " delete the line."
      )
    records.append(record)
  return records, bool(tail)


def _truncate(path: str, start_iteration: int) -> None:
  """Drops lines with iteration >= start_iteration (and a partial tail)."""
  if not os.path.exists(path):
    return
  with open(path, encoding="utf-8") as f:
    text = f.read()
  records, partial = _parse_lines(path, text)
  lines = text.split("\n")[: len(records)]
  kept = [
    line
    for line, record in zip(lines, records, strict=True)
    if record["iteration"] < start_iteration
  ]
  if len(kept) == len(records) and not partial:
    return
  directory = os.path.dirname(path)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=workdir_lib.METRICS + ".tmp")
  try:
    with os.fdopen(fd, "w", encoding="utf-8") as f:
      f.write("".join(line + "\n" for line in kept))
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.unlink(tmp)
    raise
  dir_fd = os.open(directory, os.O_RDONLY)
  try:
    os.fsync(dir_fd)
  finally:
    os.close(dir_fd)


def read_metrics(workdir: str) -> list[dict[str, Any]]:
  """Reads `WORKDIR/metrics.jsonl`: one dict per committed iteration.

  JSON nulls (non-finite values) come back as NaN. A last line cut short by
  a crash is skipped.

  Raises:
    FileNotFoundError: there is no metrics file in `workdir`.
    ValueError: a complete line is not a JSON object with an int iteration.
  """
  path = os.path.join(workdir, workdir_lib.METRICS)
  with open(path, encoding="utf-8") as f:
    records, _ = _parse_lines(path, f.read())
  return [
    {k: math.nan if v is None else v for k, v in record.items()}
    for record in records
  ]


def _tensorboardx():
  """The tensorboardX module, imported without torch.

  tensorboardX imports torch at import time whenever torch is installed
  (the HF path installs it), only to accept torch tensors: 1.0 s of the
  1.26 s its import took here (`python -X importtime`), paid by every run
  that writes. The writer is given Python floats only, so torch is kept
  out while tensorboardX is imported (its own `try: import torch` then
  falls back to numpy) and is importable again afterwards. A process that
  has imported torch already is left as it is. For that moment `import
  torch` fails in every thread: the main job makes its writer before
  PPO's threads start, and no sandbox thread imports torch.
  """
  if "tensorboardX" in sys.modules or "torch" in sys.modules:
    import tensorboardX  # noqa: PLC0415

    return tensorboardX
  sys.modules["torch"] = None  # makes `import torch` raise ImportError
  try:
    import tensorboardX  # noqa: PLC0415
  finally:
    if sys.modules.get("torch", 0) is None:
      del sys.modules["torch"]
  return tensorboardX


class MetricsWriter:
  """Writes per-iteration scalars and histograms to JSONL and TensorBoard.

  Writes for one iteration collect into one record; the record becomes a
  line of `metrics.jsonl` (flushed and fsynced) when `flush()` or `close()`
  is called or a later iteration is written. Call `flush()` at the end of
  every iteration, before saving a checkpoint. Iterations must not go back:
  writing an iteration already committed raises, so the file never has
  duplicates.

  Usage:
    with MetricsWriter(workdir, start_iteration=step) as writer:
      writer.write_scalars(it, {"loss/critic": 0.1})
      writer.write_histograms(it, {"length/passing_tokens": lengths})
      writer.flush()
  """

  def __init__(
    self,
    workdir: str,
    *,
    start_iteration: int = 0,
    tensorboard: bool = True,
  ):
    """Opens the writer; on resume, drops lines a crashed run left.

    Args:
      workdir: the run's directory (created if missing).
      start_iteration: the first iteration this run writes. Lines of an
        earlier run with iteration >= start_iteration are removed (the file is
        rewritten atomically); TensorBoard hides its events from that step on
        (`purge_step`). 0 starts a fresh file.
      tensorboard: also write TensorBoard event files.

    Raises:
      ValueError: a bad start_iteration, or an existing metrics file with a
        malformed line.
    """
    self._start = _check_iteration(start_iteration, "start_iteration")
    os.makedirs(workdir, exist_ok=True)
    self.path = os.path.join(workdir, workdir_lib.METRICS)
    _truncate(self.path, self._start)
    self._file = open(self.path, "a", encoding="utf-8")
    self._next = self._start  # smallest iteration that may still be written
    self._record: dict[str, Any] | None = None
    self.tensorboard_dir = None
    self._tb = None
    if tensorboard:
      self.tensorboard_dir = os.path.join(workdir, workdir_lib.TENSORBOARD)
      # tensorboardX names files by the second and opens them with "wb": a
      # writer started within the same second (a quick resume) would
      # overwrite the previous file without a unique suffix. Nanoseconds,
      # zero-padded, keep the files' name order their creation order.
      self._tb = _tensorboardx().SummaryWriter(
        self.tensorboard_dir,
        purge_step=self._start or None,
        filename_suffix=f".{time.time_ns():020d}.{os.getpid()}",
      )

  def __enter__(self) -> MetricsWriter:
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def _add(self, iteration: Any, values: Mapping[str, float]) -> int:
    """Adds `values` to the record of `iteration`; all checks come first.

    Returns:
      The iteration as an int.
    """
    if self._file is None:
      raise ValueError(f"MetricsWriter({self.path}) is closed.")
    iteration = _check_iteration(iteration, "iteration")
    pending = self._record
    if pending is not None and iteration == pending["iteration"]:
      record = pending
    else:
      lowest = self._next if pending is None else pending["iteration"] + 1
      if iteration < lowest:
        raise ValueError(
          f"iteration={iteration}: iterations before {lowest} are already"
          f" written to {self.path} (start_iteration={self._start});"
          " iterations must not go back."
        )
      record = {"iteration": iteration}
    for name in values:
      _check_name(name)
      if name in record:
        raise ValueError(
          f"metric {name!r} written twice for iteration {iteration}."
        )
    if record is not pending:
      self._commit()
      self._record = record
    for name, value in values.items():
      record[name] = _json_value(value)
    return iteration

  def _commit(self) -> None:
    record = self._record
    if record is None:
      return
    self._record = None
    self._next = record["iteration"] + 1
    line = json.dumps(record, allow_nan=False, separators=(",", ":"))
    self._file.write(line + "\n")
    self._file.flush()
    os.fsync(self._file.fileno())

  def write_scalars(self, iteration: int, scalars: Mapping[str, Any]) -> None:
    """Adds scalars to the record of `iteration`.

    Args:
      iteration: the iteration (int >= start_iteration, not yet committed).
      scalars: name -> real number (Python, NumPy or 0-d array). Non-finite
        values are written as JSON null (and left out of TensorBoard).

    Raises:
      ValueError: a non-numeric value, a name written twice for this
        iteration, the reserved name "iteration", or an iteration that is
        already committed. Nothing is written then.
    """
    values = {name: _to_float(name, v) for name, v in scalars.items()}
    iteration = self._add(iteration, values)
    if self._tb is not None:
      for name, value in values.items():
        # No point for a metric without a value yet (tensorboardX warns on
        # every NaN, once per metric and iteration).
        if math.isfinite(value):
          self._tb.add_scalar(name, value, iteration)

  def write_histograms(self, iteration: int, hists: Mapping[str, Any]) -> None:
    """Adds histograms to the record of `iteration`.

    TensorBoard gets each histogram (finite values only). The JSON record
    gets `<name>/mean`, `/p50`, `/p90`, `/max` over the finite values (null
    when there are none) and `<name>/count`, the number of finite values.

    Args:
      iteration: as in `write_scalars`.
      hists: name -> array of real numbers (any shape; flattened).

    Raises:
      ValueError: a non-numeric array or a name clash (as `write_scalars`).
    """
    stats = {}
    finite_values = {}
    for name, values in hists.items():
      _check_name(name)
      array = np.asarray(values)
      if array.dtype.kind not in "biuf":
        raise ValueError(
          f"histogram {name!r}: expected real numbers, got dtype {array.dtype}."
        )
      array = array.astype(np.float64).ravel()
      finite = array[np.isfinite(array)]
      finite_values[name] = finite
      if finite.size:
        p50, p90 = np.percentile(finite, [50, 90])
        summary = (finite.mean(), p50, p90, finite.max(), finite.size)
      else:
        summary = (math.nan, math.nan, math.nan, math.nan, 0)
      for stat, value in zip(HISTOGRAM_STATS, summary, strict=True):
        stats[f"{name}/{stat}"] = float(value)
    iteration = self._add(iteration, stats)
    if self._tb is not None:
      for name, finite in finite_values.items():
        if finite.size:
          self._tb.add_histogram(name, finite, iteration)

  def flush(self) -> None:
    """Commits the pending record and flushes TensorBoard."""
    if self._file is None:
      return
    self._commit()
    if self._tb is not None:
      self._tb.flush()

  def close(self) -> None:
    """Flushes and closes both outputs; later writes raise. Idempotent."""
    if self._file is None:
      return
    self.flush()
    self._file.close()
    self._file = None
    if self._tb is not None:
      self._tb.close()
      self._tb = None


class NullWriter:
  """`MetricsWriter`'s interface, writing nothing.

  What the processes other than process 0 of a multi-process run use:
  process 0 writes the run's metrics, which every process computes alike.
  """

  def __enter__(self) -> NullWriter:
    return self

  def __exit__(self, *exc_info) -> None:
    pass

  def write_scalars(self, iteration: int, scalars: Mapping[str, Any]) -> None:
    """Writes nothing."""
    del iteration, scalars

  def write_histograms(self, iteration: int, hists: Mapping[str, Any]) -> None:
    """Writes nothing."""
    del iteration, hists

  def flush(self) -> None:
    """Nothing to flush."""

  def close(self) -> None:
    """Nothing to close."""


class PhaseTimer:
  """Accumulates wall time per phase of one iteration.

  Phases may nest (each counts its own time) and repeat (times add up).
  Times measured elsewhere, e.g. sandbox waits inside the rollout, are added
  with `add`.

  Usage:
    timer = PhaseTimer()
    with timer.phase("generation"):
      ...
    writer.write_scalars(it, timer.scalars())
    timer.reset()
  """

  def __init__(self, clock=time.perf_counter):
    """Starts the iteration's clock.

    Args:
      clock: a function returning seconds (a fake one in tests).
    """
    self._clock = clock
    self._seconds: dict[str, float] = {}
    self._active: set[str] = set()
    self._start = clock()

  def reset(self) -> None:
    """Forgets all phases and restarts the iteration's clock."""
    if self._active:
      raise ValueError(f"reset() inside phases {sorted(self._active)}.")
    self._seconds = {}
    self._start = self._clock()

  def add(self, name: str, seconds: float) -> None:
    """Adds `seconds` (>= 0) to phase `name`."""
    _check_phase(name)
    if not isinstance(seconds, numbers.Real) or not 0 <= seconds < math.inf:
      raise ValueError(f"phase {name!r}: seconds={seconds!r} must be >= 0.")
    self._seconds[name] = self._seconds.get(name, 0.0) + float(seconds)

  @contextlib.contextmanager
  def phase(self, name: str) -> Iterator[None]:
    """Times the `with` block as phase `name` (lowercase, digits, `_`)."""
    _check_phase(name)
    if name in self._active:
      raise ValueError(f"phase {name!r} is already running (nested in itself).")
    self._active.add(name)
    start = self._clock()
    try:
      yield
    finally:
      self._active.discard(name)
      self.add(name, max(self._clock() - start, 0.0))

  def scalars(self) -> dict[str, float]:
    """Metrics of the iteration so far.

    Returns:
      "time/iteration_s" (wall time since start or `reset`), and per phase
      "time/<name>_s" and "time/<name>_share" (its share of the iteration's
      wall time; NaN when no time has passed).
    """
    total = self._clock() - self._start
    out = {"time/iteration_s": total}
    for name, seconds in self._seconds.items():
      out[f"time/{name}_s"] = seconds
      out[f"time/{name}_share"] = seconds / total if total > 0 else math.nan
    return out


def _check_phase(name: Any) -> None:
  if not isinstance(name, str) or not _PHASE_NAME.fullmatch(name):
    raise ValueError(
      f"phase name {name!r}: use lowercase letters, digits and '_'."
    )
