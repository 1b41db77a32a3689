"""Sweeps and the main job's command line, shared by the launchers.

A sweep is a Python file whose `sweep()` yields dicts of config overrides
(dotted field -> value). Every override is checked against the config it
will be applied to before anything is launched: a field the config does
not have, or a value of another type, stops the launch with a message.

This module imports no JAX: launchers run on machines without it.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping
import importlib.util
import pathlib
import re
import sys
from typing import Any

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
ENTRY_MODULE = "codeagent_rl.main"


class SweepError(ValueError):
  """A sweep file or an override is wrong; the message says which."""


def load_sweep(path: str | pathlib.Path) -> list[dict[str, Any]]:
  """The override dicts that `path`'s `sweep()` yields, in order.

  Raises:
    SweepError: the file is missing, has no `sweep()`, or yields something
      other than non-empty dicts with dotted string keys.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise SweepError(f"--sweep={path}: no such file.")
  spec = importlib.util.spec_from_file_location(f"sweep_{path.stem}", path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except Exception as e:  # noqa: BLE001 (the user's file: name it)
    raise SweepError(f"--sweep={path}: importing it failed: {e!r}") from e
  fn = getattr(module, "sweep", None)
  if not callable(fn):
    raise SweepError(
      f"--sweep={path}: defines no sweep() function that yields dicts of"
      " config overrides."
    )
  items = list(fn())
  if not items:
    raise SweepError(f"--sweep={path}: sweep() yielded nothing.")
  for i, item in enumerate(items):
    if not isinstance(item, Mapping):
      raise SweepError(
        f"--sweep={path}: item {i} is {type(item).__name__}, not a dict of"
        " overrides."
      )
    for key in item:
      if not isinstance(key, str) or not re.fullmatch(r"[a-z_][\w.]*", key):
        raise SweepError(
          f"--sweep={path}: item {i}: {key!r} is not a dotted config field."
        )
  return [dict(item) for item in items]


def _config_module(config: str):
  """(get_config's module, its argument) of `--config=FILE[:ARG]`."""
  file, _, arg = config.partition(":")
  path = (REPO_ROOT / file) if not pathlib.Path(file).is_absolute() else None
  path = path or pathlib.Path(file)
  if not path.is_file():
    raise SweepError(f"--config={config}: no such file {path}.")
  if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))  # configs import each other
  spec = importlib.util.spec_from_file_location(f"cfg_{path.stem}", path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except Exception as e:  # noqa: BLE001 (the user's file: name it)
    raise SweepError(f"--config={config}: importing it failed: {e!r}") from e
  if not callable(getattr(module, "get_config", None)):
    raise SweepError(f"--config={config}: {path} defines no get_config().")
  return module, (arg or None)


def check_config(config: str) -> None:
  """Checks that `--config=FILE[:ARG]` loads (before anything launches).

  Raises:
    SweepError: no such file, or its `get_config` fails; the message
      names the config.
  """
  module, arg = _config_module(config)
  try:
    module.get_config(arg)
  except Exception as e:  # noqa: BLE001 (the user's config: name it)
    raise SweepError(f"--config={config}: get_config failed: {e!r}") from e


def check_overrides(config: str, items: Iterable[Mapping[str, Any]]) -> None:
  """Checks each override against the config it will change.

  Raises:
    SweepError: a field the config lacks, or a value the field refuses.
  """
  module, arg = _config_module(config)
  for i, item in enumerate(items):
    cfg = module.get_config(arg)
    for key, value in item.items():
      node, *_ = cfg, None
      parts = key.split(".")
      for part in parts[:-1]:
        if part not in node:
          raise SweepError(
            f"override {i} {key}={value!r}: {config} has no section {part!r}."
          )
        node = node[part]
      if parts[-1] not in node:
        raise SweepError(
          f"override {i} {key}={value!r}: {config} has no field {key!r}."
        )
      try:
        node[parts[-1]] = value
      except (TypeError, ValueError) as e:
        raise SweepError(f"override {i} {key}={value!r}: {e}") from None


def _flag_value(value: Any) -> str:
  if isinstance(value, bool):
    return str(value)
  if isinstance(value, float):
    return repr(value)
  return str(value)


def main_args(
  config: str, overrides: Mapping[str, Any], workdir: str
) -> list[str]:
  """The main job's arguments for one work unit (no interpreter)."""
  args = [f"--config={config}", f"--workdir={workdir}"]
  args += [f"--config.{k}={_flag_value(v)}" for k, v in overrides.items()]
  return args


def unit_name(overrides: Mapping[str, Any]) -> str:
  """A directory name from the overrides, e.g. `seed=1,estimator=grpo`."""
  parts = [
    f"{k.rsplit('.', 1)[-1]}={_flag_value(v)}" for k, v in overrides.items()
  ]
  return re.sub(r"[^\w.=,+-]", "_", ",".join(parts)) or "default"
