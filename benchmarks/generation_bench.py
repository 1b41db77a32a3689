r"""Greedy generation: our jitted sampler against transformers' `generate`.

Run from the repository root (needs torch and transformers, the `test`
extra):

  python -m benchmarks.generation_bench            # contexts 512, 2k, 8k
  python -m benchmarks.generation_bench --quick    # smoke: tiny contexts

One tiny Qwen2 checkpoint is made with `transformers` (random weights,
`--layers`, `--width`; saved with `save_pretrained` into a temporary
folder) and loaded by both sides: ours through `models/hf_import.py`,
theirs as `Qwen2ForCausalLM`. For each context length the same `--batch`
random prompts of context - `--new_tokens` tokens are prefilled and
`--new_tokens` tokens decoded greedily (no stop token), on this machine's
CPU:

  ours    `Sampler.extend` over the prompt (one call), then
          `Sampler.decode` (temperature 0); each compiled on an untimed
          first turn. `--attention` is our model.attention ("auto":
          prompts longer than 512 tokens are prefilled in chunks).
  theirs  a forward of the prompt with `use_cache=True` (prefill), then
          `generate(max_new_tokens=N, do_sample=False)` from the prompt,
          whose time minus the prefill's is the decode's.

Times are medians of `--repeats` turns (after one untimed turn each);
tokens/s count prompt tokens for prefill and new tokens for decode. Both
sides' first generated tokens are compared: they must agree (the same
weights in float32; a few argmax ties may differ in the last place, so
the JSON records the share that agree). Prints a table and writes
`--out` (JSON rows, one per context and side, with the settings).
"""

from __future__ import annotations

import datetime
import json
import statistics
import sys
import tempfile
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from codeagent_rl.models import hf_import
from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.models import transformer

FLAGS = flags.FLAGS
VOCAB = 2048


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_list("contexts", ["512", "2048", "8192"], "Context lengths.")
  flags.DEFINE_integer("new_tokens", 64, "Tokens decoded a row.")
  flags.DEFINE_integer("batch", 1, "Rows.")
  flags.DEFINE_integer("layers", 2, "Layers of the checkpoint.")
  flags.DEFINE_integer("width", 256, "hidden_size of the checkpoint.")
  flags.DEFINE_integer("repeats", 3, "Timed turns per side (median).")
  flags.DEFINE_enum(
    "attention", "auto", ["plain", "chunked", "auto"], "Our model.attention."
  )
  flags.DEFINE_bool("quick", False, "Contexts 64 and 128, 8 new tokens.")
  flags.DEFINE_string(
    "out", "benchmarks/results/generation_bench.json", "The JSON to write."
  )


def make_checkpoint(folder: str, layers: int, width: int, max_len: int):
  """A random tiny Qwen2 in `folder`; returns the torch model (eval)."""
  import torch  # noqa: PLC0415 (the test extra)
  import transformers  # noqa: PLC0415

  torch.manual_seed(0)
  config = transformers.Qwen2Config(
    vocab_size=VOCAB,
    hidden_size=width,
    intermediate_size=2 * width,
    num_hidden_layers=layers,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=max_len,
    tie_word_embeddings=True,
  )
  model = transformers.Qwen2ForCausalLM(config).eval()
  model.save_pretrained(folder)
  return model


def ours(
  folder: str, prompts: np.ndarray, new: int, repeats: int, attention: str
) -> dict:
  """Prefill and decode times of our sampler, and its tokens."""
  cfg = hf_import.config_from_hf(
    hf_import.read_hf_config(folder),
    dtype="float32",
    param_dtype="float32",
    remat="none",
    attention=attention,
  )
  params = hf_import.load_params(folder, cfg)
  actor = transformer.Actor(cfg)
  sampler = sampler_lib.Sampler(
    actor,
    cfg,
    sampler_lib.SamplerConfig(
      temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=new
    ),
    pad_id=0,
  )
  b, t = prompts.shape
  tokens = jnp.asarray(prompts, jnp.int32)
  valid = jnp.ones((b, t), bool)
  budgets = jnp.full((b,), new, jnp.int32)
  stop = jnp.array([-1], jnp.int32)
  key = jax.random.key(0)
  times = {"prefill": [], "decode": []}
  out = None
  for turn in range(repeats + 1):
    start = time.perf_counter()
    state = sampler.extend(params, sampler.start(b, t + new), tokens, valid)
    jax.block_until_ready(state)
    middle = time.perf_counter()
    _, out = sampler.decode(params, state, key, budgets, stop)
    jax.block_until_ready(out.tokens)
    if turn:  # the first turn compiles
      times["prefill"].append(middle - start)
      times["decode"].append(time.perf_counter() - middle)
  return {"times": times, "tokens": np.asarray(out.tokens)[:, :new]}


def theirs(model, prompts: np.ndarray, new: int, repeats: int) -> dict:
  """Prefill and decode times of transformers' generate, and its tokens."""
  import torch  # noqa: PLC0415

  ids = torch.as_tensor(prompts, dtype=torch.long)
  mask = torch.ones_like(ids)
  times = {"prefill": [], "decode": []}
  generated = None
  with torch.inference_mode():
    for turn in range(repeats + 1):
      start = time.perf_counter()
      model(input_ids=ids, attention_mask=mask, use_cache=True)
      prefill = time.perf_counter() - start
      start = time.perf_counter()
      generated = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=False,
        use_cache=True,
        pad_token_id=0,
      )
      whole = time.perf_counter() - start
      if turn:
        times["prefill"].append(prefill)
        times["decode"].append(max(whole - prefill, 1e-9))
  return {"times": times, "tokens": generated[:, ids.shape[1] :].numpy()}


def rows_for(context: int, side: str, result: dict, b: int, new: int) -> dict:
  """One table row: medians and tokens/s."""
  prefill = statistics.median(result["times"]["prefill"])
  decode = statistics.median(result["times"]["decode"])
  return {
    "context": context,
    "side": side,
    "prefill_s": prefill,
    "decode_s": decode,
    "prefill_tokens_per_s": b * (context - new) / prefill,
    "decode_tokens_per_s": b * new / decode,
    "times_s": result["times"],
  }


def main(argv) -> None:
  """Runs every context on both sides; prints and writes the table."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  new = 8 if FLAGS.quick else FLAGS.new_tokens
  try:
    contexts = [64, 128] if FLAGS.quick else [int(c) for c in FLAGS.contexts]
  except ValueError:
    sys.exit(f"--contexts={','.join(FLAGS.contexts)}: integers.")
  if min(FLAGS.batch, FLAGS.repeats, new, FLAGS.layers, FLAGS.width) < 1:
    sys.exit("--batch, --repeats, --new_tokens, --layers, --width: >= 1.")
  short = [c for c in contexts if c <= new]
  if short:
    sys.exit(f"--contexts={short}: must exceed --new_tokens={new}.")
  if FLAGS.width % 4:
    sys.exit(f"--width={FLAGS.width}: must be a multiple of 4 (4 heads).")
  rows, agree = [], {}
  rng = np.random.default_rng(0)
  with tempfile.TemporaryDirectory() as folder:
    torch_model = make_checkpoint(
      folder, FLAGS.layers, FLAGS.width, max(contexts)
    )
    for context in contexts:
      prompts = rng.integers(1, VOCAB, (FLAGS.batch, context - new))
      a = ours(folder, prompts, new, FLAGS.repeats, FLAGS.attention)
      b = theirs(torch_model, prompts, new, FLAGS.repeats)
      agree[context] = float(np.mean(a["tokens"] == b["tokens"]))
      ours_row = rows_for(context, "ours", a, FLAGS.batch, new)
      theirs_row = rows_for(context, "transformers", b, FLAGS.batch, new)
      ours_row["tokens_agree"] = theirs_row["tokens_agree"] = agree[context]
      rows += [ours_row, theirs_row]
      print(
        f"context {context:>6}: prefill tok/s ours"
        f" {ours_row['prefill_tokens_per_s']:9.0f} transformers"
        f" {theirs_row['prefill_tokens_per_s']:9.0f} | decode tok/s ours"
        f" {ours_row['decode_tokens_per_s']:7.1f} transformers"
        f" {theirs_row['decode_tokens_per_s']:7.1f} | tokens agree"
        f" {agree[context]:.2f}",
        flush=True,
      )
  out = {
    "date": datetime.date.today().isoformat(),
    "command": " ".join(
      ["python -m benchmarks.generation_bench", *sys.argv[1:]]
    ),
    "settings": {
      "contexts": contexts,
      "new_tokens": new,
      "batch": FLAGS.batch,
      "layers": FLAGS.layers,
      "width": FLAGS.width,
      "repeats": FLAGS.repeats,
      "attention": FLAGS.attention,
      "device": str(jax.devices()[0].device_kind),
    },
    "rows": rows,
  }
  if FLAGS.out:
    with open(FLAGS.out, "w", encoding="utf-8") as f:
      json.dump(out, f, indent=1)
    print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
