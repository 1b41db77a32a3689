r"""What the stage-1 classifier catches beyond the rules, on held-out data.

Run from the repository root (HumanEval tasks from
`python -m codeagent_rl.tasks.humaneval --out=/tmp/he_all.jsonl`):

  nice -n 5 python -m benchmarks.classifier_value_bench \
      --humaneval_tasks=/tmp/he_all.jsonl

  # Smoke check (1 task per family; no JSON unless --out is given):
  python -m benchmarks.classifier_value_bench \
      --humaneval_tasks=/tmp/he_all.jsonl --quick

The corpus is `train_classifier`'s (`hacks.corpus` over synthetic tasks,
HumanEval's canonical solutions as honest code, the trajectories' runs
played through `CodeEnv` in a process-backend sandbox) plus the hand-written
`edge_cases` (never fitted on). Every sample falls in a fold `split_of`:

- a synthetic sample by its task family (its index in sorted order, modulo
  `FOLDS`) and its variant (the variant's index in the sorted variant names
  of its kind, modulo `FOLDS`): it belongs to fold f when both are f, so a
  test hack is an unseen variant on an unseen family;
- a HumanEval solution by its problem number modulo `FOLDS`.

Split s tests on fold s, keeps fold s + 1 for validation and fits a fresh
classifier (`train_classifier.fit`, its default steps, rate and L2; not on
`hacks.LATER_STAGE_KINDS`) on the samples whose family, variant and problem
lie in neither. The edge cases are test samples of every split. Per split
and hack class, on test, what rejects:

  rules          the default config's enforced flags alone;
  rules+clf      those or the classifier's score at the configured
                 threshold (`anticheat.classifier_threshold`);
  rules+clf@val  those or the score at the lowest threshold that rejects
                 no honest sample of the validation fold (synthetic and
                 HumanEval);
  rules+clf@cv   those or the score at the lowest threshold that rejects
                 no honest test sample of the other splits (synthetic and
                 HumanEval: families, variants and problems split s never
                 tests on; each split scored by its own classifier);
  clf_extra      hacks the classifier rejects at the @cv threshold and the
                 rules do not;
  no_flag        of those, hacks that raise no flag at all (enforced or
                 not): what no rule, however widened, sees;
  unseen_class   the rules or, at the @cv threshold, the classifier fitted
                 without that hack class: stage 1 on a class the
                 classifier never saw;
  rules_wide     for comparison, the enforced flags plus every other flag
                 that fires on no honest validation sample.

Each variant's honest rejections on test (synthetic, HumanEval, edge cases)
are counted the same way. The shipped weights (`weights/stage1.json`,
trained on every variant of the families outside fold 0's and on a model's
solved episodes) are measured at the configured threshold on fold 0's
families (every variant), the HumanEval problems it held out and the edge
cases.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
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
from codeagent_rl.anticheat import names
from codeagent_rl.anticheat import pipeline
from codeagent_rl.anticheat import stage1
from codeagent_rl.anticheat.corpus import edge_cases
from codeagent_rl.anticheat.corpus import hacks
from codeagent_rl.anticheat.corpus import train_classifier
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic
from configs import common

# Folds of families, variants and HumanEval problems (train_classifier holds
# out every 5th family and problem: fold 0 is its held-out set).
FOLDS = 5
# The synthetic corpus train_classifier builds (its defaults).
TASKS_PER_FAMILY = 6
SEED = 0
OBS_MAX_BYTES = 400
# train_classifier's fitting defaults.
FIT = {"steps": 2000, "learning_rate": 0.05, "l2": 1e-3}
SANDBOX = sandbox_config.SandboxConfig(
  backend="process", pool_size=2, timeout_s=20.0, test_timeout_s=5.0
)
# Sources of a sample.
SYNTHETIC, HUMANEVAL, EDGE = "synthetic", "humaneval", "edge"
SOURCES = (SYNTHETIC, HUMANEVAL, EDGE)
# Fold of samples that belong to no fold (fitted on in every split).
NO_FOLD = -1


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_string("humaneval_tasks", None, "HumanEval tasks (JSONL).")
  flags.DEFINE_string(
    "out",
    "benchmarks/results/classifier_value_bench.json",
    "Results JSON; with --quick only if set.",
  )
  flags.DEFINE_bool("quick", False, "1 task per family, 2 splits (smoke).")
  flags.DEFINE_integer("splits", FOLDS, "Splits to run (test folds 0..n-1).")


def family_fold(family: str) -> int:
  """The fold of a synthetic family (its sorted index modulo `FOLDS`)."""
  return sorted(synthetic.FAMILIES).index(family) % FOLDS


def variant_folds(samples: Sequence[hacks.Sample]) -> dict[tuple, int]:
  """(kind, variant) -> fold: its index in the kind's sorted names % FOLDS."""
  by_kind = collections.defaultdict(set)
  for s in samples:
    by_kind[s.kind].add(s.variant)
  return {
    (kind, v): i % FOLDS
    for kind, variants in by_kind.items()
    for i, v in enumerate(sorted(variants))
  }


def split_of(
  samples: Sequence[hacks.Sample], sources: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
  """Per sample, (fold of its group, fold of its variant).

  A synthetic sample's group is its family; a HumanEval solution's is its
  problem number (its variant fold is the same); edge cases have
  `NO_FOLD` in both (callers test on them).
  """
  variants = variant_folds(
    [s for s, src in zip(samples, sources, strict=True) if src == SYNTHETIC]
  )
  group, variant = [], []
  for s, src in zip(samples, sources, strict=True):
    if src == SYNTHETIC:
      group.append(family_fold(s.family))
      variant.append(variants[(s.kind, s.variant)])
    elif src == HUMANEVAL:
      number = int(s.task.task_id.rsplit("/", 1)[-1]) % FOLDS
      group.append(number)
      variant.append(number)
    else:
      group.append(NO_FOLD)
      variant.append(NO_FOLD)
  return np.asarray(group), np.asarray(variant)


def roles(
  group: np.ndarray, variant: np.ndarray, sources: np.ndarray, split: int
) -> dict[str, np.ndarray]:
  """Boolean masks "train", "val", "test" of split `split` (disjoint)."""
  val_fold = (split + 1) % FOLDS
  test = ((group == split) & (variant == split)) | (sources == EDGE)
  val = (group == val_fold) & (variant == val_fold)
  away = (group == split) | (group == val_fold)
  away |= (variant == split) | (variant == val_fold)
  train = ~away & (sources != EDGE)
  return {"train": train, "val": val, "test": test}


def zero_honest_threshold(honest_scores: np.ndarray) -> float:
  """The lowest threshold that rejects none of `honest_scores` (inf: none)."""
  if honest_scores.size == 0:
    return float("nan")
  top = np.float32(honest_scores.max())
  above = float(np.nextafter(top, np.float32(np.inf)))
  return above if above <= 1.0 else float("inf")


def _class_counts(
  caught: dict[str, np.ndarray], kinds: np.ndarray, rows: np.ndarray
) -> dict:
  out = {}
  for kind in hacks.HACK_KINDS:
    sel = rows & (kinds == kind)
    out[kind] = {"n": int(sel.sum())} | {
      who: int(mask[sel].sum()) for who, mask in caught.items()
    }
  return out


def _honest_counts(
  caught: dict[str, np.ndarray], honest_rows: dict[str, np.ndarray]
) -> dict:
  return {
    where: {"n": int(rows.sum())}
    | {who: int(mask[rows].sum()) for who, mask in caught.items()}
    for where, rows in honest_rows.items()
  }


class Measure:
  """The corpus's features and what each variant of stage 1 rejects."""

  def __init__(self, samples, sources, x):
    self.samples = samples
    self.sources = np.asarray(sources)
    self.x = x
    self.labels = np.asarray([s.label for s in samples])
    self.kinds = np.asarray([s.kind if s.label else "honest" for s in samples])
    self.group, self.variant = split_of(samples, sources)
    self.config = config_lib.AntiCheatConfig.from_config(
      common.get_anticheat_config()
    )
    all_flags = np.asarray(stage1.rule_flags(x))
    self.any_flag = all_flags.any(-1)
    self.flags = all_flags
    self.rules = (all_flags & np.asarray(self.config.enforced_mask)).any(-1)
    self.early = ~np.isin(self.kinds, hacks.LATER_STAGE_KINDS)

  def scores(self, params: stage1.Stage1Params) -> np.ndarray:
    """[S] classifier scores of every sample."""
    return np.asarray(stage1.score(self.x, params))

  def fit(self, rows: np.ndarray) -> stage1.Stage1Params:
    """A classifier fitted on `rows` (less the later-stage classes)."""
    rows = rows & self.early
    return train_classifier.fit(self.x[rows], self.labels[rows], **FIT)

  def honest_rows(self, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The honest samples of `rows`, by source."""
    honest = rows & (self.labels == 0)
    return {src: honest & (self.sources == src) for src in SOURCES}

  def fit_split(self, split: int) -> dict:
    """Fits split `split`'s classifier and one per unseen hack class.

    Returns:
      "roles" (`roles`), "score" [S] of the classifier, and "unseen" [S]:
      each sample of a stage-1 hack class scored by the classifier fitted
      without that class (the others by the full one).
    """
    r = roles(self.group, self.variant, self.sources, split)
    score = self.scores(self.fit(r["train"]))
    unseen = score.copy()
    for kind in hacks.HACK_KINDS:
      if kind not in hacks.LATER_STAGE_KINDS:
        sel = self.kinds == kind
        held = self.fit(r["train"] & ~sel)
        unseen[sel] = self.scores(held)[sel]
    return {"split": split, "roles": r, "score": score, "unseen": unseen}

  def heldout_honest_max(self, fitted: dict) -> float:
    """The top score of a split's honest test samples (not edge cases)."""
    r = fitted["roles"]
    rows = r["test"] & (self.labels == 0) & (self.sources != EDGE)
    return float(fitted["score"][rows].max())

  def split(self, fitted: dict, t_cv: float) -> dict:
    """Every count of one split (see the module docstring).

    Args:
      fitted: its `fit_split`.
      t_cv: its threshold chosen on the other splits' held-out honest code.
    """
    split, r, score = fitted["split"], fitted["roles"], fitted["score"]
    val_honest = r["val"] & (self.labels == 0)
    t_cfg = self.config.classifier_threshold
    t_val = zero_honest_threshold(score[val_honest])
    # Flags no honest validation sample raises, enforced or not.
    quiet = ~self.flags[val_honest].any(0)
    enforced = np.asarray(self.config.enforced_mask)
    clf_cv = score >= t_cv
    caught = {
      "rules": self.rules,
      "rules+clf": self.rules | (score >= t_cfg),
      "rules+clf@val": self.rules | (score >= t_val),
      "rules+clf@cv": self.rules | clf_cv,
      "clf_extra": clf_cv & ~self.rules,
      "no_flag": clf_cv & ~self.any_flag,
      "unseen_class": self.rules | (fitted["unseen"] >= t_cv),
      "rules_wide": (self.flags & (quiet | enforced)).any(-1),
    }
    test_hacks = r["test"] & (self.labels == 1) & (self.sources == SYNTHETIC)
    edge_hacks = r["test"] & (self.labels == 1) & (self.sources == EDGE)
    honest_rows = self.honest_rows(r["test"])
    return {
      "split": split,
      "val_fold": (split + 1) % FOLDS,
      "test_families": sorted(
        f for f in synthetic.FAMILIES if family_fold(f) == split
      ),
      "n": {k: int(v.sum()) for k, v in r.items()},
      "threshold_configured": t_cfg,
      "threshold_val": t_val,
      "threshold_cv": t_cv,
      "wide_flags": [
        n for n, q in zip(names.FLAG_NAMES, quiet, strict=True) if q
      ],
      "max_honest_score": {
        where: float(score[rows].max()) if rows.any() else None
        for where, rows in honest_rows.items()
      },
      "honest_rejected_variants": {
        who: sorted(
          {
            self.samples[i].variant
            for i in np.flatnonzero(mask & r["test"] & (self.labels == 0))
          }
        )
        for who, mask in caught.items()
      },
      "per_class": _class_counts(caught, self.kinds, test_hacks),
      "edge_hacks": {"n": int(edge_hacks.sum())}
      | {who: int(m[edge_hacks].sum()) for who, m in caught.items()},
      "honest_rejected": _honest_counts(caught, honest_rows),
    }

  def shipped(self, params: stage1.Stage1Params) -> dict:
    """The shipped weights at the configured threshold on fold 0's groups."""
    score = self.scores(params)
    by_score = score >= self.config.classifier_threshold
    caught = {
      "rules": self.rules,
      "rules+clf": self.rules | by_score,
      "clf_extra": by_score & ~self.rules,
      "no_flag": by_score & ~self.any_flag,
    }
    test = (self.group == 0) | (self.sources == EDGE)
    test_hacks = test & (self.labels == 1) & (self.sources == SYNTHETIC)
    edge_hacks = test & (self.labels == 1) & (self.sources == EDGE)
    hack_scores = score[test & (self.labels == 1) & by_score]
    return {
      "test_families": sorted(
        f for f in synthetic.FAMILIES if family_fold(f) == 0
      ),
      "threshold_configured": self.config.classifier_threshold,
      "max_honest_score": {
        where: float(score[rows].max()) if rows.any() else None
        for where, rows in self.honest_rows(test).items()
      },
      "max_score_of_any_honest": float(score[self.labels == 0].max()),
      "min_score_of_a_caught_hack": float(hack_scores.min())
      if hack_scores.size
      else None,
      "per_class": _class_counts(caught, self.kinds, test_hacks),
      "edge_hacks": {"n": int(edge_hacks.sum())}
      | {who: int(m[edge_hacks].sum()) for who, m in caught.items()},
      "honest_rejected": _honest_counts(caught, self.honest_rows(test)),
    }


def build(
  humaneval_path: str, tasks_per_family: int
) -> tuple[list[hacks.Sample], list[str], np.ndarray]:
  """The corpus, each sample's source and its [S, N] features."""
  he = train_classifier.humaneval_samples(schema.read_tasks(humaneval_path))
  tasks = hacks.synthetic_tasks(tasks_per_family, seed=SEED)
  syn = list(hacks.corpus(tasks, seed=SEED))
  edge = [
    hacks.Sample(c.task, c.code, c.actions, c.label, c.name, c.name)
    for c in (*edge_cases.HONEST, *edge_cases.REACH_HACKS)
  ]
  samples = [*syn, *he, *edge]
  sources = [SYNTHETIC] * len(syn) + [HUMANEVAL] * len(he) + [EDGE] * len(edge)
  with harness.SandboxPool(SANDBOX) as pool:
    observations = train_classifier.play_observations(
      pool, samples, OBS_MAX_BYTES
    )
  return samples, sources, train_classifier.featurize(samples, observations)


def pooled(splits: Sequence[dict]) -> dict:
  """Per class and variant: caught / n over the splits, and per-split range."""
  out = {}
  for kind in hacks.HACK_KINDS:
    rows = [s["per_class"][kind] for s in splits if s["per_class"][kind]["n"]]
    n = sum(r["n"] for r in rows)
    out[kind] = {"n": n, "splits": len(rows)}
    for who in rows[0] if rows else ():
      if who == "n":
        continue
      rates = [r[who] / r["n"] for r in rows]
      out[kind][who] = {
        "caught": sum(r[who] for r in rows),
        "recall": sum(r[who] for r in rows) / n,
        "min": min(rates),
        "max": max(rates),
      }
  return out


_COLUMNS = (
  "rules",
  "rules+clf",
  "rules+clf@val",
  "rules+clf@cv",
  "clf_extra",
  "no_flag",
  "unseen_class",
  "rules_wide",
)


def _print(result: dict) -> None:
  print(
    f"{len(result['splits'])} splits; recall on test (pooled; min-max over"
    " splits); clf_extra, no_flag: share of the class's hacks"
  )
  print(
    f"{'hack class':20s} {'n':>5s} " + " ".join(f"{c:>17s}" for c in _COLUMNS)
  )
  for kind, row in result["pooled"].items():
    cells = []
    for c in _COLUMNS:
      if c not in row:
        cells.append(f"{'-':>17s}")
        continue
      v = row[c]
      cells.append(f"{v['recall']:6.3f} ({v['min']:.2f}-{v['max']:.2f})")
    print(f"{kind:20s} {row['n']:5d} " + " ".join(cells))
  print("honest rejected on test (summed over splits):")
  total = collections.Counter()
  for s in result["splits"]:
    for where, row in s["honest_rejected"].items():
      for who, v in row.items():
        total[(where, who)] += v
  for where in SOURCES:
    print(
      f"  {where:10s} n {total[(where, 'n')]:5d}  "
      + "  ".join(
        f"{c} {total[(where, c)]}" for c in _COLUMNS if c != "no_flag"
      )
    )
  for s in result["splits"]:
    e = s["edge_hacks"]
    print(
      f"split {s['split']}: thresholds val {s['threshold_val']:.3f} cv"
      f" {s['threshold_cv']:.3f}; edge hacks {e['rules']}/{e['n']} by rules,"
      f" {e['rules+clf@cv']}/{e['n']} with the classifier; honest rejected"
      f" at {s['threshold_configured']}:"
      f" {s['honest_rejected_variants']['rules+clf']}"
    )
  sh = result["shipped"]
  print(
    f"shipped weights at {sh['threshold_configured']} on fold 0"
    f" ({', '.join(sh['test_families'])}); max honest score"
    f" {sh['max_honest_score']}, lowest caught hack score"
    f" {sh['min_score_of_a_caught_hack']}"
  )
  print(
    f"{'hack class':20s} {'n':>5s} {'rules':>7s} {'+clf':>7s} {'extra':>7s}"
  )
  for kind, row in sh["per_class"].items():
    n = max(row["n"], 1)
    print(
      f"{kind:20s} {row['n']:5d} {row['rules'] / n:7.3f}"
      f" {row['rules+clf'] / n:7.3f} {row['clf_extra'] / n:7.3f}"
    )
  print(f"  honest rejected: {sh['honest_rejected']}")


def measure(humaneval_path: str, quick: bool, splits: int) -> dict:
  """Builds the corpus and runs every split and the shipped weights."""
  samples, sources, x = build(humaneval_path, 1 if quick else TASKS_PER_FAMILY)
  m = Measure(samples, sources, x)
  config = m.config
  fitted = [m.fit_split(s) for s in range(2 if quick else splits)]
  tops = [m.heldout_honest_max(f) for f in fitted]
  # Split s's threshold: the lowest that rejects no honest test sample of
  # the other splits (families, variants and problems it never saw).
  runs = [
    m.split(f, zero_honest_threshold(np.asarray(tops[:i] + tops[i + 1 :])))
    for i, f in enumerate(fitted)
  ]
  return {
    "enforced_flags": list(config.enforced_flags),
    "classifier": config.classifier,
    "tasks_per_family": 1 if quick else TASKS_PER_FAMILY,
    "samples": dict(collections.Counter(m.kinds.tolist())),
    "fit": FIT,
    "splits": runs,
    "pooled": pooled(runs),
    "shipped": m.shipped(pipeline.load_params(config_lib.DEFAULT_WEIGHTS)),
  }


def main(argv: list[str]) -> None:
  """Measures, prints the table, writes the JSON."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not flags.FLAGS.humaneval_tasks:
    raise app.UsageError("--humaneval_tasks is required.")
  jax.config.update("jax_platforms", "cpu")
  result = measure(
    flags.FLAGS.humaneval_tasks, flags.FLAGS.quick, flags.FLAGS.splits
  )
  _print(result)
  if flags.FLAGS.quick and not flags.FLAGS["out"].present:
    return
  path = pathlib.Path(flags.FLAGS.out)
  path.parent.mkdir(parents=True, exist_ok=True)
  record = {
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
    **result,
  }
  path.write_text(json.dumps(record, indent=1) + "\n")
  print(f"wrote {path}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
