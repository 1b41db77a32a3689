"""The judge and the observation reprs never raise, whatever came back.

A corpus of adversarial values (ints far past the int-to-str digit limit,
ints too large for a float where a float is expected, nesting as deep as
the wire allows, NaN and infinities inside containers, mixed sets and
dicts, very long strings and lists) goes through `values_match`,
`judge_test`, `grade_result`, `protocol.value_repr` and
`protocol.call_repr`; none may raise, reasons stay within
`judge.REASON_MAX_CHARS`, and equal plain values still match. Objects with
raising `__eq__`/`__repr__`/`__hash__` cannot cross the sandbox boundary,
so they are given to the judge directly. The end-to-end cases run real
solutions in the sandbox through `grade.grade_samples` and `CodeEnv`.
"""

import io
import json
import math
import random

import pytest

from codeagent_rl import grade
from codeagent_rl import plain_repr
from codeagent_rl import status as status_lib
from codeagent_rl.anticheat import config as anticheat_config
from codeagent_rl.anticheat import pipeline
from codeagent_rl.envs import code_env
from codeagent_rl.envs import protocol
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema
from configs import common

STRICT = judge.JudgeConfig()
RELAXED = judge.JudgeConfig(int_accepts_float=True)
CONFIGS = (STRICT, RELAXED)


def _roundtrip(value):
  """An equal copy built by the wire, as the sandbox would return it."""
  return wire.decode(wire.loads(wire.dumps(wire.encode(value))))


def _nested(levels: int, leaf, kind=list):
  value = leaf
  for _ in range(levels):
    value = kind([value]) if kind is not dict else {"k": value}
  return value


def _huge_ints() -> list[int]:
  out = []
  for digits in (309, 400, 401, 4299, 4300, 4301, 5000, 20000):
    out += [10**digits, -(10**digits), 10**digits - 1, -(10**digits) + 1]
  return out + [2**14285, 1 << 200_000, -(1 << 200_000) + 12345]


def _plain_corpus() -> list:
  """Adversarial plain data: every value here can cross the sandbox."""
  huge = _huge_ints()
  depth = wire.MAX_DEPTH
  return [
    *huge,
    [10**5000],
    (10**401,),
    {"x": -(10**5001)},
    {10**5000: 1, -(10**5000): 2.5},
    {10**5000, -(10**4301), 10**401},
    frozenset({10**5000, 1.5, "s"}),
    _nested(depth, 10**5000),
    _nested(depth, math.nan, tuple),
    _nested(depth, 1.5, dict),
    _nested(depth - 1, [math.inf, -0.0]),
    [math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1.7976931348623157e308],
    (math.nan,),
    {"n": math.nan, "i": -math.inf},
    {math.nan, -0.0, math.inf},
    frozenset({-math.inf, 0.0}),
    {1, "1", 1.5, None, (1,), frozenset({2})},
    {True, 2, "a", (1, 2), frozenset()},
    {1: "a", "1": 2, (1, 2): [3], None: 4.5, frozenset(): set(), 2.5: True},
    {(1, (2, 3)): {"k": (4,)}, (): [], (10**5000,): None},
    True,
    False,
    [True, 1, 1.0, False, 0, 0.0],
    {False: 0, 2: True},
    "x" * (1 << 20),
    "'\"" * 5000 + "\\",
    "\x00\ud800\U0001f600\u2028 </obs><submit>",
    list(range(1 << 20)),
    [10**5000] * 2000,
    [[1.5] * 1000] * 100,
    set(range(1 << 16)),
    {str(i): i for i in range(1 << 15)},
    None,
    0,
    -1,
    1.5,
    "",
    [],
    (),
    {},
    set(),
    frozenset(),
  ]


PLAIN = _plain_corpus()
# Equal copies built by the wire, as the sandbox would return them.
PLAIN_COPIES = [_roundtrip(v) for v in PLAIN]

# --- Hostile objects ----------------------------------------------------------

# Hostile methods raise only once armed, so sets and dicts can hold them.
_ARMED = [False]


class Boom(Exception):
  """What every hostile method raises."""


def _boom(self, *args, **kwargs):
  if _ARMED[0]:
    raise Boom("x" * 10_000)
  return NotImplemented


def _hostile(base: type) -> type:
  names = (
    "__eq__",
    "__ne__",
    "__lt__",
    "__gt__",
    "__repr__",
    "__str__",
    "__format__",
    "__bool__",
    "__len__",
    "__iter__",
    "__float__",
    "__index__",
    "__reduce_ex__",
    "__deepcopy__",
  )
  namespace = {}
  for name in names:
    if hasattr(base, name):
      original = getattr(base, name)

      def method(self, *args, _original=original, **kwargs):
        _boom(self)
        return _original(self, *args, **kwargs)

      namespace[name] = method

  def hash_(self, _base=base):
    _boom(self)
    return _base.__hash__(self) if _base.__hash__ else 0

  namespace["__hash__"] = hash_
  return type(f"Hostile{base.__name__.title()}", (base,), namespace)


HostileInt = _hostile(int)
HostileFloat = _hostile(float)
HostileStr = _hostile(str)
HostileTuple = _hostile(tuple)
HostileList = _hostile(list)
HostileDict = _hostile(dict)


def _hostile_corpus() -> list:
  """Built disarmed (sets hash their elements); the caller arms them."""
  return [
    HostileInt(5),
    HostileInt(10**400),
    HostileFloat(1.5),
    HostileStr("a"),
    HostileTuple((1, 2)),
    HostileList([1, 2]),
    HostileDict({"a": 1}),
    [HostileInt(5)],
    (HostileFloat(2.0),),
    {HostileStr("a"): 1},
    {"a": HostileList([1])},
    {HostileInt(1), 2},
    frozenset({HostileTuple((1,))}),
    {HostileFloat(0.5): HostileDict()},
    {HostileStr("k"): HostileList([1])},
  ]


@pytest.fixture
def hostile():
  values = _hostile_corpus()
  _ARMED[0] = True
  try:
    yield values
  finally:
    _ARMED[0] = False


# --- Helpers ------------------------------------------------------------------

WANTS = [
  7,
  -7,
  10**5000,
  1.5,
  0.0,
  math.nan,
  math.inf,
  True,
  None,
  "s",
  [1, 2],
  [1.5],
  (1,),
  {"x": 1},
  {1: "a", (1, 2): [3]},
  {1, 2},
  {1.5, 2.5},
  frozenset({1.5, "s"}),
  _nested(wire.MAX_DEPTH, 7),
  _nested(wire.MAX_DEPTH, 1.5, dict),
]


def _check_match(got, want, config) -> bool:
  ok, why = judge.values_match(got, want, config)
  assert type(ok) is bool and type(why) is str
  assert len(why) <= judge.REASON_MAX_CHARS
  assert ok == (why == "")
  return ok


def _function_task(tests: list[dict], metadata=None) -> schema.Task:
  return schema.Task(
    task_id="t",
    prompt="p",
    entry_point="f",
    kind="function",
    visible_tests=(),
    hidden_tests=tuple(tests),
    heldout_tests=(),
    reference_solution="",
    metadata=metadata or {},
  )


# Checkers that trip over huge or hostile outputs in several ways.
CHECKERS = [
  "def check(args, kwargs, output):\n  assert output == 1, output\n",
  "def check(args, kwargs, output):\n  return str(output) == '1'\n",
  "def check(args, kwargs, output):\n  raise ValueError(f'{output!r}')\n",
  "def check(args, kwargs, output):\n  raise KeyError(output)\n",
  "def check(args, kwargs, output):\n  return abs(output - 1.5) < 1e-6\n",
]


# --- The corpus ---------------------------------------------------------------


def test_plain_corpus_crosses_the_wire():
  for value in PLAIN:
    wire.encode(value)  # raises if the corpus held something untransmittable


@pytest.mark.parametrize("config", CONFIGS, ids=["strict", "relaxed"])
def test_values_match_never_raises_on_plain_data(config):
  corpus = PLAIN
  for got in corpus:
    for want in WANTS:
      _check_match(got, want, config)
  # Corpus values as expected values too (tasks may hold huge ints).
  for want in corpus:
    for got in (7, 1.5, 10**5000, [1], {1.5}, {"x": 1}, "s", math.nan):
      _check_match(got, want, config)


@pytest.mark.parametrize("config", CONFIGS, ids=["strict", "relaxed"])
def test_equal_plain_values_match(config):
  for copy, value in zip(PLAIN_COPIES, PLAIN, strict=True):
    assert _check_match(copy, value, config)
  for value in WANTS:
    assert _check_match(_roundtrip(value), value, config)


def test_huge_int_where_a_float_is_expected():
  for got in (10**309, 10**400, -(10**401), 10**5000, 1 << 200_000):
    for want in (1.5, math.inf, -math.inf, 1.7976931348623157e308):
      ok, why = judge.values_match(got, want)
      assert not ok and "int too large for a float" in why
  # Within float range an int still compares numerically.
  assert judge.values_match(10**308, 1e308)[0]


def test_huge_int_reasons_are_bounded():
  for got in _huge_ints():
    for want in _huge_ints()[:6]:
      ok, why = judge.values_match(got, want)
      assert ok == (got == want) and len(why) <= judge.REASON_MAX_CHARS
  ok, why = judge.values_match(10**5000, 10**5000 + 1)
  assert why == "<int of ~5001 digits> != <int of ~5001 digits>"
  ok, why = judge.values_match([[-(10**4301)]], [[7]])
  assert why == "[0]: [0]: <negative int of ~4302 digits> != 7"


def test_deep_reasons_keep_the_difference():
  got = _nested(wire.MAX_DEPTH, [1, 2, 3])
  want = _nested(wire.MAX_DEPTH, [1, 2, 10**5000])
  ok, why = judge.values_match(got, want)
  assert not ok and len(why) <= judge.REASON_MAX_CHARS
  assert why.startswith("[0]: [0]: ") and "..." in why
  assert why.endswith("[2]: 3 != <int of ~5001 digits>")


def test_int_leaf_replaced_by_an_equal_float():
  # Property: any int leaf (in lists, tuples, dict values) turned into the
  # equal float fails the strict judge and passes the relaxed one.
  rng = random.Random(0)
  for _ in range(300):
    want = [rng.randrange(-(2**53), 2**53) for _ in range(rng.randrange(1, 6))]
    shape = rng.choice(("list", "tuple", "dict"))
    got = list(want)
    got[rng.randrange(len(got))] *= 1.0
    if shape == "tuple":
      want, got = tuple(want), tuple(got)
    elif shape == "dict":
      want = {str(i): v for i, v in enumerate(want)}
      got = {str(i): v for i, v in enumerate(got)}
    ok, why = judge.values_match(got, want, STRICT)
    assert not ok and "type float where int was expected" in why
    assert judge.values_match(got, want, RELAXED) == (True, "")


def _is_hashable(value) -> bool:
  try:
    hash(value)
  except TypeError:
    return False
  return True


def test_random_plain_pairs_never_raise():
  rng = random.Random(1)
  atoms = [
    0,
    1,
    -1,
    True,
    False,
    None,
    "",
    "a'\"",
    0.0,
    -0.0,
    1.5,
    math.nan,
    math.inf,
    -math.inf,
    10**400,
    -(10**5000),
  ]

  def value(depth=0):
    roll = rng.random()
    if depth > 3 or roll < 0.4:
      return rng.choice(atoms)
    items = [value(depth + 1) for _ in range(rng.randrange(4))]
    hashable = [v for v in items if _is_hashable(v)]
    if roll < 0.55:
      return items
    if roll < 0.7:
      return tuple(items)
    if roll < 0.8:
      return set(hashable)
    if roll < 0.85:
      return frozenset(hashable)
    return {k: v for k, v in zip(hashable, items, strict=False)}

  for _ in range(2000):
    got, want = value(), value()
    for config in CONFIGS:
      _check_match(got, want, config)
      assert _check_match(_roundtrip(want), want, config)
    assert len(protocol.value_repr(got)) <= protocol.VALUE_MAX_CHARS


# --- Hostile objects ----------------------------------------------------------


def test_hostile_objects_never_match_and_never_raise(hostile):
  for got in hostile:
    for want in [*WANTS, 5, 1.5, "a", (1, 2), [1, 2], {"a": 1}, {1, 2}]:
      for config in CONFIGS:
        assert not _check_match(got, want, config)


def test_hostile_objects_in_judge_test(hostile):
  for got in hostile:
    run = jobs.TestRun("ok", output=got)
    tests = [{"args": [], "expected": w} for w in (5, 1.5, [1, 2])]
    tests += [{"args": [], "checker": c} for c in CHECKERS]
    for test in tests:
      verdict = judge.judge_test(jobs.FUNCTION, test, run, STRICT)
      assert not verdict.passed
      assert len(verdict.reason) <= judge.REASON_MAX_CHARS


def test_hostile_objects_in_reprs(hostile):
  for value in hostile:
    text = protocol.value_repr(value)
    assert len(text) <= protocol.VALUE_MAX_CHARS
    assert "Hostile" in text
    assert plain_repr.plain_repr(value) == plain_repr.plain_repr(value)
    call = protocol.call_repr("f", [value], {"k": value})
    assert call.startswith("f(") and "Hostile" in call
    if type(value) is dict:  # keyword names that are not plain str
      assert "Hostile" in protocol.call_repr("f", [], value, None)


# --- judge_test, grade_result and the reprs -----------------------------------


def test_judge_test_never_raises():
  corpus = PLAIN
  for got in corpus:
    run = jobs.TestRun("ok", output=got)
    tests = [{"args": [], "expected": w} for w in WANTS]
    tests += [{"args": [], "checker": c} for c in CHECKERS]
    for test in tests:
      verdict = judge.judge_test(jobs.FUNCTION, test, run, STRICT)
      assert len(verdict.reason) <= judge.REASON_MAX_CHARS, verdict.reason
  long = "e" * (1 << 20)
  for run in (
    jobs.TestRun("error", error=long),
    jobs.TestRun("ok", stdout=long),
    jobs.TestRun("bad_output", error=long),
  ):
    for kind, test in (
      (jobs.FUNCTION, {"args": [], "expected": 1}),
      (jobs.STDIO, {"stdin": "", "expected_stdout": "x"}),
    ):
      verdict = judge.judge_test(kind, test, run, STRICT)
      assert not verdict.passed
      assert len(verdict.reason) <= judge.REASON_MAX_CHARS


def test_judge_test_safety_net():
  # A test the schema would refuse still gets a verdict, not an exception.
  run = jobs.TestRun("ok", output=1)
  verdict = judge.judge_test(jobs.FUNCTION, {"args": []}, run, STRICT)
  assert verdict == judge.Verdict(False, "judge could not compare: KeyError")


@pytest.mark.parametrize(
  "metadata", [{}, {"judge": {"int_accepts_float": True}}]
)
def test_grade_result_never_raises(metadata):
  corpus = PLAIN
  wants = [WANTS[i % len(WANTS)] for i in range(len(corpus))]
  tests = [{"args": [i], "expected": w} for i, w in enumerate(wants)]
  tests += [{"args": [0], "checker": c} for c in CHECKERS]
  task = _function_task(tests, metadata)
  outputs = corpus + [10**5000] * len(CHECKERS)
  result = jobs.JobResult(
    status=status_lib.JobStatus.OK,
    tests=tuple(jobs.TestRun("ok", output=o) for o in outputs),
  )
  graded = judge.grade_result(task, result)
  assert graded.suite_a.total == len(tests)
  for verdict in graded.suite_a.verdicts:
    assert len(verdict.reason) <= judge.REASON_MAX_CHARS
  json.dumps(graded.to_json())
  # Equal outputs pass.
  same = jobs.JobResult(
    status=status_lib.JobStatus.OK,
    tests=tuple(jobs.TestRun("ok", output=_roundtrip(w)) for w in wants),
  )
  graded = judge.grade_result(_function_task(tests[: len(wants)]), same)
  assert graded.suite_a.passed == len(wants)


@pytest.mark.parametrize("max_chars", [None, 0, 3, 10, 60, 200])
def test_value_repr_and_call_repr_never_raise(max_chars):
  for value, copy in zip(PLAIN, PLAIN_COPIES, strict=True):
    text = protocol.value_repr(value, max_chars)
    assert type(text) is str
    if max_chars is not None:
      assert len(text) <= max(max_chars, 3)
    assert text == protocol.value_repr(copy, max_chars)
    if max_chars is not None:  # unbounded, it is value_repr twice over
      call = protocol.call_repr("f", [value, 10**5000], {"k": value}, max_chars)
      assert call.startswith("f(") and call.endswith(")")


def test_value_repr_of_huge_ints():
  assert protocol.value_repr(10**5000) == "<int of ~5001 digits>"
  assert protocol.value_repr(-(10**5000)) == "<negative int of ~5001 digits>"
  assert protocol.value_repr(10**4299) == "1" + "0" * 56 + "..."
  assert protocol.value_repr(10**4300 - 1, None) == "9" * 4300
  assert protocol.value_repr([10**5000, 1], None) == (
    "[<int of ~5001 digits>, 1]"
  )
  assert protocol.call_repr("f", [10**5000], {"b": -(10**4301)}) == (
    "f(<int of ~5001 digits>, b=<negative int of ~4302 digits>)"
  )


def test_value_repr_stops_early():
  # A cut repr of a long string or list is a prefix of the full repr.
  text = "'" * 10 + '"' + "a" * (1 << 20)
  assert protocol.value_repr(text, 20) == repr(text)[:17] + "..."
  items = list(range(1 << 20))
  assert protocol.value_repr(items, 20) == repr(items)[:17] + "..."
  mixed = {(i, str(i)) for i in range(1000)}
  full = protocol.value_repr(mixed, None)
  assert protocol.value_repr(mixed, 50) == full[:47] + "..."


# --- End to end through the sandbox -------------------------------------------

POW = "def f(a, b):\n  return a ** b\n"
# Returns ints where floats are expected: 401 digits, and 5001.
BIG_FOR_FLOAT = "def g(x):\n  return 10 ** (400 if x < 2 else 5000)\n"


def _pow_task() -> schema.Task:
  return schema.Task(
    task_id="powmod",
    prompt="Return a ** b % 1000.",
    entry_point="f",
    kind="function",
    visible_tests=({"args": [10, 5000], "expected": 0},),
    hidden_tests=(
      {"args": [10, 5000], "expected": 0},
      {"args": [-10, 5001], "expected": 0},
      {"args": [2, 10], "expected": 24},
    ),
    heldout_tests=({"args": [7, 3], "expected": 343},),
    reference_solution="def f(a, b):\n  return pow(a, b, 1000)\n",
    metadata={},
  )


def _float_task() -> schema.Task:
  return schema.Task(
    task_id="ratio",
    prompt="Return a float.",
    entry_point="g",
    kind="function",
    visible_tests=({"args": [1], "expected": 1.5},),
    hidden_tests=(
      {"args": [1], "expected": 1.5},
      {"args": [3], "expected": [1.5]},
    ),
    heldout_tests=({"args": [2], "expected": 2.5},),
    reference_solution="def g(x):\n  return x + 0.5 if x < 3 else [1.5]\n",
    metadata={"judge": {"int_accepts_float": True}},
  )


@pytest.mark.parametrize(
  "backend,anticheat",
  [("process_pool", False), ("process_pool", True), ("gvisor_pool", False)],
)
def test_grade_samples_writes_every_line(request, backend, anticheat):
  pool = request.getfixturevalue(backend)
  if anticheat:  # what `python -m codeagent_rl.grade` runs by default
    anticheat = pipeline.AntiCheat.from_config(
      anticheat_config.AntiCheatConfig.from_config(
        common.get_anticheat_config()
      )
    )
  else:
    anticheat = None
  tasks = {t.task_id: t for t in (_pow_task(), _float_task())}
  rows = [
    ("powmod", POW),
    ("ratio", BIG_FOR_FLOAT),
    ("ratio", "def g(x):\n  return [10 ** 400] if x == 3 else 10 ** 400\n"),
    ("powmod", tasks["powmod"].reference_solution),
    ("ratio", tasks["ratio"].reference_solution),
  ]
  samples = [
    grade.Sample(index=i, line=i + 1, task_id=t, completion=c)
    for i, (t, c) in enumerate(rows)
  ]
  out = io.StringIO()
  lines = grade.grade_samples(pool, tasks, samples, out, anticheat=anticheat)
  assert [json.loads(x) for x in out.getvalue().splitlines()] == lines
  assert len(lines) == len(samples)
  assert [x["status"] for x in lines] == ["ok"] * len(samples)
  pow_line, big_line, list_line, pow_ref, ratio_ref = lines
  # 10**5000 % 1000 == 0, but 10**5000 itself is not 0; 2**10 is not 24.
  assert pow_line["suite_a"] == {"passed": 0, "total": 3}
  assert pow_line["suite_b"] == {"passed": 1, "total": 1}
  assert big_line["suite_a"]["passed"] == list_line["suite_a"]["passed"] == 0
  assert pow_ref["suite_a"] == {"passed": 3, "total": 3}
  assert ratio_ref["suite_a"] == {"passed": 2, "total": 2}


def test_grade_verdicts_through_the_sandbox(process_pool):
  graded = judge.grade(process_pool, _pow_task(), POW)
  reasons = [v.reason for v in graded.suite_a.verdicts]
  assert reasons == [
    "<int of ~5001 digits> != 0",
    "<negative int of ~5002 digits> != 0",
    "1024 != 24",
  ]
  graded = judge.grade(process_pool, _float_task(), BIG_FOR_FLOAT)
  reasons = [v.reason for v in graded.suite_a.verdicts]
  assert reasons == [
    "1" + "0" * 76 + "... != 1.5 (int too large for a float)",
    "type int where list was expected",
  ]


def test_code_env_run_observes_huge_values(process_pool):
  env = code_env.CodeEnv(
    process_pool,
    tokenizer_lib.ByteTokenizer(),
    code_env.EnvConfig(
      max_turns=4,
      max_tokens_per_turn=400,
      max_total_tokens=4000,
      max_wall_s=60.0,
      obs_max_bytes=400,
    ),
  )
  state = env.reset(_pow_task())
  state, step = env.step(state, f"<run>{POW}</run>")
  assert step.observation.body == (
    "tests: 0/1 passed\n"
    "test 1: fail\n"
    "error: test 1: f(10, 5000) returned <int of ~5001 digits>, expected 0\n"
  )
  state = env.reset(_float_task())
  state, step = env.step(state, f"<run>{BIG_FOR_FLOAT}</run>")
  assert step.observation.body.startswith(
    "tests: 0/1 passed\ntest 1: fail\nerror: test 1: g(1) returned 1000"
  )
  state, step = env.step(state, f"<submit>{BIG_FOR_FLOAT}</submit><eos>")
  assert step.done and step.outcome.executed
  assert step.outcome.suite_a_passed == 0
