"""Tests of the type-aware mutations and their domains."""

import collections
import random

import pytest

from codeagent_rl.tasks.suite_b import mutate

ARG = ("arg", 0)


def _mutator(*seed_values, seed=0):
  """A mutator whose domain is one argument with these seed values."""
  domain = mutate.Domain.from_seeds([([v], {}) for v in seed_values])
  return mutate.Mutator(random.Random(seed), domain)


# --- Hand cases, one type at a time -------------------------------------------


@pytest.mark.parametrize(
  "op,want",
  [("inc", 6), ("dec", 4), ("double", 10), ("halve", 2), ("negate", 1)],
)
def test_int_ops_positive_domain(op, want):
  # Seeds 5 and 3: all >= 1, so results stay >= 1 (-5 clamps to 1) and
  # within 2 * 5 + 2 = 12.
  assert _mutator(5, 3).mutate(5, ARG, op) == want


def test_int_ops_any_sign_domain():
  m = _mutator(-3, 4)
  assert m.mutate(4, ARG, "negate") == -4
  assert m.mutate(-3, ARG, "dec") == -4
  assert m.mutate(4, ARG, "double") == 8
  assert m.mutate(8, ARG, "double") == 10  # magnitude cap 2 * 4 + 2
  for _ in range(20):
    assert m.mutate(4, ARG, "boundary") in (-3, -1, 0, 1, 4)
    assert 2 <= abs(m.mutate(0, ARG, "shift")) <= 10


def test_int_magnitude_and_sign_hold_under_random_mutation():
  m = _mutator(0, 7, 3)
  values = [m.mutate(v, ARG) for v in range(8) for _ in range(50)]
  assert all(type(v) is int and 0 <= v <= 16 for v in values)
  assert len(set(values)) > 8


def test_bool_stays_bool():
  m = _mutator(True, False)
  assert m.mutate(True, ARG) is False
  assert m.mutate(False, ARG, "flip") is True
  with pytest.raises(ValueError, match="'inc' does not apply"):
    m.mutate(True, ARG, "inc")


def test_float_ops():
  m = _mutator(2.5, -1.0)
  assert m.mutate(2.5, ARG, "half") == 3.0
  assert m.mutate(2.5, ARG, "negate") == -2.5
  assert m.mutate(2.5, ARG, "round") == 2.0
  assert type(m.mutate(3.0, ARG, "round")) is float
  for _ in range(20):
    nudged = m.mutate(2.5, ARG, "nudge")
    assert type(nudged) is float and abs(nudged - 2.5) <= 1.0
  # A positive domain keeps floats >= 1.
  assert _mutator(1.5, 3.0).mutate(1.5, ARG, "negate") == 1.0


def test_str_ops():
  m = _mutator("abcd", "ab")
  swapped = m.mutate("abcd", ARG, "swap")
  assert sorted(swapped) == sorted("abcd") and swapped != "abcd"
  diff = [i for i in range(4) if swapped[i] != "abcd"[i]]
  assert len(diff) == 2 and diff[1] == diff[0] + 1
  assert len(m.mutate("abcd", ARG, "delete")) == 3
  inserted = m.mutate("abcd", ARG, "insert")
  assert len(inserted) == 5 and set(inserted) <= set("abcd")
  replaced = m.mutate("abcd", ARG, "replace")
  assert len(replaced) == 4 and set(replaced) <= set("abcd")
  repeated = m.mutate("abcd", ARG, "repeat")
  assert 5 <= len(repeated) <= 8
  # "ab" is the shortest seed: it cannot lose a character.
  with pytest.raises(ValueError, match="'delete' does not apply"):
    m.mutate("ab", ARG, "delete")


def test_str_alphabet_is_the_seeds():
  m = _mutator("(())", "()()", "(()())")
  for _ in range(200):
    assert set(m.mutate("(())", ARG)) <= set("()")


def test_word_ops():
  m = _mutator("one two three", "a")
  shuffled = m.mutate("one two three four", ARG, "word_shuffle")
  assert sorted(shuffled.split(" ")) == ["four", "one", "three", "two"]
  assert m.mutate("one two", ARG, "word_remove") in ("one", "two")
  assert m.mutate("one two", ARG, "word_duplicate") in (
    "one one two",
    "one two two",
  )


def test_list_ops():
  m = _mutator([3, 1, 2], [5, 4])
  items = [3, 1, 2]
  assert sorted(m.mutate(items, ARG, "shuffle")) == [1, 2, 3]
  assert m.mutate(items, ARG, "reverse") == [2, 1, 3]
  assert items == [3, 1, 2]  # mutations work on copies
  removed = m.mutate(items, ARG, "remove")
  assert len(removed) == 2 and set(removed) < {1, 2, 3}
  duplicated = m.mutate(items, ARG, "duplicate")
  assert len(duplicated) == 4 and set(duplicated) == {1, 2, 3}
  grown = m.mutate(items, ARG, "grow")
  assert 4 <= len(grown) <= 6 and grown[:3] == items
  assert all(type(v) is int for v in grown)
  shrunk = m.mutate(items, ARG, "shrink")
  assert len(shrunk) == 2 and shrunk in ([3, 1], [1, 2])
  inserted = m.mutate(items, ARG, "insert")
  assert len(inserted) == 4
  changed = m.mutate(items, ARG, "mutate_item")
  assert len(changed) == 3
  assert sum(a != b for a, b in zip(changed, items, strict=True)) <= 1


def test_empty_list_grows_from_seed_items():
  m = _mutator([], ["x", "y"])
  for _ in range(10):
    grown = m.mutate([], ARG)
    assert grown and all(type(v) is str for v in grown)
  # Without seed items there is nothing of the right type to insert.
  assert _mutator([]).mutate([], ARG) == []


def test_nested_structures_keep_their_shape():
  m = _mutator([(1, "a"), (2, "b")], [(5, "xy")])
  for _ in range(200):
    value = m.mutate([(1, "a"), (2, "b")], ARG)
    assert type(value) is list
    for item in value:
      assert type(item) is tuple and len(item) == 2
      assert type(item[0]) is int and type(item[1]) is str


def test_tuple_keeps_arity():
  m = _mutator((1, 2.0, "s"))
  for _ in range(50):
    value = m.mutate((1, 2.0, "s"), ARG)
    assert [type(v) for v in value] == [int, float, str]


def test_dict_ops():
  m = _mutator({"a": 1, "b": 2}, {"c": 3})
  assert m.mutate({"a": 1, "b": 2}, ARG, "remove") in ({"a": 1}, {"b": 2})
  added = m.mutate({"a": 1, "b": 2}, ARG, "add")
  assert len(added) == 3 and {"a", "b"} < set(added)
  assert all(type(k) is str and type(v) is int for k, v in added.items())
  changed = m.mutate({"a": 1, "b": 2}, ARG, "mutate_value")
  assert set(changed) == {"a", "b"}
  assert all(type(v) is int and v >= 1 for v in changed.values())
  renamed = m.mutate({"a": 1, "b": 2}, ARG, "mutate_key")
  assert len(renamed) == 2 and sorted(renamed.values()) == [1, 2]


def test_set_ops_keep_the_set_type():
  m = _mutator({1, 2, 3}, {5}, frozenset({4}))
  assert len(m.mutate({1, 2, 3}, ARG, "remove")) == 2
  added = m.mutate({1, 2, 3}, ARG, "add")
  assert type(added) is set and len(added) == 4
  assert type(m.mutate(frozenset({4}), ARG, "add")) is frozenset


def test_domain_types_in_the_order_seen():
  domain = mutate.Domain.from_seeds([([[1, "a"], 2.5], {}), ([[None], 3], {})])
  assert domain.types(("arg", 0)) == [list]
  assert domain.types(("arg", 0, "item")) == [int, str, type(None)]
  assert domain.types(("arg", 1)) == [float, int]
  assert domain.types(("arg", 2)) == []


def test_none_is_kept():
  m = _mutator(None)
  assert m.mutate(None, ARG) is None
  with pytest.raises(ValueError, match="no mutation"):
    m.mutate(None, ARG, "flip")


# --- Inputs and determinism ---------------------------------------------------


def test_mutate_input_changes_arguments_of_their_types():
  seeds = [([[1, 2], "ab", 3], {"flag": True})]
  m = mutate.Mutator(random.Random(1), mutate.Domain.from_seeds(seeds))
  changed = collections.Counter()
  for _ in range(100):
    args, kwargs = m.mutate_input(*seeds[0], times=1)
    assert [type(a) for a in args] == [list, str, int]
    assert type(kwargs["flag"]) is bool
    changed[(args, kwargs) != seeds[0]] += 1
  assert changed[True] > 80
  assert seeds[0] == ([[1, 2], "ab", 3], {"flag": True})


def test_same_seed_same_mutants():
  seeds = [([[3, 1, 2], "abc", 2.5], {})]
  domain = mutate.Domain.from_seeds(seeds)

  def run(seed):
    m = mutate.Mutator(random.Random(seed), domain)
    return [m.mutate_input(*seeds[0], times=2) for _ in range(30)]

  assert run(0) == run(0)
  assert run(0) != run(1)
