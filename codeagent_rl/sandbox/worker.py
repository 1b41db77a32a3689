"""One running guest forkserver, reached over pipes, and the process backend.

`GuestProcess` starts a command whose stdin/stdout speak the frame protocol
of the `guest` package (for gVisor, `runsc run`; for the process backend,
the interpreter itself), waits for its ready frame, sends jobs and reads
replies with a deadline. Any deviation (end of file, a reply too late, a
malformed or mismatched frame) raises a `SandboxError`; the caller reports
the job in flight as `sandbox_error` and starts a fresh process.

Every live `GuestProcess` is closed at interpreter exit (atexit). On Linux
a crashed host leaves nothing running either: `runsc run` is started under
`setpriv --pdeathsig KILL` (the sandbox is attached to it), and the process
backend's forkserver sets the same signal on itself.
"""

from __future__ import annotations

import atexit
import collections
import functools
import itertools
import logging
import os
import pathlib
import select
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any
import weakref

from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import wire

# The uid/gid untrusted code runs as ("nobody" on Debian and in gVisor).
UNTRUSTED_UID = 65534
UNTRUSTED_GID = 65534
# The process backend gives each forkserver a uid of its own, above any
# account's: RLIMIT_NPROC counts every process of a uid on the host, so with
# a shared "nobody" one job's fork bomb made another sandbox's ordinary
# fork fail (EAGAIN, seen under pytest-xdist), and one job could signal
# another sandbox's processes. 2**22 is Linux's largest pid_max.
# The process backend's scratch directories: `<tmp>/<prefix><host pid>.<...>`.
SCRATCH_PREFIX = "codeagent_scratch."
PRIVATE_UID_BASE = 2**30
PRIVATE_UIDS_PER_PROCESS = 256
# Forkservers this process started, over all launchers (uids must differ
# between pools too).
_LAUNCHED = itertools.count(1)
GUEST_DIR = pathlib.Path(__file__).resolve().parent
# Everything of the project the sandbox interpreter gets, relative to
# GUEST_DIR (stdlib only): the guest package and the two modules it loads
# by path from the directory above it.
GUEST_FILES = (
  "guest/__init__.py",
  "guest/__main__.py",
  "guest/child.py",
  "guest/common.py",
  "guest/frames.py",
  "guest/processes.py",
  "guest/scratch.py",
  "guest/server.py",
  "guest/supervise.py",
  "guest/zygote.py",
  "seccomp.py",
  "wire.py",
)
# Run by path: `-I` puts no directory on sys.path, so `-m guest` cannot work.
GUEST_MAIN = "guest/__main__.py"
# Extra time the host grants a reply beyond the job's own time limit (the
# forkserver enforces that limit; this only catches a wedged sandbox).
REPLY_MARGIN_S = 10.0
_STDERR_KEEP = 64 << 10

_LIVE: weakref.WeakSet[GuestProcess] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


class SandboxError(RuntimeError):
  """The sandbox itself failed (not the job): it must be replaced."""


@functools.cache
def die_with_parent_prefix() -> tuple[str, ...]:
  """Argv prefix that SIGKILLs the command when the starting thread dies.

  `setpriv --pdeathsig KILL` (util-linux) sets PR_SET_PDEATHSIG and execs
  the command, so no Python runs between fork and exec in this (possibly
  multi-threaded) process. Empty where setpriv is missing; then only atexit,
  `gvisor.sweep_stale_roots` and `sweep_stale_scratch` clean up after a
  crashed host.
  """
  setpriv = shutil.which("setpriv")
  if setpriv is None:
    return ()
  probe = subprocess.run(
    [setpriv, "--pdeathsig", "KILL", "--", "true"],
    capture_output=True,
    check=False,
  )
  return (setpriv, "--pdeathsig", "KILL", "--") if probe.returncode == 0 else ()


def guest_command(python: str, guest_dir: str, guest_config: dict) -> list:
  """The argv that starts the forkserver in `guest_dir` under `python`."""
  return [
    python,
    "-I",  # isolated: no environment variables, no user site, no cwd on path
    "-S",  # no site module
    "-B",  # write no .pyc files
    os.path.join(guest_dir, GUEST_MAIN),
    wire.dumps(guest_config),
  ]


def max_reply_bytes(config: config_lib.SandboxConfig) -> int:
  """Largest reply frame: three capped streams, JSON-escaped (up to 6x)."""
  return 18 * config.max_output_bytes + (1 << 20)


class GuestProcess:
  """A started forkserver; `run` sends one job frame and returns the reply.

  Not thread-safe: one job at a time (the pool gives each worker its own).
  """

  def __init__(
    self,
    argv: list[str],
    *,
    name: str,
    startup_timeout_s: float,
    max_reply_bytes: int,
    on_close=None,
    env: dict[str, str] | None = None,
  ):
    """Starts `argv` and waits for the guest's ready frame.

    Args:
      argv: the command; its stdin/stdout reach the forkserver.
      name: used in log and error messages.
      startup_timeout_s: how long to wait for the ready frame.
      max_reply_bytes: largest reply frame accepted.
      on_close: called once after the process is gone (cleanup of runsc
        state, bundles).
      env: the command's environment (default: empty).

    Raises:
      SandboxError: when it does not start or says something else.
    """
    self.name = name
    self.max_reply_bytes = max_reply_bytes
    self._on_close = on_close
    self._closed = False
    self._buffer = bytearray()
    self._stderr = collections.deque()
    self._stderr_size = 0
    self.proc = subprocess.Popen(
      argv,
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      env=env or {},
      close_fds=True,
    )
    with _LIVE_LOCK:
      _LIVE.add(self)
    self._stderr_thread = threading.Thread(
      target=self._drain_stderr, name=f"{name}-stderr", daemon=True
    )
    self._stderr_thread.start()
    try:
      ready = self._read_frame(time.monotonic() + startup_timeout_s)
      if not (isinstance(ready, dict) and ready.get("event") == "ready"):
        raise SandboxError(
          f"{name}: expected a ready frame, got {ready!r:.200}"
        )
    except BaseException:
      self.close()
      raise
    self.info = ready

  def _drain_stderr(self) -> None:
    stream = self.proc.stderr
    while True:
      chunk = stream.read1(4096) if hasattr(stream, "read1") else b""
      if not chunk:
        return
      self._stderr.append(chunk)
      self._stderr_size += len(chunk)
      while self._stderr_size > _STDERR_KEEP and len(self._stderr) > 1:
        self._stderr_size -= len(self._stderr.popleft())

  def stderr_tail(self) -> str:
    """The last bytes the process wrote to stderr (diagnostics)."""
    return b"".join(self._stderr).decode("utf-8", "replace")[-4000:]

  def alive(self) -> bool:
    """True while the process runs."""
    return self.proc.poll() is None

  def _fail(self, why: str) -> SandboxError:
    code = self.proc.poll()
    state = "running" if code is None else f"exit code {code}"
    tail = self.stderr_tail().strip()
    detail = f"; stderr: {tail[-1500:]}" if tail else ""
    return SandboxError(f"{self.name}: {why} ({state}){detail}")

  def _read_frame(self, deadline: float) -> Any:
    fd = self.proc.stdout.fileno()
    while True:
      try:
        frames = wire.split_frames(self._buffer, self.max_reply_bytes)
      except wire.FrameError as e:
        raise self._fail(f"malformed frame: {e}") from None
      if frames:
        if len(frames) > 1 or self._buffer:
          raise self._fail("more than one frame for one request")
        return frames[0]
      remaining = deadline - time.monotonic()
      if remaining <= 0:
        raise self._fail("no reply before the deadline")
      ready, _, _ = select.select([fd], [], [], remaining)
      if not ready:
        continue
      chunk = os.read(fd, 1 << 20)
      if not chunk:
        raise self._fail("the sandbox closed its output (it died)")
      self._buffer += chunk

  def run(self, frame: dict, timeout_s: float) -> dict:
    """Sends one job frame and returns the forkserver's reply frame.

    Args:
      frame: the job, as the guest expects it (with an "id").
      timeout_s: the job's own limit; the reply may take `REPLY_MARGIN_S`
        longer.

    Returns:
      The reply, whose "id" matches the job's.

    Raises:
      SandboxError: the sandbox died, hung or broke the protocol.
    """
    if self._closed or not self.alive():
      raise self._fail("the sandbox is not running")
    try:
      wire.write_frame(self.proc.stdin.fileno(), frame)
    except OSError as e:
      raise self._fail(f"cannot send the job: {e}") from None
    reply = self._read_frame(time.monotonic() + timeout_s + REPLY_MARGIN_S)
    if not isinstance(reply, dict) or reply.get("id") != frame["id"]:
      raise self._fail(f"reply does not answer job {frame['id']}")
    return reply

  def close(self, timeout_s: float = 3.0) -> None:
    """Stops the forkserver (end of input, then SIGKILL) and cleans up."""
    if self._closed:
      return
    self._closed = True
    try:
      self.proc.stdin.close()
    except OSError:
      pass
    try:
      self.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
      self.proc.kill()
      try:
        self.proc.wait(timeout=timeout_s)
      except subprocess.TimeoutExpired:
        logging.error("%s: pid %d survived SIGKILL", self.name, self.proc.pid)
    self.proc.stdout.close()
    self._stderr_thread.join(timeout=1.0)
    self.proc.stderr.close()
    with _LIVE_LOCK:
      _LIVE.discard(self)
    if self._on_close is not None:
      self._on_close()


@atexit.register
def close_all() -> None:
  """Closes every live guest process (also run at interpreter exit)."""
  with _LIVE_LOCK:
    live = list(_LIVE)
  for guest in live:
    try:
      guest.close(timeout_s=1.0)
    except Exception:  # pragma: no cover - best effort at exit
      logging.exception("closing %s failed", guest.name)


def private_uid(pid: int, count: int) -> int:
  """The uid (and gid) of the `count`-th forkserver started by process `pid`.

  Distinct for every live forkserver on the host as long as one process
  has fewer than `PRIVATE_UIDS_PER_PROCESS` alive at once (pids are unique
  among live processes); no account owns these ids.
  """
  slot = count % PRIVATE_UIDS_PER_PROCESS
  return PRIVATE_UID_BASE + (pid % 2**22) * PRIVATE_UIDS_PER_PROCESS + slot


def pid_alive(pid: int) -> bool:
  """True while a process `pid` exists (someone else's included)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def dead_hosts_dirs(
  prefix: str, tmp_dir: str | None = None
) -> list[pathlib.Path]:
  """`<tmp_dir>/<prefix><pid>.*` whose host process `pid` is gone.

  Names without a pid after the prefix are not a launcher's and are left
  out, as are this process's and those of any live pid.
  """
  found = []
  base = pathlib.Path(tmp_dir or tempfile.gettempdir())
  for path in base.glob(prefix + "*"):
    try:
      pid = int(path.name[len(prefix) :].split(".")[0])
    except ValueError:
      continue
    if pid != os.getpid() and not pid_alive(pid):
      found.append(path)
  return found


def sweep_stale_scratch(tmp_dir: str | None = None) -> list[str]:
  """Removes the scratch directories of host processes that are gone.

  A host killed outright (SIGKILL, a Ray actor killed or shut down) runs
  no clean-up; its forkservers die with it (PR_SET_PDEATHSIG) and leave
  their directories, `<tmp>/codeagent_scratch.<host pid>.<random>`. Those
  whose host pid no longer exists are removed; a live pid, even one reused
  by another program, keeps its directories.

  Args:
    tmp_dir: where to look (default: the temporary directory).

  Returns:
    The directories removed.
  """
  removed = []
  for path in dead_hosts_dirs(SCRATCH_PREFIX, tmp_dir):
    shutil.rmtree(path, ignore_errors=True)
    removed.append(str(path))
  return removed


class ProcessLauncher:
  """Starts the forkserver as a plain subprocess (the `process` backend).

  The same guest, limits and judge as under gVisor, but no isolation of the
  file system, network or process table beyond rlimits and (when the host
  runs as root) a uid of each forkserver's own (`private_uid`). Use it
  only where gVisor cannot run.
  """

  def __init__(self, config: config_lib.SandboxConfig):
    self.config = config
    self._count = 0
    self._lock = threading.Lock()
    self._warned = False
    sweep_stale_scratch()

  def launch(self) -> GuestProcess:
    """Starts one forkserver with a private scratch directory."""
    with self._lock:
      self._count += 1
      name = f"process-sandbox-{self._count}"
    scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}.")
    as_root = os.geteuid() == 0
    uid = private_uid(os.getpid(), next(_LAUNCHED)) if as_root else None
    if as_root:
      os.chown(scratch, uid, uid)
    guest_config = {
      "scratch_root": scratch,
      "uid": uid,
      "gid": uid,
      "kill_scope": "descendants",
      "proc": "/proc",
      "parent_pid": os.getpid(),
    }
    guest = GuestProcess(
      guest_command(self.config.python, str(GUEST_DIR), guest_config),
      name=name,
      startup_timeout_s=self.config.startup_timeout_s,
      max_reply_bytes=max_reply_bytes(self.config),
      on_close=lambda: shutil.rmtree(scratch, ignore_errors=True),
    )
    state = guest.info.get("job_filter")
    if state != "on" and not self._warned:
      # Not an isolation boundary anyway; say what else is missing.
      self._warned = True
      logging.warning(
        "%s: job processes run without the seccomp filter (%s): a job can"
        " leave IPC objects on this host for later jobs.",
        name,
        state,
      )
    return guest

  def close(self) -> None:
    """Nothing shared to release."""
