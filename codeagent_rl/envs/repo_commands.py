r"""The repository tools in the byte protocol's tags (the tiny model's form).

A tool call is one `<run>` block holding a command; `<submit>` (with a
one-line summary of the change) submits. The first line of a command is
the tool's name and its short arguments, separated by single spaces; a
tool with a text argument takes it from the lines after the first:

  view PATH [START [END]]      lines of a file, numbered
  list_files [FOLDER]          the files under a folder
  search TEXT                  lines holding TEXT (the rest of the line,
                               literal; `search -i TEXT` ignores case)
  edit PATH                    replace one occurrence in a file:
  <<<<<<< SEARCH
  old lines
  =======
  new lines
  >>>>>>> REPLACE
  replace_lines PATH START END lines START..END (numbered as view shows
                               them) become the lines after (none: they
                               are deleted)
  create PATH                  a new file; its content is the lines after
  delete PATH
  run PATH                     run a Python file of the workspace; the
                               lines after, if any, are its stdin

Paths hold no spaces (`workspace.check_path` allows them; a task whose
paths have spaces is used through JSON tool calls). `parse_tag_call`
returns the same `(name, arguments)` as `repo_tools.parse_json_call`, so
one `repo_tools.call` serves both renderings, and `format_tag_call` is its
inverse for demonstrations: `parse_tag_call(format_tag_call(n, a)) == (n,
a)` for every call it accepts. Nothing here raises for what a policy
writes except `WorkspaceError`, whose message is shown as the observation.
"""

from __future__ import annotations

from typing import Any

from codeagent_rl.tasks import workspace as ws_lib

SEARCH_MARK = "<<<<<<< SEARCH"
DIVIDER = "======="
REPLACE_MARK = ">>>>>>> REPLACE"
_MARKS = (SEARCH_MARK, DIVIDER, REPLACE_MARK)
# The usage line of each command, shown when one is malformed.
USAGE = {
  "view": "view PATH [START [END]]",
  "list_files": "list_files [FOLDER]",
  "search": "search [-i] TEXT",
  "edit": f"edit PATH, then {SEARCH_MARK} / old lines / {DIVIDER} / new"
  f" lines / {REPLACE_MARK} on lines of their own",
  "replace_lines": "replace_lines PATH START END, then the new lines",
  "create": "create PATH, then the file's lines",
  "delete": "delete PATH",
  "run": "run PATH, then stdin lines if any",
}


def _error(name: str, what: str) -> ws_lib.WorkspaceError:
  return ws_lib.WorkspaceError(f"{name}: {what}; usage: {USAGE[name]}.")


def _int(name: str, word: str) -> int:
  if not (word.isascii() and word.isdigit()) or len(word) > 9:
    raise _error(name, f"{word!r:.20} is not a line number")
  return int(word)


def _words(name: str, head: str, least: int, most: int) -> list[str]:
  words = head.split(" ")[1:] if " " in head else []
  if any(not w for w in words) or not least <= len(words) <= most:
    raise _error(name, "wrong number of words on the first line")
  return words


def _edit(path: str, body: str) -> dict:
  lines = body.split("\n")
  if lines.count(SEARCH_MARK) != 1 or lines[0] != SEARCH_MARK:
    raise _error("edit", f"the lines after the path start with {SEARCH_MARK}")
  if lines.count(DIVIDER) != 1 or lines.count(REPLACE_MARK) != 1:
    raise _error("edit", f"one {DIVIDER} and one {REPLACE_MARK} line needed")
  divider, end = lines.index(DIVIDER), lines.index(REPLACE_MARK)
  if not divider < end or end != len(lines) - 1:
    raise _error("edit", f"{REPLACE_MARK} must be the last line")
  search = "\n".join(lines[1:divider])
  return {
    "path": path,
    "search": search,
    "replace": "\n".join(lines[divider + 1 : end]),
  }


def parse_tag_call(command: str) -> tuple[str, dict]:
  """(name, arguments) of a command from a `<run>` block.

  `command` is the block's text as `protocol.parse_action` returns it
  (edges trimmed, ending in one newline).

  Raises:
    ws_lib.WorkspaceError: saying what is malformed and how to write it.
  """
  if not isinstance(command, str):
    raise ws_lib.WorkspaceError("a command is text.")
  text = command[:-1] if command.endswith("\n") else command
  head, _, body = text.partition("\n")
  head = head.rstrip()
  name = head.split(" ", 1)[0]
  if name not in USAGE:
    raise ws_lib.WorkspaceError(
      f"unknown command {name!r:.40}; the commands are"
      f" {', '.join(USAGE)}, and submit is its own block."
    )
  if name == "search":
    rest = head[len("search ") :] if head.startswith("search ") else ""
    ignore = rest.startswith("-i ")
    text_arg = rest[3:] if ignore else rest
    if not text_arg or body:
      raise _error(name, "the text to search for is the rest of the line")
    args = {"text": text_arg}
    if ignore:
      args["ignore_case"] = True
    return name, args
  if name in ("view", "list_files", "delete"):
    if body:
      raise _error(name, "takes one line")
  if name == "view":
    words = _words(name, head, 1, 3)
    args = {"path": words[0]}
    for key, word in zip(("start", "end"), words[1:], strict=False):
      args[key] = _int(name, word)
    return name, args
  if name == "list_files":
    words = _words(name, head, 0, 1)
    return name, ({"folder": words[0]} if words else {})
  if name == "replace_lines":
    path, start, end = _words(name, head, 3, 3)
    return name, {
      "path": path,
      "start": _int(name, start),
      "end": _int(name, end),
      "content": body + "\n" if body else "",
    }
  (path,) = _words(name, head, 1, 1)
  if name == "delete":
    return name, {"path": path}
  if name == "create":
    return name, {"path": path, "content": body + "\n" if body else ""}
  if name == "run":
    return name, (
      {"path": path, "stdin": body + "\n"} if body else {"path": path}
    )
  return name, _edit(path, body)


def format_tag_call(name: str, arguments: dict[str, Any]) -> str:
  """The command of a call (what goes between `<run>` and `</run>`).

  Ends in a newline, as `protocol.parse_action` returns a block's text.

  Raises:
    ValueError: the call has no command form (a path with a space, a
      search text with a newline, edit text holding a marker line, a
      file, stdin or new lines that do not end in one newline, an end
      line without a start line, or an unknown tool).
  """
  args = dict(arguments)
  for key in ("path", "folder"):
    if " " in args.get(key, "") or "\n" in args.get(key, ""):
      raise ValueError(f"{name}: {key} {args[key]!r:.60} has a space.")
  if name == "view":
    words = [args["path"]]
    if "end" in args and "start" not in args:
      raise ValueError("view: an end line needs a start line.")
    words += [str(args[key]) for key in ("start", "end") if key in args]
    return "view " + " ".join(words) + "\n"
  if name == "list_files":
    folder = args.get("folder", "")
    return f"list_files {folder}\n" if folder else "list_files\n"
  if name == "search":
    text = args["text"]
    if "\n" in text or text != text.rstrip() or not text:
      raise ValueError("search: the text must be one line without end spaces.")
    flag = "-i " if args.get("ignore_case") else ""
    if not flag and text.startswith("-i "):
      raise ValueError("search: a text starting with '-i ' reads as a flag.")
    return f"search {flag}{text}\n"
  if name == "delete":
    return f"delete {args['path']}\n"
  if name in ("create", "run"):
    key = "content" if name == "create" else "stdin"
    text = args.get(key, "")
    if name == "run" and key in args and not text:
      raise ValueError("run: leave an empty stdin out.")
    if text and (not text.strip() or text != text.rstrip() + "\n"):
      raise ValueError(
        f"{name}: {key} must end in one newline after text, no spaces."
      )
    return f"{name} {args['path']}\n{text}"
  if name == "replace_lines":
    text = args["content"]
    if text and (not text.strip() or text != text.rstrip() + "\n"):
      raise ValueError(
        "replace_lines: content must be empty or end in one newline after"
        " text, no spaces."
      )
    head = f"replace_lines {args['path']} {args['start']} {args['end']}\n"
    return head + text
  if name == "edit":
    for key in ("search", "replace"):
      if any(line in _MARKS for line in args[key].split("\n")):
        raise ValueError(f"edit: {key} holds a marker line.")
    lines = [
      f"edit {args['path']}",
      SEARCH_MARK,
      args["search"],
      DIVIDER,
      *([args["replace"]] if args["replace"] else []),
      REPLACE_MARK,
    ]
    return "\n".join(lines) + "\n"
  raise ValueError(f"{name!r}: no command form (submit is its own block).")
