"""Qwen2.5-Coder-0.5B: its model dimensions, with the default other sections.

The model section holds the real dimensions of Qwen/Qwen2.5-Coder-0.5B, as in
its config.json on the Hugging Face hub (Qwen2ForCausalLM: hidden 896,
24 layers, 14 query / 2 key-value heads, intermediate 4864, vocabulary
151936, rope_theta 1e6, RMSNorm eps 1e-6, tied embeddings, qkv bias) and its
model card (0.49B parameters, 0.36B without the embedding).
tests/models/hf_import_test.py checks these fields against that config.json
and the parameter count against 0.49B.

Train it with PPO (the other sections are configs/hf.py's default):

    python -m codeagent_rl.main --config=configs/qwen25_coder_0p5b.py \
      --config.hf_checkpoint_dir=DIR --config.data.train_tasks=TRAIN.jsonl \
      --config.data.eval_tasks=EVAL.jsonl --workdir=W

DIR is the local checkpoint (config.json, *.safetensors, tokenizer files);
its config.json must agree with the sizes here. Nothing is downloaded.
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
