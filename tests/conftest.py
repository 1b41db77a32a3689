"""Test-wide setup: 8 fake CPU devices, so sharding tests see a mesh.

The flag must be set before jax initialises its backends, hence here; the
compilation cache and the modules' bytecode are set up here too, before any
worker or subprocess starts. The
fixtures every test directory may use live here too; the factories they
build from are in tests/helpers/ (no side effects, so the e2e test's
one-device subprocess and the benchmarks import them as well).
"""

import os
import shutil
import tempfile

# One persistent compilation cache for the whole run, set before jax is
# imported: the test processes and every subprocess they start (CLI runs,
# notebook kernels, the multi-host pair) inherit it through the environment,
# and xdist's workers inherit the controller's. Many tests compile the same
# small presets; measured on the smoke main job: 104 s with an empty cache,
# 49 s when a previous run filled it. A size limit turns on jax's file lock,
# which keeps a reader from seeing an entry half written by another process.
# With the limit, every write lists and reads the whole directory to decide
# what to evict, so the cost of a write grows with the entries: caching every
# compilation (op-by-op dispatch compiles thousands of small programs) made
# transformer_test's first test take 142 s instead of 6.5 s beside 20,000
# entries, and the whole suite 1,445 s instead of 1,250 s with programs
# under 0.5 s of compilation left out (~800 entries at the end).
# A cache the user set is used and left alone; ours is removed at the end.
_OWN_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _OWN_CACHE = tempfile.mkdtemp(prefix="codeagent_rl_test_jax_cache_")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")
  os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(4 << 30))

import compileall  # noqa: E402

# Bytecode for the repository's own modules, written once by the controller
# before any worker or subprocess starts. Where PYTHONDONTWRITEBYTECODE is
# set (it is on these machines), no process writes it, so every one of the
# suite's ~150 Python processes (CLI runs, benchmarks, notebook kernels, the
# process backend's sandbox servers) compiled the modules it imported from
# source again: 40 s of the suite's CPU (py-spy). Reading bytecode is not
# writing it, so the setting still holds for everything else; a file older
# than its source is recompiled, and a checkout that cannot be written is
# left as it is.
if "PYTEST_XDIST_WORKER" not in os.environ:
  _ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  for _package in ("codeagent_rl", "configs", "benchmarks", "tests"):
    compileall.compile_dir(os.path.join(_ROOT, _package), quiet=2)
import pytest  # noqa: E402 (after the cache's environment)

from codeagent_rl.sandbox import harness  # noqa: E402
from tests.helpers import sandboxes  # noqa: E402

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " " + _FLAG
# The suite's programs are tiny and most of its time is XLA compiling them;
# LLVM's optimisation of the generated CPU code is most of that. Level 0
# keeps XLA's own passes (fusion, layout; what decides the numbers up to
# rounding) and skips LLVM's: attention_test and remat_test took 87 user
# seconds instead of 143. Subprocesses inherit it (tests/helpers/processes).
# A level the caller set is kept.
_OPT_FLAG = "--xla_backend_optimization_level"
if _OPT_FLAG not in os.environ["XLA_FLAGS"]:
  os.environ["XLA_FLAGS"] += f" {_OPT_FLAG}=0"
# At level 0, XLA:CPU's older elemental emitter compiles the suite's small
# fusions in half the time of the fusion emitters (attention_test 62 s ->
# 36 s, 82 -> 41 user seconds; five model and training modules 130 s ->
# 78 s). At the default level it gains nothing (a smoke main job 45 s cold
# either way), so the optimised subprocesses drop it with the level. The
# two emitters agree to float32 rounding.
_EMITTER_FLAG = "--xla_cpu_use_fusion_emitters"
if _EMITTER_FLAG not in os.environ["XLA_FLAGS"]:
  os.environ["XLA_FLAGS"] += f" {_EMITTER_FLAG}=false"
# XLA:CPU aborts the process when a collective's participants (here the
# fake devices' threads) have not all arrived 60 s after the first (warning
# at 20 s, termination 40 s later): measured with one device held back by a
# callback, the abort reads "Fatal Python error: Aborted" with the main
# thread in `Array._value`. A loaded 2-core machine running the other
# worker's subprocesses and sandboxes can starve one of 8 device threads
# that long (a CI run lost a worker that way in collapse_test); a slow
# rendezvous is not a deadlock, so the suite waits up to 10 minutes.
_RENDEZVOUS_FLAG = "--xla_cpu_collective_call_terminate_timeout_seconds"
if _RENDEZVOUS_FLAG not in os.environ["XLA_FLAGS"]:
  os.environ["XLA_FLAGS"] += f" {_RENDEZVOUS_FLAG}=600"
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


# Fixtures that start or join the worker's Ray cluster (`ray_cluster`).
_RAY_FIXTURES = {"ray_cluster", "ray_gvisor_pool"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
  """Puts every test that needs Ray in the xdist group "ray".

  The attack tests that run against a Ray actor (`attack_pool`'s "ray"
  parameter) were spread over both workers, so each started a Ray cluster
  of its own (~9 s of one worker's time, then Ray's processes beside the
  rest of the suite). Tests in another group keep theirs. Before xdist's
  own hook, which reads the groups.
  """
  for item in items:
    if item.get_closest_marker("xdist_group") is not None:
      continue
    params = getattr(item, "callspec", None)
    uses_ray = bool(_RAY_FIXTURES & set(getattr(item, "fixturenames", ())))
    if params is not None and params.params.get("attack_pool") == "ray":
      uses_ray = True
    if uses_ray:
      item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(scope="module")
def module_pool():
  """A process-backend pool of two workers with the short limits, per module."""
  with harness.SandboxPool(sandboxes.short_config("process", 2)) as pool:
    yield pool


def pytest_sessionfinish(session, exitstatus):
  """Removes the compilation cache this process made.

  xdist's workers inherit the controller's and leave it to the controller.
  """
  del session, exitstatus
  if _OWN_CACHE is not None:
    shutil.rmtree(_OWN_CACHE, ignore_errors=True)
