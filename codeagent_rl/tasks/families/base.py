"""Shared types, registration and helpers of the function-task families.

A family module registers each family by decorating its `render` function:

  @base.family(name="affine", args="x: int", returns="int",
               spaces={1: base.grid(a=range(2, 10)), ...},
               sample=base.int_arg(-20, 20), edges=lambda lv, p: [...])
  def _affine(lv, p): ...

`registered(*modules)` collects what modules registered (the package's
`FAMILIES`); `codeagent_rl.tasks.synthetic` draws tasks from them.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
import dataclasses
import itertools
import math
import random
import types

LEVELS = (1, 2, 3)
BIG = 10**9


class GenerationError(RuntimeError):
  """A family produced an unusable task (a bug in a family module)."""


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
    returns: the return annotation: "int", "str", "bool" or "list[int]".
    spaces: level -> every parameter dict of that level.
    render: (level, params) -> `Variant`.
    sample: (rng, level, params) -> one random argument list.
    edges: (level, params) -> edge-case argument lists (suite B).
    spare: (rng, level, params) -> one argument list from beyond `sample`'s
      range, or None. Suites A and B draw from it when `sample`'s inputs
      are all taken by visible tests of other tasks
      (`synthetic.generate_sets`).
  """

  name: str
  args: str
  returns: str
  spaces: dict[int, tuple[dict, ...]]
  render: Callable[[int, dict], Variant]
  sample: Callable[[random.Random, int, dict], list]
  edges: Callable[[int, dict], list[list]]
  spare: Callable[[random.Random, int, dict], list] | None = None

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


# Module name -> family name -> Family, in registration order.
_REGISTERED: dict[str, dict[str, Family]] = {}


def family(
  *,
  name: str,
  args: str,
  returns: str,
  spaces: dict[int, Iterable[dict]],
  sample: Callable[[random.Random, int, dict], list],
  edges: Callable[[int, dict], list[list]],
  spare: Callable[[random.Random, int, dict], list] | None = None,
) -> Callable:
  """A decorator that registers its `render` function as a family.

  The arguments are `Family`'s fields (each level's space as any iterable);
  the family belongs to the module that defines `render`.

  Raises:
    GenerationError: a family of this name is registered already.
  """

  def register(render: Callable[[int, dict], Variant]) -> Callable:
    if any(name in names for names in _REGISTERED.values()):
      raise GenerationError(f"family {name!r} is registered twice.")
    _REGISTERED.setdefault(render.__module__, {})[name] = Family(
      name=name,
      args=args,
      returns=returns,
      spaces={lv: tuple(space) for lv, space in spaces.items()},
      render=render,
      sample=sample,
      edges=edges,
      spare=spare,
    )
    return render

  return register


def registered(*modules: types.ModuleType) -> dict[str, Family]:
  """The families `modules` registered, module by module in the order given."""
  return {
    name: fam
    for module in modules
    for name, fam in _REGISTERED.get(module.__name__, {}).items()
  }


def grid(keep=None, **axes) -> list[dict]:
  """The cartesian product of `axes` as dicts, filtered by `keep`."""
  points = [
    dict(zip(axes, vs, strict=True)) for vs in itertools.product(*axes.values())
  ]
  return [p for p in points if keep is None or keep(p)]


def lines(*parts: str) -> str:
  """The parts joined by newlines (a function body)."""
  return "\n".join(parts)


def swap(src: str, old: str, new: str, count: int = 1) -> str:
  """`src` with `old` (which must occur `count` times) replaced by `new`."""
  if src.count(old) != count:
    raise GenerationError(f"{old!r} is not {count} times in {src!r}")
  return src.replace(old, new)


def expr(*terms: tuple[int, str]) -> str:
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


def int_arg(lo, hi):
  """A sampler of one int argument in [lo, hi]."""
  return lambda rng, lv, p: [rng.randint(lo, hi)]


def word(rng, alphabet, lo, hi) -> str:
  """A random word over `alphabet` with lo to hi letters."""
  return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def ints(rng, lo, hi, max_len=8, k=1) -> list[int]:
  """A random list; with k > 1 about half its items are multiples of k."""
  return [
    k * rng.randint(-3, 3)
    if k > 1 and rng.random() < 0.5
    else rng.randint(lo, hi)
    for _ in range(rng.randint(0, max_len))
  ]


def wrap(*values) -> list[list]:
  """One single-argument list per value."""
  return [[v] for v in values]


INT_EDGES = (0, 1, -1, 2, -2, 100, -100, BIG, -BIG)
NONZERO = [v for v in range(-9, 10) if v]
SIGNED = [v for v in range(-9, 10) if abs(v) >= 2]
SEPS = " -_,.;:/|+"
LOWER = "abcdefghijklmnopqrstuvwxyz"


def is_prime(m: int) -> bool:
  """Whether `m` is a prime."""
  return m > 1 and all(m % d for d in range(2, math.isqrt(m) + 1))


ORDINALS = {2: "second", 3: "third", 4: "fourth"}


def list_edges(*extra):
  """An edges function: common list edge cases plus `extra` lists."""
  return lambda lv, p: [
    [[]],
    [[0]],
    [[1, 1, 1]],
    [[-5, -3, -1]],
    [[BIG, -BIG, 3]],
    [list(range(-30, 31))],
    *([[x] for x in extra]),
  ]
