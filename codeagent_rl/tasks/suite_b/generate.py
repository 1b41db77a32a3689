"""Suite-B inputs drawn over the seeds' types: boundary, structured, random.

  domain = mutate.Domain.from_seeds(seeds)       # seeds: [(args, kwargs)]
  gen = generate.Generator(random.Random(0), domain, seeds)
  for args, kwargs in gen.candidates("boundary"): ...

Where `mutate` changes a seed a little, this draws values afresh, from the
types and ranges the seeds show at each place (`mutate.Domain`), so that
suite B reaches inputs far from suite A's few seeds. Each candidate starts
from a seed (its *template*: argument types and their combination stay as
some seed has them) and replaces one argument (boundary, structured) or
most of them (random):

- **boundary**: ints 0, +-1, +-2, the smallest and largest seen and one
  past them, 10**9; floats 0.0, +-0.5, +-1.0, 0.001, the extremes seen;
  strings and containers empty, of one item, all items equal, sorted,
  reversed, with duplicates, or of extreme items.
- **structured**: strings that are palindromes, one repeated character,
  balanced, nested and unbalanced brackets (for the bracket pairs in the
  alphabet), extra spaces (where the seeds have spaces), mixed case (where
  the alphabet has both cases), digits among letters (where it has both),
  words of the seeds shuffled and repeated; lists that are palindromes,
  strictly increasing, alternating in sign, or with an outlier at either
  end.
- **random**: ints at several magnitudes (the seeds' range, then up to
  10, 100, ..., 10**9), floats up to `FLOAT_MAX` with 0 to 3 decimals or
  all 17 digits,
  strings over the alphabet (random characters, the seeds' words, random
  words), containers of random length from empty to past the longest seed,
  now and then `LONG_LEN` long; list arguments of one input often share a
  length.

What stays as the seeds show it: a place's types (an int stays an int,
the item types of a list are the ones seen there), the sign of numbers
(all seeds >= 1 keeps values >= 1, all >= 0 keeps them >= 0) and the
alphabet of strings: the characters seen, widened to all lowercase
letters, all uppercase letters or all digits only where the seeds show at
least `OPEN_CLASS_MIN` distinct ones of that class (so "01", "()" or "<>"
stay closed). Lengths are *not* kept: empty and single-item values are
boundary cases, and a task whose contract excludes them says so in its
precondition. All randomness comes from the one `random.Random`.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Sequence
import copy
import random
import string
from typing import Any

from codeagent_rl.tasks.suite_b import mutate

KINDS = ("boundary", "structured", "random")
# Magnitudes of random ints beyond the seeds' range, and how often each is
# drawn. 10**9 keeps products and sums of a few values exact in a float
# (< 2**53): references that compute with floats (e.g. HumanEval/103's
# mean) stay right. The largest are rare: a reference whose cost grows with
# a value inside one traced line (factorials of n, 10 ** n) runs into the
# time limit there, which costs a second per input.
INT_SCALES = (10, 100, 10**3, 10**4, 10**6, 10**9)
INT_SCALE_WEIGHTS = (3, 3, 2, 2, 1, 1)
# Largest random float. Sums of LONG_LEN such values carry rounding errors
# of ~1e-10, under the judge's absolute tolerance (1e-9), so two correct
# float algorithms agree on them.
FLOAT_MAX = 1e4
# Length of the long strings and containers that random draws include.
LONG_LEN = 60
# Distinct characters of a class (lowercase, uppercase, digits) the seeds
# must show before the whole class is drawn from.
OPEN_CLASS_MIN = 5
_DEFAULT_ALPHABET = string.ascii_lowercase + " "
_BRACKETS = ("()", "[]", "{}", "<>")
_CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits)


class _Skip(Exception):
  """This generator has nothing to offer here (e.g. no item type seen)."""


def _low(stats: Any) -> Any:
  """The lowest number a place allows: 1, 0 or None (any sign)."""
  if stats is None or stats.lo is None:
    return None
  if stats.lo >= 1:
    return 1
  return 0 if stats.lo >= 0 else None


def _signed(value: Any, low: Any) -> Any:
  """`value` folded into the place's sign class."""
  if low is None:
    return value
  value = abs(value)
  return value if value >= low else type(value)(low)


class Generator:
  """Draws inputs over the seeds' domain with one `random.Random`."""

  def __init__(
    self,
    rng: random.Random,
    domain: mutate.Domain,
    seeds: Sequence[tuple[Sequence, dict]],
  ):
    self.rng = rng
    self.domain = domain
    self.seeds = [(list(a), dict(k)) for a, k in seeds]

  # --- Scalars ----------------------------------------------------------------

  def alphabet(self, path: tuple) -> str:
    """The characters strings at `path` are drawn from."""
    stats = self.domain.stats(path, str)
    chars = set(stats.chars) if stats is not None else set()
    for cls in _CLASSES:
      if len(chars & set(cls)) >= OPEN_CLASS_MIN:
        chars |= set(cls)
    return "".join(sorted(chars)) or _DEFAULT_ALPHABET

  def _words(self, path: tuple) -> list[str]:
    stats = self.domain.stats(path, str)
    words = set()
    for text in stats.examples if stats is not None else ():
      words.update(w for w in text.split(" ") if w)
    return sorted(words)

  def _random_int(self, path: tuple) -> int:
    stats = self.domain.stats(path, int)
    low = _low(stats)
    if stats is not None and self.rng.random() < 0.4:
      return self.rng.randint(stats.lo, stats.hi)
    (scale,) = self.rng.choices(INT_SCALES, INT_SCALE_WEIGHTS)
    return _signed(self.rng.randint(-scale, scale), low)

  def _boundary_ints(self, path: tuple) -> list[int]:
    stats = self.domain.stats(path, int)
    values = {0, 1, -1, 2, -2, INT_SCALES[-1], -INT_SCALES[-1]}
    if stats is not None:
      values |= {stats.lo, stats.hi, stats.lo - 1, stats.hi + 1}
    low = _low(stats)
    return sorted(v for v in values if low is None or v >= low)

  def _random_float(self, path: tuple) -> float:
    stats = self.domain.stats(path, float)
    if stats is not None and self.rng.random() < 0.4:
      value = self.rng.uniform(stats.lo, stats.hi)
    else:
      scale = self.rng.choice((1.0, 10.0, 100.0, FLOAT_MAX))
      value = self.rng.uniform(-scale, scale)
    if self.rng.random() < 0.7:
      value = round(value, self.rng.randint(0, 3))
    return _signed(value, _low(stats))

  def _boundary_floats(self, path: tuple) -> list[float]:
    stats = self.domain.stats(path, float)
    values = {0.0, 0.5, -0.5, 1.0, -1.0, 0.001}
    if stats is not None:
      values |= {float(stats.lo), float(stats.hi)}
    low = _low(stats)
    return sorted(v for v in values if low is None or v >= low)

  def _random_str(self, path: tuple, length: int | None = None) -> str:
    chars = self.alphabet(path)
    n = self._length(path, str) if length is None else length
    words = self._words(path)
    mode = self.rng.random()
    if " " in chars and words and mode < 0.3:
      return " ".join(self.rng.choice(words) for _ in range(max(1, n // 4)))
    if " " in chars and mode < 0.5:
      letters = chars.replace(" ", "") or "a"
      words = [
        "".join(self.rng.choices(letters, k=self.rng.randint(1, 6)))
        for _ in range(max(1, n // 4))
      ]
      return " ".join(words)
    return "".join(self.rng.choices(chars, k=n))

  def _boundary_strs(self, path: tuple) -> list[str]:
    chars = self.alphabet(path)
    picks = self.rng.sample(chars, min(3, len(chars)))
    values = ["", *picks, picks[0] * 2, picks[0] * self.rng.randint(3, 12)]
    stats = self.domain.stats(path, str)
    if stats is not None and stats.examples:
      longest = max(stats.examples, key=len)
      values += [longest[:1], longest + longest]
    return values

  def _structured_strs(self, path: tuple) -> list[str]:
    """Palindromes, repeats, brackets, spaces, mixed case, digits, words."""
    chars = self.alphabet(path)
    rng = self.rng
    half = "".join(rng.choices(chars.replace(" ", "") or chars, k=4))
    values = [
      half + half[::-1],
      half + rng.choice(chars) + half[::-1],
      rng.choice(chars) * rng.randint(2, 20),
    ]
    for pair in _BRACKETS:
      if set(pair) <= set(chars):
        values += _bracket_strings(rng, pair, " " in chars)
    stats = self.domain.stats(path, str)
    examples = [e for e in (stats.examples if stats else ()) if e]
    base = rng.choice(examples) if examples else half
    if " " in chars:
      values += [f" {base}", f"{base} ", base.replace(" ", "  "), "   "]
    lower = set(chars) & set(string.ascii_lowercase)
    upper = set(chars) & set(string.ascii_uppercase)
    if lower and upper:
      values += [
        base.swapcase(),
        "".join(c.upper() if i % 2 else c.lower() for i, c in enumerate(base)),
      ]
    digits = set(chars) & set(string.digits)
    if digits and (lower or upper):
      i = rng.randint(0, len(base))
      values.append(base[:i] + "".join(sorted(digits))[:3] + base[i:])
    words = self._words(path)
    if " " in chars and len(words) > 1:
      values.append(" ".join(rng.sample(words, len(words))[:8]))
      values.append(" ".join([rng.choice(words)] * 3))
    values += [base[::-1], "".join(sorted(base))]
    return values

  # --- Values of any type -----------------------------------------------------

  def _length(self, path: tuple, kind: type) -> int:
    stats = self.domain.stats(path, kind)
    longest = stats.max_len if stats is not None and stats.max_len else 4
    if self.rng.random() < 0.1:
      return LONG_LEN
    return self.rng.randint(0, 2 * longest + 4)

  def _item_type(self, path: tuple) -> type:
    kinds = self.domain.types(path)
    if not kinds:
      raise _Skip
    return self.rng.choice(kinds)

  def random_value(
    self, path: tuple, kind: type, template: Any = None, length: int = None
  ) -> Any:
    """A random value of `kind` at `path` (a template gives tuple arity)."""
    if kind is bool:
      return self.rng.random() < 0.5
    if kind is int:
      return self._random_int(path)
    if kind is float:
      return self._random_float(path)
    if kind is str:
      return self._random_str(path, length)
    if kind is list or kind is set or kind is frozenset:
      n = self._length(path, kind) if length is None else length
      item = (*path, "item")
      items = [self.random_value(item, self._item_type(item)) for _ in range(n)]
      return items if kind is list else kind(_hashable(items))
    if kind is tuple:
      arity = len(template) if type(template) is tuple else 2
      return tuple(
        self.random_value(
          (*path, ("tuple", i)), self._item_type((*path, ("tuple", i)))
        )
        for i in range(arity)
      )
    if kind is dict:
      key, value = (*path, "key"), (*path, "value")
      n = self._length(path, dict) if length is None else length
      out = {}
      for _ in range(n):
        k = self.random_value(key, self._item_type(key))
        try:
          out[k] = self.random_value(value, self._item_type(value))
        except TypeError:  # an unhashable key type
          raise _Skip from None
      return out
    return copy.deepcopy(template)

  def boundary_values(self, path: tuple, kind: type, template: Any) -> list:
    """Edge values of `kind` at `path`."""
    if kind is bool:
      return [True, False]
    if kind is int:
      return self._boundary_ints(path)
    if kind is float:
      return self._boundary_floats(path)
    if kind is str:
      return self._boundary_strs(path)
    if kind is list:
      return self._boundary_lists(path)
    if kind is dict:
      return [{}, self.random_value(path, dict, length=1)]
    if kind in (set, frozenset):
      return [kind(), self.random_value(path, kind, length=1)]
    if kind is tuple:
      item = (*path, ("tuple", 0))
      values = []
      for v in self.boundary_values(item, type(template[0]), None)[:6]:
        values.append((v, *template[1:]))
      return values
    return []

  def _boundary_lists(self, path: tuple) -> list[list]:
    item = (*path, "item")
    kind = self._item_type(item)
    one = self.random_value(item, kind)
    base = self.random_value(path, list, length=self.rng.randint(3, 8))
    values = [[], [one], [one, one], [one] * self.rng.randint(3, 9)]
    values += [base + base[:2], [base[0]] + base]
    try:
      values += [sorted(base), sorted(base, reverse=True)]
    except TypeError:  # items of mixed types
      pass
    edges = self.boundary_values(item, kind, one)
    if edges:
      values += [[e] for e in edges[:8]]
      values.append(list(edges[:8]))
      values.append(list(reversed(edges[:8])))
    return values

  def structured_values(self, path: tuple, kind: type, template: Any) -> list:
    """Structured values of `kind` at `path` (strings and lists)."""
    if kind is str:
      return self._structured_strs(path)
    if kind is not list:
      return []
    item = (*path, "item")
    kind_item = self._item_type(item)
    base = self.random_value(path, list, length=self.rng.randint(3, 9))
    values = [base + base[::-1], base + base[-2::-1]]
    if kind_item is str:
      values.append(
        [self.rng.choice(self._structured_strs(item)) for _ in base]
      )
    if kind_item is int or kind_item is float:
      low = _low(self.domain.stats(item, kind_item))
      big = kind_item(INT_SCALES[-1] if kind_item is int else FLOAT_MAX)
      top = max(base) if base else 1
      start = self.rng.randint(0, 5) if low is None else low
      values += [
        [kind_item(start + i) for i in range(len(base))],
        [big, *base],
        [*base, big],
        [kind_item(top + 1), *base],
      ]
      if low is None:
        values.append([v if i % 2 else -v for i, v in enumerate(base)])
        values.append([-abs(v) for v in base])
    return values

  # --- Inputs -----------------------------------------------------------------

  def _places(self, args: list, kwargs: dict) -> list[tuple]:
    return [("arg", i) for i in range(len(args))] + [
      ("kwarg", k) for k in sorted(kwargs)
    ]

  def _replace(self, args, kwargs, place, value) -> tuple[list, dict]:
    args, kwargs = copy.deepcopy(args), copy.deepcopy(kwargs)
    if place[0] == "arg":
      args[place[1]] = value
    else:
      kwargs[place[1]] = value
    return args, kwargs

  def _get(self, args, kwargs, place) -> Any:
    return args[place[1]] if place[0] == "arg" else kwargs[place[1]]

  def _one_place(self, method: str) -> list[tuple[list, dict]]:
    """Each seed with one argument replaced by each value `method` gives."""
    found = []
    for args, kwargs in self.seeds:
      for place in self._places(args, kwargs):
        template = self._get(args, kwargs, place)
        try:
          values = getattr(self, method)(place, type(template), template)
        except _Skip:
          continue
        found += [self._replace(args, kwargs, place, v) for v in values]
    self.rng.shuffle(found)
    return found

  def _random_input(self) -> tuple[list, dict]:
    args, kwargs = self.rng.choice(self.seeds)
    places = self._places(args, kwargs)
    if not places:
      raise _Skip
    chosen = [p for p in places if self.rng.random() < 0.75]
    chosen = chosen or [self.rng.choice(places)]
    # Lists in one input often share a length (zip-like contracts).
    shared = self._length(places[0], list) if self.rng.random() < 0.5 else None
    for place in chosen:
      template = self._get(args, kwargs, place)
      sized = type(template) in (list, str) and shared is not None
      value = self.random_value(
        place, type(template), template, shared if sized else None
      )
      args, kwargs = self._replace(args, kwargs, place, value)
    return args, kwargs

  def candidates(self, kind: str) -> Iterator[tuple[list, dict]]:
    """Inputs of one kind (`KINDS`); random ones never run out."""
    if kind == "boundary":
      yield from self._one_place("boundary_values")
    elif kind == "structured":
      yield from self._one_place("structured_values")
    elif kind == "random":
      while True:
        try:
          yield self._random_input()
        except _Skip:
          return
    else:
      raise ValueError(f"unknown kind {kind!r}; use one of {KINDS}")


def _bracket_strings(rng: random.Random, pair: str, spaces: bool) -> list:
  """Balanced, nested and unbalanced strings of one bracket pair."""
  o, c = pair
  depth = rng.randint(2, 6)
  balanced = _dyck(rng, o, c, rng.randint(2, 8))
  values = [
    o + c,
    o * depth + c * depth,
    balanced,
    (o + c) * rng.randint(2, 5),
    c + o,
    balanced + c,
    o + balanced,
    balanced[1:] + balanced[0] if balanced else c + o,
    c * depth + o * depth,
    o * depth + c * (depth - 1),
  ]
  if spaces:
    groups = [_dyck(rng, o, c, rng.randint(1, 4)) for _ in range(3)]
    values.append(" ".join(groups))
  return values


def _dyck(rng: random.Random, o: str, c: str, pairs: int) -> str:
  """A random balanced string of `pairs` bracket pairs."""
  out, opened, left = [], 0, pairs
  while left or opened:
    if left and (not opened or rng.random() < 0.5):
      out.append(o)
      opened += 1
      left -= 1
    else:
      out.append(c)
      opened -= 1
  return "".join(out)


def _hashable(items: list) -> list:
  """The items that can go in a set (lists and dicts cannot)."""
  out = []
  for item in items:
    try:
      hash(item)
    except TypeError:
      continue
    out.append(item)
  return out
