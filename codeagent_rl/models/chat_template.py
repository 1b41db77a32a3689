"""A Hugging Face checkpoint's chat template: its files, and rendering it.

`load_checkpoint(dir)` reads what a chat model ships for tokenisation:
`tokenizer.json`, `tokenizer_config.json` (special tokens, `chat_template`),
`chat_template.jinja` (newer transformers save the template there; it wins
over the config's), and `generation_config.json` (`eos_token_id`).
`Template.render` renders the Jinja template text the way
`transformers.apply_chat_template` does (sandboxed, `trim_blocks`,
`lstrip_blocks`, the `raise_exception` / `tojson` / `strftime_now` helpers,
the special tokens as variables); it returns text, never ids.
`PartsTokenizer` tokenises rendered text whose parts are trusted (the
template's own text) or not (message contents).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import datetime
import json
import operator
import os
import re
from typing import Any

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
TEMPLATE_FILE = "chat_template.jinja"
GENERATION_CONFIG_FILE = "generation_config.json"
# Special tokens a template may refer to by name (`{{ bos_token }}`).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "pad_token", "unk_token")


def _import(name: str) -> Any:
  """Imports an optional dependency, saying how to install it if missing."""
  try:
    return __import__(name)
  except ImportError as e:
    raise ImportError(
      f"Chat templates need the `{name}` package; install the extra:"
      " pip install -e '.[hf]'."
    ) from e


def _read_json(path: str) -> Any:
  with open(path, encoding="utf-8") as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path} is not valid JSON: {e}.") from e


def _token_text(value: Any, key: str, path: str) -> str | None:
  """A special token as text: a str, a dict with "content", or None."""
  if isinstance(value, dict):
    value = value.get("content")
  if value is not None and not isinstance(value, str):
    raise ValueError(
      f"{path}: {key} must be a string or a dict with 'content', got"
      f" {value!r:.80}."
    )
  return value


def _pick_template(value: Any, path: str) -> str:
  """The config's `chat_template`: a str, or the "default" of a named list."""
  if isinstance(value, str):
    return value
  if isinstance(value, list):
    named = {t.get("name"): t.get("template") for t in value}
    if isinstance(named.get("default"), str):
      return named["default"]
    raise ValueError(
      f"{path}: chat_template is a list of named templates {sorted(named)}"
      " without a 'default' one; write the one to use to"
      f" {TEMPLATE_FILE} next to it."
    )
  raise ValueError(
    f"{path}: chat_template must be a string or a list of {{name, template}},"
    f" got {type(value).__name__}."
  )


@dataclasses.dataclass(frozen=True)
class Checkpoint:
  """What `load_checkpoint` read.

  Attributes:
    tokenizer: the `tokenizers.Tokenizer` of tokenizer.json (truncation and
      padding off).
    template: the chat template's Jinja text.
    special_tokens: `SPECIAL_TOKEN_NAMES` entries that are set -> text.
    eos_ids: generation_config's `eos_token_id` as a tuple (may be empty).
  """

  tokenizer: Any
  template: str
  special_tokens: dict[str, str]
  eos_ids: tuple[int, ...]


def vocabulary(path: str | os.PathLike) -> dict[str, int]:
  """Token text -> id of a checkpoint's tokenizer.json, added tokens included.

  Two checkpoints share a tokenizer for the trainer when these are equal
  (a critic from another checkpoint reads the actor's token ids).

  Raises:
    FileNotFoundError: the directory has no tokenizer.json.
    ValueError: tokenizer.json cannot be read.
  """
  tokenizers = _import("tokenizers")
  tok_path = os.path.join(os.fspath(path), TOKENIZER_FILE)
  if not os.path.isfile(tok_path):
    raise FileNotFoundError(
      f"{tok_path} does not exist: the checkpoint's tokenizer is needed to"
      " check that it reads the same token ids."
    )
  try:
    tok = tokenizers.Tokenizer.from_file(tok_path)
  except Exception as e:  # tokenizers raises its own Exception subclass
    raise ValueError(f"{tok_path}: not a tokenizers file ({e}).") from None
  return tok.get_vocab(with_added_tokens=True)


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
  """Reads the tokenizer files of a Hugging Face checkpoint directory.

  Args:
    path: the directory (as `save_pretrained` writes it).

  Returns:
    The `Checkpoint`.

  Raises:
    FileNotFoundError: naming a missing directory or required file.
    ValueError: naming a file without a chat template, or a malformed one.
  """
  tokenizers = _import("tokenizers")
  path = os.fspath(path)
  if not os.path.isdir(path):
    raise FileNotFoundError(f"Checkpoint directory {path!r} does not exist.")
  tok_path = os.path.join(path, TOKENIZER_FILE)
  if not os.path.isfile(tok_path):
    raise FileNotFoundError(
      f"{tok_path} does not exist: the chat format needs a fast tokenizer's"
      " tokenizer.json (download it with the checkpoint, or save one with"
      " transformers' tokenizer.save_pretrained)."
    )
  cfg_path = os.path.join(path, TOKENIZER_CONFIG_FILE)
  if not os.path.isfile(cfg_path):
    raise FileNotFoundError(
      f"{cfg_path} does not exist: it holds the special tokens (and usually"
      " the chat template); download it with the checkpoint."
    )
  config = _read_json(cfg_path)
  specials = {}
  map_path = os.path.join(path, SPECIAL_TOKENS_MAP_FILE)
  token_map = _read_json(map_path) if os.path.isfile(map_path) else {}
  for key in SPECIAL_TOKEN_NAMES:
    source, value = cfg_path, config.get(key)
    if value is None:
      source, value = map_path, token_map.get(key)
    text = _token_text(value, key, source)
    if text is not None:
      specials[key] = text

  jinja_path = os.path.join(path, TEMPLATE_FILE)
  if os.path.isfile(jinja_path):
    with open(jinja_path, encoding="utf-8") as f:
      template = f.read()
  elif config.get("chat_template") is not None:
    template = _pick_template(config["chat_template"], cfg_path)
  else:
    raise ValueError(
      f"No chat template: {cfg_path} has no 'chat_template' and there is no"
      f" {jinja_path}. Use a chat (instruct) checkpoint, or write the"
      f" template to {TEMPLATE_FILE}."
    )

  eos_ids = ()
  gen_path = os.path.join(path, GENERATION_CONFIG_FILE)
  if os.path.isfile(gen_path):
    eos = _read_json(gen_path).get("eos_token_id")
    eos = [] if eos is None else eos if isinstance(eos, list) else [eos]
    if not all(type(i) is int for i in eos):
      raise ValueError(
        f"{gen_path}: eos_token_id must be an int or a list of ints, got"
        f" {eos!r:.80}."
      )
    eos_ids = tuple(eos)
  if not eos_ids and "eos_token" not in specials:
    raise ValueError(
      f"No end-of-sequence token: neither {gen_path} (eos_token_id) nor"
      f" {cfg_path} (eos_token) names one; add generation_config.json."
    )

  tokenizer = tokenizers.Tokenizer.from_file(tok_path)
  tokenizer.no_truncation()
  tokenizer.no_padding()
  return Checkpoint(tokenizer, template, specials, eos_ids)


def _tojson(
  value: Any,
  ensure_ascii: bool = False,
  indent: int | None = None,
  separators: tuple[str, str] | None = None,
  sort_keys: bool = False,
) -> str:
  # Jinja's own tojson escapes HTML characters; chat templates expect JSON.
  return json.dumps(
    value,
    ensure_ascii=ensure_ascii,
    indent=indent,
    separators=separators,
    sort_keys=sort_keys,
  )


def _strftime_now(fmt: str) -> str:
  return datetime.datetime.now().strftime(fmt)


class Template:
  """A compiled chat template; `render` is thread-safe."""

  def __init__(self, source: str, special_tokens: Mapping[str, str]):
    """Compiles `source`.

    Args:
      source: the Jinja text.
      special_tokens: name -> text, visible to the template as variables.

    Raises:
      ValueError: if the template does not compile.
    """
    _import("jinja2")
    import jinja2.ext
    import jinja2.sandbox

    def raise_exception(message):
      raise jinja2.TemplateError(message)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
      trim_blocks=True,
      lstrip_blocks=True,
      extensions=[jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
      self._template = env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
      raise ValueError(
        f"The chat template does not compile (line {e.lineno}): {e.message}."
      ) from e
    self._error = jinja2.TemplateError
    self._special_tokens = dict(special_tokens)

  def render(
    self,
    messages: Sequence[Mapping[str, str]],
    *,
    add_generation_prompt: bool,
    tools: Sequence[Mapping[str, Any]] | None = None,
  ) -> str:
    """Renders a conversation to text.

    Args:
      messages: {"role", "content"} dicts.
      add_generation_prompt: append the opening of an assistant turn.
      tools: JSON-schema function descriptions, as `apply_chat_template`'s
        `tools=` takes them (e.g. `envs/repo_tools.TOOLS`); None for none.

    Returns:
      The text, special tokens written as their text.

    Raises:
      ValueError: if the template raised (e.g. a role it does not allow).
    """
    try:
      return self._template.render(
        messages=[dict(m) for m in messages],
        add_generation_prompt=add_generation_prompt,
        tools=[dict(t) for t in tools] if tools else None,
        documents=None,
        **self._special_tokens,
      )
    except self._error as e:
      roles = [m["role"] for m in messages]
      raise ValueError(
        f"The chat template refused a conversation with roles {roles}: {e}"
      ) from e


def _valid_unicode(text: str) -> str:
  """`text` with lone surrogates (e.g. from JSON) replaced by U+FFFD."""
  try:
    text.encode("utf-8")
  except UnicodeEncodeError:
    text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
  return text


class PartsTokenizer:
  """A `tokenizers.Tokenizer` that reads added tokens in trusted text only.

  Attributes:
    added: each added token's text -> id (special or not).
    num_ids: ids run from 0 to num_ids - 1.
  """

  def __init__(self, tokenizer: Any):
    """Wraps copies of `tokenizer` (the caller's object is not changed)."""
    tokenizers = _import("tokenizers")
    tok = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    tok.no_truncation()
    tok.no_padding()
    self.added = {
      t.content: i for i, t in tok.get_added_tokens_decoder().items()
    }
    # A copy that reads every added token's text as plain text. The flag is
    # state of the object: flipping it per call would race between threads.
    plain = tokenizers.Tokenizer.from_str(tok.to_str())
    plain.add_special_tokens(
      [
        tokenizers.AddedToken(t, special=True, normalized=False)
        for t in self.added
      ]
    )
    plain.encode_special_tokens = True
    self._tok, self._plain = tok, plain
    self._added_ids = frozenset(self.added.values())
    # Longest first, so no added token shadows a longer one.
    alternation = (
      "|".join(re.escape(t) for t in sorted(self.added, key=len, reverse=True))
      or "(?!)"
    )
    self._added_re = re.compile(alternation)
    # Zero-width at every occurrence's start, overlapping ones included.
    self._starts_re = re.compile(f"(?=(?:{alternation}))")
    self.num_ids = max(tok.get_vocab(with_added_tokens=True).values()) + 1

  def token_id(self, text: str) -> int | None:
    """The id of a token's text, or None."""
    return self._tok.token_to_id(text)

  def match_added(self, text: str, pos: int) -> re.Match | None:
    """The added token that starts at `text[pos]`, if one does."""
    return self._added_re.match(text, pos)

  def encode(self, text: str) -> list[int]:
    """The tokenizer's own ids of `text` (added tokens read everywhere)."""
    return self._tok.encode(_valid_unicode(text), add_special_tokens=False).ids

  def encode_plain(self, text: str) -> list[int]:
    """Ids of `text` with added tokens' text read as plain text.

    Raises:
      ValueError: if the vocabulary still forms an added token from it.
    """
    if not text:
      return []
    text = _valid_unicode(text)
    ids = self._plain.encode(text, add_special_tokens=False).ids
    if self._added_ids.isdisjoint(ids):
      return ids
    # The vocabulary formed an added token anyway: cut inside each of them.
    cuts = [m.start() + 1 for m in self._starts_re.finditer(text)]
    bounds = sorted({0, *cuts, len(text)})
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    encodings = self._plain.encode_batch(pieces, add_special_tokens=False)
    ids = [i for e in encodings for i in e.ids]
    if not self._added_ids.isdisjoint(ids):
      raise ValueError(
        "This tokenizer turns plain text into added tokens; it cannot"
        " encode untrusted text safely."
      )
    return ids

  def encode_parts(self, parts: Sequence[tuple[str, bool]]) -> list[int]:
    """Ids of the concatenated `(text, trusted)` parts.

    Added tokens are read in trusted parts only. The text between two of
    them is tokenised as one run, as the tokenizer itself splits text at
    added tokens: with trusted parts only, this is `encode` of the whole.
    """
    ids, run = [], []
    for text, trusted in parts:
      if not trusted:
        run.append(text)
        continue
      pos = 0
      for m in self._added_re.finditer(text):
        run.append(text[pos : m.start()])
        ids += self.encode_plain("".join(run))
        ids.append(self.added[m.group()])
        run, pos = [], m.end()
      run.append(text[pos:])
    return ids + self.encode_plain("".join(run))

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids`, special tokens included.

    Raises:
      ValueError: for an id outside [0, num_ids).
    """
    if hasattr(ids, "tolist"):  # NumPy arrays
      ids = ids.tolist()
    ids = [operator.index(i) for i in ids]
    bad = [i for i in ids if not 0 <= i < self.num_ids]
    if bad:
      raise ValueError(f"Token ids {bad[:5]} are outside [0, {self.num_ids}).")
    return self._tok.decode(ids, skip_special_tokens=False)
