"""Every command README.md and docs/*.md show runs from outside the repository.

The commands are read from the Markdown (code blocks, and inline code that
starts with `python -m`), and each program is started with `--helpshort`
from a temporary directory, after its `--config` (configs/ paths stay as
written: the entry points find them in the installed package). absl exits
with status 1 after printing help, by design; what is checked is that the
program printed its usage, with no traceback. Starting each costs its
imports (a few seconds with JAX), so they run two at a time.

When the installed `codeagent_rl` is another checkout's (an editable install
of another worktree), the repository is put on PYTHONPATH instead, and only
the independence from the current directory is checked here.
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import re
import shlex
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = (REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")))
# Entry points whose --config is parsed before --helpshort exits (the
# others' --config is a plain string, or they take none).
_CONFIG_PARSERS = ("codeagent_rl.main", "codeagent_rl.experiments.compare")
# Not a program of this repository.
_SKIP = ("pytest",)


def commands(text: str) -> list[str]:
  """The `python ...` commands of Markdown `text` (code blocks, inline)."""
  out = []
  for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S):
    for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
      for part in line.split("&&"):
        match = re.match(r"\s*(?:[A-Z_]+=\S+\s+)*(python3? .*)", part)
        if match:
          out.append(match.group(1).strip())
  out += re.findall(r"`(python3? -m [^`]+)`", text)
  return out


def program(command: str) -> tuple[list[str], str] | None:
  """(argv to run with --helpshort, the program's name), None to skip."""
  words = shlex.split(re.sub(r"\[[^\]]*\]", "", command))[1:]
  if words[0] == "-m":
    name, rest = words[1], words[2:]
    argv = ["-m", name]
  else:
    name, rest = words[0], words[1:]
    argv = [str(REPO_ROOT / name)]
  if name in _SKIP:
    return None
  if name in _CONFIG_PARSERS:
    argv += [w for w in rest if w.startswith("--config=")]
  return argv, name


def test_commands_and_programs_are_read_from_markdown():
  text = """
run:
```bash
apt-get install -y x && pip install -e . && python -m a.b \\
  --config=configs/t.py --workdir=DIR
XLA=1 python tools/x.py --n=1 [--opt=2]
```
and `python -m c.d --flag`, not `pip install python`.
"""
  found = commands(text)
  assert found == [
    "python -m a.b --config=configs/t.py --workdir=DIR",
    "python tools/x.py --n=1 [--opt=2]",
    "python -m c.d --flag",
  ]
  assert program(found[1]) == ([str(REPO_ROOT / "tools/x.py")], "tools/x.py")
  assert program("python -m pytest -n 2 tests") is None
  assert program(
    "python -m codeagent_rl.main --config=configs/tiny.py:smoke --workdir=D"
  ) == (
    ["-m", "codeagent_rl.main", "--config=configs/tiny.py:smoke"],
    "codeagent_rl.main",
  )


def _env(cwd: pathlib.Path) -> dict[str, str]:
  """The environment to run in: the installed package if it is this one."""
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["JAX_PLATFORMS"] = "cpu"
  probe = subprocess.run(
    [
      sys.executable,
      "-c",
      "import codeagent_rl, configs, benchmarks, pathlib;"
      "print(pathlib.Path(codeagent_rl.__file__).resolve().parent.parent)",
    ],
    cwd=cwd,
    env=env,
    capture_output=True,
    text=True,
    check=False,
  )
  if probe.returncode or pathlib.Path(probe.stdout.strip()) != REPO_ROOT:
    env["PYTHONPATH"] = str(REPO_ROOT)
  return env


def _run(argv, cwd, env):
  return subprocess.run(
    [sys.executable, *argv, "--helpshort"],
    cwd=cwd,
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
    check=False,
  )


def test_every_documented_command_starts_from_another_directory(tmp_path):
  programs = {}
  for doc in DOCS:
    for command in commands(doc.read_text()):
      found = program(command)
      if found is not None:
        programs.setdefault(tuple(found[0]), (doc.name, command, found[1]))
  assert len(programs) >= 15, programs  # the README alone shows more
  env = _env(tmp_path)
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    procs = dict(
      zip(
        programs,
        pool.map(lambda argv: _run(argv, tmp_path, env), programs),
        strict=True,
      )
    )
  failures = []
  for argv, proc in procs.items():
    doc, command, name = programs[argv]
    usage = proc.stdout.strip()
    if "Traceback" in proc.stderr or proc.returncode not in (0, 1) or not usage:
      tail = (proc.stderr.strip() or proc.stdout.strip())[-800:]
      failures.append(f"{doc}: {command}\n  -> rc {proc.returncode}: {tail}")
  assert not failures, "\n".join(failures)
  assert not any(tmp_path.iterdir())  # help writes nothing
