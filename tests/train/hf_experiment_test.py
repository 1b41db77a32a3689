"""An experiment that starts from a Hugging Face checkpoint on local disk.

The checkpoints are tiny random Qwen2 / Llama models that `transformers`
saves in the test: real artefacts, nothing downloaded.
"""

import json
import shutil

import jax
import numpy as np
import pytest

from codeagent_rl.envs import code_env
from codeagent_rl.models import chat
from codeagent_rl.models import hf_export
from codeagent_rl.models import hf_import
from codeagent_rl.models import transformer
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import experiment
from codeagent_rl.train import sft as sft_lib
from configs import hf as hf_config
from configs import qwen25_coder_0p5b
from configs import qwen25_coder_7b
from configs import tiny
from tests.helpers import hf_checkpoints


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
  return hf_checkpoints.save_checkpoint(tmp_path_factory.mktemp("qwen2"))


def _config(hf_dir, **model):
  config = tiny.get_config("smoke")
  config.unlock()
  config.hf_checkpoint_dir = str(hf_dir)
  config.model = {
    "dtype": "float32",
    "param_dtype": "float32",
    "remat": "none",
    "logits_chunk": 0,
    **model,
  }
  config.sft.steps = 0
  return config


def test_the_model_comes_from_config_json(qwen_dir):
  exp = experiment.Experiment.from_config(_config(qwen_dir))
  want = hf_import.config_from_hf(
    hf_import.read_hf_config(qwen_dir),
    dtype="float32",
    param_dtype="float32",
    remat="none",
  )
  assert exp.model == want
  assert exp.model.qkv_bias and exp.model.tie_embeddings
  assert exp.model.num_layers == 2
  assert exp.model.vocab_size == hf_checkpoints.MODEL_VOCAB
  assert exp.hf_checkpoint_dir == str(qwen_dir)
  assert experiment.to_dict(exp)["hf_checkpoint_dir"] == str(qwen_dir)


def test_a_model_field_must_agree_with_the_checkpoint(qwen_dir):
  exp = experiment.Experiment.from_config(_config(qwen_dir, num_layers=2))
  assert exp.model.num_layers == 2
  with pytest.raises(
    ValueError, match=r"config\.model\.num_layers=3 but .*config\.json gives 2"
  ):
    experiment.Experiment.from_config(_config(qwen_dir, num_layers=3))


def test_runtime_fields_are_required(qwen_dir):
  config = _config(qwen_dir)
  config.model = {"dtype": "float32"}
  with pytest.raises(ValueError, match=r"missing fields \['param_dtype'"):
    experiment.Experiment.from_config(config)


def test_a_missing_directory_is_named(tmp_path):
  with pytest.raises(ValueError, match=r"config\.hf_checkpoint_dir=.*not a"):
    experiment.Experiment.from_config(_config(tmp_path / "absent"))


@pytest.mark.parametrize(
  "edit,match",
  [
    ({"model_type": "gemma"}, "model_type='gemma' is not supported"),
    (
      {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
      "rope_scaling",
    ),
  ],
)
def test_an_unsupported_checkpoint_is_named(qwen_dir, tmp_path, edit, match):
  bad = tmp_path / "bad"
  shutil.copytree(qwen_dir, bad)
  hf_json = json.loads((bad / "config.json").read_text())
  hf_json.update(edit)
  (bad / "config.json").write_text(json.dumps(hf_json))
  with pytest.raises(ValueError, match=match) as info:
    experiment.Experiment.from_config(_config(bad))
  assert "config.hf_checkpoint_dir" in str(info.value)


def test_without_sft_the_actor_is_the_checkpoint(qwen_dir, tmp_path):
  exp = experiment.Experiment.from_config(_config(qwen_dir))
  mesh, rules = exp.make_mesh()
  params, metrics = sft_lib.run_sft(exp, None, tmp_path, mesh, rules)
  assert metrics == {}
  want = hf_import.load_params(qwen_dir, exp.model)["params"]
  jax.tree.map(
    np.testing.assert_array_equal,
    jax.device_get(params),
    jax.device_get(want),
  )
  assert not (tmp_path / "sft").exists()  # nothing to save


def test_the_conversation_is_the_checkpoints_chat_template(qwen_dir):
  exp = experiment.Experiment.from_config(_config(qwen_dir))
  fmt = exp.conversation
  assert isinstance(fmt, chat.ChatTemplateFormat)
  assert fmt.vocab_size <= exp.model.vocab_size
  im_end = fmt.end_of_turn_id
  assert im_end in fmt.stop_ids
  assert fmt.decode([im_end]) == "<|im_end|>"


def test_a_checkpoint_without_its_tokenizer_is_named(qwen_dir, tmp_path):
  bare = tmp_path / "bare"
  shutil.copytree(qwen_dir, bare)
  (bare / "tokenizer.json").unlink()
  with pytest.raises(experiment.SetupError, match="tokenizer.json"):
    experiment.Experiment.from_config(_config(bare))


def test_configs_hf_asks_for_the_checkpoint():
  config = hf_config.get_config("smoke")
  with pytest.raises(ValueError, match=r"pass --config\.hf_checkpoint_dir"):
    experiment.Experiment.from_config(config)
  with pytest.raises(ValueError, match="unknown preset 'tiny'"):
    hf_config.get_config("tiny")


def test_configs_hf_smoke_takes_a_checkpoint(qwen_dir):
  config = hf_config.get_config("smoke")
  config.hf_checkpoint_dir = str(qwen_dir)
  exp = experiment.Experiment.from_config(config)
  assert exp.sft.steps == 0 and exp.rl.critic_init == "actor"
  assert exp.env.render_check == "strict"


def test_sft_on_a_plans_file_trains_the_checkpoint(
  qwen_dir, tmp_path, module_pool
):
  """Demonstrations rendered in the chat template; SFT moves the weights."""
  sets = data_lib.make_task_sets(
    experiment.Experiment.from_config(tiny.get_config("smoke")).data, 0
  )
  plans = [p for p in sets.plans if p.kind == "single_turn"][:8]
  by_id = {t.task_id: t for t in sets.train}
  train = tmp_path / "train.jsonl"
  schema.write_tasks(train, [by_id[p.task_id] for p in plans])
  synthetic.write_demo_plans(tmp_path / "plans.jsonl", plans)
  config = _config(qwen_dir)
  config.data.train_tasks = str(train)
  config.data.demonstrations = str(tmp_path / "plans.jsonl")
  config.sft.steps = 2
  exp = experiment.Experiment.from_config(config)
  task_sets = data_lib.make_task_sets(exp.data, exp.seed)
  env = code_env.CodeEnv(module_pool, exp.conversation, exp.env)
  arrays = data_lib.sft_arrays(env, task_sets, tmp_path)
  fmt = exp.conversation
  for tokens, valid in zip(arrays["tokens"], arrays["valid"], strict=True):
    row = tokens[valid].tolist()
    assert row[-1] == fmt.end_of_turn_id  # the submit ends its turn
    assert fmt.decode(row).count("<|im_start|>assistant\n") == 1
  mesh, rules = exp.make_mesh()
  params, metrics = sft_lib.run_sft(exp, arrays, tmp_path, mesh, rules)
  assert np.isfinite(metrics["sft/loss"])
  start = hf_import.load_params(qwen_dir, exp.model)["params"]
  moved = jax.tree.map(
    lambda a, b: float(np.abs(np.asarray(a) - np.asarray(b)).max()),
    jax.device_get(params),
    jax.device_get(start),
  )
  assert max(jax.tree.leaves(moved)) > 0


@pytest.mark.parametrize("module,other", [(qwen25_coder_0p5b, qwen25_coder_7b)])
def test_the_qwen_configs_train_a_checkpoint_of_their_size(
  tmp_path, module, other
):
  """What a user with the real checkpoint runs (its files, not weights)."""

  def checkpoint(name, config):
    path = tmp_path / name
    path.mkdir()
    model = transformer.TransformerConfig.from_config(config.model)
    hf_json = hf_export.hf_config_from(model, "qwen2")
    (path / "config.json").write_text(json.dumps(hf_json))
    hf_checkpoints.chat_tokenizer().save_pretrained(path)
    return str(path)

  config = module.get_config()
  config.hf_checkpoint_dir = checkpoint("same", config)
  exp = experiment.Experiment.from_config(config)
  assert exp.model == transformer.TransformerConfig.from_config(config.model)
  assert exp.hf_checkpoint_dir == config.hf_checkpoint_dir
  config.hf_checkpoint_dir = checkpoint("other", other.get_config())
  with pytest.raises(ValueError, match=r"config\.model\.embed_dim=896 but"):
    experiment.Experiment.from_config(config)
