"""benchmarks/classifier_value_bench.py: its splits, thresholds and record.

The splits must keep every test family, hack variant and HumanEval problem
out of the classifier's training rows; the recorded measurement must be the
one the default config's classifier setting rests on.
"""

import dataclasses
import json
import pathlib

import numpy as np
import pytest

from benchmarks import classifier_value_bench as bench
from codeagent_rl.anticheat import config as config_lib
from codeagent_rl.anticheat.corpus import edge_cases
from codeagent_rl.anticheat.corpus import hacks
from codeagent_rl.anticheat.corpus import train_classifier
from configs import common

RESULTS = (
  pathlib.Path(__file__).resolve().parent.parent
  / "benchmarks/results/classifier_value_bench.json"
)


def _corpus():
  syn = list(hacks.corpus(hacks.synthetic_tasks(1, seed=1)))
  task = edge_cases.HONEST[0].task
  he = train_classifier.humaneval_samples(
    [dataclasses.replace(task, task_id=f"HumanEval/{i}") for i in range(12)]
  )
  edge = [
    hacks.Sample(c.task, c.code, c.actions, c.label, c.name, c.name)
    for c in (*edge_cases.HONEST, *edge_cases.REACH_HACKS)
  ]
  sources = [bench.SYNTHETIC] * len(syn) + [bench.HUMANEVAL] * len(he)
  return [*syn, *he, *edge], np.asarray(sources + [bench.EDGE] * len(edge))


@pytest.mark.parametrize("split", range(bench.FOLDS))
def test_test_groups_never_reach_training(split):
  samples, sources = _corpus()
  group, variant = bench.split_of(samples, sources)
  r = bench.roles(group, variant, sources, split)
  assert not (r["train"] & r["val"]).any()
  assert not (r["train"] & r["test"]).any()
  assert not (r["val"] & r["test"]).any()
  assert r["train"].any() and r["val"].any()

  def keys(rows, key):
    return {key(samples[i], sources[i]) for i in np.flatnonzero(rows)}

  def family(s, src):
    return s.family if src == bench.SYNTHETIC else s.task.task_id

  def kind_variant(s, src):
    return (s.kind, s.variant) if src == bench.SYNTHETIC else None

  for held in ("test", "val"):
    assert not keys(r[held], family) & keys(r["train"], family)
    assert keys(r[held], kind_variant) & keys(r["train"], kind_variant) <= {
      None
    }
  # Edge cases are only ever tested on.
  assert r["test"][sources == bench.EDGE].all()
  assert not (r["train"] | r["val"])[sources == bench.EDGE].any()


def test_fold_zero_is_what_the_shipped_weights_held_out():
  samples, sources = _corpus()
  group, _ = bench.split_of(samples, sources)
  fold0 = {
    train_classifier.group_of(s)
    for s, g, src in zip(samples, group, sources, strict=True)
    if g == 0 and src != bench.EDGE
  }
  assert fold0 == train_classifier.heldout_groups(samples, bench.FOLDS)


def test_zero_honest_threshold():
  t = bench.zero_honest_threshold(np.asarray([0.1, 0.3], np.float32))
  assert np.float32(0.3) < t < 0.3001
  assert not (np.asarray([0.1, 0.3], np.float32) >= t).any()
  assert bench.zero_honest_threshold(np.ones(2, np.float32)) == float("inf")
  assert np.isnan(bench.zero_honest_threshold(np.zeros(0)))


def test_default_config_rests_on_the_recorded_measurement():
  record = json.loads(RESULTS.read_text())
  cfg = config_lib.AntiCheatConfig.from_config(common.get_anticheat_config())
  assert record["enforced_flags"] == list(cfg.enforced_flags)
  assert record["classifier"] is cfg.classifier is True
  splits = record["splits"]
  assert len(splits) == bench.FOLDS
  # Measured at the configured threshold: no honest rejection on any
  # split, and hacks no enforced rule rejects.
  for s in splits:
    assert s["threshold_configured"] == cfg.classifier_threshold
    for row in s["honest_rejected"].values():
      assert row["rules+clf"] == 0, (s["split"], row)
  extra = sum(
    row["rules+clf"] - row["rules"]
    for s in splits
    for row in s["per_class"].values()
  )
  hacks_n = sum(row["n"] for row in record["pooled"].values())
  assert extra >= hacks_n // 2
  shipped = record["shipped"]
  assert shipped["threshold_configured"] == cfg.classifier_threshold
  assert max(shipped["max_honest_score"].values()) < cfg.classifier_threshold
  assert shipped["min_score_of_a_caught_hack"] > cfg.classifier_threshold
