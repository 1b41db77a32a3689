"""AntiCheatConfig: the defaults validate; bad values name the field."""

import pytest

from codeagent_rl.anticheat import config as config_lib
from codeagent_rl.anticheat import names
from configs import common


def test_defaults_validate():
  cfg = config_lib.AntiCheatConfig.from_config(common.get_anticheat_config())
  # Only the hacks by construction reject; the other flags are features.
  assert cfg.enforced_flags == (
    "process_exit",
    "file_env_probing",
    "early_termination",
    "protected_edits",
  )
  assert sum(cfg.enforced_mask) == 4
  assert len(cfg.enforced_mask) == names.NUM_FLAGS
  assert cfg.weights_path == config_lib.DEFAULT_WEIGHTS


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("stage1_action", "drop", "anticheat.stage1_action='drop'"),
    ("stage2_action", None, "anticheat.stage2_action=None"),
    ("stage1_penalty", 0.5, "anticheat.stage1_penalty=0.5"),
    ("stage2_penalty", float("nan"), "anticheat.stage2_penalty=nan"),
    ("classifier_threshold", 0.0, "anticheat.classifier_threshold=0.0"),
    ("classifier_threshold", 1.5, "anticheat.classifier_threshold=1.5"),
    ("stage2_threshold", -0.1, "anticheat.stage2_threshold=-0.1"),
    ("skip_flagged", 1, "anticheat.skip_flagged=1"),
    ("total_min_suites", "yes", "anticheat.total_min_suites='yes'"),
    ("enforced_flags", ("exit",), r"anticheat.enforced_flags=.*\['exit'\]"),
    ("enforced_flags", "process_exit", "must be a tuple of flag names"),
    ("classifier_weights", None, "anticheat.classifier_weights=None"),
  ],
)
def test_bad_values_name_the_field(field, value, match):
  section = common.get_anticheat_config().to_dict()
  section[field] = value
  with pytest.raises(ValueError, match=match):
    config_lib.AntiCheatConfig.from_config(section)


def test_stray_and_missing_fields_are_named():
  section = common.get_anticheat_config().to_dict()
  section["threshold"] = 0.5
  del section["stage2_threshold"]
  with pytest.raises(
    ValueError, match=r"unknown fields \['threshold'\].*\['stage2_threshold'\]"
  ):
    config_lib.AntiCheatConfig.from_config(section)
