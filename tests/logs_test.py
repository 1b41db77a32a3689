"""The entry point keeps orbax's INFO lines off the console."""

import logging as py_logging
import os

from absl import logging
import pytest

from codeagent_rl import logs


def _record(path_parts: tuple[str, ...], level: int) -> py_logging.LogRecord:
  pathname = os.sep + os.path.join("site-packages", *path_parts)
  return py_logging.LogRecord("absl", level, pathname, 1, "msg", (), None)


@pytest.mark.parametrize(
  "parts, level, shown",
  [
    (("orbax", "checkpoint", "checkpoint_manager.py"), py_logging.INFO, False),
    (("orbax", "checkpoint", "checkpoint_manager.py"), py_logging.DEBUG, False),
    (("orbax", "checkpoint", "future.py"), py_logging.WARNING, True),
    (("orbax", "checkpoint", "future.py"), py_logging.ERROR, True),
    (("codeagent_rl", "train", "sft.py"), py_logging.INFO, True),
    # A file named like the package is not the package.
    (("codeagent_rl", "orbax.py"), py_logging.INFO, True),
  ],
)
def test_filter_drops_only_quiet_libraries_info(parts, level, shown):
  quiet = logs.LibraryInfoFilter(logs.QUIET_LIBRARIES)
  assert quiet.filter(_record(parts, level)) is shown


@pytest.fixture
def verbosity():
  before = logging.get_verbosity()
  handler = logging.get_absl_handler()
  filters = list(handler.filters)
  yield logging.set_verbosity
  logging.set_verbosity(before)
  handler.filters[:] = filters


def test_default_verbosity_installs_the_filter(verbosity):
  verbosity(logging.INFO)
  quiet = logs.quiet_library_logs()
  assert quiet in logging.get_absl_handler().filters
  record = _record(("orbax", "checkpoint", "atomicity.py"), py_logging.INFO)
  assert not logging.get_absl_handler().filter(record)


def test_higher_verbosity_shows_everything(verbosity):
  verbosity(logging.DEBUG)
  before = list(logging.get_absl_handler().filters)
  assert logs.quiet_library_logs() is None
  assert logging.get_absl_handler().filters == before
