"""Tests of codeagent_rl.rl.advantages: registry, group baselines, whitening."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.rl import advantages
from codeagent_rl.rl import config as rl_config
from codeagent_rl.rl import gae
from configs import common

BASE = advantages.AdvantageConfig(
  estimator="gae",
  gamma=1.0,
  lam=0.95,
  lam_critic=0.95,
  lam_length_alpha=0.0,
  credit="token",
  critic_trust="none",
  gae_method="scan",
  group_eps=1e-6,
  whiten=False,
)


def make_inputs(scores, trainable, group_id, values=None):
  trainable = np.asarray(trainable, bool)
  b, t = trainable.shape
  return advantages.AdvantageInputs(
    rewards=gae.place_terminal_reward(
      jnp.asarray(scores, jnp.float32), trainable
    ),
    values=jnp.zeros((b, t)) if values is None else jnp.asarray(values),
    trainable=jnp.asarray(trainable),
    truncated=jnp.zeros((b,), bool),
    bootstrap_value=jnp.zeros((b,)),
    group_id=jnp.asarray(group_id, jnp.int32),
  )


def run(estimator, inputs, **overrides):
  cfg = dataclasses.replace(BASE, estimator=estimator, **overrides)
  return advantages.compute_advantages(inputs, cfg)


# Two groups, interleaved (non-contiguous), one of size 3 and one of size 2,
# plus a singleton group; rows have different lengths.
TRAINABLE = [
  [1, 1, 0, 1],
  [1, 0, 0, 0],
  [0, 1, 1, 1],
  [1, 1, 1, 1],
  [1, 1, 0, 0],
  [0, 1, 0, 0],
]
GROUPS = [7, 3, 7, 3, 7, 9]
SCORES = [1.0, 0.0, 0.0, 1.0, 0.5, 1.0]


def expected_group(scores, groups, fn):
  scores, groups = np.asarray(scores), np.asarray(groups)
  out = np.zeros_like(scores)
  for i, g in enumerate(groups):
    members = scores[groups == g]
    out[i] = fn(scores[i], members)
  return out


def check_broadcast(adv, per_row):
  mask = np.asarray(TRAINABLE, bool)
  want = np.where(mask, np.asarray(per_row)[:, None], 0.0)
  np.testing.assert_allclose(adv, want, rtol=1e-5, atol=1e-6)


def test_grpo():
  adv, _ = run("grpo", make_inputs(SCORES, TRAINABLE, GROUPS))

  def fn(s, g):
    return 0.0 if len(g) == 1 else (s - g.mean()) / (g.std(ddof=1) + 1e-6)

  check_broadcast(adv, expected_group(SCORES, GROUPS, fn))
  # Hand check of group 7 (scores 1, 0, 0.5): mean .5, sample std .5.
  np.testing.assert_allclose(adv[0, 0], 1.0, rtol=1e-5)


def test_dr_grpo():
  adv, _ = run("dr_grpo", make_inputs(SCORES, TRAINABLE, GROUPS))
  check_broadcast(
    adv, expected_group(SCORES, GROUPS, lambda s, g: s - g.mean())
  )


def test_rloo():
  adv, _ = run("rloo", make_inputs(SCORES, TRAINABLE, GROUPS))

  def fn(s, g):
    return 0.0 if len(g) == 1 else s - (g.sum() - s) / (len(g) - 1)

  check_broadcast(adv, expected_group(SCORES, GROUPS, fn))
  # Group 3 (scores 0, 1): -1 and +1.
  np.testing.assert_allclose(adv[1, 0], -1.0)
  np.testing.assert_allclose(adv[3, 0], 1.0)


def test_group_score_includes_token_kl_penalty():
  inputs = make_inputs([1.0, 1.0], [[1, 1], [1, 1]], [0, 0])
  penalty = jnp.array([[0.5, 0.0], [0.0, 0.0]])
  inputs = inputs.replace(rewards=inputs.rewards - penalty)
  adv, returns = run("dr_grpo", inputs)
  np.testing.assert_allclose(adv, [[-0.25, -0.25], [0.25, 0.25]], rtol=1e-6)
  np.testing.assert_allclose(returns, [[0.5, 0.5], [1.0, 1.0]], rtol=1e-6)


def test_gae_estimator_equals_compute_gae():
  rng = np.random.default_rng(0)
  trainable = rng.random((4, 12)) < 0.6
  values = rng.normal(size=(4, 12)).astype(np.float32)
  inputs = make_inputs(rng.random(4), trainable, [0, 0, 1, 1], values)
  inputs = inputs.replace(
    truncated=jnp.array([True, False, True, False]),
    bootstrap_value=jnp.asarray(rng.normal(size=4), jnp.float32),
  )
  adv, ret = run("gae", inputs)
  want_adv, want_ret = gae.compute_gae(
    inputs.rewards,
    inputs.values,
    inputs.trainable,
    gamma=1.0,
    lam=0.95,
    truncated=inputs.truncated,
    bootstrap_value=inputs.bootstrap_value,
  )
  np.testing.assert_array_equal(adv, want_adv)
  np.testing.assert_array_equal(ret, want_ret)


def test_whitening_over_trainable_tokens_only():
  rng = np.random.default_rng(1)
  mask = rng.random((5, 9)) < 0.5
  x = rng.normal(3.0, 2.0, size=(5, 9)).astype(np.float32)
  x_off = np.where(mask, x, 1e6)  # values off the mask must not matter
  out = np.asarray(advantages.masked_whiten(x_off, mask))
  np.testing.assert_allclose(out[mask].mean(), 0.0, atol=1e-5)
  np.testing.assert_allclose(out[mask].std(), 1.0, rtol=1e-4)
  assert np.all(out[~mask] == 0)
  scaled = np.asarray(advantages.masked_whiten(x, mask, shift_mean=False))
  np.testing.assert_allclose(scaled[mask], x[mask] / x[mask].std(), rtol=1e-4)


def test_whiten_flag_applies_to_registry_output():
  inputs = make_inputs(SCORES, TRAINABLE, GROUPS)
  adv, _ = run("rloo", inputs, whiten=True)
  mask = np.asarray(TRAINABLE, bool)
  np.testing.assert_allclose(np.asarray(adv)[mask].mean(), 0.0, atol=1e-5)
  np.testing.assert_allclose(np.asarray(adv)[mask].std(), 1.0, rtol=1e-4)


@pytest.mark.parametrize("estimator", sorted(advantages.ADVANTAGE_ESTIMATORS))
def test_every_estimator_jits_and_is_zero_off_mask(estimator):
  inputs = make_inputs(SCORES, TRAINABLE, GROUPS, np.ones((6, 4), np.float32))
  cfg = dataclasses.replace(BASE, estimator=estimator)
  adv, ret = jax.jit(lambda x: advantages.compute_advantages(x, cfg))(inputs)
  mask = np.asarray(TRAINABLE, bool)
  assert np.all(np.asarray(adv)[~mask] == 0)
  assert np.all(np.asarray(ret)[~mask] == 0)
  assert np.all(np.isfinite(adv))


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("estimator", "ppo", "advantage.estimator='ppo'"),
    ("gamma", 1.5, "advantage.gamma=1.5"),
    ("lam", -0.1, "advantage.lam=-0.1"),
    ("gae_method", "fast", "advantage.gae_method='fast'"),
    ("group_eps", 0.0, "advantage.group_eps=0.0"),
  ],
)
def test_config_validation_names_field(field, value, match):
  with pytest.raises(ValueError, match=match):
    dataclasses.replace(BASE, **{field: value})


def _gae_inputs(seed):
  rng = np.random.default_rng(seed)
  trainable = rng.random((6, 20)) < 0.6
  values = rng.normal(size=(6, 20)).astype(np.float32)
  inputs = make_inputs(rng.random(6), trainable, [0, 0, 1, 1, 2, 2], values)
  return inputs.replace(
    truncated=jnp.array([True, False] * 3),
    bootstrap_value=jnp.asarray(rng.normal(size=6), jnp.float32),
  )


def _direct(inputs, lam, fn=gae.compute_gae):
  return fn(
    inputs.rewards,
    inputs.values,
    inputs.trainable,
    gamma=1.0,
    lam=lam,
    truncated=inputs.truncated,
    bootstrap_value=inputs.bootstrap_value,
  )


def test_decoupled_lambdas_advantages_at_lam_returns_at_lam_critic():
  inputs = _gae_inputs(3)
  adv, ret = run("gae", inputs, lam=0.9, lam_critic=1.0)
  np.testing.assert_allclose(adv, _direct(inputs, 0.9)[0], atol=1e-6)
  np.testing.assert_allclose(ret, _direct(inputs, 1.0)[1], atol=1e-6)
  # lambda 1 targets are Monte-Carlo: the sum of the row's later rewards
  # (the bootstrap where truncated), whatever the values.
  assert np.abs(np.asarray(ret - _direct(inputs, 0.9)[1])).max() > 1e-2


def test_length_adaptive_lambda_per_row_from_its_trainable_tokens():
  inputs = _gae_inputs(4)
  adv, ret = run("gae", inputs, lam_length_alpha=0.2, lam_critic=0.7)
  n = np.asarray(inputs.trainable).sum(axis=1)
  lams = np.clip(1 - 1 / (0.2 * n), 0, 1)
  assert len(set(lams.round(6))) > 1  # the rows' lambdas differ
  np.testing.assert_allclose(
    adv, _direct(inputs, jnp.asarray(lams, jnp.float32))[0], atol=1e-6
  )
  np.testing.assert_allclose(ret, _direct(inputs, 0.7)[1], atol=1e-6)


def test_turn_credit_through_the_registry():
  inputs = _gae_inputs(5)
  adv, ret = run("gae", inputs, credit="turn", lam=0.8, lam_critic=1.0)
  want_adv, _ = _direct(inputs, 0.8, gae.compute_turn_gae)
  _, want_ret = _direct(inputs, 1.0, gae.compute_turn_gae)
  np.testing.assert_allclose(adv, want_adv, atol=1e-6)
  np.testing.assert_allclose(ret, want_ret, atol=1e-6)


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("lam_critic", 1.2, "advantage.lam_critic=1.2"),
    ("lam_length_alpha", -0.05, "advantage.lam_length_alpha=-0.05"),
    ("lam_length_alpha", float("inf"), "advantage.lam_length_alpha=inf"),
    ("credit", "episode", "advantage.credit='episode'"),
    ("critic_trust", "always", "advantage.critic_trust='always'"),
  ],
)
def test_new_fields_are_validated(field, value, match):
  with pytest.raises(ValueError, match=match):
    dataclasses.replace(BASE, **{field: value})


@pytest.mark.parametrize("algo", ["grpo", "rloo", "dr_grpo"])
@pytest.mark.parametrize(
  "field,value", [("credit", "turn"), ("lam_length_alpha", 0.05)]
)
def test_gae_only_fields_are_refused_with_a_group_estimator(algo, field, value):
  section = common.get_rl_config().to_dict()
  section["advantage"]["estimator"] = algo
  rl_config.RLConfig.from_config(section)  # the defaults are fine
  section["advantage"][field] = value
  with pytest.raises(ValueError, match=f"estimator='{algo}'"):
    rl_config.RLConfig.from_config(section)


def _with_values(inputs, values):
  return inputs.replace(values=jnp.asarray(values, jnp.float32))


def _monte_carlo(inputs):
  return _direct(inputs, 1.0)[1]


def test_an_unlearnt_critic_gets_no_trust_lambda_one():
  """Values that explain nothing of the returns: Monte-Carlo advantages."""
  inputs = _gae_inputs(7)
  mc = np.asarray(_monte_carlo(inputs))
  mask = np.asarray(inputs.trainable)
  # Values anti-correlated with the returns: explained variance < 0.
  inputs = _with_values(inputs, np.where(mask, 1.0 - mc, 0.0))
  cfg = dataclasses.replace(BASE, critic_trust="explained_variance", lam=0.8)
  assert float(advantages.critic_trust(inputs, cfg)) == 0.0
  np.testing.assert_allclose(advantages.actor_lambda(inputs, cfg), 1.0)
  adv, _ = advantages.compute_advantages(inputs, cfg)
  np.testing.assert_allclose(adv, _direct(inputs, 1.0)[0], atol=1e-6)


def test_a_critic_that_explains_the_returns_keeps_the_configured_lambda():
  inputs = _gae_inputs(8)
  inputs = _with_values(inputs, _monte_carlo(inputs))  # EV = 1
  cfg = dataclasses.replace(BASE, critic_trust="explained_variance", lam=0.8)
  np.testing.assert_allclose(advantages.critic_trust(inputs, cfg), 1.0)
  np.testing.assert_allclose(
    advantages.actor_lambda(inputs, cfg), 0.8, atol=1e-6
  )


def test_trust_scales_the_distance_to_one_per_row_and_spares_the_returns():
  inputs = _gae_inputs(9)
  mc = np.asarray(_monte_carlo(inputs))
  noise = np.random.default_rng(0).normal(size=mc.shape)
  inputs = _with_values(inputs, mc + 0.7 * noise * mc.std())
  cfg = dataclasses.replace(
    BASE,
    critic_trust="explained_variance",
    lam_length_alpha=0.2,
    lam_critic=0.9,
  )
  trust = float(advantages.critic_trust(inputs, cfg))
  assert 0.2 < trust < 0.9
  n = np.asarray(inputs.trainable).sum(axis=1)
  base = np.clip(1 - 1 / (0.2 * n), 0, 1)
  want = 1 - (1 - base) * trust
  np.testing.assert_allclose(
    advantages.actor_lambda(inputs, cfg), want, atol=1e-5
  )
  adv, ret = advantages.compute_advantages(inputs, cfg)
  np.testing.assert_allclose(
    adv, _direct(inputs, jnp.asarray(want, jnp.float32))[0], atol=1e-5
  )
  np.testing.assert_allclose(ret, _direct(inputs, 0.9)[1], atol=1e-6)
