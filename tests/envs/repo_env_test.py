"""RepoEnv: scripted repository episodes against a real sandbox pool.

The same episode in both renderings of the tools (the byte protocol's
commands, JSON tool calls in a chat template), budgets, malformed turns,
and the workspace's purity: edits make new workspaces, runs change none.
"""

import concurrent.futures
import dataclasses
import re

import pytest
import transformers

from codeagent_rl import status as status_lib
from codeagent_rl.envs import code_env
from codeagent_rl.envs import protocol
from codeagent_rl.envs import repo_commands
from codeagent_rl.envs import repo_env
from codeagent_rl.envs import repo_tools
from codeagent_rl.models import chat
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.sandbox import jobs
from tests.helpers import envs
from tests.helpers import hf_checkpoints
from tests.helpers import repo_tasks

TOK = tokenizer_lib.ByteTokenizer()
TASK = repo_tasks.task()
FIX = (
  "edit",
  {
    "path": "inventory/stock.py",
    "search": "levels.get(item, 0) - amount",
    "replace": "levels.get(item, 0) + amount",
  },
)
# The scripted episode: look, run the failing test, read, fix, re-run.
SCRIPT = [
  ("list_files", {}),
  ("run", {"path": "test_stock.py"}),
  ("view", {"path": "inventory/stock.py", "start": 1, "end": 4}),
  FIX,
  ("run", {"path": "test_stock.py"}),
  ("run", {"path": "cli.py", "stdin": "a 2\nb 3\n"}),
]


def _tags(name, args) -> str:
  if name == "submit":
    return f"{protocol.SUBMIT}fix restock{protocol.SUBMIT_END}"
  command = repo_commands.format_tag_call(name, args)
  return f"{protocol.RUN}{command}{protocol.RUN_END}"


def _json(name, args) -> str:
  return repo_tools.json_call_text(name, args)


def _env(pool, fmt=TOK, max_turns=20, **changes):
  changes = {"obs_max_bytes": 1000, **changes}
  config = dataclasses.replace(envs.budgets(max_turns), **changes)
  return repo_env.RepoEnv(pool, fmt, config)


def _play(env, state, calls, write):
  steps = []
  for name, args in calls:
    state, step = env.step(state, write(name, args))
    steps.append(step)
  return state, steps


def test_the_scripted_episode_fixes_the_bug_with_commands(module_pool):
  env = _env(module_pool)
  start = env.reset(TASK)
  assert "inventory/stock.py" in start.prompt_text
  assert "Tests: test_stock.py" in start.prompt_text
  state, steps = _play(env, start, SCRIPT, _tags)
  bodies = [s.observation.body for s in steps]
  assert "inventory/stock.py" in bodies[0]
  # The failing test's traceback names the workspace's files as they are
  # named in the workspace, not where the job ran.
  assert bodies[1].startswith("run test_stock.py: exit code 1")
  assert 'File "test_stock.py", line 5, in test_restock' in bodies[1]
  assert bodies[1].endswith("AssertionError")
  assert "levels.get(item, 0) - amount" in bodies[2]
  assert bodies[3] == "edit: inventory/stock.py: done."
  assert bodies[4] == "run test_stock.py: exit code 0\nstdout:\n1 passed\n"
  assert bodies[5].endswith("stdout:\n2 items, 5 units\n")
  # Edits make new workspaces; the episode's start is untouched.
  assert start.workspace == TASK.repo.start
  assert state.workspace["inventory/stock.py"] == repo_tasks.STOCK_FIXED
  for step in steps:
    assert step.observation_ids == tuple(
      protocol.observation_ids(TOK, step.observation)
    )
  state, step = env.step(state, _tags("submit", {}))
  assert step.done and state.stop_reason == code_env.STOP_SUBMIT
  assert step.outcome.suite_a == step.outcome.suite_b == 1.0
  assert state.graded.restored == ()
  assert state.final_code is None
  assert state.submitted_text == (
    f"# inventory/stock.py\n{repo_tasks.STOCK_FIXED}"
  )
  assert state.num_tokens == len(start.prompt_ids) + sum(
    len(TOK.encode(t.action_text))
    + len(protocol.observation_ids(TOK, t.observation))
    for t in state.turns
    if t.observation is not None
  ) + len(TOK.encode(state.turns[-1].action_text))


def test_a_traceback_names_the_workspace_files_as_the_agent_knows_them(
  module_pool,
):
  env = _env(module_pool)
  boom = "from inventory import stock\n\nstock.restock(None, 'a', 1)\n"
  _, steps = _play(
    env,
    env.reset(TASK),
    [
      ("create", {"path": "boom.py", "content": boom}),
      ("run", {"path": "boom.py"}),
    ],
    _tags,
  )
  body = steps[1].observation.body
  assert 'File "boom.py", line 3, in <module>' in body
  assert 'File "inventory/stock.py", line 3, in restock' in body
  assert body.endswith("TypeError: 'NoneType' object is not iterable")
  # Nothing of where the job ran, nor of the harness, shows.
  assert "guest" not in body and "child.py" not in body
  assert not re.search(r"/[0-9a-f]{16}/", body)


def test_submitting_the_start_earns_what_the_bug_earns(module_pool):
  env = _env(module_pool)
  state, step = env.step(
    env.reset(TASK), f"{protocol.SUBMIT}{protocol.SUBMIT_END}"
  )
  assert step.done
  assert step.outcome.suite_a_passed == 1 and step.outcome.suite_a_total == 5


def test_a_weakened_test_file_is_graded_as_the_tasks_own(module_pool):
  env = _env(module_pool)
  state, _ = _play(
    env,
    env.reset(TASK),
    [("create", {"path": "conftest.py", "content": "import os\n"})],
    _tags,
  )
  weaken = (
    "edit",
    {"path": "test_stock.py", "search": "  test_restock()\n", "replace": ""},
  )
  state, steps = _play(env, state, [weaken], _tags)
  assert steps[0].observation.body == "edit: test_stock.py: done."
  state, step = env.step(state, _tags("submit", {}))
  assert state.graded.restored == ("test_stock.py",)
  assert state.graded.removed == ("conftest.py",)
  assert step.outcome.suite_a_passed == 1


MALFORMED = [
  ("no block at all", "format error: no run or submit block"),
  (
    f"{protocol.RUN}cat x{protocol.RUN_END}",
    "format error: unknown command 'cat'",
  ),
  (f"{protocol.RUN}view{protocol.RUN_END}", "format error: view: wrong number"),
  (
    f"{protocol.RUN}view ../etc/passwd{protocol.RUN_END}",
    "error: path '../etc/passwd'",
  ),
  (f"{protocol.RUN}view /etc/passwd{protocol.RUN_END}", "must be relative"),
  (
    f"{protocol.RUN}run nothere.py{protocol.RUN_END}",
    "error: nothere.py: no such file",
  ),
  (
    f"{protocol.RUN}delete ghost.py{protocol.RUN_END}",
    "error: ghost.py: no such file",
  ),
  (
    f"{protocol.RUN}edit cli.py\n<<<<<<< SEARCH\nabsent\n=======\nx\n"
    f">>>>>>> REPLACE{protocol.RUN_END}",
    "error: cli.py",
  ),
  (
    f"{protocol.RUN}create big.py\n{'x = 1' * 7000}{protocol.RUN_END}",
    "bytes, more than the 32768",
  ),
]


@pytest.mark.parametrize(
  ("text", "expected"), MALFORMED, ids=[m[1][:30] for m in MALFORMED]
)
def test_a_malformed_or_refused_turn_is_an_observation(
  module_pool, text, expected
):
  env = _env(module_pool, max_tokens_per_turn=40000, max_total_tokens=80000)
  start = env.reset(TASK)
  state, step = env.step(start, text)
  assert not step.done
  assert expected in step.observation.body
  assert state.workspace == start.workspace


def test_budgets_end_an_episode_as_truncated(module_pool):
  env = _env(module_pool, max_turns=2)
  state, steps = _play(env, env.reset(TASK), SCRIPT[:2], _tags)
  assert steps[-1].done and state.truncated
  assert state.stop_reason == code_env.STOP_MAX_TURNS
  assert state.outcome.status == status_lib.JobStatus.NOT_EXECUTED
  with pytest.raises(ValueError, match="finished episode"):
    env.step(state, _tags("submit", {}))
  env = _env(module_pool, max_tokens_per_turn=10)
  state, step = env.step(env.reset(TASK), _tags(*SCRIPT[2]))
  assert state.stop_reason == code_env.STOP_MAX_TOKENS_PER_TURN
  assert step.observation is None


def test_observations_stay_within_their_budget(module_pool):
  env = _env(module_pool, obs_max_bytes=120)
  noisy = (
    "import sys\nprint('o' * 5000)\n"
    "sys.stderr.write('e' * 5000 + '\\nlast line\\n')\n"
    "raise SystemExit(3)\n"
  )
  state, steps = _play(
    env,
    env.reset(TASK),
    [
      ("create", {"path": "noisy.py", "content": noisy}),
      ("run", {"path": "noisy.py"}),
      ("view", {"path": "inventory/stock.py"}),
    ],
    _tags,
  )
  for step in steps:
    assert len(step.observation.body.encode()) <= 120
  run = steps[1].observation.body
  assert run.startswith("run noisy.py: exit code 3")
  assert "last line" in run and "[stderr cut:" in run


def test_a_run_never_changes_the_workspace_nor_the_next_run(module_pool):
  script = (
    "import os\nopen('made.txt', 'w').write('x')\n"
    "open('inventory/stock.py', 'w').write('broken')\n"
    "print(sorted(os.listdir('.')))\n"
  )
  env = _env(module_pool)
  state, steps = _play(
    env,
    env.reset(TASK),
    [("create", {"path": "w.py", "content": script}), ("run", {"path": "w.py"})]
    * 2,
    _tags,
  )
  assert steps[1].observation.body == steps[3].observation.body
  assert "made.txt" not in state.workspace
  assert "'made.txt'" in steps[1].observation.body
  assert steps[1].observation.body.count("made.txt") == 1
  assert state.workspace["inventory/stock.py"] == repo_tasks.STOCK_BUGGY


def test_pre_submit_can_refuse_to_grade(module_pool):
  seen = []

  def veto(state, summary):
    seen.append((state.workspace, summary))
    return "edits a protected path"

  env = repo_env.RepoEnv(module_pool, TOK, envs.budgets(5), pre_submit=veto)
  state, step = env.step(env.reset(TASK), _tags("submit", {}))
  assert step.outcome.reason == "edits a protected path"
  assert not step.outcome.executed
  assert seen == [(TASK.repo.start, "")]
  state, _ = _play(env, env.reset(TASK), [FIX], _tags)
  env.step(state, _tags("submit", {}))
  assert seen[-1] == (
    state.workspace,
    f"# inventory/stock.py\n{repo_tasks.STOCK_FIXED}",
  )


class FlakyPool:
  """A pool whose first job of each kind hits a sandbox error."""

  def __init__(self, pool):
    self.pool, self.config, self.failed = pool, pool.config, 0

  def submit(self, job):
    if self.failed < 1:
      self.failed += 1
      future = concurrent.futures.Future()
      future.set_result(jobs.sandbox_error_result(job, "boom", 0.0))
      return future
    return self.pool.submit(job)


def test_a_sandbox_error_is_retried(module_pool):
  env = _env(FlakyPool(module_pool))
  state, step = env.step(
    env.reset(TASK), _tags("run", {"path": "test_stock.py"})
  )
  assert step.observation.body.startswith("run test_stock.py: exit code 1")
  env = _env(FlakyPool(module_pool))
  state, step = env.step(env.reset(TASK), _tags("submit", {}))
  assert step.outcome.status != status_lib.JobStatus.SANDBOX_ERROR
  assert step.outcome.suite_a_passed == 1


def test_a_task_that_is_not_a_repo_task_is_refused(module_pool):
  with pytest.raises(ValueError, match="not repo"):
    _env(module_pool).reset(envs.add_task([(1, 1)], []))


# ChatML with a tools block, in the manner of Qwen2.5's template (written
# here, not copied).
TOOLS_TEMPLATE = (
  "{%- if tools %}{{- '<|im_start|>system\\nTools:\\n' }}"
  "{%- for tool in tools %}{{- tool | tojson + '\\n' }}{%- endfor %}"
  "{{- '<|im_end|>\\n' }}{%- endif %}"
  "{%- for message in messages %}"
  "{{- '<|im_start|>' + message.role + '\\n' + message.content"
  " + '<|im_end|>\\n' }}"
  "{%- endfor %}"
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture(scope="module")
def tool_format(tmp_path_factory):
  path = tmp_path_factory.mktemp("tools_ckpt")
  tok = hf_checkpoints.chat_tokenizer()
  tok.chat_template = TOOLS_TEMPLATE
  tok.save_pretrained(path)
  fmt = chat.ChatTemplateFormat.from_checkpoint(
    path, observation_role="tool", tools=repo_tools.TOOLS
  )
  return fmt, transformers.AutoTokenizer.from_pretrained(path)


def test_the_same_episode_with_json_tool_calls(module_pool, tool_format):
  fmt, hf = tool_format
  env = _env(module_pool, fmt, max_tokens_per_turn=2000, max_total_tokens=40000)
  start = env.reset(TASK)
  ids = list(start.prompt_ids)
  actions, observations = [], []
  state = start
  for name, args in [*SCRIPT, ("submit", {})]:
    text = _json(name, args)
    action_ids = [*fmt.encode_action(text), fmt.end_of_turn_id]
    state, step = env.step(state, fmt.action_text(action_ids), len(action_ids))
    ids += action_ids
    actions.append(text)
    if step.observation is not None:
      ids += step.observation_ids
      observations.append(step.observation.body)
  assert state.stop_reason == code_env.STOP_SUBMIT
  assert state.outcome.suite_a == state.outcome.suite_b == 1.0
  assert (
    observations[4] == "run test_stock.py: exit code 0\nstdout:\n1 passed\n"
  )
  # Token in, token out: the stitched ids equal a render of the messages,
  # tools included, by our renderer and by transformers.
  messages = chat.episode_messages(
    fmt,
    repo_env.REMINDER["json"],
    repo_env.task_text(TASK),
    actions,
    observations,
  )
  assert chat.check_episode(fmt, messages, ids, "strict")
  want = hf.apply_chat_template(
    messages, tools=list(repo_tools.TOOLS), tokenize=True
  )
  want = list(want if isinstance(want, list) else want["input_ids"])
  assert want[: len(ids)] == ids


@pytest.mark.parametrize(
  ("text", "expected"),
  [
    ("I will look first.", "not valid JSON"),
    (
      '<tool_call>{"name": "view"}</tool_call>',
      "view: missing argument(s) ['path']",
    ),
    (
      '<tool_call>{"name": "view", "arguments": {"path": 3}}</tool_call>',
      "path must be a string",
    ),
    (
      '<tool_call>{"name": "rm", "arguments": {}}</tool_call>',
      "unknown tool 'rm'",
    ),
    (
      '<tool_call>{"name": "view", "arguments": [1]}</tool_call>',
      "arguments must be an object",
    ),
    (
      "<tool_call>{}</tool_call><tool_call>{}</tool_call>",
      "2 tool calls in one turn",
    ),
  ],
)
def test_a_malformed_json_call_is_an_observation(
  module_pool, tool_format, text, expected
):
  fmt, _ = tool_format
  env = _env(module_pool, fmt, max_tokens_per_turn=2000, max_total_tokens=40000)
  state, step = env.step(env.reset(TASK), text)
  assert not step.done
  assert expected in step.observation.body
