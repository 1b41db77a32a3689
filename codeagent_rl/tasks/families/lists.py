"""List function-task families."""

from __future__ import annotations

from codeagent_rl.tasks.families import base

# Lists.


@base.family(
  name="sum_multiples",
  args="xs: list[int]",
  returns="int",
  spaces={
    1: base.grid(k=range(2, 13)),
    2: base.grid(k=range(2, 13)),
    3: base.grid(k=range(2, 6), t=range(5, 31, 5)),
  },
  sample=lambda rng, lv, p: [base.ints(rng, -20, 30, k=p["k"])],
  edges=lambda lv, p: [
    *base.list_edges()(lv, p),
    [[p["k"]]],
    [[-p["k"]] * 5],
    [[p["k"], p["k"] + 1] * 20],
    [[p.get("t", 0), p["k"]]],
  ],
)
def _sum_multiples(lv, p):
  k = p["k"]
  loop = base.lines(
    "total = 0",
    "for x in xs:",
    f"    if x % {k} == 0:",
    "        total += x",
    "return total",
  )
  if lv == 1:
    text = f"Return the sum of the elements of xs that are divisible by {k}."
    return base.Variant(text, loop, base.swap(loop, "in xs:", "in xs[1:]:"))
  if lv == 2:
    ref = base.swap(loop, "in xs:", "in xs[::2]:")
    return base.Variant(
      f"Return the sum of the elements at even indices (0, 2, ...) of xs that"
      f" are divisible by {k}.",
      ref,
      base.swap(ref, "xs[::2]", "xs[1::2]"),
    )
  t = p["t"]
  ref = base.swap(
    loop, "for x in xs:", f"for x in xs:\n    if x > {t}:\n        break"
  )
  return base.Variant(
    f"Add up the elements of xs that are divisible by {k}, stopping at the"
    f" first element greater than {t}; return the sum.",
    ref,
    base.swap(ref, f"x > {t}", f"x >= {t}"),
  )


@base.family(
  name="max_multiple",
  args="xs: list[int]",
  returns="int",
  spaces={
    1: base.grid(k=range(2, 6), d=base.NONZERO),
    2: base.grid(k=range(2, 5), m=(2, 3), d=base.NONZERO),
    3: base.grid(k=range(2, 6), d=base.NONZERO),
  },
  sample=lambda rng, lv, p: [base.ints(rng, -30, 30, k=p["k"])],
  edges=lambda lv, p: [
    *base.list_edges()(lv, p),
    [[p["k"]]],
    [[-p["k"], -2 * p["k"]]],
    [[p["k"] + 1] * 3],
    [[base.BIG * p["k"], -base.BIG * p["k"]]],
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
  ref = base.lines(
    "best = None",
    loop,
    f"    if {cond} and (best is None or {val} > best):",
    f"        best = {val}",
    f"return {d} if best is None else best",
  )
  bug = base.lines(
    "best = 0",
    loop,
    f"    if {cond} and {val} > best:",
    f"        best = {val}",
    "return best",
  )
  return base.Variant(f"Return the largest {what} ({d} if none).", ref, bug)


@base.family(
  name="keep",
  args="xs: list[int]",
  returns="list[int]",
  spaces={
    1: base.grid(t=range(-10, 11)),
    2: base.grid(t=range(-10, 11), w=range(0, 11)),
    3: base.grid(t=range(-10, 11, 2), w=range(2, 11, 2), k=range(2, 5)),
  },
  sample=lambda rng, lv, p: [
    base.ints(rng, p["t"] - 6, p["t"] + p.get("w", 0) + 6)
  ],
  edges=lambda lv, p: [
    *base.list_edges()(lv, p),
    [[p["t"]]],
    [[p["t"]] * 3],
    [[p["t"] + p.get("w", 0) + 1, p["t"] - 1]],
  ],
)
def _keep(lv, p):
  t = p["t"]
  if lv == 1:
    ref = f"return [x for x in xs if x > {t}]"
    return base.Variant(
      f"Return the elements of xs greater than {t}, in order.",
      ref,
      base.swap(ref, ">", ">="),
    )
  hi = t + p["w"]
  if lv == 2:
    ref = f"return [x for x in xs if {t} <= x <= {hi}]"
    return base.Variant(
      f"Return the elements x of xs with {t} <= x <= {hi}, in order.",
      ref,
      base.swap(ref, f"{t} <= x", f"{t} < x"),
    )
  k = p["k"]
  return base.Variant(
    f"Return {k} * x for each element x of xs with {t} <= x <= {hi}, in order.",
    f"return [{k} * x for x in xs if {t} <= x <= {hi}]",
    f"return [{k} * x for x in xs if {t} <= {k} * x <= {hi}]",
  )


@base.family(
  name="running",
  args="xs: list[int]",
  returns="list[int]",
  spaces={
    1: base.grid(s=base.NONZERO),
    2: base.grid(w=range(2, 6), op=("max", "min")),
    3: base.grid(t=range(5, 31)),
  },
  sample=lambda rng, lv, p: [base.ints(rng, -3 if lv == 3 else -10, 10, 12)],
  edges=lambda lv, p: [
    *base.list_edges()(lv, p),
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
    ref = base.lines(
      "out = []",
      f"m = {s}",
      "for x in xs:",
      "    m = max(m, x)",
      "    out.append(m)",
      "return out",
    )
    return base.Variant(
      f"Return a list whose item i is the largest of {s}, xs[0], ..., xs[i].",
      ref,
      base.swap(ref, f"m = {s}", "m = 0"),
    )
  if lv == 2:
    w, op = p["w"], p["op"]
    ref = (
      f"return [{op}(xs[max(0, i - {w - 1}):i + 1]) for i in range(len(xs))]"
    )
    return base.Variant(
      f"Return a list whose item i is the {op} of the last {w} items of xs up"
      " to and including xs[i] (fewer at the start).",
      ref,
      base.swap(ref, f"i - {w - 1}", f"i - {w}"),
    )
  t = p["t"]
  ref = base.lines(
    "out = []",
    "total = 0",
    "for x in xs:",
    "    total += x",
    "    out.append(total)",
    f"    if total > {t}:",
    "        total = 0",
    "return out",
  )
  return base.Variant(
    "Keep a running total of xs and append it after each item; reset the"
    f" total to 0 after appending whenever it is greater than {t}.",
    ref,
    base.swap(ref, f"> {t}", f">= {t}"),
  )


@base.family(
  name="dedupe",
  args="xs: list[int]",
  returns="list[int]",
  spaces={
    1: base.grid(n=range(1, 7)),
    2: base.grid(m=range(2, 13)),
    3: base.grid(n=range(1, 6)),
  },
  sample=lambda rng, lv, p: [
    base.ints(rng, -1 if lv == 2 else 0, 2 if lv == 2 else 1, 12)
  ],
  edges=lambda lv, p: [
    *base.list_edges()(lv, p),
    [[5] * 10],
    [[1, 2, 1, 2, 1, 2]],
    [[-1, 1, -1, 1]],
    [[base.BIG, base.BIG, -base.BIG]],
  ],
)
def _dedupe(lv, p):
  if lv == 1:
    n = p["n"]
    ref = base.lines(
      "seen = {}",
      "out = []",
      "for x in xs:",
      "    seen[x] = seen.get(x, 0) + 1",
      f"    if seen[x] <= {n}:",
      "        out.append(x)",
      "return out",
    )
    copies = "occurrence" if n == 1 else f"{n} occurrences"
    return base.Variant(
      f"Keep the first {copies} of each value of xs, in order.",
      ref,
      base.swap(ref, f"<= {n}", f"<= {n + 1}"),
    )
  if lv == 2:
    m = p["m"]
    ref = base.lines(
      "seen = set()",
      "out = []",
      "for x in xs:",
      f"    if x % {m} not in seen:",
      f"        seen.add(x % {m})",
      "        out.append(x)",
      "return out",
    )
    return base.Variant(
      f"Return the elements x of xs whose x % {m} differs from that of every"
      " earlier element, in order.",
      ref,
      base.swap(ref, f"seen.add(x % {m})", "seen.add(x)"),
    )
  n = p["n"]
  ref = base.lines(
    "out = []",
    "run = 0",
    "for i, x in enumerate(xs):",
    "    run = run + 1 if i and xs[i - 1] == x else 1",
    f"    if run <= {n}:",
    "        out.append(x)",
    "return out",
  )
  return base.Variant(
    f"Return xs with each run of equal adjacent values cut to at most {n}.",
    ref,
    base.swap(ref, f"run <= {n}", f"run < {n}"),
  )
