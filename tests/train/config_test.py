"""A bad trainer config stops early, with a message naming the field."""

import os
import pathlib
import subprocess
import sys

import ml_collections
import pytest

from codeagent_rl.train import experiment
from codeagent_rl.train import ppo as ppo_lib
from configs import tiny

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _smoke() -> ml_collections.ConfigDict:
  return tiny.get_config("smoke")


def test_smoke_config_is_valid():
  exp = experiment.Experiment.from_config(_smoke())
  assert exp.ppo.rollouts_per_iteration == 8
  assert exp.eval.modes == ("greedy", "sampled")
  assert exp.uses_critic


@pytest.mark.parametrize(
  "section,field,value,match",
  [
    ("ppo", "epochs", 0, r"config\.ppo\.epochs=0"),
    ("ppo", "minibatches", 3, r"config\.ppo\.minibatches=3: must divide"),
    ("ppo", "micro_batch_size", 3, r"config\.ppo\.micro_batch_size=3"),
    ("ppo", "critic_warmup_iterations", -1, r"ppo\.critic_warmup_iter"),
    ("ppo", "rollout_slots", -1, r"config\.ppo\.rollout_slots=-1: must be"),
    ("ppo", "rollout_slots", 9, r"ppo\.rollout_slots=9: must be <= the 8"),
    (
      "data",
      "difficulty_weights",
      (0.0, 0.0, 0.0),
      r"config\.data: .*difficulty_weights",
    ),
    (
      "data",
      "difficulty_weights",
      (1.0, -1.0, 0.0),
      r"config\.data: .*difficulty_weights",
    ),
    ("data", "num_eval_tasks", 0, r"config\.data\.num_eval_tasks=0"),
    ("data", "repo_edit_tool", "sed", r"config\.data\.repo_edit_tool='sed'"),
    ("data", "seed", -1, r"config\.data\.seed=-1: must be None"),
    ("data", "seed", 2**32, r"config\.data\.seed=4294967296: must be None"),
    ("data", "seed", "7", r"config\.data\.seed='7': must be None"),
    ("data", "seed", True, r"config\.data\.seed=True: must be None"),
    ("eval", "samples_per_task", 0, r"config\.eval\.samples_per_task=0"),
    ("sampling", "top_p", 1.5, r"config\.sampling\.top_p=1\.5"),
    ("sampling", "top_p", 0.0, r"config\.sampling\.top_p=0\.0"),
    ("sampling", "temperature", 0.0, r"config\.sampling\.temperature=0\.0"),
    ("sft", "batch_size", 0, r"config\.sft\.batch_size=0"),
    ("sft", "learning_rate", -1.0, r"config\.sft\.learning_rate=-1\.0"),
    ("sft", "length_bucket", 0, r"config\.sft\.length_bucket=0"),
    ("sft", "save_every", -1, r"config\.sft\.save_every=-1"),
    ("sft", "final_lr_fraction", 1.5, r"config\.sft\.final_lr_fraction=1\.5"),
    ("env", "max_turns", 0, r"env\.max_turns=0"),
    ("model", "vocab_size", 256, r"config\.model\.vocab_size=256.*272"),
    ("optim", "b2", 1.0, r"optim\.b2=1\.0"),
    ("checkpoint", "keep", 0, r"checkpoint\.keep=0"),
    ("rl.kl", "placement", "logits", r"rl\.kl\.placement='logits'"),
  ],
)
def test_bad_value_is_rejected_naming_the_field(section, field, value, match):
  # Through a plain dict, as a config built without the presets' typed
  # placeholders arrives: a typed ConfigDict refuses some values (a str seed)
  # before the experiment sees them.
  values = _smoke().to_dict()
  node = values
  for part in section.split("."):
    node = node[part]
  node[field] = value
  config = ml_collections.ConfigDict(values)
  with pytest.raises(ValueError, match=match):
    experiment.Experiment.from_config(config)


def test_typed_seed_placeholder_refuses_a_string_on_assignment():
  config = _smoke()
  with pytest.raises(TypeError, match="seed"):
    config.data.seed = "7"
  config.data.seed = 7
  assert experiment.Experiment.from_config(config).data.seed == 7


@pytest.mark.parametrize("value", [None, 1, 0.0, "false"])
def test_skip_actor_on_flat_rewards_must_be_a_bool(value):
  values = _smoke().to_dict()
  values["ppo"]["skip_actor_on_flat_rewards"] = value
  # Through a plain dict: a ConfigDict itself refuses most non-bools.
  config = ml_collections.ConfigDict(values)
  with pytest.raises(
    ValueError,
    match=r"config\.ppo\.skip_actor_on_flat_rewards=.*: must be a bool",
  ):
    experiment.Experiment.from_config(config)
  for flag in (True, False):
    config = _smoke()
    config.ppo.skip_actor_on_flat_rewards = flag
    exp = experiment.Experiment.from_config(config)
    assert exp.ppo.skip_actor_on_flat_rewards is flag


def test_only_the_default_preset_skips_flat_rewards():
  # The smoke model scores 0 on every rollout; smoke still trains its actor
  # (tests/train/e2e_test.py needs the updates).
  assert tiny.get_config().ppo.skip_actor_on_flat_rewards is True
  assert tiny.get_config("smoke").ppo.skip_actor_on_flat_rewards is False
  assert (
    tiny.get_config("smoke,algo=grpo").ppo.skip_actor_on_flat_rewards is False
  )


def test_eval_needs_a_mode():
  config = _smoke()
  config.eval.greedy = False
  config.eval.sampled = False
  with pytest.raises(ValueError, match=r"config\.eval: greedy and sampled"):
    experiment.Experiment.from_config(config)
  config.eval.sampled = True  # one mode is enough
  exp = experiment.Experiment.from_config(config)
  assert exp.eval.modes == ("sampled",)


def test_truncation_that_could_never_cut_is_refused():
  config = _smoke()
  config.rl.adaptive_truncation.enabled = True
  config.env.max_turns = 3
  config.rl.adaptive_truncation.k = 2
  config.rl.adaptive_truncation.min_turns = 3
  with pytest.raises(ValueError, match=r"min_turns=3 leave no turn to cut"):
    experiment.Experiment.from_config(config)
  config.rl.adaptive_truncation.min_turns = 2  # cut after turn 2 of 3
  assert experiment.Experiment.from_config(config).rl.adaptive_truncation.k == 2
  config.rl.adaptive_truncation.enabled = False  # off: nothing to check
  config.rl.adaptive_truncation.k = 9
  experiment.Experiment.from_config(config)


def test_staleness_is_checked():
  config = _smoke()
  for bad in (2, -1):
    config.ppo.max_staleness = bad
    with pytest.raises(ValueError, match=r"config.ppo.max_staleness="):
      experiment.Experiment.from_config(config)
  config.ppo.max_staleness = 1
  assert experiment.Experiment.from_config(config).ppo.max_staleness == 1
  config.rl.adaptive_truncation.enabled = True
  config.env.max_turns = 4  # room to cut, so only the overlap is wrong
  with pytest.raises(ValueError, match=r"use one or the other"):
    experiment.Experiment.from_config(config)
  config.rl.loss.behaviour_cap = 0.0
  config.rl.adaptive_truncation.enabled = False
  with pytest.raises(ValueError, match=r"rl.loss.behaviour_cap=0.0"):
    experiment.Experiment.from_config(config)


def test_split_over_processes_is_checked():
  exp = experiment.Experiment.from_config(_smoke())
  exp.check_process_count(1)
  exp.check_process_count(2)  # 8 rollouts, SFT batches of 8
  with pytest.raises(
    experiment.SetupError, match=r"= 8 rollouts per iteration do not split"
  ):
    exp.check_process_count(3)
  config = _smoke()
  config.sft.batch_size = 4
  config.ppo.prompts_per_iteration = 4
  config.ppo.logprob_micro_batch_size = 16
  with pytest.raises(
    experiment.SetupError, match=r"config\.sft\.batch_size=4 does not split"
  ):
    experiment.Experiment.from_config(config).check_process_count(8)
  config.sft.steps = 0  # no SFT: its batch is not split
  experiment.Experiment.from_config(config).check_process_count(8)
  config.rl.adaptive_truncation.enabled = True
  config.env.max_turns = 4
  exp = experiment.Experiment.from_config(config)
  exp.check_process_count(1)
  with pytest.raises(experiment.SetupError, match=r"runs on one process only"):
    exp.check_process_count(2)


def test_unknown_and_missing_sections_are_named():
  values = _smoke().to_dict()
  values["ppo_extra"] = {"epochs": 1}
  del values["eval"]
  with pytest.raises(
    ValueError, match=r"unknown sections \['ppo_extra'\].*\['eval'\]"
  ):
    experiment.Experiment.from_config(ml_collections.ConfigDict(values))


def test_unknown_field_in_a_section_is_named():
  values = _smoke().to_dict()
  values["ppo"]["epoch"] = 1
  with pytest.raises(ValueError, match=r"config\.ppo: unknown .*'epoch'"):
    experiment.Experiment.from_config(ml_collections.ConfigDict(values))


def test_a_training_experiment_has_job_train():
  config = _smoke()
  config.job = "evaluate"
  with pytest.raises(ValueError, match=r"config\.job='evaluate'"):
    experiment.Experiment.from_config(config)


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_bad_seed_is_named(seed):
  """Seeds go to the device as uint32 (keys.py): outside it is an error."""
  config = _smoke()
  config.seed = seed
  with pytest.raises(ValueError, match=r"config\.seed=.*must be an integer"):
    experiment.Experiment.from_config(config)


def test_the_largest_seed_is_accepted():
  config = _smoke()
  config.seed = 2**32 - 1
  assert experiment.Experiment.from_config(config).seed == 2**32 - 1


def test_presets_parse():
  exp = experiment.Experiment.from_config(
    tiny.get_config("smoke,algo=grpo,seed=3")
  )
  assert exp.rl.advantage.estimator == "grpo"
  assert exp.seed == 3
  assert not exp.uses_critic
  assert exp.ppo.iterations == tiny.get_config("smoke").ppo.iterations
  default = experiment.Experiment.from_config(tiny.get_config("algo=rloo"))
  assert default.rl.advantage.estimator == "rloo"
  assert default.ppo.iterations == tiny.get_config().ppo.iterations
  assert default.seed == 0


@pytest.mark.parametrize("arg", ["huge", "smoke,algo=ppo", "seed=x"])
def test_bad_preset_is_named(arg):
  bad = arg.split(",")[-1]
  with pytest.raises(ValueError, match=f"unknown preset '{bad}'"):
    tiny.get_config(arg)


def test_cli_rejects_a_bad_value_in_one_line(tmp_path):
  workdir = tmp_path / "run"
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "codeagent_rl.main",
      "--config=configs/tiny.py:smoke",
      "--config.ppo.epochs=0",
      f"--workdir={workdir}",
      "--sandbox_backend=process",
    ],
    cwd=REPO_ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode != 0
  assert "Traceback" not in proc.stderr
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  assert lines[-1].startswith("error: config.ppo.epochs=0"), proc.stderr
  # The run stopped before it touched the workdir.
  assert not workdir.exists()


@pytest.mark.parametrize(
  "preset, frozen", [("default", 2), ("algo=gae", 2), ("algo=grpo", 0)]
)
def test_only_a_critic_is_warmed_up(preset, frozen):
  exp = experiment.Experiment.from_config(tiny.get_config(preset))
  assert exp.ppo.critic_warmup_iterations == 2
  trains = [ppo_lib.actor_trains(exp, i) for i in range(4)]
  assert trains == [False] * frozen + [True] * (4 - frozen)
