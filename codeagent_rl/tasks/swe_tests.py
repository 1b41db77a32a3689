"""Pytest tests -> call tests: which tests of a SWE-style record convert.

  tests = swe_tests.convert_test("tests/test_a.py::test_x", tested, reference)

`tested` is the test-patched files (path -> text), `reference` the
gold-patched ones; each returned test is a call test of the `repo` task
kind (`repo_schema`). `swe_convert` uses it on every FAIL_TO_PASS and
PASS_TO_PASS node id of a record.

Which tests convert. A node id is looked up in the test-patched files. It
converts when it names a module-level `def test_x():` without parameters
(fixtures) or decorators, whose body is an optional docstring and `assert
CALL == LITERAL` (or `LITERAL == CALL`) statements; each assert is one
call test. CALL is `f(...)` or `m.f(...)` (`m` may be dotted), `f` or `m`
bound by the module's own absolute imports (`from a.b import f [as g]`,
`import a.b [as m]`, `from a import b`), resolving to `pkg.mod.f` where
`pkg.mod` is a module of the reference workspace (`repo_schema.module_file`)
and not a test file. Arguments, keywords and the expected value are
`ast.literal_eval` literals (no `*` or `**`) a task file holds: tuples and
sets keep their type (`wire`), and the judge wants a tuple where one is
expected, as `==` does; bytes, complex and `...` are refused. The module's
top level may only import, define (decorators from `pytest`, literal
defaults), assign literals and hold `if __name__ == "__main__":`, with no
setup_module, setup_function or teardown; neither it nor a conftest.py
above it may pass `autouse=` (a fixture around every test): the call tests
would skip what these run. Anything else does not convert, with its
reason: a test in a class, a parametrized id (`test_x[1]`), fixtures,
decorators, `pytest.raises`, loops or any other statement, a comparison
other than one `==`, a non-literal argument, a call of no workspace
function.
"""

from __future__ import annotations

import ast
from typing import Any

from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import repo_schema

# Module-level functions pytest runs around a module's tests.
_SETUP_NAMES = ("setup_module", "teardown_module", "setup_function")
_SETUP_NAMES += ("teardown_function", "setup", "teardown")
_MAIN_GUARDS = ("__name__ == '__main__'", "'__main__' == __name__")


class NotConverted(ValueError):
  """A record or test that does not convert.

  `reason` is what reports count (a record's starts with its field);
  `detail` names the test, path or value.
  """

  def __init__(self, reason: str, detail: str = ""):
    super().__init__(f"{reason}: {detail}" if detail else f"{reason}.")
    self.reason, self.detail = reason, detail


def is_test_path(path: str) -> bool:
  """`test_*.py`, `*_test.py`, or anything under a `tests/` folder."""
  *folders, name = path.split("/")
  named = name.startswith("test_") or name.endswith("_test.py")
  return (named and name.endswith(".py")) or "tests" in folders


def _literal(node: ast.expr, what: str, where: str) -> Any:
  """The value of a literal that a task file can hold; else raises."""
  try:
    value = ast.literal_eval(node)
    wire.encode(value)
  except wire.EncodeError as e:
    raise NotConverted(f"{what} is not plain data", f"{where}: {e}") from None
  except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
    shown = f"{where}: {ast.unparse(node)[:60]}"
    raise NotConverted(f"{what} is not a literal", shown) from None
  return value


def _is_literal(node: ast.expr | None) -> bool:
  """Whether `node` is absent or a literal `_literal` takes."""
  if node is None:
    return True
  try:
    _literal(node, "", "")
  except NotConverted:
    return False
  return True


def _dotted(node: ast.expr) -> list[str] | None:
  """`a.b.c` -> ["a", "b", "c"]; None for anything but dotted names."""
  if isinstance(node, ast.Attribute):
    base = _dotted(node.value)
    return None if base is None else [*base, node.attr]
  return [node.id] if isinstance(node, ast.Name) else None


def _parse(path: str, text: str) -> ast.Module:
  try:
    return ast.parse(text, path)
  except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
    detail = f"{path}: {type(e).__name__}: {e}"
    raise NotConverted("test module does not parse", detail) from None


def _is_docstring(node: ast.stmt) -> bool:
  value = getattr(node, "value", None)
  return isinstance(value, ast.Constant) and isinstance(value.value, str)


def _inert(node: ast.stmt) -> list[str] | None:
  """The names a top-level statement binds; None if it runs code at import.

  Decorators from `pytest`, class bases that are names, and literal values
  and defaults run nothing of the project's.
  """
  if isinstance(node, ast.Pass) or _is_docstring(node):
    return []
  if isinstance(node, ast.Assign | ast.AnnAssign):
    targets = getattr(node, "targets", None) or [node.target]
    names = all(isinstance(t, ast.Name) for t in targets)
    return (
      [t.id for t in targets] if names and _is_literal(node.value) else None
    )
  functions = ast.FunctionDef | ast.AsyncFunctionDef
  if not isinstance(node, functions | ast.ClassDef):
    return None
  for decorator in node.decorator_list:
    call = decorator.func if isinstance(decorator, ast.Call) else decorator
    if (_dotted(call) or [""])[0] != "pytest":
      return None
  if isinstance(node, functions):
    defaults = [*node.args.defaults, *node.args.kw_defaults]
    return [node.name] if all(map(_is_literal, defaults)) else None
  bases = all(map(_dotted, node.bases)) and not node.keywords
  inner = [_inert(statement) for statement in node.body]
  return [node.name] if bases and None not in inner else None


def _scan_module(path: str, tested: dict) -> tuple[dict, dict]:
  """(name -> its last top-level binding, name -> imported dotted path).

  An imported path is None where the name is not bound by an absolute
  import. Raises NotConverted where the module (or a conftest.py above it)
  runs code the call tests would skip: see the module docstring.
  """
  tree = _parse(path, tested[path])
  folders = path.split("/")[:-1]
  conftests = [
    "/".join([*folders[:depth], "conftest.py"])
    for depth in range(len(folders) + 1)
  ]
  for where in [path, *conftests]:
    nodes = ast.walk(_parse(where, tested[where])) if where in tested else ()
    if any(
      k.arg == "autouse" for n in nodes for k in getattr(n, "keywords", ())
    ):
      raise NotConverted("autouse fixture", where)
  last, imports = {}, {}
  for node in tree.body:
    if isinstance(node, ast.Import):
      names = [a.asname or a.name.partition(".")[0] for a in node.names]
      bound = [
        (name, alias.name if alias.asname else name)
        for name, alias in zip(names, node.names, strict=True)
      ]
    elif isinstance(node, ast.ImportFrom) and node.names[0].name == "*":
      imports = dict.fromkeys(imports)  # any name may have been rebound
      continue
    elif isinstance(node, ast.ImportFrom):
      ours = node.level == 0 and node.module
      bound = [
        (a.asname or a.name, f"{node.module}.{a.name}" if ours else None)
        for a in node.names
      ]
    elif isinstance(node, ast.If) and ast.unparse(node.test) in _MAIN_GUARDS:
      continue  # pytest does not run it
    else:
      names = _inert(node)
      if names is None or getattr(node, "name", "") in _SETUP_NAMES:
        shown = ast.unparse(node).split("\n")[0][:60]
        raise NotConverted("module runs code at import", f"{path}: {shown}")
      bound = [(name, None) for name in names]
    for name, dotted in bound:
      last[name], imports[name] = node, dotted
  return last, imports


def _call_test(
  assertion: ast.stmt, imports: dict, reference: dict, where: str
) -> dict:
  """One `assert CALL == LITERAL` as a call test; else raises."""
  if not isinstance(assertion, ast.Assert):
    kind = type(assertion).__name__.lower()
    raise NotConverted(f"{kind} statement in the body", where)
  test = assertion.test
  if (
    not isinstance(test, ast.Compare)
    or test.ops[1:]
    or not isinstance(test.ops[0], ast.Eq)
  ):
    raise NotConverted("assert is not one ==", where)
  sides = [(test.left, test.comparators[0]), (test.comparators[0], test.left)]
  sides = [(call, want) for call, want in sides if isinstance(call, ast.Call)]
  taken = [(call, want) for call, want in sides if _is_literal(want)]
  if not taken:
    if sides:  # raises why the expected value is not taken
      _literal(sides[0][1], "expected value", where)
    raise NotConverted("assert compares no call", where)
  call, want = taken[0]
  parts = _dotted(call.func)
  base = imports.get(parts[0]) if parts else None
  target = ".".join([base, *parts[1:]]) if base else ast.unparse(call.func)
  path = repo_schema.module_file(reference, target.rpartition(".")[0])
  if base is None or path is None or is_test_path(path):
    detail = f"{where}: {target[:60]} is not in a workspace module"
    raise NotConverted("call of no workspace function", detail)
  if any(isinstance(a, ast.Starred) for a in call.args) or any(
    k.arg is None for k in call.keywords
  ):
    raise NotConverted("argument is not a literal", f"{where}: * or **")
  out = {
    "call": target,
    "args": [_literal(a, "argument", where) for a in call.args],
  }
  if call.keywords:
    out["kwargs"] = {
      k.arg: _literal(k.value, "argument", where) for k in call.keywords
    }
  return {**out, "expected": _literal(want, "expected value", where)}


def convert_test(node_id: str, tested: dict, reference: dict) -> list[dict]:
  """The call tests of one pytest node id, one per assert.

  Args:
    node_id: `path::test_name`.
    tested: path -> text of the test-patched repository.
    reference: path -> text of the reference workspace.

  Raises:
    NotConverted: naming why (see the module docstring).
  """
  path, _, name = node_id.partition("::")
  if "::" in name:
    raise NotConverted("test in a class", node_id)
  if "[" in name:
    raise NotConverted("parametrized test", node_id)
  if path not in tested or not path.endswith(".py"):
    raise NotConverted("test not found", node_id)
  last, imports = _scan_module(path, tested)
  node = last.get(name)
  if node is None:
    raise NotConverted("test not found", node_id)
  if not isinstance(node, ast.FunctionDef):
    raise NotConverted("test is not a plain def", node_id)
  if node.decorator_list:
    raise NotConverted("decorated test", node_id)
  args = node.args
  if any(
    (args.posonlyargs, args.args, args.kwonlyargs, args.vararg, args.kwarg)
  ):
    raise NotConverted("test takes fixtures", node_id)
  body = node.body[1:] if _is_docstring(node.body[0]) else node.body
  if not body:
    raise NotConverted("test has no assert", node_id)
  return [
    _call_test(stmt, imports, reference, f"{node_id} line {stmt.lineno}")
    for stmt in body
  ]
