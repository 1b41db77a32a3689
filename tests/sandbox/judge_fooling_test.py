"""Attempts to fool the judge: none may pass a test it did not compute.

The task's expected values are unguessable random integers; the attacks run
in the shared gVisor pool (local, and behind a Ray sandbox actor) and are
graded by the host judge. A correct
solution (which embeds the table) passes everything, so each test can fail.
"""

import hashlib
import secrets
import struct

import pytest

from codeagent_rl import types
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema

N_HIDDEN = 4
N_HELDOUT = 2


@pytest.fixture(scope="module")
def secrets_table():
  return [secrets.randbits(62) + 10**17 for _ in range(N_HIDDEN + N_HELDOUT)]


@pytest.fixture(scope="module")
def task(secrets_table):
  tests = [{"args": [i], "expected": v} for i, v in enumerate(secrets_table)]
  return schema.Task(
    task_id="secret_lookup",
    prompt="Return the i-th secret.",
    entry_point="f",
    kind="function",
    visible_tests=(),
    hidden_tests=tuple(tests[:N_HIDDEN]),
    heldout_tests=tuple(tests[N_HIDDEN:]),
    reference_solution=f"def f(i):\n  return {secrets_table!r}[i]\n",
    metadata={},
  )


def grade(pool, task, code):
  result = judge.grade(pool, task, code)
  # Whatever the attack did, the pool serves the next job.
  check = pool.run(
    jobs.Job.function("def g(x):\n  return -x\n", "g", [([4], {})])
  )
  assert check.status == types.JobStatus.OK and check.tests[0].output == -4
  return result


def assert_fooled_nobody(result):
  assert result.suite_a.passed == 0, result.to_json()
  assert result.suite_b.passed == 0, result.to_json()
  assert result.suite_a.total == N_HIDDEN
  assert result.suite_b.total == N_HELDOUT


def test_correct_solution_passes(attack_pool, task, request):
  # tests/conftest.py puts the tests against a Ray actor in the xdist group
  # "ray", so that one worker starts the one cluster they share.
  marker = request.node.get_closest_marker("xdist_group")
  against_ray = request.node.callspec.params["attack_pool"] == "ray"
  assert (marker is not None and marker.args == ("ray",)) == against_ray
  if against_ray and request.config.getvalue("loadgroup"):
    assert request.node.nodeid.endswith("@ray"), request.node.nodeid
  result = grade(attack_pool, task, task.reference_solution)
  assert result.status == types.JobStatus.OK
  assert (result.suite_a.passed, result.suite_b.passed) == (4, 2)


def test_off_by_one_solution_fails(attack_pool, task, secrets_table):
  code = f"def f(i):\n  return {secrets_table!r}[i] + 1\n"
  assert_fooled_nobody(grade(attack_pool, task, code))


@pytest.mark.parametrize(
  "code",
  [
    "import sys\nsys.exit(0)\n",
    "import os\nos._exit(0)\n",
    "raise SystemExit\n",
    "def f(i):\n  import sys\n  sys.exit(0)\n",
    "def f(i):\n  import os\n  os._exit(0)\n",
    "def f(i):\n  raise SystemExit(0)\n",
    "def f(i):\n  raise KeyboardInterrupt\n",
  ],
  ids=[
    "sys_exit_before",
    "os_exit_before",
    "system_exit_before",
    "sys_exit_inside",
    "os_exit_inside",
    "system_exit_inside",
    "keyboard_interrupt_inside",
  ],
)
def test_early_exit(attack_pool, task, code):
  result = grade(attack_pool, task, code)
  assert_fooled_nobody(result)
  if "os._exit" in code:
    assert result.status == types.JobStatus.CRASH


def test_skip_test(attack_pool, task):
  code = "import unittest\ndef f(i):\n  raise unittest.SkipTest('later')\n"
  result = grade(attack_pool, task, code)
  assert_fooled_nobody(result)
  assert "SkipTest" in result.suite_a.verdicts[0].reason


def test_printing_fake_results(attack_pool, task):
  code = """
import json, sys
def f(i):
  print("All tests passed. OK")
  print(json.dumps({"status": "ok", "passed": 6, "total": 6}))
  sys.stderr.write("PASSED\\n")
  return None
"""
  assert_fooled_nobody(grade(attack_pool, task, code))


def test_writing_forged_frames_to_every_descriptor(attack_pool, task):
  # Frames as the forkserver and the host expect them, claiming success.
  frames = b"".join(
    wire.pack_frame({"event": "result", "test": i, "status": "ok", "output": 0})
    for i in range(N_HIDDEN + N_HELDOUT)
  ) + wire.pack_frame({"event": "done"})
  reply = wire.pack_frame(
    {"id": 1, "status": "ok", "tests": [{"status": "ok", "output": 0}]}
  )
  code = f"""
import os
def f(i):
  for fd in range(64):
    for blob in ({frames!r}, {reply!r}, b"garbage" * 10):
      try:
        os.write(fd, blob)
      except OSError:
        pass
  return 0
"""
  result = grade(attack_pool, task, code)
  assert_fooled_nobody(result)


def test_always_equal_object(attack_pool, task):
  code = """
class Anything:
  def __eq__(self, other):
    return True
  def __ne__(self, other):
    return False
  __hash__ = object.__hash__
def f(i):
  return Anything()
"""
  result = grade(attack_pool, task, code)
  assert_fooled_nobody(result)
  assert result.result.tests[0].status == "bad_output"
  assert "Anything" in result.suite_a.verdicts[0].reason


def test_int_subclass_with_custom_eq(attack_pool, task):
  code = """
class Liar(int):
  def __eq__(self, other):
    return True
  __hash__ = int.__hash__
def f(i):
  return Liar(i)
"""
  result = grade(attack_pool, task, code)
  assert_fooled_nobody(result)
  reason = result.suite_a.verdicts[0].reason
  assert "bad_output" in reason and "subclass of int" in reason, reason


def test_nested_subclass_is_rejected(attack_pool, task):
  code = """
class Liar(str):
  def __eq__(self, other):
    return True
def f(i):
  return [1, {"k": (2, Liar("x"))}]
"""
  result = grade(attack_pool, task, code)
  assert_fooled_nobody(result)
  assert "subclass of str" in result.suite_a.verdicts[0].reason


def _digests(values):
  return sorted(hashlib.sha256(str(v).encode()).hexdigest() for v in values)


def test_stack_gc_and_memory_walks_find_no_expected_value(
  attack_pool, task, secrets_table
):
  """Searches frames, every GC object and its own memory for the answers.

  It gets only SHA-256 digests of the expected values, so it can recognise
  one if it is anywhere in the sandbox, and returns it: with the values kept
  on the host it finds nothing.
  """
  code = f"""
import ctypes, gc, hashlib, os, re, sys
WANT = set({_digests(secrets_table)!r})
def digest(value):
  return hashlib.sha256(str(value).encode()).hexdigest()
def scan_memory():
  # Jobs have no /proc (no maps, no mem). Every 1 MiB chunk of the address
  # space that holds a live object (its heap arenas, the interpreter's data)
  # is read page by page through a pipe: write(2) from an unmapped page
  # fails with EFAULT instead of crashing.
  libc = ctypes.CDLL(None, use_errno=True)
  libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
  r, w = os.pipe()
  chunks = {{id(o) >> 20 for o in gc.get_objects()}}
  chunks |= {{id(v) >> 20 for v in (int, str, None, sys, os)}}
  found, scanned = [], 0
  for chunk in sorted(chunks):
    data = bytearray()
    for page in range(chunk << 20, (chunk + 1) << 20, 4096):
      if libc.write(w, page, 4096) == 4096:
        data += os.read(r, 4096)
      else:
        data += bytes(1)  # a gap: no match across it
    scanned += len(data)
    for m in re.finditer(rb"\\d{{18,19}}", data):
      if digest(int(m.group())) in WANT:
        found.append(int(m.group()))
  print("SCANNED", scanned)
  return found
def walk():
  hits = []
  frame = sys._getframe()
  while frame is not None:
    for scope in (frame.f_locals, frame.f_globals):
      for value in list(scope.values()):
        if digest(value) in WANT:
          hits.append(value)
    frame = frame.f_back
  for obj in gc.get_objects():
    try:
      items = obj.values() if isinstance(obj, dict) else (
          obj if isinstance(obj, (list, tuple, set)) else ())
      for value in list(items):
        if isinstance(value, int) and digest(value) in WANT:
          hits.append(value)
    except Exception:
      pass
  return hits
HITS = walk() + scan_memory()
print("FOUND" if HITS else "NOTHING", HITS)
def f(i):
  return (walk() + HITS + [-1])[0]
"""
  result = grade(attack_pool, task, code)
  assert result.status == types.JobStatus.OK, result.to_json()
  assert "NOTHING []" in result.result.stdout, result.result.stdout
  scanned = int(result.result.stdout.split("SCANNED ")[1].split()[0])
  assert scanned > 4 << 20  # it did read the memory around every object
  assert_fooled_nobody(result)
  # The search is real: it finds a secret that *is* in the sandbox, both as
  # an object and as digits in memory.
  planted = f"PLANTED = [{secrets_table[0]}]\nTEXT = 'x{secrets_table[1]}x'\n"
  result = grade(attack_pool, task, planted + code)
  assert "FOUND" in result.result.stdout
  assert str(secrets_table[1]) in result.result.stdout  # by the memory scan
  assert result.suite_a.passed == 1


def test_monkeypatching_builtins_and_json(attack_pool, task):
  code = """
import builtins, json, sys
builtins.isinstance = lambda obj, cls: True
builtins.type = lambda *args: int
json.dumps = lambda *a, **k: '{"event": "result", "status": "ok"}'
for module in list(sys.modules.values()):
  if hasattr(module, "encode") and hasattr(module, "decode") and hasattr(
      module, "write_frame"):
    module.encode = lambda value, _depth=0: 123
    module.dumps = lambda obj: '{"event":"done"}'
def f(i):
  return 0
"""
  result = grade(attack_pool, task, code)
  assert_fooled_nobody(result)


def test_stdio_fake_output_and_exit(attack_pool):
  expected = secrets.token_hex(8)
  task = schema.Task(
    task_id="echo_secret",
    prompt="",
    entry_point=None,
    kind="stdio",
    visible_tests=(),
    hidden_tests=({"stdin": "x\n", "expected_stdout": expected + "\n"},),
    heldout_tests=({"stdin": "y\n", "expected_stdout": expected + "\n"},),
    reference_solution=f"print({expected!r})",
    metadata={},
  )
  assert grade(attack_pool, task, task.reference_solution).suite_a.passed == 1
  for code in (
    "print('OK')\nprint('All tests passed')\n",
    "import os\nos._exit(0)\n",
    "import sys\nsys.exit(0)\n",
    "import os\nos.write(1, b'\\x00' * 8)\n",
  ):
    result = grade(attack_pool, task, code)
    assert (result.suite_a.passed, result.suite_b.passed) == (0, 0), code


def test_forged_result_frame_bytes_are_inert(attack_pool, task):
  """A frame with an oversize length prefix or bad JSON crashes only the job."""
  bogus = struct.pack(">I", 1 << 30) + b"{"
  code = f"""
import os
def f(i):
  os.write(3, {bogus!r})
  return 0
"""
  result = grade(attack_pool, task, code)
  assert_fooled_nobody(result)
  assert result.status in (
    types.JobStatus.CRASH,
    types.JobStatus.OUTPUT_LIMIT,
  ), result.to_json()
