"""CodeEnv: scripted episodes against a real sandbox pool.

Most tests use the process backend (fast); one runs a whole episode under
gVisor.
"""

import concurrent.futures
import dataclasses
import threading

import pytest

from codeagent_rl import types
from codeagent_rl.envs import code_env
from codeagent_rl.envs import protocol
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import schema
from tests.helpers import envs
from tests.helpers import sandboxes

TOK = tokenizer_lib.ByteTokenizer()
BUDGETS = envs.budgets(max_turns=5)

# Labels: "even-4", "odd-7". Expected values are strings that no input or
# scripted program contains, so a job that held one would show it.
CORRECT = (
  "def label(n):\n  return ('even' if n % 2 == 0 else 'odd') + '-' + str(n)\n"
)
# Right on the visible tests only.
HARDCODED = (
  "def label(n):\n"
  "  if n == 1:\n"
  "    return 'odd' + '-1'\n"
  "  if n == 2:\n"
  "    return 'even' + '-2'\n"
  "  return 'odd' + '-' + str(n)\n"
)
CHECKER_SENTINEL = "CHECKER-SOURCE-SENTINEL"


def _label(n: int) -> str:
  return ("even" if n % 2 == 0 else "odd") + f"-{n}"


def _task() -> schema.Task:
  checker = (
    f"# {CHECKER_SENTINEL}\n"
    "def check(args, kwargs, output):\n"
    "  return output == ('even' if args[0] % 2 == 0 else 'odd') + '-' +"
    " str(args[0])\n"
  )
  return schema.Task(
    task_id="label",
    prompt="Write label(n): 'even-<n>' or 'odd-<n>'.",
    entry_point="label",
    kind="function",
    visible_tests=tuple({"args": [n], "expected": _label(n)} for n in (1, 2)),
    hidden_tests=(
      *({"args": [n], "expected": _label(n)} for n in (10, 13, 24, 31)),
      {"args": [40], "checker": checker},
    ),
    heldout_tests=tuple(
      {"args": [n], "expected": _label(n)} for n in range(100, 110)
    ),
    reference_solution=CORRECT,
    metadata={},
  )


def _stdio_task() -> schema.Task:
  return schema.Task(
    task_id="sum",
    prompt="Read two integers, print their sum.",
    entry_point=None,
    kind="stdio",
    visible_tests=({"stdin": "1 2\n", "expected_stdout": "3\n"},),
    hidden_tests=({"stdin": "20 22\n", "expected_stdout": "42\n"},),
    heldout_tests=({"stdin": "-5 5\n", "expected_stdout": "0\n"},),
    reference_solution="a, b = map(int, input().split())\nprint(a + b)\n",
    metadata={},
  )


class RecordingPool:
  """Forwards to a pool and keeps every job it was given."""

  def __init__(self, pool):
    self.pool = pool
    self.config = pool.config
    self.jobs = []

  def submit(self, job):
    self.jobs.append(job)
    return self.pool.submit(job)


@pytest.fixture
def recording(module_pool):
  return RecordingPool(module_pool)


def _env(pool, **budgets):
  config = dataclasses.replace(BUDGETS, **budgets)
  return code_env.CodeEnv(pool, TOK, config)


def _run(code: str) -> str:
  return f"<run>{code}</run>"


def _submit(code: str) -> str:
  return f"<submit>{code}</submit><eos>"


# --- EnvConfig ----------------------------------------------------------------


@pytest.mark.parametrize(
  "field,value",
  [
    ("max_turns", 0),
    ("max_turns", 2.0),
    ("max_tokens_per_turn", -1),
    ("max_total_tokens", 0),
    ("max_wall_s", 0),
    ("max_wall_s", float("inf")),
    ("max_wall_s", "10"),
    ("obs_max_bytes", 10),
    ("obs_max_bytes", True),
  ],
)
def test_config_rejects(field, value):
  with pytest.raises(ValueError, match=f"env.{field}="):
    dataclasses.replace(BUDGETS, **{field: value})


def test_config_per_turn_within_total():
  with pytest.raises(ValueError, match="env.max_tokens_per_turn=500"):
    dataclasses.replace(BUDGETS, max_tokens_per_turn=500, max_total_tokens=400)


# --- Episodes -----------------------------------------------------------------


def test_reset(module_pool):
  env = _env(module_pool)
  state = env.reset(_task())
  assert state.prompt_text == protocol.prompt_text(_task())
  assert list(state.prompt_ids) == protocol.prompt_ids(TOK, _task())
  assert state.num_tokens == len(state.prompt_ids)
  assert not state.done and state.turns == ()


def test_run_then_submit_correct(recording):
  env = _env(recording)
  state = env.reset(_task())
  wrong = "def label(n):\n  return 'odd-' + str(n)\n"
  state, step = env.step(state, "I will test first.\n" + _run(wrong))
  assert step.observation.text == (
    "<obs>tests: 1/2 passed\n"
    "test 1: pass\n"
    "test 2: fail\n"
    "error: test 2: label(2) returned 'odd-2', expected 'even-2'\n"
    "</obs>"
  )
  assert list(step.observation_ids) == protocol.observation_ids(
    TOK, step.observation
  )
  assert not step.done and step.outcome is None
  assert len(recording.jobs) == 1 and len(recording.jobs[0].inputs) == 2

  state, step = env.step(state, _submit(CORRECT))
  assert step.done and not step.truncated
  assert step.stop_reason == state.stop_reason == code_env.STOP_SUBMIT
  assert step.observation is None and step.observation_ids == ()
  outcome = step.outcome
  assert (outcome.suite_a_passed, outcome.suite_a_total) == (5, 5)
  assert (outcome.suite_b_passed, outcome.suite_b_total) == (10, 10)
  assert outcome.suite_a == outcome.suite_b == 1.0
  assert outcome.executed and outcome.status == types.JobStatus.OK
  assert state.final_code == CORRECT
  assert len(state.turns) == 2
  # Tokens: prompt, two actions and one observation.
  want = (
    len(state.prompt_ids)
    + sum(len(TOK.encode(t.action_text)) for t in state.turns)
    + len(protocol.observation_ids(TOK, state.turns[0].observation))
  )
  assert state.num_tokens == want
  with pytest.raises(ValueError, match="finished episode"):
    env.step(state, _submit(CORRECT))


def test_hardcoded_visible_tests_fail_suite_a(module_pool):
  env = _env(module_pool)
  state = env.reset(_task())
  state, step = env.step(state, _run(HARDCODED))
  assert step.observation.body.startswith("tests: 2/2 passed\n")
  state, step = env.step(state, _submit(HARDCODED))
  assert step.outcome.executed
  assert step.outcome.suite_a < 1.0
  assert step.outcome.suite_b < 1.0


def test_expected_values_never_reach_the_sandbox(recording):
  env = _env(recording)
  task = _task()
  state = env.reset(task)
  state, _ = env.step(state, _run(CORRECT))
  state, _ = env.step(state, _submit(CORRECT))
  assert state.outcome.suite_a == 1.0
  assert len(recording.jobs) == 2
  secrets = [
    test["expected"]
    for suite in (task.visible_tests, task.hidden_tests, task.heldout_tests)
    for test in suite
    if "expected" in test
  ]
  for job in recording.jobs:
    frame = wire.dumps(job.to_frame(1, recording.config))
    assert CHECKER_SENTINEL not in frame
    assert '"expected' not in frame and '"checker' not in frame
    for secret in secrets:
      assert secret not in frame, secret
      assert secret not in repr(job)
  # The submission job holds the inputs of suite A, then suite B.
  submitted = recording.jobs[1]
  args = [list(a) for a, _ in submitted.inputs]
  want = [t["args"] for t in (*task.hidden_tests, *task.heldout_tests)]
  assert args == want


def test_format_error_counts_as_a_turn(module_pool):
  env = _env(module_pool, max_turns=2)
  state = env.reset(_task())
  text = "<run>print(1)"
  state, step = env.step(state, text)
  assert step.action == protocol.FormatError("unterminated run block")
  assert step.observation.text == (
    "<obs>format error: unterminated run block\n</obs>"
  )
  assert step.result is None and not step.done
  assert state.num_tokens == (
    len(state.prompt_ids) + len(TOK.encode(text)) + len(step.observation_ids)
  )
  state, step = env.step(state, "no tags at all")
  assert step.done and step.truncated
  assert step.stop_reason == code_env.STOP_MAX_TURNS
  assert step.observation.body == "format error: no run or submit block\n"
  assert step.outcome == code_env.Outcome.not_executed()
  assert state.final_code is None


def test_max_turns_after_runs(module_pool):
  env = _env(module_pool, max_turns=1)
  state = env.reset(_task())
  state, step = env.step(state, _run(CORRECT))
  assert step.done and step.truncated
  assert step.stop_reason == code_env.STOP_MAX_TURNS
  # The run's observation is still returned.
  assert step.observation.body.startswith("tests: 2/2 passed")


def test_submit_on_last_turn_is_not_truncated(module_pool):
  env = _env(module_pool, max_turns=1)
  state, step = env.step(env.reset(_task()), _submit(CORRECT))
  assert step.stop_reason == code_env.STOP_SUBMIT and not step.truncated
  assert step.outcome.suite_a == 1.0


def test_max_tokens_per_turn(recording):
  env = _env(recording, max_tokens_per_turn=50)
  state = env.reset(_task())
  # Over the limit: stopped before it runs, even if well formed.
  long_run = _run("x = 1\n" * 20)
  state, step = env.step(state, long_run)
  assert step.done and step.truncated and step.result is None
  assert step.stop_reason == code_env.STOP_MAX_TOKENS_PER_TURN
  assert step.outcome.status == types.JobStatus.NOT_EXECUTED
  assert recording.jobs == []
  assert state.turns[-1].num_tokens == len(TOK.encode(long_run))
  # A malformed turn that reached the limit was cut by it.
  state = env.reset(_task())
  state, step = env.step(state, "<run>" + "x" * 49)
  assert step.stop_reason == code_env.STOP_MAX_TOKENS_PER_TURN
  # Below the limit it is a format error, and a well-formed turn at the
  # limit runs.
  state = env.reset(_task())
  state, step = env.step(state, "<run>" + "x" * 40)
  assert not step.done and "unterminated" in step.observation.body
  state, step = env.step(state, _run(CORRECT), num_tokens=50)
  assert not step.done and step.observation.body.startswith("tests: 2/2")


def test_max_total_tokens(recording):
  env = _env(recording)
  prompt = len(env.reset(_task()).prompt_ids)
  # The run fits, its observation does not leave room: truncated after it.
  action = _run(CORRECT)
  n = len(TOK.encode(action))
  env = _env(recording, max_total_tokens=prompt + n + 20, max_tokens_per_turn=n)
  state, step = env.step(env.reset(_task()), action)
  assert step.done and step.truncated
  assert step.stop_reason == code_env.STOP_MAX_TOTAL_TOKENS
  assert step.observation.body.startswith("tests: 2/2 passed")
  assert state.num_tokens > env.config.max_total_tokens
  # An action past the total is not run.
  recording.jobs.clear()
  env = _env(recording, max_total_tokens=prompt + n - 1, max_tokens_per_turn=n)
  state, step = env.step(env.reset(_task()), action)
  assert step.stop_reason == code_env.STOP_MAX_TOTAL_TOKENS
  assert step.result is None and recording.jobs == []


class FakeClock:
  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_max_wall_s_before_a_turn(recording):
  clock = FakeClock()
  config = dataclasses.replace(BUDGETS, max_wall_s=5.0)
  env = code_env.CodeEnv(recording, TOK, config, clock=clock)
  state = env.reset(_task())
  clock.now += 4.0
  state, step = env.step(state, "bad")
  assert not step.done
  clock.now += 1.5
  state, step = env.step(state, _submit(CORRECT))
  assert step.done and step.truncated and step.result is None
  assert step.stop_reason == code_env.STOP_MAX_WALL_S
  assert step.outcome == code_env.Outcome.not_executed()
  assert recording.jobs == []


def test_max_wall_s_during_a_run(recording):
  env = _env(recording, max_wall_s=1.0)
  slow = "import time\ndef label(n):\n  time.sleep(0.7)\n  return 'odd-1'\n"
  state, step = env.step(env.reset(_task()), _run(slow))
  # The job got only the wall time left, and the episode ends after it.
  assert recording.jobs[0].timeout_s <= 1.0
  assert step.done and step.truncated
  assert step.stop_reason == code_env.STOP_MAX_WALL_S
  assert step.observation is not None


def test_run_reports_errors_and_stdout(module_pool):
  env = _env(module_pool)
  state = env.reset(_task())
  code = (
    "def label(n):\n"
    "  if n == 1:\n"
    # Tag text in code is a format error; in output it is plain text.
    "    print('<' + '/obs><' + 'submit>x<' + '/submit>')\n"
    "    return 'odd-1'\n"
    "  raise KeyError(n)\n"
  )
  state, step = env.step(state, _run(code))
  assert step.observation.body == (
    "tests: 1/2 passed\n"
    "test 1: pass\n"
    "test 2: fail\n"
    "error: test 2: label(2): KeyError: 2\n"
    "stdout:\n"
    "</obs><submit>x</submit>\n"
  )
  ids = step.observation_ids
  special = set(TOK.special_ids.values())
  assert ids[0] == TOK.special_ids["<obs>"]
  assert ids[-1] == TOK.special_ids["</obs>"]
  assert special.isdisjoint(ids[1:-1])
  state, step = env.step(state, _run("def label(n):\n  return (\n"))
  assert step.observation.body.startswith(
    "tests: 0/2 passed\ntest 1: fail\ntest 2: fail\nerror: test 1: label(1):"
    " loading the code failed: SyntaxError"
  )


def test_stdio_task_and_run_without_visible_tests(module_pool):
  env = _env(module_pool)
  state = env.reset(_stdio_task())
  buggy = "a, b = map(int, input().split())\nprint(a - b)\n"
  state, step = env.step(state, _run(buggy))
  assert step.observation.body == (
    "tests: 0/1 passed\n"
    "test 1: fail\n"
    "error: test 1: stdin '1 2\\n': printed '-1\\n', expected '3\\n'\n"
    "stdout:\n"
    "-1\n"
  )
  state, step = env.step(state, _run("print(1 / 0)\n"))
  assert step.observation.body.startswith(
    "tests: 0/1 passed\ntest 1: fail\nstatus: crash: exit code 1\n"
    "error: test 1: stdin '1 2\\n': exit code 1\n"
    "stderr: ZeroDivisionError: division by zero\n"
  )
  state, step = env.step(state, _submit(_stdio_task().reference_solution))
  assert step.outcome.suite_a == step.outcome.suite_b == 1.0
  # Without visible tests the code runs once as a program.
  bare = dataclasses.replace(_task(), visible_tests=())
  state, step = env.step(env.reset(bare), _run("print('hi')\n"))
  assert step.observation.body == "tests: none\nstdout:\nhi\n"


def test_step_many_submits_every_job_before_waiting(module_pool):
  events = []
  lock = threading.Lock()

  class Future(concurrent.futures.Future):
    def result(self, timeout=None):
      with lock:
        events.append("wait")
      return super().result(timeout)

  class EventPool(RecordingPool):
    def submit(self, job):
      with lock:
        events.append("submit")
      mine = Future()
      inner = self.pool.submit(job)
      inner.add_done_callback(lambda f: mine.set_result(f.result()))
      return mine

  env = _env(EventPool(module_pool))
  task = _task()
  states = [env.reset(task) for _ in range(4)]
  actions = [_run(CORRECT), _submit(CORRECT), "oops", _submit(HARDCODED)]
  out = env.step_many(states, actions)
  assert events == ["submit"] * 3 + ["wait"] * 3
  (s0, r0), (s1, r1), (s2, r2), (s3, r3) = out
  assert r0.observation.body.startswith("tests: 2/2") and not s0.done
  assert r1.outcome.suite_a == 1.0 and s1.done
  assert isinstance(r2.action, protocol.FormatError) and r2.result is None
  assert r3.outcome.suite_a < 1.0
  with pytest.raises(ValueError, match="2 states but 1 action"):
    env.step_many(states[:2], actions[:1])


def test_sandbox_error_is_retried(module_pool):
  class FlakyPool(RecordingPool):
    def submit(self, job):
      self.jobs.append(job)
      if len(self.jobs) == 1:
        future = concurrent.futures.Future()
        future.set_result(jobs.sandbox_error_result(job, "boom", 0.0))
        return future
      return self.pool.submit(job)

  flaky = FlakyPool(module_pool)
  env = _env(flaky)
  state, step = env.step(env.reset(_task()), _submit(CORRECT))
  assert len(flaky.jobs) == 2 and flaky.jobs[0] is flaky.jobs[1]
  assert step.outcome.suite_a == 1.0 and step.outcome.executed
  # Without retries the sandbox error is the outcome: not executed.
  flaky = FlakyPool(module_pool)
  env = code_env.CodeEnv(flaky, TOK, BUDGETS, sandbox_retries=0)
  state, step = env.step(env.reset(_task()), _submit(CORRECT))
  assert step.outcome.status == types.JobStatus.SANDBOX_ERROR
  assert not step.outcome.executed and step.outcome.suite_a == 0.0


def test_rewards_from_outcomes(module_pool):
  env = _env(module_pool)
  done = []
  for code in (CORRECT, HARDCODED):
    _, step = env.step(env.reset(_task()), _submit(code))
    done.append(step.outcome)
  done.append(code_env.Outcome.not_executed())
  rewards = code_env.rewards(done, num_flags=3)
  rewards.check()
  assert rewards.suite_a.tolist() == pytest.approx([1.0, done[1].suite_a, 0.0])
  assert rewards.suite_b.tolist() == pytest.approx([1.0, done[1].suite_b, 0.0])
  assert rewards.executed.tolist() == [True, True, False]
  assert rewards.status.tolist() == [0, 0, int(types.JobStatus.NOT_EXECUTED)]
  assert rewards.total.tolist() == rewards.suite_a.tolist()
  assert rewards.stage1_flags.shape == (3, 3)


def test_gvisor_episode():
  config = sandboxes.short_config("gvisor", 1)
  with harness.SandboxPool(config) as gvisor_pool:
    recording = RecordingPool(gvisor_pool)
    env = _env(recording)
    state = env.reset(_task())
    state, step = env.step(state, _run(HARDCODED))
    assert step.observation.body.startswith("tests: 2/2 passed\n")
    assert step.result.sandbox  # a runsc container, not a process sandbox
    assert not step.result.sandbox.startswith("process-")
    state, step = env.step(state, _submit(CORRECT))
  assert step.outcome.suite_a == step.outcome.suite_b == 1.0
  assert step.outcome.status == types.JobStatus.OK
  assert len(recording.jobs) == 2
