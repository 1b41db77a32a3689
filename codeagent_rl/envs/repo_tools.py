"""The tools of a repository task, as data, and their calls on a workspace.

`TOOLS` describes each tool as a JSON-schema function (name, description,
parameters), the form a chat template's `tools=` argument renders.
`call(workspace, name, arguments)` checks the arguments against that
schema and runs the tool on the host's workspace
(`codeagent_rl/tasks/workspace.py`): a view, a listing or a search gives
text; an edit gives a new workspace; `run` and `submit` are returned as
requests for the environment, which ships the workspace into a fresh
sandbox job. `parse_json_call` reads one JSON tool call as Hugging Face
models write it: Qwen2.5's `<tool_call>{"name": ..., "arguments": ...}
</tool_call>` block, or Llama 3.1's bare `{"name": ..., "parameters":
...}` object.

Nothing a policy writes raises out of here: a malformed call or a refused
edit is a `ToolResult` whose observation says what was wrong.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from codeagent_rl.tasks import workspace as ws_lib

_STRING = {"type": "string"}
_INT = {"type": "integer"}
_BOOL = {"type": "boolean"}


def _tool(name: str, description: str, required: dict, optional: dict):
  return {
    "type": "function",
    "function": {
      "name": name,
      "description": description,
      "parameters": {
        "type": "object",
        "properties": {**required, **optional},
        "required": list(required),
      },
    },
  }


TOOLS = (
  _tool(
    "view",
    "Show a file's lines, numbered; optionally lines start..end.",
    {"path": _STRING},
    {"start": _INT, "end": _INT},
  ),
  _tool(
    "list_files", "List the files under a folder.", {}, {"folder": _STRING}
  ),
  _tool(
    "search",
    "Show every line that contains a literal string.",
    {"text": _STRING},
    {"folder": _STRING, "ignore_case": _BOOL},
  ),
  _tool(
    "edit",
    "Replace the one occurrence of `search` in a file with `replace`.",
    {"path": _STRING, "search": _STRING, "replace": _STRING},
    {},
  ),
  _tool(
    "replace_lines",
    "Replace lines start..end of a file (numbered as view shows them) with"
    " `content`; empty content deletes them.",
    {"path": _STRING, "start": _INT, "end": _INT, "content": _STRING},
    {},
  ),
  _tool(
    "create",
    "Create a new file with the given content.",
    {"path": _STRING, "content": _STRING},
    {},
  ),
  _tool("delete", "Delete a file.", {"path": _STRING}, {}),
  _tool(
    "run",
    "Run a Python file of the workspace (a script or a test) in a fresh"
    " sandbox; shows its output.",
    {"path": _STRING},
    {"stdin": _STRING},
  ),
  _tool("submit", "Submit the workspace as it is for grading.", {}, {}),
)
TOOL_NAMES = tuple(t["function"]["name"] for t in TOOLS)
_SPECS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
_TYPES = {"string": str, "integer": int, "boolean": bool}


@dataclasses.dataclass(frozen=True)
class ToolResult:
  """What one tool call did.

  Attributes:
    workspace: the workspace after the call (the same one unless an edit
      succeeded).
    observation: the text to show the agent ("" for run and submit, whose
      observation the environment makes).
    ok: False when the call was malformed or refused.
    request: "run" or "submit" when the environment has work to do, else
      None.
    arguments: the checked arguments (for a run: path and stdin).
  """

  workspace: ws_lib.Workspace
  observation: str
  ok: bool
  request: str | None = None
  arguments: dict = dataclasses.field(default_factory=dict)


def check_arguments(name: Any, arguments: Any) -> dict:
  """The arguments of a call to tool `name`, checked against its schema.

  Raises:
    ws_lib.WorkspaceError: naming the tool and the argument.
  """
  if not isinstance(name, str) or name not in _SPECS:
    raise ws_lib.WorkspaceError(
      f"unknown tool {name!r:.40}; the tools are {', '.join(TOOL_NAMES)}."
    )
  if not isinstance(arguments, dict):
    raise ws_lib.WorkspaceError(
      f"{name}: arguments must be an object, not {type(arguments).__name__}."
    )
  spec = _SPECS[name]
  unknown = sorted(set(arguments) - set(spec["properties"]), key=str)
  if unknown:
    raise ws_lib.WorkspaceError(
      f"{name}: unknown argument(s) {unknown!r:.80}; it takes"
      f" {sorted(spec['properties'])}."
    )
  missing = [k for k in spec["required"] if k not in arguments]
  if missing:
    raise ws_lib.WorkspaceError(f"{name}: missing argument(s) {missing}.")
  for key, value in arguments.items():
    kind = spec["properties"][key]["type"]
    if type(value) is not _TYPES[kind]:  # bool is no integer here
      raise ws_lib.WorkspaceError(
        f"{name}: {key} must be {'an' if kind == 'integer' else 'a'} {kind},"
        f" got {value!r:.40}."
      )
  return dict(arguments)


# Tools that show text, and tools that give a new workspace.
_SHOWS = {
  "view": lambda ws, a: ws.view(a["path"], a.get("start", 1), a.get("end")),
  "list_files": lambda ws, a: ws.listing(a.get("folder", "")),
  "search": lambda ws, a: ws.search(
    a["text"], a.get("folder", ""), a.get("ignore_case", False)
  ),
}
_EDITS = {
  "edit": lambda ws, a: ws.replace(a["path"], a["search"], a["replace"]),
  "replace_lines": lambda ws, a: ws.replace_lines(
    a["path"], a["start"], a["end"], a["content"]
  ),
  "create": lambda ws, a: ws.create(a["path"], a["content"]),
  "delete": lambda ws, a: ws.delete(a["path"]),
}


def call(workspace: ws_lib.Workspace, name: Any, arguments: Any) -> ToolResult:
  """Runs one tool call on `workspace`; never raises for the policy's input."""
  try:
    args = check_arguments(name, arguments)
    if name in _SHOWS:
      return ToolResult(workspace, _SHOWS[name](workspace, args), True)
    if name in _EDITS:
      edited = _EDITS[name](workspace, args)
      return ToolResult(edited, f"{name}: {args['path']}: done.", True)
    if name == "run":
      workspace.existing(args["path"])
    return ToolResult(workspace, "", True, request=name, arguments=args)
  except ws_lib.WorkspaceError as e:
    return ToolResult(workspace, f"error: {e}", False)


_QWEN_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def json_call_text(name: str, arguments: dict) -> str:
  """A call as Qwen2.5 writes one (for demonstrations).

  `parse_json_call` reads it back as `(name, arguments)`.
  """
  body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
  return f"<tool_call>\n{body}\n</tool_call>"


def parse_json_call(text: str) -> tuple[str, Any]:
  """(name, arguments) of the one JSON tool call in `text`.

  Reads a `<tool_call>...</tool_call>` block (Qwen2.5) or, without one, the
  whole text as a JSON object (Llama 3.1); the arguments are under
  "arguments" or "parameters".

  Raises:
    ws_lib.WorkspaceError: saying what is malformed.
  """
  blocks = _QWEN_CALL.findall(text)
  if len(blocks) > 1:
    raise ws_lib.WorkspaceError(
      f"{len(blocks)} tool calls in one turn; make one call per turn."
    )
  body = blocks[0] if blocks else text.strip()
  try:
    obj = json.loads(body)
  except (ValueError, RecursionError) as e:  # an int of 4,300+ digits too
    msg = getattr(e, "msg", None) or type(e).__name__
    raise ws_lib.WorkspaceError(
      f"the tool call is not valid JSON ({msg}); write"
      ' {"name": ..., "arguments": {...}}.'
    ) from None
  if not isinstance(obj, dict) or "name" not in obj:
    raise ws_lib.WorkspaceError(
      'a tool call is a JSON object {"name": ..., "arguments": {...}}.'
    )
  keys = set(obj) - {"name"}
  if len(keys) > 1 or not keys <= {"arguments", "parameters"}:
    raise ws_lib.WorkspaceError(
      f"a tool call has a name and one of arguments/parameters; got keys"
      f" {sorted(obj)!r:.80}."
    )
  arguments = obj[keys.pop()] if keys else {}
  if isinstance(arguments, str):  # some templates send arguments as JSON text
    try:
      arguments = json.loads(arguments)
    except (ValueError, RecursionError):
      raise ws_lib.WorkspaceError(
        "the tool call's arguments are a string that is not a JSON object."
      ) from None
  return obj["name"], arguments
