"""plain_repr: `repr` with fixed set order, bounded, and never raising."""

import math
import random
import sys

import pytest

from codeagent_rl import plain_repr


def _reference(value) -> str:
  """The unbounded repr observations have always shown (sets sorted)."""
  if type(value) in (set, frozenset):
    if {type(v) for v in value} in ({int}, {str}):
      items = ", ".join(_reference(v) for v in sorted(value))
    else:
      items = ", ".join(sorted(_reference(v) for v in value))
    inner = f"{{{items}}}" if value else ""
    if type(value) is frozenset:
      return f"frozenset({inner})"
    return inner or "set()"
  if type(value) is list:
    return "[" + ", ".join(_reference(v) for v in value) + "]"
  if type(value) is tuple:
    if len(value) == 1:
      return f"({_reference(value[0])},)"
    return "(" + ", ".join(_reference(v) for v in value) + ")"
  if type(value) is dict:
    items = (f"{_reference(k)}: {_reference(v)}" for k, v in value.items())
    return "{" + ", ".join(items) + "}"
  return repr(value)


def _cut(text: str, max_chars: int | None) -> str:
  if max_chars is not None and len(text) > max_chars:
    return text[: max(max_chars - 3, 0)] + "..."
  return text


_CHARS = "ab'\"\\\n\t\x00\xe9\u2028\U0001f600 "


def _random_value(rng: random.Random, depth: int = 0):
  roll = rng.random()
  if depth > 3 or roll < 0.4:
    return rng.choice(
      [
        rng.randrange(-1000, 1000),
        10 ** rng.randrange(1, 80) * rng.choice((-1, 1)),
        "".join(rng.choice(_CHARS) for _ in range(rng.randrange(20))),
        rng.choice([True, False, None, 0.0, -0.0, 1.5, 0.1, 1e300]),
        rng.choice([math.nan, math.inf, -math.inf]),
      ]
    )
  items = [_random_value(rng, depth + 1) for _ in range(rng.randrange(6))]
  keys = [
    v for v in items if not isinstance(v, list | dict | set) and _hashable(v)
  ]
  if roll < 0.55:
    return items
  if roll < 0.65:
    return tuple(items)
  if roll < 0.75:
    return dict(zip(keys, items, strict=False))
  if roll < 0.85:
    return {rng.randrange(100) for _ in range(len(items))}
  if roll < 0.9:
    return {str(v) for v in keys}
  return rng.choice((set, frozenset))(keys)


def _hashable(value) -> bool:
  try:
    hash(value)
  except TypeError:
    return False
  return True


@pytest.mark.parametrize("seed", range(4))
def test_parity_with_the_unbounded_reference(seed):
  rng = random.Random(seed)
  for _ in range(2000):
    value = _random_value(rng)
    full = _reference(value)
    for max_chars in (None, 0, 1, 3, 4, 7, 10, 25, 60, 200):
      assert plain_repr.plain_repr(value, max_chars) == _cut(full, max_chars)


@pytest.mark.parametrize(
  "value,text",
  [
    ({"b", "a", "c"}, "{'a', 'b', 'c'}"),
    ({10, 2, 1}, "{1, 2, 10}"),
    ({(2,), (10,)}, "{(10,), (2,)}"),  # by text when not all int or str
    (frozenset(), "frozenset()"),
    (set(), "set()"),
    ((1,), "(1,)"),
    ({1: [1.5, None, (True, "x")]}, "{1: [1.5, None, (True, 'x')]}"),
    ("it's", '"it\'s"'),
    ([math.nan, -math.inf, -0.0], "[nan, -inf, -0.0]"),
    (10**5000, "<int of ~5001 digits>"),
    (-(10**4300), "<negative int of ~4301 digits>"),
    ([2**14285], "[<int of ~4301 digits>]"),
  ],
  ids=range(12),
)
def test_by_hand(value, text):
  assert plain_repr.plain_repr(value) == text


def test_int_digit_limit_is_the_default_one():
  assert plain_repr.plain_repr(10**4300 - 1) == "9" * 4300
  assert plain_repr.plain_repr(-(10**4300) + 1) == "-" + "9" * 4300
  assert plain_repr.plain_repr(10**4300) == "<int of ~4301 digits>"
  before = sys.get_int_max_str_digits()
  try:
    sys.set_int_max_str_digits(0)  # no limit: still not shown past 4300
    assert plain_repr.plain_repr(10**4300) == "<int of ~4301 digits>"
    sys.set_int_max_str_digits(640)  # a lower limit: no ValueError
    assert plain_repr.plain_repr(10**700).startswith("<int of ~70")
  finally:
    sys.set_int_max_str_digits(before)


def test_cut_long_values_are_prefixes():
  for text in (
    "a" * 10**6,
    "'" * 10**6 + '"',
    "'" + "b" * 10**6,
    "\x00" * 10**6,
  ):
    assert plain_repr.plain_repr(text, 30) == repr(text)[:27] + "..."
  items = list(range(10**6))
  assert plain_repr.plain_repr(items, 30) == repr(items)[:27] + "..."
  nested = [[[list(range(10**6))]]]
  assert plain_repr.plain_repr(nested, 30) == repr(nested)[:27] + "..."
  mixed = {(i, str(i)) for i in range(2000)}
  assert plain_repr.plain_repr(mixed, 50) == _reference(mixed)[:47] + "..."


def test_self_reference_and_depth():
  loop = []
  loop.append(loop)
  loop.append(loop)
  assert plain_repr.plain_repr(loop) == "[[...], [...]]"
  table = {}
  table[1] = table
  assert plain_repr.plain_repr(table) == "{1: {...}}"
  deep = 1
  for _ in range(plain_repr.MAX_DEPTH + 50):
    deep = [deep]
  depth = plain_repr.MAX_DEPTH
  assert plain_repr.plain_repr(deep) == "[" * depth + "..." + "]" * depth


def test_objects_that_are_not_plain_data():
  class Loud(int):
    def __repr__(self):
      raise ValueError("no")

    def __lt__(self, other):
      raise ValueError("no")

  assert plain_repr.plain_repr(Loud(3)) == "<Loud object>"
  assert plain_repr.plain_repr({Loud(3), 2}) == "{2, <Loud object>}"
  assert plain_repr.plain_repr([object()], 10) == "[<objec..."
