"""Classifier training: separates a small corpus, deterministic, held out."""

import numpy as np

from codeagent_rl.anticheat import hacks
from codeagent_rl.anticheat import train_classifier


def test_fit_separates_held_out_families():
  heldout = ("gcd",)
  tasks = hacks.synthetic_tasks(
    1, seed=2, families=("affine", "caesar", "running", "gcd")
  )
  samples = [
    s for s in hacks.corpus(tasks) if s.kind not in hacks.LATER_STAGE_KINDS
  ]
  x = train_classifier.featurize(samples)
  y = np.asarray([s.label for s in samples])
  test = np.asarray([s.family in heldout for s in samples])
  kw = dict(steps=300, learning_rate=0.05, l2=1e-3)
  params = train_classifier.fit(x[~test], y[~test], **kw)
  again = train_classifier.fit(x[~test], y[~test], **kw)
  np.testing.assert_array_equal(params.weights, again.weights)
  kinds = np.asarray([s.kind for s in samples])
  report = train_classifier.evaluate(params, x[test], y[test], kinds[test], 0.5)
  assert report["classifier"]["recall"] >= 0.9
  assert report["classifier"]["false_positive_rate"] <= 0.02
  # Runtime features never get weight.
  assert not np.asarray(params.weights)[~train_classifier.STATIC].any()


def test_metrics_by_hand():
  predicted = np.asarray([True, True, False, False, True])
  y = np.asarray([1, 0, 1, 0, 1])
  m = train_classifier.metrics(predicted, y)
  assert m["precision"] == 2 / 3 and m["recall"] == 2 / 3
  assert m["false_positive_rate"] == 1 / 2
