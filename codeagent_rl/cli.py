"""What the entry points share: flag parsing with one-line errors, workdirs.

`parse_flags` is an absl `flags_parser` (`app.run(main,
flags_parser=cli.parse_flags)`). A `--config` path that names a file of
the repository's `configs/` (`--config=configs/tiny.py:smoke`) and does not
exist below the current directory is read from the installed `configs`
package, so the README's commands run from any directory once the package
is installed. `check_workdir` refuses a workdir that cannot be one before
anything is written. `redeliver_swallowed_interrupts` makes a Ctrl-C stop
the program even when it lands inside a finaliser.
"""

from __future__ import annotations

import _thread
import importlib.util
import os
import pathlib
import sys

from absl import flags

_CONFIG_FLAG = "--config"


def configs_dir() -> pathlib.Path | None:
  """The installed `configs` package's folder (found, not imported)."""
  spec = importlib.util.find_spec("configs")
  if spec is None or not spec.submodule_search_locations:
    return None
  return pathlib.Path(list(spec.submodule_search_locations)[0]).resolve()


def _innermost_text(error: BaseException) -> str:
  """The message of an exception that wraps others as its first argument."""
  while error.args and isinstance(error.args[0], BaseException):
    error = error.args[0]
  text = error.args[0] if error.args else str(error)
  return "; ".join(str(text).split("\n"))


def resolve_config(value: str) -> str:
  """A `--config` value with its file found (module docstring).

  Args:
    value: "PATH" or "PATH:ARG".

  Returns:
    `value`, its path replaced by the installed configs' file when PATH is
    relative, starts with "configs/", is missing here and exists there.

  Raises:
    FileNotFoundError: PATH names no file (the message says what to pass).
  """
  path, colon, arg = value.partition(":")
  if os.path.isfile(path):
    return value
  parts = pathlib.PurePath(path).parts
  installed = configs_dir()
  if installed is not None and not os.path.isabs(path) and len(parts) > 1:
    if parts[0] == "configs" and installed.joinpath(*parts[1:]).is_file():
      return f"{installed.joinpath(*parts[1:])}{colon}{arg}"
  names = (
    ", ".join(sorted(p.name for p in installed.glob("[!_]*.py")))
    if installed is not None
    else "not installed"
  )
  raise FileNotFoundError(
    f"--config={value}: no file {path} (from {os.getcwd()}); pass a config"
    " file's path, e.g. --config=configs/tiny.py (the repository's"
    f" configs/: {names})."
  )


def _resolve_argv(argv: list[str]) -> list[str]:
  """`argv` with its `--config` file resolved (`--config=X` or `--config X`)."""
  out = list(argv)
  for i, arg in enumerate(out):
    if arg.startswith(_CONFIG_FLAG + "="):
      out[i] = f"{_CONFIG_FLAG}={resolve_config(arg.split('=', 1)[1])}"
    elif arg == _CONFIG_FLAG and i + 1 < len(out):
      out[i + 1] = resolve_config(out[i + 1])
  return out


def parse_flags(argv: list[str]) -> list[str]:
  """Parses flags as absl does, with one-line errors, not tracebacks.

  ml_collections puts the whole traceback of an exception raised by a
  config file (e.g. an unknown preset after the colon) into the flag error,
  and lets an override of a field the config lacks
  (`--config.sft.stepz=3`) escape as an AttributeError. The user needs one
  line that names the problem.
  """
  try:
    return flags.FLAGS(_resolve_argv(argv))
  except FileNotFoundError as e:
    message = str(e)
  except flags.Error as e:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    if any(line.startswith("Traceback (most recent") for line in lines):
      lines = [lines[0], lines[-1]]
    message = " ".join(lines)
  except (AttributeError, KeyError) as e:
    message = (
      f"a --config.* override names a field the config lacks:"
      f" {_innermost_text(e)}"
    )
  except OSError as e:  # a config file that cannot be read
    message = f"--config: {_innermost_text(e)}"
  sys.exit(
    f"error: {message}\nPass --helpshort or --helpfull to see help on flags."
  )


def check_workdir(workdir: str | os.PathLike[str]) -> None:
  """Refuses a workdir that is a file, lies under one, or cannot be written.

  Nothing is created: the nearest existing folder on the way must be
  writable.

  Raises:
    ValueError: naming the path, what is wrong and what to pass instead.
  """
  path = pathlib.Path(workdir).expanduser().absolute()
  if path.exists() and not path.is_dir():
    raise ValueError(
      f"--workdir={workdir}: is a file, not a folder; pass a folder (it is"
      " created if missing)."
    )
  existing = path
  while not existing.exists():
    existing = existing.parent
  if not existing.is_dir():
    raise ValueError(
      f"--workdir={workdir}: {existing} is a file, so no folder can be made"
      " below it; pass another path."
    )
  if not os.access(existing, os.W_OK | os.X_OK):
    raise ValueError(
      f"--workdir={workdir}: {existing} is not writable by this user; pass"
      " a folder you can write to."
    )


def redeliver_swallowed_interrupts() -> None:
  """Makes a Ctrl-C that lands in a finaliser or gc callback stop the program.

  Python raises KeyboardInterrupt in whatever code runs when SIGINT
  arrives. If that is a `__del__`, a weakref callback or a gc callback
  (jax registers one), the interpreter prints "Exception ignored in ..."
  with a traceback and drops the exception: a CI run of the main job
  trained on to the end after its Ctrl-C landed in jax's gc callback.
  This `sys.unraisablehook` delivers such an interrupt to the main thread
  again, where it ends the program as a Ctrl-C should, and prints nothing;
  other unraisable exceptions go to the hook that was installed before.
  The interrupt is sent from a new thread: sent from the hook itself, it
  is raised inside the hook and dropped again. Should it land in another
  finaliser, this hook sends it once more.
  """
  previous = sys.unraisablehook

  def hook(unraisable) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
      try:
        _thread.start_new_thread(_thread.interrupt_main, ())
        return
      except RuntimeError:  # the interpreter is shutting down: report it
        pass
    previous(unraisable)

  sys.unraisablehook = hook
