"""A program cannot steer the harness that runs it.

The job process runs the untrusted code, so whatever the code patches there
(`random`, `json`, `time`, `sys.modules`, builtins, the encoder, the
harness's own functions) may change its own outputs or break the protocol
(a crash), never what else the host sees: which test ran when, with which
inputs, with which status, in how long. Every program here patches on
import and then returns, per call, its position among the calls and the
arguments it got; the host checks each test's output against that test's
own inputs.
"""

import dis
import math

import pytest

from codeagent_rl import types
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox.guest import child

OK = types.JobStatus.OK
N = 10  # tests per job: a random order is the identity once in 3.6 million
SLEEP_S = 0.02  # each call sleeps this long, so each test takes some time

INPUTS = [
  (
    [
      i,
      i + 0.5,
      f"s{i}",
      (i, [i, {"k": {i, -i - 1}}]),
      {i: "key", "inf": -math.inf},
    ],
    {"kw": (i, frozenset({i}))},
  )
  for i in range(N)
]

# Binds what the program itself needs before its patch runs, and returns
# per call (its position among the calls, its args, its kwargs).
PROGRAM = """
import itertools as _itertools
import time as _time
_count = _itertools.count()
_next, _sleep = next, _time.sleep
{patch}
def f(*args, **kwargs):
  _sleep({sleep})
  return (_next(_count), args, kwargs)
"""

# The guest's modules, as the program finds them: by name in sys.modules
# (the wire module hangs off the package).
GUEST = """
import sys as _sys
_guest = {name: module for name, module in _sys.modules.items()
          if name.startswith("_sandbox")}
_wire = _guest["_sandbox_guest"].wire
_child = _guest["_sandbox_guest.child"]
"""

# Patches of the harness's helpers and the modules it uses. The first four
# made the old harness (which shuffled, decoded and encoded in the job
# process after the import) report, as an ok job, a run in input order or
# outputs the entry point never returned.
PATCHES = {
  # Every shuffle the module offers leaves the list as it is (or reverses
  # it), whatever instance or class the harness would use.
  "random": """
import os, random
def _keep(self_or_x, x=None, *a, **k):
  pass
def _reverse(self, x, *a, **k):
  x.reverse()
random.shuffle = _keep
random.Random.shuffle = _keep
random.SystemRandom.shuffle = _reverse
random.Random._randbelow = lambda self, n: 0
random._urandom = os.urandom = lambda n: bytes(n)
random.SystemRandom = random.Random
""",
  # A dumps that puts 42 in place of every result's output.
  "json": """
import json, json.encoder
_dumps = json.dumps
def _evil_dumps(obj, *a, **k):
  if isinstance(obj, dict) and "output" in obj:
    obj = dict(obj, output=42)
  return _dumps(obj, *a, **k)
json.dumps = _evil_dumps
json.loads = lambda *a, **k: {}
json.encoder.c_make_encoder = None
""",
  # The encoder and its helpers return 42 for whatever they are given.
  "encoder": GUEST
  + """
_wire.encode = lambda value, _depth=0: 42
_wire._encode_float = lambda value: 42
_wire._sorted_items = lambda items: [42]
_wire._type_name = lambda value: "int"
_wire._INT_LIMIT = 0
""",
  # The inputs each call gets.
  "decoder": GUEST
  + """
_wire.decode = lambda value, _depth=0: {} if type(value) is dict else [42]
""",
  # A list whose items cannot be set: a shuffle leaves it in order.
  "builtins.list": """
import builtins
class _Frozen(list):
  def __setitem__(self, i, v):
    pass
builtins.list = _Frozen
""",
  "time": """
import time
time.time = time.monotonic = time.perf_counter = lambda: 0.0
time.monotonic_ns = time.time_ns = lambda: 0
time.sleep = lambda s: None
""",
  # The guest's modules and the ones it uses, replaced by empty ones.
  "sys.modules": GUEST
  + """
_empty = type(_sys)("empty")
for _name in [*_guest, "json", "random", "signal", "os", "time", "io"]:
  _sys.modules[_name] = _empty
""",
  # Every builtin broken.
  "builtins": """
import builtins
_setattr, _error = setattr, RuntimeError
def _broken(*a, **k):
  raise _error("a patched builtin")
for _name in [*vars(builtins)]:
  if not _name.startswith("__"):
    _setattr(builtins, _name, _broken)
""",
  # The harness's own functions: frames, timer, writes, exit.
  "harness": GUEST
  + """
import os, signal
_write = os.write
_wire.write_frame = lambda fd, obj: None
_wire.pack_frame = lambda obj: b""
_wire.dumps = lambda obj: '{"event": "done"}'
_wire.MAX_DEPTH = -1
signal.setitimer = lambda *a, **k: (0.0, 0.0)
os.write = lambda fd, data: _write(fd, data) if fd != 3 else len(data)
os._exit = lambda code: None
_child._child_function = lambda job: None
_child._runner = lambda job: None
_child._describe = lambda exc: "patched"
_child._TestTimeout = ValueError
""",
}


@pytest.fixture(params=["gvisor", "process"])
def pool(request, gvisor_pool, process_pool):
  pool = gvisor_pool if request.param == "gvisor" else process_pool
  before = pool.stats["sandbox_errors"]
  yield pool
  assert pool.stats["sandbox_errors"] == before, "the patch broke the sandbox"
  after = pool.run(
    jobs.Job.function("def f(x):\n  return x + 1\n", "f", [([1], {})])
  )
  assert after.status == OK and after.tests[0].output == 2, after


def run(pool, patch: str) -> jobs.JobResult:
  code = PROGRAM.format(patch=patch, sleep=SLEEP_S)
  return pool.run(jobs.Job.function(code, "f", INPUTS))


def run_order(result: jobs.JobResult) -> list[int]:
  """The test indices in the order they ran, from the calls' positions."""
  positions = [t.output[0] for t in result.tests]
  assert sorted(positions) == list(range(N)), result
  return sorted(range(N), key=positions.__getitem__)


def assert_unsteered(result: jobs.JobResult) -> None:
  """Each test got its own inputs, in an order the server drew, timed."""
  assert result.status == OK, result
  for test, (args, kwargs) in zip(result.tests, INPUTS, strict=True):
    assert test.status == "ok", test
    assert type(test.output) is tuple, test
    assert test.output[1:] == (tuple(args), kwargs), test
    assert test.time_s > 0, test
  order = run_order(result)
  assert order not in (list(range(N)), list(range(N))[::-1]), order
  # The server's clock: the calls' sleeps happened, however `time` is.
  # Half of them: the server's window opens when it reads the job's start
  # frame, which on a loaded machine can come late (0.197 s of 0.2 s
  # measured under load).
  assert sum(t.time_s for t in result.tests) >= N * SLEEP_S / 2, result


@pytest.mark.parametrize("name", sorted(PATCHES))
def test_a_patch_on_import_changes_nothing_the_host_sees(pool, name):
  assert_unsteered(run(pool, PATCHES[name]))


def test_all_patches_at_once(pool):
  # Each patch binds what it needs before the next one breaks it.
  names = [n for n in PATCHES if n not in ("builtins", "sys.modules")]
  names += ["sys.modules", "builtins"]  # these two break the others
  assert_unsteered(run(pool, "\n".join(PATCHES[n] for n in names)))


def test_the_order_is_drawn_per_job(pool):
  orders = [run_order(run(pool, PATCHES["random"])) for _ in range(3)]
  assert len({tuple(o) for o in orders}) > 1, orders


def test_the_job_process_never_sees_the_test_indices(pool):
  # The code finds its job in memory: it holds the tests in the order they
  # run, and nothing that maps them back to the host's order.
  patch = """
import gc, sys
_jobs = [o for o in gc.get_objects()
         if type(o) is dict and "tests" in o and "entry_point" in o]
_seen = [[t["args"] for t in job["tests"]] for job in _jobs]
_keys = sorted({k for job in _jobs for k in job} | {
  k for o in gc.get_objects() if type(o) is dict and "job" in o for k in o})
"""
  code = PROGRAM.format(patch=patch, sleep=0) + (
    "def g(*args, **kwargs):\n  return (f(*args, **kwargs), _seen, _keys)\n"
  )
  job = jobs.Job.function(code, "g", INPUTS)
  result = pool.run(job)
  assert result.status == OK, result
  positions = [t.output[0][0] for t in result.tests]
  order = sorted(range(N), key=positions.__getitem__)
  _, seen, keys = result.tests[0].output
  assert seen, "the job was not found in the job process's memory"
  encoded = [job.to_frame(0, pool.config)["tests"][i]["args"] for i in order]
  for tests in seen:
    assert tests == encoded, (tests, order)
  assert "order" not in keys, keys


def test_stdio_runs_start_in_a_drawn_order(pool):
  # Each run is a new process: pids grow in the order the runs started.
  stdins = [str(i) for i in range(N)]
  job = jobs.Job.program("import os\nprint(os.getpid())\n", stdins)
  result = pool.run(job)
  assert result.status == OK, result
  pids = [int(t.stdout) for t in result.tests]
  order = sorted(range(N), key=pids.__getitem__)
  assert order not in (list(range(N)), list(range(N))[::-1]), pids


def test_the_per_test_limit_is_the_servers(pool):
  # The code lifts the limit in its own copy of the job, stops the timer
  # and ignores SIGALRM: the server still ends the test at its limit.
  patch = """
import gc, signal
for _job in gc.get_objects():
  if type(_job) is dict and "test_timeout_s" in _job:
    _job["test_timeout_s"] = _job["timeout_s"] = 1000.0
signal.setitimer = lambda *a, **k: (0.0, 0.0)
signal.signal(signal.SIGALRM, signal.SIG_IGN)
"""
  code = PROGRAM.format(patch=patch, sleep=30)
  job = jobs.Job.function(code, "f", INPUTS[:2], timeout_s=20.0)
  result = pool.run(job)
  assert result.status == types.JobStatus.TIMEOUT, result
  assert sorted(t.status for t in result.tests) == ["not_run", "timeout"]
  limit = pool.config.test_timeout_s
  assert result.duration_s < limit + 3.0, result


def test_each_test_gets_inputs_of_its_own(pool):
  # Equal inputs, decoded before the code runs: what one call does to its
  # arguments reaches no other call.
  code = """
def f(items, table):
  seen = (list(items), dict(table))
  items.append(len(items))
  table["seen"] = True
  return seen
"""
  inputs = [([[1, 2], {"a": 1}], {})] * 4
  result = pool.run(jobs.Job.function(code, "f", inputs))
  assert result.status == OK, result
  assert [t.output for t in result.tests] == [([1, 2], {"a": 1})] * 4


def test_the_run_reads_no_global_name():
  # Everything a function job's run calls once the code is imported is
  # bound before: a name looked up at call time is one the code could
  # patch. (Each function defined in `_runner` is part of the run.)
  code_objects = [
    c for c in child._runner.__code__.co_consts if hasattr(c, "co_code")
  ]
  assert {c.co_name for c in code_objects} >= {"run", "load", "describe"}
  found = []
  while code_objects:
    code = code_objects.pop()
    code_objects += [c for c in code.co_consts if hasattr(c, "co_code")]
    found += [
      (code.co_name, i.argval)
      for i in dis.get_instructions(code)
      if i.opname in ("LOAD_GLOBAL", "LOAD_NAME", "IMPORT_NAME")
    ]
  assert found == [], found
