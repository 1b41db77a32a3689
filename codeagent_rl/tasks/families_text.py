"""String function-task families.

Each family is registered in this module's `FAMILIES`; `synthetic` merges
the family modules into its own `FAMILIES`.
"""

from __future__ import annotations

from codeagent_rl.tasks import family_base

FAMILIES: dict[str, family_base.Family] = {}
_family = family_base.registrar(FAMILIES)


# Strings.


def _reverse_sample(rng, lv, p):
  if lv == 3:
    words = [
      family_base.word(rng, "abcde", 0, 4) for _ in range(rng.randint(1, 4))
    ]
    return [p["sep"].join(words)]
  return [family_base.word(rng, "abcdefgh", 0, p.get("n", 8) + 4)]


@_family(
  "reverse",
  "s: str",
  "str",
  {
    1: family_base.grid(n=range(2, 21)),
    2: family_base.grid(i=range(0, 4), k=range(2, 5)),
    3: family_base.grid(sep=" ,;-/", sep2=" ,;-/"),
  },
  _reverse_sample,
  lambda lv, p: family_base.wrap(
    "", "a", "ab", "abc" * 40, " ", ",,", "a;b-c d/e"
  ),
)
def _reverse(lv, p):
  if lv == 1:
    n = p["n"]
    return family_base.Variant(
      f"Return the first {n} characters of s in reverse order.",
      f"return s[:{n}][::-1]",
      f"return s[::-1][:{n}]",
    )
  if lv == 2:
    i, k = p["i"], p["k"]
    return family_base.Variant(
      f"Take every {family_base.ORDINALS[k]} character of s,"
      f" starting at index {i},"
      " and return them in reverse order.",
      f"return s[{i}::{k}][::-1]",
      f"return s[::-1][{i}::{k}]",
    )
  sep, sep2 = p["sep"], p["sep2"]
  return family_base.Variant(
    f"Split s on {sep!r}, reverse the order of the parts and join them with"
    f" {sep2!r}.",
    f"return {sep2!r}.join(s.split({sep!r})[::-1])",
    f"return {sep2!r}.join(s.split({sep!r}))[::-1]",
  )


def _other_letters(c: str) -> str:
  i = family_base.LOWER.index(c)
  return family_base.LOWER[(i + 1) % 26] + family_base.LOWER[(i + 7) % 26]


@_family(
  "count_char",
  "s: str",
  "int",
  {lv: family_base.grid(c=family_base.LOWER) for lv in family_base.LEVELS},
  lambda rng, lv, p: [
    family_base.word(
      rng,
      p["c"] * 2 + _other_letters(p["c"]) + p["c"].upper() * (lv == 2),
      0,
      9,
    )
  ],
  lambda lv, p: family_base.wrap(
    "", p["c"], p["c"] * 2, p["c"] * 3, p["c"].upper() * 3, p["c"] * 50, "?!"
  ),
)
def _count_char(lv, p):
  c = p["c"]
  if lv == 1:
    return family_base.Variant(
      f"Return how many times {c!r} occurs in s.",
      f"return s.count({c!r})",
      f"return s[1:].count({c!r})",
    )
  if lv == 2:
    return family_base.Variant(
      f"Return how many times {c!r} occurs in s, ignoring case.",
      f"return s.lower().count({c!r})",
      f"return s.count({c!r})",
    )
  return family_base.Variant(
    f"Return the number of indices i where s[i] and s[i + 1] are both {c!r}.",
    family_base.lines(
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
  {lv: family_base.grid(k=range(1, 26)) for lv in family_base.LEVELS},
  lambda rng, lv, p: [
    family_base.word(
      rng, "abcxyz !" + "ABYZ" * (lv == 3) + family_base.LOWER, 0, 10
    )
  ],
  lambda lv, p: family_base.wrap(
    "", "z", "a", "xyz", "Hello, World!", "abc" * 40, "ZzAa"
  ),
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
  ref = family_base.lines(*loop, "    out += ch", "return out")
  if lv == 1:
    text = f"Shift each lowercase letter of s forward by {k}, z wrapping to a"
    bug = family_base.swap(ref, "% 26", "% 25")
  elif lv == 2:
    text = f"Shift each lowercase letter of s back by {k}, a wrapping to z"
    bug = family_base.swap(ref, f"- {k})", f"- {k - 1})")
  else:
    text = f"Shift each ASCII letter of s forward by {k}, keeping its case"
    bug = family_base.swap(ref, "% 26 + 65", "% 26 + 97")
  return family_base.Variant(text + "; keep other characters.", ref, bug)


@_family(
  "vowels",
  "s: str",
  "str",
  {lv: family_base.grid(r="*#_-.!?+=@0123456789") for lv in family_base.LEVELS},
  lambda rng, lv, p: [
    family_base.word(rng, "aeioubcdst" + "AEUB" * (lv == 2), 0, 10)
  ],
  lambda lv, p: family_base.wrap(
    "", "aeiou", "AEIOU", "xyz", "u", "queue" * 30, "a b"
  ),
)
def _vowels(lv, p):
  r = p["r"]
  if lv < 3:
    test = "ch.lower() in" if lv == 2 else "ch in"
    ref = f"return ''.join({r!r} if {test} 'aeiou' else ch for ch in s)"
    case = ", upper or lower case," if lv == 2 else ""
    return family_base.Variant(
      f"Replace every vowel (a, e, i, o, u){case} in s with {r!r}.",
      ref,
      family_base.swap(ref, "ch.lower() in", "ch in")
      if lv == 2
      else family_base.swap(ref, "'aeiou'", "'aeio'"),
    )
  ref = family_base.lines(
    "head = ''.join(ch for ch in s if ch not in 'aeiou')",
    "tail = ''.join(ch for ch in s if ch in 'aeiou')",
    f"return head + {r!r} + tail",
  )
  return family_base.Variant(
    "Return the non-vowels of s, then"
    f" {r!r}, then the vowels (a, e, i, o, u) of s, both in order.",
    ref,
    family_base.swap(ref, "'aeiou'", "'aeio'", count=2),
  )


def _capitalize_sample(rng, lv, p):
  words = [
    family_base.word(rng, "abcxyzAB", 0, 5) for _ in range(rng.randint(1, 4))
  ]
  return [p["sep"].join(words)]


@_family(
  "capitalize",
  "s: str",
  "str",
  {
    1: family_base.grid(sep=family_base.SEPS),
    2: family_base.grid(
      lambda p: p["sep"] != p["sep2"],
      sep=family_base.SEPS[:6],
      sep2=family_base.SEPS[:6],
    ),
    3: family_base.grid(n=range(1, 5), sep=family_base.SEPS),
  },
  _capitalize_sample,
  lambda lv, p: family_base.wrap(
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
    ref = family_base.lines(
      f"words = s.split({sep!r})",
      f"return {sep!r}.join({cap} if len(w) > {n} else w for w in words)",
    )
    text = (
      f"Upper-case the first letter of each {sep!r}-separated word of s that"
      f" is longer than {n} characters."
    )
    return family_base.Variant(
      text, ref, family_base.swap(ref, f"> {n}", f">= {n}")
    )
  return family_base.Variant(
    text + " Keep the other letters.",
    ref,
    family_base.swap(ref, cap, "w.capitalize()"),
  )
