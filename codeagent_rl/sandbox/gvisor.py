"""Warm gVisor sandboxes: OCI bundles, `runsc run`, and cleanup.

Each sandbox is `runsc run` on its own OCI bundle:

- the root file system is an empty directory, mounted read-only;
- read-only binds of exactly what the sandbox Python needs: its executable,
  its standard library and the shared libraries that it and its extension
  modules link against (found with `ldd`), plus a copy of the guest's files
  (`worker.GUEST_FILES`: the `guest/` package, `wire.py` and `seccomp.py`)
  at `/sandbox`;
- a size-capped tmpfs at `/tmp` (owned by the untrusted uid; each job's
  scratch directory lives in it) and a root-owned one at `/dev/shm`;
- no `/proc` for job processes: `/proc` is an empty read-only tmpfs, and
  the forkserver's procfs sits under a root-only directory
  (`SERVER_PROC`). This runsc ignores PR_SET_DUMPABLE and `hidepid`, and lets
  any uid read every process's `environ`, `cmdline` and `maps`;
- no network (`--network=none`: only a loopback of its own), an empty
  environment, its own pid/ipc/uts/mount namespaces;
- the init process (the forkserver) runs as root with only CAP_SETUID,
  CAP_SETGID and CAP_KILL and `noNewPrivileges`; job processes drop to uid
  65534 and have no capabilities;
- OCI pids and memory limits sized far above what one job's rlimits allow:
  crossing them kills the whole sandbox, which the pool then replaces.

All runsc state lives under one private temporary root per host process
(`<tmp>/codeagent_sandbox.<pid>.<random>`). Closing a sandbox closes its
input (the forkserver exits), kills `runsc run` if needed (the sandbox is
attached to it), runs `runsc delete --force` and removes the bundle. An
atexit hook does this for every live sandbox; if the host is killed,
PR_SET_PDEATHSIG (`setpriv --pdeathsig KILL`) takes `runsc run`, and with
it the attached sandbox, down, and
`sweep_stale_roots()` (run whenever a launcher starts) deletes the state of
host processes that no longer exist. `runsc do` is never used: it exposes the
host's file system and environment.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import weakref

from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import worker

ROOT_PREFIX = "codeagent_sandbox."
GUEST_MOUNT = "/sandbox"
SCRATCH_MOUNT = "/tmp"
# The forkserver's procfs: mode 0700 root above it keeps job processes out.
SERVER_PROC_PARENT = "/.forkserver"
SERVER_PROC = SERVER_PROC_PARENT + "/proc"
INSTALL_HINT = (
  "Install gVisor with `apt-get install -y runsc` (Debian/Ubuntu, as root),"
  " or pass --sandbox_backend=process to run jobs as plain subprocesses with"
  " rlimits only (no file-system or network isolation)."
)
_BIND_OPTIONS = ["rbind", "ro", "nosuid", "nodev"]
_CAPS = ["CAP_SETUID", "CAP_SETGID", "CAP_KILL"]
# Printed by the sandbox interpreter on the host to find what to bind.
_PROBE = """
import json, os, sys, sysconfig
paths = [p for p in sys.path if p and os.path.isdir(p)]
dynload = [os.path.join(p, f) for p in paths for f in os.listdir(p)
           if f.endswith(".so")]
print(json.dumps({"executable": os.path.realpath(sys.executable),
                  "paths": [os.path.realpath(p) for p in paths],
                  "extensions": dynload}))
"""


class SetupError(RuntimeError):
  """Sandboxes cannot be started here; the message says what to do."""


class RunscNotFoundError(SetupError):
  """`runsc` is not installed or not where `--runsc_path` says."""


class HostMemoryError(SetupError):
  """The pool's memory backstops add up to more than the host has."""


def host_available_bytes() -> int | None:
  """MemAvailable of /proc/meminfo, in bytes (None where unreadable)."""
  try:
    with open("/proc/meminfo", encoding="ascii") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) << 10
  except (OSError, ValueError, IndexError):
    pass
  return None


def check_host_memory(
  config: config_lib.SandboxConfig, available: int | None
) -> None:
  """Raises `HostMemoryError` unless every sandbox's backstop fits at once.

  A sandbox that reaches its OCI memory limit is killed (with the job in
  it); the host itself must never run out first.

  Args:
    config: the pool's settings.
    available: bytes the host can give (`host_available_bytes()`); None
      skips the check.
  """
  need = config.pool_size * config.oci_memory_bytes
  if available is None or need <= available:
    return
  raise HostMemoryError(
    f"{config.pool_size} sandboxes (--sandbox_pool_size) may hold"
    f" {config.oci_memory_bytes >> 20} MiB each (twice a job's memory,"
    f" memory_mb={config.memory_mb}, plus kernel buffers, scratch and the"
    f" sandbox's own processes), {need >> 20} MiB in all, but the host has"
    f" {available >> 20} MiB available. Lower --sandbox_pool_size, or the"
    " job memory: --config.sandbox.memory_mb (--sandbox_memory_mb for the"
    " tools that run no experiment)."
  )


def find_runsc(runsc_path: str) -> str:
  """Returns the absolute path of runsc, or raises with how to install it."""
  found = shutil.which(runsc_path)
  if found is None:
    raise RunscNotFoundError(
      f"gVisor's runsc was not found (--runsc_path={runsc_path!r})."
      f" {INSTALL_HINT}"
    )
  return found


@dataclasses.dataclass(frozen=True)
class Runtime:
  """What of the host the sandbox interpreter needs, bound read-only.

  Attributes:
    executable: real path of the interpreter.
    binds: (path inside the sandbox, host path) pairs, files or directories.
  """

  executable: str
  binds: tuple[tuple[str, str], ...]


def _ldd(path: str) -> set[str]:
  """The shared libraries `path` loads, as the paths ld.so resolves."""
  out = subprocess.run(
    ["ldd", path], capture_output=True, text=True, check=False, env={}
  ).stdout
  libs = set()
  for line in out.splitlines():
    parts = line.split()
    if "=>" in parts:
      target = parts[parts.index("=>") + 1]
      if target.startswith("/"):
        libs.add(target)
    elif parts and parts[0].startswith("/"):
      libs.add(parts[0])
  return libs


@functools.cache
def discover_runtime(python: str) -> Runtime:
  """Finds the executable, stdlib and shared libraries of `python`.

  Args:
    python: absolute path of the sandbox interpreter.

  Returns:
    The binds that make `python -I -S` work in an empty root.

  Raises:
    RuntimeError: when the interpreter cannot be run or `ldd` is missing.
  """
  if shutil.which("ldd") is None:
    raise RuntimeError("gvisor backend: `ldd` is needed to find libraries.")
  proc = subprocess.run(
    [python, "-I", "-S", "-c", _PROBE],
    capture_output=True,
    text=True,
    check=False,
    env={},
  )
  if proc.returncode != 0:
    raise RuntimeError(
      f"--sandbox_python={python!r} does not run: {proc.stderr.strip()}"
    )
  probe = json.loads(proc.stdout)
  executable = probe["executable"]
  binds = {executable: executable}
  for path in probe["paths"]:
    if os.path.isdir(path):
      binds[path] = path
  libs = set()
  for binary in [executable, *probe["extensions"]]:
    libs |= _ldd(binary)
  for lib in sorted(libs):
    binds.setdefault(lib, os.path.realpath(lib))
  return Runtime(executable=executable, binds=tuple(sorted(binds.items())))


def oci_spec(
  config: config_lib.SandboxConfig, runtime: Runtime, guest_dir: str
) -> dict:
  """The OCI runtime spec (config.json) of one sandbox."""
  guest_config = {
    "scratch_root": SCRATCH_MOUNT,
    "uid": worker.UNTRUSTED_UID,
    "gid": worker.UNTRUSTED_GID,
    "kill_scope": "all",
    "proc": SERVER_PROC,
  }
  argv = worker.guest_command(runtime.executable, GUEST_MOUNT, guest_config)
  tmpfs = ["nosuid", "nodev", "noexec"]
  mounts = [
    # runsc adds a procfs at /proc when the spec has none: mask it.
    {
      "destination": "/proc",
      "type": "tmpfs",
      "source": "tmpfs",
      "options": ["ro", *tmpfs, "size=4k", "mode=0555"],
    },
    {
      "destination": SERVER_PROC_PARENT,
      "type": "tmpfs",
      "source": "tmpfs",
      "options": [*tmpfs, "size=4k", "mode=0700"],
    },
    {"destination": SERVER_PROC, "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
    {
      "destination": "/dev/shm",
      "type": "tmpfs",
      "source": "tmpfs",
      "options": [*tmpfs, "size=1m", "mode=0755"],
    },
    {
      "destination": SCRATCH_MOUNT,
      "type": "tmpfs",
      "source": "tmpfs",
      "options": [
        "nosuid",
        "nodev",
        f"size={config.scratch_mb}m",
        "mode=0700",
        f"uid={worker.UNTRUSTED_UID}",
        f"gid={worker.UNTRUSTED_GID}",
      ],
    },
    {
      "destination": GUEST_MOUNT,
      "type": "bind",
      "source": guest_dir,
      "options": _BIND_OPTIONS,
    },
  ]
  for destination, source in runtime.binds:
    mounts.append(
      {
        "destination": destination,
        "type": "bind",
        "source": source,
        "options": _BIND_OPTIONS,
      }
    )
  caps = {kind: list(_CAPS) for kind in ("bounding", "effective", "permitted")}
  return {
    "ociVersion": "1.0.0",
    "process": {
      "user": {"uid": 0, "gid": 0},
      "args": argv,
      "env": [],
      "cwd": "/",
      "capabilities": caps,
      "noNewPrivileges": True,
      "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
    },
    "root": {"path": "rootfs", "readonly": True},
    "hostname": "sandbox",
    "mounts": mounts,
    "linux": {
      "namespaces": [
        {"type": kind} for kind in ("pid", "network", "ipc", "uts", "mount")
      ],
      "resources": {
        "pids": {"limit": config.oci_pids_limit},
        "memory": {"limit": config.oci_memory_bytes},
      },
    },
  }


def delete_containers(runsc: str, state_root: str) -> None:
  """`runsc delete --force` for every container recorded in `state_root`."""
  if not os.path.isdir(state_root):
    return
  proc = subprocess.run(
    [runsc, f"--root={state_root}", "list", "--quiet"],
    capture_output=True,
    text=True,
    check=False,
    timeout=30,
  )
  for container in proc.stdout.split():
    subprocess.run(
      [runsc, f"--root={state_root}", "delete", "--force", container],
      capture_output=True,
      check=False,
      timeout=30,
    )


def sweep_stale_roots(runsc: str, tmp_dir: str | None = None) -> list[str]:
  """Deletes the runsc state of host processes that died without cleanup.

  Args:
    runsc: the runsc binary.
    tmp_dir: where private roots are made (default: `tempfile.gettempdir()`).

  Returns:
    The roots removed.
  """
  removed = []
  for root in worker.dead_hosts_dirs(ROOT_PREFIX, tmp_dir):
    delete_containers(runsc, str(root / "state"))
    shutil.rmtree(root, ignore_errors=True)
    removed.append(str(root))
  return removed


class GVisorLauncher:
  """Starts warm gVisor sandboxes that run the guest forkserver."""

  def __init__(self, config: config_lib.SandboxConfig):
    """Checks runsc, finds the runtime to bind and makes the private root.

    Raises:
      RunscNotFoundError: runsc is missing (the message says what to do).
      HostMemoryError: the pool's backstops do not fit in the host.
    """
    self.config = config
    self.runsc = find_runsc(config.runsc_path)
    check_host_memory(config, host_available_bytes())
    self.runtime = discover_runtime(config.python)
    sweep_stale_roots(self.runsc)
    self.root = tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}.")
    self.state_root = os.path.join(self.root, "state")
    os.makedirs(self.state_root)
    self.guest_dir = os.path.join(self.root, "guest")
    os.makedirs(self.guest_dir)
    for name in worker.GUEST_FILES:
      target = os.path.join(self.guest_dir, name)
      os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
      shutil.copyfile(worker.GUEST_DIR / name, target)
    for parent, _, _ in os.walk(self.guest_dir):
      os.chmod(parent, 0o755)
    self._count = 0
    self._lock = threading.Lock()
    self._closed = False
    self._guests = weakref.WeakSet()
    atexit.register(self.close)

  def launch(self) -> worker.GuestProcess:
    """Writes a fresh bundle and starts `runsc run` on it."""
    with self._lock:
      if self._closed:
        raise worker.SandboxError("the gVisor launcher is closed")
      self._count += 1
      # runsc names a host-wide control socket after the container id, so
      # ids must be unique across launchers and processes.
      container = f"car-{os.getpid()}-{self._count}-{secrets.token_hex(4)}"
    bundle = os.path.join(self.root, container)
    os.makedirs(os.path.join(bundle, "rootfs"))
    spec = oci_spec(self.config, self.runtime, self.guest_dir)
    with open(os.path.join(bundle, "config.json"), "w") as f:
      json.dump(spec, f, indent=1)
    argv = [
      *worker.die_with_parent_prefix(),
      self.runsc,
      f"--root={self.state_root}",
      "--network=none",
      f"--platform={self.config.runsc_platform}",
      f"--log={os.path.join(bundle, 'runsc.log')}",
      "run",
      f"--bundle={bundle}",
      container,
    ]

    def cleanup() -> None:
      delete_containers_one(self.runsc, self.state_root, container)
      shutil.rmtree(bundle, ignore_errors=True)

    try:
      guest = worker.GuestProcess(
        argv,
        name=container,
        startup_timeout_s=self.config.startup_timeout_s,
        max_reply_bytes=worker.max_reply_bytes(self.config),
        on_close=cleanup,
      )
    except Exception:
      cleanup()
      raise
    state = guest.info.get("job_filter")
    if state != "on":
      guest.close()
      raise worker.SandboxError(
        f"{container}: job processes cannot get their seccomp filter"
        f" ({state}); without it a job could leave IPC objects for the next"
        " one. Use an x86-64 or arm64 host."
      )
    with self._lock:
      self._guests.add(guest)
    return guest

  def close(self) -> None:
    """Deletes every container of this launcher and its private root."""
    with self._lock:
      if self._closed:
        return
      self._closed = True
      guests = list(self._guests)
    for guest in guests:
      guest.close(timeout_s=1.0)
    try:
      delete_containers(self.runsc, self.state_root)
    except (OSError, subprocess.SubprocessError):
      logging.exception("runsc delete failed under %s", self.state_root)
    shutil.rmtree(self.root, ignore_errors=True)
    atexit.unregister(self.close)


def delete_containers_one(runsc: str, state_root: str, container: str) -> None:
  """`runsc delete --force container`, quietly (it may be gone already)."""
  subprocess.run(
    [runsc, f"--root={state_root}", "delete", "--force", container],
    capture_output=True,
    check=False,
    timeout=30,
  )
