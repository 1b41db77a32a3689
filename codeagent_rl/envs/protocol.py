r"""The agent protocol as pure functions: parse actions, render text.

Nothing here runs code or touches the sandbox; `code_env.py` does that.

**Actions.** A policy turn is text that holds exactly one block,
`<run>code</run>` (run `code` on the visible tests) or
`<submit>code</submit>` (end the episode; `code` is judged on suites A and
B). `parse_action` decides:

- Text *before* the block is allowed and ignored (a model may think aloud),
  as long as it holds no protocol tag.
- *After* the block only whitespace and one `<eos>` may follow; anything
  else is a format error (the sampler stops at the closing tag, so more
  text means the turn did not end where the protocol says).
- Any other protocol tag (`<obs>`, `<bos>`, `<pad>`, a second block, a tag
  inside the code) is a format error: code cannot contain the tag strings.
- Code wrapped in one Markdown fence (```` ```python ... ``` ````) is
  unwrapped; leading blank lines and trailing whitespace are dropped, and
  code whose first line is indented is dedented. Empty code is a format
  error.

**Observations** are `<obs>` + body + `</obs>`. The body is untrusted text
(program output), so `observation_ids` encodes it with
`Tokenizer.encode_plain`: a program that prints "</obs><submit>" cannot
forge protocol tokens. A run observation, for example:

  <obs>tests: 1/2 passed
  test 1: pass
  test 2: fail
  error: test 2: add(2, 3) returned 6, expected 5
  stdout:
  debug 2 3
  </obs>

A job that did not finish cleanly adds `status: timeout: <reason>` after the
test lines; stdio and program runs add `stderr: <last line of stderr>`.
The body never exceeds `max_bytes` UTF-8 bytes: lines are capped at
`LINE_MAX_BYTES` and stdout gets what is left, with a
`[stdout cut: N bytes]` marker. A malformed turn gets
`<obs>format error: unterminated run block\n</obs>`; reasons name tags in
words, so they hold no tag text.

**Prompts** (`prompt_text`, `prompt_ids`): the task prompt, the visible tests
(`add(1, 2) == 3`, one per line) and `REMINDER`. The task text is encoded
plain; only the reminder's tags are real protocol tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import re
import textwrap
from typing import Any

from codeagent_rl import plain_repr
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.tasks import schema

RUN = tokenizer_lib.RUN
RUN_END = tokenizer_lib.RUN_END
SUBMIT = tokenizer_lib.SUBMIT
SUBMIT_END = tokenizer_lib.SUBMIT_END
OBS = tokenizer_lib.OBS
OBS_END = tokenizer_lib.OBS_END
EOS = tokenizer_lib.EOS
_CLOSER = {RUN: RUN_END, SUBMIT: SUBMIT_END}

# The one-line protocol reminder that ends every prompt (trusted text: its
# tags are encoded as protocol tokens).
REMINDER = (
  f"Use {RUN}code{RUN_END} to test, {SUBMIT}code{SUBMIT_END} to finish.\n"
)
# Cap on each line of an observation other than stdout, in UTF-8 bytes.
LINE_MAX_BYTES = 200
# Cap on one value's repr inside an observation line, in characters.
VALUE_MAX_CHARS = 60

# Every protocol tag; longest first so none shadows a longer one.
_TAG_RE = re.compile(
  "|".join(
    re.escape(t)
    for t in sorted(tokenizer_lib.SPECIAL_TOKENS, key=len, reverse=True)
  )
)
# One fenced block filling the whole code: ```lang\n ... \n```.
_FENCED_RE = re.compile(r"```[\w+.#-]*[ \t]*\n(?P<code>.*?)\n?[ \t]*```", re.S)


@dataclasses.dataclass(frozen=True)
class Run:
  """`<run>code</run>`: run `code` on the visible tests."""

  code: str


@dataclasses.dataclass(frozen=True)
class Submit:
  """`<submit>code</submit>`: end the episode; `code` is judged."""

  code: str


@dataclasses.dataclass(frozen=True)
class FormatError:
  """Anything else; `reason` says what was wrong, in a few words.

  Reasons name tags in words ("unterminated run block"), never as tag
  strings, so the observation that shows them holds no tag text.
  """

  reason: str


Action = Run | Submit | FormatError


def _clean_code(raw: str) -> str:
  """Unwraps one fence, drops blank edges, dedents an indented block."""
  stripped = raw.strip()
  fenced = _FENCED_RE.fullmatch(stripped)
  if fenced:
    raw = fenced.group("code")
  lines = raw.split("\n")
  while lines and not lines[0].strip():
    lines.pop(0)
  code = "\n".join(lines).rstrip()
  if code[:1].isspace():
    # Only then: dedent would also blank whitespace lines inside strings.
    code = textwrap.dedent(code)
  return code + "\n" if code else ""


def _word(tag: str) -> str:
  """A tag in words, without angle brackets: "run", "closing run"."""
  name = tag.strip("<>")
  return f"closing {name[1:]}" if name.startswith("/") else name


def parse_action(text: str) -> Action:
  """Parses one policy turn (see the module docstring for the rules).

  Runs in time linear in `len(text)`.

  Args:
    text: the decoded turn, protocol tags included.

  Returns:
    `Run`, `Submit` or `FormatError`.
  """
  if not isinstance(text, str):
    raise TypeError(f"parse_action takes a str, got {type(text).__name__}.")
  body = text.rstrip()
  if body.endswith(EOS):
    body = body[: -len(EOS)].rstrip()
  tags = _TAG_RE.finditer(body)
  opener = next(tags, None)
  if opener is None:
    return FormatError("no run or submit block")
  open_tag = opener.group()
  if open_tag not in _CLOSER:
    if open_tag in _CLOSER.values():
      return FormatError(f"{_word(open_tag)} tag without an opening one")
    return FormatError(f"{_word(open_tag)} tag not allowed in an action")
  kind = _word(open_tag)
  close_tag = _CLOSER[open_tag]
  closer = next(tags, None)
  if closer is None:
    return FormatError(f"unterminated {kind} block")
  if closer.group() != close_tag:
    if closer.group() in _CLOSER:
      return FormatError(f"{_word(closer.group())} block inside a {kind} block")
    if closer.group() in _CLOSER.values():
      return FormatError(
        f"{kind} block closed by a {_word(closer.group())} tag"
      )
    return FormatError(f"{_word(closer.group())} tag not allowed in an action")
  extra = next(tags, None)
  if extra is not None and extra.group() in _CLOSER:
    return FormatError("more than one block; one run or submit per turn")
  if extra is not None or body[closer.end() :].strip():
    return FormatError(f"text after the {kind} block")
  code = _clean_code(body[opener.end() : closer.start()])
  if not code:
    return FormatError(f"empty code in the {kind} block")
  return Run(code) if open_tag == RUN else Submit(code)


def format_action(action: Run | Submit) -> str:
  """The canonical text of an action (for demonstrations): `<run>code</run>`.

  `parse_action(format_action(a)) == a` for code as `parse_action` returns
  it (no protocol tags, ending in one newline).
  """
  if isinstance(action, Run):
    return f"{RUN}{action.code}{RUN_END}"
  if isinstance(action, Submit):
    return f"{SUBMIT}{action.code}{SUBMIT_END}"
  raise TypeError(f"format_action takes Run or Submit, got {action!r:.80}.")


# --- Plain text helpers -------------------------------------------------------


def cut_bytes(text: str, max_bytes: int) -> str:
  """The longest prefix of `text` within `max_bytes` UTF-8 bytes."""
  data = text.encode("utf-8", "replace")
  if len(data) <= max_bytes:
    return text
  return data[: max(max_bytes, 0)].decode("utf-8", "ignore")


def first_line(text: str) -> str:
  """The first non-blank line of `text`, stripped ("" if none)."""
  for line in text.splitlines():
    if line.strip():
      return line.strip()
  return ""


def last_line(text: str) -> str:
  """The last non-blank line of `text`, stripped ("" if none)."""
  for line in reversed(text.splitlines()):
    if line.strip():
      return line.strip()
  return ""


def value_repr(value: Any, max_chars: int | None = VALUE_MAX_CHARS) -> str:
  """A deterministic repr of plain data, cut to `max_chars` with "...".

  `plain_repr.plain_repr`: sets in a fixed order, ints past 4300 digits as
  `<int of ~N digits>`; it never raises and stops building once it has
  enough characters.
  """
  return plain_repr.plain_repr(value, max_chars)


def _keyword(name: Any, max_chars: int | None) -> str:
  # Task files only hold str keys; anything else is shown, not formatted.
  return name if type(name) is str else value_repr(name, max_chars)


def call_repr(
  entry_point: str,
  args: Sequence,
  kwargs: dict,
  max_chars: int | None = VALUE_MAX_CHARS,
) -> str:
  """`f(1, 'a', k=2)`, each argument cut to `max_chars`; never raises."""
  parts = [value_repr(a, max_chars) for a in args]
  parts += [
    f"{_keyword(k, max_chars)}={value_repr(v, max_chars)}"
    for k, v in kwargs.items()
  ]
  return f"{entry_point}({', '.join(parts)})"


# --- Prompts -----------------------------------------------------------------


def visible_test_line(task: schema.Task, test: dict) -> str:
  """How the prompt shows one visible test (values are not cut)."""
  if task.kind == "stdio":
    return (
      f"stdin {value_repr(test['stdin'], None)} -> stdout"
      f" {value_repr(test['expected_stdout'], None)}"
    )
  call = call_repr(task.entry_point, test["args"], test.get("kwargs", {}), None)
  if "checker" in test:
    return f"{call} passes a check"
  return f"{call} == {value_repr(test['expected'], None)}"


def task_text(task: schema.Task) -> str:
  """The untrusted part of the prompt: statement and visible tests."""
  lines = [task.prompt.strip()]
  if task.visible_tests:
    lines.append("Tests:")
    lines += [visible_test_line(task, t) for t in task.visible_tests]
  return "\n".join(lines) + "\n"


def prompt_text(task: schema.Task) -> str:
  """The whole prompt as text: `task_text(task) + REMINDER`."""
  return task_text(task) + REMINDER


def prompt_ids(
  tokenizer: tokenizer_lib.Tokenizer, task: schema.Task, add_bos: bool = True
) -> list[int]:
  """The prompt's ids: [bos], the task text encoded plain, the reminder.

  Only the reminder's tags become protocol tokens; a task statement that
  contains "<submit>" stays text.
  """
  ids = [tokenizer.bos_id] if add_bos else []
  ids += tokenizer.encode_plain(task_text(task))
  return ids + tokenizer.encode(REMINDER)


# --- Observations ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Observation:
  """What the environment says back; `body` is untrusted text."""

  body: str

  @property
  def text(self) -> str:
    """`<obs>` + body + `</obs>`."""
    return f"{OBS}{self.body}{OBS_END}"


@dataclasses.dataclass(frozen=True)
class TestReport:
  """One visible test as the observation shows it.

  Attributes:
    passed: the judge's verdict.
    detail: why it failed, e.g. "add(2, 3) returned 6, expected 5"
      ("" when it passed); only its first line is shown.
  """

  passed: bool
  detail: str = ""


def observation_ids(
  tokenizer: tokenizer_lib.Tokenizer, obs: Observation
) -> list[int]:
  """The ids of `obs.text`: real `<obs>`/`</obs>` ids around a plain body."""
  special = tokenizer.special_ids
  return [special[OBS], *tokenizer.encode_plain(obs.body), special[OBS_END]]


def _line(text: str) -> str:
  return cut_bytes(text, LINE_MAX_BYTES - 1) + "\n"


def render_run(
  reports: Sequence[TestReport],
  *,
  max_bytes: int,
  status: str = "ok",
  reason: str = "",
  stdout: str = "",
  stderr_tail: str = "",
) -> Observation:
  """The observation of a `<run>`.

  Args:
    reports: one per visible test, in prompt order (empty: no tests).
    max_bytes: cap on the body's UTF-8 size.
    status: the job status name; a line is added unless "ok".
    reason: why the status is not "ok" (first line shown).
    stdout: the program's stdout, cut to what is left of `max_bytes`.
    stderr_tail: shown as `stderr: ...` when not empty.

  Returns:
    The observation; equal inputs give equal bodies.
  """
  passed = sum(r.passed for r in reports)
  if reports:
    lines = [_line(f"tests: {passed}/{len(reports)} passed")]
    lines += [
      _line(f"test {i}: {'pass' if r.passed else 'fail'}")
      for i, r in enumerate(reports, start=1)
    ]
  else:
    lines = [_line("tests: none")]
  if status != "ok":
    why = first_line(reason)
    lines.append(
      _line(f"status: {status}: {why}" if why else f"status: {status}")
    )
  failed = next(
    ((i, r) for i, r in enumerate(reports, start=1) if not r.passed), None
  )
  if failed is not None:
    i, report = failed
    lines.append(_line(f"error: test {i}: {first_line(report.detail)}"))
  if stderr_tail:
    lines.append(_line(f"stderr: {first_line(stderr_tail)}"))
  head = "".join(lines)
  if stdout:
    section = "stdout:\n" + stdout + ("" if stdout.endswith("\n") else "\n")
    left = max_bytes - len(head.encode("utf-8", "replace"))
    if len(section.encode("utf-8", "replace")) > left:
      size = len(stdout.encode("utf-8", "replace"))
      marker = f"[stdout cut: {size} bytes]\n"
      keep = left - len("stdout:\n") - len(marker) - 1
      kept = cut_bytes(stdout, keep) if keep > 0 else ""
      section = "stdout:\n" + kept + "\n" + marker if kept else marker
    head += section
  return Observation(cut_bytes(head, max_bytes))


def render_probe(
  answer: str | None,
  *,
  ignored: int,
  max_bytes: int,
  status: str = "ok",
  reason: str = "",
  stderr_tail: str = "",
) -> Observation:
  """The observation of a probe task's `<run>` (`tasks.probes`).

  Args:
    answer: the host's line for the run's first query, or None (none).
    ignored: further queries the run printed (one is answered a run).
    max_bytes: cap on the body's UTF-8 size.
    status: the job status name; a line is added unless "ok".
    reason: why the status is not "ok" (first line shown).
    stderr_tail: shown as `stderr: ...` when not empty.

  Returns:
    The observation; the program's other output is not shown.
  """
  lines = [_line(answer if answer is not None else "no probe: call probe(x)")]
  if ignored:
    lines.append(_line(f"{ignored} more probes ignored: one a run"))
  if status != "ok":
    why = first_line(reason)
    lines.append(
      _line(f"status: {status}: {why}" if why else f"status: {status}")
    )
  if stderr_tail:
    lines.append(_line(f"stderr: {first_line(stderr_tail)}"))
  return Observation(cut_bytes("".join(lines), max_bytes))


def render_format_error(reason: str, *, max_bytes: int) -> Observation:
  """The observation of a malformed turn: `format error: <reason>`."""
  body = _line(f"format error: {first_line(reason)}")
  return Observation(cut_bytes(body, max_bytes))
