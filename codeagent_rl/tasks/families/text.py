"""String function-task families."""

from __future__ import annotations

from codeagent_rl.tasks.families import base

# Strings.


def _reverse_sample(rng, lv, p):
  if lv == 3:
    words = [base.word(rng, "abcde", 0, 4) for _ in range(rng.randint(1, 4))]
    return [p["sep"].join(words)]
  return [base.word(rng, "abcdefgh", 0, p.get("n", 8) + 4)]


@base.family(
  name="reverse",
  args="s: str",
  returns="str",
  spaces={
    1: base.grid(n=range(2, 21)),
    2: base.grid(i=range(0, 4), k=range(2, 5)),
    3: base.grid(sep=" ,;-/", sep2=" ,;-/"),
  },
  sample=_reverse_sample,
  edges=lambda lv, p: base.wrap(
    "", "a", "ab", "abc" * 40, " ", ",,", "a;b-c d/e"
  ),
)
def _reverse(lv, p):
  if lv == 1:
    n = p["n"]
    return base.Variant(
      f"Return the first {n} characters of s in reverse order.",
      f"return s[:{n}][::-1]",
      f"return s[::-1][:{n}]",
    )
  if lv == 2:
    i, k = p["i"], p["k"]
    return base.Variant(
      f"Take every {base.ORDINALS[k]} character of s,"
      f" starting at index {i},"
      " and return them in reverse order.",
      f"return s[{i}::{k}][::-1]",
      f"return s[::-1][{i}::{k}]",
    )
  sep, sep2 = p["sep"], p["sep2"]
  return base.Variant(
    f"Split s on {sep!r}, reverse the order of the parts and join them with"
    f" {sep2!r}.",
    f"return {sep2!r}.join(s.split({sep!r})[::-1])",
    f"return {sep2!r}.join(s.split({sep!r}))[::-1]",
  )


def _other_letters(c: str) -> str:
  i = base.LOWER.index(c)
  return base.LOWER[(i + 1) % 26] + base.LOWER[(i + 7) % 26]


@base.family(
  name="count_char",
  args="s: str",
  returns="int",
  spaces={lv: base.grid(c=base.LOWER) for lv in base.LEVELS},
  sample=lambda rng, lv, p: [
    base.word(
      rng,
      p["c"] * 2 + _other_letters(p["c"]) + p["c"].upper() * (lv == 2),
      0,
      9,
    )
  ],
  edges=lambda lv, p: base.wrap(
    "", p["c"], p["c"] * 2, p["c"] * 3, p["c"].upper() * 3, p["c"] * 50, "?!"
  ),
)
def _count_char(lv, p):
  c = p["c"]
  if lv == 1:
    return base.Variant(
      f"Return how many times {c!r} occurs in s.",
      f"return s.count({c!r})",
      f"return s[1:].count({c!r})",
    )
  if lv == 2:
    return base.Variant(
      f"Return how many times {c!r} occurs in s, ignoring case.",
      f"return s.lower().count({c!r})",
      f"return s.count({c!r})",
    )
  return base.Variant(
    f"Return the number of indices i where s[i] and s[i + 1] are both {c!r}.",
    base.lines(
      "n = 0",
      "for i in range(len(s) - 1):",
      f"    if s[i] == s[i + 1] == {c!r}:",
      "        n += 1",
      "return n",
    ),
    f"return s.count({c * 2!r})",
  )


@base.family(
  name="caesar",
  args="s: str",
  returns="str",
  spaces={lv: base.grid(k=range(1, 26)) for lv in base.LEVELS},
  sample=lambda rng, lv, p: [
    base.word(rng, "abcxyz !" + "ABYZ" * (lv == 3) + base.LOWER, 0, 10)
  ],
  edges=lambda lv, p: base.wrap(
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
  ref = base.lines(*loop, "    out += ch", "return out")
  if lv == 1:
    text = f"Shift each lowercase letter of s forward by {k}, z wrapping to a"
    bug = base.swap(ref, "% 26", "% 25")
  elif lv == 2:
    text = f"Shift each lowercase letter of s back by {k}, a wrapping to z"
    bug = base.swap(ref, f"- {k})", f"- {k - 1})")
  else:
    text = f"Shift each ASCII letter of s forward by {k}, keeping its case"
    bug = base.swap(ref, "% 26 + 65", "% 26 + 97")
  return base.Variant(text + "; keep other characters.", ref, bug)


@base.family(
  name="vowels",
  args="s: str",
  returns="str",
  spaces={lv: base.grid(r="*#_-.!?+=@0123456789") for lv in base.LEVELS},
  sample=lambda rng, lv, p: [
    base.word(rng, "aeioubcdst" + "AEUB" * (lv == 2), 0, 10)
  ],
  edges=lambda lv, p: base.wrap(
    "", "aeiou", "AEIOU", "xyz", "u", "queue" * 30, "a b"
  ),
)
def _vowels(lv, p):
  r = p["r"]
  if lv < 3:
    test = "ch.lower() in" if lv == 2 else "ch in"
    ref = f"return ''.join({r!r} if {test} 'aeiou' else ch for ch in s)"
    case = ", upper or lower case," if lv == 2 else ""
    return base.Variant(
      f"Replace every vowel (a, e, i, o, u){case} in s with {r!r}.",
      ref,
      base.swap(ref, "ch.lower() in", "ch in")
      if lv == 2
      else base.swap(ref, "'aeiou'", "'aeio'"),
    )
  ref = base.lines(
    "head = ''.join(ch for ch in s if ch not in 'aeiou')",
    "tail = ''.join(ch for ch in s if ch in 'aeiou')",
    f"return head + {r!r} + tail",
  )
  return base.Variant(
    "Return the non-vowels of s, then"
    f" {r!r}, then the vowels (a, e, i, o, u) of s, both in order.",
    ref,
    base.swap(ref, "'aeiou'", "'aeio'", count=2),
  )


def _capitalize_sample(rng, lv, p):
  words = [base.word(rng, "abcxyzAB", 0, 5) for _ in range(rng.randint(1, 4))]
  return [p["sep"].join(words)]


@base.family(
  name="capitalize",
  args="s: str",
  returns="str",
  spaces={
    1: base.grid(sep=base.SEPS),
    2: base.grid(
      lambda p: p["sep"] != p["sep2"],
      sep=base.SEPS[:6],
      sep2=base.SEPS[:6],
    ),
    3: base.grid(n=range(1, 5), sep=base.SEPS),
  },
  sample=_capitalize_sample,
  edges=lambda lv, p: base.wrap(
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
    ref = base.lines(
      f"words = s.split({sep!r})",
      f"return {sep!r}.join({cap} if len(w) > {n} else w for w in words)",
    )
    text = (
      f"Upper-case the first letter of each {sep!r}-separated word of s that"
      f" is longer than {n} characters."
    )
    return base.Variant(text, ref, base.swap(ref, f"> {n}", f">= {n}"))
  return base.Variant(
    text + " Keep the other letters.",
    ref,
    base.swap(ref, cap, "w.capitalize()"),
  )
