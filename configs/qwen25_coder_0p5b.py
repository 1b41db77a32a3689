"""Qwen2.5-Coder-0.5B: its model dimensions, with the default other sections.

The model section holds the real dimensions of Qwen/Qwen2.5-Coder-0.5B, as in
its config.json on the Hugging Face hub (Qwen2ForCausalLM: hidden 896,
24 layers, 14 query / 2 key-value heads, intermediate 4864, vocabulary
151936, rope_theta 1e6, RMSNorm eps 1e-6, tied embeddings, qkv bias) and its
model card (0.49B parameters, 0.36B without the embedding).
tests/models/hf_import_test.py checks these fields against that config.json
and the parameter count against 0.49B. The rl, mesh, optim and checkpoint
sections are the defaults of configs/common.py.

This is no training experiment yet: `codeagent_rl.main` rejects it (it
lacks the trainer's other sections), and the trainer cannot start from a
Hugging Face checkpoint; that is future work, and nothing in the library
reads `hf_checkpoint_dir` yet. Today the config gives the model code, the
sharding and the import tests a real size, and from a notebook
`codeagent_rl.models.hf_import.load_params` reads a local checkpoint
directory (config.json and *.safetensors) into this model's parameters.
Nothing is downloaded.
"""

import ml_collections

from configs import qwen25_coder


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Returns the config; there are no presets, so `arg` must be None."""
  if arg is not None:
    raise ValueError(
      f"configs/qwen25_coder_0p5b.py: unknown preset {arg!r}; it has none."
    )
  return qwen25_coder.get_qwen25_coder_config(
    hf_model_id="Qwen/Qwen2.5-Coder-0.5B",
    vocab_size=151936,
    num_layers=24,
    embed_dim=896,
    num_heads=14,
    num_kv_heads=2,
    head_dim=64,
    mlp_dim=4864,
    # The 0.5B model shares its input and output embeddings.
    tie_embeddings=True,
    # Save the outputs of the weight matmuls (recomputing them costs most of
    # a block's FLOPs); recompute attention, whose [B, N, T, T] logits over
    # long agent trajectories are the memory that must go.
    remat="dots_no_batch",
  )
