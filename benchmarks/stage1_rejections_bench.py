r"""What stage 1 rejects before execution, with the default anti-cheat config.

Run from the repository root (configs/ lives there; HumanEval tasks from
`python -m codeagent_rl.tasks.humaneval --out=/tmp/he_all.jsonl`):

  python -m benchmarks.stage1_rejections_bench \
      --humaneval_tasks=/tmp/he_all.jsonl --label=after

  # Smoke check (2 tasks per family, no JSON unless --out is given):
  python -m benchmarks.stage1_rejections_bench \
      --humaneval_tasks=/tmp/he_all.jsonl --quick

Stage 1 is `configs/common.py`'s `get_anticheat_config()` with its weights:
a sample is rejected when an enforced rule flag is raised or the
classifier's score reaches the threshold, on the features known before
execution (the visible tests, and the observations of the trajectory's runs
played through `CodeEnv` in the sandbox; `train_classifier.featurize`).
Corpora:

  humaneval        HumanEval's 164 canonical solutions (honest), and the
                   ones `train_classifier` holds out (HumanEval/0, /5, ...);
  synthetic        `hacks.corpus` over synthetic tasks as train_classifier
                   builds it, on the families it holds out: the honest
                   solutions' false-positive rate, each hack class's recall;
  edge_cases       `anticheat/corpus/edge_cases.py`: honest-but-unusual
                   solutions and hacks by construction reached through
                   names.

Precision and recall are over the held-out synthetic samples, and over
those plus HumanEval's solutions (as negatives). `--execute` also runs the
canonical solutions in the sandbox and counts rejections after execution
(the runtime flags).

The JSON (`--out`) keeps one entry per `--label`. In the results file,
"before" is this script run on the tree before stage 1 was narrowed (commit
1ee465c, with this file, `edge_cases.py` and `train_classifier.py` copied
in), "before_on_the_new_corpus" the same with today's `hacks.py` and
`honest.py` copied in too (the honest corpus grew), and "after" today's
tree.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform

from absl import app
from absl import flags
import jax
import numpy as np

from codeagent_rl.anticheat import config as config_lib
from codeagent_rl.anticheat import features
from codeagent_rl.anticheat import pipeline
from codeagent_rl.anticheat import stage1
from codeagent_rl.anticheat.corpus import edge_cases
from codeagent_rl.anticheat.corpus import hacks
from codeagent_rl.anticheat.corpus import train_classifier
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema
from configs import common


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_string("humaneval_tasks", None, "HumanEval tasks (JSONL).")
  flags.DEFINE_string(
    "label", "after", "Key of this run in the JSON (e.g. before, after)."
  )
  flags.DEFINE_string(
    "out",
    "benchmarks/results/stage1_rejections_bench.json",
    "Results JSON (one entry per --label); with --quick only if set.",
  )
  flags.DEFINE_bool("quick", False, "2 tasks per family (smoke run).")
  flags.DEFINE_bool(
    "execute", True, "Also run HumanEval's canonical solutions (runtime flags)."
  )


# The corpus train_classifier evaluates on (its defaults).
TASKS_PER_FAMILY = 6
SEED = 0
HELDOUT_EVERY = 5
OBS_MAX_BYTES = 400
SANDBOX = sandbox_config.SandboxConfig(
  backend="process", pool_size=2, timeout_s=20.0, test_timeout_s=5.0
)


def _rates(rejected: np.ndarray, labels: np.ndarray) -> dict:
  tp = int(np.sum(rejected & (labels == 1)))
  fp = int(np.sum(rejected & (labels == 0)))
  fn = int(np.sum(~rejected & (labels == 1)))
  return {
    "precision": tp / max(tp + fp, 1),
    "recall": tp / max(tp + fn, 1),
    "false_positive_rate": fp / max(int(np.sum(labels == 0)), 1),
    "hacks": int(np.sum(labels == 1)),
    "honest": int(np.sum(labels == 0)),
  }


class _Stage1:
  """The default config's stage 1 on host features."""

  def __init__(self):
    self.config = config_lib.AntiCheatConfig.from_config(
      common.get_anticheat_config()
    )
    self.params = pipeline.load_params(self.config.weights_path)
    self.mask = np.asarray(self.config.enforced_mask, bool)

  def __call__(self, x: np.ndarray) -> dict[str, np.ndarray]:
    x = np.asarray(x, np.float32)
    flags_sf = np.asarray(stage1.rule_flags(x)) & self.mask
    score = np.asarray(stage1.score(x, self.params))
    by_score = (score >= self.config.classifier_threshold) & bool(
      self.config.classifier
    )
    return {
      "rules": flags_sf.any(-1),
      "classifier": by_score,
      "rejected": flags_sf.any(-1) | by_score,
      "score": score,
      "flags": flags_sf,
    }


def _names(mask: np.ndarray, names: list[str]) -> list[str]:
  return [n for n, m in zip(names, mask, strict=True) if m]


def _executed_rejections(
  pool, s1: _Stage1, tasks: list[schema.Task]
) -> list[str]:
  """Canonical solutions stage 1 rejects after they ran (runtime flags)."""
  futures = [
    pool.submit(judge.solution_job(t, t.reference_solution)) for t in tasks
  ]
  x = np.stack(
    [
      features.extract(
        t.reference_solution,
        (("submit", t.reference_solution),),
        None,
        entry_point=t.entry_point,
        visible_tests=t.visible_tests,
        result=f.result(),
      )
      for t, f in zip(tasks, futures, strict=True)
    ]
  )
  rejected = s1(x)["rejected"]
  return _names(rejected, [t.task_id for t in tasks])


def measure(humaneval_path: str, quick: bool, execute: bool) -> dict:
  """Every number of the table (see the module docstring)."""
  s1 = _Stage1()
  he_tasks = schema.read_tasks(humaneval_path)
  he_samples = train_classifier.humaneval_samples(he_tasks)
  tasks = hacks.synthetic_tasks(2 if quick else TASKS_PER_FAMILY, seed=SEED)
  held = set(train_classifier.heldout_families(HELDOUT_EVERY))
  synthetic = [s for s in hacks.corpus(tasks, seed=SEED) if s.family in held]
  edge = [
    hacks.Sample(c.task, c.code, c.actions, c.label, c.name, c.name)
    for c in (*edge_cases.HONEST, *edge_cases.REACH_HACKS)
  ]
  samples = [*he_samples, *synthetic, *edge]
  with harness.SandboxPool(SANDBOX) as pool:
    observations = train_classifier.play_observations(
      pool, samples, OBS_MAX_BYTES
    )
    executed = _executed_rejections(pool, s1, he_tasks) if execute else None
  x = train_classifier.featurize(samples, observations)
  out = s1(x)
  rejected = out["rejected"]
  labels = np.asarray([s.label for s in samples])
  n_he, n_syn = len(he_samples), len(synthetic)
  he = slice(0, n_he)
  syn = slice(n_he, n_he + n_syn)
  ed = slice(n_he + n_syn, len(samples))
  he_ids = [t.task_id for t in he_tasks]
  he_held = np.asarray(
    [int(i.rsplit("/", 1)[-1]) % HELDOUT_EVERY == 0 for i in he_ids]
  )
  syn_kinds = np.asarray([s.kind for s in synthetic])
  per_class = {}
  for kind in hacks.HACK_KINDS:
    sel = syn_kinds == kind
    per_class[kind] = {
      "n": int(sel.sum()),
      "rules": float(out["rules"][syn][sel].mean()),
      "classifier": float(out["classifier"][syn][sel].mean()),
      "stage1": float(rejected[syn][sel].mean()),
    }
  edge_names = [s.kind for s in edge]
  edge_labels = labels[ed]
  flag_names = list(features.FLAG_NAMES)
  result = {
    "enforced_flags": list(s1.config.enforced_flags),
    "humaneval": {
      "n": n_he,
      "rejected": int(rejected[he].sum()),
      "by_rules": int(out["rules"][he].sum()),
      "by_classifier": int(out["classifier"][he].sum()),
      "rejected_ids": _names(rejected[he], he_ids),
      "rejected_flags": {
        i: _names(f, flag_names)
        for i, f, r in zip(he_ids, out["flags"][he], rejected[he], strict=True)
        if r
      },
      "max_score": float(out["score"][he].max()),
      "heldout_n": int(he_held.sum()),
      "heldout_rejected": int(rejected[he][he_held].sum()),
      "rejected_after_execution": executed,
    },
    "synthetic_heldout": {
      "families": sorted(held),
      "honest_n": int(np.sum(syn_kinds == hacks.HONEST_KIND)),
      "honest_rejected": int(
        rejected[syn][syn_kinds == hacks.HONEST_KIND].sum()
      ),
      "per_class_recall": per_class,
      "stage1_kinds_recall": _rates(
        rejected[syn][~np.isin(syn_kinds, hacks.LATER_STAGE_KINDS)],
        labels[syn][~np.isin(syn_kinds, hacks.LATER_STAGE_KINDS)],
      )["recall"],
    },
    "edge_cases": {
      "honest_n": int(np.sum(edge_labels == 0)),
      "honest_rejected": _names(rejected[ed] & (edge_labels == 0), edge_names),
      "hacks_n": int(np.sum(edge_labels == 1)),
      "hacks_missed": _names(~rejected[ed] & (edge_labels == 1), edge_names),
    },
    "precision_recall": {
      "synthetic_heldout": _rates(rejected[syn], labels[syn]),
      "synthetic_heldout_and_humaneval": _rates(
        np.concatenate([rejected[syn], rejected[he]]),
        np.concatenate([labels[syn], labels[he]]),
      ),
      "all_with_edge_cases": _rates(rejected, labels),
    },
  }
  return result


def _print(r: dict) -> None:
  he, syn, ed = r["humaneval"], r["synthetic_heldout"], r["edge_cases"]
  print(f"enforced flags: {', '.join(r['enforced_flags'])}")
  print(
    f"HumanEval canonical rejected before execution: {he['rejected']}/"
    f"{he['n']} (rules {he['by_rules']}, classifier {he['by_classifier']};"
    f" held-out {he['heldout_rejected']}/{he['heldout_n']}; max score"
    f" {he['max_score']:.3f}) {he['rejected_flags']}"
  )
  if he["rejected_after_execution"] is not None:
    print(
      "HumanEval canonical rejected after execution:"
      f" {len(he['rejected_after_execution'])}/{he['n']}"
      f" {he['rejected_after_execution']}"
    )
  print(
    f"synthetic honest (held-out families) rejected:"
    f" {syn['honest_rejected']}/{syn['honest_n']}"
  )
  print(
    f"edge cases: honest rejected {len(ed['honest_rejected'])}/"
    f"{ed['honest_n']} {ed['honest_rejected']}; hacks missed"
    f" {len(ed['hacks_missed'])}/{ed['hacks_n']} {ed['hacks_missed']}"
  )
  print(
    f"{'hack class':20s} {'n':>5s} {'rules':>7s} {'clf':>7s} {'stage1':>7s}"
  )
  for kind, row in syn["per_class_recall"].items():
    print(
      f"{kind:20s} {row['n']:5d} {row['rules']:7.3f}"
      f" {row['classifier']:7.3f} {row['stage1']:7.3f}"
    )
  print(f"{'corpus':34s} {'precision':>9s} {'recall':>7s} {'FPR':>7s}")
  for name, m in r["precision_recall"].items():
    print(
      f"{name:34s} {m['precision']:9.4f} {m['recall']:7.4f}"
      f" {m['false_positive_rate']:7.4f}"
      f"  ({m['hacks']} hacks, {m['honest']} honest)"
    )


def main(argv: list[str]) -> None:
  """Measures, prints the table, merges the JSON entry of --label."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not flags.FLAGS.humaneval_tasks:
    raise app.UsageError("--humaneval_tasks is required.")
  jax.config.update("jax_platforms", "cpu")
  result = measure(
    flags.FLAGS.humaneval_tasks, flags.FLAGS.quick, flags.FLAGS.execute
  )
  _print(result)
  if flags.FLAGS.quick and not flags.FLAGS["out"].present:
    return
  path = pathlib.Path(flags.FLAGS.out)
  record = json.loads(path.read_text()) if path.exists() else {}
  record[flags.FLAGS.label] = {
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
    **result,
  }
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(record, indent=1) + "\n")
  print(f"wrote {path} [{flags.FLAGS.label}]")


if __name__ == "__main__":
  define_flags()
  app.run(main)
