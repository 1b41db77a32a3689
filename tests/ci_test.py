"""Checks .ci/run: it runs README's test command and maps exit codes right."""

import os
import pathlib
import re
import subprocess

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
