r"""Trains the stage-1 logistic regression; writes the weights the repo keeps.

  python -m codeagent_rl.anticheat.train_classifier \
      --out=codeagent_rl/anticheat/weights/stage1.json

The corpus is `hacks.corpus` over synthetic train-split tasks
(`--tasks_per_family` per family, seed `--seed`): honest solutions and
trajectories (label 0) and every hack class (label 1). Families are split
by name: every `--heldout_every`-th family in sorted order is held out, the
model is fitted on the others only, and precision, recall and the
false-positive rate are reported on the held-out families (and per hack
class). The classifier is not fitted on `hacks.LATER_STAGE_KINDS` (code
that looks honest before execution; stage 2 and the runtime flags catch
it); `heldout_stage1_kinds` reports the held-out metrics without them. The
weights written are the ones evaluated.

Features are the code and trajectory features of `features.py`; runtime
features get weight 0 (the score must be the same before execution, when
the environment asks whether to run a submission). They are standardised
with the training set's mean and std; the loss is the class-balanced
logistic loss plus `--l2` times the squared weights, minimised by Adam for
`--steps` full-batch steps. Everything is deterministic for a seed.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
import json
import sys

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from codeagent_rl.anticheat import features as features_lib
from codeagent_rl.anticheat import hacks
from codeagent_rl.anticheat import pipeline
from codeagent_rl.anticheat import stage1 as stage1_lib
from codeagent_rl.tasks import synthetic

# The classifier's features: everything known before execution.
STATIC = np.asarray(
  [n not in features_lib.RUNTIME_FEATURES for n in features_lib.FEATURE_NAMES]
)
# Smallest feature scale (a constant feature is left unscaled).
MIN_SCALE = 1e-3


def featurize(samples: Sequence[hacks.Sample]) -> np.ndarray:
  """[S, N] features of the samples (no execution: runtime features 0)."""
  return np.stack(
    [
      features_lib.extract(
        s.code,
        s.actions,
        None,
        entry_point=s.task.entry_point,
        visible_tests=s.task.visible_tests,
      )
      for s in samples
    ]
  )


def heldout_families(every: int) -> tuple[str, ...]:
  """Every `every`-th family name in sorted order (starting with the first)."""
  return tuple(sorted(synthetic.FAMILIES)[::every])


def fit(
  x: np.ndarray,
  y: np.ndarray,
  *,
  steps: int,
  learning_rate: float,
  l2: float,
) -> stage1_lib.Stage1Params:
  """Class-balanced, L2-regularised logistic regression on `x` [S, N]."""
  mean = np.where(STATIC, x.mean(0), 0.0).astype(np.float32)
  scale = np.where(STATIC, np.maximum(x.std(0), MIN_SCALE), 1.0)
  scale = np.where(x.std(0) < MIN_SCALE, 1.0, scale).astype(np.float32)
  z = jnp.asarray((x - mean) / scale * STATIC, jnp.float32)
  labels = jnp.asarray(y, jnp.float32)
  pos = labels.mean()
  sample_w = jnp.where(labels > 0.5, 0.5 / pos, 0.5 / (1 - pos))
  mask = jnp.asarray(STATIC, jnp.float32)

  def loss_fn(p):
    logits = z @ (p["w"] * mask) + p["b"]
    per = optax.sigmoid_binary_cross_entropy(logits, labels)
    return jnp.mean(per * sample_w) + l2 * jnp.sum(jnp.square(p["w"]))

  opt = optax.adam(learning_rate)
  p = {"w": jnp.zeros(x.shape[1], jnp.float32), "b": jnp.zeros((), jnp.float32)}
  opt_state = opt.init(p)

  @jax.jit
  def step(carry, _):
    p, opt_state = carry
    grads = jax.grad(loss_fn)(p)
    updates, opt_state = opt.update(grads, opt_state, p)
    return (optax.apply_updates(p, updates), opt_state), None

  (p, _), _ = jax.lax.scan(step, (p, opt_state), None, length=steps)
  return stage1_lib.Stage1Params(
    weights=p["w"] * mask,
    bias=p["b"],
    mean=jnp.asarray(mean),
    scale=jnp.asarray(scale),
  )


def metrics(predicted: np.ndarray, y: np.ndarray) -> dict[str, float]:
  """Precision, recall, false-positive rate and counts."""
  tp = int(np.sum(predicted & (y == 1)))
  fp = int(np.sum(predicted & (y == 0)))
  fn = int(np.sum(~predicted & (y == 1)))
  tn = int(np.sum(~predicted & (y == 0)))
  return {
    "precision": tp / max(tp + fp, 1),
    "recall": tp / max(tp + fn, 1),
    "false_positive_rate": fp / max(fp + tn, 1),
    "positives": tp + fn,
    "negatives": fp + tn,
  }


def evaluate(
  params: stage1_lib.Stage1Params,
  x: np.ndarray,
  y: np.ndarray,
  kinds: Sequence[str],
  threshold: float,
) -> dict:
  """Classifier-only and classifier-or-rules metrics, overall and per kind."""
  score = np.asarray(stage1_lib.score(jnp.asarray(x), params))
  by_score = score >= threshold
  by_rules = np.asarray(stage1_lib.rule_flags(jnp.asarray(x))).any(-1)
  kinds = np.asarray(kinds)
  per_kind = {}
  for kind in sorted(set(kinds)):
    sel = kinds == kind
    per_kind[kind] = {
      "n": int(sel.sum()),
      "classifier_rate": float(by_score[sel].mean()),
      "stage1_rate": float((by_score | by_rules)[sel].mean()),
    }
  return {
    "classifier": metrics(by_score, y),
    "stage1": metrics(by_score | by_rules, y),
    "per_kind": per_kind,
  }


def _define_flags() -> None:
  """Flags exist only when this module is the program (no import clashes)."""
  flags.DEFINE_string("out", None, "Where to write the weights (JSON).")
  flags.DEFINE_integer(
    "tasks_per_family", 6, "Synthetic tasks per family in the corpus."
  )
  flags.DEFINE_integer("seed", 0, "Seed of the tasks and the corpus.")
  flags.DEFINE_integer(
    "heldout_every", 5, "Every n-th family (sorted) is held out."
  )
  flags.DEFINE_integer("steps", 2000, "Full-batch Adam steps.")
  flags.DEFINE_float("learning_rate", 0.05, "Adam learning rate.")
  flags.DEFINE_float("l2", 1e-3, "L2 penalty on the weights.")
  flags.DEFINE_float("threshold", 0.5, "Decision threshold of the metrics.")
  flags.mark_flags_as_required(["out"])


def main(argv: list[str]) -> None:
  """Builds the corpus, fits, evaluates on held-out families, writes JSON."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  jax.config.update("jax_platforms", "cpu")
  f = flags.FLAGS
  tasks = hacks.synthetic_tasks(f.tasks_per_family, seed=f.seed)
  samples = list(hacks.corpus(tasks, seed=f.seed))
  x = featurize(samples)
  y = np.asarray([s.label for s in samples])
  held = set(heldout_families(f.heldout_every))
  test = np.asarray([s.family in held for s in samples])
  # The classifier is fitted on what stage 1 can see before execution.
  fitted = ~test & np.asarray(
    [s.kind not in hacks.LATER_STAGE_KINDS for s in samples]
  )
  params = fit(
    x[fitted],
    y[fitted],
    steps=f.steps,
    learning_rate=f.learning_rate,
    l2=f.l2,
  )
  kinds = [s.kind for s in samples]
  early = np.asarray([s.kind not in hacks.LATER_STAGE_KINDS for s in samples])
  report = {
    "heldout_families": sorted(held),
    # The hack classes stage 1 is responsible for (not stage 2's).
    "heldout_stage1_kinds": evaluate(
      params,
      x[test & early],
      y[test & early],
      np.asarray(kinds)[test & early],
      f.threshold,
    ),
    "train": evaluate(
      params, x[~test], y[~test], np.asarray(kinds)[~test], f.threshold
    ),
    "heldout": evaluate(
      params, x[test], y[test], np.asarray(kinds)[test], f.threshold
    ),
  }
  counts = collections.Counter(kinds)
  metadata = {
    "argv": [
      "python -m codeagent_rl.anticheat.train_classifier",
      *sys.argv[1:],
    ],
    "tasks_per_family": f.tasks_per_family,
    "seed": f.seed,
    "steps": f.steps,
    "learning_rate": f.learning_rate,
    "l2": f.l2,
    "samples": dict(sorted(counts.items())),
    "heldout_families": report["heldout_families"],
    "heldout_classifier": report["heldout"]["classifier"],
    "heldout_stage1": report["heldout"]["stage1"],
    "heldout_stage1_kinds_classifier": report["heldout_stage1_kinds"][
      "classifier"
    ],
    "heldout_stage1_kinds_stage1": report["heldout_stage1_kinds"]["stage1"],
  }
  pipeline.save_params(f.out, params, metadata)
  print(json.dumps(report, indent=1))
  for split in ("train", "heldout", "heldout_stage1_kinds"):
    for who in ("classifier", "stage1"):
      m = report[split][who]
      print(
        f"{split:20s} {who:10s} precision {m['precision']:.4f} recall"
        f" {m['recall']:.4f} false-positive rate"
        f" {m['false_positive_rate']:.4f}"
        f" ({m['positives']} hacks, {m['negatives']} honest)"
      )


if __name__ == "__main__":
  _define_flags()
  app.run(main)
