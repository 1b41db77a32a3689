"""benchmarks/gpu_check.sh without a GPU: its arguments, its plan, its stops.

The script's GPU part runs only on a lent GPU machine; what it would run
(GPU_CHECK_PLAN=1) and how it refuses bad settings are checked here.
"""

from __future__ import annotations

import ast
import os
import pathlib
import shlex
import subprocess
import sys

import pytest

from benchmarks import attention_bench

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_check.sh"


def _run(env_extra: dict[str, str], tmp_path: pathlib.Path, path_dirs=()):
  env = dict(os.environ)
  env.update(env_extra)
  env.setdefault("GPU_CHECK_WHEELS", str(tmp_path / "no_wheels"))
  env.setdefault("PYTHON", sys.executable)
  if path_dirs:
    env["PATH"] = os.pathsep.join([*map(str, path_dirs), env["PATH"]])
  return subprocess.run(
    ["bash", str(SCRIPT)],
    env=env,
    cwd=tmp_path,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )


def _plan_commands(stdout: str) -> list[list[str]]:
  prefix = "gpu_check plan: "
  return [
    shlex.split(line[len(prefix) :])
    for line in stdout.splitlines()
    if line.startswith(prefix)
  ]


def _test_functions(path: pathlib.Path) -> set[str]:
  tree = ast.parse(path.read_text())
  return {
    node.name
    for node in ast.walk(tree)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    and node.name.startswith("test")
  }


def test_plan_names_the_benchmark_and_tests_that_exist(tmp_path):
  result = _run({"GPU_CHECK_PLAN": "1"}, tmp_path)
  assert result.returncode == 0, result.stderr
  commands = _plan_commands(result.stdout)
  assert len(commands) == 3, result.stdout
  bench, memory, tests = commands
  assert bench[bench.index("-m") + 1] == "benchmarks.hf_ppo_bench"
  assert "--batch=8" in bench and "--length=2048" in bench
  budget = [a for a in bench if a.startswith("--budget_s=")]
  assert budget == ["--budget_s=240"]
  # The attention memory check: the fused kernel against chunked at 32k,
  # with flags the benchmark accepts.
  assert memory[memory.index("-m") + 1] == "benchmarks.attention_bench"
  assert "--attentions=chunked,fused" in memory
  assert memory[memory.index("timeout") + 2] == "60"
  for arg in memory:
    if arg.startswith("--attentions="):
      assert set(arg.split("=")[1].split(",")) <= set(
        attention_bench.ALL_ATTENTIONS
      )
  assert "JAX_PLATFORMS=cuda" in tests
  # The tests compile at XLA's default level, not the CPU suite's 0.
  assert "XLA_FLAGS=--xla_backend_optimization_level=3" in tests
  pytest_args = tests[tests.index("pytest") + 1 :]
  files = [a for a in pytest_args if a.endswith(".py")]
  assert files, pytest_args
  for f in files:
    assert (REPO / f).is_file(), f
  # A deselected id that names no test deselects nothing: the mesh tests
  # would then run on one GPU and fail there.
  deselected = [
    a[len("--deselect=") :] for a in pytest_args if a.startswith("--deselect=")
  ]
  assert deselected
  for node in deselected:
    file, name = node.split("::")
    assert name in _test_functions(REPO / file), node


def test_bench_args_and_budgets_are_passed_through(tmp_path):
  result = _run(
    {
      "GPU_CHECK_PLAN": "1",
      "BENCH_ARGS": "--batch=64 --length=8192 --variants=packed",
      "BENCH_BUDGET_S": "100",
      "GPU_CHECK_TEST_WORKERS": "3",
    },
    tmp_path,
  )
  assert result.returncode == 0, result.stderr
  bench, _, tests = _plan_commands(result.stdout)
  assert "--batch=64" in bench and "--variants=packed" in bench
  assert "--budget_s=100" in bench
  assert tests[tests.index("-n") + 1] == "3"


@pytest.mark.parametrize(
  "env, message",
  [
    ({"GPU_CHECK_INSTALL": "conda"}, "expected auto or pip"),
    ({"GPU_CHECK_BUDGET_S": "8m"}, "GPU_CHECK_BUDGET_S=8m: expected whole"),
    ({"BENCH_BUDGET_S": "-5"}, "BENCH_BUDGET_S=-5: expected whole"),
  ],
)
def test_bad_settings_stop_with_a_message(tmp_path, env, message):
  result = _run({"GPU_CHECK_PLAN": "1", **env}, tmp_path)
  assert result.returncode == 2
  assert message in result.stderr
  assert "Traceback" not in result.stderr


def test_missing_modules_are_named(tmp_path):
  # An interpreter without site-packages stands in for the GPU machine's
  # Python before the wheels are unpacked.
  python = tmp_path / "python_no_site"
  python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "$@"\n')
  python.chmod(0o755)
  result = _run({"GPU_CHECK_PLAN": "1", "PYTHON": str(python)}, tmp_path)
  assert result.returncode == 1
  assert "missing modules:" in result.stderr
  assert "ml_collections" in result.stderr
  assert "put their wheels in" in result.stderr


def test_without_a_gpu_it_stops_before_the_checks(tmp_path):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  smi = bin_dir / "nvidia-smi"
  smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI (fake)  CUDA Version: 13.0'\n")
  smi.chmod(0o755)
  results = REPO / "benchmarks" / "results" / "hf_ppo_bench_gpu.json"
  before = results.stat().st_mtime_ns if results.exists() else None
  result = _run({"JAX_PLATFORMS": "cpu"}, tmp_path, path_dirs=[bin_dir])
  assert result.returncode == 1
  assert "JAX sees no GPU; stopping." in result.stderr
  assert "gpu_check plan:" not in result.stdout
  after = results.stat().st_mtime_ns if results.exists() else None
  assert after == before
