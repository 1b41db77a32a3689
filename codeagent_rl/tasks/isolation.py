r"""Data isolation: do a task's hidden tests or reference appear in a corpus?

  python -m codeagent_rl.tasks.isolation --tasks=TASKS.jsonl \
      --against=FILE_OR_DIR [--ngram=13] [--threshold=0.5] \
      [--report=OUT.json] [--check=tests,reference]

The method demands that suite A (`hidden_tests`) and suite B
(`heldout_tests`) never appear in pre-training or SFT data. Per task this
reports, for each of the two suites, how many tests are found exactly and
the n-gram containment of the suite, and for the reference solution whether
it is found whole and its containment. A task leaks when any test or the
reference is found exactly, or any containment is >= `--threshold`. The CLI
prints a table of the leaking tasks and a summary, writes the JSON report
with `--report`, and exits 1 (last line `error: ...`) when a task leaks;
bad input is one `error: ...` line and exit 2.

Normalisation: single quotes become double quotes, text is cut into tokens
`\w+` or one non-space character (whitespace is dropped), and the token
`assert` and trailing commas (before a closing bracket) are dropped. A
document is scanned twice when it has `#` comments: as it is and with each
line cut at its first `#` outside a "..." string (so a reference pasted with
added comments still matches; a `#` in a test's data still matches the
first scan). The reference is compared without its comments.

What counts as found, per test:

- Function test with an expected value: its call `ENTRY(args, k=v)`
  (Python reprs, sets sorted) followed by the expected value's repr, with
  only a separator between (`==`, `,`, `->`, `=>`, `:`, `is`, up to two `)`
  and a `#` before it: `assert f(1) == 2`, `assertEqual(f(1), 2)`,
  `print(f(1))  # 2`). Or, data form (tests without kwargs and at least
  `MIN_DATA_TOKENS` tokens, or `MIN_TOKENS` with a key name between):
  the args list as JSON, tagged JSON or repr followed within `DATA_GAP`
  tokens of JSON punctuation and key names (`, "expected": `; no `=` or
  `)`, which code has) by the expected value the same way. A number must
  not continue (`3` is not `3.5`).
- Function test with a checker: its call alone, if it has at least
  `MIN_CALL_TOKENS` tokens; else it is skipped.
- Stdio test: its stdin and its expected stdout each appear contiguously
  in one document.

Tests under `MIN_TOKENS` tokens are skipped (reported, never found). A
suite's containment is the share of distinct n-grams (`--ngram` tokens) of
its tests' assertion forms, concatenated in order (stdio: stdin then
stdout), that occur in the corpus; a suite or reference shorter than n has
none (exact check only).

Corpus (`Corpus.from_path`): a file or a directory, recursively
(`EXTENSIONS`; others skipped). A `.jsonl` line is one document: a JSON
object's or array's strings, joined by newlines (a subtree of short
one-line strings and numbers, e.g. `{"args": [2, 2], "expected": 4}`, is
kept as its JSON); a line that is not JSON is text. Any other file is one
document, streamed in chunks of `MAX_DOC_CHARS` that overlap by
`OVERLAP_CHARS`. `Corpus.from_texts` takes the documents directly (e.g.
rendered SFT demonstrations).

Memory is bounded by the tasks, not the corpus: `check` hashes the tasks'
n-grams and token sequences first, then streams the corpus once in batches
of `BATCH_TOKENS` tokens, keeping only which of those hashes occur.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
import dataclasses
import json
import math
import os
import re
import sys
from typing import Any

from absl import app
from absl import flags
import numpy as np

from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import schema

DEFAULT_NGRAM = 13
DEFAULT_THRESHOLD = 0.5
CHECKS = ("tests", "reference")
CHECKED_SUITES = ("hidden_tests", "heldout_tests")
EXTENSIONS = (".jsonl", ".json", ".txt", ".py", ".md")
# Tests with fewer tokens are too short to be distinctive (skipped).
MIN_TOKENS = 6
# A checker test has no expected value: its call alone must be this long.
MIN_CALL_TOKENS = 10
# The data form (args JSON, then expected) needs this many tokens, or
# `MIN_TOKENS` and a key name between (`"expected":`).
MIN_DATA_TOKENS = 12
# Most tokens between args and expected in the data form.
DATA_GAP = 12
# Document chunks of large files, and their overlap (longer than any
# reference or test, so nothing is lost at a boundary).
MAX_DOC_CHARS = 1 << 20
OVERLAP_CHARS = 1 << 16
# Tokens hashed per numpy batch.
BATCH_TOKENS = 1 << 19
# A JSON subtree whose strings are all this short (and one-line, no quotes)
# is data and kept as its JSON text.
_DATA_STRING_CHARS = 64
# Sequences longer than this are located by their first `_ANCHOR` tokens.
_ANCHOR = 12
_MASK = (1 << 64) - 1
_PRIME = 0x9E3779B97F4A7C15
_P = np.uint64(_PRIME)
_BLOOM_BITS = 24
_BLOOM_SHIFT = np.uint64(64 - _BLOOM_BITS)
# Separates documents in a batch; the tokenizer never yields two characters
# of punctuation as one token.
_SEP = "\x00\x00"

# `\w+` or one other non-space character; a comma before a closing bracket
# (a trailing comma, as formatters add) is dropped.
_TOKEN_RE = re.compile(r"\w+|,(?!\s*[)\]}])|[^\w\s,]")
# A line up to its first `#` outside a "..." string.
_COMMENT_RE = re.compile(
  r'^((?:[^"#\n\\]|\\.|"(?:[^"\\\n]|\\.)*")*)#[^\n]*', re.MULTILINE
)
_ASSERT_SEPS = frozenset(
  {("=", "="), ("=",), (",",), ("-", ">"), ("=", ">"), (":",), ("is",)}
)
# What may stand between args and expected in the data form: JSON
# punctuation and key names (no `=` or `)`: code is not data).
_DATA_KEYS = frozenset(
  ["expected", "expected_output", "output", "outputs", "result", "results"]
  + ["answer", "want", "kwargs"]
)
_DATA_GAP_TOKENS = _DATA_KEYS | set(',:"{}]')


class CorpusError(ValueError):
  """The corpus cannot be read; the message says what and where."""


# --- Normalisation ------------------------------------------------------------


def tokenize(text: str) -> list[str]:
  """Normalised tokens: ' as ", no whitespace, `assert`, trailing commas."""
  return [t for t in _TOKEN_RE.findall(text.replace("'", '"')) if t != "assert"]


def strip_comments(text: str) -> str:
  """`text` with ' as " and each line cut at its first `#` outside "..."."""
  text = text.replace("'", '"')
  return _COMMENT_RE.sub(r"\1", text) if "#" in text else text


def code_tokens(source: str) -> list[str]:
  """Normalised tokens of code without its `#` comments."""
  return tokenize(strip_comments(source))


def _streams(text: str) -> list[list[str]]:
  """The token streams a document is scanned as (with and w/o comments)."""
  text = text.replace("'", '"')
  full = [t for t in _TOKEN_RE.findall(text) if t != "assert"]
  if "#" not in text:
    return [full]
  stripped = _COMMENT_RE.sub(r"\1", text)
  return [full] if len(stripped) == len(text) else [full, tokenize(stripped)]


def _py_repr(value: Any) -> str:
  """`repr`, with sets sorted so that it does not depend on hash order."""
  if isinstance(value, set | frozenset):
    items = ", ".join(sorted(_py_repr(v) for v in value))
    if isinstance(value, frozenset):
      return f"frozenset({{{items}}})" if value else "frozenset()"
    return f"{{{items}}}" if value else "set()"
  if isinstance(value, list):
    return "[" + ", ".join(_py_repr(v) for v in value) + "]"
  if isinstance(value, tuple):
    inner = ", ".join(_py_repr(v) for v in value)
    return f"({inner},)" if len(value) == 1 else f"({inner})"
  if isinstance(value, dict):
    items = (f"{_py_repr(k)}: {_py_repr(v)}" for k, v in value.items())
    return "{" + ", ".join(items) + "}"
  return repr(value)


def _plain(value: Any) -> Any:
  """Tuples and sets as lists (what a plain JSON dump would hold)."""
  if isinstance(value, list | tuple):
    return [_plain(v) for v in value]
  if isinstance(value, set | frozenset):
    return sorted((_plain(v) for v in value), key=_py_repr)
  if isinstance(value, dict):
    return {k: _plain(v) for k, v in value.items()}
  return value


def _data_forms(value: Any) -> list[tuple[str, ...]]:
  """Token sequences of `value` as repr, plain JSON and tagged JSON."""
  tagged = json.dumps(wire.encode(value), ensure_ascii=False)
  texts = [_py_repr(value), tagged]
  if '"$' in tagged:  # else the plain JSON is the tagged one
    try:
      texts.append(json.dumps(_plain(value), ensure_ascii=False))
    except (TypeError, ValueError):  # dict keys JSON cannot hold
      pass
  unique = dict.fromkeys(t.replace("'", '"') for t in texts)
  return list(dict.fromkeys(tuple(tokenize(t)) for t in unique))


def call_text(entry: str, test: dict) -> str:
  """`ENTRY(arg, ..., k=v)` of a function test (reprs, sets sorted)."""
  parts = [_py_repr(a) for a in test["args"]]
  parts += [f"{k}={_py_repr(v)}" for k, v in test.get("kwargs", {}).items()]
  return f"{entry}({', '.join(parts)})"


def assertion_text(entry: str, test: dict) -> str:
  """`ENTRY(args) == EXPECTED`, or the call alone for a checker test."""
  call = call_text(entry, test)
  if "expected" not in test:
    return call
  return f"{call} == {_py_repr(test['expected'])}"


# --- Corpus -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Document:
  """One document of a corpus.

  Attributes:
    where: "<file>:<line>" (or "<name>[<i>]" for texts given directly).
    text: its text.
  """

  where: str
  text: str


def _is_data(value: Any) -> bool:
  if isinstance(value, str):
    return len(value) <= _DATA_STRING_CHARS and not any(
      c in value for c in '\n"\\'
    )
  if isinstance(value, dict):
    return all(_is_data(k) and _is_data(v) for k, v in value.items())
  if isinstance(value, list):
    return all(_is_data(v) for v in value)
  return True


def _json_text(value: Any, out: list[str]) -> None:
  """Appends the text of a parsed JSON value (strings; data as JSON)."""
  if isinstance(value, str):
    out.append(value)
  elif _is_data(value):
    out.append(json.dumps(value, ensure_ascii=False))
  else:
    for item in value.values() if isinstance(value, dict) else value:
      _json_text(item, out)


def jsonl_document_text(line: str) -> str:
  """The text of one corpus JSONL line (see the module docstring)."""
  try:
    value = json.loads(line)
  except (ValueError, RecursionError):
    return line
  if isinstance(value, str):
    return value
  if not isinstance(value, dict | list):
    return line
  out = []
  _json_text(value, out)
  return "\n".join(out)


def _jsonl_documents(path: str) -> Iterator[Document]:
  with open(path, encoding="utf-8", errors="replace") as f:
    for number, line in enumerate(f, start=1):
      if line.strip():
        yield Document(f"{path}:{number}", jsonl_document_text(line))


def _text_documents(path: str) -> Iterator[Document]:
  """Chunks of at most ~`MAX_DOC_CHARS` that overlap by `OVERLAP_CHARS`."""
  lines, size, first, fresh = [], 0, 1, False
  with open(path, encoding="utf-8", errors="replace") as f:
    for number, line in enumerate(f, start=1):
      lines.append(line)
      size += len(line)
      fresh = True
      if size >= MAX_DOC_CHARS:
        yield Document(f"{path}:{first}", "".join(lines))
        keep, kept = [], 0
        while lines and kept + len(lines[-1]) <= OVERLAP_CHARS:
          kept += len(lines[-1])
          keep.append(lines.pop())
        lines, size, first = keep[::-1], kept, number + 1 - len(keep)
        fresh = False
  if fresh:
    yield Document(f"{path}:{first}", "".join(lines))


@dataclasses.dataclass(frozen=True)
class Corpus:
  """Where to look: documents given directly or files read when scanned.

  Attributes:
    name: the path or a label (in reports).
    ngram: n-gram length, in tokens.
    files: the files to read (empty for `from_texts`).
    texts: the documents given directly, or None.
    skipped: files under the path that were not read (other extensions).
  """

  name: str
  ngram: int = DEFAULT_NGRAM
  files: tuple[str, ...] = ()
  texts: tuple[str, ...] | None = None
  skipped: int = 0

  def __post_init__(self):
    if type(self.ngram) is not int or self.ngram < 1:
      raise ValueError(f"ngram={self.ngram!r}: must be an integer >= 1.")

  @classmethod
  def from_texts(
    cls, texts: Iterable[str], ngram: int = DEFAULT_NGRAM, name: str = "texts"
  ) -> Corpus:
    """A corpus of the given documents (kept in memory)."""
    texts = tuple(texts)
    for i, text in enumerate(texts):
      if not isinstance(text, str):
        raise CorpusError(f"{name}[{i}]: not a str ({type(text).__name__}).")
    return cls(name=name, ngram=ngram, texts=texts)

  @classmethod
  def from_path(
    cls, path: str | os.PathLike, ngram: int = DEFAULT_NGRAM
  ) -> Corpus:
    """A corpus of a file, or of a directory's `EXTENSIONS` files.

    Raises:
      CorpusError: the path does not exist, cannot be read, or is a
        directory without a readable file of those extensions.
    """
    path = os.fspath(path)
    if os.path.isfile(path):
      if not os.access(path, os.R_OK):
        raise CorpusError(f"{path}: cannot be read.")
      return cls(name=path, ngram=ngram, files=(path,))
    if not os.path.isdir(path):
      raise CorpusError(f"{path}: no such file or directory.")
    files, skipped = [], 0
    for root, dirs, names in os.walk(path):
      dirs.sort()
      for name in sorted(names):
        full = os.path.join(root, name)
        if name.endswith(EXTENSIONS) and os.access(full, os.R_OK):
          files.append(full)
        else:
          skipped += 1
    if not files:
      raise CorpusError(
        f"{path}: no readable file ({', '.join(EXTENSIONS)}) in this"
        " directory or below it."
      )
    return cls(name=path, ngram=ngram, files=tuple(files), skipped=skipped)

  def documents(self) -> Iterator[Document]:
    """Yields the documents, reading files lazily."""
    if self.texts is not None:
      for i, text in enumerate(self.texts):
        yield Document(f"{self.name}[{i}]", text)
      return
    for path in self.files:
      if path.endswith(".jsonl"):
        yield from _jsonl_documents(path)
      else:
        yield from _text_documents(path)


# --- Hashing and scanning -----------------------------------------------------


def _token_hashes(tokens: Sequence[str]) -> np.ndarray:
  return np.fromiter(map(hash, tokens), np.int64, len(tokens)).view(np.uint64)


def _window_hashes(t: np.ndarray, length: int) -> np.ndarray:
  """Polynomial hashes of every `length`-token window of `t`."""
  h = t
  for i in range(1, length):
    h = h[:-1] * _P + t[i:]
  return h


def _int_hash(tokens: Sequence[str]) -> int:
  """`_window_hashes` of the whole of `tokens`, in Python ints."""
  h = 0
  for token in tokens:
    h = (h * _PRIME + (hash(token) & _MASK)) & _MASK
  return h


def _gap_ok(kind: str, gap: list[str]) -> bool:
  if kind in ("data", "keyed"):
    return (
      0 < len(gap) <= DATA_GAP
      and all(g in _DATA_GAP_TOKENS for g in gap)
      and (kind == "data" or any(g in _DATA_KEYS for g in gap))
    )
  i = 0
  while i < min(len(gap), 2) and gap[i] == ")":
    i += 1
  rest = tuple(gap[i:])
  if rest[:1] == ("#",):
    rest = rest[1:]
    if not rest:
      return True
  return rest in _ASSERT_SEPS


def _tail_ok(tokens: list[str], end: int, last: str) -> bool:
  """False where a number goes on (`3` followed by `.5`)."""
  return not (
    last[:1].isdigit()
    and end + 1 < len(tokens)
    and tokens[end] == "."
    and tokens[end + 1][:1].isdigit()
  )


class _Matcher:
  """Compiled needles of the tasks; scans batches of documents."""

  def __init__(self, ngram: int):
    self.ngram = ngram
    self.seqs: list[tuple[str, ...]] = []
    self._seq_ids: dict[tuple[str, ...], int] = {}
    # Each pattern finds one target (a test or a reference).
    self.all_patterns: list[tuple[tuple[int, ...], int]] = []
    self.pair_patterns: list[tuple[int, int, str, int]] = []
    self.groups: list[np.ndarray] = []  # distinct n-gram hashes per group
    self.found: dict[int, str] = {}  # target -> where first found
    self.documents = 0
    self.tokens = 0

  def seq(self, tokens: Sequence[str]) -> int:
    key = tuple(tokens)
    if key not in self._seq_ids:
      self._seq_ids[key] = len(self.seqs)
      self.seqs.append(key)
    return self._seq_ids[key]

  def add_all(self, sequences: list[Sequence[str]], target: int) -> None:
    ids = tuple(self.seq(s) for s in sequences if s)
    self.all_patterns.append((ids, target))

  def add_pair(self, a: Sequence[str], b: Sequence[str], kind: str, target):
    self.pair_patterns.append((self.seq(a), self.seq(b), kind, target))

  def add_group(self, tokens: Sequence[str]) -> int:
    """Registers a text for containment; returns its group id."""
    if len(tokens) < self.ngram:
      hashes = np.zeros(0, np.uint64)
    else:
      hashes = np.unique(_window_hashes(_token_hashes(tokens), self.ngram))
    self.groups.append(hashes)
    return len(self.groups) - 1

  def compile(self) -> None:
    """Builds the lookup tables; call once after adding every needle."""
    self.lens = np.array([len(s) for s in self.seqs], np.int64)
    # Token hashes of the sequences that need confirming past the anchor.
    self.seq_t = {
      sid: _token_hashes(s)
      for sid, s in enumerate(self.seqs)
      if len(s) > _ANCHOR
    }
    anchors: dict[int, dict[int, list[int]]] = {}
    for sid, seq in enumerate(self.seqs):
      length = min(len(seq), _ANCHOR)
      h = _int_hash(seq[:length])
      anchors.setdefault(length, {}).setdefault(h, []).append(sid)
    self.tail_h = np.array(
      [_int_hash(s[-_ANCHOR:]) for s in self.seqs], np.uint64
    )
    # Per length: sorted anchor hashes, the sequence of exactly that length
    # at each (or -1), and (CSR: offsets, ids) the longer sequences that
    # share it, to confirm.
    self.anchors = {}
    for length, table in anchors.items():
      keys = sorted(table)
      exact = [
        next((s for s in table[k] if self.lens[s] == length), -1) for k in keys
      ]
      longer = [[s for s in table[k] if self.lens[s] > length] for k in keys]
      offsets = np.cumsum([0] + [len(x) for x in longer])
      self.anchors[length] = (
        np.array(keys, np.uint64),
        np.array(exact, np.int64),
        offsets,
        np.array([s for x in longer for s in x], np.int64),
      )
    self.ngram_h = (
      np.unique(np.concatenate(self.groups))
      if self.groups
      else np.zeros(0, np.uint64)
    )
    self.ngram_hit = np.zeros(len(self.ngram_h), bool)
    self.bloom = np.zeros(1 << _BLOOM_BITS, bool)
    for keys, *_ in self.anchors.values():
      self.bloom[keys >> _BLOOM_SHIFT] = True
    self.bloom[self.ngram_h >> _BLOOM_SHIFT] = True
    self.max_len = max([*self.anchors, self.ngram if self.ngram_h.size else 0])
    self.all_by_seq: dict[int, list[int]] = {}
    for i, (ids, _) in enumerate(self.all_patterns):
      if ids:
        trigger = max(ids, key=lambda s: self.lens[s])
        self.all_by_seq.setdefault(trigger, []).append(i)
    self.pair_by_seq: dict[int, list[int]] = {}
    for i, (a, _, _, _) in enumerate(self.pair_patterns):
      self.pair_by_seq.setdefault(a, []).append(i)

  def scan(self, documents: Iterable[Document]) -> None:
    tokens, starts, wheres = [], [], []
    for doc in documents:
      self.documents += 1
      for stream in _streams(doc.text):
        starts.append(len(tokens))
        wheres.append(doc.where)
        tokens += stream
        tokens.append(_SEP)
      if len(tokens) >= BATCH_TOKENS:
        self._scan_batch(tokens, starts, wheres)
        tokens, starts, wheres = [], [], []
    if tokens:
      self._scan_batch(tokens, starts, wheres)

  def _scan_batch(self, tokens, starts, wheres) -> None:
    self.tokens += len(tokens) - len(starts)
    t = _token_hashes(tokens)
    occ_seq, occ_pos = [], []
    h = t
    for length in range(1, self.max_len + 1):
      if length > 1:
        h = h[:-1] * _P + t[length - 1 :]
      if not h.size:
        break
      want_ngram = length == self.ngram and self.ngram_h.size
      if not (want_ngram or length in self.anchors):
        continue
      pos = np.flatnonzero(self.bloom[h >> _BLOOM_SHIFT])
      hv = h[pos]
      if want_ngram:
        idx = np.minimum(
          np.searchsorted(self.ngram_h, hv), self.ngram_h.size - 1
        )
        self.ngram_hit[idx[self.ngram_h[idx] == hv]] = True
      if length in self.anchors:
        keys, exact, offsets, longer = self.anchors[length]
        idx = np.minimum(np.searchsorted(keys, hv), keys.size - 1)
        hit = keys[idx] == hv
        pos, idx = pos[hit], idx[hit]
        sid = exact[idx]
        occ_seq.append(sid[sid >= 0])
        occ_pos.append(pos[sid >= 0])
        if longer.size:
          sid, pos = self._confirm(t, h, pos, offsets, longer, idx)
          occ_seq.append(sid)
          occ_pos.append(pos)
    if occ_seq:
      self._match(
        tokens,
        np.concatenate(occ_seq),
        np.concatenate(occ_pos),
        np.array(starts, np.int64),
        wheres,
      )

  def _confirm(self, t, h, pos, offsets, longer, idx):
    """The (sequence, position) pairs of longer sequences at anchor hits.

    `h` holds the `_ANCHOR`-token window hashes, so a candidate's last
    window is checked first; the few that pass are compared in full.
    """
    counts = offsets[idx + 1] - offsets[idx]
    pos = np.repeat(pos, counts)
    first = np.repeat(offsets[idx] - np.cumsum(counts) + counts, counts)
    sid = longer[first + np.arange(pos.size)]
    tail = pos + self.lens[sid] - _ANCHOR
    ok = tail < h.size
    ok[ok] = h[tail[ok]] == self.tail_h[sid[ok]]
    keep = [
      i
      for i in np.flatnonzero(ok).tolist()
      if np.array_equal(
        t[pos[i] : pos[i] + self.lens[sid[i]]], self.seq_t[int(sid[i])]
      )
    ]
    return sid[keep], pos[keep]

  def _match(self, tokens, occ_seq, occ_pos, starts, wheres) -> None:
    """Evaluates the patterns on one batch's sequence occurrences."""
    if not occ_seq.size:
      return
    order = np.lexsort((occ_pos, occ_seq))
    occ_seq, occ_pos = occ_seq[order], occ_pos[order]
    occ_doc = np.searchsorted(starts, occ_pos, side="right") - 1
    cuts = np.flatnonzero(np.diff(occ_seq)) + 1
    bounds = zip(
      [0, *cuts.tolist()], [*cuts.tolist(), len(occ_seq)], strict=True
    )
    where = {int(occ_seq[i]): (i, j) for i, j in bounds}
    docs_cache: dict[int, set[int]] = {}

    def docs(sid: int) -> set[int]:
      if sid not in docs_cache:
        i, j = where[sid]
        docs_cache[sid] = set(occ_doc[i:j].tolist())
      return docs_cache[sid]

    for sid in where:
      for p in self.all_by_seq.get(sid, ()):
        ids, target = self.all_patterns[p]
        if target in self.found or not all(s in where for s in ids):
          continue
        common = set.intersection(*(docs(s) for s in ids))
        if common:
          self.found[target] = wheres[min(common)]
      for p in self.pair_by_seq.get(sid, ()):
        a, b, kind, target = self.pair_patterns[p]
        if target in self.found or b not in where:
          continue
        doc = self._find_pair(tokens, occ_pos, where[a], where[b], a, b, kind)
        if doc is not None:
          self.found[target] = wheres[
            int(np.searchsorted(starts, doc, side="right") - 1)
          ]

  def _find_pair(self, tokens, occ_pos, span_a, span_b, a, b, kind):
    """A position where `a`, an allowed gap, then `b` occur, or None."""
    max_gap = 5 if kind == "assert" else DATA_GAP
    pos_b = occ_pos[span_b[0] : span_b[1]]
    ends = occ_pos[span_a[0] : span_a[1]] + self.lens[a]
    first = np.searchsorted(pos_b, ends)
    near = first < pos_b.size
    close = np.zeros_like(near)
    close[near] = pos_b[first[near]] - ends[near] <= max_gap
    len_b, last = int(self.lens[b]), self.seqs[b][-1]
    for end, j in zip(ends[close].tolist(), first[close].tolist(), strict=True):
      while j < pos_b.size and pos_b[j] - end <= max_gap:
        start = int(pos_b[j])
        if _gap_ok(kind, tokens[end:start]) and _tail_ok(
          tokens, start + len_b, last
        ):
          return start
        j += 1
    return None

  def containment(self, group: int) -> float | None:
    hashes = self.groups[group]
    if not hashes.size:
      return None
    idx = np.searchsorted(self.ngram_h, hashes)
    return float(self.ngram_hit[idx].mean())


# --- Needles of the tasks -----------------------------------------------------


def _test_needles(matcher: _Matcher, task: schema.Task, test: dict, target):
  """Adds a test's patterns; returns (its assertion-form tokens, checked)."""
  if "stdin" in test:  # a stdio task's, or a run of a repo's program
    stdin, stdout = tokenize(test["stdin"]), tokenize(test["expected_stdout"])
    if len(stdin) + len(stdout) < MIN_TOKENS:
      return stdin + stdout, False
    matcher.add_all([stdin, stdout], target)
    return stdin + stdout, True
  call = tokenize(call_text(test.get("call", task.entry_point), test))
  if "expected" not in test:
    if len(call) < MIN_CALL_TOKENS:
      return call, False
    matcher.add_all([call], target)
    return call, True
  expected = tokenize(_py_repr(test["expected"]))
  if len(call) + 2 + len(expected) < MIN_TOKENS:
    return call + ["=", "="] + expected, False
  matcher.add_pair(call, expected, "assert", target)
  if test["args"] and not test.get("kwargs"):
    expected_forms = _data_forms(test["expected"])
    for args in _data_forms(test["args"]):
      for exp in expected_forms:
        size = len(args) + len(exp)
        if size >= MIN_TOKENS:
          kind = "data" if size >= MIN_DATA_TOKENS else "keyed"
          matcher.add_pair(args, exp, kind, target)
  return call + ["=", "="] + expected, True


# --- Results ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SuiteResult:
  """One suite of one task against the corpus.

  Attributes:
    tests: number of tests.
    skipped: tests too short to be checked exactly (never found).
    found: indices of the tests found exactly.
    found_in: where each of `found` was first seen (same order).
    containment: share of the suite's n-grams in the corpus; None when the
      suite is shorter than n (exact check only).
    ngrams: distinct n-grams of the suite.
  """

  tests: int
  skipped: int
  found: tuple[int, ...]
  found_in: tuple[str, ...]
  containment: float | None
  ngrams: int

  def to_json(self) -> dict:
    """The result as plain JSON."""
    return dataclasses.asdict(self) | {
      "found": list(self.found),
      "found_in": list(self.found_in),
    }


@dataclasses.dataclass(frozen=True)
class ReferenceResult:
  """The reference solution of one task against the corpus.

  Attributes:
    tokens: its tokens (comments dropped).
    checked: whether it is long enough (`MIN_TOKENS`) to check exactly.
    exact: whether its whole token sequence is in one document.
    found_in: where, if exact.
    containment: share of its n-grams in the corpus (None: shorter than n).
    ngrams: its distinct n-grams.
  """

  tokens: int
  checked: bool
  exact: bool
  found_in: str | None
  containment: float | None
  ngrams: int

  def to_json(self) -> dict:
    """The result as plain JSON."""
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class TaskResult:
  """One task: its suites (when tests are checked), reference, and verdict.

  Attributes:
    task_id: the task.
    suites: `CHECKED_SUITES` name -> result (empty if tests are unchecked).
    reference: the reference's result, or None if unchecked.
    reasons: why it leaks (empty: clean).
  """

  task_id: str
  suites: dict[str, SuiteResult]
  reference: ReferenceResult | None
  reasons: tuple[str, ...]

  @property
  def leak(self) -> bool:
    """Whether the task leaks."""
    return bool(self.reasons)

  def to_json(self) -> dict:
    """The result as plain JSON."""
    out = {"task_id": self.task_id, "leak": self.leak}
    out["reasons"] = list(self.reasons)
    out |= {name: r.to_json() for name, r in self.suites.items()}
    out["reference_solution"] = self.reference and self.reference.to_json()
    return out


def _fmt(value: float | None) -> str:
  return "-" if value is None else f"{value:.2f}"


@dataclasses.dataclass(frozen=True)
class Report:
  """The check of a task set against a corpus.

  Attributes:
    results: one per task, in task order.
    corpus: the corpus's name.
    ngram: n-gram length.
    threshold: containment at or above which a task leaks.
    checks: what was checked (`CHECKS`).
    documents: documents scanned.
    tokens: tokens scanned (comment-free rescans included).
  """

  results: tuple[TaskResult, ...]
  corpus: str
  ngram: int
  threshold: float
  checks: tuple[str, ...]
  documents: int
  tokens: int

  @property
  def leaks(self) -> list[TaskResult]:
    """The results of the tasks that leak."""
    return [r for r in self.results if r.leak]

  def summary(self) -> str:
    """One line: how many tasks leak, and of what."""
    count = {
      name: sum(
        bool(r.suites.get(name) and r.suites[name].found) for r in self.results
      )
      for name in CHECKED_SUITES
    }
    ref = sum(
      any(x.startswith("reference") for x in r.reasons) for r in self.results
    )
    return (
      f"isolation: {len(self.leaks)}/{len(self.results)} tasks leak"
      f" (tests found exactly: hidden {count['hidden_tests']}, heldout"
      f" {count['heldout_tests']}; reference: {ref}) against {self.corpus}"
      f" ({self.documents} documents, {self.tokens} tokens; n={self.ngram},"
      f" threshold={self.threshold:g}, checked {','.join(self.checks)})"
    )

  def table(self) -> list[str]:
    """Lines of a table of the leaking tasks (a header first)."""
    rows = [
      ("task_id", "A found", "A cont", "B found", "B cont", "ref", "ref cont")
    ]
    for r in self.leaks:
      row = [r.task_id]
      for name in CHECKED_SUITES:
        s = r.suites.get(name)
        row += (
          [f"{len(s.found)}/{s.tests}", _fmt(s.containment)]
          if s
          else ["-", "-"]
        )
      ref = r.reference
      row += (
        ["exact" if ref.exact else "no", _fmt(ref.containment)]
        if ref
        else ["-", "-"]
      )
      rows.append(tuple(row))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
      "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
      for row in rows
    ]

  def to_json(self) -> dict:
    """The report as plain JSON."""
    return {
      "corpus": self.corpus,
      "ngram": self.ngram,
      "threshold": self.threshold,
      "checks": list(self.checks),
      "documents": self.documents,
      "tokens": self.tokens,
      "tasks": len(self.results),
      "leaks": [r.task_id for r in self.leaks],
      "results": [r.to_json() for r in self.results],
    }


def check(
  tasks: Sequence[schema.Task],
  corpus: Corpus,
  *,
  threshold: float = DEFAULT_THRESHOLD,
  check_tests: bool = True,
  check_reference: bool = True,
  public: frozenset[str] | set[str] = frozenset(),
) -> Report:
  """Checks each task's suites A and B and reference against `corpus`.

  Args:
    tasks: the tasks.
    corpus: where to look; scanned once.
    threshold: containment in (0, 1] at or above which a task leaks.
    check_tests: check `hidden_tests` and `heldout_tests`.
    check_reference: check `reference_solution`.
    public: assertion texts (`assertion_text`) of function tests that are
      public (e.g. another task's visible test): such a test is counted
      as skipped, neither searched nor part of its suite's containment.

  Returns:
    The report, one result per task in order.

  Raises:
    ValueError: a bad threshold, or nothing to check.
  """
  if not (
    isinstance(threshold, int | float)
    and not math.isnan(threshold)
    and 0 < threshold <= 1
  ):
    raise ValueError(f"threshold={threshold!r}: must be in (0, 1].")
  if not (check_tests or check_reference):
    raise ValueError("check_tests and check_reference are both False.")
  matcher = _Matcher(corpus.ngram)
  targets: list[tuple[int, str, int]] = []  # (task, suite, test index)
  plans = []
  for ti, task in enumerate(tasks):
    plan = {}
    for name in CHECKED_SUITES if check_tests else ():
      stream, skipped = [], 0
      for j, test in enumerate(getattr(task, name)):
        if (
          task.kind == "function"
          and public
          and assertion_text(task.entry_point, test) in public
        ):
          skipped += 1
          continue
        tokens, checked = _test_needles(matcher, task, test, len(targets))
        targets.append((ti, name, j))
        stream += tokens
        skipped += not checked
      plan[name] = (skipped, matcher.add_group(stream))
    if check_reference:
      tokens = code_tokens(task.reference_solution)
      checked = len(tokens) >= MIN_TOKENS
      if checked:
        matcher.add_all([tokens], len(targets))
      plan["reference"] = (
        len(targets),
        tokens,
        checked,
        matcher.add_group(tokens),
      )
      targets.append((ti, "reference", 0))
    plans.append(plan)
  matcher.compile()
  if matcher.seqs or matcher.ngram_h.size:
    matcher.scan(corpus.documents())
  found_by: dict[tuple[int, str], list[tuple[int, str]]] = {}
  for target, where in sorted(matcher.found.items()):
    ti, name, j = targets[target]
    found_by.setdefault((ti, name), []).append((j, where))
  results = []
  for ti, (task, plan) in enumerate(zip(tasks, plans, strict=True)):
    suites, reasons, reference = {}, [], None
    for name in CHECKED_SUITES if check_tests else ():
      skipped, group = plan[name]
      found = found_by.get((ti, name), [])
      suites[name] = SuiteResult(
        tests=len(getattr(task, name)),
        skipped=skipped,
        found=tuple(j for j, _ in found),
        found_in=tuple(w for _, w in found),
        containment=matcher.containment(group),
        ngrams=int(matcher.groups[group].size),
      )
      if found:
        reasons.append(f"{name}: {len(found)} test(s) found exactly")
      if (suites[name].containment or 0) >= threshold:
        reasons.append(
          f"{name}: containment {suites[name].containment:.2f} >= {threshold:g}"
        )
    if check_reference:
      target, tokens, checked, group = plan["reference"]
      reference = ReferenceResult(
        tokens=len(tokens),
        checked=checked,
        exact=target in matcher.found,
        found_in=matcher.found.get(target),
        containment=matcher.containment(group),
        ngrams=int(matcher.groups[group].size),
      )
      if reference.exact:
        reasons.append("reference: found exactly")
      if (reference.containment or 0) >= threshold:
        reasons.append(
          f"reference: containment {reference.containment:.2f} >= {threshold:g}"
        )
    results.append(TaskResult(task.task_id, suites, reference, tuple(reasons)))
  return Report(
    results=tuple(results),
    corpus=corpus.name,
    ngram=corpus.ngram,
    threshold=threshold,
    checks=tuple(
      c
      for c, on in zip(CHECKS, (check_tests, check_reference), strict=True)
      if on
    ),
    documents=matcher.documents,
    tokens=matcher.tokens,
  )


# --- Command line -------------------------------------------------------------


def define_flags() -> None:
  """Registers the program's flags."""
  flags.DEFINE_string("tasks", None, "Task JSONL (`schema.read_tasks`).")
  flags.DEFINE_string(
    "against", None, f"Corpus: a file or a directory ({', '.join(EXTENSIONS)})."
  )
  flags.DEFINE_integer("ngram", DEFAULT_NGRAM, "N-gram length, in tokens.")
  flags.DEFINE_float(
    "threshold",
    DEFAULT_THRESHOLD,
    "Containment in (0, 1] at or above which a task leaks.",
  )
  flags.DEFINE_string("report", None, "Where to write the JSON report.")
  flags.DEFINE_list(
    "check", list(CHECKS), f"What to check: a subset of {','.join(CHECKS)}."
  )


def _usage_error(message: str):
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def _parse_flags(argv: list[str]) -> list[str]:
  """Parses flags as absl does, with one `error:` line for a bad flag."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    _usage_error(str(e))


def main(argv: list[str]) -> None:
  """Checks `--tasks` against `--against`; exits 1 if a task leaks."""
  if len(argv) > 1:
    _usage_error(f"unexpected arguments: {argv[1:]}")
  values = flags.FLAGS
  for name in ("tasks", "against"):
    if not getattr(values, name):
      _usage_error(f"--{name} is required.")
  if values.ngram < 1:
    _usage_error(f"--ngram={values.ngram}: must be >= 1.")
  if not (0 < values.threshold <= 1):
    _usage_error(f"--threshold={values.threshold:g}: must be in (0, 1].")
  unknown = sorted(set(values.check) - set(CHECKS))
  if unknown or not values.check:
    _usage_error(
      f"--check={','.join(values.check)}: must be a non-empty subset of"
      f" {','.join(CHECKS)}."
    )
  try:
    tasks = schema.read_tasks(values.tasks, schema.PROGRAM_KINDS)
  except schema.TaskFormatError as e:
    _usage_error(f"--tasks: {e}")
  except OSError as e:
    _usage_error(f"--tasks: {values.tasks}: {e.strerror or e}.")
  try:
    corpus = Corpus.from_path(values.against, values.ngram)
  except CorpusError as e:
    _usage_error(f"--against: {e}")
  try:
    report = check(
      tasks,
      corpus,
      threshold=values.threshold,
      check_tests="tests" in values.check,
      check_reference="reference" in values.check,
    )
  except OSError as e:
    _usage_error(f"--against: {e}")
  if report.leaks:
    print("\n".join(report.table()))
  print(report.summary(), flush=True)
  if values.report:
    try:
      with open(values.report, "w", encoding="utf-8") as f:
        json.dump(report.to_json(), f, indent=1)
        f.write("\n")
    except OSError as e:
      _usage_error(f"--report: {values.report}: {e.strerror or e}.")
  if report.leaks:
    print(
      f"error: {len(report.leaks)} of {len(report.results)} tasks leak"
      f" (hidden tests, held-out tests or reference found in {corpus.name}).",
      file=sys.stderr,
    )
    sys.exit(1)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=_parse_flags)
