"""Qwen2.5-Coder-7B: its model dimensions, with the default other sections.

The model section holds the real dimensions of Qwen/Qwen2.5-Coder-7B, as in
its config.json on the Hugging Face hub (Qwen2ForCausalLM: hidden 3584,
28 layers, 28 query / 4 key-value heads, intermediate 18944, vocabulary
152064, rope_theta 1e6, RMSNorm eps 1e-6, untied embeddings, qkv bias) and
its model card (7.61B parameters, 6.53B without the embeddings).
tests/models/hf_import_test.py checks these fields against that config.json
and the parameter count against 7.61B. Its float32 parameters take 30 GB
per model, sharded over the mesh.

Train it with PPO (the other sections are configs/hf.py's default):

    python -m codeagent_rl.main --config=configs/qwen25_coder_7b.py \
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
      f"configs/qwen25_coder_7b.py: unknown preset {arg!r}; it has none."
    )
  return qwen25_coder.get_qwen25_coder_config(
    hf_model_id="Qwen/Qwen2.5-Coder-7B",
    vocab_size=152064,
    num_layers=28,
    embed_dim=3584,
    num_heads=28,
    num_kv_heads=4,
    head_dim=128,
    mlp_dim=18944,
    # The 7B model has its own lm_head.
    tie_embeddings=False,
    # Recompute each block in the backward pass: at 7B, activations of long
    # agent trajectories, not the ~33% extra FLOPs, limit a step.
    remat="full",
  )
