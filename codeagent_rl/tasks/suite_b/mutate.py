"""Type-aware mutation of plain-data inputs (EvalPlus-style), in a domain.

  domain = mutate.Domain.from_seeds(seeds)       # seeds: [(args, kwargs)]
  mutator = mutate.Mutator(random.Random(0), domain)
  args, kwargs = mutator.mutate_input(args, kwargs, times=2)

A mutation is chosen by the value's exact type and applied recursively into
containers:

  bool        flipped (a bool stays a bool)
  int         +-1, shifts by 2..10, doubled, halved, negated, a boundary
              (0, 1, -1, the smallest and largest seen)
  float       nudged, scaled, negated, rounded, +0.5, a boundary
  str         a character inserted, deleted, replaced, two swapped, a
              substring repeated; words (split at spaces) shuffled,
              duplicated or removed
  list        an item mutated, inserted, duplicated or removed; shuffled,
              reversed, shrunk to a slice or grown by mutated copies
  tuple       one item mutated (the arity is kept)
  dict        a value or key mutated, an item added or removed
  set         an item added, removed or mutated
  None        kept

Mutants stay in the *domain* the seeds show at the same place (argument,
list item, dict value, ...; see `Domain`): ints and floats keep the sign
the seeds keep (all >= 1, all >= 0, or any) and a magnitude of at most twice
the largest seen plus 2; strings use only characters seen there and keep the
shortest length seen; containers keep the shortest length seen and grow to
at most twice the longest plus 4. That stands in for the input contracts
EvalPlus writes by hand (a "positive integer" stays positive, a string of
brackets stays brackets). All randomness comes from the one `random.Random`.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import copy
import dataclasses
import random
import string
from typing import Any

from codeagent_rl.sandbox import wire

# Draws of one named mutation before `Mutator.mutate` gives up.
_TRIES = 10
# Example values kept per place and type (to fill empty containers).
_MAX_EXAMPLES = 8
_DEFAULT_ALPHABET = string.ascii_lowercase + string.digits + " "


# The types a domain records, by name (its keys carry the name).
_TYPES = {
  t.__name__: t
  for t in (type(None), bool, int, float, str, list, tuple, dict, set)
} | {"frozenset": frozenset}


def _child(path: tuple, step: Any) -> tuple:
  return (*path, step)


@dataclasses.dataclass
class _Stats:
  """What the seeds show at one place, for one type."""

  lo: Any = None
  hi: Any = None
  min_len: int | None = None
  max_len: int | None = None
  chars: set = dataclasses.field(default_factory=set)
  examples: list = dataclasses.field(default_factory=list)


class Domain:
  """Per place (a path such as `("arg", 0, "item")`) and type: the seeds'.

  Paths: `("arg", i)` or `("kwarg", name)`, then `"item"` for list and set
  items, `("tuple", i)` for tuple items, `"key"` / `"value"` for dicts.
  """

  def __init__(self):
    self._stats: dict[tuple, _Stats] = {}

  @classmethod
  def from_seeds(cls, seeds: Sequence[tuple[Sequence, dict]]) -> Domain:
    """The domain of seed inputs `(args, kwargs)`."""
    domain = cls()
    for args, kwargs in seeds:
      for i, value in enumerate(args):
        domain.add(("arg", i), value)
      for name in sorted(kwargs):
        domain.add(("kwarg", name), kwargs[name])
    return domain

  def stats(self, path: tuple, kind: type) -> _Stats | None:
    """The stats of `kind` values at `path`, None if the seeds have none."""
    return self._stats.get((path, kind.__name__))

  def types(self, path: tuple) -> list[type]:
    """The types the seeds show at `path`, in the order first seen."""
    return [_TYPES[name] for p, name in self._stats if p == path]

  def examples(self, path: tuple) -> list:
    """Seed values at `path` (any type), for filling empty containers."""
    found = []
    for (p, _), stats in self._stats.items():
      if p == path:
        found += stats.examples
    return found

  def add(self, path: tuple, value: Any) -> None:
    """Records one value (and, recursively, its items)."""
    kind = type(value)
    stats = self._stats.setdefault((path, kind.__name__), _Stats())
    if len(stats.examples) < _MAX_EXAMPLES:
      stats.examples.append(copy.deepcopy(value))
    if kind is int or kind is float:
      stats.lo = value if stats.lo is None else min(stats.lo, value)
      stats.hi = value if stats.hi is None else max(stats.hi, value)
    if kind in (str, list, dict, set, frozenset, tuple):
      n = len(value)
      stats.min_len = n if stats.min_len is None else min(stats.min_len, n)
      stats.max_len = n if stats.max_len is None else max(stats.max_len, n)
    if kind is str:
      stats.chars.update(value)
    elif kind is list or kind is set or kind is frozenset:
      for item in _ordered(value):
        self.add(_child(path, "item"), item)
    elif kind is tuple:
      for i, item in enumerate(value):
        self.add(_child(path, ("tuple", i)), item)
    elif kind is dict:
      for key, item in value.items():
        self.add(_child(path, "key"), key)
        self.add(_child(path, "value"), item)


def _ordered(items) -> list:
  """Items of a list as they are, of a set in a stable order."""
  if type(items) is list:
    return list(items)
  return sorted(items, key=lambda v: wire.dumps(wire.encode(v)))


# --- Mutations ----------------------------------------------------------------


def _number_bounds(stats: _Stats | None) -> tuple[Any, Any]:
  """(lowest, highest) a mutated number may take at a place."""
  if stats is None or stats.lo is None:
    return None, None
  low = None
  if stats.lo >= 1:
    low = 1
  elif stats.lo >= 0:
    low = 0
  magnitude = 2 * max(abs(stats.lo), abs(stats.hi)) + 2
  return low, magnitude


def _clamp(value, low, magnitude):
  kind = type(value)
  if magnitude is not None:
    value = max(-magnitude, min(magnitude, value))
  if low is not None:
    value = max(low, value)
  return kind(value)


def _int_boundaries(stats: _Stats | None) -> list[int]:
  found = {0, 1, -1}
  if stats is not None and stats.lo is not None:
    found |= {stats.lo, stats.hi}
  return sorted(found)


INT_OPS: dict[str, Callable] = {
  "inc": lambda m, x, path: x + 1,
  "dec": lambda m, x, path: x - 1,
  "shift": lambda m, x, path: x + m.rng.choice((-1, 1)) * m.rng.randint(2, 10),
  "double": lambda m, x, path: 2 * x,
  "halve": lambda m, x, path: x // 2,
  "negate": lambda m, x, path: -x,
  "boundary": lambda m, x, path: m.rng.choice(
    _int_boundaries(m.domain.stats(path, int))
  ),
}

FLOAT_OPS: dict[str, Callable] = {
  "nudge": lambda m, x, path: round(x + m.rng.uniform(-1.0, 1.0), 3),
  "scale": lambda m, x, path: round(x * m.rng.uniform(0.5, 2.0), 3),
  "negate": lambda m, x, path: -x,
  "round": lambda m, x, path: float(round(x)),
  "half": lambda m, x, path: x + 0.5,
  "boundary": lambda m, x, path: m.rng.choice(
    [float(v) for v in _int_boundaries(m.domain.stats(path, float))]
  ),
}


def _alphabet(m: Mutator, path: tuple, text: str) -> str:
  stats = m.domain.stats(path, str)
  chars = set(stats.chars) if stats is not None else set()
  chars |= set(text)
  return "".join(sorted(chars)) or _DEFAULT_ALPHABET


def _str_insert(m, text, path):
  i = m.rng.randint(0, len(text))
  return text[:i] + m.rng.choice(_alphabet(m, path, text)) + text[i:]


def _str_delete(m, text, path):
  i = m.rng.randrange(len(text))
  return text[:i] + text[i + 1 :]


def _str_replace(m, text, path):
  i = m.rng.randrange(len(text))
  return text[:i] + m.rng.choice(_alphabet(m, path, text)) + text[i + 1 :]


def _str_swap(m, text, path):
  i = m.rng.randrange(len(text) - 1)
  return text[:i] + text[i + 1] + text[i] + text[i + 2 :]


def _str_repeat(m, text, path):
  i = m.rng.randrange(len(text))
  j = m.rng.randint(i + 1, min(len(text), i + 4))
  return text[:j] + text[i:j] + text[j:]


def _words(text: str) -> list[str]:
  words = text.split(" ")
  if len(words) < 2:
    raise _NotApplicable
  return words


def _word_shuffle(m, text, path):
  words = _words(text)
  m.rng.shuffle(words)
  return " ".join(words)


def _word_duplicate(m, text, path):
  words = _words(text)
  i = m.rng.randrange(len(words))
  words.insert(i, words[i])
  return " ".join(words)


def _word_remove(m, text, path):
  words = _words(text)
  del words[m.rng.randrange(len(words))]
  return " ".join(words)


STR_OPS: dict[str, Callable] = {
  "insert": _str_insert,
  "delete": _str_delete,
  "replace": _str_replace,
  "swap": _str_swap,
  "repeat": _str_repeat,
  # Words (split at spaces): keeps inputs such as "three one five" valid.
  "word_shuffle": _word_shuffle,
  "word_duplicate": _word_duplicate,
  "word_remove": _word_remove,
}


def _new_item(m: Mutator, items: list, path: tuple) -> Any:
  """A mutated copy of an item, or of a seed item when `items` is empty."""
  pool = items or m.domain.examples(_child(path, "item"))
  if not pool:
    raise _NotApplicable
  return m.mutate(copy.deepcopy(m.rng.choice(pool)), _child(path, "item"))


def _list_mutate_item(m, items, path):
  i = m.rng.randrange(len(items))
  items[i] = m.mutate(items[i], _child(path, "item"))
  return items


def _list_insert(m, items, path):
  item = _new_item(m, items, path)
  items.insert(m.rng.randint(0, len(items)), item)
  return items


def _list_duplicate(m, items, path):
  i = m.rng.randrange(len(items))
  items.insert(i, copy.deepcopy(items[i]))
  return items


def _list_remove(m, items, path):
  del items[m.rng.randrange(len(items))]
  return items


def _list_shuffle(m, items, path):
  m.rng.shuffle(items)
  return items


def _list_shrink(m, items, path):
  low = _min_len(m, path, list)
  n = m.rng.randint(low, len(items) - 1)
  start = m.rng.randint(0, len(items) - n)
  return items[start : start + n]


def _list_grow(m, items, path):
  for _ in range(m.rng.randint(1, 3)):
    items.append(_new_item(m, items, path))
  return items


LIST_OPS: dict[str, Callable] = {
  "mutate_item": _list_mutate_item,
  "insert": _list_insert,
  "duplicate": _list_duplicate,
  "remove": _list_remove,
  "shuffle": _list_shuffle,
  "reverse": lambda m, items, path: items[::-1],
  "shrink": _list_shrink,
  "grow": _list_grow,
}


def _tuple_mutate_item(m, items, path):
  i = m.rng.randrange(len(items))
  items = list(items)
  items[i] = m.mutate(items[i], _child(path, ("tuple", i)))
  return tuple(items)


TUPLE_OPS: dict[str, Callable] = {"mutate_item": _tuple_mutate_item}


def _dict_pick(m, value) -> Any:
  return m.rng.choice(_ordered(list(value)))


def _dict_mutate_value(m, value, path):
  key = _dict_pick(m, value)
  value[key] = m.mutate(value[key], _child(path, "value"))
  return value


def _dict_mutate_key(m, value, path):
  key = _dict_pick(m, value)
  new = m.mutate(copy.deepcopy(key), _child(path, "key"))
  if new in value:
    raise _NotApplicable
  return {(new if k == key else k): v for k, v in value.items()}


def _dict_add(m, value, path):
  keys = _ordered(list(value)) or m.domain.examples(_child(path, "key"))
  items = [value[k] for k in _ordered(list(value))]
  items = items or m.domain.examples(_child(path, "value"))
  if not keys or not items:
    raise _NotApplicable
  new = m.mutate(copy.deepcopy(m.rng.choice(keys)), _child(path, "key"))
  if new in value:
    raise _NotApplicable
  item = copy.deepcopy(m.rng.choice(items))
  value[new] = m.mutate(item, _child(path, "value"))
  return value


def _dict_remove(m, value, path):
  del value[_dict_pick(m, value)]
  return value


DICT_OPS: dict[str, Callable] = {
  "mutate_value": _dict_mutate_value,
  "mutate_key": _dict_mutate_key,
  "add": _dict_add,
  "remove": _dict_remove,
}


def _set_add(m, value, path):
  new = _new_item(m, _ordered(value), path)
  if new in value:
    raise _NotApplicable
  return type(value)([*value, new])


def _set_remove(m, value, path):
  items = _ordered(value)
  del items[m.rng.randrange(len(items))]
  return type(value)(items)


def _set_mutate_item(m, value, path):
  items = _ordered(value)
  i = m.rng.randrange(len(items))
  items[i] = m.mutate(items[i], _child(path, "item"))
  return type(value)(items)


SET_OPS: dict[str, Callable] = {
  "add": _set_add,
  "remove": _set_remove,
  "mutate_item": _set_mutate_item,
}

BOOL_OPS: dict[str, Callable] = {"flip": lambda m, x, path: not x}

OPS: dict[type, dict[str, Callable]] = {
  bool: BOOL_OPS,
  int: INT_OPS,
  float: FLOAT_OPS,
  str: STR_OPS,
  list: LIST_OPS,
  tuple: TUPLE_OPS,
  dict: DICT_OPS,
  set: SET_OPS,
  frozenset: SET_OPS,
}


class _NotApplicable(Exception):
  """This mutation cannot change this value (e.g. removing from [])."""


def _min_len(m: Mutator, path: tuple, kind: type) -> int:
  stats = m.domain.stats(path, kind)
  return stats.min_len if stats is not None and stats.min_len else 0


def _max_len(m: Mutator, path: tuple, kind: type) -> int | None:
  stats = m.domain.stats(path, kind)
  if stats is None or stats.max_len is None:
    return None
  return 2 * stats.max_len + 4


def _applicable(m: Mutator, kind: type, value: Any, path: tuple) -> list[str]:
  """The ops of `OPS[kind]` that can change `value` within its domain."""
  names = list(OPS[kind])
  if kind in (str, list, tuple, dict, set, frozenset):
    n = len(value)
    shrinks = n > _min_len(m, path, kind)
    cap = _max_len(m, path, kind)
    grows = cap is None or n < cap
    removes = {"delete", "remove", "shrink", "word_remove"}
    adds = {"insert", "duplicate", "repeat", "grow", "add", "word_duplicate"}
    names = [
      k
      for k in names
      if (shrinks or k not in removes) and (grows or k not in adds)
    ]
    if n == 0:
      names = [k for k in names if k in ("insert", "grow", "add")]
    if n < 2:
      names = [k for k in names if k not in ("swap", "shuffle", "reverse")]
  return names


class Mutator:
  """Applies type-aware mutations with one `random.Random`, in a domain."""

  def __init__(self, rng: random.Random, domain: Domain):
    self.rng = rng
    self.domain = domain

  def mutate(self, value: Any, path: tuple, op: str | None = None) -> Any:
    """A mutated copy of `value` (the same type; None stays None).

    Args:
      value: plain data.
      path: where it sits (see `Domain`); selects the domain.
      op: the mutation (a key of `OPS[type(value)]`); None picks one.

    Raises:
      ValueError: `op` names no mutation that applies to `value`.
    """
    kind = type(value)
    if kind not in OPS:
      if op is not None:
        raise ValueError(f"no mutation {op!r} for {kind.__name__} values")
      return copy.deepcopy(value)
    names = _applicable(self, kind, value, path)
    if op is not None and op not in names:
      raise ValueError(
        f"mutation {op!r} does not apply to {value!r:.60} (applicable: {names})"
      )
    # A named op gets a few tries: some draws collide (a key that exists).
    candidates = [op] * _TRIES if op is not None else names
    while candidates:
      name = candidates.pop(self.rng.randrange(len(candidates)))
      try:
        new = OPS[kind][name](self, copy.deepcopy(value), path)
      except _NotApplicable:
        continue
      return self._within_domain(new, path)
    if op is not None:
      raise ValueError(f"mutation {op!r} cannot change {value!r:.60}")
    return copy.deepcopy(value)

  def _within_domain(self, value: Any, path: tuple) -> Any:
    kind = type(value)
    if kind is int or kind is float:
      return _clamp(value, *_number_bounds(self.domain.stats(path, kind)))
    return value

  def mutate_input(
    self, args: list, kwargs: dict, times: int
  ) -> tuple[list, dict]:
    """`times` mutations, each of one argument picked at random."""
    args, kwargs = copy.deepcopy(args), copy.deepcopy(kwargs)
    places = [("arg", i) for i in range(len(args))]
    places += [("kwarg", k) for k in sorted(kwargs)]
    if not places:
      return args, kwargs
    for _ in range(times):
      kind, where = self.rng.choice(places)
      if kind == "arg":
        args[where] = self.mutate(args[where], (kind, where))
      else:
        kwargs[where] = self.mutate(kwargs[where], (kind, where))
    return args, kwargs
