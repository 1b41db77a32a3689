"""The environment of a test's subprocess on one CPU device.

tests/conftest.py gives every test process 8 fake CPU devices through
XLA_FLAGS; a CLI run as a user runs it (one device) needs that flag out and
the repository on its path (configs/ lives at the root).

No side effects on import (see sandboxes.py).
"""

import os
import pathlib
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
_OPT_LEVEL_FLAG = "--xla_backend_optimization_level"
_EMITTER_FLAG = "--xla_cpu_use_fusion_emitters"  # goes with level 0

# Makes SIGINT raise KeyboardInterrupt, then runs the module argv[1] as
# `python -m` does.
_WITH_CTRL_C = (
  "import runpy, signal, sys;"
  " signal.signal(signal.SIGINT, signal.default_int_handler);"
  " del sys.argv[0];"
  " runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
)


def one_device_env(llvm_optimised: bool = False) -> dict[str, str]:
  """os.environ without the fake-device flag, on CPU, the repo importable.

  Args:
    llvm_optimised: also without conftest.py's optimisation level 0 (and
      the fusion emitter choice that goes with it), for a run that spends
      more time executing than compiling: e2e_test's runs (thirteen in one
      process, all but the first with their programs in the shared
      compilation cache; the module took 140 s alone, 161 s at level 0)
      and advantage_quality's (100 SFT steps; 132 s, 183 s at level 0).
      In a whole suite the cache decides too: stop_test and repo_e2e_test
      ran faster alone at level 0 (39 s vs 47, 45 vs 50) but slower in the
      suite (40 s vs 27, 73 vs 60). Runs that mostly compile keep level 0:
      multihost_test's three cold runs (75 s alone, 108 s at the default
      level; 129 s vs 180 in the suite), compare_test's (82 s vs 119 in the
      suite, with its one data seed), the benchmarks that only compile
      (attention_bench_test: 50 s, 66).
      Optimised runs also cache every compilation, however short
      (conftest.py leaves those under 0.5 s out): a main job's small
      programs are a few dozen distinct entries, not the thousands of
      op-by-op dispatch, and the next run of a preset then compiles none
      of them (e2e_test 160 s -> 138 s alone; a warm smoke run 33 s ->
      28 s).
  """
  dropped = (_DEVICE_COUNT_FLAG,)
  if llvm_optimised:
    dropped += (_OPT_LEVEL_FLAG, _EMITTER_FLAG)
  flags = " ".join(
    f
    for f in os.environ.get("XLA_FLAGS", "").split()
    if not f.startswith(dropped)
  )
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["JAX_PLATFORMS"] = "cpu"
  env["PYTHONPATH"] = os.pathsep.join(
    [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
  )
  if flags:
    env["XLA_FLAGS"] = flags
  if llvm_optimised and "JAX_COMPILATION_CACHE_DIR" in env:
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
  return env


def run_python(
  *args: str, timeout: float = 600, llvm_optimised: bool = False
) -> subprocess.CompletedProcess:
  """`python *args` from the repository root on one device, output captured.

  `llvm_optimised` as in `one_device_env`.
  """
  return subprocess.run(
    [sys.executable, *args],
    capture_output=True,
    text=True,
    cwd=REPO_ROOT,
    env=one_device_env(llvm_optimised),
    timeout=timeout,
  )


def python_m_with_ctrl_c(module: str, *args: str) -> list[str]:
  """`python -m module *args` in which Ctrl-C raises KeyboardInterrupt.

  A shell starts a background job with SIGINT ignored, and every process
  below inherits that; Python then installs no KeyboardInterrupt handler.
  A test suite started that way (`pytest ... &` in a script) would see a
  child ignore the SIGINT a test sends it, so a test of what Ctrl-C does
  starts its child through this, which restores what an interactive shell
  gives.
  """
  return [sys.executable, "-c", _WITH_CTRL_C, module, *args]
