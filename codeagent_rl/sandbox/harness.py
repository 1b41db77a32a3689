"""`SandboxPool`: N warm sandboxes behind a thread-safe `submit`, and flags.

  harness.define_flags()                        # in a CLI's define_flags
  config = harness.config_from_flags()          # or SandboxConfig(...)
  with pools.open_pool(config) as pool:
    result = pool.submit(jobs.Job.function(code, "f", inputs)).result()

`pools.open_pool` gives a local `SandboxPool`, or for backend "ray" a
`fleet.RayFleet` with the same interface.

Each worker thread owns one sandbox (a `GuestProcess` from the gVisor or
process launcher) and runs one job at a time on it. A sandbox is replaced
after `recycle_after` jobs, when the forkserver reports that it could not
clean up after a job, and on any `SandboxError` (it died, hung or broke the
protocol); the job in flight is then reported as `sandbox_error`, and the
next job gets a fresh sandbox. Replacements start right after the result is
delivered, so the pool stays warm. A sandbox cleans up after a job once the
job's reply is out; if that fails it refuses the next job, which then runs on
a replacement.
"""

from __future__ import annotations

from collections.abc import Iterable
import concurrent.futures
import dataclasses
import itertools
import logging
import queue
import sys
import threading
import time

from absl import app
from absl import flags

from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import worker

_D = config_lib.SandboxConfig()

# (field, flag, kind, help) of the machine's settings: every CLI that runs
# a sandbox has them.
_MACHINE_FLAGS = (
  (
    "backend",
    "sandbox_backend",
    config_lib.BACKENDS,
    "gvisor: each worker owns a warm gVisor (runsc) sandbox. process: plain"
    " subprocesses with rlimits only, for machines without gVisor (no"
    " isolation of files, network or processes; prints a warning). ray:"
    " Ray actors on sandbox nodes, each with a pool of --sandbox_ray_backend"
    " sandboxes (pip install -e '.[ray]').",
  ),
  (
    "pool_size",
    "sandbox_pool_size",
    int,
    "Warm sandboxes (parallel jobs); with --sandbox_backend=ray, per actor.",
  ),
  (
    "recycle_after",
    "sandbox_recycle_after",
    int,
    "Replace a sandbox after this many jobs.",
  ),
  ("runsc_path", "runsc_path", str, "The gVisor runsc binary (name or path)."),
  (
    "runsc_platform",
    "runsc_platform",
    config_lib.PLATFORMS,
    "gVisor platform; ptrace works everywhere (kvm hung where measured).",
  ),
  (
    "python",
    "sandbox_python",
    str,
    "Interpreter bound into the sandbox (and run by the process backend).",
  ),
  (
    "ray_address",
    "ray_address",
    str,
    "--sandbox_backend=ray: 'local' starts a Ray cluster in this process;"
    " 'auto' or HOST:PORT joins a running one.",
  ),
  (
    "ray_resource",
    "sandbox_ray_resource",
    str,
    "Custom Ray resource of the sandbox nodes; each actor takes one unit"
    " ('' places actors on any node).",
  ),
  ("ray_actors", "sandbox_ray_actors", int, "Sandbox actors on Ray."),
  (
    "ray_in_flight",
    "sandbox_ray_in_flight",
    int,
    "Jobs in flight per Ray actor; callers block past it (back-pressure).",
  ),
  (
    "ray_backend",
    "sandbox_ray_backend",
    config_lib.ISOLATION_BACKENDS,
    "What each Ray sandbox actor runs its jobs in.",
  ),
)
# (field, flag, kind, help) of a job's limits, for the tools that run no
# experiment (an experiment's limits are its config.sandbox section).
_LIMIT_FLAGS = (
  ("timeout_s", "sandbox_timeout_s", float, "Wall-clock limit of one job."),
  (
    "test_timeout_s",
    "sandbox_test_timeout_s",
    float,
    "Wall-clock limit of one test within a job.",
  ),
  (
    "memory_mb",
    "sandbox_memory_mb",
    int,
    "Memory of one job, all its processes together, in MiB: each process"
    " gets an address space (RLIMIT_AS) of memory / --sandbox_max_processes.",
  ),
  (
    "max_processes",
    "sandbox_max_processes",
    int,
    "Processes (and threads) one job may have at once.",
  ),
  (
    "max_output_bytes",
    "sandbox_max_output_bytes",
    int,
    "Cap on a job's stdout, stderr and returned data (each); past it the job"
    " is killed with status output_limit.",
  ),
)

# The flags of a job's limits (`define_flags(limits=True)`).
LIMIT_FLAG_NAMES = tuple(name for _, name, *_ in _LIMIT_FLAGS)


def _define(field, name, kind, help_text, flag_values) -> None:
  default = getattr(_D, field)
  if name in flag_values:  # defined by an earlier call
    return
  if isinstance(kind, tuple):
    flags.DEFINE_enum(name, default, kind, help_text, flag_values=flag_values)
  elif kind is int:
    flags.DEFINE_integer(name, default, help_text, flag_values=flag_values)
  elif kind is float:
    flags.DEFINE_float(name, default, help_text, flag_values=flag_values)
  else:
    flags.DEFINE_string(name, default, help_text, flag_values=flag_values)


def define_flags(
  *, limits: bool = False, flag_values: flags.FlagValues = flags.FLAGS
) -> None:
  """Registers the sandbox's flags (a CLI's `define_flags` calls it).

  Nothing is registered at import, so a program defines only the flags it
  reads. Calling it again is harmless.

  Args:
    limits: also the job-limit flags (`--sandbox_timeout_s`, ...), for tools
      that run no experiment; an experiment's limits are its config.
    flag_values: where to register them.
  """
  for spec in _MACHINE_FLAGS:
    _define(*spec, flag_values)
  if limits:
    for spec in _LIMIT_FLAGS:
      _define(*spec, flag_values)


def define_backend_flag(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Registers `--backend`, a tool's short form of `--sandbox_backend`.

  Read it with `config_from_cli_flags`, which refuses the two flags when
  they disagree.
  """
  flags.DEFINE_enum(
    "backend",
    None,
    config_lib.BACKENDS,
    "Sandbox backend; short for --sandbox_backend (default: gvisor).",
    flag_values=flag_values,
  )


PROCESS_BACKEND_WARNING = """
************************************************************************
WARNING: --sandbox_backend=process runs untrusted code as plain host
subprocesses with rlimits only. There is NO isolation of the file system,
the network, the environment of other processes or the process table.
Use it only on a machine without gVisor (Colab, macOS) and never on
code you would not run yourself. Install gVisor: apt-get install -y runsc
************************************************************************
"""


def config_from_flags(
  limits: config_lib.SandboxLimits | None = None,
  *,
  flag_values: flags.FlagValues = flags.FLAGS,
  **overrides,
) -> config_lib.SandboxConfig:
  """The `SandboxConfig` of the parsed flags (`define_flags`).

  Args:
    limits: the job limits (an experiment's `config.sandbox`); without them,
      the limit flags if they are defined, else the defaults.
    flag_values: the parsed flags.
    **overrides: fields to set regardless of the flags (e.g. pool_size=1).

  Raises:
    ValueError: a bad value, naming its flag (or config field).
  """
  if "sandbox_backend" not in flag_values:
    raise RuntimeError(
      "harness.config_from_flags: the sandbox flags are not defined; call"
      " harness.define_flags() before parsing the flags."
    )
  values = {
    field: flag_values[name].value for field, name, *_ in _MACHINE_FLAGS
  }
  from_flags = limits is None and "sandbox_timeout_s" in flag_values
  if limits is not None:
    values.update(dataclasses.asdict(limits))
  elif from_flags:
    values.update(
      {field: flag_values[name].value for field, name, *_ in _LIMIT_FLAGS}
    )
  values.update(overrides)
  try:
    return config_lib.SandboxConfig(**values)
  except ValueError as e:
    if not from_flags:
      raise
    message = str(e)
    for field, name, *_ in _LIMIT_FLAGS:
      message = message.replace(f"config.sandbox.{field}=", f"--{name}=")
    raise ValueError(message) from None


def config_from_cli_flags(
  backend: str | None,
  limits: config_lib.SandboxLimits | None = None,
  **overrides,
) -> config_lib.SandboxConfig:
  """`config_from_flags` for a CLI whose `--backend` is short for the flag.

  Args:
    backend: the CLI's `--backend` value (None: not given, so
      `--sandbox_backend` decides).
    limits: as for `config_from_flags`.
    **overrides: fields to set regardless of the flags (e.g. pool_size=1).

  Raises:
    app.UsageError: `--backend` contradicts a given `--sandbox_backend`.
    ValueError: a flag's value is invalid (the message names the flag); the
      CLI decides how it stops.
  """
  sandbox_flag = flags.FLAGS["sandbox_backend"]
  if backend is not None:
    if sandbox_flag.present and sandbox_flag.value != backend:
      raise app.UsageError(
        f"--backend={backend} contradicts"
        f" --sandbox_backend={sandbox_flag.value}."
      )
    overrides["backend"] = backend
  return config_from_flags(limits, **overrides)


def make_launcher(config: config_lib.SandboxConfig):
  """The launcher of `config.backend` (warns loudly for "process").

  Raises:
    gvisor.SetupError: backend "gvisor" without runsc, or more memory
      asked of the host than it has (the message says what to do).
  """
  if config.backend == "ray":
    raise ValueError(
      "backend 'ray' runs no sandbox in this process: pools.open_pool"
      " gives its fleet."
    )
  if config.backend == "process":
    # The banner once, on stderr (a notebook shows it; absl's log may not
    # reach the console), and a short line in the log files.
    print(PROCESS_BACKEND_WARNING, file=sys.stderr)
    logging.warning("--sandbox_backend=process: no isolation (banner above).")
    return worker.ProcessLauncher(config)
  return gvisor.GVisorLauncher(config)


class SandboxPool:
  """`pool_size` warm sandboxes; `submit` is thread-safe.

  Attributes:
    config: the `SandboxConfig`.
    stats: counters ("jobs", "sandboxes_started", "sandbox_errors",
      "recycled"), for tests and benchmarks.
  """

  def __init__(self, config: config_lib.SandboxConfig):
    """Starts every sandbox and waits until each is ready.

    Raises:
      gvisor.SetupError: backend "gvisor" without runsc, or more memory
        asked of the host than it has (the message says what to do).
      worker.SandboxError: a sandbox did not start.
    """
    self.config = config
    self.stats = {
      "jobs": 0,
      "sandboxes_started": 0,
      "sandbox_errors": 0,
      "recycled": 0,
    }
    self._stats_lock = threading.Lock()
    self._ids = itertools.count(1)
    self._queue: queue.SimpleQueue = queue.SimpleQueue()
    self._closed = False
    self._close_lock = threading.Lock()
    self._launcher = make_launcher(config)
    started = [concurrent.futures.Future() for _ in range(config.pool_size)]
    # Each worker starts its own sandbox: PR_SET_PDEATHSIG ties a sandbox to
    # the thread that started it, and workers live as long as the pool.
    self._threads = [
      threading.Thread(
        target=self._work,
        args=(started[i],),
        name=f"sandbox-worker-{i}",
        daemon=True,
      )
      for i in range(config.pool_size)
    ]
    for thread in self._threads:
      thread.start()
    errors = [f.exception() for f in started]
    if any(errors):
      self.close()
      raise next(e for e in errors if e is not None)

  @property
  def parallelism(self) -> int:
    """Jobs that run at once."""
    return self.config.pool_size

  def _count(self, key: str) -> None:
    with self._stats_lock:
      self.stats[key] += 1

  def _launch(self) -> worker.GuestProcess:
    guest = self._launcher.launch()
    self._count("sandboxes_started")
    return guest

  def _work(self, started: concurrent.futures.Future) -> None:
    try:
      guest = self._launch()
    except BaseException as e:  # reported to __init__
      started.set_exception(e)
      return
    started.set_result(None)
    uses = 0
    while True:
      item = self._queue.get()
      if item is None:
        break
      job, future = item
      if not future.set_running_or_notify_cancel():
        continue
      start = time.monotonic()
      try:
        if guest is None:
          guest = self._launch()
          uses = 0
        frame = job.to_frame(next(self._ids), self.config)
        reply = guest.run(frame, frame["timeout_s"])
        if reply.get("refused") is True:
          # The sandbox failed to clean up after its previous job and did
          # not run this one: replace it and run the job there.
          self._count("recycled")
          guest.close()
          guest = None
          guest = self._launch()
          uses = 0
          frame = job.to_frame(next(self._ids), self.config)
          reply = guest.run(frame, frame["timeout_s"])
        result = jobs.result_from_reply(reply, job, guest.name)
        uses += 1
        if reply.get("clean") is not True or uses >= self.config.recycle_after:
          self._count("recycled")
          guest.close()
          guest = None
      except (worker.SandboxError, OSError) as e:
        logging.warning("sandbox replaced after an error: %s", e)
        self._count("sandbox_errors")
        name = guest.name if guest is not None else ""
        if guest is not None:
          guest.close()
          guest = None
        result = jobs.sandbox_error_result(
          job, str(e), time.monotonic() - start, name
        )
      except BaseException as e:  # a bug, or inputs that cannot be encoded
        future.set_exception(e)
        continue
      self._count("jobs")
      future.set_result(result)
      if guest is None:
        try:
          guest = self._launch()
          uses = 0
        except Exception:  # retried when the next job arrives
          logging.exception("could not start a replacement sandbox")
    if guest is not None:
      guest.close()

  def submit(self, job: jobs.Job) -> concurrent.futures.Future:
    """Queues a job; the future resolves to its `JobResult`."""
    if self._closed:
      raise RuntimeError("SandboxPool is closed.")
    future: concurrent.futures.Future = concurrent.futures.Future()
    self._queue.put((job, future))
    return future

  def run(self, job: jobs.Job) -> jobs.JobResult:
    """Runs one job and waits for it."""
    return self.submit(job).result()

  def map(self, job_list: Iterable[jobs.Job]) -> list[jobs.JobResult]:
    """Runs jobs in parallel; results in input order."""
    futures = [self.submit(job) for job in job_list]
    return [f.result() for f in futures]

  def close(self) -> None:
    """Finishes queued jobs, stops every sandbox and cleans up."""
    with self._close_lock:
      if self._closed:
        return
      self._closed = True
    for _ in self._threads:
      self._queue.put(None)
    for thread in self._threads:
      thread.join()
    self._launcher.close()

  def __enter__(self) -> SandboxPool:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
