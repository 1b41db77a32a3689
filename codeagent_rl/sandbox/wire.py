"""Tagged plain data and length-prefixed JSON frames; standard library only.

This module is the one definition of the value encoding shared by the task
files (`codeagent_rl.tasks.schema`), the host side of the sandbox and the
guest forkserver. The guest runs inside the sandbox with only the Python
runtime bound in, so this file must import nothing outside the standard
library: the `guest` package loads it by path from the directory above.

Encoding (`encode` / `decode`):

  None, bool, str, list          JSON as they are
  int                            a JSON number; `{"$int": "<hex>"}` past
                                 `INT_DIGITS_LIMIT` digits
  float                          a JSON number when finite; else
                                 `{"$float": "nan" | "inf" | "-inf"}`
  tuple, set, frozenset          `{"$tuple": [...]}`, `{"$set": [...]}`,
                                 `{"$frozenset": [...]}` (sets sorted by
                                 their encoding, so equal sets encode alike)
  dict                           a JSON object when every key is a str that
                                 does not start with "$"; else
                                 `{"$dict": [[key, value], ...]}`

Only objects whose type *is* one of these types are encoded: a subclass of
a built-in (an `int` with its own `__eq__`, say) raises `EncodeError`, so a
value that crosses the sandbox boundary is always inert plain data. `decode`
is strict: anything but this grammar raises `DecodeError`.

Frames (`write_frame` / `read_frame`): a 4-byte big-endian length, then that
many bytes of UTF-8 JSON.

`sealed` returns copies of `encode` and `write_frame` that nothing patched
after the call reaches: the guest's job process takes them before it
imports untrusted code, which shares its interpreter.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
import json
import math
import os
import struct
import types
from typing import Any

# Past this many decimal digits `int` <-> `str` conversion is refused by
# CPython (sys.int_info.default_max_str_digits), so larger ints go as hex.
INT_DIGITS_LIMIT = 4000
_INT_LIMIT = 10**INT_DIGITS_LIMIT
# Deepest nesting `encode` and `decode` accept (values, not JSON depth).
MAX_DEPTH = 100
_PLAIN_TYPES = (bool, int, float, str, list, tuple, dict, set, frozenset)
_TAGS = ("$int", "$float", "$tuple", "$set", "$frozenset", "$dict")
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_HEADER = struct.Struct(">I")
# Largest frame `read_frame` accepts unless told otherwise.
DEFAULT_MAX_FRAME = 64 << 20


class EncodeError(ValueError):
  """A value is not plain data (or is nested too deeply)."""


class DecodeError(ValueError):
  """A JSON value does not follow the tagged encoding."""


class FrameError(ValueError):
  """A frame is truncated, too large or not JSON."""


class FrameTooLarge(FrameError):
  """A frame's header announces more bytes than the reader accepts."""


def _reject_constant(name: str) -> Any:
  raise ValueError(f"non-finite JSON number {name} (tag it as $float)")


def _finite_float(text: str) -> float:
  value = float(text)
  if not math.isfinite(value):
    # 1e999 is valid JSON that overflows: no encoder could write it back.
    raise ValueError(f"JSON number {text[:40]} is not a finite float")
  return value


def loads(text: str | bytes) -> Any:
  """`json.loads` that rejects non-finite numbers (NaN, 1e999, ...)."""
  return json.loads(
    text, parse_constant=_reject_constant, parse_float=_finite_float
  )


def dumps(obj: Any) -> str:
  """Compact `json.dumps` that refuses NaN/Infinity (they must be tagged)."""
  return json.dumps(obj, allow_nan=False, separators=(",", ":"))


def _encode_float(value: float) -> Any:
  if math.isfinite(value):
    return value
  if math.isnan(value):
    return {"$float": "nan"}
  return {"$float": "inf" if value > 0 else "-inf"}


def _sorted_items(items: list) -> list:
  return sorted(items, key=dumps)


def encode(value: Any, _depth: int = 0) -> Any:
  """Encodes plain data into JSON-safe tagged form.

  Args:
    value: None, bool, int, float, str, list, tuple, dict, set or frozenset,
      nested; exact types only.

  Returns:
    A value `json.dumps(..., allow_nan=False)` accepts.

  Raises:
    EncodeError: on any other type (subclasses of built-ins included) or
      nesting deeper than `MAX_DEPTH`.
  """
  if _depth > MAX_DEPTH:
    raise EncodeError(f"value nested deeper than {MAX_DEPTH} levels")
  kind = type(value)
  if value is None or kind is bool or kind is str:
    return value
  if kind is int:
    if -_INT_LIMIT < value < _INT_LIMIT:
      return value
    return {"$int": hex(value)}
  if kind is float:
    return _encode_float(value)
  depth = _depth + 1
  if kind is list:
    return [encode(v, depth) for v in value]
  if kind is tuple:
    return {"$tuple": [encode(v, depth) for v in value]}
  if kind is set or kind is frozenset:
    tag = "$set" if kind is set else "$frozenset"
    return {tag: _sorted_items([encode(v, depth) for v in value])}
  if kind is dict:
    if all(type(k) is str and not k.startswith("$") for k in value):
      return {k: encode(v, depth) for k, v in value.items()}
    pairs = [[encode(k, depth), encode(v, depth)] for k, v in value.items()]
    return {"$dict": pairs}
  raise EncodeError(f"{_type_name(value)} is not plain data")


def _type_name(value: Any) -> str:
  """The type's name, read without calling anything the value defines."""
  cls = type(value)
  name = type.__dict__["__qualname__"].__get__(cls)
  base = next((b for b in _PLAIN_TYPES if issubclass(cls, b)), None)
  return f"{name} (a subclass of {base.__name__})" if base else name


def _decode_list(items: Any, tag: str, depth: int) -> list:
  if type(items) is not list:
    raise DecodeError(f"{tag} needs a JSON array, got {type(items).__name__}")
  return [decode(v, depth) for v in items]


def _hashable(items: list, tag: str) -> None:
  for item in items:
    try:
      hash(item)
    except TypeError as e:
      raise DecodeError(f"{tag} element is unhashable: {e}") from None


def decode(value: Any, _depth: int = 0) -> Any:
  """Inverse of `encode`, strict about the grammar.

  Args:
    value: a value from `json.loads` (or `loads`).

  Returns:
    The plain Python value.

  Raises:
    DecodeError: on unknown or malformed tags, "$"-keys in plain objects,
      non-finite plain floats or nesting deeper than `MAX_DEPTH`.
  """
  if _depth > MAX_DEPTH:
    raise DecodeError(f"value nested deeper than {MAX_DEPTH} levels")
  kind = type(value)
  if value is None or kind is bool or kind is str or kind is int:
    return value
  if kind is float:
    if not math.isfinite(value):
      raise DecodeError("non-finite float must be tagged as $float")
    return value
  depth = _depth + 1
  if kind is list:
    return [decode(v, depth) for v in value]
  if kind is not dict:
    raise DecodeError(f"{kind.__name__} is not JSON data")
  tagged = [k for k in value if k.startswith("$")]
  if not tagged:
    return {k: decode(v, depth) for k, v in value.items()}
  if len(value) != 1 or tagged[0] not in _TAGS:
    raise DecodeError(
      f"object with keys {sorted(value)[:5]} is not a tag; use one of"
      f" {_TAGS} alone, or $dict for dicts whose keys start with '$'"
    )
  tag, payload = tagged[0], value[tagged[0]]
  if tag == "$int":
    if type(payload) is not str:
      raise DecodeError("$int needs a hex string")
    try:
      return int(payload, 16)
    except ValueError:
      raise DecodeError(f"$int {payload[:40]!r} is not hex") from None
  if tag == "$float":
    if type(payload) is not str or payload not in _NON_FINITE:
      raise DecodeError(f"$float needs one of {sorted(_NON_FINITE)}")
    return _NON_FINITE[payload]
  items = _decode_list(payload, tag, depth)
  if tag == "$tuple":
    return tuple(items)
  if tag in ("$set", "$frozenset"):
    _hashable(items, tag)
    return set(items) if tag == "$set" else frozenset(items)
  result = {}
  for pair in items:
    if type(pair) is not list or len(pair) != 2:
      raise DecodeError("$dict needs [key, value] pairs")
    _hashable(pair[:1], "$dict key")
    result[pair[0]] = pair[1]
  return result


def encode_json(value: Any) -> str:
  """`dumps(encode(value))`."""
  return dumps(encode(value))


def decode_json(text: str | bytes) -> Any:
  """`decode(loads(text))`, with JSON errors raised as `DecodeError`."""
  try:
    raw = loads(text)
  except (ValueError, RecursionError) as e:
    raise DecodeError(f"not JSON: {e}") from None
  return decode(raw)


def pack_frame(obj: Any) -> bytes:
  """One frame: header plus compact JSON of `obj` (already plain JSON)."""
  data = dumps(obj).encode("utf-8")
  return _HEADER.pack(len(data)) + data


def write_frame(fd: int, obj: Any) -> None:
  """Writes one frame to a file descriptor, retrying partial writes."""
  view = memoryview(pack_frame(obj))
  while view:
    view = view[os.write(fd, view) :]


# What `sealed` copies: `encode`, `write_frame` and everything of this
# module they call (`dumps` is replaced by a copy of its own).
_SEALED = (
  "encode",
  "_encode_float",
  "_sorted_items",
  "_type_name",
  "pack_frame",
  "write_frame",
)


def _sealed_dumps() -> Callable[[Any], str]:
  """`dumps` over a C JSON encoder made now (what `json.dumps` would make).

  `json.dumps` builds its encoder at each call from names in `json`'s
  modules, which later code could replace; this one is built once here.
  """
  make = json.encoder.c_make_encoder
  if make is None:
    raise RuntimeError("sealed() needs the C JSON encoder (_json).")

  def refuse(obj):
    raise TypeError("not JSON data")

  # Arguments as `json.dumps(obj, allow_nan=False, separators=(",", ":"))`
  # passes them, without the cycle check (`encode` output is a tree).
  iterencode = make(
    None,
    refuse,
    json.encoder.c_encode_basestring_ascii,
    None,
    ":",
    ",",
    False,
    False,
    False,
  )
  join = "".join

  def sealed_dumps(obj: Any) -> str:
    return join(iterencode(obj, 0))

  return sealed_dumps


def sealed() -> tuple[Callable[[Any], Any], Callable[[int, Any], None]]:
  """Copies of `encode` and `write_frame` that later patches cannot reach.

  The copies run over a private snapshot of this module's globals: the
  builtins copied, each imported module replaced by a copy of its
  attributes, `dumps` by `_sealed_dumps()`. Replacing anything in this
  module, `json`, `math`, `os` or `builtins` after the call changes nothing
  they do. (Code in the same process can still reach the copies through
  the garbage collector; the guest's server checks every frame anyway.)

  Returns:
    (encode, write_frame), as the module's.
  """
  scope = {}
  for name, value in globals().items():
    if isinstance(value, types.ModuleType):
      value = types.SimpleNamespace(**vars(value))
    scope[name] = value
  scope["__builtins__"] = dict(vars(builtins))
  scope["dumps"] = _sealed_dumps()
  for name in _SEALED:
    function = globals()[name]
    scope[name] = types.FunctionType(
      function.__code__, scope, name, function.__defaults__
    )
  return scope["encode"], scope["write_frame"]


def _read_exact(fd: int, n: int) -> bytes | None:
  chunks = []
  while n:
    chunk = os.read(fd, min(n, 1 << 20))
    if not chunk:
      return None
    chunks.append(chunk)
    n -= len(chunk)
  return b"".join(chunks)


def read_frame(fd: int, max_bytes: int = DEFAULT_MAX_FRAME) -> Any:
  """Reads one frame from a blocking descriptor.

  Args:
    fd: file descriptor.
    max_bytes: largest payload accepted.

  Returns:
    The parsed JSON, or None at a clean end of file (before a header).

  Raises:
    FrameError: on a truncated frame, an oversized one or bad JSON.
  """
  header = _read_exact(fd, _HEADER.size)
  if header is None:
    return None
  (size,) = _HEADER.unpack(header)
  if size > max_bytes:
    raise FrameTooLarge(f"frame of {size} bytes exceeds {max_bytes}")
  data = _read_exact(fd, size)
  if data is None:
    raise FrameError("end of file inside a frame")
  try:
    return loads(data)
  except (ValueError, RecursionError) as e:
    raise FrameError(f"frame is not JSON: {e}") from None


def split_frames(buffer: bytearray, max_bytes: int) -> list[Any]:
  """Removes and parses the complete frames at the start of `buffer`.

  Args:
    buffer: bytes received so far; consumed frames are deleted from it.
    max_bytes: largest payload accepted.

  Returns:
    The parsed frames, in order.

  Raises:
    FrameError: on an oversized frame or bad JSON.
  """
  frames = []
  while len(buffer) >= _HEADER.size:
    (size,) = _HEADER.unpack_from(buffer)
    if size > max_bytes:
      raise FrameTooLarge(f"frame of {size} bytes exceeds {max_bytes}")
    end = _HEADER.size + size
    if len(buffer) < end:
      break
    data = bytes(buffer[_HEADER.size : end])
    del buffer[:end]
    try:
      frames.append(loads(data))
    except (ValueError, RecursionError) as e:
      raise FrameError(f"frame is not JSON: {e}") from None
  return frames
