"""Tests of the boundary, structured and random input generators."""

import itertools
import random
import string

import pytest

from codeagent_rl.sandbox import wire
from codeagent_rl.tasks.suite_b import generate
from codeagent_rl.tasks.suite_b import mutate

ARG = ("arg", 0)


def _gen(*seed_args, seed=0):
  """A generator whose seeds are inputs with these argument lists."""
  seeds = [(list(args), {}) for args in seed_args]
  domain = mutate.Domain.from_seeds(seeds)
  return generate.Generator(random.Random(seed), domain, seeds)


def _first(gen, kind, n):
  return list(itertools.islice(gen.candidates(kind), n))


def _all(gen, kind):
  return list(gen.candidates(kind))


def _values(inputs, i=0):
  return [args[i] for args, _ in inputs]


# --- Boundary cases, per type -------------------------------------------------


def test_int_boundaries_any_sign():
  values = set(_values(_all(_gen([-7], [40]), "boundary")))
  assert {0, 1, -1, 2, -2, -7, 40, -8, 41, 10**9, -(10**9)} == values


def test_int_boundaries_keep_the_sign_class():
  positive = set(_values(_all(_gen([3], [9]), "boundary")))
  assert min(positive) == 1 and {1, 2, 3, 9, 10, 10**9} <= positive
  natural = set(_values(_all(_gen([0], [9]), "boundary")))
  assert min(natural) == 0 and 0 in natural


def test_float_boundaries():
  values = set(_values(_all(_gen([-2.5], [7.25]), "boundary")))
  assert {0.0, 0.5, -0.5, 1.0, -1.0, -2.5, 7.25} <= values
  assert all(type(v) is float for v in values)


def test_str_boundaries():
  values = _values(_all(_gen(["abc"], ["hello"]), "boundary"))
  assert "" in values
  assert any(len(v) == 1 for v in values)
  assert any(len(v) >= 3 and len(set(v)) == 1 for v in values)  # all equal


def test_list_boundaries():
  values = _values(_all(_gen([[3, -1, 4]], [[1, 5, 9, 2, 6]]), "boundary"))
  assert [] in values
  assert any(len(v) == 1 for v in values)
  assert any(len(v) >= 2 and len(set(v)) == 1 for v in values)  # all equal
  assert any(len(v) > 2 and v == sorted(v) and len(set(v)) > 1 for v in values)
  assert any(
    len(v) > 2 and v == sorted(v, reverse=True) and len(set(v)) > 1
    for v in values
  )
  assert any(len(set(v)) < len(v) for v in values if len(v) > 2)  # duplicates
  assert all(type(x) is int for v in values for x in v)


def test_dict_set_and_tuple_boundaries():
  dicts = _values(_all(_gen([{"a": 1, "b": 2}]), "boundary"))
  assert {} in dicts and any(len(d) == 1 for d in dicts)
  sets = _values(_all(_gen([{1, 2, 3}]), "boundary"))
  assert set() in sets and all(type(s) is set for s in sets)
  tuples = _values(_all(_gen([(4, "x")]), "boundary"))
  assert tuples and all(
    type(t) is tuple and len(t) == 2 and type(t[0]) is int for t in tuples
  )
  assert (1, "x") in tuples  # the seeds' ints are >= 1


def test_one_argument_changes_the_others_stay():
  seeds = ([[1, 2, 3], 5],)
  inputs = _all(_gen(*seeds), "boundary")
  assert all(args[0] == [1, 2, 3] or args[1] == 5 for args, _ in inputs)
  assert any(args[0] != [1, 2, 3] for args, _ in inputs)
  assert any(args[1] != 5 for args, _ in inputs)


# --- Structured cases ---------------------------------------------------------


def _structured(*seed_args):
  return _values(_all(_gen(*seed_args), "structured"))


def _balanced(text, o="(", c=")"):
  depth = 0
  for ch in text:
    depth += (ch == o) - (ch == c)
    if depth < 0:
      return False
  return depth == 0


def test_bracket_strings():
  values = _structured(["(())"], ["()()"])
  assert all(set(v) <= set("()") for v in values)
  assert any(_balanced(v) and "((" in v for v in values)  # nested
  assert any(v and not _balanced(v) for v in values)
  assert ")(" in values
  # Brackets of a pair the alphabet has; no others.
  angle = _structured(["<<>>"], ["<>"])
  assert any(_balanced(v, "<", ">") and "<<" in v for v in angle)
  assert all(set(v) <= set("<>") for v in angle)


def test_bracket_groups_with_spaces():
  values = _structured(["(()) ()"], ["((()))"])
  groups = [v for v in values if " " in v and set(v) <= set("() ")]
  assert any(all(_balanced(g) for g in v.split(" ")) for v in groups)


def test_palindromes_repeats_spaces_case_and_digits():
  values = _structured(["Hello World 42"], ["abc Def"])
  assert any(len(v) > 3 and v == v[::-1] and len(set(v)) > 1 for v in values)
  assert any(len(v) > 1 and len(set(v)) == 1 for v in values)
  assert any(v.startswith(" ") or v.endswith(" ") for v in values)
  assert any("  " in v for v in values)
  assert any(
    any(c.islower() for c in v) and any(c.isupper() for c in v) for v in values
  )
  assert any(
    any(c.isdigit() for c in v) and any(c.isalpha() for c in v) for v in values
  )


def test_no_spaces_or_case_the_seeds_do_not_have():
  values = _structured(["abcdefg"], ["hello"])
  assert all(" " not in v for v in values)
  assert all(v == v.lower() for v in values)


def test_seed_words_are_reused():
  values = _structured(["three one five"], ["nine zero"])
  words = {"three", "one", "five", "nine", "zero"}
  assert any(
    len(v.split(" ")) > 1 and set(v.split(" ")) <= words for v in values
  )


def test_structured_lists():
  values = _structured([[3, -1, 4, 1]], [[5, 9]])
  assert any(len(v) > 2 and v == v[::-1] for v in values)  # palindrome
  assert any(
    len(v) > 2 and all(a < b for a, b in zip(v, v[1:], strict=False))
    for v in values
  )
  assert any(v and all(x <= 0 for x in v) and min(v) < 0 for v in values)
  assert any(v and v[0] == 10**9 for v in values)  # outlier first
  assert any(v and v[-1] == 10**9 for v in values)  # outlier last


# --- Random draws -------------------------------------------------------------


def test_random_ints_span_magnitudes_within_the_sign_class():
  values = _values(_first(_gen([3], [12]), "random", 600))
  assert all(type(v) is int and v >= 1 for v in values)
  assert max(values) <= 10**9
  assert any(v > 10**5 for v in values)  # far beyond the seeds
  assert sum(3 <= v <= 12 for v in values) > 100  # and within them


def test_random_floats():
  values = _values(_first(_gen([0.5], [2.25]), "random", 400))
  assert all(type(v) is float and 0 <= v <= generate.FLOAT_MAX for v in values)
  assert any(v > 100 for v in values)
  assert any(len(repr(v).split(".")[1]) > 6 for v in values)  # all digits


def test_random_strings_and_lists_vary_in_length():
  strings = _values(_first(_gen(["abcdef"], ["xyz"]), "random", 300))
  lengths = {len(s) for s in strings}
  assert 0 in lengths and generate.LONG_LEN in lengths and len(lengths) > 10
  lists = _values(_first(_gen([[1, 2]], [[3, 4, 5]]), "random", 300))
  lengths = {len(v) for v in lists}
  assert 0 in lengths and generate.LONG_LEN in lengths


def test_alphabets():
  gen = _gen(["0110"], ["(()"], ["hello wrld"], ["ABCDEF"])
  # Few characters of a class stay closed; five or more open the class.
  assert _gen(["0110"], ["10"]).alphabet(ARG) == "01"
  assert _gen(["(())"]).alphabet(ARG) == "()"
  assert set(string.ascii_lowercase) <= set(gen.alphabet(ARG))
  assert set(string.ascii_uppercase) <= set(gen.alphabet(ARG))
  assert not set("23456789") & set(gen.alphabet(ARG))
  strings = _values(_first(_gen(["0110"], ["10"]), "random", 200))
  assert all(set(s) <= set("01") for s in strings)


def test_types_and_arity_are_kept():
  seeds = ([[(1, "a"), (2, "b")], {"k": 1.5}, True], [[], {}, False])
  for kind in generate.KINDS:
    inputs = _first(_gen(*seeds), kind, 60)
    assert inputs, kind
    for args, kwargs in inputs:
      assert kwargs == {}
      items, mapping, flag = args
      assert type(items) is list and type(mapping) is dict
      assert type(flag) is bool
      for item in items:
        assert type(item) is tuple and len(item) == 2
        assert type(item[0]) is int and type(item[1]) is str
      assert all(
        type(k) is str and type(v) is float for k, v in mapping.items()
      )


def test_mixed_item_types_draw_each_seen_type():
  values = _values(_first(_gen([[1, "a", 2.5, None]]), "random", 200))
  seen = {type(x) for v in values for x in v}
  assert seen == {int, str, float, type(None)}


# --- Determinism --------------------------------------------------------------


def _bytes(seed):
  gen = _gen([[3, 1, 2], "ab(c)", 2.5], [[], "", -1.0], seed=seed)
  inputs = []
  for kind in generate.KINDS:
    inputs += _first(gen, kind, 40)
  return wire.dumps(wire.encode(inputs))


def test_same_seed_same_bytes():
  assert _bytes(0) == _bytes(0)
  assert _bytes(0) != _bytes(1)


def test_unknown_kind():
  with pytest.raises(ValueError, match="unknown kind 'fuzz'"):
    next(_gen([1]).candidates("fuzz"))
