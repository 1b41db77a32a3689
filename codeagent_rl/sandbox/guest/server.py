"""The forkserver, the sandbox's init: reads jobs, writes replies.

`main` is what `__main__.py` runs (see the package docstring for the
protocol). Standard library only.
"""

import errno
import json
import os
import random
import signal
import sys
import time
import traceback

from . import child
from . import common
from . import frames
from . import processes
from . import scratch as scratch_lib
from . import supervise
from . import wire

# The test order of every job: drawn here, where no job process reaches.
_RANDOM = random.SystemRandom()


def draw_order(num_tests: int) -> list[int]:
  """A random order of the test indices, from the operating system's RNG."""
  order = list(range(num_tests))
  _RANDOM.shuffle(order)
  return order


class ForkServer:
  """Receives jobs on `in_fd`, answers on `out_fd`."""

  def __init__(self, config: dict, in_fd: int, out_fd: int, job_filter: str):
    """Forks the zygote (see the package docstring).

    Args:
      config: see the package docstring.
      in_fd: where jobs arrive.
      out_fd: where replies go.
      job_filter: "on" when job processes get the seccomp filter, else
        "off: <why>" (`child.probe_job_filter`).
    """
    self.config = config
    self.in_fd = in_fd
    self.out_fd = out_fd
    self.job_filter = job_filter
    self.clean = True
    self._unfinished = None  # (pid, fds) of a finished, unkilled job
    self.after_s = 0.0
    self.after_phases = {}
    self.cleanup_error = ""
    self.phases = {}
    self._last_mark = 0.0
    self.scratch = scratch_lib.ScratchArea(config)
    self.procs = processes.Processes(config, job_filter, (in_fd, out_fd))

  def after_job(self) -> None:
    """After a reply: no process or file of the job left, a spare coming.

    Runs before the next job is read; a failure marks the sandbox unclean
    and the next job is refused.
    """
    start = self._last_mark = time.monotonic()
    self.phases = {}
    try:
      if self._unfinished is not None:
        pid, fds = self._unfinished
        self._unfinished = None
        self.clean &= self.procs.finish(pid, fds)  # kills and sweeps
      else:
        # The job's own supervision swept already, unless it failed.
        self.clean &= self.procs.kill_job_processes(None)
      self._mark("kill")
      used, self.scratch.used = self.scratch.used, None
      if self.clean:
        self.clean &= self.scratch.renew(used)
      self._mark("cleanup")
    except Exception:
      self.clean = False
      self.cleanup_error = common.short(traceback.format_exc())
    self.after_s = time.monotonic() - start
    self.after_phases = self.phases

  def _mark(self, phase: str) -> None:
    """Adds the time since the previous mark to `phases[phase]`."""
    now = time.monotonic()
    self.phases[phase] = self.phases.get(phase, 0.0) + now - self._last_mark
    self._last_mark = now

  def _start(self, message: dict, more: bool = False):
    """Hands a job to a spare (`Processes.start`); marks the phase."""
    pid, fds = self.procs.start(message, more)
    self._mark("start")
    return pid, fds

  def _supervise(self, job, pid, fds, job_deadline, budget, order):
    """Watches a job process (`supervise.Supervision`); returns its capture."""
    watch = supervise.Supervision(
      self.procs, self._mark, job, pid, fds, job_deadline, budget, order
    )
    cap = watch.run()
    self.clean &= watch.clean
    if watch.unfinished is not None:
      self._unfinished = watch.unfinished
    return cap

  def run_job(self, job: dict) -> dict:
    """Runs one job; returns the reply frame (outputs, statuses, streams)."""
    start = time.monotonic()
    self.phases = {}
    self._last_mark = start
    job_deadline = start + job["timeout_s"]
    cap_bytes = job["max_output_bytes"]
    budget = {"stdout": cap_bytes, "stderr": cap_bytes, "result": cap_bytes}
    scratch = self.scratch.take()
    self._mark("scratch")
    if job["kind"] == "function":
      reply = self._run_function(job, scratch, job_deadline, budget)
    else:
      reply = self._run_stdio(job, scratch, job_deadline, budget)
    reply.update(
      id=job["id"],
      duration_s=time.monotonic() - start,
      clean=self.clean,
      phases_s=self.phases,
    )
    return reply

  def _run_function(self, job, scratch, job_deadline, budget) -> dict:
    # The job process gets the tests in the order they run and never their
    # indices: its code can neither choose the order nor tell which test
    # (of which suite) it is called on but by the inputs themselves.
    order = draw_order(len(job["tests"]))
    unit = dict(job, tests=[job["tests"][i] for i in order])
    message = {"job": unit, "scratch": scratch, "stdin": None}
    pid, fds = self._start(message)
    cap = self._supervise(job, pid, fds, job_deadline, budget, order)
    results = cap.results
    tests = list(results.tests)
    if cap.killed == "timeout" and cap.in_test is not None:
      tests[cap.in_test] = {
        "status": "timeout",
        "output": None,
        "error": "killed at the per-test or job time limit",
        "time_s": cap.killed_at - results.mark,
      }
    missing = "not run: the job process stopped first"
    tests = [
      t or {"status": "not_run", "output": None, "error": missing}
      for t in tests
    ]
    status, reason = frames.job_status(cap, results.done, tests)
    return {
      "status": status,
      "reason": reason,
      "exit_code": cap.exit_code,
      "signal": cap.signal,
      "stdout": common.text(cap.stdout, budget["stdout"]),
      "stderr": common.text(cap.stderr, budget["stderr"]),
      "tests": tests,
    }

  def _run_stdio(self, job, scratch, job_deadline, budget) -> dict:
    # One job process per test, in an order drawn here: a run sees the code
    # and its own stdin, nothing of the other runs, and when it runs (its
    # pid, the clock) says nothing of which test it is.
    num_tests = len(job["tests"])
    tests, stderrs = [None] * num_tests, [b""] * num_tests
    killed = None
    for position, index in enumerate(draw_order(num_tests)):
      if killed is not None or time.monotonic() >= job_deadline:
        tests[index] = {"status": "not_run", "stdout": "", "exit_code": None,
                        "error": "not run: the job stopped first"}  # fmt: skip
        continue
      started = time.monotonic()
      if position:
        # Each run gets a scratch directory of its own (the last run's
        # processes are dead): nothing a run wrote, its stdin say, is
        # there for the next one.
        if not self.scratch.renew(scratch):
          self.clean = False
          raise RuntimeError("the scratch area could not be emptied")
        scratch = self.scratch.take()
      # Each run gets the code and its own stdin, not the other tests'.
      unit = dict(job, tests=[])
      stdin = job["tests"][index]["stdin"]
      message = {"job": unit, "scratch": scratch, "stdin": stdin}
      more = position + 1 < num_tests
      pid, fds = self._start(message, more)
      cap = self._supervise(job, pid, fds, job_deadline, budget, None)
      for name in ("stdout", "stderr"):
        budget[name] -= len(getattr(cap, name))
      stderrs[index] = cap.stderr
      status, error = frames.stdio_status(cap)
      if cap.killed is not None:
        killed = cap.killed
      tests[index] = {
        "status": status,
        "stdout": common.text(cap.stdout, job["max_output_bytes"]),
        "exit_code": cap.exit_code,
        "error": error,
        "time_s": time.monotonic() - started,
      }  # fmt: skip
    return _stdio_reply(job, tests, stderrs)

  def _refuse(self, job) -> dict:
    """The reply to a job that arrives after a failed clean-up."""
    return {
      "id": job.get("id") if isinstance(job, dict) else None,
      "status": "sandbox_error",
      "reason": "the sandbox could not clean up after the previous job: "
      + (self.cleanup_error or "processes or files of it survived"),
      "clean": False,
      "refused": True,
    }

  def serve(self) -> None:
    """Answers jobs until end of file on the input."""
    wire.write_frame(
      self.out_fd,
      {
        "event": "ready",
        "pid": os.getpid(),
        "uid": os.getuid(),
        "python": sys.version.split()[0],
        "job_filter": self.job_filter,
      },
    )
    while True:
      job = wire.read_frame(self.in_fd)
      if job is None:
        break
      if not self.clean:
        wire.write_frame(self.out_fd, self._refuse(job))
        continue
      try:
        reply = self.run_job(job)
        # What the previous job's clean-up took (after its reply).
        reply["after_previous_s"] = self.after_s
        reply["after_phases_s"] = self.after_phases
      except Exception:
        self.clean = False
        reply = {
          "id": job.get("id") if isinstance(job, dict) else None,
          "status": "sandbox_error",
          "reason": common.short(traceback.format_exc()),
          "clean": False,
        }
      if self.clean:
        # The zygote forks the next job's spare while this reply travels
        # and the server cleans up (not while a job runs: that slowed the
        # job down). The spare is root, out of reach of what is left.
        self.procs.ensure_spare()
      wire.write_frame(self.out_fd, reply)
      self.after_job()
    self.procs.kill_job_processes(None)


def _stdio_reply(job, tests, stderrs) -> dict:
  """A stdio job's reply: its status is its worst test's.

  Its exit code is the first non-zero one in test order (else the last run
  test's); its stderr, the runs' joined in test order.
  """
  exit_code = None
  for test in tests:
    if test["status"] != "not_run" and exit_code in (None, 0):
      exit_code = test["exit_code"]
  statuses = [t["status"] for t in tests]
  status, reason = "ok", ""
  for name, job_status in (
    ("output_limit", "output_limit"),
    ("timeout", "timeout"),
    ("memory", "memory"),
    ("error", "crash"),
  ):
    if name in statuses:
      status = job_status
      reason = tests[statuses.index(name)]["error"]
      break
  cap_bytes = job["max_output_bytes"]
  return {
    "status": status,
    "reason": reason,
    "exit_code": exit_code,
    "signal": None,
    # Each test carries its own stdout; the host joins them.
    "stdout": "",
    "stderr": common.text(b"".join(stderrs), cap_bytes),
    "tests": tests,
  }


def _become_subreaper() -> bool:
  """Orphans of job processes re-parent to us (Linux); False elsewhere."""
  return common.prctl(common.PR_SET_CHILD_SUBREAPER, 1)


def main(argv: list[str]) -> int:
  """Serves jobs with the config JSON in argv[1]; returns the exit code."""
  config = json.loads(argv[1])
  # Keep the protocol pipes on private descriptors; 0/1 become /dev/null so
  # nothing printed by accident corrupts a frame.
  in_fd, out_fd = os.dup(0), os.dup(1)
  null = os.open("/dev/null", os.O_RDWR)
  os.dup2(null, 0)
  os.dup2(null, 1)
  os.close(null)
  if config["kill_scope"] == "descendants" and not _become_subreaper():
    print("guest: cannot become a child subreaper", file=sys.stderr)
  parent = config.get("parent_pid")
  if parent is not None:
    # A plain subprocess of the host: die with it (race-free: check after).
    common.prctl(common.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
      return 0
  job_filter = child.probe_job_filter()
  try:
    ForkServer(config, in_fd, out_fd, job_filter).serve()
  except OSError as e:
    if e.errno != errno.EPIPE:
      raise
  return 0
