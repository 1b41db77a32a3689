"""Tests of `python -m codeagent_rl.export_hf` on a workdir made here.

The workdir is what a tiny smoke run leaves, without running it: the
experiment's config.json as the train job writes it, an SFT checkpoint and
two PPO checkpoints of random train states (other values in each, so each
checkpoint's logits differ). The CLI runs in a one-device subprocess (the
checkpoints were saved from this process's 8 devices); `transformers` loads
what it wrote. A run from a Hugging Face checkpoint is the same workdir
with `hf_checkpoint_dir` in its config.json.
"""

import dataclasses
import json
import pathlib
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tokenizers
import torch
import transformers

from codeagent_rl import export_hf
from codeagent_rl.models import hf_export
from codeagent_rl.models import hf_import
from codeagent_rl.models import transformer as tf
from codeagent_rl.parallel import checkpoint as ckpt_lib
from codeagent_rl.parallel import transfers
from codeagent_rl.train import eval_job
from codeagent_rl.train import experiment
from codeagent_rl.train import sft as sft_lib
from codeagent_rl.train import workdir as workdir_lib
from configs import tiny
from tests.helpers import processes

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
TOL = 1e-4  # float32 logits, max abs difference
PPO_STEPS = (1, 2)


def _write_config(paths, exp, **extra):
  # As run.py writes it.
  paths.config.write_text(
    json.dumps(
      {**experiment.to_dict(exp), **extra},
      indent=1,
      sort_keys=True,
      default=str,
    )
  )


def _random_state(abstract, seed):
  """Random values for an abstract train state, in its shardings.

  Filled on the host rather than by `create_train_states`, whose compile
  takes most of a minute on the test's 8 devices.
  """
  rng = np.random.default_rng(seed)

  def fill(path, leaf):
    if not jnp.issubdtype(leaf.dtype, jnp.floating):
      host = np.zeros(leaf.shape, leaf.dtype)
    elif jax.tree_util.keystr(path).endswith("['scale']"):
      host = 1.0 + 0.2 * rng.standard_normal(leaf.shape)
    else:
      host = 0.2 * rng.standard_normal(leaf.shape)
    return jax.device_put(host.astype(leaf.dtype), leaf.sharding)

  return jax.tree_util.tree_map_with_path(fill, abstract)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """(workdir, experiment, {"sft" | PPO step: host actor params})."""
  exp = experiment.Experiment.from_config(tiny.get_config("smoke"))
  paths = workdir_lib.Workdir(tmp_path_factory.mktemp("run"))
  _write_config(paths, exp)
  mesh, rules = exp.make_mesh()
  cfg = ckpt_lib.CheckpointConfig(keep=5, save_every=1, async_save=False)
  params = {}
  # The restore targets the CLI builds (eval_job's).
  sft_actor, _ = eval_job._abstract_states(
    exp, sft_lib.sft_optim(exp), mesh, rules
  )
  with ckpt_lib.Checkpointer(paths.sft, cfg) as ckpt:
    actor = _random_state(sft_actor, seed=10)
    ckpt.save(
      ckpt_lib.TrainCheckpoint(
        actor=actor,
        critic=None,
        step=exp.sft.steps,
        rng=transfers.key(0),
        data_position={"metrics": {}},
      ),
      force=True,
    )
    params["sft"] = jax.device_get(actor.params)
  assert exp.uses_critic  # PPO checkpoints hold a critic
  ppo_actor, ppo_critic = eval_job._abstract_states(exp, exp.optim, mesh, rules)
  with ckpt_lib.Checkpointer(paths.checkpoints, cfg) as ckpt:
    for step in PPO_STEPS:
      actor = _random_state(ppo_actor, seed=step)
      ckpt.save(
        ckpt_lib.TrainCheckpoint(
          actor=actor,
          critic=_random_state(ppo_critic, seed=100 + step),
          step=step,
          rng=jax.random.key(7),
          data_position={"iteration": step},
        ),
        force=True,
      )
      params[step] = jax.device_get(actor.params)
  return paths.root, exp, params


def _cli(*args):
  """`python -m codeagent_rl.export_hf ARGS` on one CPU device."""
  env = processes.one_device_env()
  return subprocess.run(
    [sys.executable, "-m", "codeagent_rl.export_hf", *args],
    cwd=REPO_ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )


def _tokens(vocab, seed=0):
  rng = np.random.default_rng(seed)
  return rng.integers(1, vocab, size=(2, 10))


def _our_logits(model_cfg, params, tokens):
  valid = jnp.ones(tokens.shape, bool)
  logits, _ = jax.jit(tf.Actor(model_cfg).apply)(
    {"params": params},
    jnp.asarray(tokens),
    tf.positions_from_valid(valid),
    valid,
  )
  return np.asarray(logits)


def _torch_logits(path, tokens):
  model = transformers.AutoModelForCausalLM.from_pretrained(
    path, attn_implementation="eager"
  ).eval()
  with torch.no_grad():
    return model(input_ids=torch.tensor(tokens)).logits.numpy()


def _check_export(out, model_cfg, params):
  """`out` holds `params` exactly, and transformers computes our logits."""
  assert sorted(p.name for p in out.iterdir()) == [
    "config.json",
    "model.safetensors",
  ]
  assert not out.with_name(out.name + ".tmp").exists()
  again = hf_import.load_params(out, model_cfg)
  jax.tree.map(np.testing.assert_array_equal, again, {"params": params})
  tokens = _tokens(model_cfg.vocab_size)
  ours = _our_logits(model_cfg, params, tokens)
  theirs = _torch_logits(out, tokens)
  diff = np.abs(ours - theirs).max()
  assert diff < TOL, f"max abs logit diff {diff:.2e}"
  return ours


def test_cli_exports_the_newest_ppo_checkpoint(run, tmp_path):
  workdir, exp, params = run
  out = tmp_path / "out"
  proc = _cli(f"--workdir={workdir}", f"--out={out}")
  assert proc.returncode == 0, proc.stderr
  assert f"PPO iteration {PPO_STEPS[-1]}" in proc.stdout
  # The tiny model has q/k/v biases: Qwen2, with no tokenizer files.
  assert exp.model.qkv_bias
  assert "no hf_checkpoint_dir: exporting as model_type 'qwen2'" in (
    proc.stdout
  )
  newest = _check_export(out, exp.model, params[PPO_STEPS[-1]])
  # The checkpoints differ by far more than TOL: the newest was exported.
  older = _our_logits(
    exp.model, params[PPO_STEPS[0]], _tokens(exp.model.vocab_size)
  )
  assert np.abs(newest - older).max() > 100 * TOL
  written = json.loads((out / "config.json").read_text())
  assert written["model_type"] == "qwen2"
  assert written["dtype"] == "float32"


def test_sft_checkpoint_without_ppo(run, tmp_path):
  workdir, exp, params = run
  sft_only = tmp_path / "sft_only"
  shutil.copytree(
    workdir, sft_only, ignore=shutil.ignore_patterns(workdir_lib.PPO_DIR)
  )
  lines = []
  out = tmp_path / "out"
  out.mkdir()  # an empty directory is fine
  what = export_hf.export(sft_only, out, console=lines.append)
  assert what.startswith(f"SFT step {exp.sft.steps} ")
  _check_export(out, exp.model, params["sft"])
  with pytest.raises(export_hf.ExportError, match="has no PPO checkpoints"):
    export_hf.export(sft_only, tmp_path / "out2", step=1)


def _last_line(proc):
  assert proc.returncode != 0
  assert "Traceback" not in proc.stderr, proc.stderr
  return [line for line in proc.stderr.splitlines() if line.strip()][-1]


def test_cli_errors_are_one_line(tmp_path):
  out = tmp_path / "out"
  proc = _cli(f"--workdir={tmp_path / 'nope'}", f"--out={out}")
  assert _last_line(proc) == (
    f"error: --workdir={tmp_path / 'nope'} does not exist."
  )
  assert not out.exists()


def test_errors(run, tmp_path):
  workdir, exp, _ = run
  bare = tmp_path / "bare"
  bare.mkdir()
  with pytest.raises(export_hf.ExportError, match="config.json is missing"):
    export_hf.export(bare, tmp_path / "o1")
  _write_config(workdir_lib.Workdir(bare), exp)
  with pytest.raises(
    export_hf.ExportError, match="has no PPO .* or SFT .* checkpoint"
  ):
    export_hf.export(bare, tmp_path / "o1")
  with pytest.raises(
    export_hf.ExportError, match=r"--step=5: .* its iterations: \[1, 2\]"
  ):
    export_hf.export(workdir, tmp_path / "o1", step=5)
  assert not (tmp_path / "o1").exists()
  # OUT taken: a non-empty directory, a file, a leftover OUT.tmp.
  taken = tmp_path / "taken"
  taken.mkdir()
  (taken / "keep.txt").write_text("mine")
  (tmp_path / "file").write_text("mine")
  (tmp_path / "left.tmp").mkdir()
  for out, match in (
    (taken, "is not an empty directory"),
    (tmp_path / "file", "is not an empty directory"),
    (tmp_path / "left", "left.tmp exists"),
  ):
    with pytest.raises(export_hf.ExportError, match=match):
      export_hf.export(workdir, out)
  assert [p.name for p in taken.iterdir()] == ["keep.txt"]
  assert (tmp_path / "file").read_text() == "mine"


def test_failed_write_leaves_nothing(run, tmp_path, monkeypatch):
  workdir, _, _ = run

  def fail(params, config, out_dir, **kwargs):
    (pathlib.Path(out_dir) / "model.safetensors").write_bytes(b"partial")
    raise OSError("disk full")

  monkeypatch.setattr(hf_export, "save_params", fail)
  with pytest.raises(OSError, match="disk full"):
    export_hf.export(workdir, tmp_path / "out")
  assert list(tmp_path.iterdir()) == []


CHATML_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
  "{%- for message in messages %}"
  "{{- '<|im_start|>' + message.role + '\\n' + message.content"
  " + '<|im_end|>\\n' }}"
  "{%- endfor %}"
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
  "{%- endif %}"
)


def _chatml_tokenizer():
  """A small byte-level BPE tokenizer with ChatML's specials and template."""
  tok = tokenizers.Tokenizer(tokenizers.models.BPE())
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(
    add_prefix_space=False
  )
  tok.decoder = tokenizers.decoders.ByteLevel()
  tok.train_from_iterator(
    ["def add(a, b):\n  return a + b\n"] * 4,
    tokenizers.trainers.BpeTrainer(
      vocab_size=300,
      special_tokens=CHATML_SPECIALS,
      initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
      show_progress=False,
    ),
  )
  return transformers.PreTrainedTokenizerFast(
    tokenizer_object=tok,
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    chat_template=CHATML_TEMPLATE,
  )


def _hf_checkpoint(path, model_cfg):
  """A Qwen2 checkpoint of `model_cfg`'s architecture, with a tokenizer."""
  hf_config = transformers.Qwen2Config(
    vocab_size=model_cfg.vocab_size,
    hidden_size=model_cfg.embed_dim,
    intermediate_size=model_cfg.mlp_dim,
    num_hidden_layers=model_cfg.num_layers,
    num_attention_heads=model_cfg.num_heads,
    num_key_value_heads=model_cfg.num_kv_heads,
    head_dim=model_cfg.head_dim,
    rope_theta=model_cfg.rope_theta,
    rms_norm_eps=model_cfg.rms_eps,
    tie_word_embeddings=model_cfg.tie_embeddings,
    initializer_range=model_cfg.init_std,
    bos_token_id=None,
    eos_token_id=2,
  )
  transformers.AutoModelForCausalLM.from_config(hf_config).save_pretrained(path)
  tok = _chatml_tokenizer()
  assert len(tok) <= model_cfg.vocab_size
  tok.save_pretrained(path)
  transformers.GenerationConfig(eos_token_id=2).save_pretrained(path)
  return path


def _check_hf_files(out, hf_dir):
  """`out` has hf_dir's tokenizer and the base's token ids."""
  assert sorted(p.name for p in out.iterdir()) == [
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
  ]
  written = json.loads((out / "config.json").read_text())
  assert (written["bos_token_id"], written["eos_token_id"]) == (None, 2)
  ours, theirs = (
    transformers.AutoTokenizer.from_pretrained(d) for d in (out, hf_dir)
  )
  chat = [{"role": "user", "content": "def add(a, b):"}]
  assert ours.apply_chat_template(chat) == theirs.apply_chat_template(chat)
  assert ours.apply_chat_template(chat, tokenize=False).startswith(
    "<|im_start|>user\n"
  )
  return written


def test_export_params_from_an_hf_checkpoint(run, tmp_path):
  _, exp, params = run
  hf_dir = _hf_checkpoint(tmp_path / "hf", exp.model)
  lines = []
  out = tmp_path / "out"
  export_hf.export_params(
    {"params": params[2]},
    exp.model,
    out,
    hf_checkpoint_dir=hf_dir,
    console=lines.append,
  )
  assert any(
    "tokenizer files tokenizer.json, tokenizer_config.json,"
    " chat_template.jinja, generation_config.json" in x
    for x in lines
  ), lines
  _check_hf_files(out, hf_dir)
  again = hf_import.load_params(out, exp.model)
  jax.tree.map(np.testing.assert_array_equal, again, {"params": params[2]})
  tokens = _tokens(exp.model.vocab_size)
  diff = np.abs(
    _our_logits(exp.model, params[2], tokens) - _torch_logits(out, tokens)
  ).max()
  assert diff < TOL
  # A Llama base cannot hold a model with q/k/v biases.
  llama = json.loads((hf_dir / "config.json").read_text())
  llama["model_type"] = "llama"
  (hf_dir / "config.json").write_text(json.dumps(llama))
  with pytest.raises(ValueError, match="cannot be exported as model_type"):
    export_hf.export_params(
      {"params": params[2]},
      exp.model,
      tmp_path / "out2",
      hf_checkpoint_dir=hf_dir,
    )
  assert not (tmp_path / "out2").exists()
  assert not (tmp_path / "out2.tmp").exists()
  with pytest.raises(export_hf.ExportError, match="hf_checkpoint_dir="):
    export_hf.export_params(
      {"params": params[2]},
      exp.model,
      tmp_path / "out3",
      hf_checkpoint_dir=tmp_path / "absent",
    )


def test_cli_run_from_an_hf_checkpoint_step_and_dtype(run, tmp_path):
  workdir, exp, params = run
  hf_dir = _hf_checkpoint(tmp_path / "hf", exp.model)
  hf_run = tmp_path / "hf_run"
  shutil.copytree(workdir, hf_run)
  _write_config(workdir_lib.Workdir(hf_run), exp, hf_checkpoint_dir=str(hf_dir))
  assert export_hf.read_experiment(hf_run).hf_checkpoint_dir == str(hf_dir)
  out = tmp_path / "out"
  proc = _cli(
    f"--workdir={hf_run}", f"--out={out}", "--step=1", "--dtype=bfloat16"
  )
  assert proc.returncode == 0, proc.stderr
  assert "PPO iteration 1" in proc.stdout
  assert _check_hf_files(out, hf_dir)["dtype"] == "bfloat16"
  cfg16 = dataclasses.replace(exp.model, param_dtype="bfloat16")
  again = hf_import.load_params(out, cfg16)
  jax.tree.map(
    lambda a, b: np.testing.assert_array_equal(a, b.astype(jnp.bfloat16)),
    again,
    {"params": params[1]},
  )
