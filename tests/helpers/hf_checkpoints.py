"""Tiny Hugging Face checkpoints saved by `transformers`, with a chat tokenizer.

Real artefacts made on the spot (nothing downloaded): random Qwen2 or Llama
weights of about 50k parameters, a byte-level BPE tokenizer trained here on
a few code-agent lines with ChatML's special tokens, its chat template in
tokenizer_config.json, and a generation_config.json whose EOS is
`<|im_end|>`, as Qwen2.5-Coder's instruct checkpoints have them.

No side effects on import (see sandboxes.py).
"""

import pathlib

import tokenizers
import torch
import transformers

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# ChatML as Qwen2.5 writes it: a default system message when there is none.
CHATML_TEMPLATE = (
  "{%- if messages[0].role != 'system' %}"
  "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
  "{%- endif %}"
  "{%- for message in messages %}"
  "{{- '<|im_start|>' + message.role + '\\n' + message.content"
  " + '<|im_end|>\\n' }}"
  "{%- endfor %}"
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
  "{%- endif %}"
)
# Lines like the ones an episode holds, so that the BPE merges shorten them.
_CORPUS = (
  "def add(a, b):\n    return a + b\n",
  "<run>print(add(1, 2))</run>",
  "<submit>def f(x):\n    return x * 2 + 1\n</submit>",
  "tests: 1/2 passed\ntest 1: pass\ntest 2: fail\n",
  "Write a function that returns the value. Visible tests:\n",
  "You are a helpful assistant.",
)
MODEL_VOCAB = 512  # embedding rows: the tokenizer's ids, padded


def chat_tokenizer(vocab_size: int = 400):
  """A `PreTrainedTokenizerFast` with ChatML's specials and template."""
  tok = tokenizers.Tokenizer(tokenizers.models.BPE())
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(
    add_prefix_space=False
  )
  tok.decoder = tokenizers.decoders.ByteLevel()
  tok.train_from_iterator(
    list(_CORPUS) * 8,
    tokenizers.trainers.BpeTrainer(
      vocab_size=vocab_size,
      special_tokens=list(SPECIALS),
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


def save_checkpoint(
  path: str | pathlib.Path,
  *,
  model_type: str = "qwen2",
  tie_embeddings: bool = True,
  seed: int = 0,
  hidden_size: int = 32,
  num_layers: int = 2,
) -> pathlib.Path:
  """Saves a tiny random checkpoint with the chat tokenizer into `path`.

  Every checkpoint gets the same tokenizer (trained on the same corpus), so
  one of a smaller `hidden_size` / `num_layers` can be another's critic.
  """
  path = pathlib.Path(path)
  tok = chat_tokenizer()
  eos = tok.convert_tokens_to_ids("<|im_end|>")
  config_cls = {
    "qwen2": transformers.Qwen2Config,
    "llama": transformers.LlamaConfig,
  }[model_type]
  extra = {"rope_theta": 1e6} if model_type == "qwen2" else {}
  hf_config = config_cls(
    vocab_size=MODEL_VOCAB,
    hidden_size=hidden_size,
    intermediate_size=2 * hidden_size,
    num_hidden_layers=num_layers,
    num_attention_heads=4,
    num_key_value_heads=2,
    tie_word_embeddings=tie_embeddings,
    bos_token_id=None,
    eos_token_id=eos,
    **extra,
  )
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(hf_config)
  model.save_pretrained(path)
  tok.save_pretrained(path)
  transformers.GenerationConfig(eos_token_id=eos).save_pretrained(path)
  return path
