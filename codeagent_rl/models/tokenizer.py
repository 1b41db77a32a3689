r"""Tokenizers for the agent protocol: raw bytes, or a Hugging Face vocabulary.

Both implement `Tokenizer`. The protocol tokens (`SPECIAL_TOKENS`) each have
one id. `encode` is for trusted text (prompts, templates): it turns the
protocol tokens' text into their ids. `encode_plain` is for untrusted text
(task statements, program output, observations): it never returns a protocol
token id, so a program that prints "<submit>" cannot end the episode or forge
a turn boundary.

Lone surrogates (a `str` that is not valid Unicode, e.g. from the JSON "\ud800")
are encoded as U+FFFD rather than raising, since untrusted text may hold them.
"""

import abc
from collections.abc import Iterable
from collections.abc import Mapping
import itertools
import operator
import os
import re
from typing import Any

PAD = "<pad>"
BOS = "<bos>"
EOS = "<eos>"
RUN = "<run>"
RUN_END = "</run>"
SUBMIT = "<submit>"
SUBMIT_END = "</submit>"
OBS = "<obs>"
OBS_END = "</obs>"

# The agent protocol's tokens. The order fixes `ByteTokenizer` ids (pad = 0);
# changing it, or adding a token, changes the ids of checkpoints' vocabularies.
SPECIAL_TOKENS = (
  PAD,
  BOS,
  EOS,
  RUN,
  RUN_END,
  SUBMIT,
  SUBMIT_END,
  OBS,
  OBS_END,
)

NUM_BYTES = 256
# ByteTokenizer ids below this are protocol tokens or reserved for future
# ones, so adding a protocol token never shifts the byte ids (and never
# invalidates a trained embedding).
NUM_RESERVED_SPECIAL_IDS = 16

# Matches any protocol token; longest first so no token shadows a longer one.
_SPECIAL_ALTERNATION = "|".join(
  re.escape(t) for t in sorted(SPECIAL_TOKENS, key=len, reverse=True)
)
_SPECIAL_RE = re.compile(f"({_SPECIAL_ALTERNATION})")
# Zero-width match at the start of every occurrence, overlapping ones included.
_SPECIAL_START_RE = re.compile(f"(?=(?:{_SPECIAL_ALTERNATION}))")


def _valid_unicode(text: str) -> str:
  """Returns `text` with lone surrogates replaced by U+FFFD."""
  if not isinstance(text, str):
    raise TypeError(f"Expected text as str, got {type(text).__name__}.")
  try:
    text.encode("utf-8")
  except UnicodeEncodeError:
    # Pairs surrogate halves that form a character, replaces the others.
    text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
  return text


def _split_protocol_tokens(text: str) -> list[str]:
  """Cuts `text` after the first character of every protocol token in it.

  No piece contains a whole protocol token, so no piece can be tokenized into
  one, whatever the vocabulary; the pieces join back to `text`.
  """
  cuts = [m.start() + 1 for m in _SPECIAL_START_RE.finditer(text)]
  bounds = [0, *cuts, len(text)]
  return [text[a:b] for a, b in itertools.pairwise(bounds) if a < b]


class Tokenizer(abc.ABC):
  """The interface the rest of the code uses.

  Ids run from 0 to `vocab_size - 1`. Ids at or past the underlying
  vocabulary's size (padding up to `pad_vocab_to_multiple`) decode to nothing.
  """

  def __init__(
    self,
    special_ids: Mapping[str, int],
    num_ids: int,
    pad_vocab_to_multiple: int,
  ):
    """Validates and stores the id layout.

    Args:
      special_ids: id of each of `SPECIAL_TOKENS`.
      num_ids: size of the underlying vocabulary (ids below it are real).
      pad_vocab_to_multiple: `vocab_size` is `num_ids` rounded up to this.

    Raises:
      ValueError: on a bad multiple or special-id layout.
    """
    if (
      isinstance(pad_vocab_to_multiple, bool)
      or not isinstance(pad_vocab_to_multiple, int)
      or pad_vocab_to_multiple < 1
    ):
      raise ValueError(
        "pad_vocab_to_multiple must be an int >= 1, got"
        f" {pad_vocab_to_multiple!r}."
      )
    if set(special_ids) != set(SPECIAL_TOKENS):
      raise ValueError(
        f"special_ids must name exactly {SPECIAL_TOKENS}, got"
        f" {tuple(special_ids)}."
      )
    ids = [special_ids[t] for t in SPECIAL_TOKENS]
    if len(set(ids)) != len(ids) or not all(0 <= i < num_ids for i in ids):
      raise ValueError(
        f"Protocol token ids must be distinct and in [0, {num_ids}); got"
        f" {dict(zip(SPECIAL_TOKENS, ids, strict=True))}."
      )
    self._special_ids = {t: special_ids[t] for t in SPECIAL_TOKENS}
    self._special_by_id = {i: t for t, i in self._special_ids.items()}
    self._protocol_ids = frozenset(ids)
    self._num_ids = num_ids
    multiple = pad_vocab_to_multiple
    self._vocab_size = -(-num_ids // multiple) * multiple

  @property
  def vocab_size(self) -> int:
    """Number of ids, padding included (the model's embedding rows)."""
    return self._vocab_size

  @property
  def special_ids(self) -> dict[str, int]:
    """Protocol token text -> id, in `SPECIAL_TOKENS` order (a copy)."""
    return dict(self._special_ids)

  @property
  def pad_id(self) -> int:
    """Id of `<pad>`."""
    return self._special_ids[PAD]

  @property
  def bos_id(self) -> int:
    """Id of `<bos>`."""
    return self._special_ids[BOS]

  @property
  def eos_id(self) -> int:
    """Id of `<eos>`."""
    return self._special_ids[EOS]

  def id_to_special(self, token_id: int) -> str | None:
    """Returns the protocol token with this id, or None for any other id."""
    return self._special_by_id.get(int(token_id))

  def stop_ids(self, names: Iterable[str]) -> list[int]:
    """Returns the ids of the protocol tokens `names`, in order.

    Args:
      names: protocol token texts, e.g. `[SUBMIT_END, EOS]`.

    Raises:
      TypeError: if `names` is a single str (a likely slip for `[name]`).
      ValueError: naming any text that is not a protocol token.
    """
    if isinstance(names, str):
      raise TypeError(f"stop_ids takes a list of names; got the str {names!r}.")
    names = list(names)
    unknown = [n for n in names if n not in self._special_ids]
    if unknown:
      raise ValueError(
        f"Unknown protocol tokens {unknown}; use some of {SPECIAL_TOKENS}."
      )
    return [self._special_ids[n] for n in names]

  def encode(
    self, text: str, *, add_bos: bool = False, add_eos: bool = False
  ) -> list[int]:
    """Encodes trusted text; protocol tokens' text becomes their single ids.

    Args:
      text: e.g. `"<run>print(1)</run>"` -> [run id, ..., run end id].
      add_bos: prepend `bos_id`.
      add_eos: append `eos_id`.

    Returns:
      The token ids.
    """
    ids = self._encode(_valid_unicode(text))
    return [self.bos_id] * add_bos + ids + [self.eos_id] * add_eos

  def encode_plain(self, text: str) -> list[int]:
    """Encodes untrusted text; never returns a protocol token id.

    Args:
      text: e.g. program output; a literal "<submit>" in it stays text.

    Returns:
      The token ids, none of them in `special_ids.values()`.

    Raises:
      ValueError: if the vocabulary still turned the text into a protocol
        token (a normalizer that rewrites text into one; see `HFTokenizer`).
    """
    ids = self._encode_plain(_valid_unicode(text))
    if not self._protocol_ids.isdisjoint(ids):
      found = sorted(
        {self._special_by_id[i] for i in self._protocol_ids & set(ids)}
      )
      raise ValueError(
        f"encode_plain produced protocol tokens {found}; this vocabulary"
        " turns plain text into them and cannot encode untrusted text safely."
      )
    return ids

  def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
    """Decodes ids to text; invalid UTF-8 becomes U+FFFD, never an error.

    Args:
      ids: token ids (a list, or a 1-D NumPy array).
      skip_special: drop special tokens instead of writing their text.

    Returns:
      The text. Padding ids (past the underlying vocabulary) add nothing.

    Raises:
      ValueError: for an id outside [0, vocab_size).
    """
    if hasattr(ids, "tolist"):  # NumPy arrays: one fast conversion.
      ids = ids.tolist()
    ids = [operator.index(i) for i in ids]  # Rejects floats.
    for pos, i in enumerate(ids):
      if not 0 <= i < self._vocab_size:
        raise ValueError(
          f"Token id {i} at position {pos} is outside [0, {self._vocab_size})."
        )
    real = [i for i in ids if i < self._num_ids]
    return self._decode(real, skip_special=skip_special)

  @abc.abstractmethod
  def _encode(self, text: str) -> list[int]:
    """Encodes valid Unicode, recognising the protocol tokens."""

  @abc.abstractmethod
  def _encode_plain(self, text: str) -> list[int]:
    """Encodes valid Unicode without producing protocol token ids."""

  @abc.abstractmethod
  def _decode(self, ids: list[int], *, skip_special: bool) -> str:
    """Decodes ids in [0, num_ids)."""


class ByteTokenizer(Tokenizer):
  """UTF-8 bytes plus the protocol tokens.

  Ids: `0 .. len(SPECIAL_TOKENS) - 1` are `SPECIAL_TOKENS` in order (pad = 0);
  ids up to `NUM_RESERVED_SPECIAL_IDS` are reserved for future protocol
  tokens and decode to nothing; the next 256 are the bytes 0x00..0xff; the
  rest, up to `vocab_size`, are padding. `decode(encode(s)) == s` for every
  valid Unicode string.
  """

  def __init__(self, pad_vocab_to_multiple: int = 1):
    """Builds the tokenizer.

    Args:
      pad_vocab_to_multiple: round `vocab_size` up to a multiple of this
        (e.g. 128 for an embedding that shards evenly); 1 adds no padding.
    """
    assert len(SPECIAL_TOKENS) <= NUM_RESERVED_SPECIAL_IDS
    num_special = NUM_RESERVED_SPECIAL_IDS
    super().__init__(
      {t: i for i, t in enumerate(SPECIAL_TOKENS)},
      num_ids=num_special + NUM_BYTES,
      pad_vocab_to_multiple=pad_vocab_to_multiple,
    )
    self._byte_offset = num_special

  def _encode(self, text: str) -> list[int]:
    ids = []
    # re.split with a group alternates: plain, token, plain, ..., plain.
    for k, piece in enumerate(_SPECIAL_RE.split(text)):
      if k % 2:
        ids.append(self._special_ids[piece])
      else:
        ids.extend(self._encode_plain(piece))
    return ids

  def _encode_plain(self, text: str) -> list[int]:
    offset = self._byte_offset
    return [b + offset for b in text.encode("utf-8")]

  def _decode(self, ids: list[int], *, skip_special: bool) -> str:
    parts = []
    run = bytearray()
    for i in ids:
      if i >= self._byte_offset:
        run.append(i - self._byte_offset)
        continue
      if i not in self._special_by_id:
        continue  # a reserved id: decodes to nothing, like padding
      # A special token ends the byte run: bytes never merge across it.
      parts.append(run.decode("utf-8", "replace"))
      run.clear()
      if not skip_special:
        parts.append(self._special_by_id[i])
    parts.append(run.decode("utf-8", "replace"))
    return "".join(parts)


def _import_tokenizers() -> Any:
  """Imports Hugging Face `tokenizers`, saying how to install it if missing."""
  try:
    import tokenizers
  except ImportError as e:
    raise ImportError(
      "HFTokenizer needs the Hugging Face `tokenizers` package; install the"
      " extra: pip install -e '.[hf]'."
    ) from e
  return tokenizers


class HFTokenizer(Tokenizer):
  """A Hugging Face `tokenizers.Tokenizer` behind the same interface.

  The protocol tokens are added as special tokens where missing (a token
  already in the vocabulary keeps its id and is marked special). Truncation
  and padding set in the tokenizer file are turned off, and no post-processor
  template is applied: `add_bos` / `add_eos` are the only additions.

  `encode` also recognises the vocabulary's own added tokens (e.g.
  "<|endoftext|>"); `encode_plain` splits special ones into plain text. If
  the model's vocabulary itself holds a protocol token's text (so plain
  tokenization could produce its id), `encode_plain` re-encodes the text cut
  inside every occurrence of a protocol token; token boundaries may then
  differ there, the safety does not. `skip_special` drops every special token,
  the vocabulary's own included. Round trips are exact only where the
  underlying tokenizer's are (e.g. byte-level BPE without a normalizer).
  """

  def __init__(self, tokenizer: Any, *, pad_vocab_to_multiple: int = 1):
    """Wraps a copy of `tokenizer`; the caller's object is not changed.

    Args:
      tokenizer: a `tokenizers.Tokenizer`, or the path of a tokenizer.json.
      pad_vocab_to_multiple: round `vocab_size` up to a multiple of this.

    Raises:
      FileNotFoundError: if the path is no file.
      TypeError: if `tokenizer` is neither a path nor a `tokenizers.Tokenizer`.
      ValueError: if a protocol token does not encode to its one id.
    """
    tokenizers = _import_tokenizers()
    if isinstance(tokenizer, str | os.PathLike):
      path = os.fspath(tokenizer)
      if not os.path.isfile(path):
        raise FileNotFoundError(
          f"Tokenizer file {path!r} does not exist; pass a tokenizer.json."
        )
      tok = tokenizers.Tokenizer.from_file(path)
    elif isinstance(tokenizer, tokenizers.Tokenizer):
      tok = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    else:
      raise TypeError(
        "HFTokenizer wraps a tokenizers.Tokenizer or a tokenizer.json path;"
        f" got {type(tokenizer).__name__}."
      )
    tok.no_truncation()
    tok.no_padding()
    tok.add_special_tokens(
      [
        tokenizers.AddedToken(t, special=True, normalized=False)
        for t in SPECIAL_TOKENS
      ]
    )
    tok.encode_special_tokens = False
    # A second copy splits special tokens as text: encode_special_tokens is
    # state of the object, so flipping it per call would race between threads.
    plain = tokenizers.Tokenizer.from_str(tok.to_str())
    plain.no_truncation()
    plain.no_padding()
    plain.encode_special_tokens = True
    self._tok = tok
    self._plain = plain

    special_ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    num_ids = max(tok.get_vocab(with_added_tokens=True).values()) + 1
    super().__init__(special_ids, num_ids, pad_vocab_to_multiple)
    for t, i in self._special_ids.items():
      got = self._encode(t)
      if got != [i]:
        raise ValueError(
          f"Protocol token {t!r} (id {i}) encodes to {got}, not one id; the"
          " tokenizer's added tokens or normalizer interfere with it."
        )

  def _encode(self, text: str) -> list[int]:
    return self._tok.encode(text, add_special_tokens=False).ids

  def _encode_plain(self, text: str) -> list[int]:
    ids = self._plain.encode(text, add_special_tokens=False).ids
    if self._protocol_ids.isdisjoint(ids):
      return ids
    # The model's own vocabulary holds a protocol token's text. Encode the
    # pieces separately so no piece can hold a whole protocol token.
    pieces = _split_protocol_tokens(text)
    encodings = self._plain.encode_batch(pieces, add_special_tokens=False)
    return [i for e in encodings for i in e.ids]

  def _decode(self, ids: list[int], *, skip_special: bool) -> str:
    return self._tok.decode(ids, skip_special_tokens=skip_special)


def _make_byte(path: str | None, pad_vocab_to_multiple: int) -> Tokenizer:
  if path is not None:
    raise ValueError(
      f"Tokenizer kind 'byte' takes no path; got path={path!r}. Set it to"
      " None, or use kind 'hf'."
    )
  return ByteTokenizer(pad_vocab_to_multiple=pad_vocab_to_multiple)


def _make_hf(path: str | None, pad_vocab_to_multiple: int) -> Tokenizer:
  if path is None:
    raise ValueError(
      "Tokenizer kind 'hf' needs the path of a tokenizer.json; got None."
    )
  return HFTokenizer(path, pad_vocab_to_multiple=pad_vocab_to_multiple)


# Tokenizer kinds, chosen by a config string.
TOKENIZERS = {
  "byte": _make_byte,
  "hf": _make_hf,
}


def make_tokenizer(
  kind: str, path: str | None, pad_vocab_to_multiple: int
) -> Tokenizer:
  """Builds the tokenizer a config names.

  Args:
    kind: a key of `TOKENIZERS` ("byte" or "hf").
    path: tokenizer.json for "hf"; must be None for "byte".
    pad_vocab_to_multiple: round `vocab_size` up to a multiple of this.

  Returns:
    The tokenizer.

  Raises:
    ValueError: naming a bad kind, or a path that does not fit the kind.
  """
  if kind not in TOKENIZERS:
    raise ValueError(
      f"Unknown tokenizer kind {kind!r}; use one of {sorted(TOKENIZERS)}."
    )
  return TOKENIZERS[kind](path, pad_vocab_to_multiple)
