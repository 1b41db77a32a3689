"""`CodeEnv`: episodes of run / submit turns against a sandbox pool.

  env = code_env.CodeEnv(pool, fmt, code_env.EnvConfig(...))
  state = env.reset(task)                      # state.prompt_ids for the policy
  state, step = env.step(state, "<run>def add(a, b): ...</run>")
  step.observation_ids                         # append to the trajectory
  state, step = env.step(state, "<submit>...</submit>")
  step.outcome.suite_a, step.outcome.suite_b   # -> types.Rewards (rewards())

`step_many` does the same for many episodes at once: it parses every action,
sends all their sandbox jobs to the pool (`pool.submit`), then waits, so the
jobs of a batch run concurrently.

A `<run>` executes the code on the task's visible tests (on a single run as
a program, with empty stdin, when the task has none) and the host judges
the outputs; a `<submit>` runs it on the inputs of suites A and B in one job
and ends the episode. Expected values never enter a job (`judge.tests_job`).
A sandbox error (the sandbox failed, not the code) is retried
`sandbox_retries` times.

Budgets (`EnvConfig`), checked in this order before a turn is executed:
a turn over `max_tokens_per_turn` tokens, or a malformed one that reached
it (its generation was cut); the trajectory (prompt, actions, observations)
over `max_total_tokens`, or a malformed turn that reached it; more than
`max_wall_s` since `reset`. After an executed turn that did not submit:
`max_turns` turns taken (format errors count), `max_total_tokens` reached,
`max_wall_s` passed. Hitting one ends the episode as truncated, with the
budget's name as `stop_reason`; the observation of a turn that was executed
is still returned. A `<run>`'s job never gets more time than the wall budget
has left; a `<submit>` gets the pool's full limit, so its reward does not
depend on how much time is left.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import concurrent.futures
import dataclasses
import operator
import time
from typing import Any

from codeagent_rl import types
from codeagent_rl.envs import protocol
from codeagent_rl.models import chat
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.sandbox import jobs
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import probes
from codeagent_rl.tasks import schema

# Why an episode stopped (`EpisodeState.stop_reason`).
STOP_SUBMIT = "submit"
STOP_MAX_TURNS = "max_turns"
STOP_MAX_TOKENS_PER_TURN = "max_tokens_per_turn"
STOP_MAX_TOTAL_TOKENS = "max_total_tokens"
STOP_MAX_WALL_S = "max_wall_s"
# Ended by the rollout, not a budget of the environment (`CodeEnv.cut`):
# the critic judged the rest of the episode predictable.
STOP_ADAPTIVE = "adaptive_truncation"
STOP_REASONS = (
  STOP_SUBMIT,
  STOP_MAX_TURNS,
  STOP_MAX_TOKENS_PER_TURN,
  STOP_MAX_TOTAL_TOKENS,
  STOP_MAX_WALL_S,
  STOP_ADAPTIVE,
)
# Smallest observation budget: room for the test lines and an error line.
MIN_OBS_MAX_BYTES = 64


@dataclasses.dataclass(frozen=True)
class EnvConfig:
  """The validated `config.env` section (defaults live in the config).

  Attributes:
    max_turns: turns per episode (format errors count).
    max_tokens_per_turn: tokens of one policy turn.
    max_total_tokens: tokens of the whole trajectory: prompt, actions and
      observations.
    max_wall_s: wall-clock seconds from `reset` to the last action.
    obs_max_bytes: cap on an observation's body, in UTF-8 bytes.
    render_check: how each finished episode's ids are compared with a full
      render of its messages (`chat.check_episode`): "strict" (equal ids),
      "ignore_whitespace" (equal text but whitespace), or "off".
  """

  max_turns: int
  max_tokens_per_turn: int
  max_total_tokens: int
  max_wall_s: float
  obs_max_bytes: int
  render_check: str = "strict"

  def __post_init__(self):
    for name in ("max_turns", "max_tokens_per_turn", "max_total_tokens"):
      value = getattr(self, name)
      if type(value) is not int or value < 1:
        raise ValueError(f"env.{name}={value!r}: must be an integer >= 1.")
    wall = self.max_wall_s
    if type(wall) not in (int, float) or not 0 < wall < float("inf"):
      raise ValueError(
        f"env.max_wall_s={wall!r}: must be a finite number of seconds > 0."
      )
    obs = self.obs_max_bytes
    if type(obs) is not int or obs < MIN_OBS_MAX_BYTES:
      raise ValueError(
        f"env.obs_max_bytes={obs!r}: must be an integer >= {MIN_OBS_MAX_BYTES}."
      )
    checks = (*chat.CHECK_MODES, "off")
    if self.render_check not in checks:
      raise ValueError(
        f"env.render_check={self.render_check!r}: expected one of {checks}."
      )
    if self.max_tokens_per_turn > self.max_total_tokens:
      raise ValueError(
        f"env.max_tokens_per_turn={self.max_tokens_per_turn}: must be <="
        f" env.max_total_tokens={self.max_total_tokens}."
      )


@dataclasses.dataclass(frozen=True)
class Outcome:
  """What an episode earned: the fields of `types.Rewards` before anti-cheat.

  Attributes:
    status: the submission job's status; `NOT_EXECUTED` without a submission.
    executed: True when the submission ran (not for sandbox errors).
    suite_a_passed: tests of suite A (hidden) passed.
    suite_a_total: tests in suite A.
    suite_b_passed: tests of suite B (held out) passed.
    suite_b_total: tests in suite B.
    suite_gen_passed: tests generated from the reference passed.
    suite_gen_total: tests generated from the reference (0: none).
    grade: the judge's full grade (None without a submission).
    reason: why a submission was not executed ("" otherwise).
  """

  status: types.JobStatus
  executed: bool
  suite_a_passed: int = 0
  suite_a_total: int = 0
  suite_b_passed: int = 0
  suite_b_total: int = 0
  suite_gen_passed: int = 0
  suite_gen_total: int = 0
  grade: judge.Grade | None = None
  reason: str = ""

  @property
  def suite_a(self) -> float:
    """Pass fraction of suite A (0 when empty)."""
    return _fraction(self.suite_a_passed, self.suite_a_total)

  @property
  def suite_b(self) -> float:
    """Pass fraction of suite B (0 when empty)."""
    return _fraction(self.suite_b_passed, self.suite_b_total)

  @property
  def suite_gen(self) -> float:
    """Pass fraction of the generated suite (1 when the task has none)."""
    if not self.suite_gen_total:
      return 1.0
    return self.suite_gen_passed / self.suite_gen_total

  @classmethod
  def not_executed(cls, reason: str = "") -> Outcome:
    """The outcome of an episode whose submission did not run (or of none)."""
    return cls(
      status=types.JobStatus.NOT_EXECUTED, executed=False, reason=reason
    )

  @classmethod
  def from_grade(cls, grade: judge.Grade) -> Outcome:
    """The outcome of a judged submission."""
    return cls(
      status=types.JobStatus(grade.status),
      executed=grade.status != types.JobStatus.SANDBOX_ERROR,
      suite_a_passed=grade.suite_a.passed,
      suite_a_total=grade.suite_a.total,
      suite_b_passed=grade.suite_b.passed,
      suite_b_total=grade.suite_b.total,
      suite_gen_passed=grade.suite_gen.passed,
      suite_gen_total=grade.suite_gen.total,
      grade=grade,
    )


def _fraction(passed: int, total: int) -> float:
  return passed / total if total else 0.0


def rewards(outcomes: Sequence[Outcome], num_flags: int = 0) -> types.Rewards:
  """The `types.Rewards` ([B] = len(outcomes)) before anti-cheat.

  Args:
    outcomes: one per episode.
    num_flags: F, the number of stage-1 rule flags.

  Returns:
    `Rewards.from_suites(...)`: total is the suite A pass fraction.
  """
  return types.Rewards.from_suites(
    suite_a=[o.suite_a for o in outcomes],
    suite_b=[o.suite_b for o in outcomes],
    suite_gen=[o.suite_gen for o in outcomes],
    executed=[o.executed for o in outcomes],
    status=[int(o.status) for o in outcomes],
    num_flags=num_flags,
  )


def await_result(
  pool: Any,
  job: jobs.Job,
  future: concurrent.futures.Future,
  retries: int,
) -> jobs.JobResult:
  """Waits for `future` (of `job`); resubmits on a sandbox error.

  Args:
    pool: what `job` was submitted to (`submit(job) -> Future`).
    job: the job.
    future: its future.
    retries: how many times a `SANDBOX_ERROR` result is retried.

  Returns:
    The first result that is not a sandbox error, or the last one.
  """
  result = future.result()
  for _ in range(retries):
    if result.status != types.JobStatus.SANDBOX_ERROR:
      break
    result = pool.submit(job).result()
  return result


@dataclasses.dataclass(frozen=True)
class Turn:
  """One policy turn and what came of it.

  `probe` is the query the host answered in this turn's observation (a
  probe task's `<run>`), else None.
  """

  action_text: str
  action: protocol.Action
  num_tokens: int
  observation: protocol.Observation | None = None
  result: jobs.JobResult | None = None
  probe: int | None = None


@dataclasses.dataclass(frozen=True)
class EpisodeState:
  """An episode so far; `CodeEnv.step` returns a new one.

  Attributes:
    task: the task (its expected values stay on the host).
    prompt_text: what the policy sees first.
    prompt_ids: its token ids.
    started_at: `reset` time on the env's clock.
    turns: the turns taken.
    num_tokens: prompt, action and observation tokens so far.
    done: no more steps.
    truncated: a budget ended the episode (not a `<submit>`).
    stop_reason: one of `STOP_REASONS` once done.
    outcome: set once done.
  """

  task: schema.Task
  prompt_text: str
  prompt_ids: tuple[int, ...]
  started_at: float
  turns: tuple[Turn, ...] = ()
  num_tokens: int = 0
  done: bool = False
  truncated: bool = False
  stop_reason: str | None = None
  outcome: Outcome | None = None

  @property
  def prompt_parts(self) -> tuple[str, str]:
    """(system, user) text of the prompt, as `prompt_ids` rendered them."""
    return protocol.REMINDER, protocol.task_text(self.task)

  @property
  def final_code(self) -> str | None:
    """The submitted code, if the episode ended with a `<submit>`."""
    if self.turns and isinstance(self.turns[-1].action, protocol.Submit):
      if self.stop_reason == STOP_SUBMIT:
        return self.turns[-1].action.code
    return None


@dataclasses.dataclass(frozen=True)
class StepResult:
  """What one step returns besides the new state.

  Attributes:
    action: the parsed action.
    observation: for a `<run>` or a format error that was executed; None
      for a `<submit>` and for a turn stopped by a budget.
    observation_ids: its token ids (`protocol.observation_ids`), or ().
    done: the episode is over.
    truncated: a budget ended it.
    stop_reason: one of `STOP_REASONS` when done, else None.
    outcome: set when done.
    result: the sandbox result of this turn's job, if it had one.
  """

  action: protocol.Action
  observation: protocol.Observation | None
  observation_ids: tuple[int, ...]
  done: bool
  truncated: bool
  stop_reason: str | None
  outcome: Outcome | None
  result: jobs.JobResult | None


@dataclasses.dataclass(frozen=True)
class _Pending:
  """A turn between parsing and its sandbox result."""

  state: EpisodeState
  action_text: str
  num_tokens: int
  action: protocol.Action
  job: jobs.Job | None = None
  stop: str | None = None
  skip: str | None = None
  action_ended: bool = True


class CodeEnv:
  """The environment; holds no episode state itself (thread-compatible).

  Attributes:
    pool: a `SandboxPool` (anything with `submit(job) -> Future` and
      `config.timeout_s`).
    format: the conversation format: encodes prompts and observations,
      counts action tokens.
    config: the budgets.
    judge_config: float tolerance of the judge.
    pre_submit: called as pre_submit(state, code) before a `<submit>` is
      executed; a non-empty string it returns is the reason not to execute
      it (the episode ends with `Outcome.not_executed(reason)`), e.g.
      `anticheat.pipeline.AntiCheat.pre_submit`.
  """

  def __init__(
    self,
    pool: Any,
    fmt: chat.ConversationFormat | tokenizer_lib.Tokenizer,
    config: EnvConfig,
    judge_config: judge.JudgeConfig | None = None,
    clock: Callable[[], float] = time.monotonic,
    sandbox_retries: int = 1,
    pre_submit: Callable[[EpisodeState, str], str | None] | None = None,
  ):
    """Binds the pool, conversation format and budgets.

    Args:
      pool: runs the jobs.
      fmt: the policy's conversation format (a bare `Tokenizer` means its
        byte protocol, `chat.ByteProtocolFormat(tokenizer)`).
      config: the budgets.
      judge_config: float tolerance (None: `judge.JudgeConfig()`).
      clock: seconds, monotonic (tests pass a fake one).
      sandbox_retries: resubmissions of a job that hit a sandbox error.
      pre_submit: the pre-execution hook (see the class docstring), or None.
    """
    self.pool = pool
    if isinstance(fmt, tokenizer_lib.Tokenizer):
      fmt = chat.ByteProtocolFormat(fmt)
    self.format = fmt
    self.config = config
    self.judge_config = judge_config or judge.JudgeConfig()
    self._clock = clock
    self._retries = sandbox_retries
    self.pre_submit = pre_submit

  def reset(self, task: schema.Task) -> EpisodeState:
    """Starts an episode on `task`; the wall-time budget starts now."""
    ids = tuple(
      self.format.prompt_ids(protocol.REMINDER, protocol.task_text(task))
    )
    return EpisodeState(
      task=task,
      prompt_text=protocol.prompt_text(task),
      prompt_ids=ids,
      started_at=self._clock(),
      num_tokens=len(ids),
    )

  def step(
    self,
    state: EpisodeState,
    action_text: str,
    num_tokens: int | None = None,
  ) -> tuple[EpisodeState, StepResult]:
    """Takes one turn (see `step_many`)."""
    counts = None if num_tokens is None else [num_tokens]
    return self.step_many([state], [action_text], counts)[0]

  def step_many(
    self,
    states: Sequence[EpisodeState],
    action_texts: Sequence[str],
    num_tokens: Sequence[int] | None = None,
    action_ended: Sequence[bool] | None = None,
  ) -> list[tuple[EpisodeState, StepResult]]:
    """Takes one turn in each episode; their jobs run concurrently.

    Args:
      states: episodes that are not done.
      action_texts: the policy turn of each (`format.action_text`).
      num_tokens: the turn's token count as the policy produced it; by
        default `len(format.encode_action(text))`.
      action_ended: whether each turn ended as the format ends a turn
        (`format.action_ended`); False (cut by the budget): the observation
        chunk closes the turn first. Default: all True.

    Returns:
      (new state, step result) per episode, in order.

    Raises:
      ValueError: a state is done, or the lengths differ.
    """
    if len(states) != len(action_texts):
      raise ValueError(
        f"{len(states)} states but {len(action_texts)} action texts."
      )
    if num_tokens is not None and len(num_tokens) != len(states):
      raise ValueError(f"{len(states)} states but {len(num_tokens)} counts.")
    if action_ended is not None and len(action_ended) != len(states):
      raise ValueError(
        f"{len(states)} states but {len(action_ended)} action_ended flags."
      )
    pending = [
      dataclasses.replace(
        self._begin(s, a, None if num_tokens is None else num_tokens[i]),
        action_ended=True if action_ended is None else bool(action_ended[i]),
      )
      for i, (s, a) in enumerate(zip(states, action_texts, strict=True))
    ]
    futures = [
      None if p.job is None else self.pool.submit(p.job) for p in pending
    ]
    return [self._finish(p, f) for p, f in zip(pending, futures, strict=True)]

  def cut(
    self, state: EpisodeState, reason: str = STOP_ADAPTIVE
  ) -> EpisodeState:
    """Ends an open episode between turns as truncated (no submission).

    The learner bootstraps its return from the critic's value after its
    last token, as for an episode stopped by a budget.

    Raises:
      ValueError: the episode is done, or `reason` is not a stop reason.
    """
    if state.done:
      raise ValueError(
        f"cut on a finished episode (task {state.task.task_id!r}, stopped"
        f" by {state.stop_reason})."
      )
    if reason not in STOP_REASONS or reason == STOP_SUBMIT:
      raise ValueError(f"cut reason {reason!r}: not a truncation reason.")
    return dataclasses.replace(
      state,
      done=True,
      truncated=True,
      stop_reason=reason,
      outcome=Outcome.not_executed(),
    )

  def _elapsed(self, state: EpisodeState) -> float:
    return self._clock() - state.started_at

  def _begin(
    self, state: EpisodeState, text: str, num_tokens: int | None
  ) -> _Pending:
    """Parses a turn and checks the budgets; builds its job."""
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
    action = protocol.parse_action(text)
    malformed = isinstance(action, protocol.FormatError)
    total = state.num_tokens + n
    cfg = self.config
    stop = None
    if n > cfg.max_tokens_per_turn or (
      malformed and n >= cfg.max_tokens_per_turn
    ):
      stop = STOP_MAX_TOKENS_PER_TURN
    elif total > cfg.max_total_tokens or (
      malformed and total >= cfg.max_total_tokens
    ):
      stop = STOP_MAX_TOTAL_TOKENS
    elif self._elapsed(state) > cfg.max_wall_s:
      stop = STOP_MAX_WALL_S
    job, skip = None, None
    if stop is None and isinstance(action, protocol.Run):
      job = self._run_job(state, action.code)
    elif stop is None and isinstance(action, protocol.Submit):
      if self.pre_submit is not None:
        skip = self.pre_submit(state, action.code) or None
      if skip is None:
        job = judge.solution_job(state.task, action.code)
    return _Pending(state, text, n, action, job, stop, skip)

  def _run_job(self, state: EpisodeState, code: str) -> jobs.Job:
    """A `<run>`'s job, limited to the wall time left."""
    left = self.config.max_wall_s - self._elapsed(state)
    timeout = max(left, 0.01) if left < self.pool.config.timeout_s else None
    task = state.task
    spec = probes.spec_of(task)
    if spec is not None:
      # Only the helper (and the public range) travels; the host answers
      # what the job prints.
      asked = [t.probe for t in state.turns if t.probe is not None]
      prelude = probes.helper(spec, asked)
      return jobs.Job.program(prelude + code, [""], timeout_s=timeout)
    if not task.visible_tests:
      return jobs.Job.program(code, [""], timeout_s=timeout)
    return judge.tests_job(task, task.visible_tests, code, timeout)

  def _finish(
    self, p: _Pending, future: concurrent.futures.Future | None
  ) -> tuple[EpisodeState, StepResult]:
    """Turns a pending turn and its sandbox result into the new state."""
    state, cfg = p.state, self.config
    result = None
    if future is not None:
      result = await_result(self.pool, p.job, future, self._retries)
    obs, outcome, stop, query = None, None, p.stop, None
    if stop is None:
      if isinstance(p.action, protocol.FormatError):
        obs = protocol.render_format_error(
          p.action.reason, max_bytes=cfg.obs_max_bytes
        )
      elif isinstance(p.action, protocol.Run):
        if probes.spec_of(state.task) is not None:
          obs, query = self._probe_observation(state, result)
        else:
          obs = self._run_observation(state.task, result)
      elif p.skip is not None:
        outcome, stop = Outcome.not_executed(p.skip), STOP_SUBMIT
      else:
        grade = judge.grade_result(state.task, result, self.judge_config)
        outcome, stop = Outcome.from_grade(grade), STOP_SUBMIT
    obs_ids = (
      ()
      if obs is None
      else tuple(
        self.format.observation_ids(obs.body, action_ended=p.action_ended)
      )
    )
    turns = (
      *state.turns,
      Turn(p.action_text, p.action, p.num_tokens, obs, result, query),
    )
    num_tokens = state.num_tokens + p.num_tokens + len(obs_ids)
    if stop is None:
      if len(turns) >= cfg.max_turns:
        stop = STOP_MAX_TURNS
      elif num_tokens >= cfg.max_total_tokens:
        stop = STOP_MAX_TOTAL_TOKENS
      elif self._elapsed(state) > cfg.max_wall_s:
        stop = STOP_MAX_WALL_S
    truncated = stop is not None and stop != STOP_SUBMIT
    if truncated:
      outcome = Outcome.not_executed()
    new_state = dataclasses.replace(
      state,
      turns=turns,
      num_tokens=num_tokens,
      done=stop is not None,
      truncated=truncated,
      stop_reason=stop,
      outcome=outcome,
    )
    step = StepResult(
      action=p.action,
      observation=obs,
      observation_ids=obs_ids,
      done=stop is not None,
      truncated=truncated,
      stop_reason=stop,
      outcome=outcome,
      result=result,
    )
    return new_state, step

  def _run_observation(
    self, task: schema.Task, result: jobs.JobResult
  ) -> protocol.Observation:
    """Judges a `<run>` on the visible tests and renders what happened."""
    reports = []
    if task.visible_tests:  # else the job was one run as a program
      reports = [
        self._report(task, test, run)
        for test, run in zip(task.visible_tests, result.tests, strict=True)
      ]
    program = task.kind == jobs.STDIO or not task.visible_tests
    return protocol.render_run(
      reports,
      max_bytes=self.config.obs_max_bytes,
      status=jobs.status_name(result.status),
      reason=result.reason,
      stdout=result.stdout,
      stderr_tail=protocol.last_line(result.stderr) if program else "",
    )

  def _probe_observation(
    self, state: EpisodeState, result: jobs.JobResult
  ) -> tuple[protocol.Observation, int | None]:
    """Answers a probe task's `<run>`: its first query, on the host.

    Returns:
      The observation and the query it answered (None if the run printed
      none).
    """
    spec = probes.spec_of(state.task)
    run = result.tests[0] if result.tests else None
    asked = probes.queries(run.stdout if run is not None else "")
    previous = [t.probe for t in state.turns if t.probe is not None]
    line = None
    if asked:
      line = probes.answer_line(spec, previous, asked[0])
    status = jobs.status_name(result.status)
    stderr = protocol.last_line(result.stderr) if status != "ok" else ""
    obs = protocol.render_probe(
      line,
      ignored=max(len(asked) - 1, 0),
      max_bytes=self.config.obs_max_bytes,
      status=status,
      reason=result.reason,
      stderr_tail=stderr,
    )
    return obs, asked[0] if asked else None

  def _report(
    self, task: schema.Task, test: dict, run: jobs.TestRun
  ) -> protocol.TestReport:
    """One visible test's verdict, with a one-line reason when it failed."""
    config = judge.task_config(task, self.judge_config)
    verdict = judge.judge_test(task.kind, test, run, config)
    if verdict.passed:
      return protocol.TestReport(True)
    if task.kind == jobs.STDIO:
      where = f"stdin {protocol.value_repr(test['stdin'])}"
    else:
      where = protocol.call_repr(
        task.entry_point, test["args"], test.get("kwargs", {})
      )
    if run.status in ("error", "not_run"):
      detail = f"{where}: {run.error or run.status}"
    elif run.status != "ok":
      detail = f"{where}: {run.status}" + (f" ({run.error})" * bool(run.error))
    elif task.kind == jobs.STDIO:
      detail = (
        f"{where}: printed {protocol.value_repr(run.stdout or '')}, expected"
        f" {protocol.value_repr(test['expected_stdout'])}"
      )
    elif "checker" in test:
      detail = (
        f"{where} returned {protocol.value_repr(run.output)}: {verdict.reason}"
      )
    else:
      detail = (
        f"{where} returned {protocol.value_repr(run.output)}, expected"
        f" {protocol.value_repr(test['expected'])}"
      )
    return protocol.TestReport(False, detail)
