r"""Decode speed with the KV cache against recomputing the whole prefix.

Run from the repository root:

  python -m benchmarks.sampler_bench
  python -m benchmarks.sampler_bench --quick   # small smoke run

At each context length T the batch holds a prompt of T - N tokens and decodes
N new tokens greedily, two ways:

  cache      `Sampler.extend` (prefill) then `Sampler.decode`: one token
             per step through the KV cache (prefill time reported apart);
  recompute  N full forward passes over a fixed [B, T] buffer, each taking
             the argmax at the last filled position (jit once; no cache).

Both produce the same tokens (checked). Times are medians of --repeats runs
after a warm-up; "speed-up" is recompute time / cache decode time.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import pathlib
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.models import transformer as tf
from tests.helpers import models


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_string(
    "out", "benchmarks/results/sampler_bench.json", "Where to write JSON."
  )
  flags.DEFINE_integer("repeats", 3, "Timed runs per variant.")
  flags.DEFINE_bool("quick", False, "Small shapes (smoke check).")
  flags.DEFINE_integer("batch", 8, "Rows decoded together.")
  flags.DEFINE_integer("new_tokens", 32, "Tokens decoded per row.")


MODEL = models.transformer_config(
  vocab_size=384,
  init_std=0.05,
  num_layers=4,
  embed_dim=256,
  num_heads=8,
  head_dim=32,
  mlp_dim=768,
)


def _median_time(fn, repeats):
  fn()  # warm-up (compiles)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def _recompute_step(params, buf, filled, *, model):
  """One greedy step by a full forward over the [B, T] buffer."""
  b, t = buf.shape
  valid = jnp.broadcast_to(jnp.arange(t)[None, :] < filled, (b, t))
  logits, _ = model.apply(params, buf, tf.positions_from_valid(valid), valid)
  nxt = jnp.argmax(logits[:, filled - 1], axis=-1).astype(jnp.int32)
  return jax.lax.dynamic_update_slice(buf, nxt[:, None], (0, filled))


def bench_length(params, actor, t, b, n, repeats):
  """Times both variants at context length t; returns a result row."""
  prompt_len = t - n
  rng = np.random.default_rng(0)
  prompt = jnp.asarray(rng.integers(9, 265, size=(b, prompt_len)), jnp.int32)
  prompt_valid = jnp.ones((b, prompt_len), bool)
  cfg = sampler_lib.SamplerConfig(
    temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=n
  )
  sampler = sampler_lib.Sampler(actor, MODEL, cfg, pad_id=0)
  budgets = jnp.full((b,), n, jnp.int32)
  stop = jnp.array([-1], jnp.int32)
  key = jax.random.PRNGKey(0)

  def prefill():
    state = sampler.extend(params, sampler.start(b, t), prompt, prompt_valid)
    jax.block_until_ready(state.last_logits)
    return state

  prefill_s = _median_time(prefill, repeats)
  holder = {}

  def run_decode():
    state = prefill()
    start = time.perf_counter()
    _, out = sampler.decode(params, state, key, budgets, stop)
    jax.block_until_ready(out.tokens)
    holder["tokens"] = out.tokens
    return time.perf_counter() - start

  run_decode()
  decode_s = float(np.median([run_decode() for _ in range(repeats)]))

  step = jax.jit(
    functools.partial(_recompute_step, model=actor), donate_argnums=(1,)
  )

  def recompute():
    buf = jnp.concatenate([prompt, jnp.zeros((b, n), jnp.int32)], axis=1)
    for i in range(n):
      buf = step(params, buf, jnp.int32(prompt_len + i))
    jax.block_until_ready(buf)
    holder["recompute"] = buf[:, prompt_len:]

  recompute_s = _median_time(recompute, repeats)
  same = bool(np.array_equal(holder["tokens"], holder["recompute"]))
  return {
    "context": t,
    "batch": b,
    "new_tokens": n,
    "prefill_s": prefill_s,
    "cache_decode_s": decode_s,
    "recompute_s": recompute_s,
    "cache_tokens_per_s": b * n / decode_s,
    "recompute_tokens_per_s": b * n / recompute_s,
    "speedup": recompute_s / decode_s,
    "same_tokens": same,
  }


def main(argv):
  del argv
  lengths = (64, 128) if flags.FLAGS.quick else (128, 512, 2048)
  b, n = flags.FLAGS.batch, flags.FLAGS.new_tokens
  actor = tf.Actor(MODEL)
  valid = jnp.ones((1, 8), bool)
  params = actor.init(
    jax.random.PRNGKey(0),
    jnp.zeros((1, 8), jnp.int32),
    tf.positions_from_valid(valid),
    valid,
  )
  rows = [
    bench_length(params, actor, t, b, n, flags.FLAGS.repeats) for t in lengths
  ]
  print(
    f"model {MODEL.num_params() / 1e6:.2f}M params, batch {b}, {n} new"
    f" tokens, jax {jax.__version__} on {jax.default_backend()},"
    f" {os.cpu_count()} CPUs"
  )
  header = (
    f"{'T':>6} {'prefill s':>10} {'cache tok/s':>12}"
    f" {'recompute tok/s':>16} {'speed-up':>9} {'same':>5}"
  )
  print(header)
  print("-" * len(header))
  for r in rows:
    print(
      f"{r['context']:>6} {r['prefill_s']:>10.3f}"
      f" {r['cache_tokens_per_s']:>12.1f}"
      f" {r['recompute_tokens_per_s']:>16.1f} {r['speedup']:>9.2f}"
      f" {str(r['same_tokens']):>5}"
    )
  if not flags.FLAGS.quick or flags.FLAGS.out != flags.FLAGS["out"].default:
    out = pathlib.Path(flags.FLAGS.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
      json.dumps(
        {
          "benchmark": "sampler_bench",
          "date": datetime.datetime.now(datetime.UTC).isoformat(),
          "jax": jax.__version__,
          "backend": jax.default_backend(),
          "device_kind": jax.devices()[0].device_kind,
          "cpu_count": os.cpu_count(),
          "model_params": MODEL.num_params(),
          "rows": rows,
        },
        indent=2,
      )
    )
    print(f"Wrote {out}")
  if not all(r["same_tokens"] for r in rows):
    raise SystemExit("cache and recompute decoded different tokens")


if __name__ == "__main__":
  define_flags()
  app.run(main)
