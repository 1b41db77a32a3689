"""Imports run one way: down DESIGN.md's layers, never up, never in a cycle.

Every `codeagent_rl` module belongs to a unit (a subpackage, or a top-level
module); each unit sits on a layer. A module may import its own unit and
the units of lower layers only. The pure units (math, models, the
anti-cheat's stage functions) import no host-side unit at all, and the
sandbox nothing of the project above itself. The checks are plain functions
of an import graph, so the first tests feed them small graphs and watch
each one fail; the last ones run them on the package.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "codeagent_rl"

# Bottom to top. A unit is the first package level below codeagent_rl, or
# a longer dotted prefix where a subpackage has a layer of its own.
LAYERS = (
  # Stdlib-only helpers every layer may use (cli: absl flags too;
  # jit_cache: jax.jit, shared by equal settings).
  (
    "status",
    "plain_repr",
    "solved",
    "config_utils",
    "logs",
    "jsonl",
    "cli",
    "jit_cache",
  ),
  # The pytrees; the sandbox (imports nothing of the project above this).
  ("types", "sandbox"),
  # Tasks (schema, families, judge, suite B) run code in the sandbox; the
  # model and the RL math are pure.
  ("tasks", "models", "rl"),
  # The environment; meshes and checkpoints of models; what a run ran on.
  ("envs", "parallel", "provenance"),
  # The anti-cheat (its stage functions pure, its pipeline over outcomes).
  ("anticheat",),
  # Samples files of episodes; the agent loop.
  ("samples", "rollout"),
  # The corpus builder and classifier training: tools, not runtime.
  ("anticheat.corpus",),
  # The trainer and the grading CLI.
  ("train", "grade"),
  # Exports what the trainer left in a workdir.
  ("export_hf",),
  # The entry points: the main job, experiments over many runs of it.
  ("main", "experiments"),
)

# Units that must not import anything host-side (I/O, sandbox, tasks ...).
PURE = {
  "rl": {"status", "config_utils", "types"},
  "models": {"status", "config_utils", "jit_cache"},
  "anticheat.stage1": {"status", "config_utils", "types", "anticheat"},
  "anticheat.stage2": {"status", "config_utils", "types", "anticheat"},
}
# What the pure anti-cheat modules may import inside their own unit.
PURE_ANTICHEAT_SIBLINGS = {
  "codeagent_rl.anticheat.config",
  "codeagent_rl.anticheat.names",
  "codeagent_rl.anticheat.stage1",
  "codeagent_rl.anticheat.stage2",
}


def layer_of(unit: str) -> int:
  """The index in `LAYERS` of `unit` (ValueError: on no layer)."""
  for i, units in enumerate(LAYERS):
    if unit in units:
      return i
  raise ValueError(f"unit {unit!r} is on no layer: add it to LAYERS.")


def unit_of(module: str) -> str:
  """The unit of a dotted module name inside codeagent_rl."""
  parts = module.split(".")[1:]
  if not parts:
    return "codeagent_rl"
  if parts[:2] == ["anticheat", "corpus"]:
    return "anticheat.corpus"
  return parts[0]


def _module_name(path: pathlib.Path) -> str:
  rel = path.relative_to(PACKAGE.parent).with_suffix("")
  parts = list(rel.parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def _from_import(module: str, name: str) -> str:
  """`from module import name`: the submodule `name` if there is one."""
  base = PACKAGE.parent.joinpath(*module.split("."), name)
  if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
    return f"{module}.{name}"
  return module


def _imports(tree: ast.AST) -> set[str]:
  """The codeagent_rl modules a parsed file imports (absolute imports)."""
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      out.update(_from_import(node.module, a.name) for a in node.names)
  return {
    m for m in out if m == "codeagent_rl" or m.startswith("codeagent_rl.")
  }


def package_graph() -> dict[str, set[str]]:
  """Maps each module of the package to the codeagent_rl modules it imports."""
  return {
    _module_name(path): _imports(ast.parse(path.read_text(), str(path)))
    for path in sorted(PACKAGE.rglob("*.py"))
  }


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
  """Imports that go to a higher layer, or sideways to another unit."""
  bad = []
  for module, imported in sorted(graph.items()):
    unit = unit_of(module)
    if unit == "codeagent_rl":
      continue
    for target in sorted(imported):
      other = unit_of(target)
      if other in (unit, "codeagent_rl"):
        continue
      if layer_of(other) >= layer_of(unit):
        bad.append(f"{module} -> {target}")
  return bad


def impure_imports(graph: dict[str, set[str]]) -> list[str]:
  """Imports of a pure module that reach beyond what `PURE` allows it."""
  bad = []
  for module, imported in sorted(graph.items()):
    key = ".".join(module.split(".")[1:3])
    allowed = PURE.get(key) or PURE.get(unit_of(module))
    if allowed is None:
      continue
    for target in sorted(imported):
      other = unit_of(target)
      if other == unit_of(module) == "anticheat":
        if target not in PURE_ANTICHEAT_SIBLINGS:
          bad.append(f"{module} -> {target}")
      elif other not in allowed and other != unit_of(module):
        bad.append(f"{module} -> {target}")
  return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """Import cycles between modules (each found once, as a path)."""
  found, state = [], {}

  def visit(node, path):
    state[node] = "open"
    for nxt in sorted(graph.get(node, ())):
      if nxt not in graph:
        continue
      if state.get(nxt) == "open":
        found.append(path[path.index(nxt) :] + [nxt])
      elif nxt not in state:
        visit(nxt, [*path, nxt])
    state[node] = "done"

  for node in sorted(graph):
    if node not in state:
      visit(node, [node])
  return found


def test_an_upward_import_is_caught():
  graph = {
    "codeagent_rl.sandbox.cli": {"codeagent_rl.tasks.schema"},
    "codeagent_rl.tasks.schema": {"codeagent_rl.status"},
  }
  assert upward_imports(graph) == [
    "codeagent_rl.sandbox.cli -> codeagent_rl.tasks.schema"
  ]


def test_a_sideways_import_is_caught():
  graph = {"codeagent_rl.models.sampler": {"codeagent_rl.rl.losses"}}
  assert upward_imports(graph) == [
    "codeagent_rl.models.sampler -> codeagent_rl.rl.losses"
  ]


def test_the_corpus_is_above_the_runtime_anticheat():
  graph = {
    "codeagent_rl.anticheat.pipeline": {"codeagent_rl.anticheat.corpus.hacks"},
    "codeagent_rl.anticheat.corpus.hacks": {"codeagent_rl.samples"},
  }
  assert upward_imports(graph) == [
    "codeagent_rl.anticheat.pipeline -> codeagent_rl.anticheat.corpus.hacks"
  ]


def test_a_pure_module_importing_the_scanner_is_caught():
  graph = {
    "codeagent_rl.anticheat.stage1": {"codeagent_rl.anticheat.code_scan"},
    "codeagent_rl.rl.gae": {"codeagent_rl.sandbox.jobs"},
  }
  assert impure_imports(graph) == [
    "codeagent_rl.anticheat.stage1 -> codeagent_rl.anticheat.code_scan",
    "codeagent_rl.rl.gae -> codeagent_rl.sandbox.jobs",
  ]


def test_a_cycle_is_caught():
  graph = {
    "codeagent_rl.a": {"codeagent_rl.b"},
    "codeagent_rl.b": {"codeagent_rl.c"},
    "codeagent_rl.c": {"codeagent_rl.a"},
  }
  assert cycles(graph) == [
    ["codeagent_rl.a", "codeagent_rl.b", "codeagent_rl.c", "codeagent_rl.a"]
  ]


def test_a_unit_on_no_layer_is_named():
  with pytest.raises(ValueError, match="'newpkg' is on no layer"):
    upward_imports({"codeagent_rl.newpkg.x": {"codeagent_rl.status"}})


def test_the_package_imports_only_downwards():
  assert upward_imports(package_graph()) == []


def test_the_pure_modules_import_nothing_host_side():
  assert impure_imports(package_graph()) == []


def test_the_package_has_no_import_cycle():
  assert cycles(package_graph()) == []


# Heavy optional packages the main job, grading and the CLIs' --help never
# need. tensorboardX imports torch whenever torch is installed (1.2 s of
# every process's start), so it may load only when a run writes its events.
HEAVY = ("torch", "ray", "xmanager", "transformers", "tensorboardX")


def test_the_entry_points_import_no_heavy_optional_package():
  import subprocess  # noqa: PLC0415
  import sys  # noqa: PLC0415

  code = (
    "import sys\n"
    "import codeagent_rl.main, codeagent_rl.grade, codeagent_rl.export_hf\n"
    f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
  )
  proc = subprocess.run(
    [sys.executable, "-c", code],
    cwd=PACKAGE.parent,
    capture_output=True,
    text=True,
    timeout=120,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.strip() == "[]"
