"""The server's view of processes: the zygote, its spares, and job processes.

`Processes` forks the zygote, asks it for spares, hands jobs to them and
kills every process of a job once it is over. Standard library only (see
the package docstring).
"""

import os
import select
import signal
import socket
import time

from . import wire
from . import zygote

# How long the forkserver keeps killing job processes before it calls the
# sandbox unclean (the host then replaces it).
_KILL_TIMEOUT_S = 3.0


def _descendants(root: int, proc: str) -> list[int]:
  """All descendants of `root` (orphans re-parent to it: a subreaper)."""
  parents = {}
  for name in os.listdir(proc):
    if name.isdigit():
      try:
        with open(f"{proc}/{name}/stat", "rb") as f:
          parents[int(name)] = int(f.read().rsplit(b")", 1)[1].split()[1])
      except (OSError, IndexError, ValueError):
        continue
  found, frontier = [], {root}
  while frontier:
    frontier = {pid for pid, ppid in parents.items() if ppid in frontier}
    found.extend(frontier)
  return found


class _ZygoteGone(Exception):
  """The zygote died or closed its socket: the sandbox must be replaced."""


class Processes:
  """The zygote, the spares it forked, and the exits it reported.

  Attributes:
    sock: the server's end of the socket to the zygote.
    zygote: the zygote's pid.
    spares: (pid, [job_w, out_r, err_r, res_r]) of spares forked ahead.
    statuses: wait statuses of exited children, by pid.
    pending: spares requested, not yet reported.
  """

  def __init__(self, config: dict, job_filter: str, server_fds):
    """Forks the zygote and asks it for the first spare.

    Args:
      config: the server's config (see the package docstring).
      job_filter: what the spares do about the seccomp filter.
      server_fds: the server's protocol descriptors, closed in the zygote.
    """
    self.config = config
    self.statuses = {}
    self.spares = []
    self._reaping = None  # a killed job process the zygote has to reap
    self.pending = 0
    self.sock, zygote_sock = socket.socketpair(
      socket.AF_UNIX, socket.SOCK_SEQPACKET
    )
    self.zygote = os.fork()
    if self.zygote == 0:
      try:
        self.sock.close()
        for fd in server_fds:
          os.close(fd)
        zygote.zygote_main(zygote_sock, config, job_filter)
      finally:
        os._exit(0)
    zygote_sock.close()
    self._request_spare()

  # -- the zygote and spares --

  def _request_spare(self) -> None:
    self.sock.send(b"fork")
    self.pending += 1

  def zygote_messages(self, timeout: float | None) -> None:
    """Handles the zygote's messages, waiting up to `timeout` for one."""
    ready, _, _ = select.select([self.sock], [], [], timeout)
    while ready:
      data, fds, _, _ = socket.recv_fds(self.sock, 256, 4)
      if not data:
        raise _ZygoteGone("the zygote closed its socket")
      message = wire.loads(data)
      if "forked" in message:
        self.spares.append((message["forked"], fds))
        self.pending -= 1
      else:
        self.statuses[message["exited"]] = message["status"]
      ready, _, _ = select.select([self.sock], [], [], 0)

  def _protected(self) -> set[int]:
    """Processes that are not the job's: the server, zygote and spares."""
    return {os.getpid(), self.zygote, *(pid for pid, _ in self.spares)}

  def ensure_spare(self) -> None:
    """Asks for a spare unless one is ready or on its way."""
    if not self.spares and not self.pending:
      self._request_spare()

  def start(self, message: dict, more: bool = False):
    """Hands a job to a spare; returns its pid and [out_r, err_r, res_r].

    Args:
      message: the job process's job.
      more: another job process of this job follows (a stdio job's next
        test): fork its spare now, while this one runs.
    """
    self._await_reaped()
    for _ in range(3):
      while not self.spares:
        self.ensure_spare()
        self.zygote_messages(timeout=5.0)
      pid, (job_w, *fds) = self.spares.pop(0)
      if more:
        self.ensure_spare()
      try:
        wire.write_frame(job_w, message)
      except OSError:  # the spare died; take the next one
        for fd in fds:
          os.close(fd)
        continue
      finally:
        os.close(job_w)
      return pid, fds
    raise RuntimeError("no spare process accepted the job")

  # -- processes --

  def reap(self) -> None:
    """Reaps orphans re-parented to the server, and reads the zygote."""
    while True:
      try:
        pid, status = os.waitpid(-1, os.WNOHANG)
      except ChildProcessError:
        break
      if pid == 0:
        break
      if pid == self.zygote:
        raise _ZygoteGone(f"the zygote exited with status {status}")
      self.statuses[pid] = status
    self.zygote_messages(timeout=0)

  def _job_pids(self, job_pid: int | None) -> list[int]:
    """Every process that belongs to a job (running or left over).

    Not the server, the zygote, or spares: a spare the zygote is forking
    right now is not reported yet, but it is a root-owned child of the
    zygote, which no job process can be (job processes drop to the
    untrusted uid before they run any code, and fork from there).
    """
    protected = self._protected()
    proc = self.config["proc"]
    if self.config["kill_scope"] == "all":
      candidates = [int(p) for p in os.listdir(proc) if p.isdigit()]
    else:
      candidates = _descendants(os.getpid(), proc)
    victims = []
    for pid in candidates:
      if pid in protected:
        continue
      try:
        with open(f"{proc}/{pid}/status", "rb") as f:
          fields = dict(
            line.split(b":", 1)
            for line in f.read().splitlines()
            if b":" in line
          )
        if fields[b"State"].split()[0] == b"Z":
          continue  # dead already; its parent reaps it
        ppid, uid = int(fields[b"PPid"]), int(fields[b"Uid"].split()[0])
      except (OSError, KeyError, ValueError):
        continue
      if pid == job_pid or not (ppid == self.zygote and uid == 0):
        victims.append(pid)
    return victims

  def kill_job_processes(self, pgid: int | None) -> bool:
    """SIGKILLs and reaps every job process; False if some survived."""
    if pgid is not None:
      try:
        os.killpg(pgid, signal.SIGKILL)
      except OSError:
        pass
    deadline = time.monotonic() + _KILL_TIMEOUT_S
    empty_scans = 0
    while True:
      self.reap()
      pids = self._job_pids(pgid)
      if not pids:
        # A process forked while its parent was being killed may show up
        # in /proc a moment late: only a second empty scan ends the sweep.
        empty_scans += 1
        if empty_scans == 2:
          # Zombies re-parented to the server since the reap above: their
          # parents were job processes, all gone now, so this reap is final.
          self.reap()
          return True
        continue
      empty_scans = 0
      if time.monotonic() > deadline:
        return False
      for pid in pids:
        try:
          os.kill(pid, signal.SIGKILL)
        except OSError:
          pass
      time.sleep(0.002)

  def finish(self, pid: int, fds: list[int]) -> bool:
    """Kills a finished job process and every process of its job.

    It does not wait for the zygote to reap the job process (the zygote
    may be forking the next spare): a zombie is dead enough here, and the
    next job starts only once it is reaped (`_await_reaped`), so that it
    does not count against that job's RLIMIT_NPROC.

    Args:
      pid: the job process, done but not killed yet.
      fds: its pipes still open.

    Returns:
      False if some process of the job survived.
    """
    self._reaping = pid
    try:
      os.kill(pid, signal.SIGKILL)
    except OSError:
      pass
    for fd in fds:
      os.close(fd)
    return self.kill_job_processes(pid)

  def _await_reaped(self) -> None:
    """Waits until the zygote has reaped the previous job's process."""
    pid, self._reaping = self._reaping, None
    if pid is None:
      return
    deadline = time.monotonic() + _KILL_TIMEOUT_S
    while pid not in self.statuses:
      remaining = deadline - time.monotonic()
      if remaining <= 0:
        raise RuntimeError(f"the zygote did not reap job process {pid}")
      self.zygote_messages(timeout=min(remaining, 0.05))
    # Exits of earlier jobs: none is needed again.
    spares = {p for p, _ in self.spares}
    self.statuses = {p: s for p, s in self.statuses.items() if p in spares}
