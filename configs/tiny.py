"""Tiny experiment on a 2-core CPU: byte tokenizer, synthetic code tasks.

Sections so far: `rl`, `model`, `mesh`, `optim`; the sandbox and trainer
sections and the command that runs this config arrive with the trainer
issue.

Presets: `configs/tiny.py` (default) and `configs/tiny.py:smoke` (the
smallest settings, used by tests).
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Returns the tiny config; `arg` selects a preset ("smoke")."""
  preset = arg or "default"
  if preset not in ("default", "smoke"):
    raise ValueError(
      f"configs/tiny.py: unknown preset {preset!r}; expected 'default' or"
      " 'smoke'."
    )
  config = ml_collections.ConfigDict()
  # Name of the preset, recorded in logs.
  config.preset = preset
  # Seed of parameters, data order and sampling.
  config.seed = 0
  # Advantage estimation, PPO losses and KL; defaults in configs/common.py.
  config.rl = common.get_rl_config()
  # Decoder-only transformer (codeagent_rl/models/transformer.py).
  config.model = get_model_config(preset)
  # Device mesh and logical-axis rules; defaults in configs/common.py.
  config.mesh = common.get_mesh_config()
  # Optimisers; defaults in configs/common.py.
  config.optim = common.get_optim_config()
  # 1e-6 is the rate for pretrained 1B+ models; a 1-2M-parameter model takes
  # larger steps. 1e-4 is a starting point, not yet tuned; the critic
  # follows at 5x.
  config.optim.actor_lr = 1e-4
  # Checkpoints: how many to keep, how often; defaults in configs/common.py.
  config.checkpoint = common.get_checkpoint_config()
  config.lock()
  return config


def get_model_config(preset: str) -> ml_collections.ConfigDict:
  """A byte-vocabulary model: ~1.7M params (default), ~0.12M (smoke)."""
  model = ml_collections.ConfigDict()
  # ByteTokenizer: 16 protocol/reserved ids + 256 bytes = 272 ids, padded to
  # a multiple of 128 so the vocabulary splits evenly over `tensor`.
  model.vocab_size = 384
  # Decoder blocks.
  model.num_layers = 4 if preset == "default" else 2
  # Model width.
  model.embed_dim = 192 if preset == "default" else 64
  # Query heads; divisible by 2 for a tensor=2 test mesh.
  model.num_heads = 6 if preset == "default" else 4
  # Key/value heads (grouped-query attention, as Llama 3 / Qwen2).
  model.num_kv_heads = 2
  # Width of one head.
  model.head_dim = 32 if preset == "default" else 16
  # SwiGLU hidden width (~8/3 x embed_dim, as Llama, rounded to 128).
  model.mlp_dim = 512 if preset == "default" else 128
  # Rotary base; 10000 as Llama 2 (contexts here are short).
  model.rope_theta = 10000.0
  # RMSNorm epsilon; 1e-6 as Qwen2.
  model.rms_eps = 1e-6
  # Biases on q, k, v as Qwen2 (the family real runs import).
  model.qkv_bias = True
  # Separate output embedding: at this size tying saves little.
  model.tie_embeddings = False
  # Activation dtype; float32: CPUs gain nothing from bfloat16.
  model.dtype = "float32"
  # Parameter dtype; float32 for the same reason.
  model.param_dtype = "float32"
  # No rematerialisation: activations of a tiny model fit easily.
  model.remat = "none"
  # Weight init stddev; 0.02 as GPT-2 / Llama.
  model.init_std = 0.02
  return model
