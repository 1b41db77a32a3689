"""The entry points' bad input: one line naming the problem and the fix.

A workdir that is a file, lies under one or cannot be written, a config
file that does not exist, an unknown preset: each stops within seconds,
before anything is written. `codeagent_rl/cli.py`'s checks, then the
command line of `python -m codeagent_rl.main` itself.
"""

import os
import pathlib
import subprocess
import sys
import time

import pytest

from codeagent_rl import cli

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_check_workdir_accepts_a_new_or_existing_folder(tmp_path):
  cli.check_workdir(tmp_path)
  cli.check_workdir(tmp_path / "a" / "b")
  assert list(tmp_path.iterdir()) == []  # nothing created


def test_check_workdir_refuses_a_file_or_a_path_below_one(tmp_path):
  afile = tmp_path / "afile"
  afile.write_text("x")
  with pytest.raises(ValueError, match="is a file, not a folder; pass a"):
    cli.check_workdir(afile)
  with pytest.raises(ValueError, match=f"{afile} is a file, so no folder"):
    cli.check_workdir(afile / "sub" / "run")


def test_check_workdir_refuses_a_folder_it_cannot_write(tmp_path, monkeypatch):
  # As root every folder is writable; what access() says is what counts.
  monkeypatch.setattr(cli.os, "access", lambda path, mode: False)
  with pytest.raises(ValueError) as e:
    cli.check_workdir(tmp_path / "run")
  assert str(e.value) == (
    f"--workdir={tmp_path / 'run'}: {tmp_path} is not writable by this user;"
    " pass a folder you can write to."
  )


def test_resolve_config_finds_configs_from_any_directory(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  installed = cli.configs_dir()
  assert installed is not None and (installed / "tiny.py").is_file()
  assert cli.resolve_config("configs/tiny.py:smoke") == (
    f"{installed / 'tiny.py'}:smoke"
  )
  own = tmp_path / "configs" / "tiny.py"  # a file here wins
  own.parent.mkdir()
  own.write_text("")
  assert cli.resolve_config("configs/tiny.py") == "configs/tiny.py"
  with pytest.raises(FileNotFoundError) as e:
    cli.resolve_config("configs/nope.py:smoke")
  message = str(e.value)
  assert message.startswith(
    f"--config=configs/nope.py:smoke: no file configs/nope.py (from {tmp_path})"
  )
  assert "tiny.py" in message and "common.py" in message
  with pytest.raises(FileNotFoundError):
    cli.resolve_config(str(tmp_path / "other.py"))


def _main(cwd, *args):
  """`python -m codeagent_rl.main ARGS` from `cwd`; (process, seconds)."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO_ROOT)}
  start = time.monotonic()
  proc = subprocess.run(
    [sys.executable, "-m", "codeagent_rl.main", *args],
    cwd=cwd,
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
    check=False,
  )
  return proc, time.monotonic() - start


@pytest.mark.parametrize(
  "case, want",
  [
    ("file", "error: --workdir={workdir}: is a file, not a folder;"),
    ("below_file", "error: --workdir={workdir}: {afile} is a file, so no"),
    ("no_config", "error: --config=configs/nope.py: no file configs/nope.py"),
    ("preset", "error: flag --config="),
  ],
)
def test_main_stops_with_one_line_and_writes_nothing(tmp_path, case, want):
  afile = tmp_path / "afile"
  afile.write_text("x")
  workdir = {"file": afile, "below_file": afile / "run"}.get(
    case, tmp_path / "run"
  )
  config = {"no_config": "configs/nope.py", "preset": "configs/tiny.py:nope"}
  cwd = tmp_path / "elsewhere"
  cwd.mkdir()
  proc, seconds = _main(
    cwd,
    f"--config={config.get(case, 'configs/tiny.py:smoke')}",
    f"--workdir={workdir}",
  )
  assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  first = lines[0]
  assert first.startswith(want.format(workdir=workdir, afile=afile)), first
  assert lines[1:] in (
    [],
    ["Pass --helpshort or --helpfull to see help on flags."],
  )
  if case == "preset":
    assert first.endswith(
      "unknown preset 'nope'; expected 'default',"
      " 'smoke', 'algo=' one of ('gae', 'grpo', 'dr_grpo', 'rloo'), or"
      " 'seed=N'."
    )
  assert seconds < 60  # imports only (a few seconds when the machine is idle)
  assert sorted(p.name for p in tmp_path.rglob("*")) == ["afile", "elsewhere"]
  assert afile.read_text() == "x"
