"""Console logging: which libraries' INFO lines the entry points leave out.

Kept apart from `main.py`, which defines absl flags: a test or notebook can
import this without defining them.
"""

from __future__ import annotations

import logging as py_logging
import os

from absl import logging

# Libraries whose INFO lines the console leaves out at the default
# verbosity: orbax logs ~30 lines per checkpoint save, which buried the
# progress lines (~450 of a default run's ~500 lines); jax logs its probe
# of each backend ("Unable to initialize backend 'tpu'" on every machine
# without one) at the start of every run. Their warnings
# still show; `--verbosity=1` shows everything.
QUIET_LIBRARIES = ("orbax", "jax")


class LibraryInfoFilter(py_logging.Filter):
  """Drops records below WARNING logged from the named packages' files."""

  def __init__(self, packages: tuple[str, ...]):
    super().__init__()
    self._parts = tuple(f"{os.sep}{p}{os.sep}" for p in packages)

  def filter(self, record: py_logging.LogRecord) -> bool:
    """True to show `record`: a warning, or not from a quiet package."""
    if record.levelno >= py_logging.WARNING:
      return True
    return not any(part in record.pathname for part in self._parts)


def quiet_library_logs() -> LibraryInfoFilter | None:
  """Hides QUIET_LIBRARIES' INFO lines unless --verbosity asks for more.

  Returns:
    The filter added to absl's handler, or None at a verbosity above INFO.
  """
  if logging.get_verbosity() > logging.INFO:
    return None
  quiet = LibraryInfoFilter(QUIET_LIBRARIES)
  logging.get_absl_handler().addFilter(quiet)
  return quiet
