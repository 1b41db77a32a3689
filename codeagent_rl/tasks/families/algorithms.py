"""Loop, accumulator and small-algorithm function-task families."""

from __future__ import annotations

import itertools

from codeagent_rl.tasks.families import base

# Loops and accumulators.


@base.family(
  name="factorial_mod",
  args="n: int",
  returns="int",
  # Primes above the sampled n, so that n! % m is rarely 0.
  spaces={
    lv: base.grid(m=[m for m in range(61, 400) if base.is_prime(m)])
    for lv in base.LEVELS
  },
  sample=lambda rng, lv, p: [rng.randint(-10 if lv == 2 else 0, 60)],
  edges=lambda lv, p: base.wrap(
    0, 1, 2, 3, p["m"] - 1, p["m"], 500, *((-5,) * (lv == 2))
  ),
)
def _factorial_mod(lv, p):
  m = p["m"]
  if lv == 3:
    ref = base.lines(
      "total = f = 1",
      "for i in range(1, n + 1):",
      f"    f = f * i % {m}",
      f"    total = (total + f) % {m}",
      "return total",
    )
    return base.Variant(
      f"Return (0! + 1! + ... + n!) % {m}, for n >= 0.",
      ref,
      base.swap(ref, "total = f = 1", "total = 0\nf = 1"),
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
  ref = base.lines(
    "r = 1",
    f"for i in range({start}, n + 1{step}):",
    f"    r = r * i % {m}",
    "return r",
  )
  return base.Variant(text, ref, base.swap(ref, "n + 1", "n"))


@base.family(
  name="triangular",
  args="n: int",
  returns="int",
  spaces={
    1: base.grid(k=range(1, 13)),
    2: base.grid(a=range(-5, 6)),
    3: base.grid(lambda p: p["a"] < p["b"], a=range(2, 10), b=range(2, 10)),
  },
  sample=lambda rng, lv, p: [rng.randint(-3, 120 if lv == 3 else 40)],
  edges=lambda lv, p: base.wrap(0, 1, 2, -1, -100, 10**5),
  # Every n below the start gives 0: 3300 tasks of all families left
  # triangular 347 tests short without it.
  spare=base.int_arg(41, 2000),
)
def _triangular(lv, p):
  if lv == 1:
    k = p["k"]
    term = "i" if k == 1 else f"{k} * i"
    ref = base.lines(
      "total = 0",
      "for i in range(1, n + 1):",
      f"    total += {term}",
      "return total",
    )
    return base.Variant(
      f"Return the sum of {term} for i from 1 to n (0 if n < 1).",
      ref,
      base.swap(ref, "n + 1", "n"),
    )
  if lv == 2:
    a = p["a"]
    ref = f"return sum(range({a}, n + 1))"
    return base.Variant(
      f"Return the sum of the integers from {a} to n inclusive (0 if n < {a}).",
      ref,
      base.swap(ref, "n + 1", "n"),
    )
  a, b = p["a"], p["b"]
  return base.Variant(
    f"Return the sum of the integers in 1..n divisible by {a} or by {b}.",
    f"return sum(i for i in range(1, n + 1) if i % {a} == 0 or i % {b} == 0)",
    f"return sum(range({a}, n + 1, {a})) + sum(range({b}, n + 1, {b}))",
  )


@base.family(
  name="collatz",
  args="n: int",
  returns="int",
  spaces={lv: base.grid(t=range(1, 21)) for lv in base.LEVELS},
  sample=base.int_arg(-5, 60),
  edges=lambda lv, p: base.wrap(0, -7, 1, p["t"], p["t"] + 1, 27, 10**6),
  # Every n <= t gives the same answer: 3300 tasks of all families left
  # collatz 869 tests short without it.
  spare=base.int_arg(61, 2000),
)
def _collatz(lv, p):
  t = p["t"]
  rule = (
    "Repeat: halve n if it is even, else set n to 3 * n + 1; stop once"
    f" n <= {t}."
  )
  step = "    n = n // 2 if n % 2 == 0 else 3 * n + 1"
  if lv == 1:
    ref = base.lines(
      "steps = 0", f"while n > {t}:", step, "    steps += 1", "return steps"
    )
    text, bug = (
      "Return the number of steps.",
      base.swap(ref, "steps = 0", "steps = 1"),
    )
  elif lv == 2:
    ref = base.lines(
      "top = n", f"while n > {t}:", step, "    top = max(top, n)", "return top"
    )
    text, bug = (
      "Return the largest value n takes, counting the start.",
      base.swap(ref, "top = n", "top = 0"),
    )
  else:
    ref = base.lines(
      "odd = 0", f"while n > {t}:", "    odd += n % 2", step, "return odd"
    )
    text = "Return how many of the values n takes (the start included) are odd."
    bug = base.swap(ref, "odd += n % 2", "odd += 1")
  return base.Variant(f"{rule} {text}", ref, bug)


# Small algorithms.


@base.family(
  name="digit_sum",
  args="n: int",
  returns="int",
  # Base 2 would make every digital root 1.
  spaces={
    lv: base.grid(b=range(3 if lv == 3 else 2, 17)) for lv in base.LEVELS
  },
  sample=base.int_arg(-999, 999),
  edges=lambda lv, p: base.wrap(
    0, -1, p["b"], p["b"] - 1, -p["b"], 10**12, -(10**12)
  ),
)
def _digit_sum(lv, p):
  b = p["b"]
  digits = "decimal digits" if b == 10 else f"base-{b} digits"
  body = ["total = 0", "while n:", f"    total += n % {b}", f"    n //= {b}"]
  if lv == 1:
    ref = base.lines("n = abs(n)", *body, "return total")
    text = f"Return the sum of the {digits} of abs(n)."
  elif lv == 2:
    body[2] = f"    total += (n % {b}) ** 2"
    ref = base.lines("n = abs(n)", *body, "return total")
    text = f"Return the sum of the squares of the {digits} of abs(n)."
  else:
    ref = base.lines(
      "n = abs(n)",
      f"while n >= {b}:",
      *("    " + line for line in body),
      "    n = total",
      "return n",
    )
    return base.Variant(
      f"Starting from abs(n), replace the number by the sum of its {digits}"
      f" until it is below {b}; return it.",
      ref,
      base.swap(ref, f"while n >= {b}", f"while n > {b}"),
    )
  # Without abs, and with a loop that still stops for negative n.
  bug = base.swap(
    base.swap(ref, "n = abs(n)\n", ""), "while n:", "while n > 0:"
  )
  return base.Variant(text, ref, bug)


def _gcd_sample(rng, lv, p):
  # Common factors, often ones of c, so that the answers vary.
  divisors = [d for d in range(2, p["c"] + 1) if p["c"] % d == 0]
  g = rng.choice(divisors if rng.random() < 0.3 else range(1, 13))
  return [g * rng.randint(-8, 8), g * rng.randint(-8, 8)]


_GCD = ("    while y:", "        x, y = y, x % y")


@base.family(
  name="gcd",
  args="a: int, b: int",
  returns="int",
  spaces={lv: base.grid(c=range(2, 41)) for lv in base.LEVELS},
  sample=_gcd_sample,
  edges=lambda lv, p: [
    [0, 0],
    [0, 5],
    [7, 0],
    [-12, 18],
    [12, -18],
    [p["c"], p["c"]],
    [-p["c"], -p["c"] * 3],
    [base.BIG, base.BIG // 2],
    [1, -1],
  ],
)
def _gcd(lv, p):
  c = p["c"]
  if lv == 1:
    ref = base.lines(
      f"x = {c}", "for y in (abs(a), abs(b)):", *_GCD, "return x"
    )
    return base.Variant(
      f"Return the greatest common divisor of a, b and {c}.",
      ref,
      base.swap(ref, "(abs(a), abs(b))", "(a, b)"),
    )
  if lv == 2:
    ref = base.lines(
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
    return base.Variant(
      f"Return the least common multiple of abs(a), abs(b) and {c} (0 if a or"
      " b is 0).",
      ref,
      base.swap(ref, "x = x * y // g", "x = x * y"),
    )
  ref = f"return sum(1 for d in range(1, {c} + 1) if a % d == 0 and b % d == 0)"
  return base.Variant(
    f"Return how many d in 1..{c} divide both a and b.",
    ref,
    base.swap(ref, f"{c} + 1", f"{c}"),
  )


def _runs_sample(rng, lv, p):
  runs = [
    rng.choice("aab") * rng.randint(1, 4) for _ in range(rng.randint(0, 4))
  ]
  return ["".join(runs)]


@base.family(
  name="rle",
  args="s: str",
  returns="str",
  spaces={
    1: base.grid(sep=["", ",", ";", " ", "-", "|", "/", "."]),
    2: base.grid(sep=["", ",", ";", " ", "-", "|", "/", "."]),
    3: base.grid(m=range(2, 5), sep=["", ",", ";", "-"]),
  },
  sample=_runs_sample,
  edges=lambda lv, p: base.wrap(
    "", "a", "aaaa", "abc", "a" * 50, "aabbaa", "zzzzy"
  ),
)
def _rle(lv, p):
  sep = p["sep"]
  if lv == 1:
    ref = base.lines(
      "import itertools",
      f"return {sep!r}.join(c + str(len(list(g))) for c, g in"
      " itertools.groupby(s))",
    )
    return base.Variant(
      "Write each run of equal characters of s as the character and the run"
      f" length, and join these with {sep!r}.",
      ref,
      base.swap(ref, "len(list(g))", "len(list(g)) - 1"),
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
    ref = base.lines(
      *runs,
      f"return {sep!r}.join((str(n) if n > 1 else '') + c for c, n in runs)",
    )
    return base.Variant(
      "Write each run of equal characters of s as the run length (left out"
      f" for runs of 1) and the character, and join these with {sep!r}.",
      ref,
      base.swap(ref, "n > 1", "n > 0"),
    )
  m = p["m"]
  ref = base.lines(
    *runs,
    f"return {sep!r}.join(c + str(n) if n >= {m} else c * n for c, n in runs)",
  )
  return base.Variant(
    f"Write each run of {m} or more equal characters of s as the character"
    " and the run length, keep shorter runs as they are, and join the pieces"
    f" with {sep!r}.",
    ref,
    base.swap(ref, f"n >= {m}", f"n > {m}"),
  )


def _palindrome_sample(rng, lv, p):
  c = p.get("c", " ")
  half = base.word(rng, "abAB" if lv > 1 else "abc", 0, 4)
  mid = base.word(rng, "xy", 0, 1)
  s = (
    half + mid + half[::-1]
    if rng.random() < 0.6
    else base.word(rng, "abc", 0, 7)
  )
  if lv > 1 and rng.random() < 0.5:
    s = "".join(ch.swapcase() if rng.random() < 0.3 else ch for ch in s)
  for _ in range(rng.randint(0, 2)):
    i = rng.randint(0, len(s))
    s = s[:i] + c + s[i:]
  return [s]


@base.family(
  name="palindrome",
  args="s: str",
  returns="bool",
  spaces={
    1: base.grid(c=" -_.,:;!?*"),
    2: base.grid(c=" -_.,:;!?*"),
    3: base.grid(n=range(1, 6), c=" ,!"),
  },
  sample=_palindrome_sample,
  edges=lambda lv, p: base.wrap(
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
    ref = base.lines(f"t = s.replace({c!r}, ''){lower}", "return t == t[::-1]")
    case = " ignoring case and" if lv == 2 else ""
    return base.Variant(
      f"Return True if s reads the same backwards,{case} ignoring every {c!r}.",
      ref,
      base.swap(ref, f"s.replace({c!r}, '')", "s"),
    )
  n = p["n"]
  ref = base.lines(
    "t = [ch.lower() for ch in s if ch.isalpha()]",
    f"return len(t) >= {n} and t == t[::-1]",
  )
  return base.Variant(
    f"Return True if s has at least {n} letters and its letters, lower-cased,"
    " read the same backwards; ignore other characters.",
    ref,
    base.swap(ref, f">= {n}", f"> {n}"),
  )


def _binary_sample(rng, lv, p):
  n = rng.randint(0, max(200, 2 ** (p.get("w", 0) + 1)))
  return [-n if lv == 3 and rng.random() < 0.4 else n]


@base.family(
  name="binary",
  args="n: int",
  returns="str",
  spaces={
    1: base.grid(w=range(2, 13)),
    2: base.grid(b=range(3, 10)),
    3: base.grid(k=range(2, 6), sep="_ ,.'"),
  },
  sample=_binary_sample,
  edges=lambda lv, p: base.wrap(
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
    return base.Variant(
      f"Return n (n >= 0) in binary without '0b', padded with zeros to at"
      f" least {w} digits.",
      ref,
      base.swap(ref, f"zfill({w})", f"zfill({w - 1})"),
    )
  if lv == 2:
    b = p["b"]
    ref = base.lines(
      "digits = ''",
      "while n:",
      f"    digits = str(n % {b}) + digits",
      f"    n //= {b}",
      "return digits or '0'",
    )
    return base.Variant(
      f"Return n (n >= 0) written in base {b} ('0' for 0).",
      ref,
      base.swap(ref, f"str(n % {b}) + digits", f"digits + str(n % {b})"),
    )
  k, sep = p["k"], p["sep"]
  ref = base.lines(
    "d = bin(abs(n))[2:]",
    "groups = []",
    "while d:",
    f"    groups.insert(0, d[-{k}:])",
    f"    d = d[:-{k}]",
    f"return '-' * (n < 0) + {sep!r}.join(groups)",
  )
  bug = base.swap(
    base.swap(ref, f"groups.insert(0, d[-{k}:])", f"groups.append(d[:{k}])"),
    f"d = d[:-{k}]",
    f"d = d[{k}:]",
  )
  return base.Variant(
    f"Return the binary digits of abs(n) in groups of {k} from the right,"
    f" joined by {sep!r}, after a '-' if n < 0.",
    ref,
    bug,
  )


_WORDS = ("Foo", "Bar", "Baz", "Qux", "Zap")


@base.family(
  name="fizzbuzz",
  args="n: int",
  returns="str",
  spaces={
    1: base.grid(lambda p: p["a"] != p["b"], a=range(2, 10), b=range(2, 10)),
    2: base.grid(
      lambda p: p["w"][0] != p["w"][1],
      w=list(itertools.product(_WORDS, _WORDS)),
      ab=((2, 3), (3, 5), (2, 5), (3, 4), (4, 6)),
    ),
    3: base.grid(abc=list(itertools.combinations(range(2, 8), 3))),
  },
  sample=base.int_arg(-30, 120),
  edges=lambda lv, p: base.wrap(
    0, 1, -1, 7, -60, 210, 420, base.BIG, base.BIG + 1
  ),
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
  ref = base.lines("out = ''", *checks, "return out or str(n)")
  parts = ", ".join(f"{w!r} if n % {d} == 0" for d, w in pairs)
  d, _ = pairs[-1]
  return base.Variant(
    f"Concatenate {parts}; return the result, or str(n) if it is empty.",
    ref,
    base.swap(ref, f"\nif n % {d} == 0:", f"\nelif n % {d} == 0:"),
  )


@base.family(
  name="second_largest",
  args="xs: list[int]",
  returns="int",
  spaces={
    1: base.grid(d=base.NONZERO),
    2: base.grid(k=(3, 4), d=base.NONZERO),
    3: base.grid(d=base.NONZERO),
  },
  sample=lambda rng, lv, p: [base.ints(rng, -9, 9, 7)],
  edges=lambda lv, p: [
    *base.list_edges()(lv, p),
    [[5, 5]],
    [[5, 5, 3]],
    [[-1, -2]],
    [list(range(100))],
  ],
)
def _second_largest(lv, p):
  d, k = p["d"], p.get("k", 2)
  nth = base.ORDINALS[k]
  if lv < 3:
    ref = base.lines(
      "vals = sorted(set(xs))",
      f"return vals[-{k}] if len(vals) >= {k} else {d}",
    )
    text = f"Return the {nth} largest distinct value in xs"
  else:
    ref = base.lines(
      "vals = sorted(set(xs))",
      f"return vals[-1] - vals[-2] if len(vals) >= 2 else {d}",
    )
    text = "Return the largest distinct value in xs minus the second largest"
  return base.Variant(
    f"{text}, or {d} if there are fewer than {k} distinct values.",
    ref,
    base.swap(ref, "sorted(set(xs))", "sorted(xs)"),
  )
