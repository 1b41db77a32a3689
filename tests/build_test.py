"""Keeps BUILD true: every source in exactly one target, deps match imports.

BUILD is parsed with `ast`, never executed. The checks are plain functions of
the parsed targets and a directory, so the tests below feed them small
synthetic trees and watch each check fail; the last test runs them on the
repository itself.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
# Directories whose .py files must each belong to exactly one target.
COVERED_DIRS = ("codeagent_rl", "tests", "configs", "benchmarks", "launch")
# Top-level packages whose imports must be matched by a dep.
INTERNAL_PACKAGES = ("codeagent_rl", "configs", "launch")
RULES = ("py_library", "py_test", "py_binary")


class BuildFileError(ValueError):
  """BUILD uses a construct that this parser does not accept."""


@dataclasses.dataclass(frozen=True)
class Target:
  """One rule call in BUILD."""

  rule: str
  name: str
  srcs: tuple[str, ...]
  deps: tuple[str, ...]
  lineno: int


def _string_list(value, where: str, attr: str) -> tuple[str, ...]:
  if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
    raise BuildFileError(f"{where}: `{attr}` must be a list of strings.")
  return tuple(value)


def parse_build(text: str, filename: str = "BUILD") -> list[Target]:
  """Parses BUILD text into targets.

  Accepted: `load(...)` calls (ignored) and top-level calls of `RULES` with
  keyword arguments whose values are literals (no `glob`, no variables).

  Args:
    text: the BUILD file's contents.
    filename: used in error messages.

  Returns:
    The targets in file order.

  Raises:
    BuildFileError: on anything else, naming the file and line.
  """
  try:
    module = ast.parse(text, filename=filename)
  except SyntaxError as e:
    raise BuildFileError(f"{filename}:{e.lineno}: syntax error: {e.msg}") from e
  targets = []
  for stmt in module.body:
    where = f"{filename}:{stmt.lineno}"
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
      raise BuildFileError(f"{where}: expected a rule call, got other code.")
    rule = call.func.id
    if rule == "load":
      continue
    if rule not in RULES:
      raise BuildFileError(
        f"{where}: unknown rule {rule!r}; use one of {RULES}."
      )
    if call.args:
      raise BuildFileError(f"{where}: {rule} takes keyword arguments only.")
    attrs = {}
    for kw in call.keywords:
      if kw.arg is None:
        raise BuildFileError(f"{where}: {rule} does not accept **kwargs.")
      try:
        attrs[kw.arg] = ast.literal_eval(kw.value)
      except ValueError as e:
        raise BuildFileError(
          f"{where}: {rule} attribute `{kw.arg}` must be a literal."
        ) from e
    name = attrs.get("name")
    if not isinstance(name, str) or not name:
      raise BuildFileError(f"{where}: {rule} needs a non-empty string `name`.")
    where = f"{filename}:{stmt.lineno} (:{name})"
    targets.append(
      Target(
        rule=rule,
        name=name,
        srcs=_string_list(attrs.get("srcs", []), where, "srcs"),
        deps=_string_list(attrs.get("deps", []), where, "deps"),
        lineno=stmt.lineno,
      )
    )
  return targets


def python_files(root: pathlib.Path) -> list[str]:
  """Returns the repo-relative .py files under `COVERED_DIRS`, sorted."""
  found = []
  for top in COVERED_DIRS:
    for path in (root / top).rglob("*.py"):
      rel = path.relative_to(root)
      if any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
        continue
      found.append(rel.as_posix())
  return sorted(found)


def _owners(targets: list[Target]) -> dict[str, list[str]]:
  owners = {}
  for t in targets:
    for src in t.srcs:
      owners.setdefault(src, []).append(t.name)
  return owners


def check_unique_names(targets: list[Target]) -> list[str]:
  """Two targets must not share a name."""
  seen = {}
  errors = []
  for t in targets:
    if t.name in seen:
      errors.append(
        f"BUILD:{t.lineno}: target name :{t.name} is already used at line"
        f" {seen[t.name]}."
      )
    else:
      seen[t.name] = t.lineno
  return errors


def check_srcs_exist(targets: list[Target], root: pathlib.Path) -> list[str]:
  """Every listed src must be a file."""
  return [
    f"BUILD:{t.lineno}: target :{t.name} lists {src}, which does not exist."
    for t in targets
    for src in t.srcs
    if not (root / src).is_file()
  ]


def check_coverage(targets: list[Target], root: pathlib.Path) -> list[str]:
  """Every covered .py file is in exactly one target; tests are py_tests."""
  owners = _owners(targets)
  rules = {t.name: t.rule for t in targets}
  errors = []
  for path in python_files(root):
    names = owners.get(path, [])
    if not names:
      errors.append(f"{path} is in no BUILD target; add it to one.")
    elif len(names) > 1:
      labels = ", ".join(f":{n}" for n in names)
      errors.append(f"{path} is listed more than once in BUILD: {labels}.")
    elif path.endswith("_test.py") and rules[names[0]] != "py_test":
      errors.append(
        f"{path} is a test but its target :{names[0]} is a"
        f" {rules[names[0]]}, not a py_test."
      )
  return errors


def check_dep_labels(targets: list[Target]) -> list[str]:
  """Deps are ":name" of an existing target or external "@repo//pkg"."""
  names = {t.name for t in targets}
  errors = []
  for t in targets:
    for dep in t.deps:
      if dep.startswith(":"):
        if dep[1:] not in names:
          errors.append(
            f"BUILD:{t.lineno}: target :{t.name} depends on {dep}, which names"
            " no target."
          )
        elif dep[1:] == t.name:
          errors.append(
            f"BUILD:{t.lineno}: target :{t.name} depends on itself."
          )
      elif not dep.startswith("@"):
        errors.append(
          f"BUILD:{t.lineno}: target :{t.name} has dep {dep!r}; write"
          ' ":name" for a target here or "@pypi//package" for an external one.'
        )
  return errors


def resolve_module(root: pathlib.Path, module: str) -> str | None:
  """Returns the repo-relative file of a dotted module, or None."""
  base = root.joinpath(*module.split("."))
  for candidate in (base.with_suffix(".py"), base / "__init__.py"):
    if candidate.is_file():
      return candidate.relative_to(root).as_posix()
  return None


def _absolute(src: str, node: ast.ImportFrom) -> str:
  """The absolute module of `from <node.module> import ...` inside `src`."""
  if not node.level:
    return node.module or ""
  package = pathlib.PurePosixPath(src).parent.parts
  if node.level > 1:
    package = package[: len(package) - (node.level - 1)]
  return ".".join([*package, *([node.module] if node.module else [])])


def internal_imports(
  src: str, source: str, root: pathlib.Path
) -> list[tuple[int, str, str | None]]:
  """Lists the `INTERNAL_PACKAGES` imports of one file.

  `import a.b` resolves `a.b`; `from a import b` resolves `a.b` when that is a
  module or package, else `a` (b is then a name defined in `a`).

  Args:
    src: the file's repo-relative path (for relative imports).
    source: the file's text.
    root: the repository root.

  Returns:
    (line, module as written, resolved repo-relative file or None) triples.
  """
  found = []
  for node in ast.walk(ast.parse(source, filename=src)):
    if isinstance(node, ast.Import):
      for alias in node.names:
        found.append(
          (node.lineno, alias.name, resolve_module(root, alias.name))
        )
    elif isinstance(node, ast.ImportFrom):
      base = _absolute(src, node)
      for alias in node.names:
        full = f"{base}.{alias.name}"
        resolved = None if alias.name == "*" else resolve_module(root, full)
        if resolved is None:
          full, resolved = base, resolve_module(root, base)
        found.append((node.lineno, full, resolved))
  return [f for f in found if f[1].split(".")[0] in INTERNAL_PACKAGES]


def check_imports(targets: list[Target], root: pathlib.Path) -> list[str]:
  """Each internal import is owned by the importing target or a direct dep."""
  owners = _owners(targets)
  errors = []
  for t in targets:
    allowed = {t.name} | {d[1:] for d in t.deps if d.startswith(":")}
    for src in t.srcs:
      path = root / src
      if not (src.endswith(".py") and path.is_file()):
        continue  # check_srcs_exist reports missing files.
      try:
        imports = internal_imports(src, path.read_text(), root)
      except SyntaxError as e:
        errors.append(f"{src}:{e.lineno}: cannot parse: {e.msg}.")
        continue
      for lineno, module, resolved in imports:
        where = f"{src}:{lineno}: target :{t.name} imports {module}"
        if resolved is None:
          errors.append(f"{where}, which is no file in the tree.")
          continue
        names = owners.get(resolved, [])
        if not names:
          errors.append(f"{where} ({resolved}), which is in no target.")
        elif not allowed.intersection(names):
          errors.append(
            f"{where} ({resolved}) from :{names[0]}; add"
            f' ":{names[0]}" to the deps of :{t.name}.'
          )
  return errors


def run_checks(targets: list[Target], root: pathlib.Path) -> list[str]:
  """All checks; returns one message per problem (empty when BUILD is true)."""
  return (
    check_unique_names(targets)
    + check_srcs_exist(targets, root)
    + check_coverage(targets, root)
    + check_dep_labels(targets)
    + check_imports(targets, root)
  )


# --- The checks on synthetic trees -------------------------------------------

GOOD_FILES = {
  "codeagent_rl/__init__.py": "",
  "codeagent_rl/types.py": "import jax\n",
  "codeagent_rl/rl/__init__.py": "",
  "codeagent_rl/rl/gae.py": "import jax\n",
  "codeagent_rl/rl/losses.py": (
    "from codeagent_rl.rl import gae\nfrom . import gae as g\n"
  ),
  "configs/__init__.py": "",
  "configs/tiny.py": "import codeagent_rl.rl.losses\n",
  "tests/rl/gae_test.py": "from codeagent_rl.rl import gae\n",
}

GOOD_BUILD = """\
load("@rules_python//python:defs.bzl", "py_library", "py_test")

py_library(name = "codeagent_rl", srcs = ["codeagent_rl/__init__.py"])

py_library(
    name = "types",
    srcs = ["codeagent_rl/types.py"],
    deps = [":codeagent_rl", "@pypi//jax"],
)

py_library(
    name = "rl",
    srcs = [
        "codeagent_rl/rl/__init__.py",
        "codeagent_rl/rl/gae.py",
        "codeagent_rl/rl/losses.py",
    ],
    deps = [":codeagent_rl", "@pypi//jax"],
)

py_library(
    name = "configs",
    srcs = ["configs/__init__.py", "configs/tiny.py"],
    deps = [":rl"],
)

py_test(
    name = "gae_test",
    srcs = ["tests/rl/gae_test.py"],
    deps = [":rl"],
)
"""


def _errors(
  root: pathlib.Path,
  build: str = GOOD_BUILD,
  changes: dict[str, str | None] | None = None,
) -> list[str]:
  """Runs the checks on GOOD_FILES updated by `changes` (None deletes)."""
  files = {**GOOD_FILES, **(changes or {})}
  for path, text in files.items():
    if text is not None:
      (root / path).parent.mkdir(parents=True, exist_ok=True)
      (root / path).write_text(text)
  return run_checks(parse_build(build), root)


def _one_error(errors: list[str], *fragments: str) -> None:
  assert len(errors) == 1, "\n".join(errors)
  for fragment in fragments:
    assert fragment in errors[0], errors[0]


def test_good_tree_passes(tmp_path):
  assert _errors(tmp_path) == []


def test_file_in_no_target(tmp_path):
  errors = _errors(tmp_path, changes={"tests/rl/kl_test.py": ""})
  _one_error(errors, "tests/rl/kl_test.py", "in no BUILD target")


def test_file_in_two_targets(tmp_path):
  build = GOOD_BUILD + (
    'py_library(name = "extra", srcs = ["codeagent_rl/rl/gae.py"])\n'
  )
  errors = _errors(tmp_path, build)
  _one_error(errors, "codeagent_rl/rl/gae.py", ":rl, :extra", "more than once")


def test_test_file_outside_py_test(tmp_path):
  build = GOOD_BUILD.replace("py_test(", "py_library(")
  errors = _errors(tmp_path, build)
  _one_error(errors, "tests/rl/gae_test.py", ":gae_test", "not a py_test")


def test_missing_src(tmp_path):
  errors = _errors(tmp_path, changes={"configs/tiny.py": None})
  _one_error(errors, ":configs", "configs/tiny.py", "does not exist")


def test_duplicate_name(tmp_path):
  errors = _errors(tmp_path, GOOD_BUILD + 'py_library(name = "rl")\n')
  _one_error(errors, ":rl", "already used")


def test_unknown_dep_label(tmp_path):
  build = GOOD_BUILD + 'py_library(name = "extra", deps = [":nope"])\n'
  _one_error(_errors(tmp_path, build), ":extra", ":nope", "names no target")


def test_self_dep(tmp_path):
  build = GOOD_BUILD + 'py_library(name = "extra", deps = [":extra"])\n'
  _one_error(_errors(tmp_path, build), ":extra", "depends on itself")


def test_malformed_dep(tmp_path):
  build = GOOD_BUILD.replace('"@pypi//jax"', '"jax"', 1)
  _one_error(_errors(tmp_path, build), ":types", "'jax'")


@pytest.mark.parametrize(
  "source,module,owner",
  [
    ("from codeagent_rl import types\n", "codeagent_rl.types", ":types"),
    ("import codeagent_rl.types as t\n", "codeagent_rl.types", ":types"),
    ("import os, codeagent_rl.types\n", "codeagent_rl.types", ":types"),
    ("def f():\n  import codeagent_rl.types\n", "codeagent_rl.types", ":types"),
    ("from codeagent_rl import NAME\n", "codeagent_rl", ":codeagent_rl"),
    ("import codeagent_rl\n", "codeagent_rl", ":codeagent_rl"),
    ("from configs import tiny\n", "configs.tiny", ":configs"),
    ("from configs import NAME\n", "configs", ":configs"),
  ],
)
def test_import_without_dep(tmp_path, source, module, owner):
  errors = _errors(tmp_path, changes={"tests/rl/gae_test.py": source})
  _one_error(errors, "tests/rl/gae_test.py", f"imports {module} (", owner)


def test_relative_import_without_dep(tmp_path):
  changes = {"codeagent_rl/rl/losses.py": "from .. import types\n"}
  errors = _errors(tmp_path, changes=changes)
  _one_error(errors, "codeagent_rl/rl/losses.py", ":rl", ":types")


def test_import_of_missing_module(tmp_path):
  changes = {"tests/rl/gae_test.py": "import codeagent_rl.rl.nope\n"}
  errors = _errors(tmp_path, changes=changes)
  _one_error(errors, "imports codeagent_rl.rl.nope", "no file")


def test_import_of_file_in_no_target(tmp_path):
  changes = {
    "codeagent_rl/rl/kl.py": "",
    "tests/rl/gae_test.py": "from codeagent_rl.rl import kl\n",
  }
  errors = _errors(tmp_path, changes=changes)
  assert any("imports codeagent_rl.rl.kl" in e for e in errors), errors


def test_unparsable_source(tmp_path):
  errors = _errors(tmp_path, changes={"tests/rl/gae_test.py": "def (\n"})
  _one_error(errors, "tests/rl/gae_test.py", "cannot parse")


@pytest.mark.parametrize(
  "build,fragment",
  [
    ('py_library(name = "a", srcs = glob(["*.py"]))\n', "must be a literal"),
    ('cc_library(name = "a")\n', "unknown rule"),
    ('py_library("a")\n', "keyword arguments only"),
    ('py_library(srcs = ["a.py"])\n', "`name`"),
    ('py_library(name = "a", deps = ":b")\n', "`deps` must be a list"),
    ("x = 1\n", "expected a rule call"),
    ("py_library(\n", "syntax error"),
  ],
)
def test_parse_rejects(build, fragment):
  with pytest.raises(BuildFileError, match=fragment):
    parse_build(build)


# --- The repository itself ---------------------------------------------------


def test_repository_build_is_true():
  build = REPO_ROOT / "BUILD"
  targets = parse_build(build.read_text(), filename=str(build))
  errors = run_checks(targets, REPO_ROOT)
  assert not errors, "BUILD disagrees with the tree:\n" + "\n".join(errors)
