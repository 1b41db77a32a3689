"""Scripted demonstrations of repository tasks (`repo_gen`'s), as tool calls.

A plan is the policy's tool calls only; the observations come from playing
it through `envs/repo_env.RepoEnv`, as for function tasks. Kinds:

- "direct": run the failing test, read the modules down the call chain to
  the buggy one, fix it, run the test again, submit. Turns: depth + 4.
- "probing": the same descent, but at each level it also writes a probe
  script that prints the next function's result on the failing input and
  runs it (so it sees where the values first go wrong), reading the file
  list and searching first; removes the probe before submitting. Turns: 3
  per level and about 8 more: from ~10 at depth 1 to 30 and more at
  depth 8.
- "give_up": runs the test, reads a few modules, submits without a fix.
- "weakened_test": edits the visible test until it passes and submits:
  a hack on purpose (graded runs use the task's own test file, so it earns
  what the bug earns; stage 1 flags edits to a test path).

`action_text` renders one call in the policy's syntax: a byte-protocol
command (`envs/repo_commands`) or a JSON tool call (`repo_tools`).
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import difflib
import random

from codeagent_rl.envs import protocol
from codeagent_rl.envs import repo_commands
from codeagent_rl.envs import repo_tools
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import workspace as ws_lib

PLAN_KINDS = ("direct", "probing", "give_up", "weakened_test")
# The tools a plan may change files with (`plan`'s `edit_tool`).
EDIT_TOOLS = ("edit", "replace_lines")
PROBE_PATH = "probe.py"


@dataclasses.dataclass(frozen=True)
class RepoPlan:
  """The tool calls of one demonstration (the last one submits).

  Attributes:
    task_id: the task.
    kind: one of `PLAN_KINDS`.
    calls: (tool name, arguments) pairs; exactly the last is "submit".
  """

  task_id: str
  kind: str
  calls: tuple[tuple[str, dict], ...]

  def __post_init__(self):
    if self.kind not in PLAN_KINDS:
      raise ValueError(f"kind: {self.kind!r} is not one of {PLAN_KINDS}.")
    names = [name for name, _ in self.calls]
    if not names or names[-1] != "submit" or "submit" in names[:-1]:
      raise ValueError("calls: exactly the last call submits.")
    for name, args in self.calls:
      repo_tools.check_arguments(name, args)

  @property
  def actions(self) -> tuple[tuple[str, dict], ...]:
    """The calls (what fingerprints of the demonstrations hash)."""
    return self.calls


def action_text(syntax: str, name: str, arguments: dict) -> str:
  """One call as the policy writes it: "tags" or "json" (`RepoEnv.syntax`)."""
  if syntax == "json":
    return repo_tools.json_call_text(name, arguments)
  if name == "submit":
    return f"{protocol.SUBMIT}fix{protocol.SUBMIT_END}"
  command = repo_commands.format_tag_call(name, arguments)
  return f"{protocol.RUN}{command}{protocol.RUN_END}"


def fix_edit(before: str, after: str) -> dict:
  """The edit call that turns `before` into `after` (one changed block).

  Lines of context are added around the changed ones until the searched
  text occurs once in `before`.

  Raises:
    ValueError: the files differ in more than one block.
  """
  old, new = before.split("\n"), after.split("\n")
  blocks = [
    op
    for op in difflib.SequenceMatcher(a=old, b=new).get_opcodes()
    if op[0] != "equal"
  ]
  if len(blocks) != 1:
    raise ValueError(f"{len(blocks)} changed blocks; a fix edit takes one.")
  _, i1, i2, j1, j2 = blocks[0]
  for context in range(len(old)):
    lo, hi = max(i1 - context, 0), min(i2 + context, len(old))
    search = "\n".join(old[lo:hi])
    if search and before.count(search) == 1:
      head, tail = old[lo:i1], old[i2:hi]
      replace = "\n".join(head + new[j1:j2] + tail)
      return {"path": "", "search": search, "replace": replace}
  raise ValueError("no unique context for the changed lines.")


def _chain(task: schema.Task) -> list[tuple[str, str, str]]:
  """(path, module, function) from report.summary down to the bug."""
  files = task.repo.start
  meta = task.metadata
  package = meta["bug_path"].split("/")[0]
  out = [(f"{package}/report.py", f"{package}.report", "summary")]
  while out[-1][0] != meta["bug_path"]:
    source = files[out[-1][0]]
    call = next(
      line.split("=", 1)[1].strip()
      for line in source.split("\n")
      if line.strip().startswith(("values = ", "xs = ")) and "(xs)" in line
    )
    module, function = call.removesuffix("(xs)").split(".")
    out.append((f"{package}/{module}.py", f"{package}.{module}", function))
  return out


def _fix(task: schema.Task, tool: str) -> tuple[str, dict]:
  path = task.metadata["bug_path"]
  return _change(tool, task.repo.start[path], task.repo.reference[path], path)


def fix_lines(before: str, after: str) -> dict:
  """The replace_lines call that turns `before` into `after`.

  One range, from the first changed line to the last (the lines between
  them are written again as they are); a change that only adds lines
  takes the line above (or below, at the top) with it, since a range
  holds at least one line. Numbers as `view` shows them.

  Raises:
    ValueError: the files are the same.
  """
  old = ws_lib.source_lines(before)
  new = ws_lib.source_lines(after)
  blocks = [
    op
    for op in difflib.SequenceMatcher(a=old, b=new).get_opcodes()
    if op[0] != "equal"
  ]
  if not blocks:
    raise ValueError("the files are the same; there is nothing to fix.")
  i1, j1 = blocks[0][1], blocks[0][3]
  i2, j2 = blocks[-1][2], blocks[-1][4]
  if i1 == i2:  # an insertion only
    if i1 > 0:
      i1, j1 = i1 - 1, j1 - 1
    else:
      i2, j2 = i2 + 1, j2 + 1
  content = "".join(line + "\n" for line in new[j1:j2])
  return {"start": i1 + 1, "end": i2, "content": content}


def _change(tool: str, before: str, after: str, path: str) -> tuple[str, dict]:
  """The `tool` call ("edit" or "replace_lines") from `before` to `after`."""
  if tool == "replace_lines":
    return ("replace_lines", {"path": path, **fix_lines(before, after)})
  return ("edit", {**fix_edit(before, after), "path": path})


def plan(
  task: schema.Task, kind: str, rng: random.Random, edit_tool: str = "edit"
) -> RepoPlan:
  """A demonstration of `kind` for a `repo_gen` task.

  Its changes of files use `edit_tool` (`EDIT_TOOLS`).
  """
  if edit_tool not in EDIT_TOOLS:
    raise ValueError(f"edit_tool: {edit_tool!r} is not one of {EDIT_TOOLS}.")
  test = task.repo.test_paths[0]
  chain = _chain(task)
  calls: list[tuple[str, dict]] = [("run", {"path": test})]
  if kind == "direct":
    calls += [("view", {"path": path}) for path, _, _ in chain]
    calls += [_fix(task, edit_tool), ("run", {"path": test})]
  elif kind == "probing":
    calls = [("list_files", {}), *calls]
    calls.append(("search", {"text": "def summary("}))
    xs = task.metadata["failing_input"]
    for level, (path, _, function) in enumerate(chain):
      calls.append(("view", {"path": path}))
      if level + 1 < len(chain):
        _, module, below = chain[level + 1]
        package, name = module.split(".")
        probe = f"from {package} import {name}\nprint({name}.{below}({xs!r}))\n"
        tool = "create" if level == 0 else "edit"
        if tool == "create":
          calls.append(("create", {"path": PROBE_PATH, "content": probe}))
        else:
          calls.append(("delete", {"path": PROBE_PATH}))
          calls.append(("create", {"path": PROBE_PATH, "content": probe}))
        calls.append(("run", {"path": PROBE_PATH}))
      elif rng.random() < 0.5:
        calls.append(("search", {"text": f"def {function}("}))
    calls += [_fix(task, edit_tool), ("run", {"path": test})]
    if len(chain) > 1:
      calls.append(("delete", {"path": PROBE_PATH}))
    calls.append(
      ("run", {"path": "cli.py", "stdin": " ".join(map(str, xs)) + "\n"})
    )
  elif kind == "give_up":
    shown = chain[: rng.randint(1, len(chain))]
    calls += [("view", {"path": path}) for path, _, _ in shown]
  elif kind == "weakened_test":
    source = task.repo.start[test]
    lines = source.split("\n")
    # The first failing assertion; two tests may expect the same value, so
    # the edit takes the context that makes its search text unique.
    at = next(i for i, ln in enumerate(lines) if "assert got ==" in ln)
    weakened = "\n".join([*lines[:at], "    assert True", *lines[at + 1 :]])
    edit = _change(edit_tool, source, weakened, test)
    calls += [("view", {"path": test}), edit, ("run", {"path": test})]
  else:
    raise ValueError(f"kind: {kind!r} is not one of {PLAN_KINDS}.")
  calls.append(("submit", {}))
  return RepoPlan(task.task_id, kind, tuple(calls))


DEFAULT_WEIGHTS = {
  "direct": 0.4,
  "probing": 0.4,
  "give_up": 0.1,
  "weakened_test": 0.1,
}


def plans_for(
  tasks: Sequence[schema.Task],
  seed: int,
  weights: dict[str, float] | None = None,
  edit_tool: str = "edit",
) -> list[RepoPlan]:
  """One plan per task, its kind drawn by `weights` (deterministic in seed).

  Files are changed with `edit_tool` (`EDIT_TOOLS`).
  """
  weights = weights or DEFAULT_WEIGHTS
  unknown = sorted(set(weights) - set(PLAN_KINDS))
  if unknown:
    raise ValueError(f"weights: unknown kinds {unknown}; known {PLAN_KINDS}.")
  rng = random.Random(seed)
  kinds, probs = zip(*sorted(weights.items()), strict=True)
  return [plan(t, rng.choices(kinds, probs)[0], rng, edit_tool) for t in tasks]
