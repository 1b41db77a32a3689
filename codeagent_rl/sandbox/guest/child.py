"""The job process: a spare that becomes a confined runner of untrusted code.

A spare is forked by the zygote before its job exists and prepared
(`_prepare_spare`) while it waits; once its job arrives it drops to the
untrusted uid, sets rlimits, installs the seccomp filter (`_enter_child`)
and runs the code, reporting on descriptor 3 (`common.RESULT_FD`).

The code shares this interpreter, so a function job fixes all it reports
before the code is imported (`_runner`): the tests, in the order the
server drew and without their indices; their inputs, decoded; and the
functions that run the tests, encode and write, which look up no name the
code could patch. A stdio job's process runs the code as `__main__` and
reports only a MemoryError; the server judges the rest from outside.
Standard library only (see the package docstring).
"""

import builtins
import errno
import io
import math
import os
import resource
import signal
import sys
import traceback

from . import common
from . import seccomp
from . import wire

# Sealed once, as the server starts (no job has run yet): every job process
# inherits these copies, which nothing its code patches reaches (`_runner`).
_ENCODE, _WRITE_FRAME = wire.sealed()


class _TestTimeout(BaseException):
  """Raised by the SIGALRM handler inside a child when a test runs too long."""


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
  os.dup2(job_r, common.JOB_FD)
  _close_fds_above(common.JOB_FD, proc)
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
      value = wire.decode(_ENCODE(sample))
      _WRITE_FRAME(null, {"event": "result", "output": _ENCODE(value)})
    namespace = {"__builtins__": builtins}
    exec(
      compile("def f(a, b):\n  return a + b\n", "warm.py", "exec"), namespace
    )
    namespace["f"](1, 2)
    signal.setitimer(signal.ITIMER_REAL, 0)
    _describe(ValueError("warm"))
  finally:
    os.close(null)


def _enter_child(config, job_filter, scratch, stdin_fd, job):
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
  if job_filter == "on":
    try:
      seccomp.install()
    except OSError as e:
      # It worked at start-up; never run a job unfiltered (a crash).
      os.write(2, f"sandbox: cannot filter the job: {e}\n".encode())
      os._exit(70)


def _bad_path(path) -> bool:
  """Whether a job's file path could leave its scratch directory."""
  return (
    type(path) is not str
    or not path
    or path.startswith("/")
    or "\\" in path
    or "\x00" in path
    or any(part in ("", ".", "..") for part in path.split("/"))
  )


def _write_files(job: dict):
  """Writes the job's files into its scratch directory (the cwd).

  Runs as the untrusted uid under the job's limits, in a directory made
  for this process alone; the host checked the paths and this checks
  them again. Puts the directory (a program's: its own) first on
  `sys.path`, as `python <path>` would.

  Returns:
    None, or (status, why) when a file could not be written.
  """
  try:
    for path, text in job["files"]:
      if _bad_path(path):
        return ("error", f"writing the files failed: bad path {path!r:.80}")
      folder = os.path.dirname(path)
      if folder:
        os.makedirs(folder, exist_ok=True)
      # "x": a path is written once, never through something already there.
      with open(path, "x", encoding="utf-8", errors="surrogatepass") as f:
        f.write(text)
  except MemoryError:
    return ("memory", "writing the files failed: MemoryError")
  except BaseException as e:
    return ("error", "writing the files failed: " + _describe(e))
  main = job.get("main_path") or ""
  sys.path.insert(0, os.path.join(os.getcwd(), os.path.dirname(main)))
  return None


def _describe(exc: BaseException) -> str:
  """`Type: message` for an exception the untrusted code raised."""
  name = type.__dict__["__qualname__"].__get__(type(exc))
  try:
    message = str(exc)
  except BaseException:
    message = "<unprintable>"
  return common.short(f"{name}: {message}" if message else name, 1000)


def _flush_and_exit(code: int, streams) -> None:
  for stream in streams:
    try:
      stream.flush()
    except BaseException:
      pass
  os._exit(code)


def _fresh_module(name: str):
  module = type(sys)(name)
  # The builtins module itself, as `__builtins__` is in a `__main__` module
  # (an imported module sees the module's dict instead).
  module.__dict__["__builtins__"] = builtins
  module.__file__ = "main.py"
  sys.modules[name] = module
  return module


def _decode_inputs(test: dict) -> tuple:
  """(args, kwargs, None) of one test, or (None, None, (status, error))."""
  try:
    return wire.decode(test["args"]), wire.decode(test["kwargs"]), None
  except MemoryError:
    return None, None, ("memory", "MemoryError")
  except BaseException as e:
    return None, None, ("error", _describe(e))


def _decode_all(tests: list) -> tuple:
  """(position, args, kwargs, failure) per test, each in objects of its own.

  The job process knows a test only by its position in the order the
  server drew.
  """
  return tuple((k, *_decode_inputs(test)) for k, test in enumerate(tests))


def _runner(job: dict, unloadable=None):
  """A function job's run, with everything it uses bound now.

  Called before the untrusted code is imported: each test's inputs are
  decoded here into objects of their own, and the functions defined below
  read no global or builtin name when they run (steering_test checks their
  bytecode), so what the code patches in modules, builtins or this package
  changes nothing they do. The code can still end its own run (exit, write
  to descriptor 3); the server checks every frame.

  Args:
    job: the job frame.
    unloadable: (status, why) when the job's files could not be written:
      every test fails with it.

  Returns:
    `run(module)`: runs the job's code in `module`, then its tests, and
    reports on descriptor 3; never returns.
  """
  encode, send = _ENCODE, _WRITE_FRAME
  fd = common.RESULT_FD
  limit = job["test_timeout_s"]
  entry_point = job["entry_point"]
  missing = f"NameError: no callable named {entry_point!r}"
  code = None
  try:
    code = compile(job["code"], "solution.py", "exec")
  except MemoryError:
    unloadable = ("memory", "loading the code failed: MemoryError")
  except BaseException as e:  # a SyntaxError, say
    unloadable = ("error", "loading the code failed: " + _describe(e))
  run_code, is_callable, kind_of, text = exec, callable, type, str
  # The code's own exception message may be a str subclass: copy it.
  name_of, exact = type.__dict__["__qualname__"].__get__, str.__str__
  setitimer, real = signal.setitimer, signal.ITIMER_REAL
  on_signal, sigalrm = signal.signal, signal.SIGALRM
  exit_, flush = os._exit, io.TextIOWrapper.flush
  streams = (sys.stdout, sys.stderr)
  timeout_error, memory_error = _TestTimeout, MemoryError
  base, encode_error = BaseException, wire.EncodeError
  calls = _decode_all(job["tests"])

  def on_alarm(signum, frame):
    raise timeout_error()

  def describe(exc) -> str:
    name = name_of(kind_of(exc))
    try:
      message = exact(text(exc))
    except base:
      message = "<unprintable>"
    # The server cuts it to its own limit, with a mark.
    return (f"{name}: {message}" if message else name)[:2000]

  def done():
    for stream in streams:
      try:
        flush(stream)
      except base:
        pass
    send(fd, {"event": "done"})
    exit_(0)

  def load(module) -> tuple:
    """(the entry point, None), or (None, (status, why)) if loading failed."""
    if unloadable is not None:
      return None, unloadable
    try:
      run_code(code, module.__dict__)
    except memory_error:
      return None, ("memory", "loading the code failed: MemoryError")
    except base as e:
      return None, ("error", "loading the code failed: " + describe(e))
    entry = module.__dict__.get(entry_point)
    if not is_callable(entry):
      return None, ("error", "loading the code failed: " + missing)
    return entry, None

  def run(module):
    on_signal(sigalrm, on_alarm)
    entry, failed = load(module)
    # The server times each test from the previous result (or from this
    # frame), so it needs no frame per test start.
    send(fd, {"event": "start"})
    for k, args, kwargs, bad_inputs in calls:
      frame = {"event": "result", "test": k}
      if failed is not None or bad_inputs is not None:
        status, error = failed or bad_inputs
        frame.update(status=status, error=error)
        send(fd, frame)
        continue
      # An alarm delivered as the timer is cancelled (a test ending at its
      # limit) raises in the inner `finally`: a timeout like any other.
      try:
        try:
          setitimer(real, limit)
          output = encode(entry(*args, **kwargs))
        finally:
          setitimer(real, 0)
        frame.update(status="ok", output=output)
      except timeout_error:
        frame.update(status="timeout", error="per-test time limit exceeded")
      except memory_error:
        frame.update(status="memory", error="MemoryError")
      except encode_error as e:
        frame.update(status="bad_output", error="returned " + text(e))
      except base as e:
        frame.update(status="error", error=describe(e))
      send(fd, frame)
    done()

  return run


def _child_function(job: dict, unloadable=None) -> None:
  """Runs a function job's tests in this process; never returns.

  The tests come in the order the server drew, without their indices
  (results name a test by its position), and everything that runs once
  the code is imported was bound before (`_runner`). With files, the code
  (an import of the target) runs in a module no file of them can name.
  """
  name = "<job>" if job.get("files") else "solution"
  _runner(job, unloadable)(_fresh_module(name))


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


def _child_stdio(job: dict, unloadable=None) -> None:
  """Runs a program as `__main__` on the stdin already on fd 0."""
  streams = (sys.stdout, sys.stderr)
  module = _fresh_module("__main__")
  main_path = job.get("main_path") or "main.py"
  module.__file__ = main_path
  sys.argv = [main_path]
  status, code = "ok", 0
  if unloadable is not None:
    status, why = unloadable
    print(why, file=sys.stderr)
    wire.write_frame(common.RESULT_FD, {"event": "exit", "status": status})
    _flush_and_exit(1, streams)
  try:
    exec(compile(job["code"], main_path, "exec"), module.__dict__)
  except SystemExit as e:
    code = _exit_code(e)
  except MemoryError:
    status, code = "memory", 1
  except BaseException as e:
    code = 1
    try:
      # Without this frame (the harness's), as `python main.py` prints it.
      tb = e.__traceback__
      traceback.print_exception(type(e), e, tb.tb_next if tb else None)
    except BaseException:
      pass
  try:
    wire.write_frame(common.RESULT_FD, {"event": "exit", "status": status})
  except BaseException:
    pass
  _flush_and_exit(code, streams)


def spare_main(config, job_filter, job_r, out_w, err_w, res_w) -> None:
  """A spare: waits for its job, then becomes a confined job process.

  Args:
    config: the server's config (see the package docstring).
    job_filter: "on" when job processes get the seccomp filter
      (`probe_job_filter`).
    job_r: the pipe the job arrives on.
    out_w: the job's stdout.
    err_w: the job's stderr.
    res_w: the job's result pipe.
  """
  if config.get("parent_pid") is not None:
    # Process backend: the job dies with the zygote (which exits with the
    # server); in a sandbox everything dies with the sandbox anyway.
    common.prctl(common.PR_SET_PDEATHSIG, signal.SIGKILL)
  _prepare_spare(job_r, out_w, err_w, res_w, config["proc"])
  message = wire.read_frame(common.JOB_FD)
  os.close(common.JOB_FD)
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
  _enter_child(config, job_filter, message["scratch"], stdin_fd, job)
  unloadable = _write_files(job) if job.get("files") else None
  if job["kind"] == "function":
    _child_function(job, unloadable)
  else:
    _child_stdio(job, unloadable)


def probe_job_filter() -> str:
  """Installs the filter in a throw-away child and checks that it holds.

  Returns:
    "on" when job processes get the seccomp filter, else "off: <why>" (the
    ready frame says which; the gVisor host refuses a sandbox without it).
  """
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
