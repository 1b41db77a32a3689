"""A generator of repository tasks: small packages with one injected bug.

    python -m codeagent_rl.tasks.repo_gen --out=repo.jsonl --num_tasks=200

Each task is a package of 3-8 modules whose functions call each other in a
chain: `pkg/report.py`'s `summary(xs)` calls a function of the next
module, which calls the next, down to a leaf; each applies one small
transformation to a list of ints, and `summary` reduces the result to an
int. Modules also hold functions off the chain (what an agent reads and
must rule out), `cli.py` runs `summary` on the ints of stdin, and
`test_<pkg>.py` is the task's visible test (a test path).

One function on the chain gets a bug by program mutation
(`MUTATIONS`: an arithmetic operator, a comparison, an off-by-one
constant, a wrong variable, a missing branch, a wrong default), chosen
among the mutants that change what the visible test sees. The issue
statement is the failing behaviour ("report.summary([3, 1]) returns 14;
it should return 16"); the bug's depth on the chain (1: in `summary`
itself) is what makes a task short or long to solve: the failing test
points at the top, the bug can sit several calls below. Suites A and B
are calls into `summary` and into the buggy function, and runs of
`cli.py`, on inputs of their own; expected values come from running the
clean package (`evaluate`, in a subprocess: it is the generator's own
code, never a policy's).

Sources are written through `ast.unparse`, so the clean module and the
buggy one differ only on the mutated lines (the reference change).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
import dataclasses
import json
import os
import random
import subprocess
import sys

from absl import app
from absl import flags

from codeagent_rl.tasks import schema

FAMILY = "repo_chain"
PACKAGES = (
  "ledger", "inventory", "grades", "weather", "orders", "scores",
  "traffic", "budget", "sensors", "payroll",
)  # fmt: skip
MODULES = (
  "parse", "clean", "scale", "limits", "adjust", "combine", "rank",
  "stats", "prices", "totals", "window", "filters", "steps", "merge",
)  # fmt: skip
# Chain stages (list[int] -> list[int]): name, parameters, body. Bodies
# use `xs` (the list) and the parameters; no while loop, so no mutant of
# one can hang.
STAGES = {
  "scaled": ("k=2", "return [x * k for x in xs]"),
  "shifted": ("k=3", "return [x + k for x in xs]"),
  "above": ("limit=0", "return [x for x in xs if x > limit]"),
  "halved": ("", "return [x // 2 for x in xs]"),
  "clipped": (
    "hi=10",
    "out = []\nfor x in xs:\n    if x > hi:\n        out.append(hi)\n"
    "    else:\n        out.append(x)\nreturn out",
  ),
  "absolute": (
    "",
    "out = []\nfor x in xs:\n    if x < 0:\n        out.append(-x)\n"
    "    else:\n        out.append(x)\nreturn out",
  ),
  "steps": ("", "return [xs[i + 1] - xs[i] for i in range(len(xs) - 1)]"),
  "running": (
    "",
    "out = []\nacc = 0\nfor x in xs:\n    acc = acc + x\n    out.append(acc)"
    "\nreturn out",
  ),
  "pair_sums": (
    "size=2",
    "return [sum(xs[i:i + size]) for i in range(len(xs) - size + 1)]",
  ),
  "unique": (
    "",
    "seen = []\nfor x in xs:\n    if x not in seen:\n        seen.append(x)"
    "\nreturn seen",
  ),
  "evens_first": (
    "",
    "return [x for x in xs if x % 2 == 0] + [x for x in xs if x % 2 != 0]",
  ),
  "capped": ("n=5", "return xs[:n]"),
}
# The reductions `summary` may end with (list[int] -> int).
FINALS = {
  "total": (
    "result = 0\nfor x in values:\n    result = result + x\nreturn result"
  ),
  "largest": (
    "if not values:\n    return 0\nbest = values[0]\nfor x in values[1:]:\n"
    "    if x > best:\n        best = x\nreturn best"
  ),
  "count_big": "return len([x for x in values if x >= 5])",
  "spread": "if not values:\n    return 0\nreturn max(values) - min(values)",
}
MUTATIONS = (
  "operator",
  "comparison",
  "off_by_one",
  "wrong_variable",
  "missing_branch",
  "wrong_default",
)
_OPERATORS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add,
              ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv}  # fmt: skip
_COMPARISONS = {ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Lt: ast.LtE,
                ast.LtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
                ast.In: ast.NotIn, ast.NotIn: ast.In}  # fmt: skip
_EVAL_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class GenConfig:
  """What the generator makes.

  Attributes:
    min_modules: fewest modules of a package (report included), >= 3.
    max_modules: most modules, <= `len(MODULES) + 1`.
    visible_tests: tests in the visible test file (the first fails).
    suite_size: calls of each hidden suite (runs of cli.py come on top).
    runs: runs of cli.py in each hidden suite.
  """

  min_modules: int = 3
  max_modules: int = 8
  visible_tests: int = 2
  suite_size: int = 8
  runs: int = 2

  def __post_init__(self):
    if not 3 <= self.min_modules <= self.max_modules <= len(MODULES) + 1:
      raise ValueError(
        f"GenConfig: need 3 <= min_modules <= max_modules <="
        f" {len(MODULES) + 1}, got {self.min_modules}, {self.max_modules}."
      )
    for name in ("visible_tests", "suite_size", "runs"):
      if type(getattr(self, name)) is not int or getattr(self, name) < 1:
        raise ValueError(f"GenConfig.{name}: must be an int >= 1.")


def render_module(tree: ast.Module) -> str:
  """A module's source: imports, then definitions two blank lines apart."""
  parts, previous = [], None
  for node in tree.body:
    text = ast.unparse(node)
    if previous is not None:
      is_def = isinstance(node, ast.FunctionDef)
      parts.append("\n\n\n" if is_def or previous else "\n")
    parts.append(text)
    previous = isinstance(node, ast.FunctionDef)
  return "".join(parts) + "\n"


def _function(name: str, params: str, body: str, call: str | None) -> str:
  args = "xs" + (f", {params}" if params else "")
  lines = [f"xs = {call}(xs)"] if call else []
  lines += body.split("\n")
  return f"def {name}({args}):\n" + "".join(f"    {ln}\n" for ln in lines)


@dataclasses.dataclass(frozen=True)
class Package:
  """A generated package before its bug.

  Attributes:
    name: the package's import name.
    files: path -> source (the clean workspace, visible test excluded).
    chain: (module path, dotted module, function) from `summary` down.
  """

  name: str
  files: dict
  chain: tuple


def make_package(rng: random.Random, num_modules: int) -> Package:
  """A package of `num_modules` modules: report plus a chain below it."""
  name = rng.choice(PACKAGES)
  modules = rng.sample(MODULES, num_modules - 1)
  stages = rng.sample(sorted(STAGES), num_modules - 1)
  decoys = [s for s in sorted(STAGES) if s not in stages]
  files = {f"{name}/__init__.py": ""}
  chain = [(f"{name}/report.py", f"{name}.report", "summary")]
  for i, (module, stage) in enumerate(zip(modules, stages, strict=True)):
    params, body = STAGES[stage]
    below = None
    imports = ""
    if i + 1 < len(modules):
      below = f"{modules[i + 1]}.{stages[i + 1]}"
      imports = f"from {name} import {modules[i + 1]}\n"
    source = imports + _function(stage, params, body, below)
    if decoys and rng.random() < 0.6:
      decoy = decoys.pop(rng.randrange(len(decoys)))
      source += _function(decoy, *STAGES[decoy], None)
    path = f"{name}/{module}.py"
    files[path] = render_module(ast.parse(source))
    chain.append((path, f"{name}.{module}", stage))
  final = rng.choice(sorted(FINALS))
  summary = (
    f"from {name} import {modules[0]}\n"
    f"def summary(xs):\n    values = {modules[0]}.{stages[0]}(xs)\n"
    + "".join(f"    {ln}\n" for ln in FINALS[final].split("\n"))
  )
  files[f"{name}/report.py"] = render_module(ast.parse(summary))
  files["cli.py"] = render_module(
    ast.parse(
      f"import sys\nfrom {name} import report\n"
      "values = [int(word) for word in sys.stdin.read().split()]\n"
      "print(report.summary(values))\n"
    )
  )
  return Package(name, files, tuple(chain))


def _sites(function: ast.FunctionDef, kind: str) -> list:
  """The nodes of `function` that mutation `kind` can change."""
  nodes = list(ast.walk(function))
  defaults = {id(d) for d in function.args.defaults}
  if kind == "operator":
    return [
      n for n in nodes if isinstance(n, ast.BinOp) and type(n.op) in _OPERATORS
    ]
  if kind == "comparison":
    return [
      n for n in nodes
      if isinstance(n, ast.Compare) and type(n.ops[0]) in _COMPARISONS
    ]  # fmt: skip
  if kind == "off_by_one":
    return [
      n for n in nodes
      if isinstance(n, ast.Constant) and type(n.value) is int
      and id(n) not in defaults
    ]  # fmt: skip
  if kind == "wrong_variable":
    names = set(_locals(function))
    return [
      n for n in nodes
      if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
      and n.id in names
    ]  # fmt: skip
  if kind == "missing_branch":
    return [n for n in nodes if isinstance(n, ast.If)]
  return [d for d in function.args.defaults if isinstance(d, ast.Constant)]


def _locals(function: ast.FunctionDef) -> list[str]:
  names = [a.arg for a in function.args.args]
  for node in ast.walk(function):
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
      names.append(node.id)
  return sorted(set(names))


def mutants(source: str, function: str) -> list[tuple[str, str]]:
  """Every single mutation of `function` in `source`: (kind, new source)."""
  out = []
  for kind in MUTATIONS:
    count = len(_sites(_find(ast.parse(source), function), kind))
    for k in range(count):
      tree = ast.parse(source)
      target = _find(tree, function)
      node = _sites(target, kind)[k]
      for undo in _apply(kind, node, target):
        mutated = render_module(tree)
        if mutated != source:
          out.append((kind, mutated))
        undo()  # for the next alternative of this site
  return out


def _find(tree: ast.Module, name: str) -> ast.FunctionDef:
  return next(
    n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name
  )


def _apply(kind, node, function):
  """Applies the mutation's alternatives to `node` in turn (a generator).

  Yields an undo function after each alternative is applied.
  """
  if kind == "operator":
    old = node.op
    node.op = _OPERATORS[type(old)]()
    yield lambda: setattr(node, "op", old)
  elif kind == "comparison":
    old = node.ops
    node.ops = [_COMPARISONS[type(old[0])]()]
    yield lambda: setattr(node, "ops", old)
  elif kind in ("off_by_one", "wrong_default"):
    old = node.value
    for delta in (1, -1):
      node.value = old + delta
      yield lambda: setattr(node, "value", old)
  elif kind == "wrong_variable":
    old = node.id
    for other in _locals(function):
      if other != old:
        node.id = other
        yield lambda: setattr(node, "id", old)
  else:  # missing_branch: the if is replaced by its else (or by nothing)
    parent, field, index = _parent(function, node)
    body = getattr(parent, field)
    replacement = node.orelse or []
    new_body = body[:index] + replacement + body[index + 1 :]
    setattr(parent, field, new_body or [ast.Pass()])
    yield lambda: setattr(parent, field, body)


def _parent(root, child):
  for node in ast.walk(root):
    for field in ("body", "orelse"):
      block = getattr(node, field, None)
      if isinstance(block, list) and child in block:
        return node, field, block.index(child)
  raise ValueError("node not in a block")


def evaluate(
  variants: Sequence[dict],
  calls: Sequence[tuple[str, str, list]],
  stdins: Sequence[str],
  entry: str = "cli.py",
) -> list[dict]:
  """Runs calls and programs on each variant (`repo_eval_child`)."""
  request = {
    "variants": list(variants),
    "calls": [list(c) for c in calls],
    "stdins": list(stdins),
    "entry": entry,
  }
  child = os.path.join(os.path.dirname(__file__), "repo_eval_child.py")
  proc = subprocess.run(
    [sys.executable, "-I", child],
    input=json.dumps(request),
    capture_output=True,
    text=True,
    timeout=_EVAL_TIMEOUT_S,
    check=False,
  )
  if proc.returncode != 0:
    raise RuntimeError(f"repo_eval_child failed: {proc.stderr[-2000:]}")
  return json.loads(proc.stdout)


def _interleaved(rng: random.Random, candidates: list) -> list:
  """The mutants, kinds taking turns in a drawn order.

  So each kind is as likely to be tried first, however many sites it has.
  """
  by_kind: dict = {}
  for kind, text in candidates:
    by_kind.setdefault(kind, []).append((kind, text))
  kinds = sorted(by_kind)
  rng.shuffle(kinds)
  for kind in kinds:
    rng.shuffle(by_kind[kind])
  out = []
  while any(by_kind.values()):
    out += [by_kind[k].pop() for k in kinds if by_kind[k]]
  return out


def _random_list(rng: random.Random, min_len: int = 2) -> list[int]:
  return [rng.randint(-5, 15) for _ in range(rng.randint(min_len, 7))]


def _distinct_lists(
  rng: random.Random, count: int, seen: set, min_len: int = 2
) -> list:
  out = []
  while len(out) < count:
    xs = _random_list(rng, min_len)
    if tuple(xs) not in seen:
      seen.add(tuple(xs))
      out.append(xs)
  return out


def _shown(outcome) -> str:
  status, value = outcome
  return f"returns {value!r}" if status == "ok" else f"raises {value}"


def _visible_test(package: str, cases: Sequence[tuple[list, int]]) -> str:
  lines = [f"from {package} import report\n"]
  for k, (xs, want) in enumerate(cases, 1):
    lines.append(
      f"def test_summary_{k}():\n    got = report.summary({xs!r})\n"
      f"    assert got == {want!r}, got\n"
    )
  calls = "".join(f"    test_summary_{k}()\n" for k in range(1, len(cases) + 1))
  lines.append(
    f"if __name__ == '__main__':\n{calls}    print('{len(cases)} passed')\n"
  )
  return render_module(ast.parse("\n".join(lines)))


def make_task(
  rng: random.Random, config: GenConfig, task_id: str, max_mutants: int = 12
) -> schema.Task | None:
  """One task, or None when no mutant of the drawn bug site qualifies.

  A mutant qualifies when the first visible test sees it (a different
  value, or an exception where the clean package returns) and at least two
  tests of each hidden suite do.
  """
  package = make_package(
    rng, rng.randint(config.min_modules, config.max_modules)
  )
  depth = rng.randrange(len(package.chain))
  path, module, function = package.chain[depth]
  candidates = _interleaved(rng, mutants(package.files[path], function))
  candidates = candidates[:max_mutants]
  if not candidates:
    return None
  seen: set = set()
  # More visible candidates than tests: the first that sees the bug leads.
  visible = _distinct_lists(rng, config.visible_tests + 4, seen)
  suites = [_distinct_lists(rng, config.suite_size, seen) for _ in range(2)]
  # The data-isolation check finds a run when its stdin and stdout occur
  # in a demonstration: a 2-int stdin ("-2 -4") was the tail of another
  # task's demonstrated run ("8 15 -2 -4") in 2 of 234 demonstrations.
  # Hidden runs get 5 ints or more.
  runs = [_distinct_lists(rng, config.runs, seen, 5) for _ in range(2)]
  top = package.chain[0][1]
  calls = [(top, "summary", [xs]) for xs in visible]
  for inputs in suites:
    half = len(inputs) // 2
    calls += [(top, "summary", [xs]) for xs in inputs[:half]]
    calls += [(module, function, [xs]) for xs in inputs[half:]]
  stdins = [" ".join(map(str, xs)) + "\n" for group in runs for xs in group]
  variants = [package.files] + [
    {**package.files, path: text} for _, text in candidates
  ]
  answers = evaluate(variants, calls, stdins)
  clean = answers[0]
  if any(status != "ok" for status, _ in clean["calls"]) or any(
    code != 0 for code, _ in clean["runs"]
  ):
    return None
  n_vis, n_suite, n_runs = len(visible), config.suite_size, config.runs
  for (kind, text), answer in zip(candidates, answers[1:], strict=True):
    if any(status == "limit" for status, _ in answer["calls"]) or any(
      code == -1 for code, _ in answer["runs"]
    ):
      continue  # a bug that hangs or eats memory: every run would time out
    seen_by = [
      got != want
      for got, want in zip(answer["calls"], clean["calls"], strict=True)
    ]
    run_seen = [
      got != want
      for got, want in zip(answer["runs"], clean["runs"], strict=True)
    ]
    a = seen_by[n_vis : n_vis + n_suite] + run_seen[:n_runs]
    b = seen_by[n_vis + n_suite :] + run_seen[n_runs:]
    if not any(seen_by[:n_vis]) or sum(a) < 2 or sum(b) < 2:
      continue
    lead = seen_by.index(True)
    keep = [lead] + [i for i in range(n_vis) if i != lead]
    keep = keep[: config.visible_tests]
    order = keep + list(range(n_vis, len(calls)))
    clean = {"calls": [clean["calls"][i] for i in order], "runs": clean["runs"]}
    answer = {"calls": [answer["calls"][i] for i in order]}
    return _assemble(
      package, task_id, depth, kind, text, [visible[i] for i in keep],
      suites, runs, [calls[i] for i in order], clean, answer,
    )  # fmt: skip
  return None


def _assemble(
  package, task_id, depth, kind, text, visible, suites, runs, calls, clean,
  answer,
) -> schema.Task:  # fmt: skip
  """The task of a qualifying mutant (see `make_task`)."""
  path, module, function = package.chain[depth]
  values = [value for _, value in clean["calls"]]
  outputs = [stdout for _, stdout in clean["runs"]]
  n_vis = len(visible)
  test_path = f"test_{package.name}.py"
  files = {**package.files, path: text}
  files[test_path] = _visible_test(
    package.name, list(zip(visible, values[:n_vis], strict=True))
  )
  suites_out, k, r = [], n_vis, 0
  for inputs, group in zip(suites, runs, strict=True):
    tests = []
    for _ in inputs:
      mod, fn, args = calls[k]
      tests.append({"call": f"{mod}.{fn}", "args": args, "expected": values[k]})
      k += 1
    for xs in group:
      stdin = " ".join(map(str, xs)) + "\n"
      tests.append({"stdin": stdin, "expected_stdout": outputs[r]})
      r += 1
    suites_out.append(tests)
  top = package.chain[0][1].split(".", 1)[1]
  issue = (
    f"{top}.summary({visible[0]!r}) {_shown(answer['calls'][0])}; it should"
    f" return {values[0]!r}. {test_path} fails."
  )
  return schema.Task(
    task_id=task_id,
    prompt=issue,
    entry_point="cli.py",
    kind="repo",
    visible_tests=(),
    hidden_tests=tuple(suites_out[0]),
    heldout_tests=tuple(suites_out[1]),
    reference_solution="",
    metadata={
      "family": FAMILY,
      "depth": depth + 1,
      "modules": len(package.chain),
      "mutation": kind,
      "bug_path": path,
      "bug_function": function,
      "symptom": "wrong_value"
      if answer["calls"][0][0] == "ok"
      else "exception",
      "failing_input": visible[0],
    },
    workspace={
      "files": files,
      "test_paths": [test_path],
      "reference": {path: package.files[path]},
    },
  )


def generate(
  num_tasks: int, seed: int, config: GenConfig | None = None
) -> list[schema.Task]:
  """`num_tasks` tasks drawn from `seed` (the same seed, the same tasks)."""
  config = config or GenConfig()
  rng = random.Random(seed)
  tasks, attempts = [], 0
  while len(tasks) < num_tasks:
    attempts += 1
    if attempts > 20 * num_tasks + 20:
      raise RuntimeError(
        f"repo_gen: only {len(tasks)} of {num_tasks} tasks after"
        f" {attempts} attempts."
      )
    task = make_task(rng, config, f"{FAMILY}/{seed}/{len(tasks)}")
    if task is not None:
      tasks.append(task)
  return tasks


def define_flags():
  """Registers the program's flags (only when run as a program)."""
  flags.DEFINE_string("out", None, "Where to write the tasks (JSONL).")
  flags.DEFINE_integer("num_tasks", 100, "How many tasks.")
  flags.DEFINE_integer("seed", 0, "The generator's seed.")
  flags.DEFINE_integer("min_modules", 3, "Fewest modules per package.")
  flags.DEFINE_integer("max_modules", 8, "Most modules per package.")


def main(argv: Sequence[str]) -> None:
  """Writes `--num_tasks` tasks to `--out`."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  values = flags.FLAGS
  if not values.out:
    sys.exit("--out: name the JSONL file to write.")
  try:
    config = GenConfig(
      min_modules=values.min_modules, max_modules=values.max_modules
    )
  except ValueError as e:
    sys.exit(str(e))
  tasks = generate(values.num_tasks, values.seed, config)
  schema.write_tasks(values.out, tasks)
  depths = [t.metadata["depth"] for t in tasks]
  print(
    f"wrote {len(tasks)} tasks to {values.out}; bug depth"
    f" min {min(depths)} max {max(depths)}"
  )


if __name__ == "__main__":
  define_flags()
  app.run(main)
