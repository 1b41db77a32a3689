"""Sandbox settings and probe programs that tests and benchmarks share.

Unlike tests/conftest.py (which forces 8 fake devices on import), this
module has no side effects, so the e2e test's one-device subprocess and the
benchmarks import it too.
"""

import dataclasses
import glob
import os

from codeagent_rl.sandbox import config as config_lib

# Short limits keep the tests fast (a job that hangs or hogs fails in
# seconds); they are still far above what the tests' benign jobs need.
SHORT_LIMITS = {
  "timeout_s": 4.0,
  "test_timeout_s": 1.0,
  "memory_mb": 256,
  "max_output_bytes": 64 << 10,
}
# A smaller scratch tmpfs and largest file, for pools that run attacks
# (filling the scratch disk ends sooner).
SMALL_DISK = {"scratch_mb": 32, "max_file_mb": 8}


# `ray.init` arguments of the tests' local Ray cluster: the sandbox actors
# take no CPU (fleet.py), only units of the "sandbox" resource; a small
# object store, since results are small.
RAY_TEST_CLUSTER = {
  "address": "local",
  "num_cpus": 2,
  "resources": {"sandbox": 16},
  "object_store_memory": 128 << 20,
  "include_dashboard": False,
}


def ray_config(
  config: config_lib.SandboxConfig, actors: int = 1, in_flight: int = 1
) -> config_lib.SandboxConfig:
  """`config`'s limits and backend served by Ray actors (backend "ray")."""
  return dataclasses.replace(
    config,
    backend="ray",
    ray_backend=config.backend,
    ray_actors=actors,
    ray_in_flight=in_flight,
  )


def short_config(
  backend: str, pool_size: int, **overrides
) -> config_lib.SandboxConfig:
  """A pool's settings: `SHORT_LIMITS` updated by `overrides`."""
  return config_lib.SandboxConfig(
    backend=backend, pool_size=pool_size, **{**SHORT_LIMITS, **overrides}
  )


# A program (format it with `extra`, the processes to fork besides itself)
# that forks every process the job may have; each fills what its address
# space allows in 8 MiB blocks, and holds it until all have. Prints the
# MiB each process got, its own first.
MEMORY_HOG = """
import json, os, time
def fill():
  got, blocks = 0, []
  try:
    while True:
      block = bytearray(8 << 20)
      for i in range(0, len(block), 4096):
        block[i] = 1
      blocks.append(block)
      got += 8
  except MemoryError:
    pass
  return got, blocks
kids = []
for _ in range({extra}):
  try:
    pid = os.fork()
  except OSError:
    break
  if pid == 0:
    got, blocks = fill()
    time.sleep(1.5)
    os._exit(min(got // 8, 255))
  kids.append(pid)
got, blocks = fill()
totals = [got]
for pid in kids:
  totals.append(8 * os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(json.dumps(totals))
"""


def cgroup_peak_bytes(container: str) -> int | None:
  """The peak memory of a gVisor sandbox's cgroup (v1 or v2); None if none."""
  for path in (
    f"/sys/fs/cgroup/memory/{container}/memory.max_usage_in_bytes",
    *glob.glob(
      f"/sys/fs/cgroup/memory/*/{container}/memory.max_usage_in_bytes"
    ),
    f"/sys/fs/cgroup/{container}/memory.peak",
  ):
    if os.path.exists(path):
      with open(path) as f:
        return int(f.read())
  return None
