"""The `repo` kind of task: a workspace, its tests and its reference change.

A repo task is a task line (`schema`) with `"kind": "repo"` and one more
field, `"workspace"`:

  {"task_id": "shop-1", "kind": "repo", "prompt": "<the issue statement>",
   "entry_point": "cli.py",
   "workspace": {
     "files": {"shop/__init__.py": "", "shop/prices.py": "...",
               "cli.py": "...", "tests/test_prices.py": "..."},
     "test_paths": ["tests/test_prices.py"],
     "reference": {"shop/prices.py": "<the fixed module>"}},
   "visible_tests": [], "hidden_tests": [...], "heldout_tests": [...],
   "reference_solution": "", "metadata": {}}

- `files` is the workspace the agent starts from (`workspace.Workspace`:
  relative paths, text only, size-capped).
- `test_paths` are the files the task marks as its tests: hidden suites
  always run against the task's own copies of them
  (`workspace.graded_copy`), whatever the agent did to them.
- `reference` is the reference change: path -> new text, or null to delete
  the file. It may not touch a test path or a hook file (those are the
  task's own when graded anyway). `reference_solution` stays "".
- `entry_point` is the workspace's program (a `.py` file of `files`), or
  null when no test runs it.

A test is a *call* into the workspace's modules,
`{"call": "shop.prices.total", "args": [...], "kwargs": {...}, "expected":
value}` (or `"checker"` instead of `"expected"`, as for function tasks:
trusted Python run on the host), where `shop.prices` must be a module of
the workspace (`shop/prices.py` or `shop/prices/__init__.py`); or a *run*
of the entry point, `{"stdin": str, "expected_stdout": str}`. Either way
the sandbox job returns outputs as data and the host compares them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from codeagent_rl.tasks import workspace as workspace_lib

WORKSPACE_KEYS = ("files", "test_paths", "reference")


class RepoFormatError(ValueError):
  """A malformed repo task; the message names the field (schema adds where)."""


@dataclasses.dataclass(frozen=True)
class RepoSpec:
  """A repo task's workspace, parsed and validated.

  Attributes:
    start: the workspace the agent starts from.
    test_paths: the files the task marks as its tests.
    reference: `start` with the reference change applied.
  """

  start: workspace_lib.Workspace
  test_paths: tuple[str, ...]
  reference: workspace_lib.Workspace


def split_call(call: Any) -> tuple[str, str]:
  """`"pkg.mod.func"` -> `("pkg.mod", "func")`; raises RepoFormatError."""
  if not isinstance(call, str) or "." not in call:
    raise RepoFormatError(
      f"call: {call!r:.80} must be 'module.function' (e.g. 'pkg.mod.f')."
    )
  module, function = call.rsplit(".", 1)
  parts = module.split(".") + [function]
  if not all(part.isidentifier() for part in parts):
    raise RepoFormatError(
      f"call: {call!r:.80} must be dotted Python identifiers."
    )
  return module, function


def module_file(files, module: str) -> str | None:
  """The path of `module` in `files` (a module or a package), or None."""
  base = module.replace(".", "/")
  for path in (base + ".py", base + "/__init__.py"):
    if path in files:
      return path
  return None


def parse(value: Any, entry_point: Any) -> RepoSpec:
  """Validates a task's `workspace` field (and its entry point).

  Raises:
    RepoFormatError: naming the field (`workspace.files`, ...).
  """
  if not isinstance(value, dict):
    raise RepoFormatError(
      "workspace: a repo task needs an object with keys"
      f" {list(WORKSPACE_KEYS)}."
    )
  if set(value) != set(WORKSPACE_KEYS):
    raise RepoFormatError(
      f"workspace: keys must be {list(WORKSPACE_KEYS)}; got {sorted(value)}."
    )
  try:
    start = workspace_lib.Workspace(value["files"])
  except workspace_lib.WorkspaceError as e:
    raise RepoFormatError(f"workspace.files: {e}") from None
  test_paths = value["test_paths"]
  if not isinstance(test_paths, list):
    raise RepoFormatError("workspace.test_paths: must be a list of paths.")
  for i, path in enumerate(test_paths):
    if not isinstance(path, str) or path not in start:
      raise RepoFormatError(
        f"workspace.test_paths[{i}]: {path!r:.80} is not a file of"
        " workspace.files."
      )
  if len(set(test_paths)) != len(test_paths):
    raise RepoFormatError("workspace.test_paths: a path is listed twice.")
  change = value["reference"]
  if not isinstance(change, dict) or not change:
    raise RepoFormatError(
      "workspace.reference: must be a non-empty object of path -> new text"
      " (or null to delete the file)."
    )
  files = start.files()
  for path, text in change.items():
    where = f"workspace.reference[{path!r:.80}]"
    if path in test_paths or workspace_lib.is_hook_file(path):
      raise RepoFormatError(
        f"{where}: the reference may not change a test or hook file (graded"
        " runs use the task's own)."
      )
    if text is None:
      if path not in files:
        raise RepoFormatError(f"{where}: deletes a file that is not there.")
      del files[path]
    else:
      files[path] = text
  try:
    reference = workspace_lib.Workspace(files, start.limits)
  except workspace_lib.WorkspaceError as e:
    raise RepoFormatError(f"workspace.reference: {e}") from None
  if reference == start:
    raise RepoFormatError("workspace.reference: changes nothing.")
  if entry_point is not None:
    if not (
      isinstance(entry_point, str)
      and entry_point.endswith(".py")
      and entry_point in start
      and entry_point in reference
    ):
      raise RepoFormatError(
        f"entry_point: {entry_point!r:.80} must be null or a .py file of"
        " the workspace (before and after the reference change)."
      )
  return RepoSpec(start, tuple(test_paths), reference)


def check_test_target(spec: RepoSpec, test: dict, has_program: bool) -> None:
  """Raises RepoFormatError unless the test's call or run can be made."""
  if "call" in test:
    module, _ = split_call(test["call"])
    if module_file(spec.reference, module) is None:
      raise RepoFormatError(
        f"call: module {module!r} is not a file of the reference workspace"
        f" ({module.replace('.', '/')}.py or .../__init__.py)."
      )
  elif not has_program:
    raise RepoFormatError(
      "a run test (stdin / expected_stdout) needs the task's entry_point"
      " (the workspace's program)."
    )
