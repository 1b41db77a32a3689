"""The repository tools as a chat template sees them, and their calls.

Each call is checked against the tool's JSON schema; a malformed call, a
JSON tool call that cannot be read or a refused edit is an observation,
never an exception, whatever the policy wrote.
"""

import json
import random

import pytest

from codeagent_rl.envs import repo_tools
from codeagent_rl.tasks import workspace as ws_lib

FILES = {
  "calc/ops.py": "def add(a, b):\n  return a - b\n",
  "main.py": "from calc import ops\nprint(ops.add(1, 2))\n",
}


def _ws():
  return ws_lib.Workspace(FILES)


def test_every_tool_is_a_json_schema_function():
  assert repo_tools.TOOL_NAMES == (
    "view",
    "list_files",
    "search",
    "edit",
    "replace_lines",
    "create",
    "delete",
    "run",
    "submit",
  )
  for tool in repo_tools.TOOLS:
    fn = tool["function"]
    assert tool["type"] == "function" and fn["description"]
    params = fn["parameters"]
    assert params["type"] == "object"
    assert set(params["required"]) <= set(params["properties"])
    assert {p["type"] for p in params["properties"].values()} <= {
      "string",
      "integer",
      "boolean",
    }
  json.dumps(repo_tools.TOOLS)  # what a template's tools= receives


def test_calls_view_search_and_edit_the_workspace():
  ws = _ws()
  out = repo_tools.call(ws, "view", {"path": "calc/ops.py", "start": 2})
  assert out.ok and out.observation == "2|   return a - b"
  assert out.workspace is ws and out.request is None
  out = repo_tools.call(ws, "search", {"text": "ops.add"})
  assert out.observation == "main.py:2: print(ops.add(1, 2))"
  out = repo_tools.call(ws, "list_files", {})
  assert out.observation.splitlines() == [
    "calc/ops.py (2 lines)",
    "main.py (2 lines)",
  ]
  fixed = repo_tools.call(
    ws,
    "edit",
    {"path": "calc/ops.py", "search": "a - b", "replace": "a + b"},
  )
  assert fixed.ok and fixed.observation == "edit: calc/ops.py: done."
  assert "a + b" in fixed.workspace["calc/ops.py"]
  assert ws["calc/ops.py"] == FILES["calc/ops.py"]
  made = repo_tools.call(ws, "create", {"path": "t.py", "content": "x\n"})
  assert made.workspace["t.py"] == "x\n"
  gone = repo_tools.call(made.workspace, "delete", {"path": "t.py"})
  assert gone.workspace == ws


def test_run_and_submit_are_requests_for_the_environment():
  ws = _ws()
  run = repo_tools.call(ws, "run", {"path": "main.py", "stdin": "1\n"})
  assert (run.ok, run.request, run.arguments) == (
    True,
    "run",
    {"path": "main.py", "stdin": "1\n"},
  )
  assert run.workspace is ws
  submit = repo_tools.call(ws, "submit", {})
  assert (submit.ok, submit.request) == (True, "submit")
  missing = repo_tools.call(ws, "run", {"path": "nope.py"})
  assert not missing.ok and missing.request is None
  assert missing.observation == "error: nope.py: no such file."


@pytest.mark.parametrize(
  "name, arguments, message",
  [
    ("rm", {}, "unknown tool 'rm'; the tools are view, list_files"),
    (None, {}, "unknown tool None"),
    ("view", [], "view: arguments must be an object, not list"),
    ("view", {}, "view: missing argument(s) ['path']"),
    ("view", {"path": "main.py", "lines": 3}, "unknown argument(s) ['lines']"),
    ("view", {"path": "main.py", "start": "2"}, "start must be an integer"),
    ("view", {"path": "main.py", "start": True}, "start must be an integer"),
    ("view", {"path": 3}, "path must be a string, got 3"),
    (
      "search",
      {"text": "x", "ignore_case": 1},
      "ignore_case must be a boolean",
    ),
    ("edit", {"path": "main.py", "search": "zz", "replace": ""}, "not in the"),
    ("create", {"path": "../x.py", "content": ""}, "'..'"),
    ("delete", {"path": "/etc/passwd"}, "not absolute"),
    ("run", {"path": "../main.py"}, "'..'"),
  ],
)
def test_a_malformed_or_refused_call_is_an_observation(
  name, arguments, message
):
  ws = _ws()
  out = repo_tools.call(ws, name, arguments)
  assert not out.ok and out.workspace is ws and out.request is None
  assert out.observation.startswith("error: ")
  assert message in out.observation, out.observation


def test_json_tool_calls_in_qwen_and_llama_form():
  qwen = (
    "I will look.\n<tool_call>\n"
    '{"name": "view", "arguments": {"path": "main.py"}}\n</tool_call>'
  )
  assert repo_tools.parse_json_call(qwen) == ("view", {"path": "main.py"})
  llama = '{"name": "search", "parameters": {"text": "add"}}'
  assert repo_tools.parse_json_call(llama) == ("search", {"text": "add"})
  text_args = '{"name": "run", "arguments": "{\\"path\\": \\"main.py\\"}"}'
  assert repo_tools.parse_json_call(text_args) == ("run", {"path": "main.py"})
  assert repo_tools.parse_json_call('{"name": "submit"}') == ("submit", {})


@pytest.mark.parametrize(
  "text, message",
  [
    ("<tool_call>{</tool_call>", "not valid JSON"),
    ("view main.py", "not valid JSON"),
    ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
    ('{"name": "view", "arguments": {"start": ' + "9" * 5000 + "}}", "JSON"),
    ('["view"]', "a tool call is a JSON object"),
    ('{"arguments": {}}', "a tool call is a JSON object"),
    ('{"name": "x", "arguments": {}, "parameters": {}}', "one of arguments"),
    ('{"name": "x", "args": {}}', "one of arguments"),
    ('{"name": "x", "arguments": "{oops"}', "not a JSON object"),
    ("<tool_call>{}</tool_call><tool_call>{}</tool_call>", "2 tool calls"),
  ],
)
def test_an_unreadable_json_call_says_what_is_wrong(text, message):
  with pytest.raises(ws_lib.WorkspaceError, match=None) as e:
    repo_tools.parse_json_call(text)
  assert message in str(e.value), str(e.value)


def test_any_call_a_policy_writes_is_answered():
  rng = random.Random(0)
  values = [
    None,
    True,
    0,
    -1,
    2,
    10**30,
    1.5,
    "",
    "main.py",
    "calc/ops.py",
    "..",
    "a - b",
    "\x00",
    [],
    {},
    {"path": "main.py"},
  ]
  keys = ["path", "start", "end", "text", "folder", "search", "replace"]
  keys += ["content", "stdin", "ignore_case", "x"]
  ws, answered = _ws(), {True: 0, False: 0}
  for _ in range(3000):
    name = rng.choice([*repo_tools.TOOL_NAMES, "nope", 3, None])
    if rng.random() < 0.1:
      arguments = rng.choice(values)
    else:
      arguments = {
        rng.choice(keys): rng.choice(values) for _ in range(rng.randrange(4))
      }
    out = repo_tools.call(ws, name, arguments)
    answered[out.ok] += 1
    assert isinstance(out.observation, str)
    assert out.ok or out.observation.startswith("error: ")
    ws = out.workspace
  assert answered[True] > 50 and answered[False] > 1000
