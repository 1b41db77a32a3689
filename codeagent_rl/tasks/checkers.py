"""Task checkers run in a child process, with a time and a memory limit.

A checker (`schema`: Python source defining `check(args, kwargs, output)`)
is the task author's code, trusted not to attack the host, but not trusted
to behave: it may raise on an output its author did not foresee, loop
forever on one, allocate without bound, or call `sys.exit`. Run in the
trainer's own process, any of these would hang or end the run, and
grading happens on worker threads, where no signal can interrupt it. So
checkers run in one long-lived child process
(`python -m codeagent_rl.tasks.checker_child`), which the `CheckerRunner`
feeds one request at a time:

- a call that takes longer than `timeout_s` kills the child (the next call
  starts a fresh one, ~50 ms) and is reported as timed out;
- a child that dies (`os._exit`, a crash, the memory limit's kill) is
  reported with its exit code and replaced the same way;
- the child limits its address space to `memory_mb`, so an unbounded
  allocation raises MemoryError there.

Every outcome is an `Outcome`; nothing here raises on what a checker or the
value it was given does. Outputs and arguments cross as `wire` data (the
same encoding sandbox results use), so a checker sees exactly the values
the judge would have passed, as fresh copies.

`default_runner()` is the process-wide runner the judge uses; it is made on
first use, again in a forked child process, and closed at exit.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any

import codeagent_rl
from codeagent_rl.sandbox import wire

# Longest one checker call may take, in seconds. HumanEval's checkers and
# the synthetic families' lax checkers take well under a millisecond; the
# limit is for checkers that never return.
TIMEOUT_S = 5.0
# The child's address-space limit, in MiB (a Python process with the
# standard library needs ~30).
MEMORY_MB = 2048
# The child's own import of `wire` plus interpreter start: the first call's
# deadline includes it.
START_S = 10.0
# Largest reply accepted from the child, in bytes (a reply is a verdict or
# a cut message).
_MAX_REPLY = 1 << 16
# The directory that holds the `codeagent_rl` package.
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(codeagent_rl.__file__))


@dataclasses.dataclass(frozen=True)
class Outcome:
  """What one checker call came to.

  Attributes:
    passed: the checker returned exactly True.
    problem: "" when the checker returned a bool; else why its verdict is
      not one: "raised", "returned", "timed_out", "died" or "unencodable".
    detail: one line for a person: the exception and its message, the type
      returned, the limit, or the exit code.
  """

  passed: bool
  problem: str = ""
  detail: str = ""

  @property
  def reason(self) -> str:
    """The verdict's reason when the checker did not pass the output."""
    if self.passed:
      return ""
    return self.detail or "checker returned False"


class CheckerRunner:
  """Runs checkers in a child process; thread-safe, one call at a time.

  Args:
    timeout_s: longest one call may take before the child is killed.
    memory_mb: the child's address-space limit (0: none).
  """

  def __init__(self, timeout_s: float = TIMEOUT_S, memory_mb: int = MEMORY_MB):
    if not (isinstance(timeout_s, int | float) and 0 < timeout_s <= 3600):
      raise ValueError(f"timeout_s={timeout_s!r}: must be in (0, 3600].")
    if not (isinstance(memory_mb, int) and memory_mb >= 0):
      raise ValueError(f"memory_mb={memory_mb!r}: must be an int >= 0.")
    self.timeout_s = float(timeout_s)
    self.memory_mb = memory_mb
    self._lock = threading.Lock()
    self._proc: subprocess.Popen | None = None
    self._buffer = bytearray()
    self.restarts = 0

  def _start(self) -> subprocess.Popen:
    self._buffer = bytearray()
    # The child imports this very package, wherever the parent found it
    # (an install, or a checkout on sys.path).
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
      p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p
    )
    return subprocess.Popen(
      [
        sys.executable,
        "-m",
        "codeagent_rl.tasks.checker_child",
        str(self.memory_mb),
      ],
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=subprocess.DEVNULL,
      close_fds=True,
      env=env,
    )

  def _kill(self) -> int | None:
    proc, self._proc = self._proc, None
    if proc is None:
      return None
    if proc.poll() is None:
      proc.kill()
    code = proc.wait()
    for pipe in (proc.stdin, proc.stdout):
      try:
        pipe.close()
      except OSError:
        pass
    self.restarts += 1
    return code

  def _read_reply(self, deadline: float) -> Any:
    """The next frame from the child; "timeout" or "eof" when none comes."""
    fd = self._proc.stdout.fileno()
    while True:
      frames = wire.split_frames(self._buffer, _MAX_REPLY)
      if frames:
        return frames[0]
      left = deadline - time.monotonic()
      if left <= 0:
        return "timeout"
      ready, _, _ = select.select([fd], [], [], left)
      if not ready:
        return "timeout"
      chunk = os.read(fd, 1 << 16)
      if not chunk:
        return "eof"
      self._buffer.extend(chunk)

  def run(self, source: str, args: Any, kwargs: Any, output: Any) -> Outcome:
    """Calls the checker `source` defines on (args, kwargs, output).

    Never raises on what the checker does or on the values given.
    """
    try:
      request = {
        "source": source,
        "args": wire.encode(args),
        "kwargs": wire.encode(kwargs),
        "output": wire.encode(output),
      }
      frame = wire.pack_frame(request)
    except (wire.EncodeError, ValueError, RecursionError) as e:
      return Outcome(False, "unencodable", f"value not plain data: {e}")
    with self._lock:
      return self._call(frame)

  def load(self, source: str) -> Outcome:
    """Runs the checker's module only: passed when it defines `check`."""
    frame = wire.pack_frame({"source": source, "load_only": True})
    with self._lock:
      return self._call(frame)

  def _call(self, frame: bytes) -> Outcome:
    budget = self.timeout_s
    if self._proc is None or self._proc.poll() is not None:
      if self._proc is not None:
        self._kill()
      self._proc = self._start()
      budget += START_S
    try:
      self._proc.stdin.write(frame)
      self._proc.stdin.flush()
    except (BrokenPipeError, OSError):
      code = self._kill()
      return Outcome(False, "died", f"checker process ended (exit code {code})")
    try:
      reply = self._read_reply(time.monotonic() + budget)
    except wire.FrameError as e:
      self._kill()
      return Outcome(False, "died", f"checker process sent garbage: {e}")
    if reply == "timeout":
      self._kill()
      return Outcome(
        False, "timed_out", f"checker timed out after {self.timeout_s:g} s"
      )
    if reply == "eof":
      code = self._kill()
      return Outcome(False, "died", f"checker process ended (exit code {code})")
    return _outcome(reply)

  def close(self) -> None:
    """Ends the child process (a later call starts another)."""
    with self._lock:
      self._kill()


def _outcome(reply: Any) -> Outcome:
  if isinstance(reply, dict):
    if type(reply.get("verdict")) is bool:
      return Outcome(reply["verdict"])
    if isinstance(reply.get("returned"), str):
      kind = reply["returned"]
      return Outcome(
        False, "returned", f"checker returned {kind}, not True or False"
      )
    if isinstance(reply.get("raised"), str):
      message = str(reply.get("message", ""))
      text = f"checker raised {reply['raised']}"
      return Outcome(False, "raised", f"{text}: {message}" if message else text)
  return Outcome(False, "died", "checker process sent an unknown reply")


_default: tuple[int, CheckerRunner] | None = None
_default_lock = threading.Lock()


def default_runner() -> CheckerRunner:
  """This process's runner (a forked child gets its own)."""
  global _default
  with _default_lock:
    if _default is None or _default[0] != os.getpid():
      _default = (os.getpid(), CheckerRunner())
    return _default[1]


@atexit.register
def _close_default() -> None:
  if _default is not None and _default[0] == os.getpid():
    _default[1].close()
