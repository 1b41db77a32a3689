r"""LiveCodeBench code-generation records as drafts.

  {"question_id": "2847", "question_content": "...", "starter_code": "...",
   "platform": "leetcode", "difficulty": "easy",
   "public_test_cases": "[{\"input\": \"[1, 2]\n3\", \"output\": \"4\",
                           \"testtype\": \"functional\"}]",
   "private_test_cases": "<the same as JSON, or base64(zlib(pickle(JSON)))>",
   "metadata": "{\"func_name\": \"f\"}"}

- A record whose tests are "functional" is a function task calling
  `metadata.func_name` (LeetCode's `class Solution` method: the prompt asks
  for a top-level function). A functional input is one JSON value per line,
  the arguments in order; the output is one JSON value, compared as
  Python's `==` would (a float equal to an expected int passes). Other
  records are stdio ("stdin"); a test of the other type is dropped.
- `private_test_cases` are suite A (where empty, the public ones are),
  `public_test_cases` the visible tests; the driver adds suite B.
- LiveCodeBench ships no solutions: `reference_solution` is "".

The compressed private tests are unpickled by `PlainDataUnpickler`, which
refuses every global (no class, no function, no module): only pickles of
plain data (str, bytes, numbers, lists, tuples, dicts, sets) load, and a
pickle that names any object, such as `os.system`, is an error of its
record. Decompression stops at `MAX_INFLATED_BYTES`.
"""

from __future__ import annotations

import base64
import binascii
import collections
import io
import json
import pickle
from typing import Any
import zlib

from codeagent_rl.tasks.formats import common

# The most bytes the private tests may inflate to (the largest
# LiveCodeBench records hold tens of MB of tests).
MAX_INFLATED_BYTES = 1 << 29
TESTTYPES = {"functional": common.FUNCTION, "stdin": common.STDIO}


class RefusedPickle(pickle.UnpicklingError):
  """A pickle names a Python object; only plain data is accepted."""


class PlainDataUnpickler(pickle.Unpickler):
  """Loads plain data only: every global lookup is refused."""

  def find_class(self, module: str, name: str):
    """Refuses every class, function and module (nothing is imported)."""
    raise RefusedPickle(f"it refers to {module}.{name}")


def _inflate(raw: bytes, field: str) -> bytes:
  inflater = zlib.decompressobj()
  try:
    data = inflater.decompress(raw, MAX_INFLATED_BYTES)
  except zlib.error as e:
    raise common.RecordError(field, "not zlib data", str(e)) from None
  if inflater.unconsumed_tail:
    raise common.RecordError(
      field, "inflates past the limit", f"{MAX_INFLATED_BYTES} bytes"
    )
  return data


def unpickle_plain(data: bytes, field: str) -> Any:
  """Plain data from a pickle (raises `RecordError` on anything else)."""
  try:
    return PlainDataUnpickler(io.BytesIO(data)).load()
  except RefusedPickle as e:
    raise common.RecordError(
      field, "pickle refused: it is not plain data", str(e)
    ) from None
  except Exception as e:  # noqa: BLE001 - any malformed pickle
    raise common.RecordError(
      field, "not a pickle", f"{type(e).__name__}: {e}"[:80]
    ) from None


def decode_cases(record: dict, field: str) -> list:
  """A test-case list: JSON, or base64(zlib(pickle(JSON or a list)))."""
  value = record.get(field)
  if value is None or value == "":
    return []
  if isinstance(value, list):
    return value
  if not isinstance(value, str):
    raise common.RecordError(field, "must be a JSON string or a list")
  try:
    cases = json.loads(value)
  except (ValueError, RecursionError):
    try:
      raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
      raise common.RecordError(field, "neither JSON nor base64") from None
    cases = unpickle_plain(_inflate(raw, field), field)
    if isinstance(cases, bytes):
      cases = cases.decode("utf-8", errors="replace")
    if isinstance(cases, str):
      try:
        cases = json.loads(cases)
      except (ValueError, RecursionError) as e:
        raise common.RecordError(
          field, "the unpickled text is not JSON", str(e)[:80]
        ) from None
  if not isinstance(cases, list):
    raise common.RecordError(field, "must be a list of test cases")
  return cases


def _function_test(case: dict) -> dict | None:
  """The test of a functional case (None: its input or output is not JSON)."""
  try:
    lines = case["input"].split("\n")
    args = [json.loads(line) for line in lines if line.strip()]
    expected = json.loads(case["output"])
  except (ValueError, RecursionError):
    return None
  return common.function_test(args, expected)


def _tests(
  cases: list, kind: str, field: str, dropped: collections.Counter
) -> list[dict]:
  tests = []
  for case in cases:
    if not (
      isinstance(case, dict)
      and isinstance(case.get("input"), str)
      and isinstance(case.get("output"), str)
    ):
      dropped[f"{field}: a case without text input and output"] += 1
    elif TESTTYPES.get(case.get("testtype", "stdin")) != kind:
      dropped[f"{field}: a case of another testtype"] += 1
    elif kind == common.STDIO:
      tests.append(common.stdio_test(case["input"], case["output"]))
    else:
      test = _function_test(case)
      if test is None:
        dropped[f"{field}: a functional input or output is not JSON"] += 1
      else:
        tests.append(test)
  return tests


def parse(record: dict, index: int) -> common.Draft:
  """One LiveCodeBench record as a draft (raises `RecordError`)."""
  question = common.need(record, "question_content", str)
  ident = common.source_id(record, ("question_id",), index)
  public = decode_cases(record, "public_test_cases")
  private = decode_cases(record, "private_test_cases")
  meta = common.json_field(record, "metadata", {})
  if not isinstance(meta, dict):
    raise common.RecordError("metadata", "must be a JSON object")
  types = {
    c.get("testtype", "stdin")
    for c in (*public, *private)
    if isinstance(c, dict)
  }
  kind = common.FUNCTION if "functional" in types else common.STDIO
  entry_point = None
  if kind == common.FUNCTION:
    entry_point = meta.get("func_name")
    if entry_point is None:
      raise common.RecordError("metadata.func_name", "missing (functional)")
    if not common.is_identifier(entry_point):
      raise common.RecordError(
        "metadata.func_name", "not a Python identifier", repr(entry_point)
      )
  dropped = collections.Counter()
  visible = _tests(public, kind, "public_test_cases", dropped)
  hidden = _tests(private, kind, "private_test_cases", dropped)
  metadata = {
    "source": "livecodebench",
    "source_id": ident,
    "suite_a_from": "private_test_cases" if hidden else "public_test_cases",
    "reference_from": None,
  }
  for key in ("platform", "difficulty", "contest_date"):
    if isinstance(record.get(key), str):
      metadata[key] = record[key]
  if kind == common.FUNCTION:
    starter = common.get(record, "starter_code", str, "")
    prompt = common.function_prompt(question, entry_point, starter)
    metadata["judge"] = {"int_accepts_float": True}
  else:
    prompt = common.stdio_prompt(question)
  return common.Draft(
    task_id=f"livecodebench/{ident}",
    prompt=prompt,
    entry_point=entry_point,
    kind=kind,
    suite_a=hidden or visible,
    reference="",
    metadata=metadata,
    visible=visible,
    dropped=dropped,
  )
