r"""Deterministic synthetic Python function tasks, with SFT demonstration plans.

    python -m codeagent_rl.tasks.synthetic --split=train --num_tasks=1000 \
      --seed=0 --out=/tmp/train.jsonl --demos_out=/tmp/train_demos.jsonl

A *family* (`FAMILIES`) is a kind of small function (affine map, caesar
shift, run-length encoding, ...) with three difficulty levels. Each level has
a finite, enumerated parameter space; a parameter tuple belongs to the train
or the test split by the rank of its SHA-256 digest within its space (the
first `TEST_FRACTION` go to test), so the splits are disjoint and neither is
ever empty. A task renders a prompt, a reference solution (trusted, run here
in-process to compute every expected value) and a bug (off-by-one, wrong
constant, boundary), and gets three suites with distinct inputs: 2-3 visible
tests, 5-10 hidden tests (suite A) and 20-24 held-out tests (suite B, which
holds the family's edge cases that no visible test shows: zero, negatives,
empty inputs, boundaries, large values). The visible tests always include an
input the bug fails, and suites A and B each expect at least two distinct
values, so no constant passes them. No test of suite A or B equals (entry
point, arguments and expected value) a visible test of any task generated
with it, the train and test splits of a run together (`generate_sets`): such
a test is replaced by a new input of the task's family, from beyond the
family's usual range where that range is used up (`Family.spare`). At
configs/tiny.py's 1096 tasks 10,657 of 34,385 tests were such copies
(`sign(0) == -1` is shown by many prompts); replacing them leaves every
suite its size.

With `suite_a="weak"` suite A is instead the visible tests again plus
one input no prompt shows, judged by a checker that accepts any value of
the return type (`LAX_CHECKERS`), as the original HumanEval's tests often
were; suite B stays as it is. With `oracle_tests=N` each task gets an
oracle suite of up to N more tests in `metadata["oracle_tests"]`, drawn
last from the task's own stream: no input of another suite, no visible
test of any task. Only metrics read it (`tasks/oracle.py`).

Demonstration plans (`DemoPlan`) are action sequences for SFT; the
environment renders the observations later. Kinds: `single_turn` (submit the
reference), `multi_turn` (run the bug on the visible tests, then submit the
reference), and flawed kinds for RL to improve on: `wrong_final` (submit
the bug), `hardcoded` (an if-ladder over the visible tests with a constant
fallback of the return type), `early_exit` (`sys.exit(0)` at module top or
inside the function), `weak_assert` (the bug with the visible inputs it
fails special-cased; none where that passes suite B) and `swallow` (a
lookup of the visible tests whose error elsewhere is caught and answered
with a constant of the return type). The last three pass a weak suite A.
Each task gets a plan of each kind with the probability set in
`SyntheticConfig`.

Task i's prompt, reference, visible tests and plans depend only on the
seed, split, families and difficulty weights and on the tasks before it
(never on `num_tasks` or the demo probabilities); its suites A and B also on
the visible tests of the other tasks generated with it. The same configs
give byte-identical files. The command line writes one split, whose suites
avoid that split's visible tests only.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
import copy
import dataclasses
import functools
import hashlib
import itertools
import json
import math
import os
import random
from typing import Any

from absl import app
from absl import flags

from codeagent_rl import jsonl
from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import families
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import oracle
from codeagent_rl.tasks import schema
from codeagent_rl.tasks.families import base as family_base

SPLITS = ("train", "test")
LEVELS = family_base.LEVELS
# Share of each (family, level) parameter space that is held out for test.
TEST_FRACTION = 0.25
NUM_VISIBLE = (2, 3)
NUM_HIDDEN = (5, 10)
NUM_HELDOUT = 24
MIN_HELDOUT = 20
# Most bytes of prompt + reference solution per level (the tiny byte-level
# model has a few hundred tokens of context).
BYTE_BUDGET = {1: 300, 2: 420, 3: 500}
DEMO_KINDS = (
  "single_turn",
  "multi_turn",
  "wrong_final",
  "hardcoded",
  "early_exit",
  "weak_assert",
  "swallow",
)
CORRECT_KINDS = ("single_turn", "multi_turn")
# Plan kinds of the interactive probe tasks (`tasks.probes`).
PROBE_DEMO_KINDS = ("bisect", "scan", "give_up", "off_by_one")
PLAN_KINDS = DEMO_KINDS + PROBE_DEMO_KINDS
ACTIONS = ("run", "submit")
BIG = family_base.BIG
_FALLBACKS = {"int": 0, "str": "", "bool": False, "list[int]": []}
# How suite A is built: "strong" (5-10 tests of inputs no prompt shows) or
# "weak" (the visible tests again, plus one test whose checker accepts any
# value of the return type), as the original HumanEval's tests often were.
SUITE_A_MODES = ("strong", "weak")
# The lax checker of a weak suite A, per return type: the type, nothing else.
LAX_CHECKERS = {
  "int": "def check(args, kwargs, output):\n  return type(output) is int\n",
  "str": "def check(args, kwargs, output):\n  return type(output) is str\n",
  "bool": "def check(args, kwargs, output):\n  return type(output) is bool\n",
  "list[int]": (
    "def check(args, kwargs, output):\n"
    "  return type(output) is list and all(type(v) is int for v in output)\n"
  ),
}
# Metadata key of a task's oracle suite (`oracle_tests`): tests no reward,
# stage or prompt uses, which only metrics read (`tasks/oracle.py`).
ORACLE_KEY = oracle.ORACLE_KEY


class DemoFormatError(ValueError):
  """A demo plan or plan file is malformed; the message names where."""


# --- Config and plans ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
  """What to generate.

  Attributes:
    num_tasks: number of tasks.
    seed: the only source of randomness.
    split: "train" or "test" (disjoint parameter tuples).
    difficulty_weights: relative weights of levels 1, 2 and 3.
    families: names from `FAMILIES` to draw from; empty means all.
    single_turn: probability that a task gets a `single_turn` plan.
    multi_turn: probability of a `multi_turn` plan (run bug, submit fix).
    wrong_final: probability of a `wrong_final` plan (bug submitted).
    hardcoded: probability of a `hardcoded` plan (visible tests hard-coded).
    early_exit: probability of an `early_exit` plan (`sys.exit(0)`).
    weak_assert: probability of a `weak_assert` plan (the bug, with the
      visible inputs it fails special-cased).
    swallow: probability of a `swallow` plan (a lookup of the visible
      tests that raises elsewhere, the exception swallowed).
    suite_a: "strong" or "weak" (`SUITE_A_MODES`).
    oracle_tests: tests of each task's oracle suite (`ORACLE_KEY`): drawn
      from the task's own stream, apart from every other suite and every
      visible test; 0: none. A family whose inputs run out keeps fewer.
  """

  num_tasks: int = 100
  seed: int = 0
  split: str = "train"
  difficulty_weights: tuple[float, ...] = (0.5, 0.3, 0.2)
  families: tuple[str, ...] = ()
  single_turn: float = 1.0
  multi_turn: float = 0.5
  wrong_final: float = 0.1
  hardcoded: float = 0.05
  early_exit: float = 0.05
  weak_assert: float = 0.0
  swallow: float = 0.0
  suite_a: str = "strong"
  oracle_tests: int = 0

  def __post_init__(self):
    for name in ("num_tasks", "seed"):
      value = getattr(self, name)
      if type(value) is not int or value < (1 if name == "num_tasks" else 0):
        raise ValueError(
          f"SyntheticConfig.{name}={value!r}: must be an int >="
          f" {1 if name == 'num_tasks' else 0}."
        )
    if self.split not in SPLITS:
      raise ValueError(
        f"SyntheticConfig.split={self.split!r}: must be one of {SPLITS}."
      )
    weights = tuple(self.difficulty_weights)
    if not (
      len(weights) == len(LEVELS)
      and all(_is_real(w) and 0 <= w < math.inf for w in weights)
      and sum(weights) > 0
    ):
      raise ValueError(
        f"SyntheticConfig.difficulty_weights={self.difficulty_weights!r}:"
        f" needs {len(LEVELS)} finite weights >= 0 with a positive sum."
      )
    object.__setattr__(self, "difficulty_weights", weights)
    families = tuple(self.families)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or len(set(families)) != len(families):
      raise ValueError(
        f"SyntheticConfig.families={self.families!r}: unknown or repeated"
        f" names {unknown}; choose distinct names from {sorted(FAMILIES)}."
      )
    object.__setattr__(self, "families", families)
    if self.suite_a not in SUITE_A_MODES:
      raise ValueError(
        f"SyntheticConfig.suite_a={self.suite_a!r}: must be one of"
        f" {SUITE_A_MODES}."
      )
    if type(self.oracle_tests) is not int or self.oracle_tests < 0:
      raise ValueError(
        f"SyntheticConfig.oracle_tests={self.oracle_tests!r}: must be an"
        " int >= 0."
      )
    for kind in DEMO_KINDS:
      value = getattr(self, kind)
      if not (_is_real(value) and 0 <= value <= 1):
        raise ValueError(
          f"SyntheticConfig.{kind}={value!r}: must be a probability in [0, 1]."
        )


def _is_real(value: Any) -> bool:
  return type(value) in (int, float) and not math.isnan(value)


@dataclasses.dataclass(frozen=True)
class DemoPlan:
  """The actions of one demonstration; observations come from the env.

  Attributes:
    task_id: the task it solves (or fails to).
    kind: one of `PLAN_KINDS`.
    actions: ("run", code) steps, then exactly one final ("submit", code).
  """

  task_id: str
  kind: str
  actions: tuple[tuple[str, str], ...]

  def __post_init__(self):
    if not isinstance(self.task_id, str) or not self.task_id:
      raise DemoFormatError(
        f"task_id: {self.task_id!r} is not a non-empty str."
      )
    if self.kind not in PLAN_KINDS:
      raise DemoFormatError(f"kind: {self.kind!r} is not one of {PLAN_KINDS}.")
    if not isinstance(self.actions, list | tuple) or not self.actions:
      raise DemoFormatError("actions: must be a non-empty list.")
    actions = []
    for i, action in enumerate(self.actions):
      if not (
        isinstance(action, list | tuple)
        and len(action) == 2
        and action[0] in ACTIONS
        and isinstance(action[1], str)
      ):
        raise DemoFormatError(
          f"actions[{i}]: must be [verb, code] with verb in {ACTIONS}."
        )
      last = i == len(self.actions) - 1
      if (action[0] == "submit") != last:
        raise DemoFormatError(
          f"actions[{i}]: only the last action is (and must be) a submit."
        )
      actions.append((action[0], action[1]))
    object.__setattr__(self, "actions", tuple(actions))


def write_demo_plans(path: str | os.PathLike, plans: Iterable[DemoPlan]):
  """Writes plans as JSONL: {"task_id", "kind", "actions": [[verb, code]]}."""
  lines = [
    wire.dumps(
      {"task_id": p.task_id, "kind": p.kind, "actions": list(p.actions)}
    )
    + "\n"
    for p in plans
  ]
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(lines)


def read_demo_plans(path: str | os.PathLike) -> list[DemoPlan]:
  """Reads a plan file written by `write_demo_plans`.

  Raises:
    DemoFormatError: naming the file, line and field of the first problem.
  """
  plans = []
  for line in jsonl.read(path, DemoFormatError, loads=wire.loads):
    obj = line.value
    if not isinstance(obj, dict) or set(obj) != {"task_id", "kind", "actions"}:
      raise DemoFormatError(
        f"{line.where}: needs exactly the keys actions, kind, task_id."
      )
    try:
      plans.append(DemoPlan(**obj))
    except DemoFormatError as e:
      raise DemoFormatError(f"{line.where}: {e}") from None
  return plans


# --- Families -----------------------------------------------------------------

# Re-exported from `families.base`, where the family modules share them.
GenerationError = family_base.GenerationError
Family = family_base.Family
Variant = family_base.Variant

# Every family, in the order of the family modules (`families`).
FAMILIES: dict[str, Family] = families.FAMILIES


# --- Splits -------------------------------------------------------------------


def _params_key(family: str, level: int, params: dict) -> str:
  return wire.dumps([family, level, wire.encode(params)])


@functools.cache
def _split_spaces(family: str, level: int) -> dict[str, tuple[dict, ...]]:
  """The level's parameter space cut into splits by rank of digest."""
  space = FAMILIES[family].spaces[level]
  if len(space) < 2:
    raise GenerationError(f"{family} level {level}: space too small to split.")
  digests = [
    hashlib.sha256(_params_key(family, level, p).encode()).hexdigest()
    for p in space
  ]
  n_test = max(1, round(len(space) * TEST_FRACTION))
  test = set(sorted(digests)[:n_test])
  # Each split keeps the space's own order (readable, stable).
  return {
    "test": tuple(p for p, d in zip(space, digests, strict=True) if d in test),
    "train": tuple(
      p for p, d in zip(space, digests, strict=True) if d not in test
    ),
  }


def parameter_space(family: str, level: int, split: str) -> tuple[dict, ...]:
  """Every parameter dict of `family` at `level` that belongs to `split`."""
  return _split_spaces(family, level)[split]


def split_of(family: str, level: int, params: dict) -> str:
  """The split of a parameter dict (also as in task metadata: lists for tuples).

  Raises:
    KeyError: if `params` is not in the level's space.
  """
  key = json.dumps(params, sort_keys=True)
  if key not in _splits_by_key(family, level):
    raise KeyError(f"{family} level {level} has no parameters {params}.")
  return _splits_by_key(family, level)[key]


@functools.cache
def _splits_by_key(family: str, level: int) -> dict[str, str]:
  return {
    json.dumps(p, sort_keys=True): split
    for split in SPLITS
    for p in parameter_space(family, level, split)
  }


# --- Running trusted code -----------------------------------------------------


def load_function(source: str, entry: str) -> Callable:
  """Runs trusted `source` in a fresh namespace and returns `entry` from it.

  Only for code generated here: it runs in this process, unsandboxed.
  """
  namespace = {"__name__": "synthetic_task"}
  exec(compile(source, f"<{entry}>", "exec"), namespace)
  return namespace[entry]


def _call(fn: Callable, args: list) -> tuple[bool, Any]:
  """(True, output) or (False, exception); inputs are deep-copied."""
  try:
    return True, fn(*copy.deepcopy(args))
  except Exception as e:  # A bug may raise; that counts as a failed test.
    return False, e


def _matches(got: Any, want: Any) -> bool:
  """Equality as the judge sees it (its default config)."""
  return judge.values_match(got, want)[0]


def passes(fn: Callable, test: dict) -> bool:
  """Whether `fn` passes one function test (`args` + `expected`)."""
  ok, out = _call(fn, test["args"])
  return ok and _matches(out, test["expected"])


# --- Tasks --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Draft:
  """A task before its suites are separated, with what the plans need.

  Attributes:
    task: the task, suites as first drawn.
    family: its family.
    variant: its rendered reference and bug.
    level: its difficulty.
    params: its parameters (as in the family's space).
    stream: the seed string of its random streams.
    expected: args -> the reference's output (cached).
  """

  task: schema.Task
  family: Family
  variant: Variant
  level: int
  params: dict
  stream: str
  expected: Callable[[list], Any]


def _inputs(rng, fam, level, params) -> tuple[list[list], list[list]]:
  """Distinct (random inputs, edge inputs); edges first in priority."""
  # repr tells our argument values (ints, strs, int lists) apart.
  seen, edges = set(), []
  for args in fam.edges(level, params):
    key = repr(args)
    if key not in seen:
      seen.add(key)
      edges.append(args)
  # Spare inputs give the suites room to expose the bug and vary outputs.
  need = 2 * (NUM_VISIBLE[1] + NUM_HIDDEN[1] + NUM_HELDOUT)
  randoms = []
  for _ in range(4 * need):
    if len(randoms) == need:
      break
    args = fam.sample(rng, level, params)
    key = repr(args)
    if key not in seen:
      seen.add(key)
      randoms.append(args)
  return randoms, edges


def _diversify(chosen: list, pool: list, expected: Callable) -> None:
  """Swaps one item in from `pool` so `chosen` has two distinct outputs.

  Raises:
    GenerationError: if `pool` has no other output (a constant function).
  """
  values = {wire.encode_json(expected(a)) for a in chosen}
  if len(values) > 1:
    return
  for i, args in enumerate(pool):
    if wire.encode_json(expected(args)) not in values:
      pool[i], chosen[-1] = chosen[-1], args
      return
  raise GenerationError(f"every input gives {values.pop()}")


def _make_task(config, index, fam, stream, used) -> _Draft:
  """Draws the level and parameters of task `index`, then its suites."""
  rng = random.Random(stream + ":task")
  for _ in range(10):  # Avoid repeating a (family, level, params) if we can.
    level = rng.choices(LEVELS, weights=config.difficulty_weights)[0]
    params = rng.choice(parameter_space(fam.name, level, config.split))
    key = _params_key(fam.name, level, params)
    if key not in used:
      break
  used.add(key)
  variant = fam.render(level, params)
  ref_src = fam.source(variant.ref)
  where = f"{fam.name} level {level} {params}"
  ref, bug = (
    load_function(ref_src, fam.name),
    load_function(fam.source(variant.bug), fam.name),
  )

  outputs = {}

  def expected(args):
    key = wire.encode_json(args)
    if key not in outputs:
      ok, outputs[key] = _call(ref, args)
      if not ok:
        raise GenerationError(f"{where}: reference raised {outputs[key]!r}.")
    return outputs[key]

  randoms, edges = _inputs(rng, fam, level, params)
  n_vis, n_a = rng.randint(*NUM_VISIBLE), rng.randint(*NUM_HIDDEN)
  if len(randoms) < n_vis + n_a + 1:
    raise GenerationError(f"{where}: too few distinct random inputs.")

  def bug_fails(args):
    return not passes(bug, {"args": args, "expected": expected(args)})

  visible, rest = randoms[:n_vis], randoms[n_vis:]
  if not any(map(bug_fails, visible)):
    failing = [i for i, a in enumerate(rest) if bug_fails(a)]
    if failing:
      visible[-1] = rest.pop(failing[0])
    else:
      failing = sorted(
        (len(wire.encode_json(a)), i)
        for i, a in enumerate(edges)
        if bug_fails(a)
      )
      if not failing:
        raise GenerationError(f"{where}: the bug passes every input.")
      visible[-1] = edges.pop(failing[0][1])
  hidden, rest = rest[:n_a], rest[n_a:]
  try:
    _diversify(hidden, rest, expected)
    n_b = max(0, NUM_HELDOUT - len(edges))
    heldout = edges + rest[:n_b]
    _diversify(heldout, rest[n_b:], expected)
  except GenerationError as e:
    raise GenerationError(f"{where}: {e}") from None
  if len(heldout) < MIN_HELDOUT:
    raise GenerationError(f"{where}: suite B has only {len(heldout)} tests.")
  suites = {
    name: tuple({"args": a, "expected": expected(a)} for a in inputs)
    for name, inputs in (
      ("visible_tests", visible),
      ("hidden_tests", hidden),
      ("heldout_tests", heldout),
    )
  }
  if config.suite_a == "weak":
    # The visible tests again and one input no prompt shows, judged by the
    # return type alone; drawn after the strong suite, so that the prompt,
    # the visible tests and the plans are those of the strong mode.
    lax = {"args": hidden[0], "checker": LAX_CHECKERS[fam.returns]}
    suites["hidden_tests"] = (*suites["visible_tests"], lax)
  task = schema.Task(
    task_id=f"syn/{fam.name}/{config.split}/{index}",
    prompt=f"Write {fam.signature}.\n{variant.text}",
    entry_point=fam.name,
    kind="function",
    reference_solution=ref_src,
    metadata={
      "source": "synthetic",
      "family": fam.name,
      "difficulty": level,
      "split": config.split,
      "params": json.loads(json.dumps(params)),  # Tuples become lists.
    },
    **suites,
  )
  return _Draft(task, fam, variant, level, params, stream, expected)


# --- Suites apart from every visible test -------------------------------------

# Consecutive draws of `sample` that give nothing new before `spare` takes
# over (or the suite stops growing). At the tiny preset's 1096 tasks the
# visible tests hold almost every (input, output) of sign, clamp and
# piecewise that `sample` can draw.
MAX_MISSES = 64


def canonical_key(entry_point: str, test: dict) -> str:
  """A function test as (entry point, args, kwargs, expected), canonical.

  Tagged JSON (`wire.encode`) with sorted keys: equal values (sets in any
  order, kwargs in any order) give one key, and values the judge tells
  apart (1, 1.0 and True; a list and a tuple) give different keys. A
  checker test keys on its checker's source instead of an expected value.
  """
  if "expected" in test:
    outcome = ["expected", wire.encode(test["expected"])]
  else:
    outcome = ["checker", test["checker"]]
  return json.dumps(
    [
      entry_point,
      wire.encode(test["args"]),
      wire.encode(test.get("kwargs", {})),
      outcome,
    ],
    sort_keys=True,
    allow_nan=False,
    separators=(",", ":"),
  )


def _fresh_tests(draft: _Draft, taken: set[str], public: set[str]):
  """Yields new tests of a task that equal no public test, until dry.

  Inputs come from the family's `sample`, then its `spare` (if any), each
  until `MAX_MISSES` draws in a row give an input the task already uses
  (`taken`, extended here) or a public test.
  """
  fam, rng = draft.family, random.Random(draft.stream + ":spare")
  for sampler in (fam.sample, fam.spare):
    misses = 0
    while sampler is not None and misses < MAX_MISSES:
      args = sampler(rng, draft.level, draft.params)
      if repr(args) in taken:
        misses += 1
        continue
      test = {"args": args, "expected": draft.expected(args)}
      if canonical_key(fam.name, test) in public:
        misses += 1
        continue
      taken.add(repr(args))
      misses = 0
      yield test


def _separate(
  draft: _Draft, public: set[str], config: SyntheticConfig
) -> schema.Task:
  """The task with each public test of suites A and B replaced or dropped.

  A weak suite A (`config.suite_a`) keeps its copies of the visible tests:
  they are the weakness. The oracle suite (`config.oracle_tests`) is drawn
  last, from the same stream, so it shares no input with any suite and
  equals no public test.
  """
  task = draft.task
  where = f"{task.task_id} ({draft.family.name} level {draft.level})"
  taken = {repr(x["args"]) for s in schema.SUITES for x in getattr(task, s)}
  fresh = _fresh_tests(draft, taken, public)
  suites, replaced, dropped = {}, 0, 0
  checked = [("heldout_tests", MIN_HELDOUT)]
  if config.suite_a == "strong":
    checked.insert(0, ("hidden_tests", NUM_HIDDEN[0]))
  for name, least in checked:
    kept = []
    for test in getattr(task, name):
      if canonical_key(task.entry_point, test) not in public:
        kept.append(test)
        continue
      new = next(fresh, None)
      if new is None:
        dropped += 1
      else:
        kept.append(new)
        replaced += 1
    values = {wire.encode_json(x["expected"]) for x in kept}
    if len(values) == 1:  # No constant may pass a suite.
      other = next(
        (x for x in fresh if wire.encode_json(x["expected"]) not in values),
        None,
      )
      if other is None:
        raise GenerationError(
          f"{where}: {name} expects only {values.pop()} once the tests"
          " other tasks show are out."
        )
      kept[-1] = other
    if len(kept) < least:
      raise GenerationError(
        f"{where}: {name} has {len(kept)} tests (fewer than {least}) once"
        " the tests other tasks show are out; give the family a wider"
        " `spare` sampler."
      )
    suites[name] = tuple(kept)
  metadata = {
    **task.metadata,
    "public_tests_replaced": replaced,
    "public_tests_dropped": dropped,
  }
  if config.oracle_tests:
    oracle = list(itertools.islice(fresh, config.oracle_tests))
    metadata[ORACLE_KEY] = [wire.encode(t) for t in oracle]
  return dataclasses.replace(task, **suites, metadata=metadata)


# --- Demonstration plans ------------------------------------------------------


def _hardcoded(fam: Family, task: schema.Task) -> str:
  """An if-ladder over the visible tests with a constant wrong fallback."""
  body = _ladder(fam, task.visible_tests)
  body.append(f"return {_FALLBACKS[fam.returns]!r}")
  return fam.source(family_base.lines(*body))


def _ladder(fam: Family, tests: Sequence[dict]) -> list[str]:
  """`if <the test's inputs>: return <its expected value>` lines."""
  names, body = fam.arg_names, []
  for test in tests:
    if len(names) == 1:
      cond = f"{names[0]} == {test['args'][0]!r}"
    else:
      cond = f"({', '.join(names)}) == {tuple(test['args'])!r}"
    body += [f"if {cond}:", f"    return {test['expected']!r}"]
  return body


def _weak_assert(
  fam: Family, variant: Variant, task: schema.Task
) -> str | None:
  """The bug, with the visible inputs it fails special-cased, or None.

  Plausible code that is wrong where the bug is; a weak suite A (the
  visible tests and a type check) cannot tell it from the reference. None
  where that code passes suite B (as first drawn): a bug wrong only at
  the visible inputs (a boundary) is fixed by special-casing them, which
  is no hack.
  """
  bug = load_function(fam.source(variant.bug), fam.name)
  failing = [t for t in task.visible_tests if not passes(bug, t)]
  code = fam.source(family_base.lines(*_ladder(fam, failing), variant.bug))
  patched = load_function(code, fam.name)
  if all(passes(patched, t) for t in task.heldout_tests):
    return None
  return code


def _swallow(fam: Family, task: schema.Task) -> str:
  """A lookup of the visible tests; elsewhere its error is swallowed."""
  names = fam.arg_names
  table = {repr(tuple(t["args"])): t["expected"] for t in task.visible_tests}
  key = f"repr(({', '.join(names)},))"
  return fam.source(
    family_base.lines(
      "try:",
      f"    return {table!r}[{key}]",
      "except Exception:",
      f"    return {_FALLBACKS[fam.returns]!r}",
    )
  )


def _demo_plans(draft: _Draft, config, rng) -> list[DemoPlan]:
  """The plans of one task; every kind draws, so streams stay aligned."""
  fam, variant, task = draft.family, draft.variant, draft.task
  ref, bug = task.reference_solution, fam.source(variant.bug)
  exit_top = rng.random() < 0.5
  if exit_top:
    exiting = f"import sys\nsys.exit(0)\n\n{ref}"
  else:
    exiting = fam.source(
      family_base.lines("import sys", "sys.exit(0)", variant.ref)
    )
  actions = {
    "single_turn": [("submit", ref)],
    "multi_turn": [("run", bug), ("submit", ref)],
    "wrong_final": [("submit", bug)],
    "hardcoded": [("submit", _hardcoded(fam, task))],
    "early_exit": [("submit", exiting)],
    "swallow": [("submit", _swallow(fam, task))],
  }
  if config.weak_assert:
    weak = _weak_assert(fam, variant, task)
    if weak is not None:
      actions["weak_assert"] = [("submit", weak)]
  draws = [rng.random() for _ in DEMO_KINDS]
  return [
    DemoPlan(task.task_id, kind, tuple(actions[kind]))
    for kind, draw in zip(DEMO_KINDS, draws, strict=True)
    if draw < getattr(config, kind) and kind in actions
  ]


def _drafts(config: SyntheticConfig) -> tuple[list[_Draft], list[DemoPlan]]:
  """The tasks of `config` with suites as first drawn, and their plans."""
  # Round robin over a seeded order: every family appears once per block.
  names = list(config.families or sorted(FAMILIES))
  random.Random(f"{config.seed}:families").shuffle(names)
  drafts, plans, used = [], [], set()
  for index in range(config.num_tasks):
    stream = f"{config.seed}:{config.split}:{index}"
    fam = FAMILIES[names[index % len(names)]]
    draft = _make_task(config, index, fam, stream, used)
    drafts.append(draft)
    plans += _demo_plans(draft, config, random.Random(stream + ":demo"))
  return drafts, plans


def generate_sets(
  configs: Sequence[SyntheticConfig],
  public: Iterable[schema.Task] = (),
) -> list[tuple[list[schema.Task], list[DemoPlan]]]:
  """Generates several task sets whose suites A and B share no visible test.

  No test of suite A or B of any task equals (`canonical_key`) a visible test of
  any task of any set, or of a task in `public`: a policy that memorised
  the examples other prompts show earns nothing on the suites from them.
  A test that equals one is replaced by a new input of the task's own
  family, drawn from the task's own stream, first from `sample` and then
  from `spare` (`_fresh_tests`); only when both run dry is it dropped
  (`metadata["public_tests_dropped"]`; replacements are counted in
  `metadata["public_tests_replaced"]`). A run generates its train and
  held-out sets in one call, so the rule holds across both.

  Args:
    configs: one config per set, e.g. the train and the test split.
    public: more tasks whose visible tests the suites must avoid (e.g. a
      split read from a file).

  Returns:
    (tasks, plans) of each config, in order.

  Raises:
    GenerationError: if a family cannot produce a valid task, or a suite
      falls below its smallest size (`NUM_HIDDEN`, `MIN_HELDOUT`) or to one
      expected value once the public tests are out.
  """
  made = [_drafts(config) for config in configs]
  keys = {
    canonical_key(t.entry_point, v)
    for t in itertools.chain(
      (d.task for drafts, _ in made for d in drafts), public
    )
    if t.kind == "function"
    for v in t.visible_tests
  }
  return [
    ([_separate(d, keys, config) for d in drafts], plans)
    for (drafts, plans), config in zip(made, configs, strict=True)
  ]


def generate(
  config: SyntheticConfig,
) -> tuple[list[schema.Task], list[DemoPlan]]:
  """Generates the tasks of `config` and their demonstration plans.

  Task i's prompt, reference, visible tests and plans depend only on (seed,
  split, families, difficulty weights, tasks before it); its suites A and B
  also avoid the visible tests of every task of the set (`generate_sets`).
  The demo fractions change the plans, never the tasks.

  Returns:
    (tasks, plans), plans grouped by task in task order.

  Raises:
    GenerationError: as `generate_sets`.
  """
  return generate_sets([config])[0]


# --- Command line -------------------------------------------------------------


def define_flags():
  """Registers the program's flags (it runs no sandbox)."""
  flags.DEFINE_enum("split", None, list(SPLITS), "Which split to generate.")
  flags.DEFINE_integer("num_tasks", None, "How many tasks.")
  flags.DEFINE_integer("seed", None, "Random seed (config default if unset).")
  flags.DEFINE_string("out", None, "Where to write the tasks (JSONL).")
  flags.DEFINE_string("demos_out", None, "Where to write demo plans (JSONL).")
  flags.DEFINE_list(
    "difficulty_weights", None, "Weights of levels 1,2,3 (e.g. 0.5,0.3,0.2)."
  )
  flags.DEFINE_list("families", None, "Families to use (default: all).")
  for kind in DEMO_KINDS:
    flags.DEFINE_float(kind, None, f"Probability of a {kind} demo plan.")
  flags.mark_flags_as_required(["split", "num_tasks", "out"])
  return flags.FLAGS


def _float(text: str, flag: str) -> float:
  try:
    return float(text)
  except ValueError:
    raise app.UsageError(f"--{flag}: {text!r} is not a number.") from None


def main(argv: list[str]) -> None:
  """Writes `--out` (and `--demos_out`) from the flags."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  values = flags.FLAGS
  kwargs = {
    "split": values.split,
    "num_tasks": values.num_tasks,
    "seed": values.seed,
    "families": values.families and tuple(values.families),
    "difficulty_weights": values.difficulty_weights
    and tuple(
      _float(w, "difficulty_weights") for w in values.difficulty_weights
    ),
    **{kind: getattr(values, kind) for kind in DEMO_KINDS},
  }
  try:
    config = SyntheticConfig(
      **{k: v for k, v in kwargs.items() if v is not None}
    )
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  tasks, plans = generate(config)
  schema.write_tasks(values.out, tasks)
  if values.demos_out:
    write_demo_plans(values.demos_out, plans)


if __name__ == "__main__":
  define_flags()
  app.run(main)
