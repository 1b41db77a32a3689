"""Qwen2.5-Coder-7B as actor and critic, imported from a local checkpoint.

The model section holds the real dimensions of Qwen/Qwen2.5-Coder-7B, as in
its config.json on the Hugging Face hub (Qwen2ForCausalLM: hidden 3584,
28 layers, 28 query / 4 key-value heads, intermediate 18944, vocabulary
152064, rope_theta 1e6, RMSNorm eps 1e-6, untied embeddings, qkv bias) and
its model card (7.61B parameters, 6.53B without the embeddings).
tests/models/hf_import_test.py checks these fields against that config.json
and the parameter count against 7.61B.

Nothing is downloaded: put the checkpoint's directory (config.json and
*.safetensors shards) in `hf_checkpoint_dir`, e.g.
`--config.hf_checkpoint_dir=/data/Qwen2.5-Coder-7B`; weights are loaded
with `codeagent_rl.models.hf_import` straight into their shardings. The
trainer and its command arrive with the trainer issue.
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Returns the config; there are no presets, so `arg` must be None."""
  if arg is not None:
    raise ValueError(
      f"configs/qwen25_coder_7b.py: unknown preset {arg!r}; it has none."
    )
  config = ml_collections.ConfigDict()
  # Seed of the value head, data order and sampling.
  config.seed = 0
  # Hugging Face name of the checkpoint, for the record; never fetched.
  config.hf_model_id = "Qwen/Qwen2.5-Coder-7B"
  # Local directory of that checkpoint (config.json + safetensors); the
  # user sets it. Its config.json must match `model` (hf_import checks).
  config.hf_checkpoint_dir = ml_collections.config_dict.placeholder(str)

  model = ml_collections.ConfigDict()
  # Token ids (config.json vocab_size; padded beyond the tokenizer's).
  model.vocab_size = 152064
  # Decoder blocks (num_hidden_layers).
  model.num_layers = 28
  # Model width (hidden_size).
  model.embed_dim = 3584
  # Query heads (num_attention_heads).
  model.num_heads = 28
  # Key/value heads of grouped-query attention (num_key_value_heads).
  model.num_kv_heads = 4
  # Width of one head: hidden_size / num_attention_heads.
  model.head_dim = 128
  # SwiGLU hidden width (intermediate_size).
  model.mlp_dim = 18944
  # Rotary base (rope_theta); no rope_scaling.
  model.rope_theta = 1e6
  # RMSNorm epsilon (rms_norm_eps).
  model.rms_eps = 1e-6
  # Biases on q, k, v: every Qwen2 model has them.
  model.qkv_bias = True
  # Input and output embeddings untied (the 7B model has its own lm_head).
  model.tie_embeddings = False
  # Activation dtype; bfloat16 is the checkpoint's own and halves memory
  # and bandwidth on TPU/GPU (softmax and norms run in float32 anyway).
  model.dtype = "bfloat16"
  # Parameter dtype; float32 because Adam steps of ~1e-6 relative size
  # vanish when added to bfloat16 weights (8-bit mantissa); 30 GB per
  # model, sharded over the mesh.
  model.param_dtype = "float32"
  # Recompute each block in the backward pass: at 7B, activations of long
  # agent trajectories, not the ~33% extra FLOPs, limit a step.
  model.remat = "full"
  # Weight init stddev (initializer_range); no imported weight uses it.
  model.init_std = 0.02
  config.model = model

  # Advantage estimation, PPO losses and KL; defaults in configs/common.py.
  config.rl = common.get_rl_config()
  # Device mesh and logical-axis rules; defaults in configs/common.py.
  config.mesh = common.get_mesh_config()
  # Optimisers (the recipe's 1e-6 actor / 5e-6 critic); configs/common.py.
  config.optim = common.get_optim_config()
  # Checkpoints; defaults in configs/common.py.
  config.checkpoint = common.get_checkpoint_config()
  config.lock()
  return config
