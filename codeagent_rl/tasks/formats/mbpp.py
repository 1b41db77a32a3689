"""MBPP records as drafts.

  {"task_id": 2, "text": "Write a function to ...",
   "code": "def similar_elements(a, b): ...",
   "test_list": ["assert similar_elements((3, 4), (4, 5)) == (4,)"],
   "test_setup_code": "", "challenge_test_list": []}

Each assert becomes a function test where it has the shape
`assert f(<literals>) == <literal>` (either side of the `==`; literals as
`ast.literal_eval` reads them, keyword arguments allowed). Any other assert
(`assert set(f(x)) == ...`, `assert math.isclose(f(x), y)`, `assert f(x)`,
names defined by setup code) is dropped and counted by reason. The entry
point is the function the first such assert calls; asserts calling another
function are dropped too. Outputs compare as the asserts' `==` would: a
float equal to an expected int passes.

- `test_list` is suite A; `challenge_test_list`, where not empty, suite B
  (else the driver adds one).
- `code` is the reference; it must define the entry point.
- Records with `test_setup_code` are skipped: the judge runs no setup code.
"""

from __future__ import annotations

import ast
import builtins
import collections
from typing import Any

from codeagent_rl.tasks.formats import common

NOT_PYTHON = "not Python"
NOT_EQUALITY = "not `assert f(...) == value`"
NOT_LITERAL = "an argument or the expected value is not a literal"
OTHER_FUNCTION = "calls another function than the entry point"


def _call_and_value(test: ast.expr) -> tuple[ast.Call, ast.expr] | None:
  """The `f(...)` call and the other side of `f(...) == value`.

  A call of a builtin (`set(f(x)) == ...`, `sorted(...)`, `round(...)`)
  wraps the tested call: not this shape.
  """
  if not (
    isinstance(test, ast.Compare)
    and len(test.ops) == 1
    and isinstance(test.ops[0], ast.Eq)
  ):
    return None
  left, right = test.left, test.comparators[0]
  for call, value in ((left, right), (right, left)):
    if (
      isinstance(call, ast.Call)
      and isinstance(call.func, ast.Name)
      and not hasattr(builtins, call.func.id)
    ):
      return call, value
  return None


def parse_assert(source: str) -> tuple[str, list, dict, Any] | str:
  """(function, args, kwargs, expected) of an assert, or why it is not one."""
  try:
    tree = ast.parse(source.strip())
  except (SyntaxError, ValueError, RecursionError, MemoryError):
    return NOT_PYTHON
  if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
    return NOT_EQUALITY
  found = _call_and_value(tree.body[0].test)
  if found is None:
    return NOT_EQUALITY
  call, value = found
  if any(isinstance(a, ast.Starred) for a in call.args) or any(
    k.arg is None for k in call.keywords
  ):
    return NOT_LITERAL
  try:
    args = [ast.literal_eval(a) for a in call.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    expected = ast.literal_eval(value)
  except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
    return NOT_LITERAL
  return call.func.id, args, kwargs, expected


def _parsed(record: dict, field: str, dropped: collections.Counter) -> list:
  asserts = common.get(record, field, list, [])
  parsed = []
  for source in asserts:
    result = parse_assert(source) if isinstance(source, str) else NOT_EQUALITY
    if isinstance(result, str):
      dropped[f"{field}: {result}"] += 1
    else:
      parsed.append(result)
  return parsed


def _tests(
  parsed: list, entry_point: str, field: str, dropped: collections.Counter
) -> list[dict]:
  tests = []
  for name, args, kwargs, expected in parsed:
    if name == entry_point:
      tests.append(common.function_test(args, expected, kwargs))
    else:
      dropped[f"{field}: {OTHER_FUNCTION}"] += 1
  return tests


def parse(record: dict, index: int) -> common.Draft:
  """One MBPP record as a draft (raises `RecordError` naming the field)."""
  statement = common.need(record, "text", str)
  code = common.need(record, "code", str)
  if common.get(record, "test_setup_code", str, "").strip():
    raise common.RecordError("test_setup_code", "not supported")
  common.need(record, "test_list", list)
  ident = common.source_id(record, ("task_id",), index)
  dropped = collections.Counter()
  listed = _parsed(record, "test_list", dropped)
  challenge = _parsed(record, "challenge_test_list", dropped)
  if not listed:
    raise common.RecordError("test_list", common.NO_TESTS)
  entry_point = listed[0][0]
  reference = common.callable_reference(code, entry_point)
  if reference is None:
    raise common.RecordError(
      "code", "does not define the tested function", entry_point
    )
  suite_b = _tests(challenge, entry_point, "challenge_test_list", dropped)
  return common.Draft(
    task_id=f"mbpp/{ident}",
    prompt=common.function_prompt(statement, entry_point, ""),
    entry_point=entry_point,
    kind=common.FUNCTION,
    suite_a=_tests(listed, entry_point, "test_list", dropped),
    reference=reference,
    metadata={
      "source": "mbpp",
      "source_id": ident,
      "reference_from": "code",
      "judge": {"int_accepts_float": True},
    },
    suite_b=suite_b or None,
    suite_b_source="challenge_test_list",
    dropped=dropped,
  )
