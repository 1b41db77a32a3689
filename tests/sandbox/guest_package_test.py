"""The files shipped into the sandbox: stdlib only, complete, self-sufficient.

The sandbox interpreter runs with `-I -S` and holds nothing of the project
but `worker.GUEST_FILES` (under gVisor, a copy of them at /sandbox), so a
shipped file may import the standard library and the other shipped files,
nothing else. `shipped_import_errors` checks that statically; the last test
starts the guest from a copy of exactly those files.
"""

import ast
import os
import posixpath
import shutil
import sys

import pytest

from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import worker

# How the guest package loads a shipped top-level module by path.
_LOADER = "_load_sibling"


def _top_level_names(source: str) -> set[str]:
  """Names a module binds at its top level (assignments, defs, imports)."""
  names = set()
  for node in ast.parse(source).body:
    if isinstance(node, ast.Assign):
      names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    elif isinstance(node, ast.FunctionDef | ast.ClassDef):
      names.add(node.name)
    elif isinstance(node, ast.Import | ast.ImportFrom):
      names |= {(a.asname or a.name).split(".")[0] for a in node.names}
  return names


def _relative_errors(path: str, node: ast.ImportFrom, files: dict) -> list:
  """What of `from <dots><module> import <names>` in `path` is not shipped."""
  package = posixpath.dirname(path)
  for _ in range(node.level - 1):
    package = posixpath.dirname(package)
  init = posixpath.join(package, "__init__.py")
  where = f"{path}:{node.lineno}"
  if not package or init not in files:
    return [f"{where}: a relative import above the shipped package"]
  if node.module:
    base = posixpath.join(package, *node.module.split("."))
    if f"{base}.py" in files or f"{base}/__init__.py" in files:
      return []
    return [f"{where}: .{node.module} is not shipped"]
  errors = []
  for alias in node.names:
    shipped = posixpath.join(package, alias.name + ".py") in files
    if not (shipped or alias.name in _top_level_names(files[init])):
      errors.append(f"{where}: {alias.name} is neither shipped nor in {init}")
  return errors


def shipped_import_errors(files: dict[str, str]) -> list[str]:
  """The imports of shipped files that the sandbox interpreter cannot do.

  Absolute imports must name the standard library (`-I` puts no shipped
  directory on `sys.path`); relative ones must reach a shipped module or a
  name of the package's `__init__.py`; `_load_sibling("x")` must name a
  shipped top-level `x.py`.

  Args:
    files: shipped path (relative to the shipped root) -> source.

  Returns:
    One message per import that would fail or reach the project.
  """
  errors = []
  for path, source in sorted(files.items()):
    for node in ast.walk(ast.parse(source, filename=path)):
      where = f"{path}:{getattr(node, 'lineno', 0)}"
      if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0:
        modules = [node.module]
      elif isinstance(node, ast.ImportFrom):
        errors += _relative_errors(path, node, files)
        continue
      elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == _LOADER
      ):
        arg = node.args[0] if node.args else None
        name = arg.value if isinstance(arg, ast.Constant) else None
        if not (isinstance(name, str) and f"{name}.py" in files):
          errors.append(f"{where}: {_LOADER}({name!r}) loads no shipped file")
        continue
      else:
        continue
      for module in modules:
        if module.split(".")[0] not in sys.stdlib_module_names:
          errors.append(f"{where}: imports {module}, not standard library")
  return errors


def _shipped_sources() -> dict[str, str]:
  return {
    name: (worker.GUEST_DIR / name).read_text() for name in worker.GUEST_FILES
  }


def test_shipped_files_import_only_stdlib_and_each_other():
  assert shipped_import_errors(_shipped_sources()) == []


def test_every_module_of_the_guest_package_is_shipped():
  package = worker.GUEST_DIR / "guest"
  on_disk = {f"guest/{p.name}" for p in package.glob("*.py")}
  listed = {name for name in worker.GUEST_FILES if name.startswith("guest/")}
  assert on_disk == listed
  assert not [p for p in package.iterdir() if p.is_dir() and p.name[0] != "_"]
  assert worker.GUEST_MAIN in worker.GUEST_FILES


_PACKAGE_INIT = "import os\nwire = 1\n"


@pytest.mark.parametrize(
  "path,source,fragment",
  [
    ("guest/a.py", "import numpy\n", "imports numpy"),
    ("guest/a.py", "import os.path, absl.flags\n", "imports absl.flags"),
    ("guest/a.py", "def f():\n  import jax\n", "imports jax"),
    (
      "guest/a.py",
      "from codeagent_rl.sandbox import wire\n",
      "imports codeagent_rl.sandbox",
    ),
    ("guest/a.py", "import wire\n", "imports wire"),
    ("guest/a.py", "from . import nope\n", "nope is neither shipped"),
    ("guest/a.py", "from .nope import x\n", ".nope is not shipped"),
    ("guest/a.py", "from .. import wire\n", "above the shipped package"),
    ("wire.py", "from . import x\n", "above the shipped package"),
    ("guest/a.py", "m = _load_sibling('jobs')\n", "_load_sibling('jobs')"),
  ],
)
def test_checker_flags_what_the_sandbox_lacks(path, source, fragment):
  files = {
    "guest/__init__.py": _PACKAGE_INIT,
    "guest/b.py": "",
    "wire.py": "",
    path: source,
  }
  errors = shipped_import_errors(files)
  assert len(errors) == 1 and fragment in errors[0], errors


def test_checker_accepts_stdlib_and_shipped_modules():
  files = {
    "guest/__init__.py": _PACKAGE_INIT + "m = _load_sibling('wire')\n",
    "guest/a.py": (
      "import os, json\nfrom collections import abc\n"
      "from . import b\nfrom . import wire\nfrom .b import x\n"
    ),
    "guest/b.py": "x = 1\n",
    "wire.py": "from __future__ import annotations\nimport struct\n",
  }
  assert shipped_import_errors(files) == []


def test_guest_runs_from_a_copy_of_the_shipped_files(tmp_path):
  root = tmp_path / "shipped"
  for name in worker.GUEST_FILES:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(worker.GUEST_DIR / name, root / name)
  scratch = tmp_path / "scratch"
  scratch.mkdir()
  config = config_lib.SandboxConfig()
  guest_config = {
    "scratch_root": str(scratch),
    "uid": None,
    "gid": None,
    "kill_scope": "descendants",
    "proc": "/proc",
    "parent_pid": os.getpid(),
  }
  guest = worker.GuestProcess(
    worker.guest_command(config.python, str(root), guest_config),
    name="guest-copy",
    startup_timeout_s=config.startup_timeout_s,
    max_reply_bytes=worker.max_reply_bytes(config),
  )
  try:
    function = jobs.Job.function(
      "def f(x):\n  return x, {x}\n", "f", [((2,), {}), (("a",), {})]
    )
    program = jobs.Job.program("print(input()[::-1])\n", ["abc\n", "xy\n"])
    got_function = jobs.result_from_reply(
      guest.run(function.to_frame(1, config), 30), function
    )
    got_program = jobs.result_from_reply(
      guest.run(program.to_frame(2, config), 30), program
    )
  finally:
    guest.close()
  assert [t.output for t in got_function.tests] == [(2, {2}), ("a", {"a"})]
  assert [t.stdout for t in got_program.tests] == ["cba\n", "yx\n"]
