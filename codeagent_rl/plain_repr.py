"""A bounded, deterministic repr of plain data that never raises.

Standard library only and no project imports: both the judge's reasons
(`tasks/judge.py`) and the environments' observations (`envs/protocol.py`)
use it, and `tasks` must not import `envs`, the layer above it.

`plain_repr(value, max_chars)` is Python's `repr` with three changes:

- Sets and frozensets list their elements in a fixed order, so the text
  never depends on hashing: by value when every element is an `int`, or
  every element is a `str`; otherwise by the elements' text.
- An `int` of more than 4300 digits (CPython's default limit on int-to-str
  conversion; `int.bit_length()` decides first, so no huge int is
  converted) reads `<int of ~N digits>` or `<negative int of ~N digits>`;
  N is estimated from the bit length and may be one too many.
- Anything that is not exactly None, bool, int, float, str, list, tuple,
  dict, set or frozenset (a subclass included) reads `<TypeName object>`:
  its own `__repr__` never runs. A container inside itself reads `[...]`
  (`(...)`, `{...}`) as in `repr`; deeper than `MAX_DEPTH` containers, the
  rest reads `...`.

With `max_chars`, text longer than `max_chars` keeps its first
`max_chars - 3` characters and ends in "...", and building stops once it
has more than `max_chars` characters: a 1 MiB list costs about `max_chars`
characters of work, a 64 MiB string one scan for quotes, and a set one
visit of each element to sort them.
"""

from __future__ import annotations

from typing import Any

# Containers nested deeper than this render as "..." (above the wire
# format's 100, so every value that crosses the sandbox renders in full).
MAX_DEPTH = 120
# Ints of up to 4300 digits show in full: CPython's default limit on
# int-to-str conversion (sys.int_info.default_max_str_digits). Any int of
# more bits than this has more digits (2**14285 > 10**4300).
_INT_REPR_MAX_DIGITS = 4300
_INT_REPR_MAX_BITS = 14285
_LOG10_2 = 0.30102999566398120
_CUT = "..."
_PLAIN = (type(None), bool, int, float, str, list, tuple, dict, set, frozenset)


class _Text:
  """Pieces of text that stop growing past `limit` characters."""

  __slots__ = ("parts", "size", "limit")

  def __init__(self, limit: int | None):
    self.parts: list[str] = []
    self.size = 0
    self.limit = limit

  @property
  def full(self) -> bool:
    return self.limit is not None and self.size > self.limit

  def room(self) -> int | None:
    """Characters still needed to pass the limit (None: no limit)."""
    return None if self.limit is None else self.limit + 1 - self.size

  def add(self, piece: str) -> None:
    self.parts.append(piece)
    self.size += len(piece)

  def text(self) -> str:
    return "".join(self.parts)


def int_repr(value: int) -> str:
  """`repr(value)`, or a digit estimate past 4300 digits (never raises)."""
  bits = value.bit_length()
  if bits <= _INT_REPR_MAX_BITS:
    try:
      text = repr(value)
    except ValueError:  # a process that lowered the digit limit
      text = ""
    # Whatever limit this process set, the text is the same everywhere.
    if text and len(text) - (value < 0) <= _INT_REPR_MAX_DIGITS:
      return text
  digits = int(bits * _LOG10_2) + 1
  sign = "negative " if value < 0 else ""
  return f"<{sign}int of ~{digits} digits>"


def _str_repr_prefix(text: str, room: int) -> str:
  """A prefix of `repr(text)` at least `room` characters long, cheaply.

  `repr` picks its quote from the whole string (double quotes when it holds
  a ' and no "), so the quote is decided here and the prefix escaped to
  match; escapes are per character, so the rest is `repr` of a prefix.
  """
  head = text[:room]
  if "'" in text and '"' not in text:
    body = repr(head)[1:-1]  # head has no '"': no escaped quote inside
    return '"' + body
  if "'" in text:
    # Both quotes occur: ' is escaped. A '"' forces the same choice on head.
    return repr(head + '"')[:-2]
  return repr(head)[:-1]


def _set_order(value: set | frozenset, room: int | None) -> list[str]:
  """The elements' texts in the fixed order (each cut past `room` chars)."""
  kinds = {type(v) for v in value}
  if kinds in ({int}, {str}):
    # Render only what can be shown: the first elements in sorted order.
    texts = []
    used = 0
    for item in sorted(value):
      if room is not None and used > room:
        break
      texts.append(_render(item, room))
      used += len(texts[-1]) + 2
    return texts
  # Text cut past `room` sorts like the full text as far as it is shown:
  # elements that tie on a cut prefix already fill the rest of the room.
  return sorted(_render(v, room) for v in value)


def _render(value: Any, room: int | None) -> str:
  """The text of one value, cut once it passes `room` characters."""
  out = _Text(None if room is None else room - 1)
  _emit(value, out, 0, set())
  text = out.text()
  return text if room is None else text[:room]


def _emit(value: Any, out: _Text, depth: int, path: set[int]) -> None:
  if out.full:  # what follows would be cut anyway
    return
  kind = type(value)
  if kind not in _PLAIN:
    out.add(f"<{kind.__name__} object>")
    return
  if kind is str:
    room = out.room()
    if room is None or len(value) < room:
      out.add(repr(value))
    else:
      out.add(_str_repr_prefix(value, room))
    return
  if kind is int:
    out.add(int_repr(value))
    return
  if value is None or kind is bool or kind is float:
    out.add(repr(value))
    return
  if id(value) in path:
    out.add({list: "[...]", tuple: "(...)"}.get(kind, "{...}"))
    return
  if depth >= MAX_DEPTH:
    out.add(_CUT)
    return
  path.add(id(value))
  try:
    _emit_container(value, kind, out, depth + 1, path)
  finally:
    path.discard(id(value))


def _emit_items(items, out: _Text, depth: int, path: set[int]) -> None:
  for i, item in enumerate(items):
    if out.full:
      return
    if i:
      out.add(", ")
    _emit(item, out, depth, path)


def _emit_container(
  value: Any, kind: type, out: _Text, depth: int, path: set[int]
) -> None:
  if kind is list:
    out.add("[")
    _emit_items(value, out, depth, path)
    out.add("]")
  elif kind is tuple:
    out.add("(")
    _emit_items(value, out, depth, path)
    out.add(",)" if len(value) == 1 else ")")
  elif kind is dict:
    out.add("{")
    for i, (key, item) in enumerate(value.items()):
      if out.full:
        return
      if i:
        out.add(", ")
      _emit(key, out, depth, path)
      out.add(": ")
      _emit(item, out, depth, path)
    out.add("}")
  else:  # set or frozenset
    prefix = "frozenset(" if kind is frozenset else ""
    out.add(prefix)
    if out.full:
      return
    if not value:
      out.add(")" if prefix else "set()")
      return
    out.add("{")
    for i, text in enumerate(_set_order(value, out.room())):
      if out.full:
        return
      if i:
        out.add(", ")
      out.add(text)
    out.add("})" if prefix else "}")


def plain_repr(value: Any, max_chars: int | None = None) -> str:
  """A deterministic repr of plain data, cut to `max_chars` with "...".

  Args:
    value: any object; plain data renders as `repr` does (see the module
      docstring for sets, huge ints and everything else).
    max_chars: cap on the length of the result (None: no cap).

  Returns:
    The text; never raises.
  """
  try:
    out = _Text(max_chars)
    _emit(value, out, 0, set())
    text = out.text()
  except Exception as e:  # noqa: BLE001 - e.g. MemoryError on a huge value
    text = f"<unprintable {type(value).__name__}: {type(e).__name__}>"
  if max_chars is not None and len(text) > max_chars:
    return text[: max(max_chars - len(_CUT), 0)] + _CUT
  return text
