"""Sandbox jobs and results: what crosses the boundary, and its validation.

A `Job` holds code and test *inputs* only; `to_frame` turns it into the
frame the guest reads, with the limits of a `SandboxConfig`. The reply frame
is validated by `result_from_reply` into a `JobResult`: outputs are decoded
from the tagged encoding (an undecodable output is a failed test, never an
error of the host), and anything structurally wrong is a `SandboxError`.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
from typing import Any

from codeagent_rl import status as status_lib
from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import wire
from codeagent_rl.sandbox import worker

FUNCTION = "function"
STDIO = "stdio"
KINDS = (FUNCTION, STDIO)
# Per-test statuses (`TestRun.status`).
TEST_STATUSES = (
  "ok",  # returned a value / exited 0
  "error",  # raised, or a stdio program exited non-zero or by a signal
  "timeout",
  "memory",
  "output_limit",
  "bad_output",  # returned something that is not plain data
  "not_run",  # the job stopped before this test
)
_STATUS_BY_NAME = {s.name.lower(): s for s in status_lib.JobStatus}
# The name a workspace call job binds its target function to.
WORKSPACE_ENTRY = "workspace_target_"
# Bounds on a job's files (the task layer's own limits are tighter; these
# keep a frame the guest can always write).
MAX_FILES = 256
MAX_FILES_BYTES = 4 << 20


def _path_problem(path) -> str:
  """Why `path` cannot name a file in a job's scratch directory ("" if ok)."""
  if not isinstance(path, str) or not path:
    return "must be a non-empty str"
  if path.startswith("/") or "\\" in path or "\x00" in path:
    return "must be a relative POSIX path"
  if any(part in ("", ".", "..") for part in path.split("/")):
    return "has an empty, '.' or '..' segment"
  return ""


def _check_files(files) -> None:
  """Raises ValueError unless `files` is (path, text) pairs a guest writes."""
  if not isinstance(files, tuple):
    raise ValueError("Job.files: must be a tuple of (path, text) pairs.")
  if len(files) > MAX_FILES:
    raise ValueError(f"Job.files: {len(files)} files; at most {MAX_FILES}.")
  seen, size = set(), 0
  for i, item in enumerate(files):
    if not (isinstance(item, tuple) and len(item) == 2):
      raise ValueError(f"Job.files[{i}]: expected a (path, text) pair.")
    path, text = item
    problem = _path_problem(path)
    if problem:
      raise ValueError(f"Job.files[{i}]: path {path!r:.80} {problem}.")
    if not isinstance(text, str):
      raise ValueError(f"Job.files[{i}]: the text of {path!r:.80} is no str.")
    if path in seen:
      raise ValueError(f"Job.files[{i}]: {path!r:.80} is there twice.")
    seen.add(path)
    size += len(text.encode("utf-8", "surrogatepass"))
  if size > MAX_FILES_BYTES:
    raise ValueError(
      f"Job.files: {size} bytes in all; at most {MAX_FILES_BYTES}."
    )


def status_name(status: status_lib.JobStatus) -> str:
  """The lowercase name used in JSON (`JobStatus.OK` -> "ok")."""
  return status_lib.JobStatus(status).name.lower()


@dataclasses.dataclass(frozen=True)
class Job:
  """Code plus test inputs; expected values never enter a job.

  Attributes:
    kind: "function" (call `entry_point` once per input) or "stdio" (run the
      code as a program once per stdin).
    code: Python source.
    inputs: for "function", `(args, kwargs)` pairs of plain data; for
      "stdio", stdin strings.
    entry_point: the function to call ("function" only).
    timeout_s: job-level limit; None means the pool's `timeout_s`.
    test_timeout_s: per-test limit; None means the pool's `test_timeout_s`.
    files: `(path, text)` pairs written into the job's scratch directory
      before the code runs (a repository's workspace): relative POSIX
      paths without `.` or `..` segments. The directory comes first on
      `sys.path` (for a program: `main_path`'s directory, as `python
      main_path` would have it), so the code imports the files' modules.
      Each job process gets its own fresh copy; nothing of one job's
      files is there for the next.
    main_path: the path a program runs as (its `__file__`, `sys.argv[0]`
      and the file name in its tracebacks); "stdio" jobs with files only.
  """

  kind: str
  code: str
  inputs: tuple
  entry_point: str | None = None
  timeout_s: float | None = None
  test_timeout_s: float | None = None
  files: tuple[tuple[str, str], ...] = ()
  main_path: str | None = None

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"Job.kind={self.kind!r}: expected one of {KINDS}.")
    if not isinstance(self.code, str):
      raise ValueError(f"Job.code must be a str, got {type(self.code)}.")
    if self.kind == FUNCTION:
      if not (isinstance(self.entry_point, str) and self.entry_point):
        raise ValueError("Job.entry_point: a function job needs one.")
      for i, item in enumerate(self.inputs):
        if not (
          isinstance(item, tuple)
          and len(item) == 2
          and isinstance(item[0], list | tuple)
          and isinstance(item[1], dict)
        ):
          raise ValueError(f"Job.inputs[{i}]: expected (args, kwargs).")
    else:
      for i, item in enumerate(self.inputs):
        if not isinstance(item, str):
          raise ValueError(f"Job.inputs[{i}]: a stdin must be a str.")
    for name in ("timeout_s", "test_timeout_s"):
      value = getattr(self, name)
      if value is not None and not 0 < value < 86400:
        raise ValueError(f"Job.{name}={value!r}: must be in (0, 86400).")
    _check_files(self.files)
    if self.main_path is not None:
      if self.kind != STDIO or not self.files:
        raise ValueError("Job.main_path: only a program with files has one.")
      if _path_problem(self.main_path):
        raise ValueError(
          f"Job.main_path={self.main_path!r:.80}: "
          + _path_problem(self.main_path)
        )

  @classmethod
  def function(
    cls,
    code: str,
    entry_point: str,
    inputs: Sequence[tuple[Sequence, dict]],
    **limits,
  ) -> Job:
    """A job that calls `entry_point(*args, **kwargs)` per input."""
    pairs = tuple((list(args), dict(kwargs)) for args, kwargs in inputs)
    return cls(FUNCTION, code, pairs, entry_point=entry_point, **limits)

  @classmethod
  def program(cls, code: str, stdins: Sequence[str] = ("",), **limits) -> Job:
    """A job that runs `code` as `__main__` once per stdin."""
    return cls(STDIO, code, tuple(stdins), **limits)

  @classmethod
  def workspace_calls(
    cls,
    files: Sequence[tuple[str, str]],
    module: str,
    function: str,
    inputs: Sequence[tuple[Sequence, dict]],
    **limits,
  ) -> Job:
    """A job that calls `module.function(*args, **kwargs)` per input.

    `module` is imported from `files` (a dotted module path of them, or of
    the standard library); a failed import fails every test of the job.
    """
    if not all(part.isidentifier() for part in module.split(".")):
      raise ValueError(f"module={module!r:.80}: not a dotted module path.")
    if not function.isidentifier():
      raise ValueError(f"function={function!r:.80}: not an identifier.")
    code = f"from {module} import {function} as {WORKSPACE_ENTRY}\n"
    pairs = tuple((list(args), dict(kwargs)) for args, kwargs in inputs)
    return cls(
      FUNCTION,
      code,
      pairs,
      entry_point=WORKSPACE_ENTRY,
      files=tuple(files),
      **limits,
    )

  @classmethod
  def workspace_program(
    cls,
    files: Sequence[tuple[str, str]],
    main_path: str,
    stdins: Sequence[str] = ("",),
    **limits,
  ) -> Job:
    """A job that runs the file `main_path` of `files` once per stdin."""
    files = tuple(files)
    code = dict(files).get(main_path)
    if code is None:
      raise ValueError(f"main_path={main_path!r:.80}: not one of the files.")
    return cls(
      STDIO, code, tuple(stdins), files=files, main_path=main_path, **limits
    )

  def to_frame(self, job_id: int, config: config_lib.SandboxConfig) -> dict:
    """The frame the guest reads (raises `wire.EncodeError` on bad inputs)."""
    if self.kind == FUNCTION:
      tests = [
        {"args": wire.encode(list(args)), "kwargs": wire.encode(kwargs)}
        for args, kwargs in self.inputs
      ]
    else:
      tests = [{"stdin": stdin} for stdin in self.inputs]
    timeout_s = self.timeout_s or config.timeout_s
    test_timeout_s = min(
      self.test_timeout_s or config.test_timeout_s, timeout_s
    )
    frame = {
      "id": job_id,
      "kind": self.kind,
      "code": self.code,
      "entry_point": self.entry_point,
      "tests": tests,
      "timeout_s": timeout_s,
      "test_timeout_s": test_timeout_s,
      "address_space_mb": config.process_memory_mb,
      "max_output_bytes": config.max_output_bytes,
      "max_processes": config.max_processes,
      "max_file_mb": config.max_file_mb,
      "max_open_files": config.max_open_files,
    }
    if self.files:
      # Left out otherwise: a job without files is the frame it always was.
      frame["files"] = [[path, text] for path, text in self.files]
      frame["main_path"] = self.main_path
    return frame


@dataclasses.dataclass(frozen=True)
class TestRun:
  """What one test did in the sandbox (no verdict: that is the judge's).

  Attributes:
    status: one of `TEST_STATUSES`.
    output: the returned plain data (function tests with status "ok").
    stdout: the program's stdout (stdio tests).
    exit_code: the program's exit code (stdio tests), None if killed.
    error: why it is not "ok", as reported.
    time_s: wall time of the call or run, measured by the forkserver (for
      function tests at the resolution of its reads of the result pipe:
      the results one read brings share its time, the first ones include
      the code's loading; they add up to the job's time to its last result).
  """

  status: str
  output: Any = None
  stdout: str | None = None
  exit_code: int | None = None
  error: str = ""
  time_s: float = 0.0

  def to_json(self) -> dict:
    """JSON-safe dict (outputs tagged)."""
    out = {"status": self.status, "error": self.error, "time_s": self.time_s}
    if self.stdout is None:
      out["output"] = wire.encode(self.output)
    else:
      out.update(stdout=self.stdout, exit_code=self.exit_code)
    return out


@dataclasses.dataclass(frozen=True)
class JobResult:
  """The outcome of one job.

  Attributes:
    status: the job's `JobStatus`.
    tests: one `TestRun` per input, in input order.
    exit_code: exit code of the job process (function jobs) or the first
      non-zero one of the program runs (stdio jobs); None if killed, and
      None for a function job that sent all its results (the reply does not
      wait for that process to exit; it is killed after the reply).
    signal: the signal that ended the job process, if any (None for a
      function job that sent all its results).
    stdout: captured stdout (stdio jobs: all runs, in input order).
    stderr: captured stderr.
    duration_s: wall time inside the sandbox (host time on sandbox errors).
    reason: why the status is not "ok".
    sandbox: name of the sandbox that ran the job ("" if none did).
  """

  status: status_lib.JobStatus
  tests: tuple[TestRun, ...]
  exit_code: int | None = None
  signal: int | None = None
  stdout: str = ""
  stderr: str = ""
  duration_s: float = 0.0
  reason: str = ""
  sandbox: str = ""

  def to_json(self) -> dict:
    """JSON-safe dict with the status as its lowercase name."""
    return {
      "status": status_name(self.status),
      "exit_code": self.exit_code,
      "signal": self.signal,
      "stdout": self.stdout,
      "stderr": self.stderr,
      "duration_s": self.duration_s,
      "reason": self.reason,
      "sandbox": self.sandbox,
      "tests": [t.to_json() for t in self.tests],
    }


def sandbox_error_result(
  job: Job, reason: str, duration_s: float, sandbox: str = ""
) -> JobResult:
  """The result reported for a job whose sandbox failed."""
  tests = tuple(
    TestRun(
      status="not_run",
      stdout=None if job.kind == FUNCTION else "",
      error="sandbox error",
    )
    for _ in job.inputs
  )
  return JobResult(
    status=status_lib.JobStatus.SANDBOX_ERROR,
    tests=tests,
    duration_s=duration_s,
    reason=reason,
    sandbox=sandbox,
  )


def _str_field(obj: dict, key: str, where: str) -> str:
  value = obj.get(key)
  if type(value) is not str:
    raise worker.SandboxError(f"reply {where}.{key}={value!r:.80} is malformed")
  return value


def _test_run(raw: Any, kind: str, where: str) -> TestRun:
  if not isinstance(raw, dict):
    raise worker.SandboxError(f"reply {where} is not an object")
  status = raw.get("status")
  if status not in TEST_STATUSES:
    raise worker.SandboxError(f"reply {where}.status={status!r:.80}")
  error = raw.get("error", "")
  error = error if isinstance(error, str) else repr(error)[:200]
  time_s = raw.get("time_s", 0.0)
  time_s = float(time_s) if isinstance(time_s, int | float) else 0.0
  if kind == STDIO:
    exit_code = raw.get("exit_code")
    if exit_code is not None and type(exit_code) is not int:
      raise worker.SandboxError(f"reply {where}.exit_code={exit_code!r:.80}")
    return TestRun(
      status=status,
      stdout=_str_field(raw, "stdout", where),
      exit_code=exit_code,
      error=error,
      time_s=time_s,
    )
  output = None
  if status == "ok":
    try:
      output = wire.decode(raw.get("output"))
    except (wire.DecodeError, RecursionError) as e:
      status, error = "bad_output", f"output is not tagged plain data: {e}"
  return TestRun(status=status, output=output, error=error, time_s=time_s)


def result_from_reply(reply: dict, job: Job, sandbox: str = "") -> JobResult:
  """Validates a reply frame and builds the `JobResult`.

  Raises:
    SandboxError: the reply breaks the protocol (the sandbox is suspect).
  """
  name = reply.get("status")
  if name == "sandbox_error":
    raise worker.SandboxError(f"forkserver error: {reply.get('reason')}")
  if name not in _STATUS_BY_NAME:
    raise worker.SandboxError(f"reply status={name!r:.80} is unknown")
  raw_tests = reply.get("tests")
  if not isinstance(raw_tests, list) or len(raw_tests) != len(job.inputs):
    raise worker.SandboxError("reply has the wrong number of tests")
  tests = tuple(
    _test_run(raw, job.kind, f"tests[{i}]") for i, raw in enumerate(raw_tests)
  )
  stdout = _str_field(reply, "stdout", "")
  if job.kind == STDIO:
    stdout = "".join(t.stdout for t in tests)
  exit_code = reply.get("exit_code")
  signal = reply.get("signal")
  for key, value in (("exit_code", exit_code), ("signal", signal)):
    if value is not None and type(value) is not int:
      raise worker.SandboxError(f"reply {key}={value!r:.80} is malformed")
  duration = reply.get("duration_s")
  return JobResult(
    status=_STATUS_BY_NAME[name],
    tests=tests,
    exit_code=exit_code,
    signal=signal,
    stdout=stdout,
    stderr=_str_field(reply, "stderr", ""),
    duration_s=float(duration) if isinstance(duration, int | float) else 0.0,
    reason=str(reply.get("reason") or ""),
    sandbox=sandbox,
  )
