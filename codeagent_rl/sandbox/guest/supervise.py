"""One job process, watched by the server until it is gone or done.

`Supervision.run` reads the process's stdout, stderr and result pipes,
enforces the per-test and job time limits and the output caps, and checks
the result frames as they come (`frames.read_frames`). Standard library
only (see the package docstring).
"""

import os
import select
import time

from . import frames

# Extra time after a per-test limit before the forkserver kills a child that
# did not stop itself (its own SIGALRM fires first).
_GRACE_S = 0.5
# How long the pipes of a dead, killed job may stay silent before EOF.
_DRAIN_S = 1.0


def _drain(fd: int, buffer: bytearray, limit: int, cap: frames.Capture):
  """Reads what a pipe holds now, without waiting for more."""
  os.set_blocking(fd, False)
  try:
    while len(buffer) <= limit:
      data = os.read(fd, 65536)
      if not data:
        break
      buffer += data
  except BlockingIOError:
    pass
  if len(buffer) > limit:
    cap.killed = "output_limit"


class Supervision:
  """Reads a child's pipes until it is gone, enforcing limits.

  Attributes:
    cap: what was seen of the child (the result of `run`).
    clean: False when a sweep left some process of the job alive.
    unfinished: (pid, open fds) of a function job's process that said
      "done" and is not killed yet (the server kills it after the reply).
  """

  def __init__(self, procs, mark, job, pid, fds, job_deadline, budget, order):
    """Starts watching; `run` does the work.

    Args:
      procs: the server's `processes.Processes`.
      mark: the server's phase timer (`mark("run")`).
      job: the job (its per-test limit and tests).
      pid: the job process.
      fds: its [out_r, err_r, res_r].
      job_deadline: when the whole job must be over (monotonic clock).
      budget: bytes left per stream ("stdout", "stderr", "result").
      order: a function job's test order (`frames.FunctionResults`); None
        for a stdio job's run (no timer of ours inside).
    """
    self.procs = procs
    self.mark = mark
    self.pid = pid
    self.out_r, self.err_r, self.res_r = fds
    self.job_deadline = job_deadline
    self.budget = budget
    self.cap = cap = frames.Capture()
    self.buffers = {
      self.out_r: cap.stdout,
      self.err_r: cap.stderr,
      self.res_r: bytearray(),
    }
    self.limits = {
      self.out_r: budget["stdout"],
      self.err_r: budget["stderr"],
      self.res_r: budget["result"],
    }
    self.open_fds = set(fds)
    # A function child stops itself at its SIGALRM; a stdio program has no
    # timer of ours inside, so the limit is enforced from here exactly.
    # Both come from the server's copy of the job, out of the job's reach.
    stdio = order is None
    self.test_limit = job["test_timeout_s"] + (0.0 if stdio else _GRACE_S)
    self.test_deadline = time.monotonic() + self.test_limit if stdio else None
    if not stdio:
      cap.results = frames.FunctionResults(order, time.monotonic())
    self.exited = False
    # Exits are looked for only when the zygote reports one or nothing
    # arrived (two system calls saved per result frame).
    self.look = True
    self.clean = True
    self.unfinished = None

  def run(self) -> frames.Capture:
    """Watches until the child is gone (or done); returns what it saw."""
    cap = self.cap
    while (
      self.open_fds
      and cap.killed is None
      and cap.malformed is None
      and not cap.done
    ):
      if not self.exited and self.look:
        self._look_for_exit()
      now = time.monotonic()
      deadline = self.job_deadline
      if self.test_deadline is not None:
        deadline = min(deadline, self.test_deadline)
      if now >= deadline and not self.exited:
        cap.killed, cap.killed_at = "timeout", now
        break
      # Once the job is dead and killed, its pipes end at once; a writer
      # that survived the kill must not hang the server.
      wait = _DRAIN_S if self.exited else max(0.0, deadline - now)
      ready, _, _ = select.select(
        [*self.open_fds, self.procs.sock], [], [], wait
      )
      if self.exited and not ready:
        break
      self.look = not ready or self.procs.sock in ready
      self._read(ready)
    if cap.done and cap.killed is None:
      return self._leave_done()
    return self._end()

  def _look_for_exit(self) -> None:
    self.procs.reap()
    self.exited = self.pid in self.procs.statuses
    if self.exited:
      self.mark("run")
      # The job process is gone: nothing of the job may outlive it, and
      # the pipes reach end of file only once every writer is dead.
      self.clean &= self.procs.kill_job_processes(self.pid)

  def _read(self, ready: list) -> None:
    """Reads each ready pipe once; stops at a malformed result."""
    for fd in ready:
      if fd is self.procs.sock:
        continue  # the zygote reports an exit: read at the loop's top
      data = os.read(fd, 65536)
      if not data:
        self.open_fds.discard(fd)
        os.close(fd)
        continue
      if not self._take(fd, data):
        break

  def _take(self, fd: int, data: bytes) -> bool:
    """Adds what `fd` brought under its cap; False on a malformed result."""
    cap = self.cap
    self.buffers[fd] += data
    if fd == self.res_r:
      # Parsed frames leave the buffer: count every byte received.
      cap.result_bytes += len(data)
      over = cap.result_bytes > self.limits[fd]
    else:
      over = len(self.buffers[fd]) > self.limits[fd]
    if over:
      cap.killed = "output_limit"
    elif fd == self.res_r:
      now = time.monotonic()
      try:
        count = frames.read_frames(
          cap, self.buffers[fd], self.budget["result"], now
        )
      except frames.OverBudget:
        # The rest of that frame would pass the limit: whether the reader
        # met its header or its bytes first is a race (a 10 MB return
        # value was reported both ways under load).
        cap.killed = "output_limit"
        return True
      except frames.Malformed as e:
        cap.malformed = str(e)
        return False
      if count and cap.results is not None:
        # The next test (or the "done" after the last) starts now,
        # with its own time limit, counted from here.
        self.test_deadline = now + self.test_limit
        cap.in_test = cap.results.running()
    return True

  def _leave_done(self) -> frames.Capture:
    """A function job said "done": reply now, kill after the reply."""
    # The job flushed its streams before "done": what they hold now is
    # all of its output. The process is killed after the reply.
    for fd in (self.out_r, self.err_r):
      if fd in self.open_fds:
        _drain(fd, self.buffers[fd], self.limits[fd], self.cap)
    self.unfinished = (self.pid, list(self.open_fds))
    self.mark("run")
    return self.cap

  def _end(self) -> frames.Capture:
    """Kills what is left of the job and collects the child's exit."""
    cap, pid = self.cap, self.pid
    for fd in self.open_fds:
      os.close(fd)
    self.mark("run")
    self.clean &= self.procs.kill_job_processes(pid)
    self.mark("kill")
    # The zygote reaped the job process; its report may still be on the way.
    reported = time.monotonic() + _DRAIN_S
    while pid not in self.procs.statuses and time.monotonic() < reported:
      self.procs.zygote_messages(timeout=0.05)
    self.mark("reap")
    status = self.procs.statuses.pop(pid, None)
    if status is not None:
      if os.WIFSIGNALED(status):
        cap.signal = os.WTERMSIG(status)
      else:
        cap.exit_code = os.waitstatus_to_exitcode(status)
    self.procs.statuses.clear()
    return cap
