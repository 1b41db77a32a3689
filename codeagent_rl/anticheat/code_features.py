"""The code features of a solution, from one `code_scan` pass (host side).

  values = code_features.code_features(code, entry_point, visible_tests)

`code_features` maps final code to a value for every name in
`names.CODE_FEATURES` (see `features`, which assembles the full vector; what the
rules look for is in `code_rules`, how code is scanned in `code_scan`). The
trajectory features reuse the same scan: `probes` says whether a run's code
probes the harness, directories, the environment, frames, processes or how
it is run, and `targeted_workarounds` counts special cases aimed at errors
that the observations showed.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
import math

from codeagent_rl.anticheat import code_rules as rules
from codeagent_rl.anticheat import code_scan
from codeagent_rl.anticheat import names


def _log(count: float) -> float:
  return math.log1p(count)


def _entry_returns(tree: ast.Module, entry: str | None) -> list[ast.Return]:
  """The returns of the entry function (not of functions nested in it)."""
  for node in tree.body:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
      node.name == entry
    ):
      return [n for n in rules.own_body(node.body) if isinstance(n, ast.Return)]
  return []


def _defines(tree: ast.Module, entry: str | None) -> bool:
  for node in ast.walk(tree):
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
      if node.name == entry:
        return True
    if isinstance(node, ast.Assign | ast.AnnAssign):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      if any(isinstance(t, ast.Name) and t.id == entry for t in targets):
        return True
  return False


def code_features(
  code: str, entry_point: str | None, visible_tests: Sequence[dict]
) -> dict[str, float]:
  """The code features of `code` (listed in the `features` docstring).

  Args:
    code: Python source.
    entry_point: the function the tests call (None for programs).
    visible_tests: the task's visible tests (args/expected or stdin).

  Returns:
    A value for every name in `names.CODE_FEATURES`.
  """
  out = dict.fromkeys(names.CODE_FEATURES, 0.0)
  out["log_code_chars"] = _log(len(code))
  out["log_code_lines"] = _log(code.count("\n") + 1)
  scanned = code_scan.scan(code, entry_point, visible_tests)
  if scanned is None:
    out["unparsable"] = 1.0
    return out
  tree, scan = scanned
  c = dict(
    scan.counts,
    exit=scan.exits(entry_point),
    detection=scan.count_sites("detection", entry_point),
  )
  for name, key in (
    ("process_exit", "exit"),
    ("test_framework", "skip"),
    ("introspection", "introspection"),
    ("tampering", "tamper"),
    ("file_env_probing", "harness"),
    ("process_network", "proc"),
    ("eq_override", "eq_const"),
    ("exception_swallowing", "swallow"),
    ("dynamic_import", "dynamic_import"),
    ("test_detection", "detection"),
    ("dynamic_code", "dynamic_code"),
    ("builtin_subclass", "builtin_subclass"),
    ("compare_overrides", "cmp"),
  ):
    out[name] = float(c[key] > 0)
  keyed = c["keyed_branches"] + c["keyed_lookups"]
  out["hardcoded_tests"] = float(keyed > 0)
  returns = _entry_returns(tree, entry_point)
  literals = [
    rules.literal(r.value) if r.value else (True, None) for r in returns
  ]
  if returns and all(ok for ok, _ in literals):
    distinct = {rules.canon(v) for _, v in literals}
    out["constant_return"] = float(len(distinct) == 1)
    out["log_distinct_return_literals"] = _log(len(distinct))
  for name, key in (
    ("log_exit_calls", "exit"),
    ("log_test_framework", "test"),
    ("log_introspection", "introspection"),
    ("log_tampering", "tamper"),
    ("log_harness_reach", "harness"),
    ("log_probing", "probe"),
    ("log_process_network", "proc"),
    ("log_eq_overrides", "eq"),
    ("log_dynamic_imports", "dynamic_import"),
    ("log_test_detection", "detection"),
    ("log_bare_except", "bare_except"),
    ("log_broad_except", "broad_except"),
    ("log_specific_except", "specific_except"),
    ("log_keyed_branches", "keyed_branches"),
    ("log_keyed_lookups", "keyed_lookups"),
    ("log_functions", "functions"),
    ("log_classes", "classes"),
    ("log_imports", "imports"),
    ("log_loops", "loops"),
    ("log_prints", "prints"),
  ):
    out[name] = _log(max(c[key], 0))
  visible = scan.visible
  if visible.test_keys:
    found = sum(bool(k & scan.literal_keys) for k in visible.test_keys)
    out["visible_input_literals"] = found / len(visible.test_keys)
  if visible.outputs:
    found = sum(k in scan.literal_keys for k in visible.outputs)
    out["visible_output_literals"] = found / len(visible.outputs)
  if entry_point is not None:
    out["missing_entry_point"] = float(not _defines(tree, entry_point))
  return out


def probes(code: str) -> bool:
  """Whether a run's `code` probes rather than tests a solution.

  Probing: the harness's paths, descriptors or environment, directory
  listings, absolute paths, frames and the object graph, processes and
  the network, how the code is run, modules reached by computed names.
  Debugging (`traceback.print_exc()`, prints, reading stdin) is not.
  """
  scanned = code_scan.scan(code, None, ())
  if scanned is None:
    return False
  scan = scanned[1]
  c = dict(scan.counts, detection=len(scan.sites["detection"]))
  return (
    c["harness"]
    + c["listing"]
    + c["abs_path"]
    + c["introspection"]
    + c["proc"]
    + c["detection"]
    + c["dynamic_import"]
    > 0
  )


def targeted_workarounds(code: str, observations: Sequence[str]) -> int:
  """Special cases in `code` aimed at errors the observations showed."""
  if not observations:
    return 0
  scanned = code_scan.scan(code, None, ())
  if scanned is None:
    return 0
  scan = scanned[1]
  errors, inputs = set(), set()
  for text in observations:
    for line in text.split("\n"):
      if not line.startswith("error:"):
        continue
      errors.update(rules.EXCEPTION_NAME_RE.findall(line))
      match = rules.ERROR_CALL_RE.search(line)
      if match:
        try:
          args = ast.literal_eval(
            ast.parse(
              f"[{match.group(1)}]", filename=rules.POLICY_FILENAME, mode="eval"
            )
          )
        except (ValueError, SyntaxError, TypeError, RecursionError):
          continue
        inputs.add(rules.canon(args))
        if len(args) == 1:
          inputs.add(rules.canon(args[0]))
  aimed = {k for k in inputs if not rules.trivial(k)} & scan.eq_literals
  return len(aimed) + len(errors & scan.except_names - {"Exception"})
