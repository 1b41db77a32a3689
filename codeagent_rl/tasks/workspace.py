"""A repository task's workspace: relative path -> text, owned by the host.

A `Workspace` is immutable; every tool an agent uses on it (view, list,
search, edit by search/replace, create, delete) is a pure text operation
that returns text to show or a new workspace. Nothing here touches the
file system: a run ships `files()` into a fresh sandbox job, so no state
survives inside the sandbox between jobs (DESIGN.md, "Repository tasks").

What a workspace may hold is checked on every construction, so a task
file and an agent's edits meet the same rules (`Limits`):
  - paths are relative POSIX paths of printable characters: no absolute
    path, no `..` or `.` segment, no empty segment, no backslash, no
    trailing slash; bounded length and depth; a path is never both a file
    and a folder;
  - contents are text: a `str` without NUL or other control characters
    (tab, newline, vertical tab, form feed and carriage return excepted)
    that encodes as UTF-8; bytes are refused as binary;
  - bounded file count, file size and total size (UTF-8 bytes).

`graded_copy` is what hidden suites run against: the agent's change with
every file the task marks as a test, and every file that hooks an
interpreter's start or a test run, as the task has it.

Every refusal is a `WorkspaceError` whose message names the path and what
is wrong, written so that it can be shown to the agent as an observation.
Search is literal (a substring, optionally case-insensitive), never a
regular expression: a pattern the policy writes runs on the host, and a
regular expression can take exponential time.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Mapping
import dataclasses
import re
import types
from typing import Any

# C0 control characters other than tab, newline, vertical tab, form feed
# and carriage return, and DEL: text files do not hold them.
_BINARY = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
# Characters a path segment may not hold (besides "/", the separator).
_BAD_PATH_CHAR = re.compile(r"[\x00-\x1f\x7f\\:*?\"<>|]")


class WorkspaceError(ValueError):
  """A malformed workspace or tool call; the message names the path."""


@dataclasses.dataclass(frozen=True)
class Limits:
  """What one workspace may hold.

  Attributes:
    max_files: files in the workspace.
    max_file_bytes: UTF-8 bytes of one file.
    max_total_bytes: UTF-8 bytes of all files together.
    max_path_chars: characters of one path.
    max_depth: segments of one path (`pkg/sub/mod.py` has 3).
    max_view_chars: characters `view`, `listing` and `search` return; the
      rest is named, not shown.
    max_search_chars: characters of a search string.
  """

  max_files: int = 64
  max_file_bytes: int = 32 * 1024
  max_total_bytes: int = 256 * 1024
  max_path_chars: int = 160
  max_depth: int = 6
  max_view_chars: int = 4000
  max_search_chars: int = 200

  def __post_init__(self):
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if type(value) is not int or value < 1:
        raise ValueError(
          f"workspace limits: {field.name} must be a positive int, got"
          f" {value!r}."
        )


def check_path(path: Any, limits: Limits) -> str:
  """Returns `path` if it is a valid workspace path; raises otherwise."""
  if not isinstance(path, str):
    raise WorkspaceError(
      f"path {path!r:.60}: must be a string, not {type(path).__name__}."
    )
  shown = f"path {path!r:.{limits.max_path_chars + 2}}"
  if not path:
    raise WorkspaceError("path '': must name a file, e.g. 'pkg/mod.py'.")
  if len(path) > limits.max_path_chars:
    raise WorkspaceError(
      f"path {path[:40]!r}...: longer than {limits.max_path_chars} characters."
    )
  if path.startswith("/"):
    raise WorkspaceError(
      f"{shown}: must be relative to the workspace, not absolute."
    )
  bad = _BAD_PATH_CHAR.search(path)
  if bad:
    raise WorkspaceError(
      f"{shown}: holds {bad.group()!r}; use '/' between folders and"
      " printable characters only."
    )
  segments = path.split("/")
  if any(s in ("", ".", "..") for s in segments):
    raise WorkspaceError(
      f"{shown}: no empty, '.' or '..' segment (nothing outside the"
      " workspace can be named)."
    )
  if len(segments) > limits.max_depth:
    raise WorkspaceError(f"{shown}: deeper than {limits.max_depth} folders.")
  return path


def check_text(path: str, text: Any, limits: Limits) -> str:
  """Returns `text` if it may be the content of `path`; raises otherwise."""
  if isinstance(text, bytes | bytearray | memoryview):
    raise WorkspaceError(f"{path}: binary content; a workspace holds text.")
  if not isinstance(text, str):
    raise WorkspaceError(
      f"{path}: content must be text, not {type(text).__name__}."
    )
  bad = _BINARY.search(text)
  if bad:
    line = text.count("\n", 0, bad.start()) + 1
    raise WorkspaceError(
      f"{path}: binary content (control character {bad.group()!r} on line"
      f" {line}); a workspace holds text."
    )
  try:
    size = len(text.encode("utf-8"))
  except UnicodeEncodeError:
    raise WorkspaceError(
      f"{path}: content is not valid Unicode text (a lone surrogate)."
    ) from None
  if size > limits.max_file_bytes:
    raise WorkspaceError(
      f"{path}: {size} bytes, more than the {limits.max_file_bytes} a file"
      " may hold."
    )
  return text


_NEWLINE = re.compile(r"\r\n|\r|\n")
# Each line with its end, as `source_lines` counts them.
_LINE_WITH_END = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def source_lines(text: str) -> list[str]:
  r"""The lines of `text` as Python numbers them in tracebacks.

  Only \n, \r\n and \r end a line (`str.splitlines` also splits at
  form feeds and other separators, which would shift the numbers).
  """
  lines = _NEWLINE.split(text)
  if lines[-1] == "":
    lines.pop()
  return lines


def _cap(lines: list[str], limits: Limits, what: str) -> str:
  """Joins `lines`, cut at `max_view_chars`, saying how much was left out.

  A first line longer than the budget is shown cut, so that something of
  it is seen.
  """
  out, used = [], 0
  for i, line in enumerate(lines):
    if used + len(line) + 1 > limits.max_view_chars:
      if out:
        out.append(f"[{len(lines) - i} more {what} not shown]")
        break
      keep = max(limits.max_view_chars - 40, 1)
      line = f"{line[:keep]} [line cut at {keep} characters]"
    out.append(line)
    used += len(line) + 1
  return "\n".join(out)


class Workspace(Mapping[str, str]):
  """An immutable, validated mapping of relative path -> text.

  Tools return new workspaces; the one they were called on is unchanged.
  """

  def __init__(self, files: Mapping[str, str], limits: Limits | None = None):
    self.limits = limits or Limits()
    if not isinstance(files, Mapping):
      raise WorkspaceError(
        "workspace: must be an object of path -> text, not"
        f" {type(files).__name__}."
      )
    if len(files) > self.limits.max_files:
      raise WorkspaceError(
        f"workspace: {len(files)} files, more than the"
        f" {self.limits.max_files} it may hold."
      )
    checked = {}
    for path in sorted(files, key=str):
      check_path(path, self.limits)
      checked[path] = check_text(path, files[path], self.limits)
    total = sum(len(t.encode("utf-8")) for t in checked.values())
    if total > self.limits.max_total_bytes:
      raise WorkspaceError(
        f"workspace: {total} bytes in all, more than the"
        f" {self.limits.max_total_bytes} it may hold."
      )
    for path in checked:
      parts = path.split("/")
      for depth in range(1, len(parts)):
        folder = "/".join(parts[:depth])
        if folder in checked:
          raise WorkspaceError(
            f"{path}: {folder} is a file, so it cannot be a folder too."
          )
    self._files = types.MappingProxyType(checked)

  # Mapping interface: read-only access to the files.
  def __getitem__(self, path: str) -> str:
    return self._files[path]

  def __iter__(self) -> Iterator[str]:
    return iter(self._files)

  def __len__(self) -> int:
    return len(self._files)

  def __eq__(self, other: object) -> bool:
    if not isinstance(other, Workspace):
      return NotImplemented
    return dict(self._files) == dict(other._files)

  def __hash__(self) -> int:
    return hash(tuple(self._files.items()))

  def __repr__(self) -> str:
    return f"Workspace({len(self)} files, {self.total_bytes} bytes)"

  @property
  def total_bytes(self) -> int:
    """UTF-8 bytes of all files."""
    return sum(len(t.encode("utf-8")) for t in self._files.values())

  def files(self) -> dict[str, str]:
    """A plain copy of path -> text (what a sandbox job is given)."""
    return dict(self._files)

  def existing(self, path: Any) -> str:
    """`path` if it names a file here; else a WorkspaceError with a hint."""
    check_path(path, self.limits)
    if path not in self._files:
      near = [p for p in self._files if p.rsplit("/", 1)[-1] == path]
      hint = f" (did you mean {near[0]!r}?)" if near else ""
      raise WorkspaceError(f"{path}: no such file{hint}.")
    return path

  def _prefix(self, folder: Any) -> str:
    """The prefix of the files under `folder` ("" = the whole workspace)."""
    if folder == "":
      return ""
    if isinstance(folder, str):
      folder = folder.removesuffix("/")
    return check_path(folder, self.limits) + "/"

  def _with(self, changes: dict[str, str | None]) -> Workspace:
    files = dict(self._files)
    for path, text in changes.items():
      if text is None:
        files.pop(path, None)
      else:
        files[path] = text
    return Workspace(files, self.limits)

  # --- Tools: text to show, or a new workspace. -----------------------------

  def view(self, path: str, start: int = 1, end: int | None = None) -> str:
    """Lines `start`..`end` (1-based, inclusive) of `path`, numbered."""
    self.existing(path)
    lines = source_lines(self._files[path])
    last = len(lines) if end is None else end
    for name, value in (("start", start), ("end", last)):
      if type(value) is not int:
        raise WorkspaceError(
          f"{path}: {name} must be a line number, got {value!r:.40}."
        )
    if not lines:
      return f"{path}: empty file"
    if not 1 <= start <= len(lines) or not start <= last:
      raise WorkspaceError(
        f"{path}: lines {start}-{last} are outside the file's 1-{len(lines)}."
      )
    last = min(last, len(lines))
    width = len(str(last))
    shown = [f"{n:>{width}}| {lines[n - 1]}" for n in range(start, last + 1)]
    return _cap(shown, self.limits, "lines")

  def listing(self, folder: str = "") -> str:
    """The files under `folder` ("" = all), one per line with its lines."""
    prefix = self._prefix(folder)
    paths = [p for p in self._files if p.startswith(prefix)]
    if not paths:
      raise WorkspaceError(f"{folder}: no such folder.")
    shown = [f"{p} ({len(source_lines(self._files[p]))} lines)" for p in paths]
    return _cap(shown, self.limits, "files")

  def search(
    self, needle: str, folder: str = "", ignore_case: bool = False
  ) -> str:
    """Every line holding `needle` (a literal string), as `path:line: text`."""
    if not isinstance(needle, str) or not needle or "\n" in needle:
      raise WorkspaceError(
        f"search: {needle!r:.40} must be a non-empty string of one line."
      )
    if len(needle) > self.limits.max_search_chars:
      raise WorkspaceError(
        f"search: longer than {self.limits.max_search_chars} characters."
      )
    prefix = self._prefix(folder)
    wanted = needle.casefold() if ignore_case else needle
    hits = []
    for path, text in self._files.items():
      if not path.startswith(prefix):
        continue
      for n, line in enumerate(source_lines(text), 1):
        if wanted in (line.casefold() if ignore_case else line):
          hits.append(f"{path}:{n}: {line}")
    if not hits:
      return f"no line holds {needle!r}"
    return _cap(hits, self.limits, "matching lines")

  def replace(self, path: str, search: str, replacement: str) -> Workspace:
    """`path` with the one occurrence of `search` replaced."""
    self.existing(path)
    for name, value in (("search", search), ("replace", replacement)):
      if not isinstance(value, str):
        raise WorkspaceError(f"{path}: {name} must be text.")
    if not search:
      raise WorkspaceError(f"{path}: the search text is empty.")
    count = self._files[path].count(search)
    if count == 0:
      raise WorkspaceError(
        f"{path}: the search text is not in the file; view the file and"
        " copy the lines exactly, indentation included."
      )
    if count > 1:
      raise WorkspaceError(
        f"{path}: the search text occurs {count} times; include more of the"
        " surrounding lines so that it occurs once."
      )
    text = self._files[path].replace(search, replacement, 1)
    return self._with({path: check_text(path, text, self.limits)})

  def replace_lines(
    self, path: str, start: int, end: int, text: str
  ) -> Workspace:
    """`path` with lines `start`..`end` (1-based, inclusive) replaced.

    `text` is the new lines ("" deletes them); it gets a final newline if
    it has none, so the line after the range stays a line of its own.
    The numbers are those `view` shows (`source_lines`).
    """
    self.existing(path)
    for name, value in (("start", start), ("end", end)):
      if type(value) is not int:
        raise WorkspaceError(
          f"{path}: {name} must be a line number, got {value!r:.40}."
        )
    if not isinstance(text, str):
      raise WorkspaceError(f"{path}: the new lines must be text.")
    lines = _LINE_WITH_END.findall(self._files[path])
    if not 1 <= start <= end <= len(lines):
      raise WorkspaceError(
        f"{path}: lines {start}-{end} are not a range of the file's"
        f" 1-{len(lines)}; view the file for its line numbers."
      )
    tail = "".join(lines[end:])
    if text and tail and not text.endswith(("\n", "\r")):
      text += "\n"
    text = "".join(lines[: start - 1]) + text + tail
    return self._with({path: check_text(path, text, self.limits)})

  def create(self, path: str, text: str) -> Workspace:
    """The workspace with a new file `path`."""
    check_path(path, self.limits)
    if path in self._files:
      raise WorkspaceError(
        f"{path}: already exists; edit it with a search/replace instead."
      )
    return self._with({path: check_text(path, text, self.limits)})

  def delete(self, path: str) -> Workspace:
    """The workspace without the file `path`."""
    return self._with({self.existing(path): None})


def from_json(
  value: Any, where: str, limits: Limits | None = None
) -> Workspace:
  """A workspace from a task file's JSON object; errors name `where`."""
  try:
    return Workspace(value, limits)
  except WorkspaceError as e:
    raise WorkspaceError(f"{where}: {e}") from None


# Files that hook a Python interpreter's start or a test run wherever they
# sit on the path (site's *.pth and sitecustomize/usercustomize, pytest's
# conftest.py and pytest.ini): a graded copy holds the task's own or none.
HOOK_FILES = (
  "conftest.py",
  "sitecustomize.py",
  "usercustomize.py",
  "pytest.ini",
)
HOOK_SUFFIXES = (".pth",)


def is_hook_file(path: str) -> bool:
  """Whether `path` is a file that hooks an interpreter's start or tests."""
  name = path.rsplit("/", 1)[-1]
  return name in HOOK_FILES or name.endswith(HOOK_SUFFIXES)


@dataclasses.dataclass(frozen=True)
class GradedCopy:
  """What hidden suites run against, and what was put back to get there.

  Attributes:
    workspace: the agent's workspace with every protected file as the task
      has it (restored if the agent changed or deleted it, removed if the
      agent created it).
    restored: protected paths the agent had changed or deleted.
    removed: protected paths the agent had created.
  """

  workspace: Workspace
  restored: tuple[str, ...]
  removed: tuple[str, ...]


def graded_copy(
  task: Workspace, agent: Workspace, test_paths: tuple[str, ...] = ()
) -> GradedCopy:
  """The agent's change applied to the task, with its tests kept clean.

  Grades the change, not the agent's workspace: a protected file (one of
  `test_paths`, the files the task marks as its tests, or any hook file)
  is the task's own copy, or absent if the task has none. Every other file
  is the agent's.

  Raises:
    WorkspaceError: when the task's files do not fit beside the agent's
      (a file the agent made where the task has a folder, or the size
      limits); a grader counts such a change as failing every test.
  """
  for path in test_paths:
    check_path(path, task.limits)
  protected = set(test_paths)

  def guarded(path: str) -> bool:
    return path in protected or is_hook_file(path)

  files = {p: t for p, t in agent.items() if not guarded(p)}
  files.update({p: t for p, t in task.items() if guarded(p)})
  restored = sorted(p for p in task if guarded(p) and agent.get(p) != task[p])
  removed = sorted(p for p in agent if guarded(p) and p not in task)
  return GradedCopy(
    Workspace(files, task.limits), tuple(restored), tuple(removed)
  )
