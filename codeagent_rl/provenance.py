"""What a run ran on: versions, the code's commit, the CPU and accelerators.

Numbers reproduce to the last digit only on the same library versions and
the same CPU (XLA's CPU code depends on both); every run prints one line of
this at its start and appends the full record to its workdir's
`environment.json` (a JSON list, one record per start: a resumed run on
other versions shows up there).
"""

from __future__ import annotations

from collections.abc import Callable
import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import subprocess
import sys
from typing import Any

import jax

# Distributions whose versions change the numbers (or what is measured).
PACKAGES = (
  "jax",
  "jaxlib",
  "flax",
  "optax",
  "orbax-checkpoint",
  "numpy",
  "chex",
  "ml-collections",
  "tokenizers",
  "transformers",
  "torch",
)
# The repository this package was imported from (when it is a checkout).
_SOURCE = pathlib.Path(__file__).resolve().parent.parent
_GIT_TIMEOUT_S = 10


def _version(name: str) -> str | None:
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    return None


def _git(*args: str) -> str | None:
  """`git -C <source> ARGS`'s output; None without git or a checkout."""
  try:
    proc = subprocess.run(
      ["git", "-C", str(_SOURCE), *args],
      capture_output=True,
      text=True,
      timeout=_GIT_TIMEOUT_S,
      check=False,
    )
  except (OSError, subprocess.SubprocessError):
    return None
  return proc.stdout.strip() if proc.returncode == 0 else None


def git_commit() -> dict[str, Any] | None:
  """The checkout's commit and whether tracked files differ from it.

  None when git is missing or the package is not imported from the top of
  a git checkout (an installed copy inside some other repository is not
  that repository's code).
  """
  top = _git("rev-parse", "--show-toplevel")
  if top is None or pathlib.Path(top).resolve() != _SOURCE:
    return None
  commit = _git("rev-parse", "HEAD")
  status = _git("status", "--porcelain", "--untracked-files=no")
  if commit is None:
    return None
  return {"commit": commit, "dirty": None if status is None else bool(status)}


def cpu_model() -> str:
  """The CPU's model name (/proc/cpuinfo), else what `platform` says."""
  try:
    text = pathlib.Path("/proc/cpuinfo").read_text()
  except OSError:
    text = ""
  for line in text.splitlines():
    key, _, value = line.partition(":")
    if key.strip() in ("model name", "Model", "Hardware") and value.strip():
      return value.strip()
  return platform.processor() or platform.machine() or "unknown"


def describe() -> dict[str, Any]:
  """The record: Python, package versions, commit, CPU and devices."""
  devices = jax.devices()
  kinds: dict[str, int] = {}
  for device in devices:
    name = f"{device.platform}:{device.device_kind}"
    kinds[name] = kinds.get(name, 0) + 1
  try:
    usable = len(os.sched_getaffinity(0))
  except (AttributeError, OSError):
    usable = os.cpu_count()
  return {
    "started": datetime.datetime.now(datetime.UTC).isoformat(
      timespec="seconds"
    ),
    "python": platform.python_version(),
    "executable": sys.executable,
    "platform": platform.platform(),
    "packages": {name: _version(name) for name in PACKAGES},
    "codeagent_rl": {"source": str(_SOURCE), "git": git_commit()},
    "cpu": {
      "model": cpu_model(),
      "count": os.cpu_count(),
      "usable": usable,
    },
    "devices": kinds,
    "process_count": jax.process_count(),
  }


def summary_line(record: dict[str, Any]) -> str:
  """One console line of `record`."""
  packages = record["packages"]
  versions = ", ".join(
    f"{name} {packages[name]}"
    for name in ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")
    if packages.get(name)
  )
  git = record["codeagent_rl"]["git"]
  if git is None:
    commit = "commit unknown"
  else:
    commit = (
      f"commit {git['commit'][:12]}{' (modified)' if git['dirty'] else ''}"
    )
  devices = ", ".join(f"{n} x{k}" for n, k in record["devices"].items())
  cpu = record["cpu"]
  return (
    f"environment: python {record['python']}, {versions}; {commit};"
    f" CPU {cpu['model']} x{cpu['usable']}; devices {devices}"
  )


def record_run(
  path: pathlib.Path, console: Callable[[str], None] = print
) -> dict[str, Any]:
  """Prints `describe()`'s line and appends the record to `path` (a list).

  The file is replaced atomically; an unreadable one is started again
  (the record is for reading, not for resuming).
  """
  record = describe()
  console(summary_line(record))
  records: list[Any] = []
  try:
    records = json.loads(path.read_text())
  except (OSError, ValueError):
    records = []
  if not isinstance(records, list):
    records = []
  records.append(record)
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(json.dumps(records, indent=1) + "\n")
  os.replace(tmp, path)
  return record
