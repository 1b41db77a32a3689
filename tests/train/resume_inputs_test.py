"""A resumed run reuses the SFT model and pre-trained critic of its inputs only.

One tiny run (2 SFT steps, value pre-training of one round, no PPO
iteration) is made once per module; each test copies its workdir and
starts it again with one input changed (or none).
"""

import json
import pathlib
import shutil

import pytest

from codeagent_rl.experiments import compare
from codeagent_rl.train import eval_job
from codeagent_rl.train import experiment
from codeagent_rl.train import fingerprint
from codeagent_rl.train import run
from codeagent_rl.train import workdir as workdir_lib
from configs import tiny
from tests.helpers import sandboxes

pytestmark = pytest.mark.xdist_group("resume_inputs")

SANDBOX = sandboxes.short_config("process", 2)


def _config(**overrides):
  """A small smoke config with value pre-training, plus `a.b` overrides."""
  config = tiny.get_config("smoke")
  config.data.num_train_tasks = 8
  config.data.num_eval_tasks = 2
  config.eval.sampled = False
  config.sft.steps = 2
  config.sft.batch_size = 8
  config.ppo.prompts_per_iteration = 2
  config.ppo.samples_per_prompt = 4
  config.ppo.minibatches = 1
  config.ppo.micro_batch_size = 8
  config.ppo.logprob_micro_batch_size = 8
  config.ppo.value_pretrain_iterations = 1
  config.env.max_tokens_per_turn = 160
  config.env.max_total_tokens = 512
  config.ppo.length_bucket = 512
  for key, value in overrides.items():
    *sections, field = key.split(".")
    node = config
    for part in sections:
      node = node[part]
    node[field] = value
  return config


def _run(workdir, **overrides):
  lines = []
  run.train_and_evaluate(
    experiment.Experiment.from_config(_config(**overrides)),
    workdir,
    SANDBOX,
    iterations=0,
    console=lines.append,
  )
  return lines


def _listing(workdir):
  return {
    str(p.relative_to(workdir)): p.stat().st_mtime_ns
    for p in workdir.rglob("*")
  }


@pytest.fixture(scope="module")
def base(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("resume") / "base"
  _run(workdir)
  return workdir


@pytest.fixture
def copy(base, tmp_path):
  return pathlib.Path(shutil.copytree(base, tmp_path / "run"))


def test_the_run_records_what_its_models_are_made_from(base):
  paths = workdir_lib.Workdir(base)
  sft = fingerprint.read(paths.sft_fingerprint)
  assert sft is not None and sft["settings"]["sft"]["steps"] == 2
  assert sft["model"]["embed_dim"] == 64
  value = fingerprint.read(paths.value_pretrain_fingerprint)
  assert value["sft"] and value["settings"]["ppo"]["value_pretrain_iterations"]
  assert (paths.checkpoints / "0").is_dir()  # the pre-trained critic
  env = json.loads(paths.environment.read_text())
  assert len(env) == 1 and env[0]["packages"]["jax"]


def test_unchanged_inputs_resume_without_training_again(copy):
  sft_before = _listing(copy / workdir_lib.SFT_DIR)
  ppo_before = _listing(copy / workdir_lib.PPO_DIR)
  lines = _run(copy)
  assert _listing(copy / workdir_lib.SFT_DIR) == sft_before
  assert _listing(copy / workdir_lib.PPO_DIR) == ppo_before
  assert not any(line.startswith("value pretrain") for line in lines)
  assert len(json.loads((copy / workdir_lib.ENVIRONMENT).read_text())) == 2


@pytest.mark.parametrize(
  "override, named",
  [
    ({"sft.steps": 3}, "settings.sft.steps: 2 -> 3"),
    ({"sft.learning_rate": 1e-3}, "settings.sft.learning_rate: 0.003 -> 0.001"),
    ({"data.num_train_tasks": 12}, "demonstrations: "),
    ({"env.max_total_tokens": 480}, "demonstrations: "),
    ({"model.embed_dim": 96}, "model.embed_dim: 64 -> 96"),
  ],
)
def test_changed_sft_inputs_stop_before_anything_is_written(
  copy, override, named
):
  before = _listing(copy)
  with pytest.raises(experiment.SetupError) as e:
    _run(copy, **override)
  message = str(e.value)
  assert message.startswith(f"{copy / workdir_lib.SFT_DIR} holds an SFT model")
  assert named in message, message
  assert "--config.sft.retrain=True" in message
  assert _listing(copy) == before  # config.json and environment.json too


def test_retrain_sets_the_old_models_aside_and_trains_again(copy):
  old_sft = (copy / workdir_lib.SFT_FINGERPRINT).read_text()
  lines = _run(copy, **{"sft.steps": 3, "sft.retrain": True})
  assert any(line.startswith("SFT: retraining (its inputs") for line in lines)
  replaced = copy / workdir_lib.REPLACED / "1"
  assert (replaced / workdir_lib.SFT_DIR / "2").is_dir()
  assert (replaced / workdir_lib.PPO_DIR / "0").is_dir()
  assert (replaced / workdir_lib.SFT_FINGERPRINT).read_text() == old_sft
  assert sorted(p.name for p in (copy / workdir_lib.SFT_DIR).iterdir()) == ["3"]
  assert (copy / workdir_lib.PPO_DIR / "0").is_dir()  # pre-trained again
  # The new record: the next start with these inputs resumes.
  _run(copy, **{"sft.steps": 3})


def test_changed_value_pretraining_stops_or_pre_trains_again(copy):
  before = _listing(copy)
  with pytest.raises(experiment.SetupError) as e:
    _run(copy, **{"ppo.value_pretrain_min_gain": 0.5})
  message = str(e.value)
  assert "critic pre-trained (step 0)" in message
  assert "settings.ppo.value_pretrain_min_gain: 0.01 -> 0.5" in message
  assert "--config.ppo.value_pretrain_retrain=True" in message
  assert _listing(copy) == before
  sft_before = _listing(copy / workdir_lib.SFT_DIR)
  lines = _run(
    copy,
    **{"ppo.value_pretrain_min_gain": 0.5, "ppo.value_pretrain_retrain": True},
  )
  assert any(line.startswith("value pretrain 1/1") for line in lines)
  assert (copy / workdir_lib.REPLACED / "1" / workdir_lib.PPO_DIR).is_dir()
  assert _listing(copy / workdir_lib.SFT_DIR) == sft_before  # SFT kept


def test_a_workdir_without_a_record_is_judged_by_its_config_json(copy):
  record = copy / workdir_lib.SFT_FINGERPRINT
  saved = record.read_text()
  record.unlink()
  with pytest.raises(experiment.SetupError) as e:
    _run(copy, **{"sft.steps": 3})
  assert "its config.json differs on SFT's inputs: sft.steps: 2 -> 3" in str(
    e.value
  )
  assert not record.exists()
  lines = _run(copy)  # the same inputs: kept, and recorded from now on
  assert any(f"{record.name} is missing" in line for line in lines)
  assert json.loads(record.read_text()) == json.loads(saved)
  record.unlink()
  (copy / workdir_lib.CONFIG).unlink()
  with pytest.raises(experiment.SetupError, match="is unknown"):
    _run(copy)


def test_compare_copies_the_sft_with_its_record(base, tmp_path):
  target = tmp_path / "variant"
  compare.share_sft(base, target)
  assert (target / workdir_lib.SFT_FINGERPRINT).read_text() == (
    base / workdir_lib.SFT_FINGERPRINT
  ).read_text()
  # Its own run accepts the copy (PPO starts from the shared SFT model).
  _run(target)
  # A variant whose SFT differs from the group's is replaced only when
  # retraining, the old one set aside.
  record = target / workdir_lib.SFT_FINGERPRINT
  record.write_text(record.read_text().replace('"steps": 2', '"steps": 5'))
  compare.share_sft(base, target)
  assert '"steps": 5' in record.read_text()
  compare.share_sft(base, target, retrain=True)
  assert '"steps": 2' in record.read_text()
  assert (target / workdir_lib.REPLACED / "1" / workdir_lib.SFT_DIR).is_dir()


def test_evaluating_a_checkpoint_of_another_model_is_one_clear_error(copy):
  exp = experiment.Experiment.from_config(_config(**{"model.embed_dim": 96}))
  (copy / workdir_lib.PPO_DIR / "0").rename(copy / "ppo_step_0")
  mesh, rules = exp.make_mesh()
  with pytest.raises(experiment.SetupError) as e:
    eval_job.restore_actor_params(exp, copy, mesh, rules, "tiny:smoke")
  message = str(e.value)
  assert message.startswith(
    f"{copy / workdir_lib.SFT_DIR} step 2 is not a checkpoint of the model"
    " of 'tiny:smoke'"
  ), message
  assert "\n" not in message
