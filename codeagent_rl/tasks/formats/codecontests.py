r"""CodeContests records (DeepMind's `code_contests`) as drafts.

  {"name": "1548_E. Gregor and the Two Painters", "description": "...",
   "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
   "private_tests": {...}, "generated_tests": {...},
   "solutions": {"language": [3, 2], "solution": ["<source>", ...]}}

Every task is stdio. Its three test sets are independent:

- `private_tests` are suite A (where a record has none, `public_tests` are);
- `generated_tests` are suite B (the driver drops those whose stdin suite A
  or the visible tests have);
- `public_tests` are the visible tests.

The reference is the first Python 3 solution that compiles (language 3 in
the dataset's enum, or a name such as "PYTHON3"); Python 2 ones are not
used. `solutions` may also be a list of {"language", "solution"} objects.
"""

from __future__ import annotations

import collections

from codeagent_rl.tasks.formats import common

# `code_contests`' Language enum value of Python 3.
PYTHON3 = 3


def _is_python3(language) -> bool:
  if isinstance(language, int) and not isinstance(language, bool):
    return language == PYTHON3
  if isinstance(language, str):
    name = language.lower().replace(" ", "").replace("_", "")
    return name in ("python3", "py3")
  return False


def _solutions(record: dict) -> list[tuple]:
  """(language, code) pairs of `solutions` in either shape."""
  value = common.json_field(record, "solutions", [])
  if isinstance(value, dict):
    languages = value.get("language") or []
    codes = value.get("solution") or []
    if not isinstance(languages, list) or not isinstance(codes, list):
      raise common.RecordError("solutions", "language and solution: lists")
    return list(zip(languages, codes, strict=False))
  if isinstance(value, list):
    return [
      (s.get("language"), s.get("solution"))
      for s in value
      if isinstance(s, dict)
    ]
  raise common.RecordError("solutions", "must be an object or a list")


def reference(record: dict) -> tuple[str, str | None]:
  """(code, "solutions[i]") of the first Python 3 solution, or ("", None)."""
  for i, (language, code) in enumerate(_solutions(record)):
    if _is_python3(language) and isinstance(code, str):
      if common.compiles(code):
        return code.replace("\r\n", "\n"), f"solutions[{i}]"
  return "", None


def _tests(record: dict, name: str, dropped: collections.Counter) -> list[dict]:
  value = common.json_field(record, name, {})
  if not isinstance(value, dict):
    raise common.RecordError(name, "must be an object of input/output lists")
  inputs, outputs = value.get("input") or [], value.get("output") or []
  if not isinstance(inputs, list) or not isinstance(outputs, list):
    raise common.RecordError(name, "input and output must be lists")
  return common.stdio_tests(inputs, outputs, name, dropped)


def parse(record: dict, index: int) -> common.Draft:
  """One CodeContests record as a draft (raises `RecordError`)."""
  del index  # records carry their names
  name = common.need(record, "name", str).strip()
  description = common.need(record, "description", str)
  dropped = collections.Counter()
  public = _tests(record, "public_tests", dropped)
  private = _tests(record, "private_tests", dropped)
  generated = _tests(record, "generated_tests", dropped)
  code, origin = reference(record)
  metadata = {
    "source": "codecontests",
    "source_id": name,
    "suite_a_from": "private_tests" if private else "public_tests",
    "reference_from": origin,
  }
  for key in ("difficulty", "cf_rating"):
    value = record.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
      metadata[key] = value
  return common.Draft(
    task_id=f"codecontests/{name}",
    prompt=common.stdio_prompt(description),
    entry_point=None,
    kind=common.STDIO,
    suite_a=private or public,
    reference=code,
    metadata=metadata,
    visible=public,
    suite_b=generated or None,
    suite_b_source="generated_tests",
    dropped=dropped,
  )
