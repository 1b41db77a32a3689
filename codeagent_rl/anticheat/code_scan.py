"""One pass over a solution's AST: counts of everything the rules look for.

  scanned = code_scan.scan(code, entry_point, visible_tests)  # or None
  tree, s = scanned
  s.counts["harness"], s.exits(entry_point), s.count_sites("detection", ...)

`_Scan` resolves names through `code_resolve` (aliases, builtins, modules
reached by literal names, as `code_rules` describes) and counts uses;
`code_features` turns the counts into the feature vector's code part.

What the harness never runs is not scanned: in a function task (an entry
point is given) the body of a module-level `if __name__ == "__main__":`
(the harness imports the code as another module). Exits, kills and test
detection count only where they can run before or during the tests
(module-level code, the entry point and the functions they refer to; any
function, when code finds functions by computed names). A stdio program's
own exit (`sys.exit(0)` after printing) is how programs end; only kills
count there.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

from codeagent_rl.anticheat import code_resolve
from codeagent_rl.anticheat import code_rules as rules

# Nesting of literal `exec("...")` sources the scan follows.
_MAX_EXEC_DEPTH = 3


_COUNTS = (
  "test",
  "skip",
  "introspection",
  "tamper",
  "harness",
  "probe",
  "listing",
  "abs_path",
  "proc",
  "eq",
  "eq_const",
  "cmp",
  "builtin_subclass",
  "bare_except",
  "broad_except",
  "swallow",
  "specific_except",
  "keyed_branches",
  "keyed_lookups",
  "dynamic_import",
  "dynamic_code",
  "functions",
  "classes",
  "imports",
  "loops",
  "prints",
)


class _Scan(code_resolve.Resolver):
  """One pass over the module: counts of everything the rules look for.

  Exits, kills and test detection are recorded with the function they are
  in (`sites`) and counted after the pass, for the functions that can run
  (`reachable`).
  """

  def __init__(self, visible: rules.Visible, function_task: bool):
    super().__init__()
    self.visible = visible
    self.function_task = function_task
    self.defined: set[str] = set()  # names of the module's functions
    self.counts = dict.fromkeys(_COUNTS, 0)
    self.literal_keys: set[str] = set()
    self.eq_literals: set[str] = set()
    self.except_names: set[str] = set()
    self.scope: list[str] = []  # enclosing function names
    self.loops: list[int] = [0]  # loop depth per enclosing function
    # "exit", "kill", "detection" -> the scope of each occurrence.
    self.sites: dict[str, list[str | None]] = {
      "exit": [],
      "kill": [],
      "detection": [],
    }
    self.refs: dict[str | None, set[str]] = {}  # scope -> names it uses
    self.roots: set[str] = set()  # decorated functions: run unnamed
    self.computed_refs = False  # functions may be found by computed names
    self.exec_depth = 0

  def scan(self, tree: ast.Module) -> None:
    """Visits `tree` (once per scan)."""
    for node in ast.walk(tree):
      if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        self.defined.add(node.name)
    self.visit(tree)

  # Uses of modules and names -----------------------------------------------

  def _site(self, key: str) -> None:
    self.sites[key].append(self.scope[-1] if self.scope else None)

  def _ref(self, name: str) -> None:
    key = self.scope[-1] if self.scope else None
    self.refs.setdefault(key, set()).add(name)

  def _module_use(self, module: str) -> None:
    """An import of `module`, by statement or by a literal name."""
    root = module.split(".")[0]
    self.modules.add(root)
    if root in rules.TEST_MODULES:
      self.counts["test"] += 1
    if root in rules.PROC_MODULES:
      self.counts["proc"] += 1
    if root in rules.HARNESS_MODULES or (
      root == "__main__" and self.function_task
    ):
      self.counts["harness"] += 1
    self._name_use(module)

  def _name_use(self, name: str) -> None:
    """A use of a dotted (or bare builtin) name, called or not."""
    name = rules.bare(name)
    last = name.rsplit(".", 1)[-1]
    if name in rules.SELF_EXITS and "." in name:
      self._site("exit")
    if name in rules.KILLS:
      self._site("kill")
    if last in rules.TEST_NAMES and name.split(".")[0] in rules.TEST_MODULES:
      self.counts["test"] += 1
      self.counts["skip"] += 1
    if name in rules.INTROSPECTION_CALLS:
      self.counts["introspection"] += 1
    if name in rules.DETECTION_NAMES:
      self._site("detection")
    if name in rules.ENV_NAMES or name in rules.PARENT_NAMES:
      self.counts["harness"] += 1
      self.counts["probe"] += 1
    if name in rules.PROBE_NAMES:
      self.counts["probe"] += 1
    if name in rules.LISTING_CALLS:
      self.counts["listing"] += 1
    if rules.PROC_CALLS_RE.match(name):
      self.counts["proc"] += 1

  def _builtin_call(self, name: str, node: ast.Call) -> None:
    """A call of a bare builtin (possibly reached through `builtins`)."""
    if name in rules.SELF_EXITS:
      self._site("exit")
    if name in rules.DYNAMIC_CODE_CALLS:
      self._dynamic_code(node)
    if name in rules.TAMPER_CALLS and node.args:
      if self.reached(node.args[0]):
        self.counts["tamper"] += 1
    if name in ("getattr", "hasattr") and len(node.args) >= 2:
      computed = rules.string(node.args[1]) is None
      self.computed_refs |= computed
      if computed and self.reached(node.args[0]):
        self.counts["dynamic_import"] += 1
      elif name == "getattr" and self.resolve(node):
        self._name_use(self.resolve(node))
    if name in ("globals", "locals", "vars") and not node.args:
      self.computed_refs = True

  def _dynamic_code(self, node: ast.Call) -> None:
    """`exec`/`eval`/`compile`: a literal source is scanned, else counted."""
    source = rules.string(node.args[0]) if node.args else None
    if source is None:
      self.counts["dynamic_code"] += 1
      self.computed_refs = True
      return
    if self.exec_depth >= _MAX_EXEC_DEPTH:
      return
    tree = rules.parse(source)
    if tree is None:
      tree = rules.parse(source, mode="eval")
    if tree is not None:
      self.exec_depth += 1
      self.generic_visit(tree)
      self.exec_depth -= 1

  # Imports -----------------------------------------------------------------

  def visit_Import(self, node: ast.Import) -> None:
    self.counts["imports"] += 1
    for alias in node.names:
      bound = alias.asname or alias.name.split(".")[0]
      self.aliases[bound] = alias.name if alias.asname else bound
      self.imported.add(bound)
      self._module_use(alias.name)

  def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
    self.counts["imports"] += 1
    module = node.module or ""
    self._module_use(module)
    for alias in node.names:
      full = f"{module}.{alias.name}"
      self.aliases[alias.asname or alias.name] = full
      self.imported.add(alias.asname or alias.name)
      self._name_use(full)
      if module in ("builtins", "__builtin__"):
        self.aliases[alias.asname or alias.name] = alias.name

  # Calls, names, constants -------------------------------------------------

  def visit_Call(self, node: ast.Call) -> None:
    name = self.resolve(node.func)
    if name in rules.REACH_CALLS:
      target = rules.string(node.args[0]) if node.args else None
      if target is None:
        self.counts["dynamic_import"] += 1
      else:
        self._module_use(target)
    if name == "sys.modules.get" and node.args:
      target = rules.string(node.args[0])
      if target is None:
        self.counts["dynamic_import"] += 1
      else:
        self._module_use(target)
    if "." not in name:
      self._builtin_call(name, node)
    if name in ("print", "sys.stdout.write"):
      self.counts["prints"] += 1
    if name in rules.PROBE_CALLS and not code_resolve.std_fd(node):
      self.counts["probe"] += 1  # reading stdin by descriptor is honest
    if self.path_method(node.func):
      self.counts["probe"] += 1
      self.counts["listing"] += node.func.attr in rules.PATH_LISTING
    if code_resolve.harness_fd(name, node):
      self.counts["harness"] += 1
    if name in ("os.path.dirname", "os.path.split") and node.args:
      if self.is_cwd(node.args[0]):
        self.counts["harness"] += 1
    if name == "type" and len(node.args) == 3:
      self.counts["classes"] += 1
    if name in ("list", "sorted", "set", "tuple", "dict") and node.args:
      if self.is_sys_modules(node.args[0]):
        self._site("detection")
    if name.endswith(".isatty") and name.startswith("sys.std"):
      self._site("detection")
    self.generic_visit(node)

  def visit_Attribute(self, node: ast.Attribute) -> None:
    name = self.resolve(node)
    if name:
      self._name_use(name)
    self._ref(node.attr)
    if node.attr in rules.FRAME_ATTRS:
      self.counts["introspection"] += 1
    if node.attr in ("parent", "parents") and self.is_cwd(node.value):
      self.counts["harness"] += 1
    self.generic_visit(node)

  def visit_Subscript(self, node: ast.Subscript) -> None:
    base = self.resolve(node.value)
    if isinstance(node.ctx, ast.Load) and (
      base in ("sys.modules", "builtins", "builtins.__dict__")
    ):
      key = node.slice
      if rules.string(key) is not None:
        if base == "sys.modules":
          self._module_use(rules.string(key))
        else:
          self._name_use(self.resolve(node))
      elif isinstance(key, ast.Name) and key.id == "__name__":
        self.computed_refs = True  # the module itself
      else:
        self.counts["dynamic_import"] += 1
    self.generic_visit(node)

  def visit_Name(self, node: ast.Name) -> None:
    if node.id in ("__builtins__", "__builtin__"):
      self.counts["tamper"] += 1
    if node.id in rules.PROBE_NAMES:
      self.counts["probe"] += 1
    full = self.aliases.get(node.id)
    if full and full != node.id and "." in full:
      self._name_use(full)
    if isinstance(node.ctx, ast.Load):
      self._ref(node.id)

  def visit_Expr(self, node: ast.Expr) -> None:
    if rules.string(node.value) is None:  # docstrings hold prose, not paths
      self.generic_visit(node)

  def visit_Constant(self, node: ast.Constant) -> None:
    self._note_literal(node.value)
    value = node.value
    if isinstance(value, bytes):
      value = value.decode("latin-1")
    if not isinstance(value, str):
      return
    if value in rules.EQ_METHODS:
      self.counts["eq"] += 1
    if value in rules.FRAME_ATTRS:
      self.counts["introspection"] += 1
    if rules.HARNESS_PATH_RE.search(value):
      self.counts["harness"] += 1
    if rules.ABS_PATH_RE.match(value):
      self.counts["abs_path"] += 1

  def visit_Compare(self, node: ast.Compare) -> None:
    self.eq_literals.update(self._compared_keys(node))
    sides = [node.left, *node.comparators]
    if any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides):
      if self.scope or not rules.is_main_guard(node):
        self._site("detection")
    for op, right in zip(node.ops, node.comparators, strict=True):
      if isinstance(op, ast.In | ast.NotIn) and self.is_sys_modules(right):
        self._site("detection")
    self.generic_visit(node)

  # Assignments: aliases of reached modules, patches of modules --------------

  def _check_target(self, target: ast.AST) -> None:
    if isinstance(target, ast.Attribute | ast.Subscript):
      base = target.value
      while isinstance(base, ast.Attribute | ast.Subscript):
        base = base.value
      if isinstance(base, ast.Name) and (
        base.id in self.imported or base.id.startswith("__builtin")
      ):
        self.counts["tamper"] += 1
    elif isinstance(target, ast.Tuple | ast.List):
      for element in target.elts:
        self._check_target(element)

  def visit_Assign(self, node: ast.Assign) -> None:
    for target in node.targets:
      self._check_target(target)
    reached = self.reached(node.value)
    if reached and len(node.targets) == 1:
      target = node.targets[0]
      if isinstance(target, ast.Name):
        self.aliases[target.id] = reached
        if isinstance(node.value, ast.Call | ast.Subscript):
          self.imported.add(target.id)
    self.generic_visit(node)

  def visit_AugAssign(self, node: ast.AugAssign) -> None:
    self._check_target(node.target)
    self.generic_visit(node)

  def visit_Delete(self, node: ast.Delete) -> None:
    for target in node.targets:
      self._check_target(target)
    self.generic_visit(node)

  # Definitions, control flow -----------------------------------------------

  def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
    self.counts["functions"] += 1
    for item in (*node.decorator_list, node.args, node.returns):
      if item is not None:
        self.visit(item)
    if node.decorator_list:
      self.roots.add(node.name)
    self.scope.append(node.name)
    self.loops.append(0)
    for statement in node.body:
      self.visit(statement)
    self.loops.pop()
    self.scope.pop()

  visit_AsyncFunctionDef = visit_FunctionDef

  def visit_Lambda(self, node: ast.Lambda) -> None:
    self.counts["functions"] += 1
    self.generic_visit(node)

  def visit_ClassDef(self, node: ast.ClassDef) -> None:
    self.counts["classes"] += 1
    for base in node.bases:
      if self.resolve(base) in rules.BUILTIN_TYPES:
        self.counts["builtin_subclass"] += 1
    for item in node.body:
      if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
        returns = [
          n for n in rules.own_body(item.body) if isinstance(n, ast.Return)
        ]
        self._method(item.name, [r.value for r in returns])
      elif isinstance(item, ast.Assign):
        value = item.value
        results = [value.body] if isinstance(value, ast.Lambda) else [value]
        for t in item.targets:
          if isinstance(t, ast.Name):
            self._method(t.id, results)
    self.generic_visit(node)

  def _method(self, name: str, results: list[ast.AST | None]) -> None:
    """Counts an `__eq__`-like method; a constant result always matches."""
    if name in rules.EQ_METHODS:
      self.counts["eq"] += 1
    elif name in rules.CMP_METHODS:
      self.counts["cmp"] += 1
    if name in rules.ALWAYS_EQUAL_METHODS and results:
      if all(r is not None and rules.literal(r)[0] for r in results):
        self.counts["eq_const"] += 1

  def visit_Dict(self, node: ast.Dict) -> None:
    for key, value in zip(node.keys, node.values, strict=True):
      if rules.string(key) in rules.ALWAYS_EQUAL_METHODS and isinstance(
        value, ast.Lambda
      ):
        self.counts["eq_const"] += rules.literal(value.body)[0]
    self.generic_visit(node)

  def visit_If(self, node: ast.If) -> None:
    if self.function_task and not self.scope and rules.is_main_guard(node.test):
      # The harness imports the code as another module: never run.
      for item in node.orelse:
        self.visit(item)
      return
    keys = self._compared_keys(node.test)
    self.eq_literals.update(keys)
    returned = {
      rules.canon(v)
      for s in ast.walk(ast.Module(body=node.body, type_ignores=[]))
      if isinstance(s, ast.Return) and s.value is not None
      for ok, v in [rules.literal(s.value)]
      if ok
    }
    for key in keys:
      want = self.visible.output_of(key)
      if key in self.visible.inputs and (want is None or want in returned):
        self.counts["keyed_branches"] += 1
    self.generic_visit(node)

  def visit_For(self, node: ast.AST) -> None:
    self.counts["loops"] += 1
    if self.is_sys_modules(getattr(node, "iter", None)):
      self._site("detection")
    self.loops[-1] += 1
    self.generic_visit(node)
    self.loops[-1] -= 1

  visit_AsyncFor = visit_For
  visit_While = visit_For
  visit_comprehension = visit_For

  def visit_Raise(self, node: ast.Raise) -> None:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    name = self.resolve(exc) if exc is not None else ""
    if name.rsplit(".", 1)[-1] in rules.EXIT_EXCEPTIONS:
      self._site("exit")
    if name.rsplit(".", 1)[-1] in rules.TEST_NAMES:
      self.counts["test"] += 1
      self.counts["skip"] += 1
    self.generic_visit(node)

  def visit_Try(self, node: ast.Try) -> None:
    # Swallowing: a blanket handler that hides what failed behind a quiet
    # result, around a call of the module's own code (the solution), or
    # one that catches the exits. A handler that skips an item in a loop
    # (a filter) or turns a failed parse into an answer is honest.
    calls_own = any(
      isinstance(n, ast.Call)
      and isinstance(n.func, ast.Name)
      and n.func.id in self.defined
      for n in rules.own_body(node.body)
    )
    in_loop = self.loops[-1] > 0
    for handler in node.handlers:
      types = set(self._handler_types(handler))
      if not rules.quiet(handler.body):
        continue
      skips = all(isinstance(s, ast.Pass | ast.Continue) for s in handler.body)
      blanket = handler.type is None or types & (rules.BLANKET | {"Exception"})
      if blanket and (types & rules.BLANKET or (calls_own and not in_loop)):
        self.counts["swallow"] += not (in_loop and skips)
    self.generic_visit(node)

  visit_TryStar = visit_Try

  def _handler_types(self, handler: ast.ExceptHandler) -> list[str]:
    if handler.type is None:
      return []
    elts = (
      handler.type.elts
      if isinstance(handler.type, ast.Tuple)
      else [handler.type]
    )
    return [self.resolve(t).rsplit(".", 1)[-1] for t in elts]

  def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
    types = self._handler_types(node)
    self.except_names.update(types)
    if node.type is None or rules.BLANKET & set(types):
      self.counts["bare_except"] += 1
    elif "Exception" in types:
      self.counts["broad_except"] += 1
    else:
      self.counts["specific_except"] += 1
    self.generic_visit(node)

  # Literals and what they are compared with --------------------------------

  def _note_literal(self, value: Any) -> None:
    self.literal_keys.add(rules.canon(value))
    if isinstance(value, list | tuple | set | frozenset):
      for item in value:
        self._note_literal(item)
    elif isinstance(value, dict):
      for key, item in value.items():
        self._note_literal(key)
        self._note_literal(item)

  def generic_visit(self, node: ast.AST) -> None:
    ok, value = rules.literal(node)
    if ok and not isinstance(node, ast.Constant):
      self._note_literal(value)
      if isinstance(value, dict):
        self._keyed_dict(value)
      for child in ast.walk(node):  # paths inside a literal still count
        if isinstance(child, ast.Constant) and isinstance(child.value, str):
          self.visit_Constant(child)
      return
    super().generic_visit(node)

  def _keyed_dict(self, table: dict) -> None:
    matched = 0
    for key, value in table.items():
      want = self.visible.output_of(rules.canon(key))
      matched += want is not None and want == rules.canon(value)
    if matched and matched >= rules.KEYED_TABLE_MIN_SHARE * len(table):
      self.counts["keyed_lookups"] += matched

  def _compared_keys(self, test: ast.AST) -> set[str]:
    """Literal keys compared by `==` or `in` anywhere in `test`."""
    keys = set()
    for node in ast.walk(test):
      if not isinstance(node, ast.Compare):
        continue
      for op, right in zip(node.ops, node.comparators, strict=True):
        for side in (node.left, right):
          ok, value = rules.literal(side)
          if not ok:
            continue
          if isinstance(op, ast.Eq | ast.Is):
            keys.add(rules.canon(value))
          elif isinstance(op, ast.In) and isinstance(
            value, list | tuple | set | frozenset | dict
          ):
            keys.update(rules.canon(v) for v in value)
    return keys

  # After the pass ------------------------------------------------------------

  def reachable(self, entry: str | None) -> set[str | None] | None:
    """Scopes that can run under the tests; None: every scope.

    Module-level code, the entry point, decorated functions and dunder
    methods run; so does every function their code names. When code finds
    functions by computed names (`getattr(x, name)`, `globals()`, `eval`),
    any function can run.
    """
    if self.computed_refs:
      return None
    reached: set[str | None] = {None, entry, *self.roots}
    reached.update(
      n for n in self.refs if n and n.startswith("__") and n.endswith("__")
    )
    todo = list(reached)
    while todo:
      for name in self.refs.get(todo.pop(), ()):
        if name in self.defined and name not in reached:
          reached.add(name)
          todo.append(name)
    return reached

  def count_sites(self, key: str, entry: str | None) -> int:
    """Occurrences of `key` (see `sites`) in scopes that can run."""
    reached = self.reachable(entry)
    return sum(reached is None or s in reached for s in self.sites[key])

  def exits(self, entry: str | None) -> int:
    """Exits and kills that can run before or during the tests.

    Args:
      entry: the entry point (None for a stdio program, where only kills
        count: its own exit ends the program, as programs end).
    """
    kills = self.count_sites("kill", entry)
    return kills + (self.count_sites("exit", entry) if entry else 0)


def scan(
  code: str, entry_point: str | None, visible_tests: Sequence[dict]
) -> tuple[ast.Module, _Scan] | None:
  """(tree, scan) of `code`; None when it does not parse.

  Args:
    code: Python source.
    entry_point: the function the tests call (None for programs).
    visible_tests: the task's visible tests.
  """
  tree = rules.parse(code)
  if tree is None:
    return None
  scan = _Scan(
    rules.Visible(visible_tests), function_task=entry_point is not None
  )
  try:
    scan.scan(tree)
  except RecursionError:  # a deeply nested expression: treat as unparsable
    return None
  return tree, scan
