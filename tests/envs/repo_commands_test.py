"""The byte protocol's form of the repository tools."""

import random

import pytest

from codeagent_rl.envs import protocol
from codeagent_rl.envs import repo_commands
from codeagent_rl.envs import repo_tools
from codeagent_rl.tasks import workspace as ws_lib
from tests.helpers import repo_tasks


def _parse_turn(command: str):
  """A command as the policy writes it in a turn, parsed as the env does."""
  action = protocol.parse_action(f"{protocol.RUN}{command}{protocol.RUN_END}")
  assert isinstance(action, protocol.Run), action
  return repo_commands.parse_tag_call(action.code)


EXAMPLES = [
  ("view a.py", ("view", {"path": "a.py"})),
  ("view pkg/a.py 3", ("view", {"path": "pkg/a.py", "start": 3})),
  ("view a.py 3 9", ("view", {"path": "a.py", "start": 3, "end": 9})),
  ("list_files", ("list_files", {})),
  ("list_files pkg", ("list_files", {"folder": "pkg"})),
  ("search def total(", ("search", {"text": "def total("})),
  (
    "search -i  Two Spaces",
    ("search", {"text": " Two Spaces", "ignore_case": True}),
  ),
  ("delete old.py", ("delete", {"path": "old.py"})),
  ("run test_stock.py", ("run", {"path": "test_stock.py"})),
  ("run cli.py\na 1\nb 2", ("run", {"path": "cli.py", "stdin": "a 1\nb 2\n"})),
  (
    "create n.py\nX = 1\n\ndef f():\n  return X",
    (
      "create",
      {"path": "n.py", "content": "X = 1\n\ndef f():\n  return X\n"},
    ),
  ),
  (
    "edit s.py\n<<<<<<< SEARCH\n  return a - b\n=======\n"
    "  return a + b\n>>>>>>> REPLACE",
    (
      "edit",
      {"path": "s.py", "search": "  return a - b", "replace": "  return a + b"},
    ),
  ),
  (
    "edit s.py\n<<<<<<< SEARCH\nx = 1\ny = 2\n=======\n>>>>>>> REPLACE",
    ("edit", {"path": "s.py", "search": "x = 1\ny = 2", "replace": ""}),
  ),
]


@pytest.mark.parametrize(("command", "call"), EXAMPLES)
def test_commands_parse_to_the_json_calls(command, call):
  assert _parse_turn(command) == call
  assert (
    repo_commands.parse_tag_call(repo_commands.format_tag_call(*call)) == call
  )


MALFORMED = [
  ("cat a.py", "unknown command 'cat'"),
  ("submit", "unknown command 'submit'"),
  ("view", "view: wrong number of words"),
  ("view a.py 1 2 3", "wrong number of words"),
  ("view a.py x", "'x' is not a line number"),
  ("view a.py -1", "'-1' is not a line number"),
  ("view a.py 99999999999999", "is not a line number"),
  ("view  a.py", "wrong number of words"),
  ("view a.py\nmore", "view: takes one line"),
  ("search", "search: the text to search for"),
  ("search x\ny", "the text to search for is the rest of the line"),
  ("delete", "delete: wrong number of words"),
  ("edit s.py\nx = 1", "start with <<<<<<< SEARCH"),
  ("edit s.py\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE", "one ======= and one"),
  (
    "edit s.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\ntrailing",
    "must be the last line",
  ),
  (
    "edit s.py\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE\n=======",
    "must be the last line",
  ),
  (
    "edit a b\n<<<<<<< SEARCH\n=======\n>>>>>>> REPLACE",
    "wrong number of words",
  ),
]


@pytest.mark.parametrize(("command", "message"), MALFORMED)
def test_a_malformed_command_says_what_and_how(command, message):
  with pytest.raises(ws_lib.WorkspaceError) as raised:
    _parse_turn(command)
  assert message in str(raised.value)


def test_a_malformed_command_becomes_an_observation_through_the_tools():
  workspace = repo_tasks.task().repo.start
  for command, message in MALFORMED:
    try:
      name, args = _parse_turn(command)
    except ws_lib.WorkspaceError as e:
      observation = f"error: {e}"
    else:
      observation = repo_tools.call(workspace, name, args).observation
    assert observation.startswith("error: ") and message in observation


def test_calls_without_a_command_form_are_refused_when_formatted():
  for name, args in [
    ("view", {"path": "a b.py"}),
    ("view", {"path": "a.py", "end": 3}),
    ("search", {"text": "two\nlines"}),
    ("search", {"text": "-i x"}),
    ("search", {"text": "end space "}),
    ("edit", {"path": "a.py", "search": "=======", "replace": ""}),
    ("create", {"path": "a.py", "content": "no newline"}),
    ("run", {"path": "a.py", "stdin": "x\n\n"}),
    ("run", {"path": "a.py", "stdin": ""}),
    ("submit", {}),
  ]:
    with pytest.raises(ValueError):
      repo_commands.format_tag_call(name, args)


def _random_text(rng, newline_ok=True):
  alphabet = "ab =_()\t#'\"<>{}[]:" + ("\n" if newline_ok else "")
  return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 24)))


def _random_args(rng, name, path):
  if name == "view":
    start = {"start": rng.randrange(1, 50)} if rng.random() < 0.5 else {}
    return {"path": path, **start}
  if name == "list_files":
    return {"folder": "pkg"} if rng.random() < 0.5 else {}
  if name == "search":
    return {"text": _random_text(rng, False).strip() or "x"}
  if name == "edit":
    return {
      "path": path,
      "search": _random_text(rng),
      "replace": _random_text(rng),
    }
  if name == "replace_lines":
    start = rng.randint(1, 40)
    return {
      "path": path,
      "start": start,
      "end": start + rng.randint(0, 5),
      "content": _random_text(rng),
    }
  if name == "create":
    return {"path": path, "content": _random_text(rng)}
  if name == "run":
    return {"path": path, "stdin": _random_text(rng)}
  return {"path": path}


def test_random_calls_round_trip_through_a_turn_or_are_refused():
  rng = random.Random(0)
  made = 0
  for _ in range(3000):
    name = rng.choice(list(repo_commands.USAGE))
    path = rng.choice(["a.py", "pkg/m.py", "a b.py", "t/x_1.py"])
    args = _random_args(rng, name, path)
    try:
      command = repo_commands.format_tag_call(name, args)
    except ValueError:
      continue
    made += 1
    # Inside a turn the protocol trims the block's edges as it does code.
    assert _parse_turn(command) == (name, args), command
  assert made > 1000
