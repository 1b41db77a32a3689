"""Checks .ci/run: it runs README's test command and maps exit codes right."""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
CI_SCRIPT = REPO_ROOT / ".ci" / "run"
README = REPO_ROOT / "README.md"


def readme_test_command() -> str:
  """Returns the one pytest command in README's ```bash code blocks."""
  text = README.read_text()
  blocks = re.findall(r"^```(?:bash|sh|shell)\n(.*?)^```", text, re.M | re.S)
  lines = [line.strip() for b in blocks for line in b.splitlines()]
  commands = [
    line for line in lines if re.match(r"(python3? -m )?pytest ", line)
  ]
  assert len(commands) == 1, (
    "README.md should hold exactly one pytest command in its ```bash blocks;"
    f" found {commands}."
  )
  return commands[0]


def _bash(script: str, *args: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    ["bash", "-c", script, "bash", *args],
    capture_output=True,
    text=True,
    check=False,
    timeout=60,
  )


def test_script_is_executable_bash_with_strict_mode():
  assert os.access(CI_SCRIPT, os.X_OK), f"{CI_SCRIPT} is not executable."
  lines = CI_SCRIPT.read_text().splitlines()
  assert lines[0] == "#!/usr/bin/env bash", lines[0]
  assert "set -euo pipefail" in lines, "set -euo pipefail missing."
  proc = _bash('bash -n "$1"', str(CI_SCRIPT))
  assert proc.returncode == 0, proc.stderr


def test_script_runs_readme_test_command():
  command = readme_test_command()
  assert command == "python -m pytest -n 2 tests"
  lines = [line.strip() for line in CI_SCRIPT.read_text().splitlines()]
  assert f"run_tests {command}" in lines, (
    f".ci/run must run README's test command through run_tests:"
    f" `run_tests {command}`."
  )


@pytest.mark.parametrize("rc,want", [(0, 0), (1, 1), (2, 2), (5, 0)])
def test_run_tests_exit_codes(rc, want):
  # Stand-ins for python/pip make a sourcing that wrongly runs `main` fail
  # with 99 instead of installing anything.
  script = (
    "python3() { exit 99; }; python() { exit 99; };"
    ' source "$1"; run_tests bash -c "exit $2"; echo after'
  )
  proc = _bash(script, str(CI_SCRIPT), str(rc))
  assert proc.returncode == want, proc.stdout + proc.stderr
  # set -e stops at a failing run_tests; a passing one continues.
  assert ("after" in proc.stdout) == (want == 0), proc.stdout


def _install_args(text: str) -> list[str]:
  """The arguments after `pip install` in each line of `text` that has one."""
  return [
    m.group(1).strip()
    for m in re.finditer(r"pip install (-e '\.\[[a-z,]+\]'[^&\n]*)", text)
  ]


def test_script_installs_as_readme_says_with_the_lock():
  readme = _install_args(
    "\n".join(
      re.findall(
        r"^```(?:bash|sh|shell)\n(.*?)^```", README.read_text(), re.M | re.S
      )
    )
  )
  script = _install_args(CI_SCRIPT.read_text())
  assert len(readme) == 1 and len(script) == 1, (readme, script)
  assert readme == script, "README's install command and .ci/run's differ."
  assert readme[0].endswith(" -c constraints.txt"), readme
  assert (REPO_ROOT / "constraints.txt").is_file()


def test_the_suite_and_its_subprocesses_share_one_compilation_cache():
  """conftest.py sets the cache before jax is imported, for every process."""
  import jax  # noqa: PLC0415 (imported after conftest, as every test does)

  from tests.helpers import processes  # noqa: PLC0415

  cache = os.environ.get("JAX_COMPILATION_CACHE_DIR")
  assert cache and pathlib.Path(cache).is_dir()
  assert jax.config.jax_compilation_cache_dir == cache
  # A size limit: jax then locks the cache, so a process never reads an
  # entry another is still writing.
  assert int(jax.config.jax_compilation_cache_max_size) > 0
  # The lock's writes read the whole directory: only programs worth keeping
  # go in (conftest.py says what caching every one cost).
  assert float(jax.config.jax_persistent_cache_min_compile_time_secs) > 0
  proc = processes.run_python(
    "-c",
    # A program this small compiles faster than the suite's threshold
    # (conftest.py); this process caches every compilation to show where
    # its entries land.
    "import jax; print(jax.config.jax_compilation_cache_dir);"
    " jax.config.update('jax_persistent_cache_min_compile_time_secs', 0);"
    " print(jax.jit(lambda x: x * 3)(2))",
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.split() == [cache, "6"]
  # The subprocess's compilation landed in the shared directory.
  assert any(p.name.endswith("-cache") for p in pathlib.Path(cache).iterdir())


def test_the_suites_processes_read_the_modules_bytecode():
  """conftest.py compiles the repository's modules before the suite runs."""
  sources = [
    REPO_ROOT / "codeagent_rl" / "train" / "run.py",
    REPO_ROOT / "codeagent_rl" / "sandbox" / "guest" / "server.py",
    REPO_ROOT / "configs" / "tiny.py",
  ]
  for source in sources:
    cached = pathlib.Path(importlib.util.cache_from_source(str(source)))
    assert cached.is_file(), cached
    assert cached.stat().st_mtime >= source.stat().st_mtime, cached
  # A subprocess, with writing bytecode off as on these machines, loads the
  # module from that file (`python -v` names where each code object came
  # from) rather than compiling its source.
  env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
  proc = subprocess.run(
    [sys.executable, "-v", "-c", "from codeagent_rl.train import run"],
    cwd=REPO_ROOT,
    env=env,
    capture_output=True,
    text=True,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  cached = importlib.util.cache_from_source(str(sources[0]))
  assert f"code object from '{cached}'" in proc.stderr


# Two fake devices; device 0's share of a psum arrives argv[1] seconds late
# (an io_callback sleeps), as a starved device thread's does on a loaded
# machine.
_LATE_DEVICE = """
import sys, time
import numpy as np
import jax
from jax.experimental import io_callback
from jax.sharding import Mesh, PartitionSpec as P

def late(i):
  if int(i) == 0:
    time.sleep(float(sys.argv[1]))
  return np.float32(0)

def f(x):
  z = io_callback(late, jax.ShapeDtypeStruct((), np.float32),
                  jax.lax.axis_index("x"))
  return jax.lax.psum(x + z, "x")

mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P()))
print(float(g(np.arange(2.0, dtype=np.float32))[0]))
"""


def _late_device_run(flags: list[str], delay_s: float) -> subprocess.Popen:
  from tests.helpers import processes  # noqa: PLC0415

  # The suite's flags (the rendezvous timeout among them), two devices.
  env = processes.one_device_env()
  env["XLA_FLAGS"] = " ".join(
    [
      env.get("XLA_FLAGS", ""),
      "--xla_force_host_platform_device_count=2",
      # Warn after 1 s instead of 20, so the timeouts below count from there.
      "--xla_cpu_collective_call_warn_stuck_timeout_seconds=1",
      *flags,
    ]
  )
  return subprocess.Popen(
    [sys.executable, "-c", _LATE_DEVICE, str(delay_s)],
    env=env,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def test_a_slow_collective_rendezvous_does_not_abort_the_suite():
  """conftest.py lifts XLA:CPU's rendezvous termination timeout.

  XLA aborts a process whose collective waits past its timeout (40 s after
  the 20 s warning by default). The flag that governs it is checked by
  effect: at 1 s the late device aborts the run, at the suite's value it
  does not.
  """
  flag = "--xla_cpu_collective_call_terminate_timeout_seconds"
  suite_flags = [
    f for f in os.environ["XLA_FLAGS"].split() if f.startswith(flag + "=")
  ]
  assert len(suite_flags) == 1, os.environ["XLA_FLAGS"]
  assert int(suite_flags[0].split("=")[1]) >= 300
  aborted = _late_device_run([f"{flag}=1"], 4.0)
  survived = _late_device_run([], 4.0)  # the suite's own value, inherited
  out, err = aborted.communicate(timeout=120)
  assert aborted.returncode != 0, out
  assert "Termination timeout" in err, err[-2000:]
  out, err = survived.communicate(timeout=120)
  assert survived.returncode == 0, err[-2000:]
  assert out.split() == ["1.0"], out


_HANGS = """
import os
import time

import pytest


@pytest.mark.parametrize("i", range(8))
def test_before(i):
  time.sleep(0.05)


def test_hangs():
  time.sleep(3600)


@pytest.mark.xdist_group("group")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
  time.sleep(0.05)


@pytest.mark.parametrize("i", range(8))
def test_after(i):
  time.sleep(0.05)
"""


def test_a_hung_test_ends_the_run_with_its_stack(tmp_path):
  """The suite's own pytest settings turn a hang into a prompt failure.

  pyproject.toml's timeout kills the worker that runs a hung test, and with
  loadgroup scheduling xdist would then wait forever for the dead worker's
  share (it did so after a crash until CI's 90-minute limit) unless no
  worker is replaced.
  """
  (tmp_path / "hang_test.py").write_text(_HANGS)
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "pytest",
      "-c",
      str(REPO_ROOT / "pyproject.toml"),
      "--rootdir",
      str(tmp_path),
      "-n",
      "2",
      "-o",
      "faulthandler_timeout=3",
      str(tmp_path / "hang_test.py"),
    ],
    capture_output=True,
    text=True,
    check=False,
    timeout=120,
  )
  out = proc.stdout + proc.stderr
  assert proc.returncode == 1, out[-3000:]
  assert "Timeout" in out and "test_hangs" in out, out[-3000:]
  assert "time.sleep(3600)" in out or "in test_hangs" in out, out[-3000:]
