"""`RepoEnv`: episodes of tool calls on a repository task's workspace.

  env = repo_env.RepoEnv(pool, fmt, code_env.EnvConfig(...))
  state = env.reset(task)                       # a repo task
  state, step = env.step(state, '<run>view inventory/stock.py</run>')
  state, step = env.step(state, '<run>run test_stock.py</run>')
  state, step = env.step(state, '<submit>fix restock</submit>')
  step.outcome.suite_a, step.outcome.suite_b

The workspace lives on the host, in the episode's state: view, list,
search, edit, create and delete are pure text operations on it
(`envs/repo_tools.call`); `run` ships the current workspace into a fresh
sandbox job (`jobs.Job.workspace_program`), so nothing persists inside the
sandbox between jobs; `submit` grades the change on clean copies of the
task's tests (`tasks/repo_judge`) and ends the episode.

A turn is written in the policy's own format: for the byte protocol
(`chat.ByteProtocolFormat`) a command in a `<run>` block
(`envs/repo_commands`), `<submit>summary</submit>` to submit; for a chat
template, one JSON tool call as the template's model writes it
(`repo_tools.parse_json_call`; the format should be built with
`tools=repo_tools.TOOLS` so the prompt lists them). Anything malformed is
an observation that says what was wrong, never an exception.

Budgets are `code_env.EnvConfig`'s, checked as `CodeEnv` checks them; the
workspace's size is bounded by the task's `workspace.Limits` (an edit past
them is refused with an observation). Observations are capped at
`obs_max_bytes` UTF-8 bytes and encoded as untrusted text, as today.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import concurrent.futures
import dataclasses
import operator
import re
import time
from typing import Any

from codeagent_rl import status as status_lib
from codeagent_rl.envs import code_env
from codeagent_rl.envs import protocol
from codeagent_rl.envs import repo_commands
from codeagent_rl.envs import repo_tools
from codeagent_rl.models import chat
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.sandbox import jobs
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import repo_judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import workspace as ws_lib

TAGS = "tags"
JSON = "json"
# The system text of each tool syntax (trusted: the byte protocol's tags
# in it are its tokens).
REMINDER = {
  # Short: a byte model reads every prompt byte; the demonstrations teach
  # the commands' forms (envs/repo_commands.py).
  TAGS: (
    f"One command per turn in {protocol.RUN}{protocol.RUN_END}: view, "
    "list_files, search, edit, replace_lines, create, delete, run. Finish"
    " with "
    f"{protocol.SUBMIT}{protocol.SUBMIT_END}.\n"
  ),
  JSON: (
    "Fix the repository with the tools: one tool call per turn; call"
    " submit when the change is done.\n"
  ),
}
# A job's scratch directory in a traceback (`<root>/<16 hex digits>/`):
# shown relative to the workspace, as the agent knows the files.
# A submission needs no text in the byte protocol: the workspace is it.
_EMPTY_SUBMIT = "empty code in the submit block"
_SCRATCH = re.compile(r"(?:/[^\s\"'/]+)*/[0-9a-f]{16}/")


@dataclasses.dataclass(frozen=True)
class ToolCall:
  """A parsed turn: one tool's name and arguments (checked when called)."""

  name: str
  arguments: dict


@dataclasses.dataclass(frozen=True)
class RepoState(code_env.EpisodeState):
  """An episode so far, with the workspace as the agent left it.

  Attributes:
    workspace: the agent's current workspace.
    graded: at a submission, the graded copy (what was restored and
      removed); None otherwise or when the change did not fit.
    system: the prompt's system text (the tool syntax's reminder).
  """

  workspace: ws_lib.Workspace | None = None
  graded: ws_lib.GradedCopy | None = None
  system: str = ""

  @property
  def prompt_parts(self) -> tuple[str, str]:
    """(system, user) text of the prompt, as `prompt_ids` rendered them."""
    return self.system, task_text(self.task)

  @property
  def final_code(self) -> str | None:
    """None: a repo episode submits a workspace (`workspace`), not code."""
    return None

  @property
  def submitted_text(self) -> str | None:
    """The submitted change as text (`change_text`), if it was submitted."""
    if self.stop_reason != code_env.STOP_SUBMIT or self.workspace is None:
      return None
    return change_text(self.task.repo.start, self.workspace)


def change_text(start: ws_lib.Workspace, workspace: ws_lib.Workspace) -> str:
  """The files `workspace` changed or added against `start`, as one text.

  Each as a `# path` line and its text, in path order; a deleted file as
  `# path (deleted)`. What stage 1 reads of a repo episode's submission.
  """
  parts = []
  for path in sorted(set(start) | set(workspace)):
    if path not in workspace:
      parts.append(f"# {path} (deleted)\n")
    elif start.get(path) != workspace[path]:
      parts.append(f"# {path}\n{workspace[path]}")
  return "".join(parts)


@dataclasses.dataclass(frozen=True)
class _Pending:
  state: RepoState
  action_text: str
  num_tokens: int
  action: ToolCall | protocol.FormatError
  tool: repo_tools.ToolResult | None = None
  job: jobs.Job | None = None
  future: concurrent.futures.Future | None = None
  grading: repo_judge.PendingGrade | None = None
  stop: str | None = None
  skip: str | None = None
  action_ended: bool = True


def task_text(task: schema.Task) -> str:
  """The untrusted part of the prompt: the issue, the files, the tests."""
  lines = [task.prompt.strip(), "", "Files:", *task.repo.start]
  if task.repo.test_paths:
    lines += ["", "Tests: " + " ".join(task.repo.test_paths)]
  return "\n".join(lines) + "\n"


def _nbytes(text: str) -> int:
  return len(text.encode("utf-8", "replace"))


def _head(text: str, budget: int, name: str) -> str:
  """`text`, or its start and a marker, within `budget` bytes."""
  if _nbytes(text) <= budget:
    return text
  marker = f"\n[{name} cut: {_nbytes(text)} bytes]"
  return protocol.cut_bytes(text, budget - _nbytes(marker)) + marker


def _tail(text: str, budget: int, name: str) -> str:
  """`text`, or a marker and its end, within `budget` bytes."""
  data = text.encode("utf-8", "replace")
  if len(data) <= budget:
    return text
  marker = f"[{name} cut: {len(data)} bytes]\n"
  keep = max(budget - _nbytes(marker), 0)
  return marker + data[len(data) - keep :].decode("utf-8", "ignore")


def render_run(path: str, result: jobs.JobResult, max_bytes: int) -> str:
  """A run's observation: its status, stderr's end, stdout's start.

  Within `max_bytes` UTF-8 bytes: stderr (whose end is a traceback's
  point) gets at least half of what the status line leaves, stdout the
  rest; a cut part says how long it was. Paths of the job's scratch
  directory are shown relative to the workspace.
  """
  test = result.tests[0] if result.tests else None
  exited = (status_lib.JobStatus.OK, status_lib.JobStatus.CRASH)
  if result.status in exited and test and test.exit_code is not None:
    head = f"run {path}: exit code {test.exit_code}"
  else:
    head = f"run {path}: {jobs.status_name(result.status)}"
    reason = protocol.first_line(result.reason)
    head += f" ({reason})" if reason else ""
  head = protocol.cut_bytes(head, protocol.LINE_MAX_BYTES)
  stderr = _SCRATCH.sub("", result.stderr.rstrip("\n"))
  stdout = "" if test is None else (test.stdout or "")
  room = max_bytes - _nbytes(head)
  room -= (_nbytes("\nstderr:\n") if stderr else 0) + (
    _nbytes("\nstdout:\n") if stdout else 0
  )
  err_budget = min(_nbytes(stderr), max(room // 2, room - _nbytes(stdout)))
  text = head
  if stderr:
    text += "\nstderr:\n" + _tail(stderr, err_budget, "stderr")
  if stdout:
    left = max_bytes - _nbytes(text) - _nbytes("\nstdout:\n")
    text += "\nstdout:\n" + _head(stdout, left, "stdout")
  return protocol.cut_bytes(text, max_bytes)


class RepoEnv:
  """The repository environment; holds no episode state itself.

  Attributes:
    pool: runs the jobs (`submit(job) -> Future`, `config.timeout_s`).
    format: the policy's conversation format.
    syntax: "tags" (the byte protocol's commands) or "json" (tool calls).
    config: the budgets (`code_env.EnvConfig`).
    judge_config: float tolerance of the judge.
    pre_submit: called as pre_submit(state, change) before a submission
      is graded (`change`: `change_text` of the workspace); a non-empty
      string it returns is the reason not to grade it (the episode ends
      with `Outcome.not_executed(reason)`).
  """

  def __init__(
    self,
    pool: Any,
    fmt: chat.ConversationFormat | tokenizer_lib.Tokenizer,
    config: code_env.EnvConfig,
    judge_config: judge.JudgeConfig | None = None,
    clock: Callable[[], float] = time.monotonic,
    sandbox_retries: int = 1,
    pre_submit: Callable[[RepoState, str], str | None] | None = None,
  ):
    """Binds the pool, format and budgets (see `code_env.CodeEnv`)."""
    self.pool = pool
    if isinstance(fmt, tokenizer_lib.Tokenizer):
      fmt = chat.ByteProtocolFormat(fmt)
    self.format = fmt
    self.syntax = TAGS if isinstance(fmt, chat.ByteProtocolFormat) else JSON
    self.config = config
    self.judge_config = judge_config or judge.JudgeConfig()
    self._clock = clock
    self._retries = sandbox_retries
    self.pre_submit = pre_submit

  def reset(self, task: schema.Task) -> RepoState:
    """Starts an episode on a repo task; the wall-time budget starts now.

    Raises:
      ValueError: the task is not a repo task.
    """
    start = task.repo.start
    text = task_text(task)
    ids = tuple(self.format.prompt_ids(REMINDER[self.syntax], text))
    return RepoState(
      task=task,
      prompt_text=text + REMINDER[self.syntax],
      prompt_ids=ids,
      started_at=self._clock(),
      num_tokens=len(ids),
      workspace=start,
      system=REMINDER[self.syntax],
    )

  def parse(self, text: str) -> ToolCall | protocol.FormatError:
    """A turn's tool call, or why it is not one (never raises)."""
    if self.syntax == JSON:
      try:
        return ToolCall(*repo_tools.parse_json_call(text))
      except ws_lib.WorkspaceError as e:
        return protocol.FormatError(str(e))
    action = protocol.parse_action(text)
    if isinstance(action, protocol.Submit) or (
      isinstance(action, protocol.FormatError)
      and action.reason == _EMPTY_SUBMIT
    ):
      return ToolCall("submit", {})
    if isinstance(action, protocol.FormatError):
      return action
    try:
      return ToolCall(*repo_commands.parse_tag_call(action.code))
    except ws_lib.WorkspaceError as e:
      return protocol.FormatError(str(e))

  def step(
    self, state: RepoState, action_text: str, num_tokens: int | None = None
  ) -> tuple[RepoState, code_env.StepResult]:
    """Takes one turn (see `step_many`)."""
    counts = None if num_tokens is None else [num_tokens]
    return self.step_many([state], [action_text], counts)[0]

  def step_many(
    self,
    states: Sequence[RepoState],
    action_texts: Sequence[str],
    num_tokens: Sequence[int] | None = None,
    action_ended: Sequence[bool] | None = None,
  ) -> list[tuple[RepoState, code_env.StepResult]]:
    """Takes one turn in each episode; their sandbox jobs run concurrently.

    Arguments and errors as `code_env.CodeEnv.step_many`.
    """
    if len(states) != len(action_texts):
      raise ValueError(
        f"{len(states)} states but {len(action_texts)} action texts."
      )
    for name, values in (("counts", num_tokens), ("flags", action_ended)):
      if values is not None and len(values) != len(states):
        raise ValueError(f"{len(states)} states but {len(values)} {name}.")
    pending = [
      self._begin(
        s,
        a,
        None if num_tokens is None else num_tokens[i],
        True if action_ended is None else bool(action_ended[i]),
      )
      for i, (s, a) in enumerate(zip(states, action_texts, strict=True))
    ]
    return [self._finish(p) for p in pending]

  def cut(
    self, state: RepoState, reason: str = code_env.STOP_ADAPTIVE
  ) -> RepoState:
    """Ends an open episode between turns as truncated (`CodeEnv.cut`)."""
    if state.done:
      raise ValueError(
        f"cut on a finished episode (task {state.task.task_id!r}, stopped"
        f" by {state.stop_reason})."
      )
    if reason not in code_env.STOP_REASONS or reason == code_env.STOP_SUBMIT:
      raise ValueError(f"cut reason {reason!r}: not a truncation reason.")
    return dataclasses.replace(
      state,
      done=True,
      truncated=True,
      stop_reason=reason,
      outcome=code_env.Outcome.not_executed(),
    )

  def _elapsed(self, state: RepoState) -> float:
    return self._clock() - state.started_at

  def _budget_stop(self, state: RepoState, n: int, malformed: bool):
    cfg, total = self.config, state.num_tokens + n
    if n > cfg.max_tokens_per_turn or (
      malformed and n >= cfg.max_tokens_per_turn
    ):
      return code_env.STOP_MAX_TOKENS_PER_TURN
    if total > cfg.max_total_tokens or (
      malformed and total >= cfg.max_total_tokens
    ):
      return code_env.STOP_MAX_TOTAL_TOKENS
    if self._elapsed(state) > cfg.max_wall_s:
      return code_env.STOP_MAX_WALL_S
    return None

  def _begin(self, state, text, num_tokens, action_ended) -> _Pending:
    """Parses a turn, checks the budgets and starts its sandbox work."""
    if state.done:
      raise ValueError(
        f"step on a finished episode (task {state.task.task_id!r},"
        f" stopped by {state.stop_reason})."
      )
    if num_tokens is None:
      n = len(self.format.encode_action(text))
    else:
      n = operator.index(num_tokens)
      if n < 0:
        raise ValueError(f"num_tokens={n}: must be >= 0.")
    action = self.parse(text)
    malformed = isinstance(action, protocol.FormatError)
    p = _Pending(state, text, n, action, action_ended=action_ended)
    stop = self._budget_stop(state, n, malformed)
    if stop is not None or malformed:
      return dataclasses.replace(p, stop=stop)
    tool = repo_tools.call(state.workspace, action.name, action.arguments)
    p = dataclasses.replace(p, tool=tool)
    if tool.request == "run":
      left = self.config.max_wall_s - self._elapsed(state)
      limit = self.pool.config.timeout_s
      job = jobs.Job.workspace_program(
        tuple(state.workspace.items()),
        tool.arguments["path"],
        [tool.arguments.get("stdin", "")],
        timeout_s=max(left, 0.01) if left < limit else None,
      )
      return dataclasses.replace(p, job=job, future=self.pool.submit(job))
    if tool.request == "submit":
      if self.pre_submit is not None:
        change = change_text(state.task.repo.start, state.workspace)
        skip = self.pre_submit(state, change) or None
        if skip is not None:
          return dataclasses.replace(p, skip=skip)
      grading = repo_judge.PendingGrade(
        self.pool, state.task, state.workspace, self.judge_config
      )
      return dataclasses.replace(p, grading=grading)
    return p

  def _finish(self, p: _Pending) -> tuple[RepoState, code_env.StepResult]:
    """Turns a pending turn and its sandbox work into the new state."""
    state, cfg = p.state, self.config
    obs, outcome, stop, result, graded = None, None, p.stop, None, None
    workspace = state.workspace
    if stop is None:
      if isinstance(p.action, protocol.FormatError):
        obs = f"format error: {p.action.reason}"
      elif p.future is not None:
        result = code_env.await_result(
          self.pool, p.job, p.future, self._retries
        )
        obs = render_run(p.tool.arguments["path"], result, cfg.obs_max_bytes)
      elif p.skip is not None:
        outcome = code_env.Outcome.not_executed(p.skip)
        stop = code_env.STOP_SUBMIT
      elif p.grading is not None:
        grade, graded = p.grading.result(self._retries)
        outcome = code_env.Outcome.from_grade(grade)
        stop, result = code_env.STOP_SUBMIT, grade.result
      else:
        obs, workspace = p.tool.observation, p.tool.workspace
    observation = None
    obs_ids = ()
    if obs is not None:
      observation = protocol.Observation(
        protocol.cut_bytes(obs, cfg.obs_max_bytes)
      )
      obs_ids = tuple(
        self.format.observation_ids(
          observation.body, action_ended=p.action_ended
        )
      )
    turn = code_env.Turn(p.action_text, p.action, p.num_tokens, observation)
    turn = dataclasses.replace(turn, result=result)
    turns = (*state.turns, turn)
    num_tokens = state.num_tokens + p.num_tokens + len(obs_ids)
    if stop is None:
      if len(turns) >= cfg.max_turns:
        stop = code_env.STOP_MAX_TURNS
      elif num_tokens >= cfg.max_total_tokens:
        stop = code_env.STOP_MAX_TOTAL_TOKENS
      elif self._elapsed(state) > cfg.max_wall_s:
        stop = code_env.STOP_MAX_WALL_S
    truncated = stop is not None and stop != code_env.STOP_SUBMIT
    if truncated:
      outcome = code_env.Outcome.not_executed()
    new_state = dataclasses.replace(
      state,
      turns=turns,
      num_tokens=num_tokens,
      done=stop is not None,
      truncated=truncated,
      stop_reason=stop,
      outcome=outcome,
      workspace=workspace,
      graded=graded,
    )
    step = code_env.StepResult(
      action=p.action,
      observation=observation,
      observation_ids=obs_ids,
      done=stop is not None,
      truncated=truncated,
      stop_reason=stop,
      outcome=outcome,
      result=result,
    )
    return new_state, step
