"""How `code_scan` resolves names: aliases, builtins, modules reached by name.

`Resolver` is the base of the scan: it holds what the code bound (import
aliases, names bound to modules, the roots of the modules it reached) and
answers what a node refers to, as `code_rules` describes (`builtins.x`,
`getattr(builtins, "x")` and `vars(builtins)["x"]` are the bare builtin
`x`; `__import__("os")`, `importlib.import_module("os")`,
`sys.modules["os"]` are `os`). The scan fills the bindings as it visits
imports and assignments; `std_fd` and `harness_fd` read the descriptor a
call names.
"""

from __future__ import annotations

import ast

from codeagent_rl.anticheat import code_rules as rules


class Resolver(ast.NodeVisitor):
  """Names as the code binds them; the scan records bindings as it goes.

  Attributes:
    aliases: bound name -> the dotted name it stands for.
    imported: names bound to modules by the code.
    modules: roots of the modules the code reached.
  """

  def __init__(self):
    self.aliases: dict[str, str] = {}
    self.imported: set[str] = set()
    self.modules: set[str] = {"builtins"}

  def resolve(self, node: ast.AST) -> str:
    """The dotted name `node` refers to, or "" (see `code_rules`)."""
    if isinstance(node, ast.Name):
      if node.id in ("__builtins__", "__builtin__"):
        return "builtins"
      return self.aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
      base = self.resolve(node.value)
      if not base:
        return ""
      if base == "builtins" and node.attr == "__dict__":
        return "builtins.__dict__"
      return rules.bare(f"{base}.{node.attr}")
    if isinstance(node, ast.Call):
      func = self.resolve(node.func)
      if func in rules.REACH_CALLS and node.args:
        return rules.string(node.args[0]) or ""
      if func == "getattr" and len(node.args) >= 2:
        base, attr = self.resolve(node.args[0]), rules.string(node.args[1])
        return rules.bare(f"{base}.{attr}") if base and attr else ""
      if func == "vars" and len(node.args) == 1:
        base = self.resolve(node.args[0])
        return "builtins.__dict__" if base == "builtins" else ""
      return ""
    if isinstance(node, ast.Subscript):
      base, key = self.resolve(node.value), rules.string(node.slice)
      if key is None:
        return ""
      if base == "sys.modules":
        return key
      if base in ("builtins", "builtins.__dict__"):
        return rules.bare(f"builtins.{key}")
      if key == "__builtins__" and base == "globals":
        return "builtins"
    return ""

  def reached(self, node: ast.AST) -> str:
    """`resolve(node)` when it names a module or something in one."""
    name = self.resolve(node)
    root = name.split(".")[0]
    if root in self.modules or isinstance(node, ast.Call | ast.Subscript):
      return name
    return ""

  def path_method(self, func: ast.AST) -> bool:
    """Whether `func` is a file-touching method of a `pathlib` path."""
    if not (
      isinstance(func, ast.Attribute) and func.attr in rules.PATH_METHODS
    ):
      return False
    base = func.value
    while isinstance(base, ast.Attribute | ast.Subscript | ast.BinOp):
      base = base.left if isinstance(base, ast.BinOp) else base.value
    if isinstance(base, ast.Call):
      base = base.func
    return self.resolve(base).startswith("pathlib.")

  def is_cwd(self, node: ast.AST) -> bool:
    """Whether `node` is the current directory (`os.getcwd()`, ...)."""
    if not isinstance(node, ast.Call):
      return False
    func = self.resolve(node.func)
    if func in rules.CWD_CALLS:
      return True
    if func in ("os.path.abspath", "os.path.realpath") and node.args:
      return rules.string(node.args[0]) in (".", "") or (
        self.resolve(node.args[0]) == "os.curdir"
      )
    if isinstance(node.func, ast.Attribute) and node.func.attr in (
      "resolve",
      "absolute",
    ):
      inner = node.func.value
      return (
        isinstance(inner, ast.Call)
        and self.resolve(inner.func) in ("pathlib.Path", "pathlib.PurePath")
        and all(rules.string(a) in (".", "") for a in inner.args)
      )
    return False

  def is_sys_modules(self, node: ast.AST) -> bool:
    """`sys.modules` or its keys(): which modules are loaded."""
    if isinstance(node, ast.Call) and not node.args:
      node = node.func
      if isinstance(node, ast.Attribute) and node.attr in ("keys", "items"):
        node = node.value
    return self.resolve(node) == "sys.modules"


def std_fd(node: ast.Call) -> bool:
  """Whether the call's first argument is descriptor 0, 1 or 2."""
  ok, value = rules.literal(node.args[0]) if node.args else (False, None)
  return ok and type(value) is int and 0 <= value < rules.FIRST_HARNESS_FD


def harness_fd(name: str, node: ast.Call) -> bool:
  """Whether a descriptor call names one of the harness's descriptors."""
  if name not in rules.FD_CALLS:
    return False
  args = node.args if name in ("os.dup2", "os.closerange") else node.args[:1]
  args = [*args, *(k.value for k in node.keywords if k.arg == "fileno")]
  for arg in args:
    ok, value = rules.literal(arg)
    if ok and type(value) is int and value >= rules.FIRST_HARNESS_FD:
      return True
  return False
