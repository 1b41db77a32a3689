"""The result protocol of a job process, checked; and what a job's run means.

A job process's untrusted code shares its result pipe (and may have
patched everything in the process that writes to it), so nothing there is
taken on trust: `read_frames` accepts only what the protocol allows at that
point (`FunctionResults` for a function job, whose test order the server
drew) and raises `Malformed` for anything else. `job_status` and
`stdio_status` turn what the server saw of a job process (`Capture`) into a
status and a reason. Standard library only (see the package docstring).
"""

import signal

from . import common
from . import wire


class Malformed(Exception):
  """A job process broke the result protocol (its code shares the pipe)."""


class OverBudget(Exception):
  """A result frame announces more bytes than the stream has left."""


# Statuses a function job process may report for one test.
_CHILD_STATUSES = ("ok", "error", "timeout", "memory", "bad_output")
_ERROR_CHARS = 1000


def _clean_text(text: str, limit: int) -> str:
  """`text` cut to `limit` characters, lone surrogates escaped.

  A job's exception messages are its own strings; one holding a lone
  surrogate would survive JSON but break UTF-8 encoders on the host.
  """
  text = common.short(text, limit)
  return text.encode("utf-8", "backslashreplace").decode("utf-8")


class FunctionResults:
  """A function job's result frames, accepted only in the order they come.

  The server draws the test order and hands the job process its tests in
  that order, without their indices, so the order is never the job's to
  choose or report. The job process sends `start` once its code is loaded,
  then one `result` per test in the order it got them (`"test"`: the
  position, 0, 1, ...), then `done`. Its untrusted code can write to the
  same descriptor, so anything else (an `order` frame, say) is malformed
  (the server kills the job): tampering with the order can break the job,
  never reorder its results.

  Times are the server's own, at the resolution of its reads of the pipe:
  the results one read brings share evenly the time since the previous
  read that brought results (for the first, since the job started: its
  loading counts), so the times of a job's tests add up to the wall time
  until its last result. (A job process writes several results before the
  server runs again: most reads of a fast job bring many.) Times the job
  process might claim are ignored.

  Attributes:
    order: the test indices in the order they run.
    tests: per test index, the reply entry once its result arrived.
    started: the job process said its code is loaded.
    done: the job process said "done" after the last result.
    mark: when the last read that brought results happened (or the job
      started): the start of the test that runs now.
  """

  def __init__(self, order: list[int], started: float):
    self.order = list(order)
    self.tests = [None] * len(order)
    self.started = False
    self.done = False
    self.mark = started
    self._received = 0
    self._unstamped = []  # tests whose result came in the current read

  def running(self) -> int | None:
    """The test that runs now (None before the start and after the last)."""
    if not self.started or self._received >= len(self.order):
      return None
    return self.order[self._received]

  def feed(self, frame) -> None:
    """Takes one frame of the current read; raises `Malformed`."""
    if not isinstance(frame, dict):
      raise Malformed("a result frame is not an object")
    event = frame.get("event")
    if self.done:
      raise Malformed("a frame after done")
    if event == "start" and not self.started:
      self.started = True
    elif event == "result" and self.running() is not None:
      position = frame.get("test")
      if type(position) is not int or position != self._received:
        raise Malformed(f"a result for test {position!r:.20}")
      index = self.running()
      self.tests[index] = _test_entry(frame)
      self._unstamped.append(index)
      self._received += 1
    elif event == "done" and self.started and self.running() is None:
      self.done = True
    else:
      raise Malformed(f"an unexpected {str(event)[:20]!r} frame")

  def stamp(self, now: float) -> None:
    """Ends a read of the pipe: times the results it brought (class doc)."""
    if self._unstamped:
      share = (now - self.mark) / len(self._unstamped)
      for index in self._unstamped:
        self.tests[index]["time_s"] = share
      self._unstamped = []
      self.mark = now


def _test_entry(frame: dict) -> dict:
  """The reply entry of one test's result frame (raises `Malformed`)."""
  status, error = frame.get("status"), frame.get("error", "")
  if status not in _CHILD_STATUSES or type(error) is not str:
    raise Malformed("a result frame with a bad status or error")
  entry = {
    "status": status,
    "output": None,
    "error": _clean_text(error, _ERROR_CHARS),
    "time_s": 0.0,
  }
  if status == "ok":
    if "output" not in frame:
      raise Malformed("an ok result without an output")
    try:
      wire.decode(frame["output"])
    except (wire.DecodeError, RecursionError) as e:
      entry["status"] = "bad_output"
      entry["error"] = common.short(
        f"output is not tagged plain data: {e}", 200
      )
    else:
      entry["output"] = frame["output"]
  return entry


class Capture:
  """What the forkserver saw of one child process."""

  def __init__(self):
    self.stdout = bytearray()
    self.stderr = bytearray()
    self.result_bytes = 0  # everything received on the result pipe
    self.results = None  # a function job's `FunctionResults`
    self.memory = False  # a stdio run reported a MemoryError
    self.malformed = None
    self.killed = None  # "timeout" | "output_limit" when the server killed it
    self.exit_code = None
    self.signal = None
    self.in_test = None  # index of the test running when it was killed
    self.killed_at = None  # when the server killed it for its time
    self.done = False  # a function job sent "done": not waited for


def read_frames(cap: Capture, buffer: bytearray, limit: int, now) -> int:
  """Takes the complete frames in `buffer`; returns how many.

  Raises:
    OverBudget: a frame's header announces more than `limit` bytes.
    Malformed: a frame is not what the protocol allows here.
  """
  try:
    frames = wire.split_frames(buffer, limit)
  except wire.FrameTooLarge as e:
    raise OverBudget(str(e)) from None
  except wire.FrameError as e:
    raise Malformed(str(e)) from None
  for frame in frames:
    if cap.results is not None:
      cap.results.feed(frame)
      cap.done = cap.results.done
    elif not isinstance(frame, dict):
      raise Malformed("a result frame is not an object")
    elif frame.get("event") == "exit" and frame.get("status") == "memory":
      cap.memory = True
  if frames and cap.results is not None:
    cap.results.stamp(now)
  return len(frames)


def _signal_name(signum: int) -> str:
  try:
    return signal.Signals(signum).name
  except ValueError:
    return f"signal {signum}"


def job_status(cap: Capture, done: bool, tests: list) -> tuple[str, str]:
  """The job status of a function job, worst first, and why."""
  if cap.killed == "output_limit":
    return "output_limit", "output exceeded max_output_bytes"
  if cap.killed == "timeout":
    return "timeout", "killed at the per-test or job time limit"
  if cap.signal == signal.SIGXCPU:
    return "timeout", "CPU time limit exceeded"
  if cap.malformed is not None:
    return "crash", f"malformed result stream: {cap.malformed}"
  if not done:
    how = (
      f"killed by {_signal_name(cap.signal)}"
      if cap.signal is not None
      else f"exit code {cap.exit_code}"
    )
    return "crash", f"the job process ended ({how}) before finishing"
  statuses = [t["status"] for t in tests]
  for name in ("timeout", "memory"):
    if name in statuses:
      return name, tests[statuses.index(name)]["error"]
  return "ok", ""


def stdio_status(cap: Capture) -> tuple[str, str]:
  """The status of one stdio test run, and why."""
  if cap.killed == "output_limit":
    return "output_limit", "output exceeded max_output_bytes"
  if cap.killed == "timeout":
    return "timeout", "killed at the per-test or job time limit"
  if cap.signal == signal.SIGXCPU:
    return "timeout", "CPU time limit exceeded"
  if cap.memory:
    return "memory", "MemoryError"
  if cap.signal is not None:
    return "error", f"killed by {_signal_name(cap.signal)}"
  if cap.exit_code != 0:
    return "error", f"exit code {cap.exit_code}"
  return "ok", ""
