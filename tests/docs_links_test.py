"""Every link and every repository path in README.md and docs/*.md exists.

Links: every Markdown link or image target `[text](target)` outside code is
resolved relative to the file that holds it (as GitHub renders it); a
`#anchor` must name a heading of the target file (GitHub's slugs). http(s)
and mailto links are allowed and not fetched.

Paths: every word of the text (prose, inline code, code blocks) is searched
for path tokens, runs of name characters with a `/` between two segments.
A token is a repository path when its last segment has an extension of
`EXTENSIONS`, or it ends with `/`, or its first segment is an entry of the
repository root (`.ci/run`); other tokens are names with slashes, such as
metrics (`episode/turns_p50`) or ratios. A path is looked up from the
repository root, then from `codeagent_rl/` (the text names modules as
`train/ppo.py`); `*` and `{a,b}` must each match something.

Skipped by rule, not by a list: words holding a URL (`scheme://`), `<`,
`>` or `...` (placeholders of shape, not paths), absolute paths (`/tmp/x`,
a cluster's `/shared/runs/a`: outside the repository) and paths with an
upper-case directory segment (`DIR/compare.json`, `RUN/...`: a directory
the reader supplies).
"""

from __future__ import annotations

import glob
import pathlib
import re

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = (REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")))
# Where a path that is not found from the repository root is looked up.
PACKAGE_DIR = "codeagent_rl"
# Extensions that make a token with a `/` a file path.
EXTENSIONS = frozenset(
  "py md json jsonl txt png sh ipynb npz toml cfg log yml yaml jinja"
  " safetensors whl csv".split()
)

_FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```[ \t]*$", re.M | re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
_SEGMENT = r"(?:[\w.\-*]|\{[\w.,\-]*\})+"
_PATH = re.compile(rf"/?{_SEGMENT}(?:/{_SEGMENT})+/?|{_SEGMENT}/")
_PLACEHOLDER_DIR = re.compile(r"[A-Z][A-Z0-9_]*")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.\-]*:", re.I)


def slug(heading: str) -> str:
  """GitHub's anchor for a heading's text."""
  text = re.sub(r"`|\*\*|__|\[([^\]]*)\]\([^)]*\)", r"\1", heading)
  text = re.sub(r"[^\w\- ]", "", text.lower())
  return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
  """The anchors of Markdown `text`'s headings (code blocks left out)."""
  out, seen = set(), {}
  for heading in _HEADING.findall(_FENCE.sub("", text)):
    base = slug(heading)
    n = seen.get(base, 0)
    seen[base] = n + 1
    out.add(base if n == 0 else f"{base}-{n}")
  return out


def links(text: str) -> list[str]:
  """Link and image targets of Markdown `text`, outside code."""
  prose = _INLINE_CODE.sub("", _FENCE.sub("", text))
  return _LINK.findall(prose)


def _is_repo_path(token: str, root: pathlib.Path) -> bool:
  if token.endswith("/"):
    return True
  last = token.rsplit("/", 1)[-1]
  if "." in last.lstrip(".") and last.rsplit(".", 1)[-1] in EXTENSIONS:
    return True
  return (root / token.split("/", 1)[0]).exists()


def paths(text: str, root: pathlib.Path = REPO_ROOT) -> list[str]:
  """Repository paths that Markdown `text` mentions (module docstring)."""
  out = []
  for word in text.split():
    if "://" in word or "<" in word or ">" in word or "..." in word:
      continue
    for token in _PATH.findall(word):
      token = token.rstrip(".,")
      if token.startswith("/") or "/" not in token.rstrip("/"):
        continue
      dirs = token.rstrip("/").split("/")[:-1]
      if any(_PLACEHOLDER_DIR.fullmatch(d) for d in dirs):
        continue
      if _is_repo_path(token, root):
        out.append(token)
  return out


def _expand_braces(pattern: str) -> list[str]:
  match = re.search(r"\{([^{}]*)\}", pattern)
  if not match:
    return [pattern]
  head, tail = pattern[: match.start()], pattern[match.end() :]
  return [
    p
    for choice in match.group(1).split(",")
    for p in _expand_braces(head + choice + tail)
  ]


def path_exists(token: str, root: pathlib.Path = REPO_ROOT) -> bool:
  """Whether `token` names something under `root` or its package dir."""
  for base in (root, root / PACKAGE_DIR):
    found = True
    for pattern in _expand_braces(token.rstrip("/")):
      if not glob.glob(str(base / pattern)):
        found = False
        break
    if found:
      return True
  return False


def problems(doc: pathlib.Path, root: pathlib.Path = REPO_ROOT) -> list[str]:
  """What in `doc` names a file, directory or heading that does not exist."""
  text = doc.read_text()
  name = doc.relative_to(root)
  out = []
  for target in links(text):
    if _EXTERNAL.match(target):
      continue
    file_part, _, anchor = target.partition("#")
    file = (doc.parent / file_part).resolve() if file_part else doc
    if not file.exists():
      out.append(f"{name}: link to a missing file: {target}")
      continue
    if anchor and file.suffix == ".md":
      if anchor not in anchors(file.read_text()):
        out.append(f"{name}: link to a missing heading: {target}")
  for token in paths(text, root):
    if not path_exists(token, root):
      out.append(f"{name}: missing path: {token}")
  return out


def test_slugs_are_githubs():
  assert slug("Stage 2: the task's own suite B") == (
    "stage-2-the-tasks-own-suite-b"
  )
  assert slug("The `sandbox` fleet on Ray") == "the-sandbox-fleet-on-ray"
  text = "# A\n## Notes\n```\n# not a heading\n```\n## Notes\n"
  assert anchors(text) == {"a", "notes", "notes-1"}


def test_paths_are_found_and_placeholders_skipped():
  text = """
See `codeagent_rl/train/ppo.py` and train/keys.py, [x](docs/a.md),
`--config=configs/tiny.py:smoke` (tests/models/m_test.py's model), the
directory launch/sweeps/ and .ci/run; `benchmarks/results/x.{txt,json}`.
Not paths: episode/turns_p50, monitor/*, pass A&B 164/164, 0.510 / 0.258,
`DIR/compare.json`, RUN/horizon.json, /tmp/he_all.jsonl, gs://BUCKET/runs,
value_by_depth/<turn bucket>/x, advantage_by_length/..., /shared/runs/a.
```
python -m codeagent_rl.grade --tasks=DIR/eval_tasks.jsonl --out=out/r.jsonl
```
"""
  assert paths(text) == [
    "codeagent_rl/train/ppo.py",
    "train/keys.py",
    "docs/a.md",
    "configs/tiny.py",
    "tests/models/m_test.py",
    "launch/sweeps/",
    ".ci/run",
    "benchmarks/results/x.{txt,json}",
    "out/r.jsonl",
  ]


def test_a_missing_path_link_or_heading_is_reported(tmp_path):
  (tmp_path / "docs").mkdir()
  (tmp_path / PACKAGE_DIR / "train").mkdir(parents=True)
  (tmp_path / PACKAGE_DIR / "train" / "ppo.py").write_text("")
  (tmp_path / "docs" / "b.md").write_text("# B\n## Real heading\n")
  (tmp_path / "r.json").write_text("{}")
  doc = tmp_path / "docs" / "a.md"
  doc.write_text(
    "# A\n"
    "[ok](b.md#real-heading), [self](#a), `train/ppo.py`, docs/b.md,\n"
    "[web](https://example.com/x.md), `DIR/gone.json`, /tmp/gone.py,\n"
    "[gone](c.md), [bad anchor](b.md#no-such-heading), `docs/gone.py`,\n"
    "and docs/{b,c}.md (half of it is missing).\n"
  )
  assert problems(doc, tmp_path) == [
    "docs/a.md: link to a missing file: c.md",
    "docs/a.md: link to a missing heading: b.md#no-such-heading",
    "docs/a.md: missing path: docs/gone.py",
    "docs/a.md: missing path: docs/{b,c}.md",
  ]


def test_every_link_and_path_in_the_docs_exists():
  assert len(DOCS) >= 8, DOCS  # README.md and the docs/ pages
  found = [problem for doc in DOCS for problem in problems(doc)]
  assert not found, "\n".join(found)
  # The check saw the paths it is for.
  assert len(paths((REPO_ROOT / "README.md").read_text())) >= 10
