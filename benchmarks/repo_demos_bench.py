r"""Repository tasks and their scripted demonstrations, played for real.

Run from the repository root:

  python -m benchmarks.repo_demos_bench --num_tasks=40 --seed=0
  python -m benchmarks.repo_demos_bench --max_modules=5 --backend=gvisor

Generates `--num_tasks` tasks (`tasks/repo_gen.py`) and plays every
demonstration kind of `rollout/repo_demos.py` on each through the
repository environment (`envs/repo_env.py`: every run and the grading in
the sandbox), in the byte protocol's syntax. Columns, per kind:

  solved A&B         share of episodes whose submission passed suites A
                     and B (the honest kinds must solve every task)
  turns p50/p95/max  turns per episode
  tokens p50/max     byte tokens per episode (prompt, actions and
                     observations): what a tiny model's context must hold
  s/episode          wall time per episode (sandbox included)

and, per task, the ratio of its longest to its shortest honest
demonstration in turns (how far one prompt's episodes differ in length).
Writes benchmarks/results/repo_demos_bench.json (or --out).
"""

from __future__ import annotations

import collections
import datetime
import json
import pathlib
import random
import time

from absl import app
from absl import flags
import numpy as np

from codeagent_rl.envs import code_env
from codeagent_rl.envs import repo_env
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.rollout import repo_demos
from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import repo_gen

DEFAULT_OUT = "benchmarks/results/repo_demos_bench.json"
_NUM = flags.DEFINE_integer("num_tasks", 40, "Tasks to generate.")
_SEED = flags.DEFINE_integer("seed", 0, "The generator's seed.")
_MIN = flags.DEFINE_integer("min_modules", 3, "Fewest modules per package.")
_MAX = flags.DEFINE_integer("max_modules", 8, "Most modules per package.")
_BACKEND = flags.DEFINE_enum(
  "backend", "gvisor", ["gvisor", "process"], "The sandbox backend."
)
_OUT = flags.DEFINE_string("out", DEFAULT_OUT, "Where to write the JSON.")
# Budgets roomy enough for the longest plan: the demonstrations' own size
# is what is measured.
BUDGETS = code_env.EnvConfig(
  max_turns=200,
  max_tokens_per_turn=4000,
  max_total_tokens=200_000,
  max_wall_s=600.0,
  obs_max_bytes=512,
)


def play(env, task, plan) -> dict:
  """One plan through the environment; what came of it."""
  state, start = env.reset(task), time.perf_counter()
  for name, args in plan.calls:
    text = repo_demos.action_text(env.syntax, name, args)
    state, step = env.step(state, text)
    if step.done:
      break
  outcome = state.outcome
  return {
    "task_id": task.task_id,
    "kind": plan.kind,
    "depth": task.metadata["depth"],
    "modules": task.metadata["modules"],
    "turns": len(state.turns),
    "tokens": state.num_tokens,
    "stop": state.stop_reason,
    "solved": bool(outcome.suite_a == 1.0 and outcome.suite_b == 1.0),
    "seconds": time.perf_counter() - start,
  }


def _pct(values, q) -> float:
  return float(np.percentile(np.asarray(values, float), q))


def table(rows: list[dict]) -> list[str]:
  """The per-kind table (see the module docstring)."""
  lines = [
    f"{'kind':<14} {'n':>3} {'solved A&B':>10} {'turns p50/p95/max':>18}"
    f" {'tokens p50/max':>15} {'s/episode':>9}"
  ]
  for kind in repo_demos.PLAN_KINDS:
    part = [r for r in rows if r["kind"] == kind]
    turns = [r["turns"] for r in part]
    tokens = [r["tokens"] for r in part]
    lines.append(
      f"{kind:<14} {len(part):>3} {np.mean([r['solved'] for r in part]):>10.2f}"
      f" {_pct(turns, 50):>6.0f}/{_pct(turns, 95):>4.0f}/{max(turns):>4d}"
      f" {_pct(tokens, 50):>8.0f}/{max(tokens):>6d}"
      f" {np.mean([r['seconds'] for r in part]):>9.2f}"
    )
  return lines


def main(argv) -> None:
  """Generates, plays, prints the table and writes the JSON."""
  del argv
  started = time.perf_counter()
  tasks = repo_gen.generate(
    _NUM.value,
    _SEED.value,
    repo_gen.GenConfig(min_modules=_MIN.value, max_modules=_MAX.value),
  )
  generate_s = time.perf_counter() - started
  sandbox = config_lib.SandboxConfig(backend=_BACKEND.value, pool_size=2)
  rows = []
  with harness.SandboxPool(sandbox) as pool:
    env = repo_env.RepoEnv(pool, tokenizer_lib.ByteTokenizer(), BUDGETS)
    for task in tasks:
      for kind in repo_demos.PLAN_KINDS:
        plan = repo_demos.plan(task, kind, random.Random(_SEED.value))
        rows.append(play(env, task, plan))
  by_task = collections.defaultdict(list)
  for r in rows:
    if r["kind"] in ("direct", "probing"):
      by_task[r["task_id"]].append(r["turns"])
  ratios = [max(t) / min(t) for t in by_task.values()]
  depths = collections.Counter(t.metadata["depth"] for t in tasks)
  lines = table(rows)
  lines.append(
    f"honest turns ratio per task (probing / direct): p50"
    f" {_pct(ratios, 50):.1f}, max {max(ratios):.1f}; generation"
    f" {generate_s:.1f} s for {len(tasks)} tasks; tasks by bug depth"
    f" {dict(sorted(depths.items()))}"
  )
  print("\n".join(lines))
  out = pathlib.Path(_OUT.value)
  out.parent.mkdir(parents=True, exist_ok=True)
  record = {
    "date": datetime.date.today().isoformat(),
    "command": "python -m benchmarks.repo_demos_bench"
    f" --num_tasks={_NUM.value} --seed={_SEED.value}"
    f" --min_modules={_MIN.value} --max_modules={_MAX.value}"
    f" --backend={_BACKEND.value}",
    "table": lines,
    "rows": rows,
  }
  out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
  app.run(main)
