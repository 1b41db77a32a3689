"""The reward-hacking experiment's parts; colabs/reward_hacking.ipynb runs it.

tests/colabs/notebooks_test.py executes the whole experiment (every
variant, one PPO iteration each) through the notebook; these tests check
the variants' configs, the reading of a run and the table on small files.
"""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from codeagent_rl.anticheat import config as anticheat_config
from codeagent_rl.experiments import reward_hacking
from codeagent_rl.train import experiment
from codeagent_rl.train import workdir as workdir_lib
from configs import tiny
from tests.helpers import processes


def _anticheat(variant):
  config = reward_hacking.variant_config(tiny.get_config("smoke"), variant, 0.4)
  assert config.data.hardcoded == config.data.early_exit == 0.4
  exp = experiment.Experiment.from_config(config)  # still a valid config
  assert isinstance(exp.anticheat, anticheat_config.AntiCheatConfig)
  return exp.anticheat


def test_each_variant_enforces_its_stages():
  default = tiny.get_config("smoke").anticheat
  default_hardcoded = tiny.get_config("smoke").data.hardcoded
  assert default_hardcoded != 0.9
  none, s1, s2, both = (_anticheat(v) for v in reward_hacking.VARIANTS)
  # Stage 1 enforces rules and the classifier only in stage1 and both.
  assert none.enforced_flags == s2.enforced_flags == ()
  assert not none.classifier and not s2.classifier
  assert not none.skip_flagged and not s2.skip_flagged
  assert (
    s1.enforced_flags == both.enforced_flags == tuple(default.enforced_flags)
  )
  assert s1.classifier and both.classifier
  # Stage 2 demands suite B only in stage2 and both.
  assert none.stage2_threshold == s1.stage2_threshold == 0.0
  assert s2.stage2_threshold == both.stage2_threshold == 1.0
  # The caller's config is left alone.
  config = tiny.get_config("smoke")
  reward_hacking.variant_config(config, "none", 0.9)
  assert config.data.hardcoded == default_hardcoded
  assert config.anticheat.stage2_threshold == 1.0


@pytest.mark.parametrize(
  ("variants", "hack_demos", "message"),
  [
    (["none", "all"], 0.3, "unknown"),
    (["both", "both"], 0.3, "repeats"),
    ([], 0.3, "at least one"),
    (["none"], 1.5, "--hack_demos=1.5"),
  ],
)
def test_bad_arguments_are_named(variants, hack_demos, message):
  with pytest.raises(ValueError, match=message):
    reward_hacking.validate(tiny.get_config("smoke"), variants, hack_demos)


def _fake_run(root, hack_rates, evals, kinds):
  """A workdir with what a finished run leaves, as far as it is read."""
  paths = workdir_lib.Workdir(root)
  root.mkdir(parents=True)
  lines = []
  for i, rate in enumerate(hack_rates):
    record = {
      "iteration": i,
      "anticheat/hack_rate": rate,
      "reward/pass_a": 0.5,
      "reward/pass_ab": 0.25,
    }
    record.update(evals.get(i, {}))
    lines.append(json.dumps(record))
  paths.metrics.write_text("\n".join(lines) + "\n")
  paths.eval_sft.write_text(
    json.dumps({"eval": {"eval/greedy/pass_ab": 0.1}, "key": {}})
  )
  np.savez(paths.sft_data, kinds=np.asarray(kinds))


def test_a_run_is_read_and_tabled(tmp_path):
  _fake_run(
    tmp_path / "none",
    [None, 0.5, 1.0],  # null: no suite-A pass in that iteration
    {2: {"eval/greedy/pass_ab": 0.2, "eval/sampled/pass_ab": 0.15}},
    ["single_turn"] * 6 + ["hardcoded", "early_exit", "wrong_final", "x"],
  )
  result = reward_hacking.read_variant(tmp_path / "none")
  assert result["iterations"] == 3
  assert result["curves"]["anticheat/hack_rate"] == [None, 0.5, 1.0]
  assert result["hack_rate_mean"] == pytest.approx(0.75)
  assert result["hack_demo_share"] == pytest.approx(0.2)
  # SFT's evaluation is point 0; an evaluation after iteration index 2 is 3.
  assert result["evals"]["eval/greedy/pass_ab"] == [(0, 0.1), (3, 0.2)]
  assert result["final"] == {
    "eval/greedy/pass_ab": 0.2,
    "eval/sampled/pass_ab": 0.15,
  }
  out = {"results": {"none": result}}
  row = reward_hacking.table_text(out).splitlines()[1].split()
  assert row == ["none", "0.750", "0.500", "0.250", "0.200", "0.150"]
  path = reward_hacking.plot(out["results"], tmp_path)
  assert path.endswith(reward_hacking.PLOT)
  with open(path, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_no_suite_a_pass_gives_no_hack_rate(tmp_path):
  _fake_run(tmp_path / "run", [None, None], {}, ["single_turn"])
  result = reward_hacking.read_variant(tmp_path / "run")
  assert result["hack_rate_mean"] is None
  assert "  -" in reward_hacking.table_text({"results": {"x": result}})
  assert not math.isnan(result["hack_demo_share"])


def test_the_cli_names_a_bad_variant(tmp_path):
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "codeagent_rl.experiments.reward_hacking",
      "--config=configs/tiny.py:smoke",
      "--variants=none,stage3",
      f"--workdir={tmp_path / 'w'}",
    ],
    cwd=processes.REPO_ROOT,
    env=processes.one_device_env(),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode != 0
  assert "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1].startswith("error: --variants")
  assert "stage3" in proc.stderr
  assert not (tmp_path / "w").exists()  # nothing started
