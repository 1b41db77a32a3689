"""The sandbox settings as frozen, self-validating dataclasses.

`SandboxConfig` holds every setting, and the defaults, once. They are of
two kinds:

- the limits of a job (`LIMIT_FIELDS`: time, memory, processes, output,
  files). They decide which programs pass, so they define the reward: an
  experiment holds them in its `config.sandbox` section (`SandboxLimits`),
  saved with the run's config.json;
- facts of the machine (backend, pool size, runsc, interpreter): absl
  flags that `harness.define_flags()` registers and
  `harness.config_from_flags()` reads.

Library code and tests build a `SandboxConfig` directly.
"""

from __future__ import annotations

import dataclasses
import os

from codeagent_rl import config_utils

BACKENDS = ("gvisor", "process", "ray")
# What a Ray sandbox actor runs its jobs in (`ray_backend`).
ISOLATION_BACKENDS = ("gvisor", "process")
PLATFORMS = ("ptrace", "kvm", "systrap")
# The command-line flag of each machine setting (error messages name it).
FLAG_NAMES = {
  "backend": "sandbox_backend",
  "pool_size": "sandbox_pool_size",
  "recycle_after": "sandbox_recycle_after",
  "runsc_path": "runsc_path",
  "runsc_platform": "runsc_platform",
  "python": "sandbox_python",
  "ray_address": "ray_address",
  "ray_resource": "sandbox_ray_resource",
  "ray_actors": "sandbox_ray_actors",
  "ray_in_flight": "sandbox_ray_in_flight",
  "ray_backend": "sandbox_ray_backend",
}
# The limits of a job: an experiment's `config.sandbox` (`SandboxLimits`).
LIMIT_FIELDS = (
  "timeout_s",
  "test_timeout_s",
  "memory_mb",
  "max_processes",
  "max_output_bytes",
  "max_file_mb",
  "max_open_files",
  "scratch_mb",
)
# Smallest address space a job process may get: the forked interpreter
# alone maps about 30 MiB.
MIN_PROCESS_MEMORY_MB = 64
# What a job process may hold in the kernel per open descriptor, beyond its
# address space (measured under gVisor with the job filter of seccomp.py:
# a loopback TCP connection's two descriptors ~1.7 MiB, a pipe 64 KiB, a
# socket pair 208 KiB).
KERNEL_MB_PER_FILE = 1
# The forkserver, the zygote, a spare and gVisor's sentry (an idle sandbox
# measured ~55 MiB), with room to spare.
SANDBOX_BASE_MB = 256


def _name(field: str) -> str:
  if field in LIMIT_FIELDS:
    return f"config.sandbox.{field}"
  flag = FLAG_NAMES.get(field)
  return f"--{flag}" if flag else f"SandboxConfig.{field}"


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
  """How jobs are isolated and limited.

  Attributes:
    backend: "gvisor" (a warm `runsc` sandbox per worker), "process" (the
      same forkserver as a plain subprocess with rlimits: no isolation of
      the file system or network; for machines without gVisor) or "ray"
      (`fleet.RayFleet`: Ray actors on sandbox nodes, each with a local
      pool of `ray_backend` sandboxes).
    pool_size: warm sandboxes (workers) in a `SandboxPool`; with backend
      "ray", in each actor.
    timeout_s: wall-clock limit of one job (all its tests).
    test_timeout_s: wall-clock limit of one test (one call, or one run of a
      stdio program); the job's `timeout_s` still bounds the sum.
    memory_mb: memory of one job, all its processes together: each job
      process gets an address space (RLIMIT_AS) of `memory_mb //
      max_processes` (`process_memory_mb`), so that every process the job
      may have at once fits in it.
    max_output_bytes: cap on each of a job's stdout, stderr and returned
      data; a job past it is killed with status `output_limit`.
    recycle_after: a sandbox is replaced after this many jobs.
    runsc_path: the `runsc` binary (a name on PATH or a path).
    runsc_platform: the gVisor platform; "ptrace" works everywhere, "kvm"
      hung on the machines we measured.
    python: the interpreter bound into the sandbox (and run by the process
      backend); an absolute path.
    max_processes: RLIMIT_NPROC of the untrusted uid, i.e. the processes
      (and threads) a job may have at once.
    max_file_mb: RLIMIT_FSIZE, the largest file a job may write.
    max_open_files: RLIMIT_NOFILE of a job process.
    scratch_mb: size of the sandbox's tmpfs that holds the job's scratch
      directory.
    startup_timeout_s: how long a sandbox may take to start and say ready.
    ray_address: the Ray cluster of backend "ray": "local" starts one in
      this process (its nodes offer `ray_actors` units of `ray_resource`),
      "auto" or "HOST:PORT" joins a running one. Ignored when Ray is
      already initialised in the process.
    ray_resource: the custom Ray resource that marks sandbox nodes; each
      actor takes one unit ("" places actors anywhere).
    ray_actors: sandbox actors of backend "ray".
    ray_in_flight: jobs sent to one actor at once; past it, `submit` blocks
      until a job finishes (back-pressure, no unbounded queue).
    ray_backend: what each actor runs its jobs in: "gvisor" or "process".
  """

  backend: str = "gvisor"
  pool_size: int = 2
  timeout_s: float = 10.0
  test_timeout_s: float = 2.0
  memory_mb: int = 1024
  max_output_bytes: int = 1 << 20
  recycle_after: int = 500
  runsc_path: str = "runsc"
  runsc_platform: str = "ptrace"
  python: str = "/usr/bin/python3"
  max_processes: int = 4
  max_file_mb: int = 16
  max_open_files: int = 64
  scratch_mb: int = 64
  startup_timeout_s: float = 30.0
  ray_address: str = "local"
  ray_resource: str = "sandbox"
  ray_actors: int = 2
  ray_in_flight: int = 4
  ray_backend: str = "gvisor"

  def __post_init__(self):
    def bad(field: str, why: str) -> ValueError:
      value = getattr(self, field)
      return ValueError(f"{_name(field)}={value!r}: {why}")

    if self.backend not in BACKENDS:
      raise bad("backend", f"expected one of {BACKENDS}.")
    if self.ray_backend not in ISOLATION_BACKENDS:
      raise bad("ray_backend", f"expected one of {ISOLATION_BACKENDS}.")
    if not self.ray_address:
      raise bad("ray_address", 'expected "local", "auto" or HOST:PORT.')
    if self.runsc_platform not in PLATFORMS:
      raise bad("runsc_platform", f"expected one of {PLATFORMS}.")
    for field in (
      "pool_size",
      "recycle_after",
      "max_processes",
      "max_file_mb",
      "scratch_mb",
      "ray_actors",
      "ray_in_flight",
    ):
      value = getattr(self, field)
      if type(value) is not int or value < 1:
        raise bad(field, "must be an integer >= 1.")
    if type(self.memory_mb) is not int or self.process_memory_mb < (
      MIN_PROCESS_MEMORY_MB
    ):
      least = MIN_PROCESS_MEMORY_MB * self.max_processes
      raise bad(
        "memory_mb",
        f"must be an integer >= {least}: each of the job's"
        f" {_name('max_processes')}={self.max_processes} processes needs"
        f" {MIN_PROCESS_MEMORY_MB} MiB.",
      )
    if type(self.max_output_bytes) is not int or self.max_output_bytes < 1024:
      raise bad("max_output_bytes", "must be an integer >= 1024.")
    if type(self.max_open_files) is not int or self.max_open_files < 16:
      raise bad("max_open_files", "must be an integer >= 16.")
    for field in ("timeout_s", "test_timeout_s", "startup_timeout_s"):
      value = getattr(self, field)
      if not isinstance(value, int | float) or not 0 < value < 86400:
        raise bad(field, "must be a number of seconds in (0, 86400).")
    if not self.runsc_path:
      raise bad("runsc_path", "must name the runsc binary.")
    if not os.path.isabs(self.python):
      raise bad("python", "must be an absolute path.")

  def describe(self) -> str:
    """How jobs are served, in words: `gvisor x2`, `ray (4 actors x2 ...)`."""
    if self.backend == "ray":
      return (
        f"ray ({self.ray_actors} actors x{self.pool_size}"
        f" {self.ray_backend}, {self.ray_address})"
      )
    return f"{self.backend} x{self.pool_size}"

  @property
  def process_memory_mb(self) -> int:
    """The address-space limit (RLIMIT_AS) of each job process, in MiB."""
    return self.memory_mb // self.max_processes

  @property
  def oci_pids_limit(self) -> int:
    """The OCI pids backstop: far above what one job may reach.

    Under the ptrace platform every guest task is a host process, and the
    sentry has its own threads; crossing the limit kills the whole sandbox.
    """
    return max(1024, 16 * self.max_processes)

  @property
  def oci_memory_bytes(self) -> int:
    """The OCI memory backstop of one sandbox, in bytes.

    Twice a job's memory: gVisor hands a finished job's pages back to the
    host within about a second (measured), and the next job may start
    before that; plus each process's kernel allowance, the scratch tmpfs
    and the sandbox's own processes.
    """
    kernel = self.max_open_files * KERNEL_MB_PER_FILE
    job = self.memory_mb + self.max_processes * kernel
    return (2 * job + self.scratch_mb + SANDBOX_BASE_MB) << 20


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
  """The limits of a job: an experiment's `config.sandbox` section.

  The fields are `LIMIT_FIELDS`, as `SandboxConfig` documents them; the
  values are checked as `SandboxConfig` checks them (a bad one names
  `config.sandbox.<field>`).
  """

  timeout_s: float
  test_timeout_s: float
  memory_mb: int
  max_processes: int
  max_output_bytes: int
  max_file_mb: int
  max_open_files: int
  scratch_mb: int

  def __post_init__(self):
    self.apply(SandboxConfig())

  @classmethod
  def from_config(cls, section) -> SandboxLimits:
    """From an experiment's `config.sandbox` (ValueError names a field)."""
    return config_utils.from_section(cls, section, "sandbox")

  @classmethod
  def of(cls, config: SandboxConfig) -> SandboxLimits:
    """The limits `config` holds; of `SandboxConfig()`, the defaults."""
    return cls(**{name: getattr(config, name) for name in LIMIT_FIELDS})

  def apply(self, machine: SandboxConfig) -> SandboxConfig:
    """`machine`'s settings with these limits (ValueError: a bad value)."""
    return dataclasses.replace(machine, **dataclasses.asdict(self))
