r"""Conversation formats: a multi-turn episode as one flat list of token ids.

An episode is prompt | action 1 | observation 1 | action 2 | ... . The policy
samples the actions' ids (kept exactly as sampled); the environment appends
the other chunks. A `ConversationFormat` makes those chunks:

  fmt = chat.ChatTemplateFormat.from_checkpoint("/ckpt/qwen2.5-coder")
  ids = fmt.prompt_ids(system, task_text)       # ... <|im_start|>assistant\n
  # sample until an id in fmt.stop_ids or the per-turn budget
  text = fmt.action_text(action_ids)            # what parse_action reads
  ids += action_ids
  ended = fmt.action_ended(action_ids)       # False: cut by the budget
  ids += fmt.observation_ids(obs_body, action_ended=ended)
  chat.check_episode(fmt, messages, ids, "strict")   # == a full render?

`ChatTemplateFormat` renders a Hugging Face chat template (Qwen2.5's ChatML,
Llama 3's headers, ...) and adds no token to the vocabulary: `<run>...</run>`
is plain text inside an assistant message, and a turn ends at the model's
end-of-turn / EOS ids. An observation chunk is found by difference: a fixed
conversation is rendered with and without one more message, and the chunk
is what follows the assistant message's end-of-turn token (for Qwen2.5 the
"\n" after `<|im_end|>`, then the message, then the next generation prompt).
`ByteProtocolFormat` gives today's byte-level protocol ids (`<obs>` tags,
stops at `</run>`, `</submit>`, `<eos>`) through the same interface.

Untrusted text (the task statement, observations) never becomes a special or
added token id: a program that prints "<|im_end|>" stays plain text.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
import os
import re
from typing import Any
import uuid

from codeagent_rl.models import chat_template
from codeagent_rl.models import tokenizer as tokenizer_lib

SYSTEM = "system"
USER = "user"
ASSISTANT = "assistant"
# Messages written by us or by the policy; every other role holds untrusted
# text (the task statement, observations).
TRUSTED_ROLES = (SYSTEM, ASSISTANT)

Message = Mapping[str, str]


class ConversationFormat(abc.ABC):
  """How an episode's messages become token ids (see the module docstring).

  Attributes:
    vocab_size: number of token ids of the tokenizer.
    pad_id: id that pads rows (the pad token, else the EOS).
    stop_ids: ids that end an action; the action keeps the one sampled.
    end_of_turn_id: the id the template ends an assistant message with
      (None: the format has none).
    observation_role: the role of observation messages.
  """

  vocab_size: int
  pad_id: int
  stop_ids: tuple[int, ...]
  end_of_turn_id: int | None
  observation_role: str

  @abc.abstractmethod
  def prompt_ids(self, system: str, user: str) -> list[int]:
    """The prompt: system (trusted; "" for none) and user (untrusted) text.

    Ends where the first action starts (after the generation prompt).
    """

  @abc.abstractmethod
  def observation_ids(self, text: str, *, action_ended: bool) -> list[int]:
    """The chunk after an action, up to where the next action starts.

    It holds the observation `text` (untrusted) and all the template writes
    around it.

    Args:
      text: the observation's body.
      action_ended: `action_ended(action_ids)`; when False (cut by the
        budget) the chunk first closes the assistant turn.
    """

  @abc.abstractmethod
  def render_ids(self, messages: Sequence[Message]) -> list[int]:
    """A whole conversation's ids, as a stitched episode holds them.

    After a final assistant message the ids end at its end-of-turn id;
    after a final observation they end with the generation prompt.
    """

  @abc.abstractmethod
  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids`, special tokens written as their text."""

  @abc.abstractmethod
  def action_text(self, action_ids: Sequence[int]) -> str:
    """The text of an action for `protocol.parse_action`."""

  @abc.abstractmethod
  def encode_action(self, text: str) -> list[int]:
    """Ids of an assistant message's content (what `render_ids` uses)."""

  @abc.abstractmethod
  def encode_plain(self, text: str) -> list[int]:
    """Ids of untrusted text; never a special or added token id."""

  def action_ended(self, action_ids: Sequence[int]) -> bool:
    """True if the action's last id ends the turn as the template does."""
    return bool(action_ids) and int(action_ids[-1]) == self.end_of_turn_id


def episode_messages(
  fmt: ConversationFormat,
  system: str,
  user: str,
  actions: Sequence[str],
  observations: Sequence[str],
) -> list[dict[str, str]]:
  """The messages of an episode (action texts as `action_text` gives them).

  Args:
    fmt: gives the observations' role.
    system: the system text ("" for no system message).
    user: the task text.
    actions: each action's text.
    observations: the observation after each action (the last may lack one).

  Returns:
    {"role", "content"} dicts for `check_episode` / `render_ids`.
  """
  if len(observations) not in (len(actions), len(actions) - 1):
    raise ValueError(
      f"{len(actions)} actions need as many observations or one fewer,"
      f" got {len(observations)}."
    )
  messages = [{"role": SYSTEM, "content": system}] if system else []
  messages.append({"role": USER, "content": user})
  for k, action in enumerate(actions):
    messages.append({"role": ASSISTANT, "content": action})
    if k < len(observations):
      messages.append(
        {"role": fmt.observation_role, "content": observations[k]}
      )
  return messages


def _same_ids(
  fmt: ConversationFormat, rendered: list[int], stitched: list[int]
) -> bool:
  del fmt
  return rendered == stitched


def _same_text_but_whitespace(
  fmt: ConversationFormat, rendered: list[int], stitched: list[int]
) -> bool:
  squeeze = re.compile(r"\s+")
  return squeeze.sub("", fmt.decode(rendered)) == squeeze.sub(
    "", fmt.decode(stitched)
  )


# How `check_episode` compares an episode with its full render, by mode.
CHECK_MODES: dict[
  str, Callable[[ConversationFormat, list[int], list[int]], bool]
] = {
  "strict": _same_ids,
  "ignore_whitespace": _same_text_but_whitespace,
}


def check_episode(
  fmt: ConversationFormat,
  messages: Sequence[Message],
  stitched_ids: Sequence[int],
  mode: str = "strict",
) -> bool:
  """Whether a stitched episode matches the full render of its messages.

  Args:
    fmt: the format that built the episode.
    messages: its messages (`episode_messages`).
    stitched_ids: prompt, actions and observation chunks, concatenated.
    mode: a key of `CHECK_MODES`: "strict" (equal ids) or
      "ignore_whitespace" (equal decoded texts once whitespace is removed).

  Returns:
    True if they match. A final action cut by the budget counts as closed.
  """
  if mode not in CHECK_MODES:
    raise ValueError(f"Unknown check mode {mode!r}; use one of {CHECK_MODES}.")
  stitched = [int(i) for i in stitched_ids]
  eot = fmt.end_of_turn_id
  if messages and messages[-1]["role"] == ASSISTANT and eot is not None:
    if stitched[-1:] != [eot]:
      stitched.append(eot)  # the final action was cut by a budget
  return CHECK_MODES[mode](fmt, fmt.render_ids(messages), stitched)


class ChatTemplateFormat(ConversationFormat):
  """A Hugging Face tokenizer and chat template (see the module docstring).

  At construction the template is checked to be append-only for episodes:
  an assistant message starts where the generation prompt ends, a special
  token (the end of turn, added to `stop_ids`) follows its content directly,
  and adding an observation, then the next assistant message, leaves the
  text before them unchanged.

  Untrusted content is written through the template (so a `trim` it applies
  is applied), then tokenised with added tokens' text read as plain text;
  the template's own text is tokenised normally.
  """

  def __init__(
    self,
    tokenizer: Any,
    template: str,
    *,
    special_tokens: Mapping[str, str] | None = None,
    eos_ids: Sequence[int] = (),
    observation_role: str = USER,
    tools: Sequence[Mapping[str, Any]] | None = None,
  ):
    """Builds the format and checks the template.

    Args:
      tokenizer: a `tokenizers.Tokenizer` (copied; the caller's is not
        changed).
      template: the chat template's Jinja text.
      special_tokens: e.g. {"eos_token": "<|im_end|>"}, visible to the
        template; eos_token and pad_token also set `stop_ids` / `pad_id`.
      eos_ids: generation_config's eos_token_id(s).
      observation_role: role of observations, "user" or e.g. "tool".
      tools: JSON-schema functions every render passes to the template
      (its `tools=`, e.g. `envs/repo_tools.TOOLS`): the prompt shows them
      as the template does, and the episode check renders with them.

    Raises:
      ValueError: naming what in the template or tokens does not fit.
    """
    if observation_role in TRUSTED_ROLES:
      raise ValueError(
        f"observation_role={observation_role!r}: observations are untrusted;"
        " use 'user' or 'tool'."
      )
    special_tokens = dict(special_tokens or {})
    self._tok = chat_template.PartsTokenizer(tokenizer)
    self._template = chat_template.Template(template, special_tokens)
    self.vocab_size = self._tok.num_ids
    self.observation_role = observation_role
    self.tools = tuple(tools) if tools else None
    self._placeholder = f"PH{uuid.uuid4().hex}N"
    self._slots: dict[str, tuple[str, str]] = {}
    self._check_template()

    named = {}
    for key in ("eos_token", "pad_token"):
      if special_tokens.get(key) is not None:
        named[key] = self._tok.token_id(special_tokens[key])
        if named[key] is None:
          raise ValueError(
            f"{key} {special_tokens[key]!r} is not a token of the tokenizer."
          )
    eos = [*eos_ids, *([named["eos_token"]] if "eos_token" in named else [])]
    bad = [i for i in eos if not 0 <= i < self.vocab_size]
    if bad:
      raise ValueError(f"EOS ids {bad} are outside [0, {self.vocab_size}).")
    self.stop_ids = tuple(dict.fromkeys([*eos, self.end_of_turn_id]))
    self.pad_id = named.get(
      "pad_token", named.get("eos_token", self.stop_ids[0])
    )

  @classmethod
  def from_checkpoint(
    cls,
    path: str | os.PathLike,
    *,
    observation_role: str = USER,
    tools: Sequence[Mapping[str, Any]] | None = None,
  ) -> ChatTemplateFormat:
    """Builds the format from a checkpoint directory's tokenizer files.

    See `chat_template.load_checkpoint` for the files read and its errors.
    """
    ckpt = chat_template.load_checkpoint(path)
    return cls(
      ckpt.tokenizer,
      ckpt.template,
      special_tokens=ckpt.special_tokens,
      eos_ids=ckpt.eos_ids,
      observation_role=observation_role,
      tools=tools,
    )

  # --- Construction checks ---------------------------------------------------

  def _ph(self, name: str) -> str:
    return f"{self._placeholder}{name}Z"

  def _render(self, messages: Sequence[Message], gen: bool) -> str:
    return self._template.render(
      messages, add_generation_prompt=gen, tools=self.tools
    )

  def _check_template(self) -> None:
    """Finds the end-of-turn token and checks the template is append-only."""
    user = {"role": USER, "content": self._ph("u")}
    action = {"role": ASSISTANT, "content": self._ph("a")}
    prompt = self._render([user], True)
    base = self._render([user, action], False)
    opening = prompt + action["content"]
    if not base.startswith(opening):
      raise ValueError(
        "The chat template is not append-only: an assistant message does"
        " not start where the generation prompt ends (the prompt ends"
        f" {prompt[-60:]!r}; with the message: {base[: len(opening)][-60:]!r})."
      )
    end = len(prompt) + len(action["content"])
    eot = self._tok.match_added(base, end)
    if eot is None:
      raise ValueError(
        "The chat template does not end an assistant message with a special"
        f" token right after its content (it writes {base[end:][:40]!r}); a"
        " sampled turn could not stop where the template ends it."
      )
    self.end_of_turn_id = self._tok.added[eot.group()]
    self._eot_text = eot.group()
    # `_base` is the fixed conversation every observation chunk is cut from.
    self._base = (user, action)
    self._base_head = base[: eot.end()]
    self._tail = base[eot.end() :]
    before, after = self._slot(self.observation_role)
    shown = {"role": self.observation_role, "content": self._ph("o")}
    opened = self._base_head + before + shown["content"] + after
    nxt = {"role": ASSISTANT, "content": self._ph("b")}
    again = self._render([*self._base, shown, nxt], False)
    if not again.startswith(opened + nxt["content"]):
      raise ValueError(
        "The chat template is not append-only: adding the next assistant"
        " message after an observation changes the text before it (the"
        " template rewrites earlier turns)."
      )
    if self._tok.encode_parts([(again, True)]) != self._tok.encode(again):
      raise ValueError(
        "Tokenising the template's text around its special tokens does not"
        " reproduce the tokenizer (added tokens with lstrip/rstrip?)."
      )

  def _slot(self, role: str) -> tuple[str, str]:
    """The template's text before and after a `role` message's content."""
    if role in self._slots:
      return self._slots[role]
    content = self._ph("r")
    text = self._render([*self._base, {"role": role, "content": content}], True)
    if text.count(content) != 1:
      raise ValueError(
        f"The chat template does not write a {role!r} message's content"
        " as given (use observation_role='user' if it has no such role)."
      )
    if not text.startswith(self._base_head):
      raise ValueError(
        f"The chat template is not append-only: adding a {role!r} message"
        " after an assistant message changes the text up to that message's"
        " end of turn (the template rewrites earlier turns)."
      )
    before, after = text[len(self._base_head) :].split(content)
    self._slots[role] = (before, after)
    return before, after

  def _as_rendered(self, role: str, content: str) -> str:
    """`content` as the template writes it in a `role` message (trimmed...)."""
    before, after = self._slot(role)
    message = {"role": role, "content": content}
    text = self._render([*self._base, message], True)
    head = self._base_head + before
    if not (
      text.startswith(head)
      and text.endswith(after)
      and len(text) >= len(head) + len(after)
    ):
      raise ValueError(
        f"The chat template writes the text around a {role!r} message"
        " differently depending on its content; it cannot be stitched."
      )
    return text[len(head) : len(text) - len(after)]

  # --- The interface -------------------------------------------------------

  def prompt_ids(self, system: str, user: str) -> list[int]:
    """See `ConversationFormat.prompt_ids`."""
    messages = [{"role": SYSTEM, "content": system}] if system else []
    return self.render_ids([*messages, {"role": USER, "content": user}])

  def observation_ids(self, text: str, *, action_ended: bool) -> list[int]:
    """See `ConversationFormat.observation_ids`."""
    role = self.observation_role
    before, after = self._slot(role)
    body = self._as_rendered(role, text)
    ids = self._tok.encode_parts([(before, True), (body, False), (after, True)])
    return ids if action_ended else [self.end_of_turn_id, *ids]

  def render_ids(self, messages: Sequence[Message]) -> list[int]:
    """See `ConversationFormat.render_ids`."""
    if not messages:
      raise ValueError("render_ids needs at least one message.")
    shown, untrusted = [], []
    for k, m in enumerate(messages):
      if m["role"] in TRUSTED_ROLES:
        shown.append({"role": m["role"], "content": m["content"]})
      else:
        untrusted.append((self._ph(str(k)), m["role"], m["content"]))
        shown.append({"role": m["role"], "content": untrusted[-1][0]})
    final_action = messages[-1]["role"] == ASSISTANT
    text = self._render(shown, not final_action)
    if final_action:
      if not text.endswith(self._eot_text + self._tail):
        raise ValueError(
          "The chat template ends this conversation differently from the"
          f" probe conversation ({text[-40:]!r})."
        )
      text = text[: len(text) - len(self._tail)]
    parts, pos = [], 0
    for placeholder, role, content in untrusted:
      if text.count(placeholder) != 1:
        raise ValueError(
          f"The chat template does not write a {role!r} message's content"
          " as given."
        )
      at = text.index(placeholder)
      parts.append((text[pos:at], True))
      parts.append((self._as_rendered(role, content), False))
      pos = at + len(placeholder)
    parts.append((text[pos:], True))
    return self._tok.encode_parts(parts)

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids`; raises ValueError on an id past `vocab_size`."""
    return self._tok.decode(ids)

  def action_text(self, action_ids: Sequence[int]) -> str:
    """The action without its final stop id, if it has one."""
    ids = list(action_ids)
    if ids and int(ids[-1]) in self.stop_ids:
      ids = ids[:-1]
    return self.decode(ids)

  def encode_action(self, text: str) -> list[int]:
    """The content's ids, special tokens' text read as them."""
    return self._tok.encode_parts([(text, True)])

  def encode_plain(self, text: str) -> list[int]:
    """See `ConversationFormat.encode_plain`."""
    return self._tok.encode_plain(text)


class ByteProtocolFormat(ConversationFormat):
  """Today's protocol tokens behind `ConversationFormat`, id for id.

  `prompt_ids(system, user)` is [bos] + user encoded plain + system encoded
  with its protocol tags: `protocol.prompt_ids(tok, task)` is
  `prompt_ids(protocol.REMINDER, protocol.task_text(task))` (the trusted
  text comes after the task). Observations are `<obs>` body `</obs>`
  (`protocol.observation_ids`); there is no end-of-turn token, so
  `action_ended` changes nothing, and an action's text keeps its stop tag.
  """

  def __init__(self, tokenizer: tokenizer_lib.Tokenizer | None = None):
    """Wraps `tokenizer` (default: a `ByteTokenizer`)."""
    self._tok = tokenizer or tokenizer_lib.ByteTokenizer()
    special = self._tok.special_ids
    self._obs = special[tokenizer_lib.OBS]
    self._obs_end = special[tokenizer_lib.OBS_END]
    self.stop_ids = tuple(
      self._tok.stop_ids(
        (tokenizer_lib.RUN_END, tokenizer_lib.SUBMIT_END, tokenizer_lib.EOS)
      )
    )
    self.vocab_size = self._tok.vocab_size
    self.pad_id = self._tok.pad_id
    self.end_of_turn_id = None
    self.observation_role = USER

  def action_ended(self, action_ids: Sequence[int]) -> bool:
    """True if the last id is a stop id."""
    return bool(action_ids) and int(action_ids[-1]) in self.stop_ids

  def prompt_ids(self, system: str, user: str) -> list[int]:
    """See `ConversationFormat.prompt_ids`."""
    tok = self._tok
    return [tok.bos_id, *tok.encode_plain(user), *tok.encode(system)]

  def observation_ids(self, text: str, *, action_ended: bool) -> list[int]:
    """See `ConversationFormat.observation_ids`."""
    del action_ended  # no end-of-turn token to add
    return [self._obs, *self._tok.encode_plain(text), self._obs_end]

  def render_ids(self, messages: Sequence[Message]) -> list[int]:
    """See `ConversationFormat.render_ids`."""
    messages = list(messages)
    system = ""
    if messages and messages[0]["role"] == SYSTEM:
      system = messages.pop(0)["content"]
    if not messages or messages[0]["role"] != USER:
      raise ValueError("A conversation starts with [system,] user messages.")
    ids = self.prompt_ids(system, messages[0]["content"])
    for m in messages[1:]:
      if m["role"] == ASSISTANT:
        ids += self.encode_action(m["content"])
      else:
        ids += self.observation_ids(m["content"], action_ended=True)
    return ids

  def decode(self, ids: Sequence[int]) -> str:
    """The tokenizer's `decode`."""
    return self._tok.decode(ids)

  def action_text(self, action_ids: Sequence[int]) -> str:
    """The decoded ids, stop tag included (as today)."""
    return self._tok.decode(action_ids)

  def encode_action(self, text: str) -> list[int]:
    """`Tokenizer.encode`: protocol tags become their ids."""
    return self._tok.encode(text)

  def encode_plain(self, text: str) -> list[int]:
    """`Tokenizer.encode_plain`."""
    return self._tok.encode_plain(text)
