r"""How many hidden and held-out tests equal a visible test of some task.

Run from the repository root (configs/ lives there):

  python -m benchmarks.suite_overlap_bench --label=after

A test of suite A (`hidden_tests`) or B (`heldout_tests`) that equals a
visible test of any task of the run (train and held-out tasks together),
keyed as the data-isolation check keys it (`isolation.assertion_text`:
entry point, arguments and expected value), is credit a policy earns by
memorising the examples other prompts show. Per preset (the task sets
`train/data.make_task_sets` builds for it):

  tests       tests of suites A and B over all tasks
  public      of those, how many equal a visible test of some task
  replaced    tests the generator replaced for that reason (metadata
              `public_tests_replaced`; "-" where the generator does not)
  dropped     tests it dropped (`public_tests_dropped`)
  bug A, B    synthetic tasks whose rendered bug passes all of suite A,
              all of suite B, and both (a suite that cannot tell the bug
              from the reference)
  edges B     family edge inputs (`Family.edges`) in suite B, per task

Probe tasks (configs/long_horizon.py) have no visible tests, so their
`public` is 0 by construction.

The JSON (`--out`) keeps one entry per `--label`. In the results file,
"before" is this script run on the tree before suites A and B were kept
apart from every visible test (commit 17bdf81, with this file copied in),
"after" today's tree.
"""

from __future__ import annotations

import collections
import json
import pathlib
import time

from absl import app
from absl import flags

from codeagent_rl.tasks import isolation
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import experiment
from configs import long_horizon
from configs import tiny

# (name, config module, argument).
PRESETS = (
  ("tiny:smoke", tiny, "smoke"),
  ("tiny", tiny, None),
  ("long_horizon:smoke", long_horizon, "smoke"),
  ("long_horizon", long_horizon, None),
)
SUITES = ("hidden_tests", "heldout_tests")


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_string("label", "after", "Entry of the JSON to write.")
  flags.DEFINE_string(
    "out",
    "benchmarks/results/suite_overlap_bench.json",
    "JSON file; other labels in it are kept.",
  )


def _params(task: schema.Task) -> dict:
  """The parameter dict of a synthetic task (metadata has lists for tuples)."""
  meta = task.metadata
  space = synthetic.FAMILIES[meta["family"]].spaces[meta["difficulty"]]
  (params,) = [p for p in space if json.loads(json.dumps(p)) == meta["params"]]
  return params


def _bug_passes(task: schema.Task) -> tuple[bool, bool, int]:
  """(bug passes suite A, bug passes suite B, edge inputs in suite B)."""
  fam, level = synthetic.FAMILIES[task.entry_point], task.metadata["difficulty"]
  params = _params(task)
  bug = synthetic.load_function(
    fam.source(fam.render(level, params).bug), fam.name
  )
  passed = [
    all(synthetic.passes(bug, x) for x in getattr(task, s)) for s in SUITES
  ]
  edges = {repr(a) for a in fam.edges(level, params)}
  in_b = sum(repr(x["args"]) in edges for x in task.heldout_tests)
  return passed[0], passed[1], in_b


def measure(config_module, arg: str | None) -> dict:
  """The overlap figures of one preset's train and held-out tasks."""
  exp = experiment.Experiment.from_config(config_module.get_config(arg))
  start = time.perf_counter()
  sets = data_lib.make_task_sets(exp.data, exp.data_seed)
  seconds = time.perf_counter() - start
  tasks = [*sets.train, *sets.eval]
  public = {
    isolation.assertion_text(t.entry_point, v)
    for t in tasks
    for v in t.visible_tests
  }
  counts = collections.Counter()
  for t in tasks:
    for s in SUITES:
      for x in getattr(t, s):
        counts[f"{s}_n"] += 1
        counts[f"{s}_public"] += (
          isolation.assertion_text(t.entry_point, x) in public
        )
    for key in ("public_tests_replaced", "public_tests_dropped"):
      if key in t.metadata:
        counts[key] += t.metadata[key]
        counts[f"{key}_known"] += 1
    if t.metadata.get("source") == "synthetic":
      bug_a, bug_b, edges = _bug_passes(t)
      counts["synthetic_tasks"] += 1
      counts["bug_passes_a"] += bug_a
      counts["bug_passes_b"] += bug_b
      counts["bug_passes_both"] += bug_a and bug_b
      counts["edges_in_b"] += edges
  n = counts["hidden_tests_n"] + counts["heldout_tests_n"]
  m = counts["hidden_tests_public"] + counts["heldout_tests_public"]
  return {
    "tasks": len(tasks),
    "visible_tests": sum(len(t.visible_tests) for t in tasks),
    "tests": n,
    "public": m,
    "public_share": m / n,
    **{k: counts[k] for k in sorted(counts) if not k.endswith("_known")},
    "generator_records_replacements": bool(
      counts["public_tests_replaced_known"]
    ),
    "generation_seconds": round(seconds, 2),
  }


def _print(results: dict) -> None:
  print(
    f"{'preset':20s} {'tasks':>6s} {'tests':>7s} {'public':>7s}"
    f" {'share':>6s} {'replaced':>8s} {'dropped':>7s} {'bug A':>6s}"
    f" {'bug B':>6s} {'both':>5s} {'edges B':>7s}"
  )
  for name, r in results.items():
    known = r["generator_records_replacements"]
    synth = r.get("synthetic_tasks", 0)
    print(
      f"{name:20s} {r['tasks']:6d} {r['tests']:7d} {r['public']:7d}"
      f" {r['public_share']:6.1%}"
      f" {r.get('public_tests_replaced', 0) if known else '-':>8}"
      f" {r.get('public_tests_dropped', 0) if known else '-':>7}"
      f" {r.get('bug_passes_a', 0):6d} {r.get('bug_passes_b', 0):6d}"
      f" {r.get('bug_passes_both', 0):5d}"
      f" {r.get('edges_in_b', 0) / synth if synth else 0:7.2f}"
    )


def main(argv: list[str]) -> None:
  """Measures every preset, prints the table, merges the --label entry."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  results = {name: measure(module, arg) for name, module, arg in PRESETS}
  _print(results)
  path = pathlib.Path(flags.FLAGS.out)
  record = json.loads(path.read_text()) if path.exists() else {}
  record[flags.FLAGS.label] = results
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(record, indent=1) + "\n")
  print(f"wrote {path} [{flags.FLAGS.label}]")


if __name__ == "__main__":
  define_flags()
  app.run(main)
