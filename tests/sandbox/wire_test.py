"""The tagged encoding and the frames shared by host, guest and task files."""

import math
import os

import pytest

from codeagent_rl.sandbox import wire

ROUND_TRIP = [
  None,
  True,
  False,
  0,
  -7,
  10**30,
  -(10**5000),
  1.5,
  -0.0,
  math.inf,
  -math.inf,
  "",
  "héllo\x00",
  [],
  [1, [2, [3]]],
  (),
  (1, "a", (2.5,)),
  set(),
  {1, 2, 3},
  frozenset({(1, 2), "x"}),
  {frozenset({1}), frozenset()},
  {},
  {"a": 1, "b": [1, 2]},
  {"$tuple": 1, "plain": 2},
  {1: "one", (2, 3): {"x"}, None: True},
  [{"k": ({1.5}, [None])}],
]


@pytest.mark.parametrize("value", ROUND_TRIP, ids=lambda v: type(v).__name__)
def test_round_trip_keeps_types(value):
  text = wire.encode_json(value)
  got = wire.decode_json(text)
  assert got == value
  assert wire.encode_json(got) == text  # same types all the way down


def test_nan_round_trips():
  got = wire.decode_json(wire.encode_json([math.nan]))
  assert math.isnan(got[0])


def test_encoding_is_plain_json_with_tags():
  assert wire.encode((1, {2}, math.nan, {"$x": 1})) == {
    "$tuple": [1, {"$set": [2]}, {"$float": "nan"}, {"$dict": [["$x", 1]]}]
  }
  # Equal sets encode alike whatever their iteration order.
  assert wire.encode({3, 1, 2}) == wire.encode({2, 3, 1}) == {"$set": [1, 2, 3]}


class IntLike(int):
  def __eq__(self, other):
    return True

  __hash__ = int.__hash__


class Box:
  pass


@pytest.mark.parametrize(
  "value,fragment",
  [
    (IntLike(3), "IntLike (a subclass of int)"),
    ([1, {"k": IntLike(1)}], "subclass of int"),
    (type("S", (str,), {})("x"), "subclass of str"),
    (type("L", (list,), {})(), "subclass of list"),
    (b"bytes", "bytes"),
    (Box(), "Box"),
    (1j, "complex"),
  ],
)
def test_encode_rejects_everything_else(value, fragment):
  with pytest.raises(wire.EncodeError, match="not plain data") as e:
    wire.encode(value)
  assert fragment in str(e.value)


def test_encode_rejects_cycles_and_deep_nesting():
  cycle = []
  cycle.append(cycle)
  with pytest.raises(wire.EncodeError, match="nested deeper"):
    wire.encode(cycle)
  deep = []
  for _ in range(wire.MAX_DEPTH + 5):
    deep = [deep]
  with pytest.raises(wire.EncodeError, match="nested deeper"):
    wire.encode(deep)


@pytest.mark.parametrize(
  "text,fragment",
  [
    ('{"$tuple": 3}', "needs a JSON array"),
    ('{"$float": "1.5"}', "$float needs"),
    ('{"$int": "zz"}', "not hex"),
    ('{"$set": [[1]]}', "unhashable"),
    ('{"$dict": [[1]]}', "pairs"),
    ('{"$nope": []}', "is not a tag"),
    ('{"$tuple": [], "x": 1}', "is not a tag"),
    ("NaN", "non-finite"),
    ("[1, Infinity]", "non-finite"),
    ("[1,", "not JSON"),
  ],
)
def test_decode_is_strict(text, fragment):
  with pytest.raises(wire.DecodeError) as e:
    wire.decode_json(text)
  assert fragment in str(e.value)


def test_decode_rejects_deep_nesting():
  with pytest.raises(wire.DecodeError):
    wire.decode_json("[" * 5000 + "]" * 5000)


def test_frames_round_trip_over_a_pipe():
  r, w = os.pipe()
  try:
    wire.write_frame(w, {"a": [1, 2]})
    wire.write_frame(w, "second")
    os.close(w)
    assert wire.read_frame(r) == {"a": [1, 2]}
    assert wire.read_frame(r) == "second"
    assert wire.read_frame(r) is None
  finally:
    os.close(r)


def test_truncated_and_oversize_frames():
  frame = wire.pack_frame({"x": "y" * 100})
  r, w = os.pipe()
  os.write(w, frame[:-3])
  os.close(w)
  with pytest.raises(wire.FrameError, match="end of file"):
    wire.read_frame(r)
  os.close(r)
  with pytest.raises(wire.FrameError, match="exceeds"):
    wire.split_frames(bytearray(frame), max_bytes=10)


def test_split_frames_keeps_partial_tail():
  data = bytearray(wire.pack_frame(1) + wire.pack_frame([2]) + b"\x00\x00")
  assert wire.split_frames(data, 1000) == [1, [2]]
  assert data == bytearray(b"\x00\x00")
  with pytest.raises(wire.FrameError, match="not JSON"):
    wire.split_frames(bytearray(b"\x00\x00\x00\x01{"), 1000)


def _sealed_frames(values) -> list[bytes]:
  """The frames `sealed()`'s copies write for `values`, as bytes."""
  encode, write_frame = wire.sealed()
  r, w = os.pipe()
  try:
    for value in values:
      write_frame(w, {"output": encode(value)})
    os.close(w)
    return [wire.read_frame(r) for _ in values]
  finally:
    os.close(r)


def test_sealed_copies_encode_and_frame_as_the_module_does():
  values = [*ROUND_TRIP, math.nan, "lone \udc80", -(10**5000)]
  encode, _ = wire.sealed()
  for value in values:
    assert wire.dumps(encode(value)) == wire.dumps(wire.encode(value))
  expected = [{"output": wire.encode(v)} for v in values]
  assert wire.dumps(_sealed_frames(values)) == wire.dumps(expected)
  with pytest.raises(wire.EncodeError, match="bytes is not plain data"):
    encode([b"x"])


def test_sealed_copies_ignore_later_patches():
  import builtins
  import json

  values = [{1: {2.5, math.inf}}, (1, [None, "s"]), 10**5000, {"k": [1]}]
  expected = _sealed_frames(values)
  encode, write_frame = wire.sealed()

  def forty_two(*args, **kwargs):
    return 42

  patches = [
    *((wire, name, forty_two) for name in ("encode", "_encode_float")),
    *((wire, name, forty_two) for name in ("_sorted_items", "dumps")),
    (wire, "_INT_LIMIT", 0),
    (wire, "MAX_DEPTH", -1),
    (json, "dumps", forty_two),
    (json.encoder, "c_make_encoder", None),
    (math, "isfinite", forty_two),
    (os, "write", forty_two),
    *((builtins, name, forty_two) for name in ("type", "sorted", "hex")),
    *((builtins, name, forty_two) for name in ("all", "len", "memoryview")),
  ]
  saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
  r, w = os.pipe()
  # Only the copies run while the patches hold (pytest needs builtins).
  setattr_ = setattr
  try:
    for obj, name, value in patches:
      setattr_(obj, name, value)
    for value in values:
      write_frame(w, {"output": encode(value)})
  finally:
    for obj, name, value in saved:
      setattr_(obj, name, value)
    os.close(w)
  try:
    assert [wire.read_frame(r) for _ in values] == expected
  finally:
    os.close(r)
