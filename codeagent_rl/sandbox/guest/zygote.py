"""The zygote: forks spares on the server's request; never sees job data.

Forked from the server before the first job, it answers each request on
its socket with a fresh spare (`child.spare_main`), whose pipes it hands to
the server (SCM_RIGHTS), and reports the exits of its children. Standard
library only (see the package docstring).
"""

import gc
import os
import select
import signal
import socket
import traceback

from . import child
from . import wire


def zygote_main(sock: socket.socket, config: dict, job_filter: str) -> None:
  """Forks spares on request and reports exits; never returns.

  Args:
    sock: the zygote's end of the server's socket pair.
    config: the server's config (see the package docstring).
    job_filter: passed on to every spare (`child.probe_job_filter`).
  """
  wake_r, wake_w = os.pipe()
  for fd in (wake_r, wake_w):
    os.set_blocking(fd, False)
  signal.set_wakeup_fd(wake_w)
  signal.signal(signal.SIGCHLD, lambda signum, frame: None)
  # Objects that exist now are never collected in a child, so its collector
  # does not write to (and copy) every page it inherited.
  gc.freeze()
  while True:
    ready, _, _ = select.select([sock, wake_r], [], [])
    if wake_r in ready:
      _report_exits(sock, wake_r)
    if sock in ready:
      request = sock.recv(64)
      if not request:
        os._exit(0)
      _fork_spare(sock, config, job_filter, (wake_r, wake_w))


def _report_exits(sock: socket.socket, wake_r: int) -> None:
  """Reaps every exited child and tells the server its status."""
  try:
    os.read(wake_r, 4096)
  except BlockingIOError:
    pass
  while True:
    try:
      pid, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
      break
    if pid == 0:
      break
    sock.send(wire.dumps({"exited": pid, "status": status}).encode())


def _fork_spare(sock, config, job_filter, wake_fds) -> None:
  """Forks one spare and sends its pid and pipes to the server."""
  job_r, job_w = os.pipe()
  out_r, out_w = os.pipe()
  err_r, err_w = os.pipe()
  res_r, res_w = os.pipe()
  pid = os.fork()
  if pid == 0:
    try:
      sock.close()
      for fd in (*wake_fds, job_w, out_r, err_r, res_r):
        os.close(fd)
      signal.set_wakeup_fd(-1)
      child.spare_main(config, job_filter, job_r, out_w, err_w, res_w)
    except BaseException:
      try:
        traceback.print_exc()
      finally:
        os._exit(70)
    os._exit(70)
  for fd in (job_r, out_w, err_w, res_w):
    os.close(fd)
  fds = [job_w, out_r, err_r, res_r]
  socket.send_fds(sock, [wire.dumps({"forked": pid}).encode()], fds)
  for fd in fds:
    os.close(fd)
