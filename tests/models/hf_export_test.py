"""Tests of codeagent_rl.models.hf_export against `transformers` on the CPU.

Tiny random Llama and Qwen2 models (grouped-query attention, tied and
untied embeddings) are saved with `save_pretrained`, imported, exported and
loaded again, by `transformers` and by `hf_import`.
"""

import dataclasses
import json

from flax import linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors import numpy as st_numpy
import torch
import transformers

from codeagent_rl.models import hf_export
from codeagent_rl.models import hf_import
from codeagent_rl.models import transformer as tf

VOCAB = 97
TOL = 1e-4  # float32 logits, max abs difference

# name -> (model_type, HF config class, its kwargs).
CASES = {
  "llama_tied": (
    "llama",
    transformers.LlamaConfig,
    dict(rope_theta=5e4, tie_word_embeddings=True),
  ),
  "llama_untied": (
    "llama",
    transformers.LlamaConfig,
    # head_dim other than hidden / heads.
    dict(head_dim=24, rms_norm_eps=1e-5, tie_word_embeddings=False),
  ),
  "qwen2_tied": (
    "qwen2",
    transformers.Qwen2Config,
    dict(rope_theta=1e6, tie_word_embeddings=True),
  ),
  "qwen2_untied": (
    "qwen2",
    transformers.Qwen2Config,
    dict(rope_theta=1e6, tie_word_embeddings=False),
  ),
}


def _hf_model(name, seed=0):
  _, config_cls, kwargs = CASES[name]
  hf_config = config_cls(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    bos_token_id=3,
    eos_token_id=5,
    attn_implementation="eager",
    **kwargs,
  )
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(hf_config)
  # Weights far from the default init (unit norms, zero biases), so that
  # every tensor moves the logits.
  with torch.no_grad():
    for pname, p in model.named_parameters():
      if pname.endswith("norm.weight"):
        p.copy_(1.0 + 0.2 * torch.randn_like(p))
      else:
        p.copy_(0.15 * torch.randn_like(p))
  return model.eval()


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
  """Case name -> (source checkpoint dir, our config, our params)."""
  out = {}
  for name in CASES:
    path = tmp_path_factory.mktemp(name)
    _hf_model(name).save_pretrained(path)
    cfg = _our_config(path)
    out[name] = (path, cfg, hf_import.load_params(path, cfg))
  return out


def _our_config(path, param_dtype="float32"):
  return hf_import.config_from_hf(
    hf_import.read_hf_config(path),
    dtype="float32",
    param_dtype=param_dtype,
    remat="none",
  )


def _padded_batch(seed=0):
  """Tokens [3, 12]: row 0 unpadded, row 1 left-, row 2 right-padded."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(1, VOCAB, size=(3, 12))
  valid = np.ones((3, 12), bool)
  valid[1, :4] = False
  valid[2, 9:] = False
  return np.where(valid, tokens, 0), valid


def _torch_logits(path, tokens, valid):
  model = transformers.AutoModelForCausalLM.from_pretrained(
    path, attn_implementation="eager"
  ).eval()
  positions = np.maximum(np.cumsum(valid, axis=1) - 1, 0)
  with torch.no_grad():
    out = model(
      input_ids=torch.tensor(tokens),
      attention_mask=torch.tensor(valid.astype(np.int64)),
      position_ids=torch.tensor(positions),
    )
  return out.logits.numpy()


def _our_logits(cfg, params, tokens, valid):
  logits, _ = jax.jit(tf.Actor(cfg).apply)(
    params,
    jnp.asarray(tokens),
    tf.positions_from_valid(jnp.asarray(valid)),
    jnp.asarray(valid),
  )
  return np.asarray(logits)


@pytest.mark.parametrize("with_base", [True, False], ids=["base", "no_base"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_export_loads_in_transformers_and_round_trips(
  imported, tmp_path, name, with_base
):
  src, cfg, params = imported[name]
  model_type = CASES[name][0]
  base = hf_import.read_hf_config(src) if with_base else None
  out = tmp_path / "export"
  hf_export.save_params(
    params, cfg, out, model_type=model_type, base_config=base
  )
  assert sorted(p.name for p in out.iterdir()) == [
    "config.json",
    "model.safetensors",
  ]
  # transformers' logits are ours.
  tokens, valid = _padded_batch()
  ours = _our_logits(cfg, params, tokens, valid)
  theirs = _torch_logits(out, tokens, valid)
  assert np.std(theirs[valid]) > 0.5  # spread well beyond TOL
  diff = np.abs(ours - theirs)[valid]
  assert diff.max() < TOL, f"{name}: max abs logit diff {diff.max():.2e}"
  # hf_import gives the params back exactly.
  again = hf_import.load_params(out, _our_config(out))
  assert jax.tree.structure(again) == jax.tree.structure(params)
  jax.tree.map(np.testing.assert_array_equal, again, params)
  # The file holds the source checkpoint's tensors, names and values
  # (lm_head only when untied).
  exported = st_numpy.load_file(out / "model.safetensors")
  source = st_numpy.load_file(src / "model.safetensors")
  assert sorted(exported) == sorted(source)
  assert ("lm_head.weight" in exported) == (not cfg.tie_embeddings)
  for key, value in source.items():
    np.testing.assert_array_equal(exported[key], value, err_msg=key)
  # The base's other fields are kept.
  written = json.loads((out / "config.json").read_text())
  assert (written.get("bos_token_id"), written.get("eos_token_id")) == (
    (3, 5) if with_base else (None, None)
  )
  assert written["dtype"] == "float32"
  assert written["architectures"] == [hf_export.ARCHITECTURES[model_type]]


def test_bfloat16_params_and_file(imported, tmp_path):
  src, cfg, _ = imported["qwen2_untied"]
  cfg16 = _our_config(src, param_dtype="bfloat16")
  params16 = hf_import.load_params(src, cfg16)
  # dtype=None: the params' dtype.
  hf_export.save_params(
    params16, cfg16, tmp_path / "bf16", model_type="qwen2", dtype=None
  )
  again = hf_import.load_params(tmp_path / "bf16", cfg16)
  jax.tree.map(np.testing.assert_array_equal, again, params16)
  header = json.loads((tmp_path / "bf16" / "config.json").read_text())
  assert header["dtype"] == "bfloat16"
  model = transformers.AutoModelForCausalLM.from_pretrained(
    tmp_path / "bf16", dtype="auto"
  )
  assert model.dtype == torch.bfloat16
  # The default: float32, the bfloat16 values exactly.
  hf_export.save_params(params16, cfg16, tmp_path / "f32", model_type="qwen2")
  back = hf_import.load_params(tmp_path / "f32", cfg)
  jax.tree.map(
    lambda a, b: np.testing.assert_array_equal(a, b.astype(jnp.float32)),
    back,
    params16,
  )
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(back))


RULES = (
  ("batch", "data"),
  ("embed", "fsdp"),
  ("heads", "tensor"),
  ("mlp", "tensor"),
  ("kv", None),
  ("vocab", None),  # 97 ids do not split
  ("length", None),
)


def test_sharded_params_export(imported, tmp_path):
  src, cfg, params = imported["llama_untied"]
  devices = np.array(jax.devices()).reshape(1, 4, 2)
  mesh = jax.sharding.Mesh(devices, ("data", "fsdp", "tensor"))
  abstract = jax.eval_shape(
    tf.Actor(cfg).init,
    jax.random.PRNGKey(0),
    jnp.zeros((1, 2), jnp.int32),
    jnp.zeros((1, 2), jnp.int32),
    jnp.ones((1, 2), bool),
  )
  shardings = nn.logical_to_mesh_sharding(
    nn.get_partition_spec(abstract), mesh, RULES
  )
  sharded = hf_import.load_params(src, cfg, shardings)
  q = sharded["params"]["trunk"]["layers_0"]["attn"]["q_proj"]["kernel"]
  assert len(q.addressable_shards) == 8
  hf_export.save_params(sharded, cfg, tmp_path, model_type="llama")
  again = hf_import.load_params(tmp_path, cfg)
  jax.tree.map(np.testing.assert_array_equal, again, params)


def _tiny_config(**fields):
  return tf.TransformerConfig(
    **{
      "vocab_size": VOCAB,
      "num_layers": 1,
      "embed_dim": 32,
      "num_heads": 4,
      "num_kv_heads": 2,
      "head_dim": 8,
      "mlp_dim": 48,
      "rope_theta": 1e4,
      "rms_eps": 1e-6,
      "qkv_bias": False,
      "tie_embeddings": True,
      "dtype": "float32",
      "param_dtype": "float32",
      "remat": "none",
      "init_std": 0.02,
      **fields,
    }
  )


@pytest.mark.parametrize(
  "fields,model_type,base,match",
  [
    (
      {"qkv_bias": True},
      "llama",
      None,
      "qkv_bias=True cannot be exported as model_type 'llama'.*'qwen2'",
    ),
    (
      {"qkv_bias": False},
      "qwen2",
      None,
      "qkv_bias=False cannot be exported as model_type 'qwen2'.*'llama'",
    ),
    ({}, "mistral", None, "model_type='mistral' is not supported"),
    (
      {},
      "llama",
      {"model_type": "qwen2"},
      "base config.json has model_type='qwen2'",
    ),
    (
      {},
      "llama",
      {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
      "rope_scaling=",
    ),
  ],
)
def test_refusals(fields, model_type, base, match):
  with pytest.raises(ValueError, match=match):
    hf_export.hf_config_from(_tiny_config(**fields), model_type, base)


def test_config_without_base_maps_back():
  cfg = _tiny_config(qkv_bias=True, tie_embeddings=False, rope_theta=123.0)
  hf = hf_export.hf_config_from(cfg, "qwen2", None)
  got = hf_import.config_from_hf(
    hf, dtype="float32", param_dtype="float32", remat="none"
  )
  assert got == cfg
  assert hf["use_sliding_window"] is False


def test_params_must_fit_the_config(imported, tmp_path):
  _, cfg, params = imported["qwen2_tied"]
  inner = jax.tree.map(lambda x: x, params["params"])
  del inner["trunk"]["final_norm"]
  inner["trunk"]["layers_0"]["mlp"]["up_proj"]["kernel"] = jnp.zeros((3, 3))
  inner["lm_head"] = {"kernel": jnp.zeros((64, VOCAB))}
  with pytest.raises(ValueError) as e:
    hf_export.save_params({"params": inner}, cfg, tmp_path, model_type="qwen2")
  assert "missing: trunk/final_norm/scale" in str(e.value)
  assert "not in the model: lm_head/kernel" in str(e.value)
  assert (
    "wrong shapes: trunk/layers_0/mlp/up_proj/kernel is [3, 3], expected"
    " [64, 128]" in str(e.value)
  )
  with pytest.raises(ValueError, match=r"\{'params': \{\.\.\.\}\}"):
    hf_export.save_params(
      params["params"], cfg, tmp_path / "x", model_type="qwen2"
    )
  assert not (tmp_path / "x").exists()


def test_architecture_fields_override_the_base(imported):
  src, cfg, _ = imported["llama_tied"]
  base = hf_import.read_hf_config(src)
  other = dataclasses.replace(cfg, rope_theta=7.0, tie_embeddings=False)
  hf = hf_export.hf_config_from(other, "llama", base)
  assert (hf["rope_theta"], hf["rope_parameters"]["rope_theta"]) == (7.0, 7.0)
  assert hf["tie_word_embeddings"] is False
  assert hf["max_position_embeddings"] == base["max_position_embeddings"]
