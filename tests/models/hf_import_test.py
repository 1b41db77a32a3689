"""Tests of codeagent_rl.models.hf_import against `transformers` on the CPU.

Tiny random Qwen2 and Llama models are saved with `save_pretrained`, imported,
and their logits compared with the torch model's in float32.
"""

import dataclasses
import shutil

from flax import linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors import numpy as st_numpy
import torch
import transformers

from codeagent_rl.models import hf_import
from codeagent_rl.models import transformer as tf
from configs import qwen25_coder_0p5b
from configs import qwen25_coder_7b

VOCAB = 97
TOL = 1e-4  # float32 logits, max abs difference

# name -> (HF config class, its kwargs, save_pretrained's max_shard_size).
CASES = {
  "qwen2_tied": (
    transformers.Qwen2Config,
    dict(rope_theta=1e6, tie_word_embeddings=True),
    None,
  ),
  "qwen2_untied_sharded": (
    transformers.Qwen2Config,
    dict(rope_theta=1e6, tie_word_embeddings=False),
    "20KB",
  ),
  "llama_untied": (
    transformers.LlamaConfig,
    # head_dim other than hidden / heads.
    dict(head_dim=24, rms_norm_eps=1e-5, tie_word_embeddings=False),
    None,
  ),
  "llama_tied_sharded": (
    transformers.LlamaConfig,
    dict(rope_theta=5e4, tie_word_embeddings=True),
    "20KB",
  ),
}


def _hf_model(name, seed=0):
  config_cls, kwargs, _ = CASES[name]
  hf_config = config_cls(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    attn_implementation="eager",
    **kwargs,
  )
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(hf_config)
  # Weights far from the default init (std 0.02, unit norms, zero biases),
  # so that every tensor moves the logits.
  with torch.no_grad():
    for pname, p in model.named_parameters():
      if pname.endswith("norm.weight"):
        p.copy_(1.0 + 0.2 * torch.randn_like(p))
      else:
        p.copy_(0.15 * torch.randn_like(p))
  return model.eval()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
  """Checkpoints of all CASES: name -> (directory, torch model)."""
  out = {}
  for name, (_, _, shard) in CASES.items():
    model = _hf_model(name)
    path = tmp_path_factory.mktemp(name)
    kwargs = {} if shard is None else {"max_shard_size": shard}
    model.save_pretrained(path, **kwargs)
    out[name] = (path, model)
  return out


def _our_config(path, **kw):
  hf = hf_import.read_hf_config(path)
  return hf_import.config_from_hf(
    hf, dtype="float32", param_dtype="float32", remat="none", **kw
  )


def _padded_batch(seed=0):
  """Tokens [3, 12]: row 0 unpadded, row 1 left-, row 2 right-padded."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(1, VOCAB, size=(3, 12))
  valid = np.ones((3, 12), bool)
  valid[1, :4] = False
  valid[2, 9:] = False
  tokens = np.where(valid, tokens, 0)
  return tokens, valid


def _torch_logits(model, tokens, valid):
  positions = np.maximum(np.cumsum(valid, axis=1) - 1, 0)
  with torch.no_grad():
    out = model(
      input_ids=torch.tensor(tokens),
      attention_mask=torch.tensor(valid.astype(np.int64)),
      position_ids=torch.tensor(positions),
    )
  return out.logits.numpy()


def test_sharded_cases_write_an_index(checkpoints):
  path, _ = checkpoints["qwen2_untied_sharded"]
  assert (path / hf_import.INDEX_FILE).is_file()
  assert not (path / hf_import.SINGLE_FILE).exists()
  assert (checkpoints["qwen2_tied"][0] / hf_import.SINGLE_FILE).is_file()


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match_transformers(checkpoints, name):
  path, model = checkpoints[name]
  cfg = _our_config(path)
  assert cfg.tie_embeddings == CASES[name][1]["tie_word_embeddings"]
  params = hf_import.load_params(path, cfg)
  tokens, valid = _padded_batch()
  ours, _ = jax.jit(tf.Actor(cfg).apply)(
    params,
    jnp.asarray(tokens),
    tf.positions_from_valid(jnp.asarray(valid)),
    jnp.asarray(valid),
  )
  theirs = _torch_logits(model, tokens, valid)
  ours = np.asarray(ours)
  # The comparison means something: logits spread well beyond TOL.
  assert np.std(theirs[valid]) > 0.5
  diff = np.abs(ours - theirs)[valid]
  assert diff.max() < TOL, f"{name}: max abs logit diff {diff.max():.2e}"


def test_critic_trunk_is_the_actor_trunk(checkpoints):
  path, _ = checkpoints["qwen2_untied_sharded"]
  cfg = _our_config(path)
  actor = hf_import.load_params(path, cfg)
  critic = hf_import.critic_from_hf(path, cfg)
  assert set(critic["params"]) == {"trunk", "value_head"}
  jax.tree.map(
    np.testing.assert_array_equal,
    actor["params"]["trunk"],
    critic["params"]["trunk"],
  )
  # Same structure as a freshly initialised critic.
  fresh = jax.eval_shape(
    tf.Critic(cfg).init,
    jax.random.PRNGKey(0),
    jnp.zeros((1, 2), jnp.int32),
    jnp.zeros((1, 2), jnp.int32),
    jnp.ones((1, 2), bool),
  )
  assert jax.tree.structure(nn.unbox(fresh)) == jax.tree.structure(critic)
  for leaf, want in zip(
    jax.tree.leaves(critic), jax.tree.leaves(fresh), strict=True
  ):
    assert (leaf.shape, leaf.dtype) == (want.shape, want.dtype)
  # The value head starts at zero, as Critic.init makes it: values are 0.
  head = critic["params"]["value_head"]
  np.testing.assert_array_equal(head["kernel"], np.zeros((64, 1)))
  assert set(head) == {"kernel"}  # no bias


def test_bfloat16_checkpoint_and_params(tmp_path):
  model = _hf_model("qwen2_tied").to(torch.bfloat16)
  model.save_pretrained(tmp_path)
  cfg = _our_config(tmp_path)
  embed = model.model.embed_tokens.weight.detach().float().numpy()
  params = hf_import.load_params(tmp_path, cfg)["params"]
  got = params["trunk"]["embed"]["embedding"]
  assert got.dtype == jnp.float32
  np.testing.assert_array_equal(got, embed)
  cfg16 = dataclasses.replace(cfg, param_dtype="bfloat16")
  params16 = hf_import.load_params(tmp_path, cfg16)["params"]
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(params16))
  q = model.model.layers[1].self_attn.q_proj.weight.detach().float().numpy()
  np.testing.assert_array_equal(
    params16["trunk"]["layers_1"]["attn"]["q_proj"]["kernel"].astype(
      jnp.float32
    ),
    q.T.reshape(64, 4, 16),
  )


RULES = (
  ("batch", "data"),
  ("embed", "fsdp"),
  ("heads", "tensor"),
  ("mlp", "tensor"),
  ("kv", None),
  ("vocab", None),
  ("length", None),
)


def _shardings(cfg, mesh, module):
  abstract = jax.eval_shape(
    module(cfg).init,
    jax.random.PRNGKey(0),
    jnp.zeros((1, 2), jnp.int32),
    jnp.zeros((1, 2), jnp.int32),
    jnp.ones((1, 2), bool),
  )
  return nn.logical_to_mesh_sharding(
    nn.get_partition_spec(abstract), mesh, RULES
  )


def test_tensors_land_in_their_shardings(checkpoints):
  path, _ = checkpoints["qwen2_untied_sharded"]
  cfg = _our_config(path)
  devices = np.array(jax.devices()).reshape(1, 4, 2)
  mesh = jax.sharding.Mesh(devices, ("data", "fsdp", "tensor"))
  shardings = _shardings(cfg, mesh, tf.Actor)
  sharded = hf_import.load_params(path, cfg, shardings)
  plain = hf_import.load_params(path, cfg)
  jax.tree.map(np.testing.assert_array_equal, sharded, plain)
  q = sharded["params"]["trunk"]["layers_0"]["attn"]["q_proj"]["kernel"]
  assert (
    q.sharding
    == shardings["params"]["trunk"]["layers_0"]["attn"]["q_proj"]["kernel"]
  )
  # [D, N, H] = [64, 4, 16] over fsdp=4, tensor=2: every device holds
  # one [16, 2, 16] slice, not the whole kernel.
  assert {s.data.shape for s in q.addressable_shards} == {(16, 2, 16)}
  assert len({s.device for s in q.addressable_shards}) == 8
  down = sharded["params"]["trunk"]["layers_1"]["mlp"]["down_proj"]["kernel"]
  assert {s.data.shape for s in down.addressable_shards} == {(64, 16)}
  for leaf, want in zip(
    jax.tree.leaves(sharded), jax.tree.leaves(shardings), strict=True
  ):
    assert leaf.sharding == want
  # The critic takes shardings of its own tree (value head included).
  critic = hf_import.critic_from_hf(path, cfg, _shardings(cfg, mesh, tf.Critic))
  assert critic["params"]["value_head"]["kernel"].shape == (64, 1)


def test_shardings_must_match_the_parameters(checkpoints):
  path, _ = checkpoints["qwen2_tied"]
  cfg = _our_config(path)
  devices = np.array(jax.devices()[:1]).reshape(1, 1, 1)
  mesh = jax.sharding.Mesh(devices, ("data", "fsdp", "tensor"))
  shardings = _shardings(cfg, mesh, tf.Actor)
  del shardings["params"]["trunk"]["final_norm"]
  with pytest.raises(ValueError, match="missing.*params/trunk/final_norm"):
    hf_import.load_params(path, cfg, shardings)


def _rewrite(src, dst, edit):
  """Copies a single-file checkpoint, applying edit to its tensor dict."""
  shutil.copytree(src, dst)
  file = dst / hf_import.SINGLE_FILE
  tensors = st_numpy.load_file(file)
  edit(tensors)
  st_numpy.save_file(tensors, file)
  return dst


@pytest.mark.parametrize(
  "edit,match",
  [
    (
      lambda t: t.pop("model.layers.1.mlp.up_proj.weight"),
      r"missing tensors: model\.layers\.1\.mlp\.up_proj\.weight",
    ),
    (
      lambda t: t.update(
        {"model.layers.0.self_attn.k_proj.bias": np.zeros(16, np.float32)}
      ),
      r"wrong shapes: model\.layers\.0\.self_attn\.k_proj\.bias is \[16\],"
      r" expected \[32\]",
    ),
    (
      lambda t: t.update({"model.layers.0.extra.weight": np.zeros(3)}),
      r"no place for: model\.layers\.0\.extra\.weight",
    ),
    (
      lambda t: t.update({"lm_head.weight": np.ones((VOCAB, 64), "f4")}),
      r"lm_head\.weight differs from model\.embed_tokens\.weight",
    ),
  ],
)
def test_bad_tensors_are_named(checkpoints, tmp_path, edit, match):
  src, _ = checkpoints["qwen2_tied"]
  path = _rewrite(src, tmp_path / "ckpt", edit)
  with pytest.raises(ValueError, match=match):
    hf_import.load_params(path, _our_config(path))


def test_derived_buffers_and_equal_tied_head_are_accepted(
  checkpoints, tmp_path
):
  src, _ = checkpoints["qwen2_tied"]

  def edit(t):
    t["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(8, "f4")
    t["lm_head.weight"] = t["model.embed_tokens.weight"].copy()

  path = _rewrite(src, tmp_path / "ckpt", edit)
  params = hf_import.load_params(path, _our_config(path))["params"]
  assert "lm_head" not in params


def test_missing_shard_file_is_named(checkpoints, tmp_path):
  src, _ = checkpoints["llama_tied_sharded"]
  path = tmp_path / "ckpt"
  shutil.copytree(src, path)
  (path / "model-00002-of-00013.safetensors").unlink()
  with pytest.raises(FileNotFoundError, match="model-00002-of-00013"):
    hf_import.load_params(path, _our_config(path))


def test_config_must_match_the_checkpoint(checkpoints):
  path, _ = checkpoints["llama_untied"]
  cfg = dataclasses.replace(_our_config(path), rope_theta=1e6)
  with pytest.raises(ValueError, match="model.rope_theta=1000000.0"):
    hf_import.load_params(path, cfg)


def test_no_checkpoint_files(tmp_path):
  with pytest.raises(FileNotFoundError, match="config.json"):
    hf_import.read_hf_config(tmp_path)


# Qwen2.5-Coder-0.5B-Instruct's config.json (transformers 4.4x layout):
# max_window_layers < num_hidden_layers but use_sliding_window is false.
QWEN_05B_JSON = {
  "architectures": ["Qwen2ForCausalLM"],
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_scaling": None,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": True,
  "use_sliding_window": False,
  "vocab_size": 151936,
}
QWEN_7B_JSON = {
  **QWEN_05B_JSON,
  "hidden_size": 3584,
  "intermediate_size": 18944,
  "max_window_layers": 28,
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "sliding_window": 131072,
  "tie_word_embeddings": False,
  "vocab_size": 152064,
}


@pytest.mark.parametrize(
  "change,match",
  [
    ({"model_type": "mistral"}, "model_type='mistral' is not supported"),
    ({"rope_scaling": {"type": "yarn", "factor": 4.0}}, "rope_scaling="),
    (
      {"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}},
      "rope_parameters=.*rotary scaling",
    ),
    ({"use_sliding_window": True}, "sliding-window attention"),
    (
      {"layer_types": ["full_attention"] * 23 + ["sliding_attention"]},
      "sliding-window attention",
    ),
    ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ({"model_type": "llama", "mlp_bias": True}, "mlp_bias=True"),
    (
      {"model_type": "llama", "attention_bias": True},
      "attention_bias=True: a bias on o_proj",
    ),
    ({"hidden_size": None}, r"missing fields \['hidden_size'\]"),
  ],
)
def test_unsupported_configs_are_rejected(change, match):
  with pytest.raises(ValueError, match=match):
    hf_import.config_from_hf(
      {**QWEN_05B_JSON, **change},
      dtype="float32",
      param_dtype="float32",
      remat="none",
    )


def test_v5_rope_parameters_are_read():
  cfg = hf_import.config_from_hf(
    {
      **{k: v for k, v in QWEN_05B_JSON.items() if k != "rope_theta"},
      "rope_parameters": {"rope_type": "default", "rope_theta": 123.0},
    },
    dtype="float32",
    param_dtype="float32",
    remat="none",
  )
  assert cfg.rope_theta == 123.0


@pytest.mark.parametrize(
  "module,hf_json,published",
  [
    (qwen25_coder_0p5b, QWEN_05B_JSON, 0.49e9),
    (qwen25_coder_7b, QWEN_7B_JSON, 7.61e9),
  ],
)
def test_qwen_configs_have_published_sizes(module, hf_json, published):
  config = module.get_config()
  cfg = tf.TransformerConfig.from_config(config.model)
  # The config file agrees with the published config.json.
  from_json = hf_import.config_from_hf(
    hf_json,
    dtype=cfg.dtype,
    param_dtype=cfg.param_dtype,
    remat=cfg.remat,
    logits_chunk=cfg.logits_chunk,
    attention=cfg.attention,
    attention_chunk=cfg.attention_chunk,
  )
  assert from_json == cfg
  assert abs(cfg.num_params() - published) / published < 0.01
  # The actor's parameters, counted without materialising them (remat
  # changes no parameter and only slows the tracing down).
  abstract = jax.eval_shape(
    tf.Actor(dataclasses.replace(cfg, remat="none")).init,
    jax.random.PRNGKey(0),
    jnp.zeros((1, 1), jnp.int32),
    jnp.zeros((1, 1), jnp.int32),
    jnp.ones((1, 1), bool),
  )
  count = sum(x.size for x in jax.tree.leaves(abstract))
  assert count == cfg.num_params()
