"""Loop, accumulator and small-algorithm function-task families.

Each family is registered in this module's `FAMILIES`; `synthetic` merges
the family modules into its own `FAMILIES`.
"""

from __future__ import annotations

import itertools

from codeagent_rl.tasks import family_base

FAMILIES: dict[str, family_base.Family] = {}
_family = family_base.registrar(FAMILIES)


# Loops and accumulators.


@_family(
  "factorial_mod",
  "n: int",
  "int",
  # Primes above the sampled n, so that n! % m is rarely 0.
  {
    lv: family_base.grid(
      m=[m for m in range(61, 400) if family_base.is_prime(m)]
    )
    for lv in family_base.LEVELS
  },
  lambda rng, lv, p: [rng.randint(-10 if lv == 2 else 0, 60)],
  lambda lv, p: family_base.wrap(
    0, 1, 2, 3, p["m"] - 1, p["m"], 500, *((-5,) * (lv == 2))
  ),
)
def _factorial_mod(lv, p):
  m = p["m"]
  if lv == 3:
    ref = family_base.lines(
      "total = f = 1",
      "for i in range(1, n + 1):",
      f"    f = f * i % {m}",
      f"    total = (total + f) % {m}",
      "return total",
    )
    return family_base.Variant(
      f"Return (0! + 1! + ... + n!) % {m}, for n >= 0.",
      ref,
      family_base.swap(ref, "total = f = 1", "total = 0\nf = 1"),
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
  ref = family_base.lines(
    "r = 1",
    f"for i in range({start}, n + 1{step}):",
    f"    r = r * i % {m}",
    "return r",
  )
  return family_base.Variant(text, ref, family_base.swap(ref, "n + 1", "n"))


@_family(
  "triangular",
  "n: int",
  "int",
  {
    1: family_base.grid(k=range(1, 13)),
    2: family_base.grid(a=range(-5, 6)),
    3: family_base.grid(
      lambda p: p["a"] < p["b"], a=range(2, 10), b=range(2, 10)
    ),
  },
  lambda rng, lv, p: [rng.randint(-3, 120 if lv == 3 else 40)],
  lambda lv, p: family_base.wrap(0, 1, 2, -1, -100, 10**5),
)
def _triangular(lv, p):
  if lv == 1:
    k = p["k"]
    term = "i" if k == 1 else f"{k} * i"
    ref = family_base.lines(
      "total = 0",
      "for i in range(1, n + 1):",
      f"    total += {term}",
      "return total",
    )
    return family_base.Variant(
      f"Return the sum of {term} for i from 1 to n (0 if n < 1).",
      ref,
      family_base.swap(ref, "n + 1", "n"),
    )
  if lv == 2:
    a = p["a"]
    ref = f"return sum(range({a}, n + 1))"
    return family_base.Variant(
      f"Return the sum of the integers from {a} to n inclusive (0 if n < {a}).",
      ref,
      family_base.swap(ref, "n + 1", "n"),
    )
  a, b = p["a"], p["b"]
  return family_base.Variant(
    f"Return the sum of the integers in 1..n divisible by {a} or by {b}.",
    f"return sum(i for i in range(1, n + 1) if i % {a} == 0 or i % {b} == 0)",
    f"return sum(range({a}, n + 1, {a})) + sum(range({b}, n + 1, {b}))",
  )


@_family(
  "collatz",
  "n: int",
  "int",
  {lv: family_base.grid(t=range(1, 21)) for lv in family_base.LEVELS},
  family_base.int_arg(-5, 60),
  lambda lv, p: family_base.wrap(0, -7, 1, p["t"], p["t"] + 1, 27, 10**6),
)
def _collatz(lv, p):
  t = p["t"]
  rule = (
    "Repeat: halve n if it is even, else set n to 3 * n + 1; stop once"
    f" n <= {t}."
  )
  step = "    n = n // 2 if n % 2 == 0 else 3 * n + 1"
  if lv == 1:
    ref = family_base.lines(
      "steps = 0", f"while n > {t}:", step, "    steps += 1", "return steps"
    )
    text, bug = (
      "Return the number of steps.",
      family_base.swap(ref, "steps = 0", "steps = 1"),
    )
  elif lv == 2:
    ref = family_base.lines(
      "top = n", f"while n > {t}:", step, "    top = max(top, n)", "return top"
    )
    text, bug = (
      "Return the largest value n takes, counting the start.",
      family_base.swap(ref, "top = n", "top = 0"),
    )
  else:
    ref = family_base.lines(
      "odd = 0", f"while n > {t}:", "    odd += n % 2", step, "return odd"
    )
    text = "Return how many of the values n takes (the start included) are odd."
    bug = family_base.swap(ref, "odd += n % 2", "odd += 1")
  return family_base.Variant(f"{rule} {text}", ref, bug)


# Small algorithms.


@_family(
  "digit_sum",
  "n: int",
  "int",
  # Base 2 would make every digital root 1.
  {
    lv: family_base.grid(b=range(3 if lv == 3 else 2, 17))
    for lv in family_base.LEVELS
  },
  family_base.int_arg(-999, 999),
  lambda lv, p: family_base.wrap(
    0, -1, p["b"], p["b"] - 1, -p["b"], 10**12, -(10**12)
  ),
)
def _digit_sum(lv, p):
  b = p["b"]
  digits = "decimal digits" if b == 10 else f"base-{b} digits"
  body = ["total = 0", "while n:", f"    total += n % {b}", f"    n //= {b}"]
  if lv == 1:
    ref = family_base.lines("n = abs(n)", *body, "return total")
    text = f"Return the sum of the {digits} of abs(n)."
  elif lv == 2:
    body[2] = f"    total += (n % {b}) ** 2"
    ref = family_base.lines("n = abs(n)", *body, "return total")
    text = f"Return the sum of the squares of the {digits} of abs(n)."
  else:
    ref = family_base.lines(
      "n = abs(n)",
      f"while n >= {b}:",
      *("    " + line for line in body),
      "    n = total",
      "return n",
    )
    return family_base.Variant(
      f"Starting from abs(n), replace the number by the sum of its {digits}"
      f" until it is below {b}; return it.",
      ref,
      family_base.swap(ref, f"while n >= {b}", f"while n > {b}"),
    )
  # Without abs, and with a loop that still stops for negative n.
  bug = family_base.swap(
    family_base.swap(ref, "n = abs(n)\n", ""), "while n:", "while n > 0:"
  )
  return family_base.Variant(text, ref, bug)


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
  {lv: family_base.grid(c=range(2, 41)) for lv in family_base.LEVELS},
  _gcd_sample,
  lambda lv, p: [
    [0, 0],
    [0, 5],
    [7, 0],
    [-12, 18],
    [12, -18],
    [p["c"], p["c"]],
    [-p["c"], -p["c"] * 3],
    [family_base.BIG, family_base.BIG // 2],
    [1, -1],
  ],
)
def _gcd(lv, p):
  c = p["c"]
  if lv == 1:
    ref = family_base.lines(
      f"x = {c}", "for y in (abs(a), abs(b)):", *_GCD, "return x"
    )
    return family_base.Variant(
      f"Return the greatest common divisor of a, b and {c}.",
      ref,
      family_base.swap(ref, "(abs(a), abs(b))", "(a, b)"),
    )
  if lv == 2:
    ref = family_base.lines(
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
    return family_base.Variant(
      f"Return the least common multiple of abs(a), abs(b) and {c} (0 if a or"
      " b is 0).",
      ref,
      family_base.swap(ref, "x = x * y // g", "x = x * y"),
    )
  ref = f"return sum(1 for d in range(1, {c} + 1) if a % d == 0 and b % d == 0)"
  return family_base.Variant(
    f"Return how many d in 1..{c} divide both a and b.",
    ref,
    family_base.swap(ref, f"{c} + 1", f"{c}"),
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
    1: family_base.grid(sep=["", ",", ";", " ", "-", "|", "/", "."]),
    2: family_base.grid(sep=["", ",", ";", " ", "-", "|", "/", "."]),
    3: family_base.grid(m=range(2, 5), sep=["", ",", ";", "-"]),
  },
  _runs_sample,
  lambda lv, p: family_base.wrap(
    "", "a", "aaaa", "abc", "a" * 50, "aabbaa", "zzzzy"
  ),
)
def _rle(lv, p):
  sep = p["sep"]
  if lv == 1:
    ref = family_base.lines(
      "import itertools",
      f"return {sep!r}.join(c + str(len(list(g))) for c, g in"
      " itertools.groupby(s))",
    )
    return family_base.Variant(
      "Write each run of equal characters of s as the character and the run"
      f" length, and join these with {sep!r}.",
      ref,
      family_base.swap(ref, "len(list(g))", "len(list(g)) - 1"),
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
    ref = family_base.lines(
      *runs,
      f"return {sep!r}.join((str(n) if n > 1 else '') + c for c, n in runs)",
    )
    return family_base.Variant(
      "Write each run of equal characters of s as the run length (left out"
      f" for runs of 1) and the character, and join these with {sep!r}.",
      ref,
      family_base.swap(ref, "n > 1", "n > 0"),
    )
  m = p["m"]
  ref = family_base.lines(
    *runs,
    f"return {sep!r}.join(c + str(n) if n >= {m} else c * n for c, n in runs)",
  )
  return family_base.Variant(
    f"Write each run of {m} or more equal characters of s as the character"
    " and the run length, keep shorter runs as they are, and join the pieces"
    f" with {sep!r}.",
    ref,
    family_base.swap(ref, f"n >= {m}", f"n > {m}"),
  )


def _palindrome_sample(rng, lv, p):
  c = p.get("c", " ")
  half = family_base.word(rng, "abAB" if lv > 1 else "abc", 0, 4)
  mid = family_base.word(rng, "xy", 0, 1)
  s = (
    half + mid + half[::-1]
    if rng.random() < 0.6
    else family_base.word(rng, "abc", 0, 7)
  )
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
    1: family_base.grid(c=" -_.,:;!?*"),
    2: family_base.grid(c=" -_.,:;!?*"),
    3: family_base.grid(n=range(1, 6), c=" ,!"),
  },
  _palindrome_sample,
  lambda lv, p: family_base.wrap(
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
    ref = family_base.lines(
      f"t = s.replace({c!r}, ''){lower}", "return t == t[::-1]"
    )
    case = " ignoring case and" if lv == 2 else ""
    return family_base.Variant(
      f"Return True if s reads the same backwards,{case} ignoring every {c!r}.",
      ref,
      family_base.swap(ref, f"s.replace({c!r}, '')", "s"),
    )
  n = p["n"]
  ref = family_base.lines(
    "t = [ch.lower() for ch in s if ch.isalpha()]",
    f"return len(t) >= {n} and t == t[::-1]",
  )
  return family_base.Variant(
    f"Return True if s has at least {n} letters and its letters, lower-cased,"
    " read the same backwards; ignore other characters.",
    ref,
    family_base.swap(ref, f">= {n}", f"> {n}"),
  )


def _binary_sample(rng, lv, p):
  n = rng.randint(0, max(200, 2 ** (p.get("w", 0) + 1)))
  return [-n if lv == 3 and rng.random() < 0.4 else n]


@_family(
  "binary",
  "n: int",
  "str",
  {
    1: family_base.grid(w=range(2, 13)),
    2: family_base.grid(b=range(3, 10)),
    3: family_base.grid(k=range(2, 6), sep="_ ,.'"),
  },
  _binary_sample,
  lambda lv, p: family_base.wrap(
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
    return family_base.Variant(
      f"Return n (n >= 0) in binary without '0b', padded with zeros to at"
      f" least {w} digits.",
      ref,
      family_base.swap(ref, f"zfill({w})", f"zfill({w - 1})"),
    )
  if lv == 2:
    b = p["b"]
    ref = family_base.lines(
      "digits = ''",
      "while n:",
      f"    digits = str(n % {b}) + digits",
      f"    n //= {b}",
      "return digits or '0'",
    )
    return family_base.Variant(
      f"Return n (n >= 0) written in base {b} ('0' for 0).",
      ref,
      family_base.swap(ref, f"str(n % {b}) + digits", f"digits + str(n % {b})"),
    )
  k, sep = p["k"], p["sep"]
  ref = family_base.lines(
    "d = bin(abs(n))[2:]",
    "groups = []",
    "while d:",
    f"    groups.insert(0, d[-{k}:])",
    f"    d = d[:-{k}]",
    f"return '-' * (n < 0) + {sep!r}.join(groups)",
  )
  bug = family_base.swap(
    family_base.swap(
      ref, f"groups.insert(0, d[-{k}:])", f"groups.append(d[:{k}])"
    ),
    f"d = d[:-{k}]",
    f"d = d[{k}:]",
  )
  return family_base.Variant(
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
    1: family_base.grid(
      lambda p: p["a"] != p["b"], a=range(2, 10), b=range(2, 10)
    ),
    2: family_base.grid(
      lambda p: p["w"][0] != p["w"][1],
      w=list(itertools.product(_WORDS, _WORDS)),
      ab=((2, 3), (3, 5), (2, 5), (3, 4), (4, 6)),
    ),
    3: family_base.grid(abc=list(itertools.combinations(range(2, 8), 3))),
  },
  family_base.int_arg(-30, 120),
  lambda lv, p: family_base.wrap(
    0, 1, -1, 7, -60, 210, 420, family_base.BIG, family_base.BIG + 1
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
  ref = family_base.lines("out = ''", *checks, "return out or str(n)")
  parts = ", ".join(f"{w!r} if n % {d} == 0" for d, w in pairs)
  d, _ = pairs[-1]
  return family_base.Variant(
    f"Concatenate {parts}; return the result, or str(n) if it is empty.",
    ref,
    family_base.swap(ref, f"\nif n % {d} == 0:", f"\nelif n % {d} == 0:"),
  )


@_family(
  "second_largest",
  "xs: list[int]",
  "int",
  {
    1: family_base.grid(d=family_base.NONZERO),
    2: family_base.grid(k=(3, 4), d=family_base.NONZERO),
    3: family_base.grid(d=family_base.NONZERO),
  },
  lambda rng, lv, p: [family_base.ints(rng, -9, 9, 7)],
  lambda lv, p: [
    *family_base.list_edges()(lv, p),
    [[5, 5]],
    [[5, 5, 3]],
    [[-1, -2]],
    [list(range(100))],
  ],
)
def _second_largest(lv, p):
  d, k = p["d"], p.get("k", 2)
  nth = family_base.ORDINALS[k]
  if lv < 3:
    ref = family_base.lines(
      "vals = sorted(set(xs))",
      f"return vals[-{k}] if len(vals) >= {k} else {d}",
    )
    text = f"Return the {nth} largest distinct value in xs"
  else:
    ref = family_base.lines(
      "vals = sorted(set(xs))",
      f"return vals[-1] - vals[-2] if len(vals) >= 2 else {d}",
    )
    text = "Return the largest distinct value in xs minus the second largest"
  return family_base.Variant(
    f"{text}, or {d} if there are fewer than {k} distinct values.",
    ref,
    family_base.swap(ref, "sorted(set(xs))", "sorted(xs)"),
  )
