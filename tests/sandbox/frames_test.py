"""Forged result frames: whatever a job writes, the forkserver answers.

A function job's code runs in the process that reports its results, so it
can write to the result descriptor (3) too. Every forgery here must end as
a result of that job (a crash, a failed test), never as a sandbox error,
and must not change how long the job may run or how its tests are timed.
"""

import json

import pytest

from codeagent_rl import types
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox.guest import frames

OK = types.JobStatus.OK
CRASH = types.JobStatus.CRASH
TIMEOUT = types.JobStatus.TIMEOUT

WRITE = """
import os, struct
def frame(data):
  if isinstance(data, str):
    data = data.encode()
  os.write(3, struct.pack(">I", len(data)) + data)
"""


@pytest.fixture(params=["gvisor", "process"])
def pool(request, gvisor_pool, process_pool):
  pool = gvisor_pool if request.param == "gvisor" else process_pool
  before = pool.stats["sandbox_errors"]
  yield pool
  assert pool.stats["sandbox_errors"] == before, "a forged frame broke it"
  after = pool.run(
    jobs.Job.function("def f(x):\n  return x + 1\n", "f", [([1], {})])
  )
  assert after.status == OK and after.tests[0].output == 2, after


def run(pool, body: str, tests: int = 2, **limits) -> jobs.JobResult:
  code = WRITE + body
  inputs = [([i], {}) for i in range(tests)]
  return pool.run(jobs.Job.function(code, "f", inputs, **limits))


def assert_crash(result: jobs.JobResult, fragment: str) -> None:
  assert result.status == CRASH, result
  assert "malformed result stream" in result.reason, result
  assert fragment in result.reason, result


@pytest.mark.parametrize(
  "forged,fragment",
  [
    # Top level: before the job process's own start frame. The server
    # draws the order: an order frame, even a valid one, is malformed.
    ('frame(\'{"event": "order", "order": [0, 1]}\')', "unexpected 'order'"),
    ('frame(\'{"event": "order", "order": [1, 0]}\')', "unexpected 'order'"),
    # The job process's own start frame comes next: a second one.
    ('frame(\'{"event": "start"}\')', "unexpected 'start'"),
    ('frame(\'{"event": "done"}\')', "unexpected 'done'"),
    (
      'frame(\'{"event": "result", "test": 0, "status": "ok", "output": 1,'
      ' "time_s": 1e999}\')',
      "not JSON",  # 1e999 overflows: no number a reply could carry
    ),
    (
      'frame(\'{"event": "result", "test": 0, "status": "ok", "output": 1}\')',
      "unexpected 'result'",
    ),
    ("frame('[1, 2]')", "not an object"),
    ("frame('{\"event\": ')", "not JSON"),
  ],
)
def test_forged_frames_before_the_tests(pool, forged, fragment):
  result = run(pool, forged + "\ndef f(x):\n  return x\n")
  assert_crash(result, fragment)
  assert all(t.status == "not_run" for t in result.tests), result


@pytest.mark.parametrize(
  "body",
  [
    'os.write(3, b"\\xff\\xff\\xff\\xff")\ndef f(x):\n  return x\n',
    "def f(x):\n  os.write(3, struct.pack('>I', 10 << 20))\n  return x\n",
    "def f(x):\n  return 'x' * (10 << 20)\n",
  ],
  ids=["4GiB-header-first", "10MiB-header-in-a-test", "10MiB-return-value"],
)
def test_a_frame_past_the_budget_is_the_output_limit(pool, body):
  # A frame's header announcing more than the result stream has left, or
  # its bytes passing that: the same job, whichever the server reads
  # first (a 10 MiB return value was once reported as a malformed stream).
  result = run(pool, body)
  assert result.status == types.JobStatus.OUTPUT_LIMIT, result
  assert result.tests[0].status != "ok", result


@pytest.mark.parametrize(
  "forged,fragment",
  [
    # Inside the first test (position 0), instead of its own result.
    (
      'frame(\'{"event": "result", "test": 0, "status": "ok", "output": 1,'
      ' "time_s": 1e999}\')',
      "not JSON",
    ),
    ('frame(\'{"event": "result", "test": 99, "status": "ok"}\')', "test 99"),
    ('frame(\'{"event": "result", "test": 1, "status": "ok"}\')', "test 1"),
    ('frame(\'{"event": "order", "order": [0, 1]}\')', "unexpected 'order'"),
    ('frame(\'{"event": "start"}\')', "unexpected 'start'"),
    ('frame(\'{"event": "done"}\')', "unexpected 'done'"),
    (
      'frame(\'{"event": "result", "test": 0, "status": "passed"}\')',
      "bad status",
    ),
    (
      'frame(\'{"event": "result", "test": 0, "status": "ok"}\')',
      "without an output",
    ),
  ],
)
def test_forged_frames_inside_a_test(pool, forged, fragment):
  body = f"def f(x):\n  {forged}\n  return x\n"
  assert_crash(run(pool, body), fragment)


@pytest.mark.parametrize(
  "output", ['{"$float": "bogus"}', "[" * 150 + "]" * 150]
)
def test_forged_result_with_a_bad_output_fails_only_its_test(pool, output):
  # A well-formed result whose output is not tagged plain data (an unknown
  # tag, nesting past the wire's limit): that test is bad_output.
  body = f"""
import json
def f(x):
  frame(json.dumps({{"event": "result", "test": 0, "status": "ok",
                     "output": json.loads({output!r})}}))
  os._exit(0)
"""
  result = run(pool, body, tests=1)
  assert result.tests[0].status == "bad_output", result
  assert "tagged plain data" in result.tests[0].error


def test_test_times_are_the_servers(pool):
  # The job forges a result that claims a near-zero time, after sleeping.
  body = """
import json, time
def f(x):
  time.sleep(0.3)
  frame(json.dumps({"event": "result", "test": 0, "status": "ok",
                    "output": x, "time_s": 1e-9}))
  os._exit(0)
"""
  result = run(pool, body, tests=1)
  assert result.tests[0].output == 0
  # The server's clock starts a little after the child's sleep may (a
  # loaded machine measured 0.29987 s); the forged figure is 1e-9.
  assert result.tests[0].time_s >= 0.25, result
  honest = run(pool, "import time\ndef f(x):\n  time.sleep(0.2)\n  return x\n")
  assert result.status == CRASH  # no "done": the forger exited
  assert honest.status == OK, honest
  # Each test's time depends on when the server read its result; together
  # they are the wall time from the start to the last result. The server's
  # clock starts a little after the child's first sleep can: a clean-clone
  # CI run measured 0.398 s for the two 0.2 s sleeps, so the bound keeps a
  # 20 ms margin (a forged time would be ~0).
  assert all(t.time_s > 0 for t in honest.tests), honest
  assert sum(t.time_s for t in honest.tests) >= 0.38, honest


def test_per_test_limit_holds_while_the_job_trickles_bytes(pool):
  # A test that ignores SIGALRM and keeps writing a frame that never ends,
  # to look alive: killed at its own limit, long before the job's.
  body = """
import signal, time
signal.signal(signal.SIGALRM, signal.SIG_IGN)
def f(x):
  os.write(3, struct.pack(">I", 60000))
  while True:
    os.write(3, b" ")
    time.sleep(0.1)
"""
  result = run(pool, body, tests=1, timeout_s=30.0, test_timeout_s=0.5)
  assert result.status == TIMEOUT, result
  assert result.tests[0].status == "timeout", result
  assert result.duration_s < 5.0, result


def test_returned_data_is_capped_across_tests(pool):
  # Each output alone fits the cap, all of them do not.
  cap = pool.config.max_output_bytes
  body = f"def f(x):\n  return 'x' * {cap // 3}\n"
  result = run(pool, body, tests=8)
  assert result.status == types.JobStatus.OUTPUT_LIMIT, result


def test_lone_surrogates_in_messages_reach_the_host_as_text(pool):
  result = run(pool, "def f(x):\n  raise ValueError('bad \\udc80 byte')\n")
  assert result.status == OK, result
  for test in result.tests:
    assert test.status == "error"
    # A UTF-8 encoder (the tokenizer, a JSON writer) takes it.
    test.error.encode("utf-8")
    assert "\\udc80" in test.error, test
  json.dumps(result.to_json(), ensure_ascii=False).encode("utf-8")


def test_a_well_formed_forgery_is_no_more_than_returning_values(pool):
  # A job that writes the whole stream itself gets what returning those
  # values would have got: the judge compares them like any output.
  body = """
import json
frame(json.dumps({"event": "start"}))
for i in (0, 1):
  frame(json.dumps({"event": "result", "test": i, "status": "ok",
                    "output": 42 + i, "time_s": 0.0}))
frame(json.dumps({"event": "done"}))
os._exit(0)
"""
  result = run(pool, body)
  assert result.status == OK, result
  assert sorted(t.output for t in result.tests) == [42, 43]


def test_results_go_to_the_tests_in_the_servers_order():
  # Positions are the job process's; the server maps them to test indices.
  results = frames.FunctionResults([2, 0, 1], started=0.0)
  assert results.running() is None  # the code is loading
  results.feed({"event": "start"})
  for position in range(3):
    assert results.running() == [2, 0, 1][position]
    results.feed({"event": "result", "test": position, "status": "ok",
                  "output": position * 10})  # fmt: skip
  results.feed({"event": "done"})
  assert [t["output"] for t in results.tests] == [10, 20, 0]


@pytest.mark.parametrize(
  "frame,fragment",
  [
    ({"event": "order", "order": [0, 1, 2]}, "unexpected 'order'"),
    ({"event": "result", "test": 2, "status": "ok", "output": 1}, "test 2"),
    ({"event": "result", "test": True, "status": "ok"}, "test True"),
    ({"event": "start"}, "unexpected 'start'"),
  ],
)
def test_an_order_or_a_result_out_of_turn_is_malformed(frame, fragment):
  results = frames.FunctionResults([2, 0, 1], started=0.0)
  results.feed({"event": "start"})
  with pytest.raises(frames.Malformed, match=fragment):
    results.feed(frame)
