r"""APPS-shaped records (APPS, TACO, DeepCoder, PrimeIntellect) as drafts.

  {"problem_id": 12, "question": "...", "starter_code": "...",
   "input_output": "{\"inputs\": [...], \"outputs\": [...],
                     \"fn_name\": \"f\"}",
   "solutions": "[\"<python source>\", ...]"}

`input_output` and `solutions` may be JSON strings or parsed already.

- With `fn_name` it is a function task: each input is the argument list.
  APPS wraps each call's output in a one-item list (its checker accepts the
  output or that item): where every output is a one-item list the item is
  expected (`metadata["outputs_unwrapped"]`), else the output as it is.
  Outputs are compared as Python's `==` compares them, so a float equal to
  an expected int passes (`metadata["judge"]`).
- Without it, inputs and outputs are stdin and stdout (a list of lines is
  joined with newlines).
- The one test set is suite A; the driver adds suite B.
- The reference is the first solution that compiles as Python 3 (APPS
  mixes in Python 2) and, for function tasks, defines the entry point (a
  LeetCode-style method gets a top-level function that calls it).
"""

from __future__ import annotations

import collections

from codeagent_rl.tasks.formats import common


def reference(record: dict, entry_point: str | None) -> tuple[str, str | None]:
  """(code, "solutions[i]") of the first usable solution, or ("", None)."""
  solutions = common.json_field(record, "solutions", [])
  if not isinstance(solutions, list):
    raise common.RecordError("solutions", "must be a list of source strings")
  for i, code in enumerate(solutions):
    if not isinstance(code, str) or not common.compiles(code):
      continue
    if entry_point is not None:
      code = common.callable_reference(code, entry_point)
      if code is None:
        continue
    return code.replace("\r\n", "\n"), f"solutions[{i}]"
  return "", None


def parse(record: dict, index: int) -> common.Draft:
  """One APPS record as a draft (raises `RecordError` naming the field)."""
  question = common.need(record, "question", str)
  starter = common.get(record, "starter_code", str, "")
  io = common.json_field(record, "input_output")
  if io is None:
    raise common.RecordError("input_output", "missing")
  if not isinstance(io, dict):
    raise common.RecordError("input_output", "must be a JSON object")
  inputs, outputs = io.get("inputs"), io.get("outputs")
  if not isinstance(inputs, list) or not isinstance(outputs, list):
    raise common.RecordError(
      "input_output", "needs lists 'inputs' and 'outputs'"
    )
  if len(inputs) != len(outputs):
    raise common.RecordError(
      "input_output",
      "inputs and outputs differ in length",
      f"{len(inputs)} and {len(outputs)}",
    )
  ident = common.source_id(record, ("problem_id", "id"), index)
  metadata = {"source": "apps", "source_id": ident}
  difficulty = record.get("difficulty")
  if isinstance(difficulty, str | int) and not isinstance(difficulty, bool):
    metadata["difficulty"] = difficulty
  dropped = collections.Counter()
  fn_name = io.get("fn_name")
  if fn_name is None:
    tests = common.stdio_tests(inputs, outputs, "input_output", dropped)
    code, origin = reference(record, None)
    kind, prompt = common.STDIO, common.stdio_prompt(question)
  else:
    if not common.is_identifier(fn_name):
      raise common.RecordError(
        "input_output.fn_name", "not a Python identifier", repr(fn_name)[:40]
      )
    unwrap = bool(outputs) and all(
      isinstance(o, list) and len(o) == 1 for o in outputs
    )
    tests = []
    for args, output in zip(inputs, outputs, strict=True):
      if isinstance(args, list):
        tests.append(
          common.function_test(args, output[0] if unwrap else output)
        )
      else:
        dropped["input_output: a functional input is not an argument list"] += 1
    code, origin = reference(record, fn_name)
    kind = common.FUNCTION
    prompt = common.function_prompt(question, fn_name, starter)
    metadata["outputs_unwrapped"] = unwrap
    metadata["judge"] = {"int_accepts_float": True}
  metadata["reference_from"] = origin
  return common.Draft(
    task_id=f"apps/{ident}",
    prompt=prompt,
    entry_point=fn_name,
    kind=kind,
    suite_a=tests,
    reference=code,
    metadata=metadata,
    dropped=dropped,
  )
