"""Test-wide setup: 8 fake CPU devices, so sharding tests see a mesh.

The flag must be set before jax initialises its backends, hence here. The
fixtures every test directory may use live here too; the factories they
build from are in tests/helpers/ (no side effects, so the e2e test's
one-device subprocess and the benchmarks import them as well).
"""

import os

import pytest

from codeagent_rl.sandbox import harness
from tests.helpers import sandboxes

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " " + _FLAG
os.environ.setdefault("JAX_PLATFORMS", "cpu")


@pytest.fixture(scope="session")
def ray_cluster():
  """A local Ray cluster with sandbox resources, once per test process.

  Ray takes ~7 s to start (scale_out notes), so tests share one; modules
  that use it sit in the xdist group "ray", so that one worker starts it
  (attack tests parametrised over the backend start one in each worker).
  """
  import ray  # noqa: PLC0415 (the ray extra; only these tests need it)

  if not ray.is_initialized():
    ray.init(**sandboxes.RAY_TEST_CLUSTER)
  yield ray
  ray.shutdown()


@pytest.fixture(scope="module")
def module_pool():
  """A process-backend pool of two workers with the short limits, per module."""
  with harness.SandboxPool(sandboxes.short_config("process", 2)) as pool:
    yield pool
