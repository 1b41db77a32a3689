"""Runs ruff (lint and format check) over the repository, as configured."""

import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
  "args", [("check", "."), ("format", "--check", ".")], ids=["check", "format"]
)
def test_ruff(args):
  proc = subprocess.run(
    [sys.executable, "-m", "ruff", *args, "--no-cache"],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    check=False,
    timeout=300,
  )
  output = proc.stdout + proc.stderr
  assert proc.returncode == 0, f"ruff {' '.join(args)} failed:\n{output}"
