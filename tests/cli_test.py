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


# A Ctrl-C that Python raises inside a finaliser or a gc callback: without
# the hook the interpreter prints "Exception ignored" and goes on.
_SWALLOWED_INTERRUPT = """
import gc, signal, sys, time
from codeagent_rl import cli
# As an interactive shell starts a program (a background job ignores it).
signal.signal(signal.SIGINT, signal.default_int_handler)
if sys.argv[1] == "hook":
  cli.redeliver_swallowed_interrupts()

class Finalised:
  def __del__(self):
    raise KeyboardInterrupt

def on_gc(phase, info):
  if phase == "start":
    gc.callbacks.remove(on_gc)
    raise KeyboardInterrupt

try:
  if sys.argv[2] == "finaliser":
    Finalised()
  else:
    gc.callbacks.append(on_gc)
    gc.collect()
  deadline = time.monotonic() + 3
  while time.monotonic() < deadline:
    pass
  print("ran on")
except KeyboardInterrupt:
  print("stopped")
"""


@pytest.mark.parametrize("where", ["finaliser", "gc_callback"])
def test_a_ctrl_c_inside_a_finaliser_still_stops_the_program(where):
  def run(mode):
    return subprocess.run(
      [sys.executable, "-c", _SWALLOWED_INTERRUPT, mode, where],
      capture_output=True,
      text=True,
      timeout=60,
      cwd=REPO_ROOT,
    )

  bare = run("bare")  # what the hook is for
  assert bare.stdout.strip() == "ran on", bare
  assert "Exception ignored" in bare.stderr, bare
  hooked = run("hook")
  assert hooked.stdout.strip() == "stopped", hooked
  assert hooked.stderr == "", hooked.stderr


def test_other_unraisable_exceptions_still_reach_the_previous_hook():
  script = (
    "import sys\n"
    "from codeagent_rl import cli\n"
    "cli.redeliver_swallowed_interrupts()\n"
    "class F:\n"
    "  def __del__(self):\n"
    "    raise ValueError('from a finaliser')\n"
    "F()\n"
    "print('ran on')\n"
  )
  out = subprocess.run(
    [sys.executable, "-c", script],
    capture_output=True,
    text=True,
    timeout=60,
    cwd=REPO_ROOT,
  )
  assert out.stdout.strip() == "ran on"
  assert "ValueError: from a finaliser" in out.stderr
