"""The forkserver that runs untrusted jobs; standard library only.

It runs as the init process of a gVisor sandbox (or, for the `process`
backend, as a plain subprocess), with `wire.py` and `seccomp.py` next to
it. Start it as

  python3 -I -S -B guest.py '<config JSON>'

where the config is `{"scratch_root": path, "uid": int | null, "gid": int |
null, "kill_scope": "all" | "descendants", "proc": path}` ("proc" is where
the server finds procfs), plus `"parent_pid"` for the process backend (the
server then dies with that parent). It answers frames (see
`wire.py`) on its stdin/stdout: first a `{"event": "ready"}` frame (its
`"job_filter"` is "on" when a probe showed that job processes get the
seccomp filter, else "off: <why>"), then one reply per job, until end of
file.

A job is `{"id", "kind": "function" | "stdio", "code", "entry_point",
"tests", "timeout_s", "test_timeout_s", "address_space_mb", "max_output_bytes",
"max_processes", "max_file_mb", "max_open_files"}`. Function tests carry
tagged `args` / `kwargs`, stdio tests a `stdin` string: test *inputs* only.

Three kinds of process take part:

- the *server* (this file's `ForkServer`, the sandbox's init) reads jobs,
  supervises job processes and writes replies: every byte of every job and
  output passes through its memory;
- the *zygote*, forked from the server before the first job, never sees job
  data: on request it forks a *spare* child and hands the spare's pipes to
  the server (SCM_RIGHTS), so a job process inherits clean memory only, never
  the residue of earlier jobs or their outputs (a forked server would leak
  them); it also reports its children's exits;
- the *job process*: a spare receives its job on a pipe, starts a new
  session, keeps only its pipes, drops to the untrusted uid, sets rlimits
  (its address space is the job's memory divided by its process limit, so
  all its processes together fit the job's memory), installs the seccomp
  filter (`seccomp.py`: no IPC objects, keyrings or memory files that could
  outlive the job or escape its limits) and runs the code in a fresh
  module. A function job calls the entry point once per test on freshly
  decoded inputs, in shuffled order, under a SIGALRM timer, and reports
  each output as tagged plain data on descriptor 3 (the code's top level is
  bounded by the job-level limit only). A stdio job runs one job process
  per test, each in a scratch directory of its own.

The job's code can write to descriptor 3 too, so the server takes nothing
on trust there: frames must come in protocol order (`_FunctionResults`),
outputs must decode as tagged plain data, messages are cut and made valid
UTF-8, and a test's time is the server's own measurement. Anything else is
a malformed stream: the job is killed and reported as a crash. The server
enforces the per-test limit from outside as well (a child that ignores
SIGALRM is killed; only a result frame starts the next test's clock), the
job-level limit and the output caps (returned data summed over tests). A
function job's reply goes out as soon as its last result is in (the job
process flushes its streams before it says "done"). As the reply goes out,
the server asks the zygote for the next job's spare (never while a job runs:
a fork beside a running job slowed it down), so a job that does not follow
another at once finds a forked, warmed-up process waiting. Then, before it
reads the next job, the server kills every remaining process of the job (in
a sandbox: every process but itself, the zygote and the spares, which are
root and out of the job's reach), empties the scratch area and makes the
next job's directory; the next job starts once the zygote has reaped the
last one. If that clean-up fails, the next job is refused (`"refused":
true`, nothing of it ran) and the host replaces the sandbox.

Nothing here decides whether an output is right: expected values never
reach this process.
"""

import errno
import gc
import importlib.util
import io
import json
import math
import os
import random
import resource
import select
import shutil
import signal
import socket
import sys
import time
import traceback

# Extra time after a per-test limit before the forkserver kills a child that
# did not stop itself (its own SIGALRM fires first).
_GRACE_S = 0.5
# How long the forkserver keeps killing job processes before it calls the
# sandbox unclean (the host then replaces it).
_KILL_TIMEOUT_S = 3.0
# How long the pipes of a dead, killed job may stay silent before EOF.
_DRAIN_S = 1.0
_RESULT_FD = 3
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1
_TRUNCATED = "\n[... truncated]"


def _load_sibling(name: str):
  """Loads `name`.py from this file's directory (no package is installed)."""
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
  spec = importlib.util.spec_from_file_location("_sandbox_" + name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


wire = _load_sibling("wire")
# Loaded (with ctypes) once here, so that job processes inherit it.
seccomp = _load_sibling("seccomp")


class _TestTimeout(BaseException):
  """Raised by the SIGALRM handler inside a child when a test runs too long."""


def _on_alarm(signum, frame):
  del signum, frame
  raise _TestTimeout()


def _text(data: bytes, limit: int) -> str:
  """Decodes captured bytes, marking a cut at `limit`."""
  text = bytes(data[:limit]).decode("utf-8", "replace")
  return text + _TRUNCATED if len(data) > limit else text


def _short(text: str, limit: int = 2000) -> str:
  return text if len(text) <= limit else text[:limit] + _TRUNCATED


# --- The child: runs as the untrusted uid -----------------------------------


def _close_fds_above(keep: int, proc: str) -> None:
  try:
    fds = [int(fd) for fd in os.listdir(f"{proc}/self/fd")]
  except OSError:
    fds = list(range(keep + 1, 1024))
  for fd in fds:
    if fd > keep:
      try:
        os.close(fd)
      except OSError:
        pass


def _set_limits(job: dict) -> None:
  cpu = math.ceil(job["timeout_s"]) + 1
  limits = [
    (resource.RLIMIT_CORE, 0),
    (resource.RLIMIT_CPU, (cpu, cpu + 1)),
    (resource.RLIMIT_AS, job["address_space_mb"] << 20),
    (resource.RLIMIT_NPROC, job["max_processes"]),
    (resource.RLIMIT_FSIZE, job["max_file_mb"] << 20),
    (resource.RLIMIT_NOFILE, job["max_open_files"]),
  ]
  for which, value in limits:
    soft, hard = value if isinstance(value, tuple) else (value, value)
    resource.setrlimit(which, (soft, hard))


_JOB_FD = 4  # a spare's job pipe, until the job is read


def _prepare_spare(job_r, out_w, err_w, res_w, proc) -> None:
  """The job-independent set-up of a spare, done before its job arrives.

  It runs before the job arrives (in the gap between jobs when there is
  one). Everything here is the same for every job; the spare stays root (and
  so out of reach of earlier jobs' processes) until `_enter_child`.
  """
  os.setsid()
  null = os.open("/dev/null", os.O_RDWR)
  for target, fd in ((0, null), (1, out_w), (2, err_w), (3, res_w)):
    os.dup2(fd, target)
  os.dup2(job_r, _JOB_FD)
  _close_fds_above(_JOB_FD, proc)
  signal.set_wakeup_fd(-1)
  signal.signal(signal.SIGCHLD, signal.SIG_DFL)
  sys.stdin = sys.__stdin__ = io.TextIOWrapper(
    io.BufferedReader(io.FileIO(0, "rb", closefd=False)),
    encoding="utf-8",
    errors="surrogateescape",
  )
  sys.stdout = sys.__stdout__ = io.TextIOWrapper(
    io.BufferedWriter(io.FileIO(1, "wb", closefd=False)),
    encoding="utf-8",
    errors="backslashreplace",
  )
  sys.stderr = sys.__stderr__ = io.TextIOWrapper(
    io.BufferedWriter(io.FileIO(2, "wb", closefd=False)),
    encoding="utf-8",
    errors="backslashreplace",
    line_buffering=True,
  )
  _warm_up()


def _warm_up() -> None:
  """Runs the job path once on dummy data, writing to /dev/null.

  In a forked process the first write to each inherited page copies it
  (under gVisor's ptrace platform, a costly fault); taking those faults now
  keeps them out of the job's latency.
  """
  null = os.open("/dev/null", os.O_WRONLY)
  try:
    sample = [1, 2.5, "s", None, True, (1,), {2}, {"k": [3]}]
    for _ in range(3):
      value = wire.decode(wire.encode(sample))
      wire.write_frame(null, {"event": "result", "output": wire.encode(value)})
    namespace = {"__builtins__": __builtins__}
    exec(
      compile("def f(a, b):\n  return a + b\n", "warm.py", "exec"), namespace
    )
    namespace["f"](1, 2)
    signal.setitimer(signal.ITIMER_REAL, 0)
    _describe(ValueError("warm"))
    random.SystemRandom().shuffle([1, 2, 3])
  finally:
    os.close(null)


def _enter_child(config, scratch, stdin_fd, job):
  """Turns a prepared spare into a confined job process."""
  if stdin_fd is not None:
    os.dup2(stdin_fd, 0)
    os.close(stdin_fd)
  if config["uid"] is not None:
    os.setgroups([])
    os.setgid(config["gid"])
    os.setuid(config["uid"])
  os.chdir(scratch)
  os.umask(0o077)
  _set_limits(job)
  os.environ.clear()
  sys.argv = ["main.py"]
  if _JOB_FILTER == "on":
    try:
      seccomp.install()
    except OSError as e:
      # It worked at start-up; never run a job unfiltered (a crash).
      os.write(2, f"sandbox: cannot filter the job: {e}\n".encode())
      os._exit(70)


def _describe(exc: BaseException) -> str:
  """`Type: message` for an exception the untrusted code raised."""
  name = type.__dict__["__qualname__"].__get__(type(exc))
  try:
    message = str(exc)
  except BaseException:
    message = "<unprintable>"
  return _short(f"{name}: {message}" if message else name, 1000)


def _flush_and_exit(code: int, streams) -> None:
  for stream in streams:
    try:
      stream.flush()
    except BaseException:
      pass
  os._exit(code)


def _done(streams) -> None:
  """Flushes the streams, then says "done": the server replies at once."""
  for stream in streams:
    try:
      stream.flush()
    except BaseException:
      pass
  wire.write_frame(_RESULT_FD, {"event": "done"})
  os._exit(0)


def _fresh_module(name: str):
  module = type(sys)(name)
  module.__dict__["__builtins__"] = __builtins__
  module.__file__ = "main.py"
  sys.modules[name] = module
  return module


def _child_function(job: dict) -> None:
  """Runs a function job's tests in this process; never returns."""
  streams = (sys.stdout, sys.stderr)
  send = wire.write_frame
  encode = wire.encode
  tests = job["tests"]
  signal.signal(signal.SIGALRM, _on_alarm)
  module = _fresh_module("solution")
  try:
    exec(compile(job["code"], "solution.py", "exec"), module.__dict__)
    entry = module.__dict__.get(job["entry_point"])
    if not callable(entry):
      raise NameError(f"no callable named {job['entry_point']!r}")
    load_error = None
  except BaseException as e:
    load_error = ("memory" if isinstance(e, MemoryError) else "error", e)
  order = list(range(len(tests)))
  if load_error is not None:
    status, exc = load_error
    reason = "loading the code failed: " + _describe(exc)
    send(_RESULT_FD, {"event": "order", "order": order})
    for i in order:
      send(_RESULT_FD, {"event": "result", "test": i, "status": status,
                        "error": reason})  # fmt: skip
    _done(streams)
  random.SystemRandom().shuffle(order)
  # The server times each test from the previous result (or from this
  # frame), so it needs the order but no frame per test start.
  send(_RESULT_FD, {"event": "order", "order": order})
  for i in order:
    frame = {"event": "result", "test": i}
    try:
      args = wire.decode(tests[i]["args"])
      kwargs = wire.decode(tests[i]["kwargs"])
      signal.setitimer(signal.ITIMER_REAL, job["test_timeout_s"])
      value = entry(*args, **kwargs)
      frame.update(status="ok", output=encode(value))
    except _TestTimeout:
      frame.update(status="timeout", error="per-test time limit exceeded")
    except MemoryError:
      frame.update(status="memory", error="MemoryError")
    except wire.EncodeError as e:
      frame.update(status="bad_output", error=f"returned {e}")
    except BaseException as e:
      frame.update(status="error", error=_describe(e))
    finally:
      signal.setitimer(signal.ITIMER_REAL, 0)
    send(_RESULT_FD, frame)
  _done(streams)


def _exit_code(exc: SystemExit) -> int:
  code = exc.code
  if code is None:
    return 0
  if isinstance(code, int):
    return code & 0xFF
  try:
    print(code, file=sys.stderr)
  except BaseException:
    pass
  return 1


def _child_stdio(job: dict) -> None:
  """Runs a program as `__main__` on the stdin already on fd 0."""
  streams = (sys.stdout, sys.stderr)
  module = _fresh_module("__main__")
  status, code = "ok", 0
  try:
    exec(compile(job["code"], "main.py", "exec"), module.__dict__)
  except SystemExit as e:
    code = _exit_code(e)
  except MemoryError:
    status, code = "memory", 1
  except BaseException:
    code = 1
    try:
      traceback.print_exc()
    except BaseException:
      pass
  try:
    wire.write_frame(_RESULT_FD, {"event": "exit", "status": status})
  except BaseException:
    pass
  _flush_and_exit(code, streams)


# --- The forkserver: runs as the sandbox's init -----------------------------


class _EffectiveIds:
  """Temporarily sets the effective uid/gid (no-op when `uid` is None)."""

  def __init__(self, uid, gid):
    self.uid, self.gid = uid, gid

  def __enter__(self):
    if self.uid is not None:
      os.setegid(self.gid)
      os.seteuid(self.uid)

  def __exit__(self, *exc):
    if self.uid is not None:
      os.seteuid(0)
      os.setegid(0)


def _make_writable_and_retry(func, path, exc_info):
  """Error hook of rmtree: a job may have made its directories unwritable."""
  del exc_info
  parent = os.path.dirname(path)
  try:
    os.chmod(parent, 0o700)
    if os.path.isdir(path) and not os.path.islink(path):
      os.chmod(path, 0o700)
  except OSError:
    return
  try:
    if func is os.rmdir or func is os.unlink:
      func(path)
    elif os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, onerror=_ignore)
  except OSError:
    pass


def _empty_directory(root: str) -> bool:
  """Deletes what `root` holds (links are not followed); True if empty."""
  for name in os.listdir(root):
    path = os.path.join(root, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, onerror=_make_writable_and_retry)
    else:
      try:
        os.unlink(path)
      except FileNotFoundError:
        pass
  return not os.listdir(root)


def _ignore(func, path, exc_info):
  del func, path, exc_info


class _Malformed(Exception):
  """A job process broke the result protocol (its code shares the pipe)."""


# Statuses a function job process may report for one test.
_CHILD_STATUSES = ("ok", "error", "timeout", "memory", "bad_output")
_ERROR_CHARS = 1000


def _clean_text(text: str, limit: int) -> str:
  """`text` cut to `limit` characters, lone surrogates escaped.

  A job's exception messages are its own strings; one holding a lone
  surrogate would survive JSON but break UTF-8 encoders on the host.
  """
  text = _short(text, limit)
  return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _FunctionResults:
  """A function job's result frames, accepted only in the order they come.

  The job process sends `order` (a permutation of the test indices), then
  one `result` per test in that order, then `done`. Its untrusted code can
  write to the same descriptor, so anything else is malformed (the server
  kills the job).

  Times are the server's own, at the resolution of its reads of the pipe:
  the results one read brings share evenly the time since the previous
  read that brought results (for the first, since the job started: its
  loading counts), so the times of a job's tests add up to the wall time
  until its last result. (A job process writes several results before the
  server runs again: most reads of a fast job bring many.) Times the job
  process might claim are ignored.

  Attributes:
    order: the test order, once received.
    tests: per test index, the reply entry once its result arrived.
    done: the job process said "done" after the last result.
    mark: when the last read that brought results happened (or the job
      started): the start of the test that runs now.
  """

  def __init__(self, num_tests: int, started: float):
    self.order = None
    self.tests = [None] * num_tests
    self.done = False
    self.mark = started
    self._received = 0
    self._unstamped = []  # tests whose result came in the current read

  def running(self) -> int | None:
    """The test that runs now (None before the order and after the last)."""
    if self.order is None or self._received >= len(self.order):
      return None
    return self.order[self._received]

  def feed(self, frame) -> None:
    """Takes one frame of the current read; raises `_Malformed`."""
    if not isinstance(frame, dict):
      raise _Malformed("a result frame is not an object")
    event = frame.get("event")
    n = len(self.tests)
    if self.done:
      raise _Malformed("a frame after done")
    if event == "order" and self.order is None:
      order = frame.get("order")
      if not (
        type(order) is list
        and len(order) == n
        and all(type(i) is int for i in order)
        and sorted(order) == list(range(n))
      ):
        raise _Malformed("the test order is not a permutation of the tests")
      self.order = order
    elif event == "result" and self.running() is not None:
      index = self.running()
      if type(frame.get("test")) is not int or frame["test"] != index:
        raise _Malformed(f"a result for test {frame.get('test')!r:.20}")
      self.tests[index] = _test_entry(frame)
      self._unstamped.append(index)
      self._received += 1
    elif event == "done" and self.order is not None and self.running() is None:
      self.done = True
    else:
      raise _Malformed(f"an unexpected {str(event)[:20]!r} frame")

  def stamp(self, now: float) -> None:
    """Ends a read of the pipe: times the results it brought (class doc)."""
    if self._unstamped:
      share = (now - self.mark) / len(self._unstamped)
      for index in self._unstamped:
        self.tests[index]["time_s"] = share
      self._unstamped = []
      self.mark = now


def _test_entry(frame: dict) -> dict:
  """The reply entry of one test's result frame (raises `_Malformed`)."""
  status, error = frame.get("status"), frame.get("error", "")
  if status not in _CHILD_STATUSES or type(error) is not str:
    raise _Malformed("a result frame with a bad status or error")
  entry = {
    "status": status,
    "output": None,
    "error": _clean_text(error, _ERROR_CHARS),
    "time_s": 0.0,
  }
  if status == "ok":
    if "output" not in frame:
      raise _Malformed("an ok result without an output")
    try:
      wire.decode(frame["output"])
    except (wire.DecodeError, RecursionError) as e:
      entry["status"] = "bad_output"
      entry["error"] = _short(f"output is not tagged plain data: {e}", 200)
    else:
      entry["output"] = frame["output"]
  return entry


class _Capture:
  """What the forkserver saw of one child process."""

  def __init__(self):
    self.stdout = bytearray()
    self.stderr = bytearray()
    self.result_bytes = 0  # everything received on the result pipe
    self.results = None  # a function job's `_FunctionResults`
    self.memory = False  # a stdio run reported a MemoryError
    self.malformed = None
    self.killed = None  # "timeout" | "output_limit" when the server killed it
    self.exit_code = None
    self.signal = None
    self.in_test = None  # index of the test running when it was killed
    self.killed_at = None  # when the server killed it for its time
    self.done = False  # a function job sent "done": not waited for


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


def _zygote_main(sock: socket.socket, config: dict) -> None:
  """Forks spares on request and reports exits; never sees job data."""
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
    if sock in ready:
      request = sock.recv(64)
      if not request:
        os._exit(0)
      job_r, job_w = os.pipe()
      out_r, out_w = os.pipe()
      err_r, err_w = os.pipe()
      res_r, res_w = os.pipe()
      pid = os.fork()
      if pid == 0:
        try:
          sock.close()
          for fd in (wake_r, wake_w, job_w, out_r, err_r, res_r):
            os.close(fd)
          signal.set_wakeup_fd(-1)
          _spare_main(config, job_r, out_w, err_w, res_w)
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


def _spare_main(config, job_r, out_w, err_w, res_w) -> None:
  """A spare: waits for its job, then becomes a confined job process."""
  if config.get("parent_pid") is not None:
    # Process backend: the job dies with the zygote (which exits with the
    # server); in a sandbox everything dies with the sandbox anyway.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
  _prepare_spare(job_r, out_w, err_w, res_w, config["proc"])
  message = wire.read_frame(_JOB_FD)
  os.close(_JOB_FD)
  if message is None:  # the server is shutting down
    os._exit(0)
  job = message["job"]
  stdin_fd = None
  if message["stdin"] is not None:
    stdin_fd = os.memfd_create("stdin", 0)
    view = memoryview(message["stdin"].encode("utf-8", "surrogateescape"))
    while view:
      view = view[os.write(stdin_fd, view) :]
    os.lseek(stdin_fd, 0, os.SEEK_SET)
  _enter_child(config, message["scratch"], stdin_fd, job)
  if job["kind"] == "function":
    _child_function(job)
  else:
    _child_stdio(job)


class ForkServer:
  """Receives jobs on `in_fd`, answers on `out_fd`."""

  def __init__(self, config: dict, in_fd: int, out_fd: int):
    self.config = config
    self.in_fd = in_fd
    self.out_fd = out_fd
    self.clean = True
    self.statuses = {}
    self.spares = []  # (pid, [job_w, out_r, err_r, res_r]) forked ahead
    self._unfinished = None  # (pid, fds) of a finished, unkilled job
    self._reaping = None  # a killed job process the zygote has to reap
    self.after_s = 0.0
    self.after_phases = {}
    self.cleanup_error = ""
    self.next_scratch = None  # made after a job, for the next one
    self.used_scratch = None  # the scratch directory of the last job
    self.pending = 0  # spares requested, not yet reported
    self.sock, zygote_sock = socket.socketpair(
      socket.AF_UNIX, socket.SOCK_SEQPACKET
    )
    self.zygote = os.fork()
    if self.zygote == 0:
      try:
        self.sock.close()
        for fd in (in_fd, out_fd):
          os.close(fd)
        _zygote_main(zygote_sock, config)
      finally:
        os._exit(0)
    zygote_sock.close()
    self._request_spare()

  # -- the zygote and spares --

  def _request_spare(self) -> None:
    self.sock.send(b"fork")
    self.pending += 1

  def _zygote_messages(self, timeout: float | None) -> None:
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

  def _ensure_spare(self) -> None:
    """Asks for a spare unless one is ready or on its way."""
    if not self.spares and not self.pending:
      self._request_spare()

  def _start(self, message: dict, more: bool = False):
    """Hands a job to a spare; returns its pid and [out_r, err_r, res_r].

    Args:
      message: the job process's job.
      more: another job process of this job follows (a stdio job's next
        test): fork its spare now, while this one runs.
    """
    self._await_reaped()
    for _ in range(3):
      while not self.spares:
        self._ensure_spare()
        self._zygote_messages(timeout=5.0)
      pid, (job_w, *fds) = self.spares.pop(0)
      if more:
        self._ensure_spare()
      try:
        wire.write_frame(job_w, message)
      except OSError:  # the spare died; take the next one
        for fd in fds:
          os.close(fd)
        continue
      finally:
        os.close(job_w)
      self._mark("start")
      return pid, fds
    raise RuntimeError("no spare process accepted the job")

  # -- processes --

  def _reap(self) -> None:
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
    self._zygote_messages(timeout=0)

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
      self._reap()
      pids = self._job_pids(pgid)
      if not pids:
        # A process forked while its parent was being killed may show up
        # in /proc a moment late: only a second empty scan ends the sweep.
        empty_scans += 1
        if empty_scans == 2:
          # Zombies re-parented to the server since the reap above: their
          # parents were job processes, all gone now, so this reap is final.
          self._reap()
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

  def _supervise(self, job, pid, fds, job_deadline, budget, stdio) -> _Capture:
    """Reads a child's pipes until it is gone, enforcing limits."""
    out_r, err_r, res_r = fds
    cap = _Capture()
    buffers = {out_r: cap.stdout, err_r: cap.stderr, res_r: bytearray()}
    limits = {
      out_r: budget["stdout"],
      err_r: budget["stderr"],
      res_r: budget["result"],
    }
    open_fds = set(fds)
    # A function child stops itself at its SIGALRM; a stdio program has no
    # timer of ours inside, so the limit is enforced from here exactly.
    test_limit = job["test_timeout_s"] + (0.0 if stdio else _GRACE_S)
    test_deadline = time.monotonic() + test_limit if stdio else None
    if not stdio:
      cap.results = _FunctionResults(len(job["tests"]), time.monotonic())
    exited = False
    # Exits are looked for only when the zygote reports one or nothing
    # arrived (two system calls saved per result frame).
    look = True
    while (
      open_fds and cap.killed is None and cap.malformed is None and not cap.done
    ):
      if not exited and look:
        self._reap()
        exited = pid in self.statuses
        if exited:
          self._mark("run")
          # The job process is gone: nothing of the job may outlive it, and
          # the pipes reach end of file only once every writer is dead.
          self.clean &= self.kill_job_processes(pid)
      now = time.monotonic()
      deadline = job_deadline
      if test_deadline is not None:
        deadline = min(deadline, test_deadline)
      if now >= deadline and not exited:
        cap.killed, cap.killed_at = "timeout", now
        break
      # Once the job is dead and killed, its pipes end at once; a writer
      # that survived the kill must not hang the server.
      wait = _DRAIN_S if exited else max(0.0, deadline - now)
      ready, _, _ = select.select([*open_fds, self.sock], [], [], wait)
      if exited and not ready:
        break
      look = not ready or self.sock in ready
      for fd in ready:
        if fd is self.sock:
          continue  # the zygote reports an exit: read at the loop's top
        data = os.read(fd, 65536)
        if not data:
          open_fds.discard(fd)
          os.close(fd)
          continue
        buffers[fd] += data
        if fd == res_r:
          # Parsed frames leave the buffer: count every byte received.
          cap.result_bytes += len(data)
          over = cap.result_bytes > limits[fd]
        else:
          over = len(buffers[fd]) > limits[fd]
        if over:
          cap.killed = "output_limit"
        elif fd == res_r:
          now = time.monotonic()
          try:
            count = self._read_frames(
              cap, buffers[res_r], budget["result"], now
            )
          except _Malformed as e:
            cap.malformed = str(e)
            break
          if count and cap.results is not None:
            # The next test (or the "done" after the last) starts now,
            # with its own time limit, counted from here.
            test_deadline = now + test_limit
            cap.in_test = cap.results.running()
    if cap.done and cap.killed is None:
      # The job flushed its streams before "done": what they hold now is
      # all of its output. The process is killed after the reply.
      for fd in (out_r, err_r):
        if fd in open_fds:
          self._drain(fd, buffers[fd], limits[fd], cap)
      self._unfinished = (pid, list(open_fds))
      self._mark("run")
      return cap
    for fd in open_fds:
      os.close(fd)
    self._mark("run")
    self.clean &= self.kill_job_processes(pid)
    self._mark("kill")
    # The zygote reaped the job process; its report may still be on the way.
    reported = time.monotonic() + _DRAIN_S
    while pid not in self.statuses and time.monotonic() < reported:
      self._zygote_messages(timeout=0.05)
    self._mark("reap")
    status = self.statuses.pop(pid, None)
    if status is not None:
      if os.WIFSIGNALED(status):
        cap.signal = os.WTERMSIG(status)
      else:
        cap.exit_code = os.waitstatus_to_exitcode(status)
    self.statuses.clear()
    return cap

  @staticmethod
  def _read_frames(cap: _Capture, buffer: bytearray, limit: int, now) -> int:
    """Takes the complete frames in `buffer`; returns how many.

    Raises:
      _Malformed: a frame is not what the protocol allows here.
    """
    try:
      frames = wire.split_frames(buffer, limit)
    except wire.FrameError as e:
      raise _Malformed(str(e)) from None
    for frame in frames:
      if cap.results is not None:
        cap.results.feed(frame)
        cap.done = cap.results.done
      elif not isinstance(frame, dict):
        raise _Malformed("a result frame is not an object")
      elif frame.get("event") == "exit" and frame.get("status") == "memory":
        cap.memory = True
    if frames and cap.results is not None:
      cap.results.stamp(now)
    return len(frames)

  @staticmethod
  def _drain(fd: int, buffer: bytearray, limit: int, cap: _Capture) -> None:
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

  def _finish_unfinished(self) -> bool:
    """Kills the finished job process and every process of its job.

    It does not wait for the zygote to reap the job process (the zygote
    may be forking the next spare): a zombie is dead enough here, and the
    next job starts only once it is reaped (`_await_reaped`), so that it
    does not count against that job's RLIMIT_NPROC.
    """
    pid, fds = self._unfinished
    self._unfinished = None
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
      self._zygote_messages(timeout=min(remaining, 0.05))
    # Exits of earlier jobs: none is needed again.
    spares = {p for p, _ in self.spares}
    self.statuses = {p: s for p, s in self.statuses.items() if p in spares}

  def after_job(self) -> None:
    """After a reply: no process or file of the job left, a spare coming.

    Runs before the next job is read; a failure marks the sandbox unclean
    and the next job is refused.
    """
    start = self._last_mark = time.monotonic()
    self.phases = {}
    try:
      if self._unfinished is not None:
        self.clean &= self._finish_unfinished()  # kills and sweeps
      else:
        # The job's own supervision swept already, unless it failed.
        self.clean &= self.kill_job_processes(None)
      self._mark("kill")
      used, self.used_scratch = self.used_scratch, None
      if self.clean:
        self.clean &= self._renew_scratch_root(used)
      self._mark("cleanup")
    except Exception:
      self.clean = False
      self.cleanup_error = _short(traceback.format_exc())
    self.after_s = time.monotonic() - start
    self.after_phases = self.phases

  # -- jobs --

  def _mark(self, phase: str) -> None:
    """Adds the time since the previous mark to `phases[phase]`."""
    now = time.monotonic()
    self.phases[phase] = self.phases.get(phase, 0.0) + now - self._last_mark
    self._last_mark = now

  def _as_job_user(self):
    """Context in which files are made and removed as the untrusted uid.

    The scratch root belongs to that uid, and the forkserver has no
    CAP_CHOWN or CAP_DAC_OVERRIDE: it switches its effective ids instead
    (CAP_SETUID/CAP_SETGID), so a job can neither see nor keep files that
    the next job's scratch directory could meet.
    """
    return _EffectiveIds(self.config["uid"], self.config["gid"])

  def _scratch(self) -> str:
    """The job's scratch directory: made after the previous job, or now."""
    path, self.next_scratch = self.next_scratch, None
    if path is not None:
      return path
    root = self.config["scratch_root"]
    path = os.path.join(root, os.urandom(8).hex())
    with self._as_job_user():
      os.chmod(root, 0o700)  # a job owns the root and may have changed it
      os.mkdir(path, 0o700)
    return path

  def _renew_scratch_root(self, used: str | None) -> bool:
    """Empties the scratch root and makes the next job's directory in it.

    Runs when no job process is left. The directory `used` (the last job's)
    usually is empty: removing it and finding the root empty is the fast
    path. Returns False (and makes nothing) if the root cannot be emptied.
    """
    root = self.config["scratch_root"]
    with self._as_job_user():
      os.chmod(root, 0o700)  # a job owns the root and may have changed it
      if used is not None:
        try:
          os.rmdir(used)
        except OSError:
          pass
      if os.listdir(root) and not _empty_directory(root):
        return False
      path = os.path.join(root, os.urandom(8).hex())
      os.mkdir(path, 0o700)
      self.next_scratch = path
    return True

  def run_job(self, job: dict) -> dict:
    """Runs one job; returns the reply frame (outputs, statuses, streams)."""
    start = time.monotonic()
    self.phases = {}
    self._last_mark = start
    job_deadline = start + job["timeout_s"]
    cap_bytes = job["max_output_bytes"]
    budget = {"stdout": cap_bytes, "stderr": cap_bytes, "result": cap_bytes}
    scratch = self.used_scratch = self._scratch()
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
    message = {"job": job, "scratch": scratch, "stdin": None}
    pid, fds = self._start(message)
    cap = self._supervise(job, pid, fds, job_deadline, budget, stdio=False)
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
    status, reason = _job_status(cap, results.done, tests)
    return {
      "status": status,
      "reason": reason,
      "exit_code": cap.exit_code,
      "signal": cap.signal,
      "stdout": _text(cap.stdout, budget["stdout"]),
      "stderr": _text(cap.stderr, budget["stderr"]),
      "tests": tests,
    }

  def _run_stdio(self, job, scratch, job_deadline, budget) -> dict:
    tests, stderrs = [], []
    exit_code = None
    killed = None
    for index, test in enumerate(job["tests"]):
      if killed is not None or time.monotonic() >= job_deadline:
        tests.append({"status": "not_run", "stdout": "", "exit_code": None,
                      "error": "not run: the job stopped first"})  # fmt: skip
        continue
      started = time.monotonic()
      if index:
        # Each run gets a scratch directory of its own (the last run's
        # processes are dead): nothing a run wrote, its stdin say, is
        # there for the next one.
        if not self._renew_scratch_root(scratch):
          self.clean = False
          raise RuntimeError("the scratch area could not be emptied")
        scratch, self.next_scratch = self.next_scratch, None
        self.used_scratch = scratch
      # Each run gets the code and its own stdin, not the other tests'.
      unit = dict(job, tests=[])
      message = {"job": unit, "scratch": scratch, "stdin": test["stdin"]}
      more = index + 1 < len(job["tests"])
      pid, fds = self._start(message, more)
      cap = self._supervise(job, pid, fds, job_deadline, budget, stdio=True)
      for name in ("stdout", "stderr"):
        budget[name] -= len(getattr(cap, name))
      stderrs.append(cap.stderr)
      status, error = _stdio_status(cap)
      if cap.killed is not None:
        killed = cap.killed
      if exit_code in (None, 0):
        exit_code = cap.exit_code
      tests.append({
        "status": status,
        "stdout": _text(cap.stdout, job["max_output_bytes"]),
        "exit_code": cap.exit_code,
        "error": error,
        "time_s": time.monotonic() - started,
      })  # fmt: skip
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
      "stderr": _text(b"".join(stderrs), cap_bytes),
      "tests": tests,
    }

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
        "job_filter": _JOB_FILTER,
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
          "reason": _short(traceback.format_exc()),
          "clean": False,
        }
      if self.clean:
        # The zygote forks the next job's spare while this reply travels
        # and the server cleans up (not while a job runs: that slowed the
        # job down). The spare is root, out of reach of what is left.
        self._ensure_spare()
      wire.write_frame(self.out_fd, reply)
      self.after_job()
    self.kill_job_processes(None)


def _signal_name(signum: int) -> str:
  try:
    return signal.Signals(signum).name
  except ValueError:
    return f"signal {signum}"


def _job_status(cap: _Capture, done: bool, tests: list) -> tuple[str, str]:
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


def _stdio_status(cap: _Capture) -> tuple[str, str]:
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


def _prctl(option: int, value: int) -> bool:
  """prctl(2) through ctypes (Linux); False where unavailable."""
  try:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, value, 0, 0, 0) == 0
  except (OSError, AttributeError):
    return False


def _become_subreaper() -> bool:
  """Orphans of job processes re-parent to us (Linux); False elsewhere."""
  return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


# "on" when job processes get the seccomp filter, else "off: <why>" (the
# ready frame says which; the gVisor host refuses a sandbox without it).
_JOB_FILTER = "off: not probed"


def _probe_job_filter() -> str:
  """Installs the filter in a throw-away child and checks that it holds."""
  pid = os.fork()
  if pid == 0:
    try:
      seccomp.install()
      number = seccomp.syscall_numbers()["shmget"]
      libc = seccomp.ctypes.CDLL(None, use_errno=True)
      denied = libc.syscall(number, 0, 4096, 0o1600) == -1
      os._exit(0 if denied and seccomp.ctypes.get_errno() == errno.EPERM else 3)
    except OSError as e:
      os._exit(4 if e.errno == errno.ENOSYS else 5)
    except BaseException:
      os._exit(6)
  code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
  reasons = {
    0: "on",
    3: "off: the filter did not deny a call",
    4: f"off: no system call table for {os.uname().machine}",
    5: "off: the kernel refused the filter",
  }
  return reasons.get(code, f"off: the probe exited with {code}")


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
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
      return 0
  global _JOB_FILTER
  _JOB_FILTER = _probe_job_filter()
  try:
    ForkServer(config, in_fd, out_fd).serve()
  except OSError as e:
    if e.errno != errno.EPIPE:
      raise
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
