"""What the Qwen2.5-Coder configs share: every field but the model's size.

`configs/qwen25_coder_0p5b.py` and `configs/qwen25_coder_7b.py` call
`get_qwen25_coder_config` with the sizes from their checkpoints'
config.json (the names in parentheses below) and their own remat policy.
The other sections are configs/hf.py's default preset: PPO with a critic
on the checkpoint in `hf_checkpoint_dir`, whose config.json must agree
with the sizes written here (the trainer checks). This module is no
experiment: it has no `get_config`.
"""

import ml_collections

from configs import hf


def get_qwen25_coder_config(
  *,
  hf_model_id: str,
  vocab_size: int,
  num_layers: int,
  embed_dim: int,
  num_heads: int,
  num_kv_heads: int,
  head_dim: int,
  mlp_dim: int,
  tie_embeddings: bool,
  remat: str,
) -> ml_collections.ConfigDict:
  """Returns the locked config of one Qwen2.5-Coder size.

  Args:
    hf_model_id: Hugging Face name of the checkpoint, for the record.
    vocab_size: token ids (vocab_size).
    num_layers: decoder blocks (num_hidden_layers).
    embed_dim: model width (hidden_size).
    num_heads: query heads (num_attention_heads).
    num_kv_heads: key/value heads (num_key_value_heads).
    head_dim: width of one head (hidden_size / num_attention_heads).
    mlp_dim: SwiGLU hidden width (intermediate_size).
    tie_embeddings: input and output embeddings shared
      (tie_word_embeddings).
    remat: what the backward pass recomputes (`model.remat`).
  """
  # The trainer's sections, the checkpoint directory among them (the user
  # sets it: config.json + safetensors + tokenizer files).
  config = hf.get_config()
  config.unlock()
  config.preset = hf_model_id
  # Hugging Face name of the checkpoint, for the record; never fetched.
  config.hf_model_id = hf_model_id

  model = ml_collections.ConfigDict()
  # Token ids (config.json vocab_size; padded beyond the tokenizer's).
  model.vocab_size = vocab_size
  # Decoder blocks (num_hidden_layers).
  model.num_layers = num_layers
  # Model width (hidden_size).
  model.embed_dim = embed_dim
  # Query heads (num_attention_heads).
  model.num_heads = num_heads
  # Key/value heads of grouped-query attention (num_key_value_heads).
  model.num_kv_heads = num_kv_heads
  # Width of one head: hidden_size / num_attention_heads.
  model.head_dim = head_dim
  # SwiGLU hidden width (intermediate_size).
  model.mlp_dim = mlp_dim
  # Rotary base (rope_theta); no rope_scaling.
  model.rope_theta = 1e6
  # RMSNorm epsilon (rms_norm_eps).
  model.rms_eps = 1e-6
  # Biases on q, k, v: every Qwen2 model has them.
  model.qkv_bias = True
  # Input and output embeddings shared (tie_word_embeddings).
  model.tie_embeddings = tie_embeddings
  # Activation dtype; bfloat16 is the checkpoint's own and halves memory
  # and bandwidth on TPU/GPU (softmax and norms run in float32 anyway).
  model.dtype = "bfloat16"
  # Parameter dtype; float32 because Adam steps of ~1e-6 relative size
  # vanish when added to bfloat16 weights (8-bit mantissa).
  model.param_dtype = "float32"
  # What the backward pass recomputes; each size says why its choice.
  model.remat = remat
  # Weight init stddev (initializer_range); no imported weight uses it.
  model.init_std = 0.02
  # Positions per log-prob chunk: the [B, T, 151936] float32 logits are
  # never held whole (5 GB per 8k-token row); see configs/hf.py.
  model.logits_chunk = 512
  # Whole-row passes attend in chunks of 512 once rows are longer: the
  # plain [T, T] scores are ~3.8 GB per row and layer at 8k tokens in
  # float32 (models/attention.py); shorter rows attend plainly.
  model.attention = "auto"
  model.attention_chunk = 512
  config.model = model

  config.lock()
  return config
