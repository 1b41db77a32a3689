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
holds the family's edge cases: zero, negatives, empty inputs, boundaries,
large values). The visible tests always include an input the bug fails, and
suites A and B each expect at least two distinct values, so no constant
passes them.

Demonstration plans (`DemoPlan`) are action sequences for SFT; the
environment renders the observations later. Kinds: `single_turn` (submit the
reference), `multi_turn` (run the bug on the visible tests, then submit the
reference), and three flawed kinds for RL to improve on: `wrong_final`
(submit the bug), `hardcoded` (an if-ladder over the visible tests with a
wrong fallback) and `early_exit` (`sys.exit(0)` at module top or inside the
function). Each task gets a plan of each kind with the probability set in
`SyntheticConfig`.

Task i depends only on the seed, split, families and difficulty weights and
on the tasks before it (never on `num_tasks` or the demo probabilities), so
the same config gives byte-identical files.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
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

from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import schema

SPLITS = ("train", "test")
LEVELS = (1, 2, 3)
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
)
CORRECT_KINDS = ("single_turn", "multi_turn")
ACTIONS = ("run", "submit")
BIG = 10**9
_FALLBACKS = {"int": 0, "str": "", "bool": False, "list[int]": []}


class GenerationError(RuntimeError):
  """A family produced an unusable task (a bug in this module)."""


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
    kind: one of `DEMO_KINDS`.
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
    if self.kind not in DEMO_KINDS:
      raise DemoFormatError(f"kind: {self.kind!r} is not one of {DEMO_KINDS}.")
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
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, start=1):
      if not line.strip():
        continue
      where = f"{os.fspath(path)}:{lineno}"
      try:
        obj = wire.loads(line)
      except ValueError as e:
        raise DemoFormatError(f"{where}: not valid JSON: {e}.") from None
      if not isinstance(obj, dict) or set(obj) != {
        "task_id",
        "kind",
        "actions",
      }:
        raise DemoFormatError(
          f"{where}: needs exactly the keys actions, kind, task_id."
        )
      try:
        plans.append(DemoPlan(**obj))
      except DemoFormatError as e:
        raise DemoFormatError(f"{where}: {e}") from None
  return plans


# --- Families -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Variant:
  """One rendered function: what to do, a reference body and a buggy body."""

  text: str
  ref: str
  bug: str


@dataclasses.dataclass(frozen=True)
class Family:
  """A function-task family.

  Attributes:
    name: the family and the entry point.
    args: the parameter list, e.g. "xs: list[int]".
    returns: the return annotation, one of `_FALLBACKS`.
    spaces: level -> every parameter dict of that level.
    render: (level, params) -> `Variant`.
    sample: (rng, level, params) -> one random argument list.
    edges: (level, params) -> edge-case argument lists (suite B).
  """

  name: str
  args: str
  returns: str
  spaces: dict[int, tuple[dict, ...]]
  render: Callable[[int, dict], Variant]
  sample: Callable[[random.Random, int, dict], list]
  edges: Callable[[int, dict], list[list]]

  @property
  def arg_names(self) -> list[str]:
    """The parameter names, e.g. ["a", "b"]."""
    return [a.split(":")[0].strip() for a in self.args.split(", ")]

  @property
  def signature(self) -> str:
    """E.g. "gcd(a: int, b: int) -> int"."""
    return f"{self.name}({self.args}) -> {self.returns}"

  def source(self, body: str) -> str:
    """The full definition around a body (lines joined by newlines)."""
    lines = "".join(f"    {line}\n" for line in body.split("\n"))
    return f"def {self.signature}:\n{lines}"


FAMILIES: dict[str, Family] = {}


def _family(name, args, returns, spaces, sample, edges):
  """Registers the decorated `render` function as a family."""

  def register(render):
    FAMILIES[name] = Family(
      name,
      args,
      returns,
      {lv: tuple(space) for lv, space in spaces.items()},
      render,
      sample,
      edges,
    )
    return render

  return register


def _grid(keep=None, **axes) -> list[dict]:
  """The cartesian product of `axes` as dicts, filtered by `keep`."""
  grid = [
    dict(zip(axes, vs, strict=True)) for vs in itertools.product(*axes.values())
  ]
  return [p for p in grid if keep is None or keep(p)]


def _lines(*lines: str) -> str:
  return "\n".join(lines)


def _swap(src: str, old: str, new: str, count: int = 1) -> str:
  """`src` with `old` (which must occur `count` times) replaced by `new`."""
  if src.count(old) != count:
    raise GenerationError(f"{old!r} is not {count} times in {src!r}")
  return src.replace(old, new)


def _expr(*terms: tuple[int, str]) -> str:
  """Renders sum(coef * term) like `3 * x * x - x + 7`."""
  out = ""
  for coef, term in terms:
    if coef:
      mag = abs(coef)
      text = (
        term if (mag == 1 and term) else f"{mag} * {term}" if term else str(mag)
      )
      sign = "-" if coef < 0 else "+"
      out += (f" {sign} " if out else "-" * (coef < 0)) + text
  return out or "0"


def _int_arg(lo, hi):
  return lambda rng, lv, p: [rng.randint(lo, hi)]


def _word(rng, alphabet, lo, hi) -> str:
  return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def _ints(rng, lo, hi, max_len=8, k=1) -> list[int]:
  """A random list; with k > 1 about half its items are multiples of k."""
  return [
    k * rng.randint(-3, 3)
    if k > 1 and rng.random() < 0.5
    else rng.randint(lo, hi)
    for _ in range(rng.randint(0, max_len))
  ]


def _wrap(*values) -> list[list]:
  return [[v] for v in values]


_INT_EDGES = (0, 1, -1, 2, -2, 100, -100, BIG, -BIG)
_NONZERO = [v for v in range(-9, 10) if v]
_SIGNED = [v for v in range(-9, 10) if abs(v) >= 2]
_SEPS = " -_,.;:/|+"
_LOWER = "abcdefghijklmnopqrstuvwxyz"


# Arithmetic.


@_family(
  "affine",
  "x: int",
  "int",
  {
    1: _grid(a=range(2, 10), b=range(1, 21)),
    2: _grid(a=_SIGNED, b=_NONZERO, c=range(2, 6)),
    3: _grid(
      lambda p: math.gcd(p["a"], p["m"]) == 1,
      a=_SIGNED,
      b=range(1, 21),
      m=range(3, 14),
    ),
  },
  _int_arg(-20, 20),
  lambda lv, p: _wrap(*_INT_EDGES, 12345),
)
def _affine(lv, p):
  e = _expr((p["a"], "x"), (p["b"], ""))
  if lv == 1:
    wrong = _expr((p["a"], "x"), (p["b"] + 1, ""))
    return Variant(f"Return {e}.", f"return {e}", f"return {wrong}")
  if lv == 2:
    ref = f"return ({e}) // {p['c']}"
    return Variant(
      f"Return ({e}) // {p['c']} (floor division).",
      ref,
      _swap(ref, f"// {p['c']}", f"// {p['c'] + 1}"),
    )
  ref = f"return ({e}) % {p['m']}"
  return Variant(f"Return ({e}) % {p['m']}.", ref, f"return {e} % {p['m']}")


@_family(
  "poly",
  "x: int",
  "int",
  {
    1: _grid(a=[v for v in _SIGNED if abs(v) <= 5], b=_NONZERO),
    2: _grid(a=range(1, 5), b=range(-5, 6), c=_NONZERO),
    3: _grid(a=range(1, 4), b=[v for v in range(-5, 6) if v], c=_NONZERO),
  },
  _int_arg(-30, 30),
  lambda lv, p: _wrap(*_INT_EDGES, 1000, -1000),
)
def _poly(lv, p):
  a, b = p["a"], p["b"]
  if lv == 1:
    e = _expr((a, "x * x"), (b, ""))
    bug = _expr((a, "x * 2"), (b, ""))
  elif lv == 2:
    e = _expr((a, "x * x"), (b, "x"), (p["c"], ""))
    bug = _expr((a, "x * x"), (b, "x"), (-p["c"], ""))
  else:
    e = _expr((a, "x ** 3"), (b, "x"), (p["c"], ""))
    bug = _expr((a, "x ** 2"), (b, "x"), (p["c"], ""))
  return Variant(f"Return {e}.", f"return {e}", f"return {bug}")


# Conditionals.


def _clamp_sample(rng, lv, p):
  if lv == 2:
    return [rng.randint(-25, 25)]
  return [rng.randint(p["lo"] - 20, p["lo"] + p["w"] + 20)]


@_family(
  "clamp",
  "x: int",
  "int",
  {
    1: _grid(lo=range(-5, 6), w=range(3, 13)),
    2: _grid(lo=range(-5, 6), w=range(3, 13), k=range(2, 5)),
    3: _grid(lo=range(-5, 6), w=range(3, 13)),
  },
  _clamp_sample,
  lambda lv, p: _wrap(
    p["lo"], p["lo"] - 1, p["lo"] + p["w"], p["lo"] + p["w"] + 1, 0, BIG, -BIG
  ),
)
def _clamp(lv, p):
  lo, hi = p["lo"], p["lo"] + p["w"]
  if lv == 1:
    ref = f"return max({lo}, min({hi}, x))"
    return Variant(
      f"Return x clamped to the range [{lo}, {hi}].",
      ref,
      _swap(ref, f"min({hi},", f"min({hi - 1},"),
    )
  if lv == 2:
    k = p["k"]
    return Variant(
      f"Return {k} * x clamped to the range [{lo}, {hi}].",
      f"return max({lo}, min({hi}, {k} * x))",
      f"return {k} * max({lo}, min({hi}, x))",
    )
  shifted = _expr((1, "x"), (-lo, ""))
  ref = f"return {_expr((lo, ''))} + ({shifted}) % {hi - lo + 1}"
  if not lo:
    ref = f"return x % {hi - lo + 1}"
  return Variant(
    f"Return the number in [{lo}, {hi}] that equals x modulo {hi - lo + 1}.",
    ref,
    _swap(ref, f"% {hi - lo + 1}", f"% {hi - lo}"),
  )


_CODES = list(itertools.permutations(range(-2, 3), 3))


@_family(
  "sign",
  "x: int",
  "int",
  {
    1: _grid(c=list(itertools.permutations(range(-3, 4), 3))),
    2: _grid(t=range(-9, 10), c=_CODES),
    3: _grid(t=range(-9, 6), w=range(1, 7), c=_CODES[::2]),
  },
  _int_arg(-15, 15),
  lambda lv, p: _wrap(
    *_INT_EDGES,
    *(p.get("t", 0) + d for d in (-1, 0, 1)),
    *(p.get("t", 0) + p.get("w", 0) + d for d in (-1, 0, 1)),
  ),
)
def _sign(lv, p):
  n, z, q = p["c"]
  if lv < 3:
    t = p.get("t", 0)
    ref = _lines(
      f"if x < {t}:",
      f"    return {n}",
      f"if x == {t}:",
      f"    return {z}",
      f"return {q}",
    )
    return Variant(
      f"Return {n} if x < {t}, {z} if x == {t}, else {q}.",
      ref,
      _swap(ref, f"x < {t}", f"x <= {t}"),
    )
  t1, t2 = p["t"], p["t"] + p["w"]
  ref = _lines(
    f"if x < {t1}:",
    f"    return {n}",
    f"if x > {t2}:",
    f"    return {q}",
    f"return {z}",
  )
  return Variant(
    f"Return {n} if x < {t1}, {q} if x > {t2}, else {z}.",
    ref,
    _swap(ref, f"x > {t2}", f"x >= {t2}"),
  )


@_family(
  "piecewise",
  "x: int",
  "int",
  {
    1: _grid(
      lambda p: p["a"] * p["t"] != p["t"] + p["b"],
      t=range(-5, 6),
      a=range(2, 6),
      b=range(1, 10),
    ),
    2: _grid(
      lambda p: p["k"] * (p["t"] + p["w"]) != p["t"] + p["w"] + p["b"],
      t=range(-6, 1),
      w=range(2, 7),
      a=range(-3, 4),
      k=range(2, 5),
      b=range(1, 6),
    ),
    3: _grid(t=[-3, -2, -1, 1, 2, 3], a=range(2, 5), c=range(2, 6)),
  },
  _int_arg(-20, 20),
  lambda lv, p: _wrap(
    *_INT_EDGES, *(p["t"] + d for d in (-1, 0, 1, p.get("w", 0)))
  ),
)
def _piecewise(lv, p):
  t, a = p["t"], p["a"]
  if lv == 1:
    b = p["b"]
    ref = _lines(f"if x < {t}:", f"    return {a} * x", f"return x + {b}")
    return Variant(
      f"If x < {t}, return {a} * x; otherwise return x + {b}.",
      ref,
      _swap(ref, f"x < {t}", f"x <= {t}"),
    )
  if lv == 2:
    t2, k, b = t + p["w"], p["k"], p["b"]
    ref = _lines(
      f"if x < {t}:",
      f"    return {a}",
      f"if x < {t2}:",
      f"    return {k} * x",
      f"return x + {b}",
    )
    return Variant(
      f"Return {a} if x < {t}, else {k} * x if x < {t2}, else x + {b}.",
      ref,
      _swap(ref, f"x < {t2}", f"x <= {t2}"),
    )
  c = p["c"]
  ref = _lines(
    "if x % 2 == 0:",
    f"    return {a} * abs(x - {t})",
    f"return x // {c}",
  )
  return Variant(
    f"Return {a} * abs(x - {t}) if x is even, else x // {c}.",
    ref,
    _swap(ref, f"abs(x - {t})", f"(abs(x) - {t})"),
  )


# Strings.


def _reverse_sample(rng, lv, p):
  if lv == 3:
    words = [_word(rng, "abcde", 0, 4) for _ in range(rng.randint(1, 4))]
    return [p["sep"].join(words)]
  return [_word(rng, "abcdefgh", 0, p.get("n", 8) + 4)]


@_family(
  "reverse",
  "s: str",
  "str",
  {
    1: _grid(n=range(2, 21)),
    2: _grid(i=range(0, 4), k=range(2, 5)),
    3: _grid(sep=" ,;-/", sep2=" ,;-/"),
  },
  _reverse_sample,
  lambda lv, p: _wrap("", "a", "ab", "abc" * 40, " ", ",,", "a;b-c d/e"),
)
def _reverse(lv, p):
  if lv == 1:
    n = p["n"]
    return Variant(
      f"Return the first {n} characters of s in reverse order.",
      f"return s[:{n}][::-1]",
      f"return s[::-1][:{n}]",
    )
  if lv == 2:
    i, k = p["i"], p["k"]
    return Variant(
      f"Take every {_ORDINALS[k]} character of s, starting at index {i},"
      " and return them in reverse order.",
      f"return s[{i}::{k}][::-1]",
      f"return s[::-1][{i}::{k}]",
    )
  sep, sep2 = p["sep"], p["sep2"]
  return Variant(
    f"Split s on {sep!r}, reverse the order of the parts and join them with"
    f" {sep2!r}.",
    f"return {sep2!r}.join(s.split({sep!r})[::-1])",
    f"return {sep2!r}.join(s.split({sep!r}))[::-1]",
  )


def _is_prime(m: int) -> bool:
  return m > 1 and all(m % d for d in range(2, math.isqrt(m) + 1))


_ORDINALS = {2: "second", 3: "third", 4: "fourth"}


def _other_letters(c: str) -> str:
  i = _LOWER.index(c)
  return _LOWER[(i + 1) % 26] + _LOWER[(i + 7) % 26]


@_family(
  "count_char",
  "s: str",
  "int",
  {lv: _grid(c=_LOWER) for lv in LEVELS},
  lambda rng, lv, p: [
    _word(
      rng,
      p["c"] * 2 + _other_letters(p["c"]) + p["c"].upper() * (lv == 2),
      0,
      9,
    )
  ],
  lambda lv, p: _wrap(
    "", p["c"], p["c"] * 2, p["c"] * 3, p["c"].upper() * 3, p["c"] * 50, "?!"
  ),
)
def _count_char(lv, p):
  c = p["c"]
  if lv == 1:
    return Variant(
      f"Return how many times {c!r} occurs in s.",
      f"return s.count({c!r})",
      f"return s[1:].count({c!r})",
    )
  if lv == 2:
    return Variant(
      f"Return how many times {c!r} occurs in s, ignoring case.",
      f"return s.lower().count({c!r})",
      f"return s.count({c!r})",
    )
  return Variant(
    f"Return the number of indices i where s[i] and s[i + 1] are both {c!r}.",
    _lines(
      "n = 0",
      "for i in range(len(s) - 1):",
      f"    if s[i] == s[i + 1] == {c!r}:",
      "        n += 1",
      "return n",
    ),
    f"return s.count({c * 2!r})",
  )


@_family(
  "caesar",
  "s: str",
  "str",
  {lv: _grid(k=range(1, 26)) for lv in LEVELS},
  lambda rng, lv, p: [
    _word(rng, "abcxyz !" + "ABYZ" * (lv == 3) + _LOWER, 0, 10)
  ],
  lambda lv, p: _wrap("", "z", "a", "xyz", "Hello, World!", "abc" * 40, "ZzAa"),
)
def _caesar(lv, p):
  k = p["k"]
  shift = "-" if lv == 2 else "+"
  loop = [
    "out = ''",
    "for ch in s:",
    "    if 'a' <= ch <= 'z':",
    f"        ch = chr((ord(ch) - 97 {shift} {k}) % 26 + 97)",
  ]
  if lv == 3:
    loop += [
      "    elif 'A' <= ch <= 'Z':",
      f"        ch = chr((ord(ch) - 65 + {k}) % 26 + 65)",
    ]
  ref = _lines(*loop, "    out += ch", "return out")
  if lv == 1:
    text = f"Shift each lowercase letter of s forward by {k}, z wrapping to a"
    bug = _swap(ref, "% 26", "% 25")
  elif lv == 2:
    text = f"Shift each lowercase letter of s back by {k}, a wrapping to z"
    bug = _swap(ref, f"- {k})", f"- {k - 1})")
  else:
    text = f"Shift each ASCII letter of s forward by {k}, keeping its case"
    bug = _swap(ref, "% 26 + 65", "% 26 + 97")
  return Variant(text + "; keep other characters.", ref, bug)


@_family(
  "vowels",
  "s: str",
  "str",
  {lv: _grid(r="*#_-.!?+=@0123456789") for lv in LEVELS},
  lambda rng, lv, p: [_word(rng, "aeioubcdst" + "AEUB" * (lv == 2), 0, 10)],
  lambda lv, p: _wrap("", "aeiou", "AEIOU", "xyz", "u", "queue" * 30, "a b"),
)
def _vowels(lv, p):
  r = p["r"]
  if lv < 3:
    test = "ch.lower() in" if lv == 2 else "ch in"
    ref = f"return ''.join({r!r} if {test} 'aeiou' else ch for ch in s)"
    case = ", upper or lower case," if lv == 2 else ""
    return Variant(
      f"Replace every vowel (a, e, i, o, u){case} in s with {r!r}.",
      ref,
      _swap(ref, "ch.lower() in", "ch in")
      if lv == 2
      else _swap(ref, "'aeiou'", "'aeio'"),
    )
  ref = _lines(
    "head = ''.join(ch for ch in s if ch not in 'aeiou')",
    "tail = ''.join(ch for ch in s if ch in 'aeiou')",
    f"return head + {r!r} + tail",
  )
  return Variant(
    "Return the non-vowels of s, then"
    f" {r!r}, then the vowels (a, e, i, o, u) of s, both in order.",
    ref,
    _swap(ref, "'aeiou'", "'aeio'", count=2),
  )


def _capitalize_sample(rng, lv, p):
  words = [_word(rng, "abcxyzAB", 0, 5) for _ in range(rng.randint(1, 4))]
  return [p["sep"].join(words)]


@_family(
  "capitalize",
  "s: str",
  "str",
  {
    1: _grid(sep=_SEPS),
    2: _grid(lambda p: p["sep"] != p["sep2"], sep=_SEPS[:6], sep2=_SEPS[:6]),
    3: _grid(n=range(1, 5), sep=_SEPS),
  },
  _capitalize_sample,
  lambda lv, p: _wrap(
    "",
    p["sep"],
    "a",
    p["sep"] * 3,
    "hello",
    "hELLO" + p["sep"] + "wORLD",
    "x" * 99,
  ),
)
def _capitalize(lv, p):
  sep, cap = p["sep"], "w[:1].upper() + w[1:]"
  if lv == 1:
    ref = f"return {sep!r}.join({cap} for w in s.split({sep!r}))"
    text = f"Upper-case the first letter of each {sep!r}-separated word of s."
  elif lv == 2:
    ref = f"return {p['sep2']!r}.join({cap} for w in s.split({sep!r}))"
    text = (
      f"Split s on {sep!r}, upper-case the first letter of each part and"
      f" join the parts with {p['sep2']!r}."
    )
  else:
    n = p["n"]
    ref = _lines(
      f"words = s.split({sep!r})",
      f"return {sep!r}.join({cap} if len(w) > {n} else w for w in words)",
    )
    text = (
      f"Upper-case the first letter of each {sep!r}-separated word of s that"
      f" is longer than {n} characters."
    )
    return Variant(text, ref, _swap(ref, f"> {n}", f">= {n}"))
  return Variant(
    text + " Keep the other letters.", ref, _swap(ref, cap, "w.capitalize()")
  )


# Lists.


def _list_edges(*extra):
  return lambda lv, p: [
    [[]],
    [[0]],
    [[1, 1, 1]],
    [[-5, -3, -1]],
    [[BIG, -BIG, 3]],
    [list(range(-30, 31))],
    *([[x] for x in extra]),
  ]


@_family(
  "sum_multiples",
  "xs: list[int]",
  "int",
  {
    1: _grid(k=range(2, 13)),
    2: _grid(k=range(2, 13)),
    3: _grid(k=range(2, 6), t=range(5, 31, 5)),
  },
  lambda rng, lv, p: [_ints(rng, -20, 30, k=p["k"])],
  lambda lv, p: [
    *_list_edges()(lv, p),
    [[p["k"]]],
    [[-p["k"]] * 5],
    [[p["k"], p["k"] + 1] * 20],
    [[p.get("t", 0), p["k"]]],
  ],
)
def _sum_multiples(lv, p):
  k = p["k"]
  loop = _lines(
    "total = 0",
    "for x in xs:",
    f"    if x % {k} == 0:",
    "        total += x",
    "return total",
  )
  if lv == 1:
    text = f"Return the sum of the elements of xs that are divisible by {k}."
    return Variant(text, loop, _swap(loop, "in xs:", "in xs[1:]:"))
  if lv == 2:
    ref = _swap(loop, "in xs:", "in xs[::2]:")
    return Variant(
      f"Return the sum of the elements at even indices (0, 2, ...) of xs that"
      f" are divisible by {k}.",
      ref,
      _swap(ref, "xs[::2]", "xs[1::2]"),
    )
  t = p["t"]
  ref = _swap(
    loop, "for x in xs:", f"for x in xs:\n    if x > {t}:\n        break"
  )
  return Variant(
    f"Add up the elements of xs that are divisible by {k}, stopping at the"
    f" first element greater than {t}; return the sum.",
    ref,
    _swap(ref, f"x > {t}", f"x >= {t}"),
  )


@_family(
  "max_multiple",
  "xs: list[int]",
  "int",
  {
    1: _grid(k=range(2, 6), d=_NONZERO),
    2: _grid(k=range(2, 5), m=(2, 3), d=_NONZERO),
    3: _grid(k=range(2, 6), d=_NONZERO),
  },
  lambda rng, lv, p: [_ints(rng, -30, 30, k=p["k"])],
  lambda lv, p: [
    *_list_edges()(lv, p),
    [[p["k"]]],
    [[-p["k"], -2 * p["k"]]],
    [[p["k"] + 1] * 3],
    [[BIG * p["k"], -BIG * p["k"]]],
  ],
)
def _max_multiple(lv, p):
  k, d = p["k"], p["d"]
  if lv == 1:
    what, cond, val = f"element of xs divisible by {k}", f"x % {k} == 0", "x"
    loop = "for x in xs:"
  elif lv == 2:
    km = k * p["m"]
    what = f"element of xs divisible by {k} but not by {km}"
    cond, val, loop = f"x % {k} == 0 and x % {km} != 0", "x", "for x in xs:"
  else:
    what = f"sum of two adjacent elements of xs that is divisible by {k}"
    cond, val = f"(x + y) % {k} == 0", "x + y"
    loop = "for x, y in zip(xs, xs[1:]):"
  ref = _lines(
    "best = None",
    loop,
    f"    if {cond} and (best is None or {val} > best):",
    f"        best = {val}",
    f"return {d} if best is None else best",
  )
  bug = _lines(
    "best = 0",
    loop,
    f"    if {cond} and {val} > best:",
    f"        best = {val}",
    "return best",
  )
  return Variant(f"Return the largest {what} ({d} if none).", ref, bug)


@_family(
  "keep",
  "xs: list[int]",
  "list[int]",
  {
    1: _grid(t=range(-10, 11)),
    2: _grid(t=range(-10, 11), w=range(0, 11)),
    3: _grid(t=range(-10, 11, 2), w=range(2, 11, 2), k=range(2, 5)),
  },
  lambda rng, lv, p: [_ints(rng, p["t"] - 6, p["t"] + p.get("w", 0) + 6)],
  lambda lv, p: [
    *_list_edges()(lv, p),
    [[p["t"]]],
    [[p["t"]] * 3],
    [[p["t"] + p.get("w", 0) + 1, p["t"] - 1]],
  ],
)
def _keep(lv, p):
  t = p["t"]
  if lv == 1:
    ref = f"return [x for x in xs if x > {t}]"
    return Variant(
      f"Return the elements of xs greater than {t}, in order.",
      ref,
      _swap(ref, ">", ">="),
    )
  hi = t + p["w"]
  if lv == 2:
    ref = f"return [x for x in xs if {t} <= x <= {hi}]"
    return Variant(
      f"Return the elements x of xs with {t} <= x <= {hi}, in order.",
      ref,
      _swap(ref, f"{t} <= x", f"{t} < x"),
    )
  k = p["k"]
  return Variant(
    f"Return {k} * x for each element x of xs with {t} <= x <= {hi}, in order.",
    f"return [{k} * x for x in xs if {t} <= x <= {hi}]",
    f"return [{k} * x for x in xs if {t} <= {k} * x <= {hi}]",
  )


@_family(
  "running",
  "xs: list[int]",
  "list[int]",
  {
    1: _grid(s=_NONZERO),
    2: _grid(w=range(2, 6), op=("max", "min")),
    3: _grid(t=range(5, 31)),
  },
  lambda rng, lv, p: [_ints(rng, -3 if lv == 3 else -10, 10, 12)],
  lambda lv, p: [
    *_list_edges()(lv, p),
    [[9, *[0] * p.get("w", 1)]],
    [[-9, *[0] * p.get("w", 1)]],
    [[p.get("t", 0), 1, 2]],
    [[p.get("t", 0) + 1] * 4],
    [[5] * 40],
  ],
)
def _running(lv, p):
  if lv == 1:
    s = p["s"]
    ref = _lines(
      "out = []",
      f"m = {s}",
      "for x in xs:",
      "    m = max(m, x)",
      "    out.append(m)",
      "return out",
    )
    return Variant(
      f"Return a list whose item i is the largest of {s}, xs[0], ..., xs[i].",
      ref,
      _swap(ref, f"m = {s}", "m = 0"),
    )
  if lv == 2:
    w, op = p["w"], p["op"]
    ref = (
      f"return [{op}(xs[max(0, i - {w - 1}):i + 1]) for i in range(len(xs))]"
    )
    return Variant(
      f"Return a list whose item i is the {op} of the last {w} items of xs up"
      " to and including xs[i] (fewer at the start).",
      ref,
      _swap(ref, f"i - {w - 1}", f"i - {w}"),
    )
  t = p["t"]
  ref = _lines(
    "out = []",
    "total = 0",
    "for x in xs:",
    "    total += x",
    "    out.append(total)",
    f"    if total > {t}:",
    "        total = 0",
    "return out",
  )
  return Variant(
    "Keep a running total of xs and append it after each item; reset the"
    f" total to 0 after appending whenever it is greater than {t}.",
    ref,
    _swap(ref, f"> {t}", f">= {t}"),
  )


@_family(
  "dedupe",
  "xs: list[int]",
  "list[int]",
  {1: _grid(n=range(1, 7)), 2: _grid(m=range(2, 13)), 3: _grid(n=range(1, 6))},
  lambda rng, lv, p: [
    _ints(rng, -1 if lv == 2 else 0, 2 if lv == 2 else 1, 12)
  ],
  lambda lv, p: [
    *_list_edges()(lv, p),
    [[5] * 10],
    [[1, 2, 1, 2, 1, 2]],
    [[-1, 1, -1, 1]],
    [[BIG, BIG, -BIG]],
  ],
)
def _dedupe(lv, p):
  if lv == 1:
    n = p["n"]
    ref = _lines(
      "seen = {}",
      "out = []",
      "for x in xs:",
      "    seen[x] = seen.get(x, 0) + 1",
      f"    if seen[x] <= {n}:",
      "        out.append(x)",
      "return out",
    )
    copies = "occurrence" if n == 1 else f"{n} occurrences"
    return Variant(
      f"Keep the first {copies} of each value of xs, in order.",
      ref,
      _swap(ref, f"<= {n}", f"<= {n + 1}"),
    )
  if lv == 2:
    m = p["m"]
    ref = _lines(
      "seen = set()",
      "out = []",
      "for x in xs:",
      f"    if x % {m} not in seen:",
      f"        seen.add(x % {m})",
      "        out.append(x)",
      "return out",
    )
    return Variant(
      f"Return the elements x of xs whose x % {m} differs from that of every"
      " earlier element, in order.",
      ref,
      _swap(ref, f"seen.add(x % {m})", "seen.add(x)"),
    )
  n = p["n"]
  ref = _lines(
    "out = []",
    "run = 0",
    "for i, x in enumerate(xs):",
    "    run = run + 1 if i and xs[i - 1] == x else 1",
    f"    if run <= {n}:",
    "        out.append(x)",
    "return out",
  )
  return Variant(
    f"Return xs with each run of equal adjacent values cut to at most {n}.",
    ref,
    _swap(ref, f"run <= {n}", f"run < {n}"),
  )


# Loops and accumulators.


@_family(
  "factorial_mod",
  "n: int",
  "int",
  # Primes above the sampled n, so that n! % m is rarely 0.
  {lv: _grid(m=[m for m in range(61, 400) if _is_prime(m)]) for lv in LEVELS},
  lambda rng, lv, p: [rng.randint(-10 if lv == 2 else 0, 60)],
  lambda lv, p: _wrap(
    0, 1, 2, 3, p["m"] - 1, p["m"], 500, *((-5,) * (lv == 2))
  ),
)
def _factorial_mod(lv, p):
  m = p["m"]
  if lv == 3:
    ref = _lines(
      "total = f = 1",
      "for i in range(1, n + 1):",
      f"    f = f * i % {m}",
      f"    total = (total + f) % {m}",
      "return total",
    )
    return Variant(
      f"Return (0! + 1! + ... + n!) % {m}, for n >= 0.",
      ref,
      _swap(ref, "total = f = 1", "total = 0\nf = 1"),
    )
  step, text = (
    ("", f"Return n! % {m}, for n >= 0.")
    if lv == 1
    else (
      ", 2",
      f"Return the product of the odd numbers 1..n, % {m} (1 if n < 1).",
    )
  )
  start = 2 if lv == 1 else 1
  ref = _lines(
    "r = 1",
    f"for i in range({start}, n + 1{step}):",
    f"    r = r * i % {m}",
    "return r",
  )
  return Variant(text, ref, _swap(ref, "n + 1", "n"))


@_family(
  "triangular",
  "n: int",
  "int",
  {
    1: _grid(k=range(1, 13)),
    2: _grid(a=range(-5, 6)),
    3: _grid(lambda p: p["a"] < p["b"], a=range(2, 10), b=range(2, 10)),
  },
  lambda rng, lv, p: [rng.randint(-3, 120 if lv == 3 else 40)],
  lambda lv, p: _wrap(0, 1, 2, -1, -100, 10**5),
)
def _triangular(lv, p):
  if lv == 1:
    k = p["k"]
    term = "i" if k == 1 else f"{k} * i"
    ref = _lines(
      "total = 0",
      "for i in range(1, n + 1):",
      f"    total += {term}",
      "return total",
    )
    return Variant(
      f"Return the sum of {term} for i from 1 to n (0 if n < 1).",
      ref,
      _swap(ref, "n + 1", "n"),
    )
  if lv == 2:
    a = p["a"]
    ref = f"return sum(range({a}, n + 1))"
    return Variant(
      f"Return the sum of the integers from {a} to n inclusive (0 if n < {a}).",
      ref,
      _swap(ref, "n + 1", "n"),
    )
  a, b = p["a"], p["b"]
  return Variant(
    f"Return the sum of the integers in 1..n divisible by {a} or by {b}.",
    f"return sum(i for i in range(1, n + 1) if i % {a} == 0 or i % {b} == 0)",
    f"return sum(range({a}, n + 1, {a})) + sum(range({b}, n + 1, {b}))",
  )


@_family(
  "collatz",
  "n: int",
  "int",
  {lv: _grid(t=range(1, 21)) for lv in LEVELS},
  _int_arg(-5, 60),
  lambda lv, p: _wrap(0, -7, 1, p["t"], p["t"] + 1, 27, 10**6),
)
def _collatz(lv, p):
  t = p["t"]
  rule = (
    "Repeat: halve n if it is even, else set n to 3 * n + 1; stop once"
    f" n <= {t}."
  )
  step = "    n = n // 2 if n % 2 == 0 else 3 * n + 1"
  if lv == 1:
    ref = _lines(
      "steps = 0", f"while n > {t}:", step, "    steps += 1", "return steps"
    )
    text, bug = (
      "Return the number of steps.",
      _swap(ref, "steps = 0", "steps = 1"),
    )
  elif lv == 2:
    ref = _lines(
      "top = n", f"while n > {t}:", step, "    top = max(top, n)", "return top"
    )
    text, bug = (
      "Return the largest value n takes, counting the start.",
      _swap(ref, "top = n", "top = 0"),
    )
  else:
    ref = _lines(
      "odd = 0", f"while n > {t}:", "    odd += n % 2", step, "return odd"
    )
    text = "Return how many of the values n takes (the start included) are odd."
    bug = _swap(ref, "odd += n % 2", "odd += 1")
  return Variant(f"{rule} {text}", ref, bug)


# Small algorithms.


@_family(
  "digit_sum",
  "n: int",
  "int",
  # Base 2 would make every digital root 1.
  {lv: _grid(b=range(3 if lv == 3 else 2, 17)) for lv in LEVELS},
  _int_arg(-999, 999),
  lambda lv, p: _wrap(0, -1, p["b"], p["b"] - 1, -p["b"], 10**12, -(10**12)),
)
def _digit_sum(lv, p):
  b = p["b"]
  digits = "decimal digits" if b == 10 else f"base-{b} digits"
  body = ["total = 0", "while n:", f"    total += n % {b}", f"    n //= {b}"]
  if lv == 1:
    ref = _lines("n = abs(n)", *body, "return total")
    text = f"Return the sum of the {digits} of abs(n)."
  elif lv == 2:
    body[2] = f"    total += (n % {b}) ** 2"
    ref = _lines("n = abs(n)", *body, "return total")
    text = f"Return the sum of the squares of the {digits} of abs(n)."
  else:
    ref = _lines(
      "n = abs(n)",
      f"while n >= {b}:",
      *("    " + line for line in body),
      "    n = total",
      "return n",
    )
    return Variant(
      f"Starting from abs(n), replace the number by the sum of its {digits}"
      f" until it is below {b}; return it.",
      ref,
      _swap(ref, f"while n >= {b}", f"while n > {b}"),
    )
  # Without abs, and with a loop that still stops for negative n.
  bug = _swap(_swap(ref, "n = abs(n)\n", ""), "while n:", "while n > 0:")
  return Variant(text, ref, bug)


def _gcd_sample(rng, lv, p):
  # Common factors, often ones of c, so that the answers vary.
  divisors = [d for d in range(2, p["c"] + 1) if p["c"] % d == 0]
  g = rng.choice(divisors if rng.random() < 0.3 else range(1, 13))
  return [g * rng.randint(-8, 8), g * rng.randint(-8, 8)]


_GCD = ("    while y:", "        x, y = y, x % y")


@_family(
  "gcd",
  "a: int, b: int",
  "int",
  {lv: _grid(c=range(2, 41)) for lv in LEVELS},
  _gcd_sample,
  lambda lv, p: [
    [0, 0],
    [0, 5],
    [7, 0],
    [-12, 18],
    [12, -18],
    [p["c"], p["c"]],
    [-p["c"], -p["c"] * 3],
    [BIG, BIG // 2],
    [1, -1],
  ],
)
def _gcd(lv, p):
  c = p["c"]
  if lv == 1:
    ref = _lines(f"x = {c}", "for y in (abs(a), abs(b)):", *_GCD, "return x")
    return Variant(
      f"Return the greatest common divisor of a, b and {c}.",
      ref,
      _swap(ref, "(abs(a), abs(b))", "(a, b)"),
    )
  if lv == 2:
    ref = _lines(
      "if a == 0 or b == 0:",
      "    return 0",
      f"x = {c}",
      "for y in (abs(a), abs(b)):",
      "    g, h = x, y",
      "    while h:",
      "        g, h = h, g % h",
      "    x = x * y // g",
      "return x",
    )
    return Variant(
      f"Return the least common multiple of abs(a), abs(b) and {c} (0 if a or"
      " b is 0).",
      ref,
      _swap(ref, "x = x * y // g", "x = x * y"),
    )
  ref = f"return sum(1 for d in range(1, {c} + 1) if a % d == 0 and b % d == 0)"
  return Variant(
    f"Return how many d in 1..{c} divide both a and b.",
    ref,
    _swap(ref, f"{c} + 1", f"{c}"),
  )


def _runs_sample(rng, lv, p):
  runs = [
    rng.choice("aab") * rng.randint(1, 4) for _ in range(rng.randint(0, 4))
  ]
  return ["".join(runs)]


@_family(
  "rle",
  "s: str",
  "str",
  {
    1: _grid(sep=["", ",", ";", " ", "-", "|", "/", "."]),
    2: _grid(sep=["", ",", ";", " ", "-", "|", "/", "."]),
    3: _grid(m=range(2, 5), sep=["", ",", ";", "-"]),
  },
  _runs_sample,
  lambda lv, p: _wrap("", "a", "aaaa", "abc", "a" * 50, "aabbaa", "zzzzy"),
)
def _rle(lv, p):
  sep = p["sep"]
  if lv == 1:
    ref = _lines(
      "import itertools",
      f"return {sep!r}.join(c + str(len(list(g))) for c, g in"
      " itertools.groupby(s))",
    )
    return Variant(
      "Write each run of equal characters of s as the character and the run"
      f" length, and join these with {sep!r}.",
      ref,
      _swap(ref, "len(list(g))", "len(list(g)) - 1"),
    )
  runs = (
    "runs = []",
    "for ch in s:",
    "    if runs and runs[-1][0] == ch:",
    "        runs[-1][1] += 1",
    "    else:",
    "        runs.append([ch, 1])",
  )
  if lv == 2:
    ref = _lines(
      *runs,
      f"return {sep!r}.join((str(n) if n > 1 else '') + c for c, n in runs)",
    )
    return Variant(
      "Write each run of equal characters of s as the run length (left out"
      f" for runs of 1) and the character, and join these with {sep!r}.",
      ref,
      _swap(ref, "n > 1", "n > 0"),
    )
  m = p["m"]
  ref = _lines(
    *runs,
    f"return {sep!r}.join(c + str(n) if n >= {m} else c * n for c, n in runs)",
  )
  return Variant(
    f"Write each run of {m} or more equal characters of s as the character"
    " and the run length, keep shorter runs as they are, and join the pieces"
    f" with {sep!r}.",
    ref,
    _swap(ref, f"n >= {m}", f"n > {m}"),
  )


def _palindrome_sample(rng, lv, p):
  c = p.get("c", " ")
  half = _word(rng, "abAB" if lv > 1 else "abc", 0, 4)
  mid = _word(rng, "xy", 0, 1)
  s = half + mid + half[::-1] if rng.random() < 0.6 else _word(rng, "abc", 0, 7)
  if lv > 1 and rng.random() < 0.5:
    s = "".join(ch.swapcase() if rng.random() < 0.3 else ch for ch in s)
  for _ in range(rng.randint(0, 2)):
    i = rng.randint(0, len(s))
    s = s[:i] + c + s[i:]
  return [s]


@_family(
  "palindrome",
  "s: str",
  "bool",
  {
    1: _grid(c=" -_.,:;!?*"),
    2: _grid(c=" -_.,:;!?*"),
    3: _grid(n=range(1, 6), c=" ,!"),
  },
  _palindrome_sample,
  lambda lv, p: _wrap(
    "",
    p["c"],
    p["c"] * 3,
    "a",
    "ab",
    "Aa",
    "ab" + p["c"] + "a",
    "abc" * 20,
    *(("aA" * 3)[: p.get("n", 1)], "b" + "a" * p.get("n", 1)) * (lv == 3),
  ),
)
def _palindrome(lv, p):
  c = p["c"]
  if lv < 3:
    lower = ".lower()" if lv == 2 else ""
    ref = _lines(f"t = s.replace({c!r}, ''){lower}", "return t == t[::-1]")
    case = " ignoring case and" if lv == 2 else ""
    return Variant(
      f"Return True if s reads the same backwards,{case} ignoring every {c!r}.",
      ref,
      _swap(ref, f"s.replace({c!r}, '')", "s"),
    )
  n = p["n"]
  ref = _lines(
    "t = [ch.lower() for ch in s if ch.isalpha()]",
    f"return len(t) >= {n} and t == t[::-1]",
  )
  return Variant(
    f"Return True if s has at least {n} letters and its letters, lower-cased,"
    " read the same backwards; ignore other characters.",
    ref,
    _swap(ref, f">= {n}", f"> {n}"),
  )


def _binary_sample(rng, lv, p):
  n = rng.randint(0, max(200, 2 ** (p.get("w", 0) + 1)))
  return [-n if lv == 3 and rng.random() < 0.4 else n]


@_family(
  "binary",
  "n: int",
  "str",
  {
    1: _grid(w=range(2, 13)),
    2: _grid(b=range(3, 10)),
    3: _grid(k=range(2, 6), sep="_ ,.'"),
  },
  _binary_sample,
  lambda lv, p: _wrap(
    0,
    1,
    2,
    2 ** p.get("w", 5) - 1,
    2 ** p.get("w", 5),
    10**12,
    *((-1, -6, -(10**12)) if lv == 3 else ()),
  ),
)
def _binary(lv, p):
  if lv == 1:
    w = p["w"]
    ref = f"return bin(n)[2:].zfill({w})"
    return Variant(
      f"Return n (n >= 0) in binary without '0b', padded with zeros to at"
      f" least {w} digits.",
      ref,
      _swap(ref, f"zfill({w})", f"zfill({w - 1})"),
    )
  if lv == 2:
    b = p["b"]
    ref = _lines(
      "digits = ''",
      "while n:",
      f"    digits = str(n % {b}) + digits",
      f"    n //= {b}",
      "return digits or '0'",
    )
    return Variant(
      f"Return n (n >= 0) written in base {b} ('0' for 0).",
      ref,
      _swap(ref, f"str(n % {b}) + digits", f"digits + str(n % {b})"),
    )
  k, sep = p["k"], p["sep"]
  ref = _lines(
    "d = bin(abs(n))[2:]",
    "groups = []",
    "while d:",
    f"    groups.insert(0, d[-{k}:])",
    f"    d = d[:-{k}]",
    f"return '-' * (n < 0) + {sep!r}.join(groups)",
  )
  bug = _swap(
    _swap(ref, f"groups.insert(0, d[-{k}:])", f"groups.append(d[:{k}])"),
    f"d = d[:-{k}]",
    f"d = d[{k}:]",
  )
  return Variant(
    f"Return the binary digits of abs(n) in groups of {k} from the right,"
    f" joined by {sep!r}, after a '-' if n < 0.",
    ref,
    bug,
  )


_WORDS = ("Foo", "Bar", "Baz", "Qux", "Zap")


@_family(
  "fizzbuzz",
  "n: int",
  "str",
  {
    1: _grid(lambda p: p["a"] != p["b"], a=range(2, 10), b=range(2, 10)),
    2: _grid(
      lambda p: p["w"][0] != p["w"][1],
      w=list(itertools.product(_WORDS, _WORDS)),
      ab=((2, 3), (3, 5), (2, 5), (3, 4), (4, 6)),
    ),
    3: _grid(abc=list(itertools.combinations(range(2, 8), 3))),
  },
  _int_arg(-30, 120),
  lambda lv, p: _wrap(0, 1, -1, 7, -60, 210, 420, BIG, BIG + 1),
)
def _fizzbuzz(lv, p):
  if lv == 1:
    pairs = [(p["a"], "Fizz"), (p["b"], "Buzz")]
  elif lv == 2:
    pairs = list(zip(p["ab"], p["w"], strict=True))
  else:
    pairs = list(zip(p["abc"], ("Fizz", "Buzz", "Bazz"), strict=True))
  checks = [
    line
    for d, word in pairs
    for line in (f"if n % {d} == 0:", f"    out += {word!r}")
  ]
  ref = _lines("out = ''", *checks, "return out or str(n)")
  parts = ", ".join(f"{w!r} if n % {d} == 0" for d, w in pairs)
  d, _ = pairs[-1]
  return Variant(
    f"Concatenate {parts}; return the result, or str(n) if it is empty.",
    ref,
    _swap(ref, f"\nif n % {d} == 0:", f"\nelif n % {d} == 0:"),
  )


@_family(
  "second_largest",
  "xs: list[int]",
  "int",
  {1: _grid(d=_NONZERO), 2: _grid(k=(3, 4), d=_NONZERO), 3: _grid(d=_NONZERO)},
  lambda rng, lv, p: [_ints(rng, -9, 9, 7)],
  lambda lv, p: [
    *_list_edges()(lv, p),
    [[5, 5]],
    [[5, 5, 3]],
    [[-1, -2]],
    [list(range(100))],
  ],
)
def _second_largest(lv, p):
  d, k = p["d"], p.get("k", 2)
  nth = _ORDINALS[k]
  if lv < 3:
    ref = _lines(
      "vals = sorted(set(xs))",
      f"return vals[-{k}] if len(vals) >= {k} else {d}",
    )
    text = f"Return the {nth} largest distinct value in xs"
  else:
    ref = _lines(
      "vals = sorted(set(xs))",
      f"return vals[-1] - vals[-2] if len(vals) >= 2 else {d}",
    )
    text = "Return the largest distinct value in xs minus the second largest"
  return Variant(
    f"{text}, or {d} if there are fewer than {k} distinct values.",
    ref,
    _swap(ref, "sorted(set(xs))", "sorted(xs)"),
  )


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
  """Equality as the sandbox judge sees it (bool is not int, list not tuple)."""
  numbers = (int, float)
  if type(got) in numbers and type(want) in numbers:
    if type(got) is int and type(want) is int:
      return got == want
    return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9)
  if type(got) is not type(want):
    return False
  if type(want) in (list, tuple):
    return len(got) == len(want) and all(map(_matches, got, want))
  return got == want


def passes(fn: Callable, test: dict) -> bool:
  """Whether `fn` passes one function test (`args` + `expected`)."""
  ok, out = _call(fn, test["args"])
  return ok and _matches(out, test["expected"])


# --- Tasks --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Draft:
  """A task before serialisation, with what the demo plans need."""

  task: schema.Task
  family: Family
  variant: Variant


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


def _make_task(config, index, fam, rng, used) -> _Draft:
  """Draws the level and parameters of task `index`, then its suites."""
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
  return _Draft(task, fam, variant)


# --- Demonstration plans ------------------------------------------------------


def _hardcoded(fam: Family, task: schema.Task) -> str:
  """An if-ladder over the visible tests with a constant wrong fallback."""
  names = fam.arg_names
  body = []
  for test in task.visible_tests:
    if len(names) == 1:
      cond = f"{names[0]} == {test['args'][0]!r}"
    else:
      cond = f"({', '.join(names)}) == {tuple(test['args'])!r}"
    body += [f"if {cond}:", f"    return {test['expected']!r}"]
  body.append(f"return {_FALLBACKS[fam.returns]!r}")
  return fam.source(_lines(*body))


def _demo_plans(draft: _Draft, config, rng) -> list[DemoPlan]:
  """The plans of one task; every kind draws, so streams stay aligned."""
  fam, variant, task = draft.family, draft.variant, draft.task
  ref, bug = task.reference_solution, fam.source(variant.bug)
  exit_top = rng.random() < 0.5
  if exit_top:
    exiting = f"import sys\nsys.exit(0)\n\n{ref}"
  else:
    exiting = fam.source(_lines("import sys", "sys.exit(0)", variant.ref))
  actions = {
    "single_turn": [("submit", ref)],
    "multi_turn": [("run", bug), ("submit", ref)],
    "wrong_final": [("submit", bug)],
    "hardcoded": [("submit", _hardcoded(fam, task))],
    "early_exit": [("submit", exiting)],
  }
  draws = [rng.random() for _ in DEMO_KINDS]
  return [
    DemoPlan(task.task_id, kind, tuple(actions[kind]))
    for kind, draw in zip(DEMO_KINDS, draws, strict=True)
    if draw < getattr(config, kind)
  ]


def generate(
  config: SyntheticConfig,
) -> tuple[list[schema.Task], list[DemoPlan]]:
  """Generates the tasks of `config` and their demonstration plans.

  Task i depends only on (seed, split, families, difficulty weights, tasks
  before it); the demo fractions change the plans, never the tasks.

  Returns:
    (tasks, plans), plans grouped by task in task order.

  Raises:
    GenerationError: if a family cannot produce a valid task (a bug here).
  """
  # Round robin over a seeded order: every family appears once per block.
  names = list(config.families or sorted(FAMILIES))
  random.Random(f"{config.seed}:families").shuffle(names)
  tasks, plans, used = [], [], set()
  for index in range(config.num_tasks):
    stream = f"{config.seed}:{config.split}:{index}"
    fam = FAMILIES[names[index % len(names)]]
    draft = _make_task(
      config, index, fam, random.Random(stream + ":task"), used
    )
    tasks.append(draft.task)
    plans += _demo_plans(draft, config, random.Random(stream + ":demo"))
  return tasks, plans


# --- Command line -------------------------------------------------------------


def _define_flags():
  """Flags exist only when this module is the program (no import clashes)."""
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
  _define_flags()
  app.run(main)
