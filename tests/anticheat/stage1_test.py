"""Stage 1: rules, classifier, reward update; jit, vmap; weights files."""

import functools
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl import types
from codeagent_rl.anticheat import config as config_lib
from codeagent_rl.anticheat import names
from codeagent_rl.anticheat import pipeline
from codeagent_rl.anticheat import stage1
from codeagent_rl.anticheat.corpus import edge_cases
from codeagent_rl.anticheat.corpus import hacks
from codeagent_rl.anticheat.corpus import train_classifier

from .conftest import default_config

N, F = names.NUM_FEATURES, names.NUM_FLAGS


def _rewards(b, suite_a=1.0):
  return types.Rewards.from_suites(
    suite_a=np.full(b, suite_a),
    suite_b=np.ones(b),
    executed=np.ones(b, bool),
    status=np.zeros(b, int),
    num_flags=F,
  )


def _params(bias=-4.0, weight_on=None):
  params = stage1.Stage1Params.zeros()
  weights = np.zeros(N, np.float32)
  if weight_on is not None:
    weights[names.FEATURE_INDEX[weight_on]] = 10.0
  return params.replace(weights=jnp.asarray(weights), bias=jnp.float32(bias))


def _features(b, **on):
  x = np.zeros((b, N), np.float32)
  for name, rows in on.items():
    x[rows, names.FEATURE_INDEX[name]] = 1.0
  return x


def test_hand_case_rules_and_score():
  cfg = default_config()
  x = _features(4, process_exit=[0], log_imports=[2])
  params = _params(bias=-4.0, weight_on="log_imports")
  out = stage1.stage1(_rewards(4), x, params, cfg)
  flags = np.asarray(out.stage1_flags)
  assert flags.shape == (4, F)
  assert flags[0, names.FLAG_NAMES.index("process_exit")]
  assert flags.sum() == 1
  # sigmoid(-4) for rows without the weighted feature, sigmoid(6) for row 2.
  want = 1 / (1 + np.exp([4.0, 4.0, -6.0, 4.0]))
  np.testing.assert_allclose(out.stage1_score, want, rtol=1e-5)
  np.testing.assert_array_equal(out.total, [0.0, 1.0, 0.0, 1.0])
  out.check()


def test_penalty_and_unenforced_flags():
  x = _features(3, process_exit=[0], failing_loop=[1])
  cfg = default_config(
    stage1_action="penalty",
    stage1_penalty=-0.5,
    enforced_flags=("process_exit",),
    classifier=False,
  )
  out = stage1.stage1(_rewards(3), x, _params(bias=10.0), cfg)
  # failing_loop is reported but not enforced; the score cannot reject.
  np.testing.assert_array_equal(out.total, [-0.5, 1.0, 1.0])
  assert bool(out.stage1_flags[1, names.FLAG_NAMES.index("failing_loop")])


def test_numpy_reference_on_random_inputs():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(16, N)).astype(np.float32)
  mean = rng.normal(size=N).astype(np.float32)
  scale = rng.uniform(0.5, 2, size=N).astype(np.float32)
  w = rng.normal(size=N).astype(np.float32) * 0.1
  params = stage1.Stage1Params(
    jnp.asarray(w), jnp.float32(0.3), jnp.asarray(mean), jnp.asarray(scale)
  )
  want = 1 / (1 + np.exp(-(((x - mean) / scale) @ w + 0.3)))
  np.testing.assert_allclose(stage1.score(x, params), want, rtol=1e-4)
  flags = x[:, list(names.FLAG_FEATURE)] > 0.5
  np.testing.assert_array_equal(stage1.rule_flags(x), flags)


def test_jit_and_vmap_agree():
  cfg = default_config()
  rng = np.random.default_rng(1)
  x = (rng.uniform(size=(8, N)) > 0.9).astype(np.float32)
  params = _params(bias=-1.0, weight_on="log_loops")
  rewards = _rewards(8, suite_a=0.75)
  eager = stage1.stage1(rewards, x, params, cfg)

  @jax.jit
  @chex.assert_max_traces(n=1)
  def fn(rewards, x, params):
    return stage1.stage1(rewards, x, params, cfg)

  jitted = fn(rewards, x, params)
  fn(_rewards(8), x, params)  # same shapes: no retrace
  vmapped = jax.vmap(
    functools.partial(stage1.stage1, cfg=cfg), in_axes=(0, 0, None)
  )(rewards, x, params)
  for other in (jitted, vmapped):
    chex.assert_trees_all_close(eager, other)
  skip = jax.jit(functools.partial(stage1.should_skip, cfg=cfg))(x, params)
  reject = np.asarray(eager.total) == 0.0
  np.testing.assert_array_equal(skip, reject)
  no_skip = default_config(skip_flagged=False)
  assert not np.asarray(stage1.should_skip(x, params, no_skip)).any()


def test_summary_counts_rejections():
  cfg = default_config()
  x = _features(4, process_exit=[0, 1])
  out = stage1.stage1(_rewards(4), x, _params(), cfg)
  metrics = stage1.summary(out, cfg)
  assert float(metrics["anticheat/flag_rate"]) == pytest.approx(0.5)
  assert float(metrics["anticheat/flag/process_exit"]) == pytest.approx(0.5)


def test_shipped_weights_load_and_roundtrip(tmp_path):
  cfg = default_config()
  params = pipeline.load_params(cfg.weights_path)
  chex.assert_shape([params.weights, params.mean, params.scale], (N,))
  # Runtime features carry no weight: the score is known before execution.
  runtime = [names.FEATURE_INDEX[n] for n in names.RUNTIME_FEATURES]
  assert not np.asarray(params.weights)[runtime].any()
  meta = json.loads(open(cfg.weights_path).read())["metadata"]
  assert meta["heldout_stage1_kinds_classifier"]["recall"] >= 0.9
  assert meta["heldout_classifier"]["false_positive_rate"] <= 0.02
  # Fitted with real honest code (HumanEval's canonical solutions), with
  # the command train_classifier's docstring gives.
  assert meta["samples"]["humaneval"] == 164
  assert meta["heldout_per_kind"]["humaneval"]["stage1_rate"] == 0.0
  # ... and the tiny model's own solved episodes.
  assert meta["samples"]["model"] > 0
  assert meta["heldout_per_kind"]["model"]["stage1_rate"] == 0.0
  assert meta["enforced_flags"] == list(cfg.enforced_flags)
  doc = " ".join(train_classifier.__doc__.split()).replace("\\ ", "")
  assert " ".join(meta["argv"][1:]) in doc
  path = tmp_path / "w.json"
  pipeline.save_params(path, params, {"note": "test"})
  chex.assert_trees_all_close(pipeline.load_params(path), params)


def test_shipped_classifier_catches_what_the_rules_do_not():
  # The families the shipped weights never saw, one task each, and the
  # honest edge cases; code-only samples (no runs to play).
  tasks = hacks.synthetic_tasks(
    1, seed=7, families=train_classifier.heldout_families(5)
  )
  samples = [s for s in hacks.corpus(tasks, seed=7) if len(s.actions) == 1] + [
    hacks.Sample(c.task, c.code, c.actions, 0, "edge", c.name)
    for c in edge_cases.HONEST
    if len(c.actions) == 1
  ]
  x = train_classifier.featurize(samples)
  y = np.asarray([s.label for s in samples])
  kinds = np.asarray([s.kind for s in samples])
  cfg = default_config()
  # The default config keeps the classifier: the rules alone miss these.
  assert cfg.classifier
  score = np.asarray(stage1.score(x, pipeline.load_params(cfg.weights_path)))
  by_rules = np.asarray(
    stage1.rejected(stage1.rule_flags(x), np.zeros_like(score), cfg)
  )
  rejected = np.asarray(stage1.rejected(stage1.rule_flags(x), score, cfg))
  assert not rejected[y == 0].any(), kinds[(y == 0) & rejected]
  extra = ("skip_test", "always_equal", "special_casing", "patching")
  extra += ("process_network",)
  sel = np.isin(kinds, extra)
  assert sel.sum() >= 5 * len(extra)
  assert not by_rules[sel].any() and rejected[sel].all()
  # The threshold sits in the gap the measurement found: honest code far
  # below it, the hacks the classifier catches far above.
  assert score[y == 0].max() < 0.2 < cfg.classifier_threshold
  assert score[sel].min() > 0.8 > cfg.classifier_threshold


def test_stale_weights_are_named(tmp_path):
  data = json.loads(open(config_lib.DEFAULT_WEIGHTS).read())
  del data["features"]["log_loops"]
  path = tmp_path / "stale.json"
  path.write_text(json.dumps(data))
  with pytest.raises(ValueError, match="missing \\['log_loops'\\].*regenerate"):
    pipeline.load_params(path)
  path.write_text("{")
  with pytest.raises(ValueError, match="not valid JSON"):
    pipeline.load_params(path)
