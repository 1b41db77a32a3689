"""Arithmetic and conditional function-task families."""

from __future__ import annotations

import itertools
import math

from codeagent_rl.tasks.families import base

# Arithmetic.


@base.family(
  name="affine",
  args="x: int",
  returns="int",
  spaces={
    1: base.grid(a=range(2, 10), b=range(1, 21)),
    2: base.grid(a=base.SIGNED, b=base.NONZERO, c=range(2, 6)),
    3: base.grid(
      lambda p: math.gcd(p["a"], p["m"]) == 1,
      a=base.SIGNED,
      b=range(1, 21),
      m=range(3, 14),
    ),
  },
  sample=base.int_arg(-20, 20),
  edges=lambda lv, p: base.wrap(*base.INT_EDGES, 12345),
  # Level 3's outputs are few (mod 3..13): 3300 tasks of all families
  # left affine 15 tests short without it.
  spare=base.int_arg(-400, 400),
)
def _affine(lv, p):
  e = base.expr((p["a"], "x"), (p["b"], ""))
  if lv == 1:
    wrong = base.expr((p["a"], "x"), (p["b"] + 1, ""))
    return base.Variant(f"Return {e}.", f"return {e}", f"return {wrong}")
  if lv == 2:
    ref = f"return ({e}) // {p['c']}"
    return base.Variant(
      f"Return ({e}) // {p['c']} (floor division).",
      ref,
      base.swap(ref, f"// {p['c']}", f"// {p['c'] + 1}"),
    )
  ref = f"return ({e}) % {p['m']}"
  return base.Variant(
    f"Return ({e}) % {p['m']}.", ref, f"return {e} % {p['m']}"
  )


@base.family(
  name="poly",
  args="x: int",
  returns="int",
  spaces={
    1: base.grid(a=[v for v in base.SIGNED if abs(v) <= 5], b=base.NONZERO),
    2: base.grid(a=range(1, 5), b=range(-5, 6), c=base.NONZERO),
    3: base.grid(
      a=range(1, 4), b=[v for v in range(-5, 6) if v], c=base.NONZERO
    ),
  },
  sample=base.int_arg(-30, 30),
  edges=lambda lv, p: base.wrap(*base.INT_EDGES, 1000, -1000),
  # 5500 level-1 tasks left poly 28 tests short without it.
  spare=base.int_arg(-400, 400),
)
def _poly(lv, p):
  a, b = p["a"], p["b"]
  if lv == 1:
    e = base.expr((a, "x * x"), (b, ""))
    bug = base.expr((a, "x * 2"), (b, ""))
  elif lv == 2:
    e = base.expr((a, "x * x"), (b, "x"), (p["c"], ""))
    bug = base.expr((a, "x * x"), (b, "x"), (-p["c"], ""))
  else:
    e = base.expr((a, "x ** 3"), (b, "x"), (p["c"], ""))
    bug = base.expr((a, "x ** 2"), (b, "x"), (p["c"], ""))
  return base.Variant(f"Return {e}.", f"return {e}", f"return {bug}")


# Conditionals.


def _clamp_sample(rng, lv, p):
  if lv == 2:
    return [rng.randint(-25, 25)]
  return [rng.randint(p["lo"] - 20, p["lo"] + p["w"] + 20)]


@base.family(
  name="clamp",
  args="x: int",
  returns="int",
  spaces={
    1: base.grid(lo=range(-5, 6), w=range(3, 13)),
    2: base.grid(lo=range(-5, 6), w=range(3, 13), k=range(2, 5)),
    3: base.grid(lo=range(-5, 6), w=range(3, 13)),
  },
  sample=_clamp_sample,
  # At configs/tiny.py's 1096 tasks, visible tests show 50% of clamp's
  # suite tests (x and the clamped value) within `sample`'s range.
  spare=base.int_arg(-400, 400),
  edges=lambda lv, p: base.wrap(
    p["lo"],
    p["lo"] - 1,
    p["lo"] + p["w"],
    p["lo"] + p["w"] + 1,
    0,
    base.BIG,
    -base.BIG,
  ),
)
def _clamp(lv, p):
  lo, hi = p["lo"], p["lo"] + p["w"]
  if lv == 1:
    ref = f"return max({lo}, min({hi}, x))"
    return base.Variant(
      f"Return x clamped to the range [{lo}, {hi}].",
      ref,
      base.swap(ref, f"min({hi},", f"min({hi - 1},"),
    )
  if lv == 2:
    k = p["k"]
    return base.Variant(
      f"Return {k} * x clamped to the range [{lo}, {hi}].",
      f"return max({lo}, min({hi}, {k} * x))",
      f"return {k} * max({lo}, min({hi}, x))",
    )
  shifted = base.expr((1, "x"), (-lo, ""))
  ref = f"return {base.expr((lo, ''))} + ({shifted}) % {hi - lo + 1}"
  if not lo:
    ref = f"return x % {hi - lo + 1}"
  return base.Variant(
    f"Return the number in [{lo}, {hi}] that equals x modulo {hi - lo + 1}.",
    ref,
    base.swap(ref, f"% {hi - lo + 1}", f"% {hi - lo}"),
  )


_CODES = list(itertools.permutations(range(-2, 3), 3))


@base.family(
  name="sign",
  args="x: int",
  returns="int",
  spaces={
    1: base.grid(c=list(itertools.permutations(range(-3, 4), 3))),
    2: base.grid(t=range(-9, 10), c=_CODES),
    3: base.grid(t=range(-9, 6), w=range(1, 7), c=_CODES[::2]),
  },
  sample=base.int_arg(-15, 15),
  # At configs/tiny.py's 1096 tasks, visible tests show 59% of sign's
  # suite tests: -15..15 and seven outputs are soon all shown.
  spare=base.int_arg(-400, 400),
  edges=lambda lv, p: base.wrap(
    *base.INT_EDGES,
    *(p.get("t", 0) + d for d in (-1, 0, 1)),
    *(p.get("t", 0) + p.get("w", 0) + d for d in (-1, 0, 1)),
  ),
)
def _sign(lv, p):
  n, z, q = p["c"]
  if lv < 3:
    t = p.get("t", 0)
    ref = base.lines(
      f"if x < {t}:",
      f"    return {n}",
      f"if x == {t}:",
      f"    return {z}",
      f"return {q}",
    )
    return base.Variant(
      f"Return {n} if x < {t}, {z} if x == {t}, else {q}.",
      ref,
      base.swap(ref, f"x < {t}", f"x <= {t}"),
    )
  t1, t2 = p["t"], p["t"] + p["w"]
  ref = base.lines(
    f"if x < {t1}:",
    f"    return {n}",
    f"if x > {t2}:",
    f"    return {q}",
    f"return {z}",
  )
  return base.Variant(
    f"Return {n} if x < {t1}, {q} if x > {t2}, else {z}.",
    ref,
    base.swap(ref, f"x > {t2}", f"x >= {t2}"),
  )


@base.family(
  name="piecewise",
  args="x: int",
  returns="int",
  spaces={
    1: base.grid(
      lambda p: p["a"] * p["t"] != p["t"] + p["b"],
      t=range(-5, 6),
      a=range(2, 6),
      b=range(1, 10),
    ),
    2: base.grid(
      lambda p: p["k"] * (p["t"] + p["w"]) != p["t"] + p["w"] + p["b"],
      t=range(-6, 1),
      w=range(2, 7),
      a=range(-3, 4),
      k=range(2, 5),
      b=range(1, 6),
    ),
    3: base.grid(t=[-3, -2, -1, 1, 2, 3], a=range(2, 5), c=range(2, 6)),
  },
  sample=base.int_arg(-20, 20),
  # At configs/tiny.py's 1096 tasks, visible tests show 63% of
  # piecewise's suite tests (x + b repeats across tasks).
  spare=base.int_arg(-400, 400),
  edges=lambda lv, p: base.wrap(
    *base.INT_EDGES, *(p["t"] + d for d in (-1, 0, 1, p.get("w", 0)))
  ),
)
def _piecewise(lv, p):
  t, a = p["t"], p["a"]
  if lv == 1:
    b = p["b"]
    ref = base.lines(f"if x < {t}:", f"    return {a} * x", f"return x + {b}")
    return base.Variant(
      f"If x < {t}, return {a} * x; otherwise return x + {b}.",
      ref,
      base.swap(ref, f"x < {t}", f"x <= {t}"),
    )
  if lv == 2:
    t2, k, b = t + p["w"], p["k"], p["b"]
    ref = base.lines(
      f"if x < {t}:",
      f"    return {a}",
      f"if x < {t2}:",
      f"    return {k} * x",
      f"return x + {b}",
    )
    return base.Variant(
      f"Return {a} if x < {t}, else {k} * x if x < {t2}, else x + {b}.",
      ref,
      base.swap(ref, f"x < {t2}", f"x <= {t2}"),
    )
  c = p["c"]
  ref = base.lines(
    "if x % 2 == 0:",
    f"    return {a} * abs(x - {t})",
    f"return x // {c}",
  )
  return base.Variant(
    f"Return {a} * abs(x - {t}) if x is even, else x // {c}.",
    ref,
    base.swap(ref, f"abs(x - {t})", f"(abs(x) - {t})"),
  )
