"""Named recipes of the comparison: they apply and validate; bad ones named."""

import pytest

from codeagent_rl.experiments import variants
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import run
from configs import long_horizon


def _get(tree, path):
  for part in path.split("."):
    tree = tree[part]
  return tree


@pytest.mark.parametrize("name", list(variants.VARIANTS))
@pytest.mark.parametrize("preset", ["smoke", None])
def test_every_variant_applies_and_validates(name, preset):
  config = long_horizon.get_config(preset)
  variant = variants.VARIANTS[name]
  applied = variants.apply(config, name)
  saved = exp_lib.to_dict(run.job_from_config(applied).exp)
  assert saved["rl"]["advantage"]["estimator"] == variant.estimator
  for path, value in variants.resolve(config, name).items():
    assert _get(saved, path) == value, path
  # The config given is left as it was.
  assert config.rl.advantage.estimator == "gae"
  assert config.rl.loss.eps_high == 0.2
  assert config.critic.privileged == "none"


def test_plain_estimators_are_the_config_with_that_estimator():
  config = long_horizon.get_config("smoke")
  for name in ("gae", "grpo", "rloo"):
    assert not variants.VARIANTS[name].overrides
    applied = variants.apply(config, name)
    expected = config.to_dict()
    expected["rl"]["advantage"]["estimator"] = name
    assert applied.to_dict() == expected


def test_recipes_hold_the_settings_they_name():
  vapo = dict(variants.VARIANTS["vapo"].overrides)
  assert vapo == {
    "rl.advantage.lam_length_alpha": 0.05,
    "rl.advantage.lam_critic": 1.0,
    "ppo.value_pretrain_iterations": 20,
    "ppo.critic_warmup_iterations": 0,
    "rl.loss.eps_high": 0.28,
    "rl.loss.positive_nll_coef": 0.1,
    "rl.advantage.critic_trust": "none",
  }
  trust = {"rl.advantage.critic_trust": "explained_variance"}
  turn = dict(variants.VARIANTS["ppo_turn"].overrides)
  assert turn == {
    **vapo,
    **trust,
    "rl.advantage.credit": "turn",
    "rl.advantage.lam_length_alpha": 0.0,
    "rl.advantage.lam": 0.95,
  }
  tests = dict(variants.VARIANTS["ppo_tests"].overrides)
  assert tests == {**vapo, **trust, "critic.privileged": "tests"}
  assert dict(variants.VARIANTS["vapo_trust"].overrides) == {**vapo, **trust}
  assert dict(variants.VARIANTS["ppo"].overrides) == {
    "rl.advantage.lam_critic": 0.95,
    "rl.advantage.lam_length_alpha": 0.0,
    "rl.advantage.credit": "token",
    "rl.advantage.critic_trust": "none",
    "ppo.value_pretrain_iterations": 0,
    "ppo.critic_warmup_iterations": 1,
  }
  dapo = variants.VARIANTS["grpo_dapo"]
  assert dapo.estimator == "grpo"
  assert dict(dapo.overrides) == {
    "ppo.dynamic_sampling": True,
    "rl.loss.eps_high": 0.28,
    "rl.kl.coef": 0.0,
    "rl.loss.agg_mode": "token_mean",
  }
  for name in ("ppo", "vapo", "vapo_trust", "ppo_turn", "ppo_tests"):
    assert variants.VARIANTS[name].estimator == "gae"
  assert all(v.description for v in variants.VARIANTS.values())


def test_dr_grpo_normalises_by_the_token_budget_of_the_config_run():
  config = long_horizon.get_config("smoke")
  with config.unlocked():
    config.env.max_total_tokens = 1000
  applied = variants.apply(config, "dr_grpo")
  assert applied.rl.advantage.estimator == "dr_grpo"
  assert applied.rl.loss.agg_mode == "seq_mean_token_sum_norm"
  assert applied.rl.loss.norm_length == 1000
  run.job_from_config(applied)
  assert variants.resolve(config, "dr_grpo")["rl.loss.norm_length"] == 1000


def test_a_field_the_config_lacks_is_named():
  config = long_horizon.get_config("smoke")
  for path in ("rl.loss.no_such_field", "no_section.x", "rl.loss.eps_high.x"):
    bad = variants.Variant("gae", {path: 1.0})
    with pytest.raises(ValueError, match=f"variant 'bad': config field {path}"):
      variants.apply(config, "bad", bad)
  lookup = variants.Variant("gae", {"rl.kl.coef": variants.FromConfig("env.x")})
  with pytest.raises(ValueError, match="variant 'bad': config field env.x"):
    variants.apply(config, "bad", lookup)


def test_a_value_of_the_wrong_type_is_named():
  config = long_horizon.get_config("smoke")
  bad = variants.Variant("grpo", {"ppo.dynamic_sampling": "yes"})
  with pytest.raises(
    ValueError, match="variant 'bad': config field ppo.dynamic_sampling='yes'"
  ):
    variants.apply(config, "bad", bad)


def test_unknown_and_repeated_names_list_the_known_ones():
  variants.check_names(["vapo", "grpo_dapo"])
  for names in (["vapo", "ppo2"], ["gae", "gae"], []):
    with pytest.raises(ValueError, match="known variants are gae, grpo"):
      variants.check_names(names, "--variants")


def test_a_variant_may_not_change_what_the_variants_share():
  for path in ("sft.steps", "data.seed", "seed", "env.max_turns", "eval.x"):
    with pytest.raises(ValueError, match=f"{path} is in config"):
      variants.Variant("gae", {path: 1})
  with pytest.raises(ValueError, match="variant's `estimator`"):
    variants.Variant("gae", {"rl.advantage.estimator": "grpo"})
  with pytest.raises(ValueError, match="Variant.estimator='ppo'"):
    variants.Variant("ppo")
  with pytest.raises(TypeError):
    variants.VARIANTS["vapo"].overrides["rl.kl.coef"] = 1.0  # read-only
