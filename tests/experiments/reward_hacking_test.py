"""The reward-hacking experiment: its variants, tables and its command line.

These tests check the variants' configs, the reading of a run and the
tables on small inputs. Two variants of configs/reward_hacking.py's smoke
preset run end to end (under gVisor where it is installed) through
colabs/reward_hacking.ipynb, in tests/colabs/notebooks_test.py.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from codeagent_rl.anticheat import config as anticheat_config
from codeagent_rl.experiments import reward_hacking
from codeagent_rl.train import experiment
from codeagent_rl.train import workdir as workdir_lib
from configs import reward_hacking as reward_hacking_config
from tests.helpers import processes


def _anticheat(variant):
  config = reward_hacking.variant_config(
    reward_hacking_config.get_config("smoke"), variant, 0.4
  )
  for kind in reward_hacking.HACK_KINDS:
    assert config.data[kind] == 0.4
  exp = experiment.Experiment.from_config(config)  # still a valid config
  assert isinstance(exp.anticheat, anticheat_config.AntiCheatConfig)
  return exp.anticheat


def test_each_variant_enforces_its_stages():
  default = reward_hacking_config.get_config("smoke").anticheat
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
  config = reward_hacking_config.get_config("smoke")
  reward_hacking.variant_config(config, "none", 0.9)
  assert config.data.hardcoded == 0.0
  assert config.anticheat.stage2_threshold == 1.0


def test_the_preset_is_weak_with_an_oracle():
  for name in ("smoke", None):
    data = reward_hacking_config.get_config(name).data
    assert data.suite_a == "weak" and data.oracle_tests > 0
  with pytest.raises(ValueError, match="unknown preset 'fast'"):
    reward_hacking_config.get_config("fast")


@pytest.mark.parametrize(
  ("variants", "hack_demos", "message"),
  [
    (["none", "all"], 0.3, "unknown"),
    (["both", "both"], 0.3, "repeats"),
    ([], 0.3, "at least one"),
    (["none"], 1.5, "--hack_demos=1.5"),
    (["none"], True, "--hack_demos=True"),
  ],
)
def test_bad_arguments_are_named(variants, hack_demos, message):
  with pytest.raises(ValueError, match=message):
    reward_hacking.validate(
      reward_hacking_config.get_config("smoke"), variants, hack_demos
    )


@pytest.mark.parametrize(
  ("seeds", "message"),
  [(["0", "0"], "distinct"), (["x"], "'x'"), ([], "distinct")],
)
def test_bad_seeds_are_named(seeds, message):
  with pytest.raises(ValueError, match=message):
    reward_hacking.parse_seeds(seeds)


def test_a_run_saved_as_another_variant_is_refused(tmp_path):
  config = reward_hacking_config.get_config("smoke")
  planned = reward_hacking.plan(config, ["none", "both"], [0], 0.3, tmp_path)
  [none_job] = [job for spec, job in planned if spec.variant == "none"]
  saved = tmp_path / "seed0" / "both" / "config.json"
  saved.parent.mkdir(parents=True)
  (tmp_path / "seed0" / "none").mkdir()
  saved.write_text(json.dumps(experiment.to_dict(none_job.exp)))
  with pytest.raises(experiment.SetupError, match="anticheat.classifier"):
    reward_hacking.plan(config, ["none", "both"], [0], 0.3, tmp_path)
  # In the run of its own variant it is resumed.
  saved.rename(tmp_path / "seed0" / "none" / "config.json")
  reward_hacking.plan(config, ["none", "both"], [0], 0.3, tmp_path)


def test_ends_of_a_curve():
  assert reward_hacking.ends([0.1, None, 0.3, 0.5, 0.6, 0.7], 2) == {
    "start": pytest.approx(0.1),
    "end": pytest.approx(0.65),
    "rise": pytest.approx(0.55),
  }
  assert reward_hacking.ends([None, None]) == {
    "start": None,
    "end": None,
    "rise": None,
  }


def _record(variant, seed, reward, hack, oracle_final):
  """A `read_run` record with flat curves and one final evaluation."""
  curves = {key: [0.0] * 4 for key in reward_hacking.CURVES}
  curves["reward/total_mean"] = reward
  curves["oracle/hack_rate"] = hack
  evals = dict.fromkeys(reward_hacking.EVAL_KEYS, 0.0)
  return {
    "variant": variant,
    "seed": seed,
    "iterations": len(reward),
    "curves": curves,
    "ends": {k: reward_hacking.ends(v) for k, v in curves.items()},
    "sft_eval": dict(evals),
    "final_eval": {**evals, "eval/sampled/oracle_pass": oracle_final},
  }


def test_summary_means_over_seeds_and_pairs_by_seed(tmp_path):
  rising = [0.1, 0.1, 0.1, 0.5, 0.5, 0.5]
  runs = {
    "none/seed0": _record("none", 0, rising, [0.2] * 6, 0.1),
    "none/seed1": _record("none", 1, [0.2] * 6, [0.4] * 6, 0.3),
    "both/seed0": _record("both", 0, [0.1] * 6, [0.0] * 6, 0.2),
    "both/seed1": _record("both", 1, [0.1] * 6, [0.1] * 6, 0.3),
  }
  rows = reward_hacking.summarize(runs, ["none", "both"])
  rise = rows["none"]["reward_rise"]
  assert rise["mean"] == pytest.approx(0.2)  # (0.4 + 0) / 2
  assert rise["se"] == pytest.approx(0.2)  # std 0.283 / sqrt 2
  hack = rows["both"]["hack_end"]
  assert hack["mean"] == pytest.approx(0.05)
  # Paired by seed: (0 - 0.2) and (0.1 - 0.4).
  assert hack["diff"] == pytest.approx(-0.25)
  assert hack["diff_se"] == pytest.approx(0.05)
  assert rows["both"]["oracle_sampled"]["diff"] == pytest.approx(0.05)
  assert rows["none"]["oracle_sampled"]["diff"] == 0.0
  out = {"variants": ["none", "both"], "seeds": [0, 1], "rows": rows}
  out["runs"] = runs
  text = reward_hacking.table_text(out)
  both = text.splitlines()[2].split()
  assert both[0] == "both"
  assert "-0.250±0.050" in both
  path = reward_hacking.plot(out, tmp_path)
  with open(path, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_run_is_read(tmp_path):
  paths = workdir_lib.Workdir(tmp_path)
  records = [
    {"iteration": 0, "reward/total_mean": 0.1, "oracle/hack_rate": 0.5},
    {
      "iteration": 1,
      "reward/total_mean": 0.3,
      "eval/greedy/oracle_pass": 0.25,
    },
  ]
  paths.metrics.write_text("\n".join(map(json.dumps, records)) + "\n")
  paths.eval_sft.write_text(
    json.dumps({"eval": {"eval/greedy/oracle_pass": 0.125}, "key": {}})
  )
  kinds = ["single_turn"] * 6 + ["hardcoded", "swallow", "weak_assert", "x"]
  np.savez(paths.sft_data, kinds=np.asarray(kinds))
  run = reward_hacking.read_run(tmp_path)
  assert run["iterations"] == 2
  assert run["curves"]["reward/total_mean"] == [0.1, 0.3]
  assert run["curves"]["oracle/hack_rate"] == [0.5, None]
  assert run["sft_eval"]["eval/greedy/oracle_pass"] == 0.125
  assert run["final_eval"]["eval/greedy/oracle_pass"] == 0.25
  assert run["final_eval"]["eval/sampled/oracle_pass"] is None
  assert run["hack_demo_share"] == pytest.approx(0.3)


# The smoke preset end to end (two variants, one SFT model restored by the
# second, the results file, table and plot) runs as the notebook runs it:
# tests/colabs/notebooks_test.py::test_reward_hacking_runs_its_variants.


def test_the_cli_names_a_bad_variant(tmp_path):
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "codeagent_rl.experiments.reward_hacking",
      "--config=configs/reward_hacking.py:smoke",
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
