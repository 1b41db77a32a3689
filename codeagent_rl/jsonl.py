"""Reading JSON Lines files, with errors that name the file and the line.

  for line in jsonl.read(path, TaskFormatError, loads=wire.loads):
    task = task_from_json(line.value, line.where)

Blank lines are skipped. Standard library only and no project imports, so
every layer (tasks, samples, the sandbox) can use it; callers pass their own
error type and JSON parser (`wire.loads` refuses non-finite numbers).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
import dataclasses
import json
import os
from typing import Any


@dataclasses.dataclass(frozen=True)
class Line:
  """One parsed non-blank line.

  Attributes:
    where: "<file>:<line>", the prefix of every message about this line.
    number: the line number (1-based).
    value: the parsed JSON value.
  """

  where: str
  number: int
  value: Any


def read(
  path: str | os.PathLike,
  error: type[Exception] = ValueError,
  *,
  loads: Callable[[str], Any] = json.loads,
) -> Iterator[Line]:
  """Yields the parsed non-blank lines of a JSONL file, in order.

  Args:
    path: the file (UTF-8).
    error: the exception type raised for a line that does not parse; it is
      called with the message.
    loads: parses one line (ValueError or RecursionError when it cannot).

  Raises:
    error: "<file>:<line>: not valid JSON: <why>." for the first bad line.
    OSError: the file cannot be read.
  """
  with open(path, encoding="utf-8") as f:
    for number, text in enumerate(f, start=1):
      if not text.strip():
        continue
      where = f"{os.fspath(path)}:{number}"
      try:
        value = loads(text)
      except (ValueError, RecursionError) as e:
        raise error(f"{where}: not valid JSON: {e}.") from None
      yield Line(where, number, value)
