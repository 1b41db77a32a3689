"""Reading a public file's records: JSONL or one JSON list, maybe gzipped.

  for record in records.read_records(path):
    if isinstance(record.value, records.Unparsed): ...  # a bad line

JSONL goes through `codeagent_rl.jsonl` with a parser that hands back a
line it cannot parse (`Unparsed`) instead of stopping, so that the caller
skips that record and goes on. A file whose first character is "[" and
that parses as one JSON list gives its items; a record's `where` is
"<file>:<line>" (JSONL) or "<file>[<index>]" (list), the prefix of every
message about it.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import dataclasses
import gzip
import json
import os
import shutil
import tempfile
from typing import Any

from codeagent_rl import jsonl

_GZIP_MAGIC = b"\x1f\x8b"


class ConvertError(RuntimeError):
  """The input as a whole cannot be converted; the message says why."""


@dataclasses.dataclass(frozen=True)
class Unparsed:
  """A JSONL line that is not JSON, and why."""

  error: str


@dataclasses.dataclass(frozen=True)
class Record:
  """One record of the file.

  Attributes:
    where: "<file>:<line>" or "<file>[<index>]".
    index: 0-based position among the records.
    value: the parsed JSON, or an `Unparsed`.
  """

  where: str
  index: int
  value: Any


def _tolerant_loads(text: str) -> Any:
  """`json.loads` that returns what went wrong instead of raising."""
  try:
    return json.loads(text)
  except (ValueError, RecursionError) as e:
    return Unparsed(str(e))


@contextlib.contextmanager
def _plain_text(path: str) -> Iterator[str]:
  """`path`, or a decompressed copy of it if it is gzipped."""
  with open(path, "rb") as f:
    gzipped = f.read(2) == _GZIP_MAGIC
  if not gzipped:
    yield path
    return
  with tempfile.TemporaryDirectory() as tmp:
    plain = os.path.join(tmp, "input.json")
    try:
      with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    except (OSError, EOFError) as e:
      raise ConvertError(f"{path}: a broken gzip file ({e}).") from None
    yield plain


def _first_char(path: str) -> str:
  with open(path, encoding="utf-8") as f:
    for line in f:
      if line.strip():
        return line.lstrip()[0]
  return ""


def read_records(path: str) -> Iterator[Record]:
  """The records of a JSONL file or of a JSON list (either maybe gzipped).

  Lines that are not JSON come as `Unparsed` values, to be skipped.

  Raises:
    ConvertError: the file cannot be read, or is not UTF-8 text.
  """
  try:
    with _plain_text(path) as plain:
      if _first_char(plain) == "[":
        try:
          with open(plain, encoding="utf-8") as f:
            document = json.load(f)
        except (ValueError, RecursionError):
          document = None  # maybe JSONL whose lines are lists
        if isinstance(document, list):
          for i, value in enumerate(document):
            yield Record(f"{path}[{i}]", i, value)
          return
      lines = jsonl.read(plain, ConvertError, loads=_tolerant_loads)
      for i, line in enumerate(lines):
        yield Record(f"{path}:{line.number}", i, line.value)
  except UnicodeDecodeError as e:
    raise ConvertError(f"{path}: not UTF-8 text ({e.reason}).") from None
  except OSError as e:
    raise ConvertError(f"{path}: cannot read: {e}") from None
