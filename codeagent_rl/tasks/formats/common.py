"""What every format parser shares: the `Draft`, field readers, prompts.

A parser turns one public record into a `Draft`: the task's fields with
its test sets as the source has them (uncapped, in source order). The
driver (`codeagent_rl.tasks.convert`) caps, deduplicates and picks the
visible tests, runs the reference, and adds suite B where the source has
none. A record that cannot become a task raises `RecordError` naming the
field; a single test that cannot be used is dropped and counted by reason
(`Draft.dropped`).
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import json
import keyword
from typing import Any

FUNCTION = "function"
STDIO = "stdio"
# Why a record with no test left is skipped.
NO_TESTS = "no usable tests"


class RecordError(ValueError):
  """A record that cannot become a task; the driver adds file and line.

  Attributes:
    reason: "<field>: <why>", the key the report counts skips by (no
      record-specific detail in it).
  """

  def __init__(self, field: str, why: str, detail: str = ""):
    self.reason = f"{field}: {why}"
    super().__init__(f"{self.reason} ({detail})" if detail else self.reason)


@dataclasses.dataclass
class Draft:
  """One record's task before capping, suite B and the reference check.

  Attributes:
    task_id: "<format>/<source id>".
    prompt: the statement the policy sees (visible tests are rendered
      separately by the environment).
    entry_point: the function to call; None for stdio.
    kind: "function" or "stdio".
    suite_a: the tests of suite A, in source order.
    reference: a complete solution, or "" when the source has none.
    metadata: what the task's metadata starts from.
    visible: the source's public tests ([]: the first tests of suite A).
    suite_b: the source's second, independent test set; None when it has
      none (the driver then augments, or uses suite A's overflow).
    suite_b_source: the field suite B came from.
    dropped: tests left out, by reason.
    problem: for the humaneval format, the problem that
      `codeagent_rl.tasks.humaneval` converts (the other fields are unused).
  """

  task_id: str
  prompt: str
  entry_point: str | None
  kind: str
  suite_a: list[dict]
  reference: str
  metadata: dict
  visible: list[dict] = dataclasses.field(default_factory=list)
  suite_b: list[dict] | None = None
  suite_b_source: str = ""
  dropped: collections.Counter = dataclasses.field(
    default_factory=collections.Counter
  )
  problem: dict | None = None


# --- Fields ------------------------------------------------------------------


def get(record: dict, name: str, kinds: type | tuple, default: Any = None):
  """`record[name]` checked against `kinds`; `default` where absent or null.

  Raises:
    RecordError: the value has another type.
  """
  value = record.get(name)
  if value is None:
    return default
  if not isinstance(value, kinds) or isinstance(value, bool):
    names = (
      kinds.__name__
      if isinstance(kinds, type)
      else "/".join(k.__name__ for k in kinds)
    )
    raise RecordError(name, f"must be {names}", f"got {type(value).__name__}")
  return value


def need(record: dict, name: str, kinds: type | tuple) -> Any:
  """`record[name]`: present, non-null, of `kinds`, and not a blank str."""
  value = get(record, name, kinds)
  if value is None:
    raise RecordError(name, "missing")
  if isinstance(value, str) and not value.strip():
    raise RecordError(name, "empty")
  return value


def source_id(record: dict, names: tuple[str, ...], index: int) -> str:
  """The first of `names` the record has (str or int), else `record-<index>`."""
  for name in names:
    value = get(record, name, (str, int))
    if value is not None and str(value).strip():
      return str(value).strip()
  return f"record-{index}"


def json_field(record: dict, name: str, default: Any = None) -> Any:
  """A field that holds JSON, either parsed already or as a JSON string.

  Raises:
    RecordError: a string that is not JSON.
  """
  value = record.get(name)
  if value is None:
    return default
  if isinstance(value, str):
    if not value.strip():
      return default
    try:
      return json.loads(value)
    except (ValueError, RecursionError) as e:
      raise RecordError(name, "not valid JSON", str(e)[:80]) from None
  return value


def text(value: Any) -> str | None:
  """A stdin or stdout: a str as is, a list of str lines joined; else None."""
  if isinstance(value, str):
    return value
  if isinstance(value, list) and all(isinstance(v, str) for v in value):
    return "\n".join(value) + ("\n" if value else "")
  return None


# --- Tests -------------------------------------------------------------------


def stdio_test(stdin: str, stdout: str) -> dict:
  """A stdio test."""
  return {"stdin": stdin, "expected_stdout": stdout}


def function_test(args: list, expected: Any, kwargs: dict | None = None):
  """A function test (kwargs left out when empty)."""
  test = {"args": list(args), "expected": expected}
  if kwargs:
    test["kwargs"] = dict(kwargs)
  return test


def stdio_tests(
  inputs: list, outputs: list, field: str, dropped: collections.Counter
) -> list[dict]:
  """Stdio tests of parallel input and output lists; bad pairs are dropped.

  Raises:
    RecordError: the lists differ in length.
  """
  if len(inputs) != len(outputs):
    raise RecordError(
      field, "inputs and outputs differ in length", f"{len(inputs)} inputs"
    )
  tests = []
  for stdin, stdout in zip(inputs, outputs, strict=True):
    stdin, stdout = text(stdin), text(stdout)
    if stdin is None or stdout is None:
      dropped[f"{field}: a stdin or stdout is not text"] += 1
    else:
      tests.append(stdio_test(stdin, stdout))
  return tests


# --- Code --------------------------------------------------------------------


def is_identifier(name: Any) -> bool:
  """Whether `name` can be an entry point."""
  return (
    isinstance(name, str)
    and name.isidentifier()
    and not keyword.iskeyword(name)
  )


def compiles(code: str) -> bool:
  """Whether `code` is Python 3 source (some sources mix in Python 2)."""
  try:
    compile(code, "<reference>", "exec", dont_inherit=True)
  except (SyntaxError, ValueError, RecursionError, MemoryError):
    return False
  return True


def _top_level_names(tree: ast.Module) -> set[str]:
  names = set()
  for node in tree.body:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
      names.add(node.name)
    elif isinstance(node, ast.Assign):
      names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    elif isinstance(node, ast.Import | ast.ImportFrom):
      names.update((a.asname or a.name).split(".")[0] for a in node.names)
  return names


def _class_with_method(tree: ast.Module, method: str) -> str | None:
  for node in tree.body:
    if isinstance(node, ast.ClassDef):
      for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == method:
          return node.name
  return None


# Makes a LeetCode-style method callable as a top-level function, which is
# what the judge calls.
_SHIM = """

def {name}(*args, **kwargs):
  return {cls}().{name}(*args, **kwargs)
"""


def callable_reference(code: str, entry_point: str) -> str | None:
  """`code` such that `entry_point` is a top-level name, or None.

  A solution that defines the entry point only as a method of a class
  (LeetCode's `class Solution`) gets a top-level function that calls it on
  a fresh instance appended.
  """
  code = code.replace("\r\n", "\n")
  try:
    tree = ast.parse(code)
  except (SyntaxError, ValueError, RecursionError, MemoryError):
    return None
  if entry_point in _top_level_names(tree):
    return code
  cls = _class_with_method(tree, entry_point)
  if cls is None:
    return None
  return code.rstrip("\n") + "\n" + _SHIM.format(name=entry_point, cls=cls)


# --- Prompts -----------------------------------------------------------------


def function_prompt(statement: str, entry_point: str, starter: str) -> str:
  """The statement, the function to write, and the starter code if any."""
  if f"def {entry_point}(self" in starter:
    ask = (
      f"Write a top-level Python function `{entry_point}` (it may call the"
      " method of the starter code's class on a new instance)."
    )
  else:
    ask = f"Write a Python function `{entry_point}`."
  lines = [statement.strip(), "", ask]
  if starter.strip():
    lines += ["Starter code:", starter.rstrip()]
  return "\n".join(lines)


def stdio_prompt(statement: str) -> str:
  """The statement and how the program gets its input."""
  return (
    statement.strip() + "\n\nWrite a Python program that reads standard input"
    " and writes the answer to standard output."
  )
