"""The task format: a frozen `Task`, JSONL reading and writing, validation.

One task per line (DESIGN.md, "Data contracts"):

  {"task_id": "add", "prompt": "...", "entry_point": "add",
   "kind": "function",
   "visible_tests": [{"args": [1, 2], "expected": 3}],
   "hidden_tests": [{"args": [2, 2], "kwargs": {}, "expected": 4},
                    {"args": [5, 7], "checker": "<python source>"}],
   "heldout_tests": [...], "reference_solution": "def add(a, b): ...",
   "metadata": {}}

An optional tenth field, `"generated_tests"`, holds the suite the project
generates from the reference solution (`tasks/suite_b/plus.py`), kept
beside the task's own suite B (`heldout_tests`); stage 2 demands both.
Files without it stay valid, and a task without generated tests is written
without the field, so such files round-trip byte for byte.

A third kind, `"repo"`, is a repository task: a workspace (path -> text)
in one more optional field, `"workspace"`, with tests that call into its
modules or run its program (`codeagent_rl.tasks.repo_schema` describes it).
The field is left out of the other kinds' lines.

A function test is `{"args": [...], "kwargs": {...}, "expected": value}` or
`{"args": [...], "kwargs": {...}, "checker": source}`; `kwargs` may be left
out. A checker is trusted Python run on the host only; it must define
`check(args, kwargs, output) -> bool`. A stdio test is `{"stdin": str,
"expected_stdout": str}`. Stdio tasks have `"entry_point": null`.

`metadata` is free-form, except for one optional key, `"judge"`: an
object of options for how the judge compares this task's outputs
(`codeagent_rl.tasks.judge`). Its one key so far is `"int_accepts_float"`
(a bool, default false): where an int is expected, a float exactly equal to
it passes too (Python's `==`, what HumanEval's asserts do).

Values JSON cannot express (tuples, sets, non-finite floats, dicts with
non-string keys) use the tagged encoding of `codeagent_rl.sandbox.wire`,
the same one sandbox results use. Reading decodes them; writing encodes them.
Every error names the file, the line and the field.
"""

from __future__ import annotations

from collections.abc import Iterable
import dataclasses
import json
import keyword
import os
from typing import Any

from codeagent_rl import jsonl
from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import repo_schema

KINDS = ("function", "stdio", "repo")
# The kinds whose solution is one program (what the code environment, the
# offline grader and the suite tools take); a repo task's is a workspace.
PROGRAM_KINDS = ("function", "stdio")
SUITES = ("visible_tests", "hidden_tests", "heldout_tests", "generated_tests")
# Fields a task line may leave out (read as an empty suite).
OPTIONAL_FIELDS = ("generated_tests", "workspace")
FIELDS = (
  "task_id",
  "prompt",
  "entry_point",
  "kind",
  "visible_tests",
  "hidden_tests",
  "heldout_tests",
  "reference_solution",
  "metadata",
  *OPTIONAL_FIELDS,
)
_FUNCTION_TEST_KEYS = {"args", "kwargs", "expected", "checker"}
_CALL_TEST_KEYS = _FUNCTION_TEST_KEYS | {"call"}
_STDIO_TEST_KEYS = {"stdin", "expected_stdout"}
# The metadata key of the judge's options, and each option's type (the
# names are `judge.JudgeConfig` fields; a task that leaves one out gets the
# judge's config).
JUDGE_METADATA_KEY = "judge"
JUDGE_OPTIONS = {"int_accepts_float": bool}
# The metadata key of an interactive task's hidden probe (`tasks.probes`):
# {"family": "secret", "lo": int, "hi": int, "secret": int}. Its values
# stay on the host; `<run>` observations answer the job's probe queries.
PROBE_METADATA_KEY = "probe"
PROBE_FAMILIES = ("secret",)
# Bound of a probe's integers (queries beyond it are not answered).
PROBE_MAX_ABS = 10**12


class TaskFormatError(ValueError):
  """A task file or task is malformed; the message names where."""


@dataclasses.dataclass(frozen=True)
class Task:
  """One task, with tagged values already decoded.

  Attributes:
    task_id: unique within a file.
    prompt: what the policy sees.
    entry_point: the function to call (function tasks); None for stdio;
      for repo tasks the workspace's program (a path) or None.
    kind: "function", "stdio" or "repo".
    visible_tests: tests the prompt may show.
    hidden_tests: suite A, the reward.
    heldout_tests: suite B, the anti-cheat gate (stage 2).
    reference_solution: a correct solution; never shown to the policy.
    metadata: free-form JSON object (source, difficulty, ...).
    generated_tests: tests generated from the reference solution, beside
      suite B (the stage-2 gate demands both); empty when none were.
    workspace: a repo task's workspace object (`repo_schema`); None for
      the other kinds. `repo` holds it parsed.
  """

  task_id: str
  prompt: str
  entry_point: str | None
  kind: str
  visible_tests: tuple[dict, ...]
  hidden_tests: tuple[dict, ...]
  heldout_tests: tuple[dict, ...]
  reference_solution: str
  metadata: dict
  generated_tests: tuple[dict, ...] = ()
  workspace: dict | None = None

  def __post_init__(self):
    for suite in SUITES:
      tests = getattr(self, suite)
      if isinstance(tests, list):
        object.__setattr__(self, suite, tuple(tests))
    object.__setattr__(self, "_repo", _validate(self, "task"))

  @property
  def repo(self) -> repo_schema.RepoSpec:
    """A repo task's parsed workspace; ValueError for the other kinds."""
    if self._repo is None:
      raise ValueError(
        f"task {self.task_id!r} is a {self.kind} task, not repo."
      )
    return self._repo


def _check_value(value: Any, where: str) -> None:
  """Values must be plain data the tagged encoding can carry."""
  try:
    wire.encode(value)
  except wire.EncodeError as e:
    raise TaskFormatError(f"{where}: {e}") from None


def _validate_function_test(
  test: Any, where: str, keys: set = _FUNCTION_TEST_KEYS
) -> None:
  if not isinstance(test, dict):
    raise TaskFormatError(f"{where}: a function test must be an object.")
  unknown = set(test) - keys
  if unknown:
    raise TaskFormatError(
      f"{where}: unknown keys {sorted(unknown)} in a function test (kind"
      f" 'function' takes {sorted(keys)})."
    )
  if "args" not in test:
    raise TaskFormatError(f"{where}.args: missing.")
  if type(test["args"]) is not list:
    raise TaskFormatError(f"{where}.args: must be a JSON array.")
  _check_value(test["args"], f"{where}.args")
  kwargs = test.get("kwargs", {})
  if type(kwargs) is not dict or not all(type(k) is str for k in kwargs):
    raise TaskFormatError(f"{where}.kwargs: must be an object of str keys.")
  _check_value(kwargs, f"{where}.kwargs")
  has_expected, has_checker = "expected" in test, "checker" in test
  if has_expected == has_checker:
    raise TaskFormatError(
      f"{where}: needs exactly one of 'expected' and 'checker'."
    )
  if has_expected:
    _check_value(test["expected"], f"{where}.expected")
  else:
    checker = test["checker"]
    if not isinstance(checker, str) or not checker.strip():
      raise TaskFormatError(f"{where}.checker: must be Python source.")
    try:
      compile(checker, f"{where}.checker", "exec")
    except SyntaxError as e:
      raise TaskFormatError(
        f"{where}.checker: syntax error at line {e.lineno}: {e.msg}."
      ) from None


def _validate_stdio_test(test: Any, where: str) -> None:
  if not isinstance(test, dict):
    raise TaskFormatError(f"{where}: a stdio test must be an object.")
  if set(test) != _STDIO_TEST_KEYS:
    raise TaskFormatError(
      f"{where}: a stdio test has exactly the keys"
      f" {sorted(_STDIO_TEST_KEYS)}; got {sorted(test)}."
    )
  for key in sorted(_STDIO_TEST_KEYS):
    if not isinstance(test[key], str):
      raise TaskFormatError(f"{where}.{key}: must be a string.")


def _validate_repo_test(
  spec: repo_schema.RepoSpec, program: bool, test: Any, where: str
) -> None:
  """A call into the workspace's modules, or a run of its program."""
  if isinstance(test, dict) and "call" in test:
    _validate_function_test(test, where, _CALL_TEST_KEYS)
  elif isinstance(test, dict) and "args" in test:
    raise TaskFormatError(
      f"{where}: a repo task's function test names its target in 'call'"
      " ('module.function')."
    )
  else:
    _validate_stdio_test(test, where)
  try:
    repo_schema.check_test_target(spec, test, program)
  except repo_schema.RepoFormatError as e:
    raise TaskFormatError(f"{where}: {e}") from None


def validate(task: Task, where: str = "task") -> None:
  """Raises `TaskFormatError` naming the field of anything malformed."""
  _validate(task, where)


def _validate(task: Task, where: str) -> repo_schema.RepoSpec | None:
  """`validate`, returning a repo task's parsed workspace (else None)."""
  if not isinstance(task.task_id, str) or not task.task_id:
    raise TaskFormatError(f"{where}: task_id: must be a non-empty string.")
  where = f"{where} {task.task_id!r}"
  for name in ("prompt", "reference_solution"):
    if not isinstance(getattr(task, name), str):
      raise TaskFormatError(f"{where}: {name}: must be a string.")
  if task.kind not in KINDS:
    raise TaskFormatError(
      f"{where}: kind: {task.kind!r} is not one of {KINDS}."
    )
  spec = None
  if task.kind == "repo":
    if task.reference_solution:
      raise TaskFormatError(
        f'{where}: reference_solution: must be "" for a repo task (its'
        " reference change is workspace.reference)."
      )
    try:
      spec = repo_schema.parse(task.workspace, task.entry_point)
    except repo_schema.RepoFormatError as e:
      raise TaskFormatError(f"{where}: {e}") from None
  elif task.workspace is not None:
    raise TaskFormatError(
      f"{where}: workspace: only a repo task has one (kind is {task.kind!r})."
    )
  if task.kind == "function":
    entry = task.entry_point
    if not (
      isinstance(entry, str)
      and entry.isidentifier()
      and not keyword.iskeyword(entry)
    ):
      raise TaskFormatError(
        f"{where}: entry_point: a function task needs a Python identifier,"
        f" got {entry!r}."
      )
  elif task.kind == "stdio" and task.entry_point is not None:
    raise TaskFormatError(
      f"{where}: entry_point: must be null for a stdio task, got"
      f" {task.entry_point!r}."
    )
  if spec is not None:
    program = task.entry_point is not None

    def check(test, where):
      _validate_repo_test(spec, program, test, where)

  elif task.kind == "function":
    check = _validate_function_test
  else:
    check = _validate_stdio_test
  for suite in SUITES:
    tests = getattr(task, suite)
    if not isinstance(tests, tuple | list):
      raise TaskFormatError(f"{where}: {suite}: must be a list of tests.")
    for i, test in enumerate(tests):
      check(test, f"{where}: {suite}[{i}]")
  if not task.hidden_tests:
    raise TaskFormatError(f"{where}: hidden_tests: needs at least one test.")
  if not isinstance(task.metadata, dict):
    raise TaskFormatError(f"{where}: metadata: must be an object.")
  try:
    json.dumps(task.metadata, allow_nan=False)
  except (TypeError, ValueError) as e:
    raise TaskFormatError(f"{where}: metadata: not plain JSON ({e}).") from None
  if JUDGE_METADATA_KEY in task.metadata:
    _validate_judge_options(task.metadata[JUDGE_METADATA_KEY], where)
  if PROBE_METADATA_KEY in task.metadata:
    _validate_probe(task, where)
  return spec


def _validate_probe(task: Task, where: str) -> None:
  field = f"{where}: metadata.{PROBE_METADATA_KEY}"
  spec = task.metadata[PROBE_METADATA_KEY]
  keys = {"family", "lo", "hi", "secret"}
  if not isinstance(spec, dict) or set(spec) != keys:
    raise TaskFormatError(
      f"{field}: must be an object with keys {sorted(keys)}."
    )
  if spec["family"] not in PROBE_FAMILIES:
    raise TaskFormatError(
      f"{field}.family: {spec['family']!r:.40} is not one of {PROBE_FAMILIES}."
    )
  for name in ("lo", "hi", "secret"):
    value = spec[name]
    if type(value) is not int or abs(value) > PROBE_MAX_ABS:
      raise TaskFormatError(
        f"{field}.{name}: must be an int of magnitude <= {PROBE_MAX_ABS},"
        f" got {value!r:.40}."
      )
  if not spec["lo"] <= spec["secret"] <= spec["hi"]:
    raise TaskFormatError(f"{field}: needs lo <= secret <= hi.")
  if task.kind != "function" or task.visible_tests:
    raise TaskFormatError(
      f"{field}: a probe task is a function task without visible tests"
      " (a `<run>` is a program whose probe queries the host answers)."
    )


def _validate_judge_options(options: Any, where: str) -> None:
  field = f"{where}: metadata.{JUDGE_METADATA_KEY}"
  if not isinstance(options, dict):
    raise TaskFormatError(f"{field}: must be an object.")
  unknown = sorted(set(options) - set(JUDGE_OPTIONS))
  if unknown:
    raise TaskFormatError(
      f"{field}: unknown key(s) {unknown} (known: {sorted(JUDGE_OPTIONS)})."
    )
  for name, kind in JUDGE_OPTIONS.items():
    if name in options and type(options[name]) is not kind:
      raise TaskFormatError(
        f"{field}.{name}: must be a {kind.__name__}, got {options[name]!r:.40}."
      )


def task_from_json(obj: Any, where: str = "task") -> Task:
  """Builds a `Task` from one parsed JSON line (tagged values decoded).

  Raises:
    TaskFormatError: naming `where` and the field.
  """
  if not isinstance(obj, dict):
    raise TaskFormatError(f"{where}: a task must be a JSON object.")
  missing = [f for f in FIELDS if f not in obj and f not in OPTIONAL_FIELDS]
  if missing:
    raise TaskFormatError(f"{where}: missing field(s) {missing}.")
  unknown = sorted(set(obj) - set(FIELDS))
  if unknown:
    raise TaskFormatError(f"{where}: unknown field(s) {unknown}.")
  values = dict(obj)
  for suite in SUITES:
    tests = obj.get(suite, [])  # only an optional field may be missing
    if not isinstance(tests, list):
      raise TaskFormatError(f"{where}: {suite}: must be a list of tests.")
    decoded = []
    for i, test in enumerate(tests):
      try:
        decoded.append(wire.decode(test))
      except wire.DecodeError as e:
        raise TaskFormatError(f"{where}: {suite}[{i}]: {e}.") from None
    values[suite] = tuple(decoded)
  try:
    return Task(**values)
  except TaskFormatError as e:
    raise TaskFormatError(f"{where}: {e}") from None


def task_to_json(task: Task) -> dict:
  """The JSON object of a task (tagged values encoded)."""
  out = {name: getattr(task, name) for name in FIELDS}
  for suite in SUITES:
    out[suite] = [wire.encode(test) for test in getattr(task, suite)]
  for name in OPTIONAL_FIELDS:
    if not out[name]:  # None or an empty suite
      del out[name]
  return out


def read_tasks(
  path: str | os.PathLike, kinds: tuple[str, ...] = KINDS
) -> list[Task]:
  """Reads a JSONL task file; blank lines are skipped.

  Args:
    path: the file.
    kinds: the kinds the reader takes (`PROGRAM_KINDS` for what runs one
      program per solution).

  Raises:
    TaskFormatError: naming the file, line and field of the first problem
      (bad JSON, a malformed task, a duplicate task_id, a kind not in
      `kinds`).
  """
  tasks, first_line = [], {}
  for line in jsonl.read(path, TaskFormatError, loads=wire.loads):
    task = task_from_json(line.value, line.where)
    if task.kind not in kinds:
      hint = (
        " (a repo task's solution is a workspace: grade it with"
        " codeagent_rl.tasks.repo_judge)"
        if task.kind == "repo"
        else ""
      )
      raise TaskFormatError(
        f"{line.where}: task {task.task_id!r}: kind: {task.kind!r} is not"
        f" taken here, only {list(kinds)}{hint}."
      )
    if task.task_id in first_line:
      raise TaskFormatError(
        f"{line.where}: task_id: {task.task_id!r} duplicates line"
        f" {first_line[task.task_id]}."
      )
    first_line[task.task_id] = line.number
    tasks.append(task)
  return tasks


def write_tasks(path: str | os.PathLike, tasks: Iterable[Task]) -> None:
  """Writes tasks as JSONL (one line each, tagged values encoded).

  Raises:
    TaskFormatError: on a duplicate task_id (nothing is written).
  """
  lines, seen = [], set()
  for i, task in enumerate(tasks):
    if task.task_id in seen:
      raise TaskFormatError(
        f"{os.fspath(path)}: task {i}: task_id: duplicate {task.task_id!r}."
      )
    seen.add(task.task_id)
    lines.append(wire.dumps(task_to_json(task)) + "\n")
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(lines)
