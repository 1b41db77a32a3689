"""Every file in configs/ loads, and its `rl` section validates."""

import importlib
import pathlib

import pytest

from codeagent_rl.rl import config as rl_config

CONFIG_DIR = pathlib.Path(__file__).resolve().parents[1] / "configs"
EXPERIMENTS = sorted(
  p.stem for p in CONFIG_DIR.glob("*.py") if "def get_config" in p.read_text()
)
PRESETS = {"tiny": [None, "smoke"]}


def test_there_are_experiment_configs():
  assert "tiny" in EXPERIMENTS


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_config_loads_and_validates(name):
  module = importlib.import_module(f"configs.{name}")
  for arg in PRESETS.get(name, [None]):
    config = module.get_config(arg)
    rl = rl_config.RLConfig.from_config(config.rl)
    assert rl.advantage.estimator in ("gae", "grpo", "dr_grpo", "rloo")
    with pytest.raises(AttributeError):
      config.not_a_field = 1  # configs are locked


def test_unknown_preset_is_rejected():
  from configs import tiny

  with pytest.raises(ValueError, match="unknown preset 'huge'"):
    tiny.get_config("huge")


@pytest.mark.parametrize(
  "section,field,value,match",
  [
    ("loss", "eps_low", 1.5, "rl.loss.eps_low=1.5"),
    ("loss", "agg_mode", "mean", "rl.loss.agg_mode='mean'"),
    ("loss", "dual_clip", 0.5, "rl.loss.dual_clip=0.5"),
    ("kl", "placement", "logits", "rl.kl.placement='logits'"),
    ("kl", "estimator", "k9", "rl.kl.estimator='k9'"),
    ("kl", "coef", -1.0, "rl.kl.coef=-1.0"),
    ("advantage", "estimator", "ppo", "advantage.estimator='ppo'"),
  ],
)
def test_bad_values_name_the_field(section, field, value, match):
  from configs import common

  rl = common.get_rl_config()
  rl[section][field] = value
  with pytest.raises(ValueError, match=match):
    rl_config.RLConfig.from_config(rl)


def test_sum_norm_mode_needs_length():
  from configs import common

  rl = common.get_rl_config()
  rl.loss.agg_mode = "seq_mean_token_sum_norm"
  with pytest.raises(ValueError, match="rl.loss.norm_length=None"):
    rl_config.RLConfig.from_config(rl)
  rl.loss.norm_length = 512.0
  assert rl_config.RLConfig.from_config(rl).loss.norm_length == 512.0


def test_stray_and_missing_fields_are_named():
  from configs import common

  rl = common.get_rl_config().to_dict()
  rl["kl"]["coeff"] = 0.1
  del rl["kl"]["coef"]
  with pytest.raises(
    ValueError, match=r"unknown fields \['coeff'\].*\['coef'\]"
  ):
    rl_config.RLConfig.from_config(rl)
