r"""Plain against chunked attention: compiled memory at real sizes, CPU speed.

Run from the repository root:

  python -m benchmarks.attention_bench            # both parts (~10 min)
  python -m benchmarks.attention_bench --part=memory --lengths=8192
  python -m benchmarks.attention_bench --quick    # smoke: tiny sizes, one
                                                  # length, no remat

memory  XLA's compiled memory (`memory_analysis()`: arguments + outputs +
        temporaries - aliased) of one-row programs of the
        Qwen2.5-Coder-0.5B shape (configs/qwen25_coder_0p5b.py: bfloat16
        activations, float32 parameters, AdamW, log-probs 512 positions a
        time): the actor's PPO train step, the critic's, and the actor's
        log-prob pass, at each `--lengths` x attention ("plain",
        "chunked") x remat ("none", "full"). Compiled, never run: the
        arrays are abstract (`jax.ShapeDtypeStruct`), so no length is too
        long for this machine. Without remat the layers are unrolled:
        each program is compiled at 1 and 2 layers and the 24-layer
        figure is their line extended (memory is a + b * layers; the
        JSON keeps both measured points). With remat the layers are one
        `lax.scan` (see `transformer.Trunk`), so the program is compiled
        at `--layers` itself. Each row also keeps the argument bytes
        (parameters, optimiser state, batch), from which the JSON's
        "actor_and_critic" rows add the other model's resident state to
        each step: the peak of a device that holds both.
speed   valid tokens/s of the actor's train step (forward and backward) of
        the long-horizon and repository presets' tiny model on one row of
        each `--speed_lengths`, plain against chunked, run alternately
        (median of `--repeats` after a warm-up) in this process.

Prints a table per part and writes `--out` (JSON: "memory" and "speed"
rows, the settings, the date).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import statistics
import sys
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from codeagent_rl.models import attention as attention_lib
from codeagent_rl.models import transformer
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.train import experiment
from codeagent_rl.train import steps
from configs import long_horizon
from configs import qwen25_coder_0p5b

FLAGS = flags.FLAGS
ATTENTIONS = ("plain", "chunked")
# "fused" (cuDNN) is for a GPU run (benchmarks/gpu_check.sh); here it would
# be chunked again.
ALL_ATTENTIONS = ("plain", "chunked", "fused")
REMATS = ("none", "full", "dots_no_batch")
PASSES = ("actor_step", "critic_step", "log_probs")
GIB = 2**30


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_enum("part", "all", ["all", "memory", "speed"], "What to run.")
  flags.DEFINE_list(
    "lengths", ["8192", "16384", "32768"], "Row lengths of the memory part."
  )
  flags.DEFINE_integer(
    "layers", 24, "Layers the memory part extrapolates to (the 0.5B: 24)."
  )
  flags.DEFINE_list(
    "passes", list(PASSES), f"Programs of the memory part, of {PASSES}."
  )
  flags.DEFINE_list(
    "attentions",
    list(ATTENTIONS),
    f"model.attention values of the memory part, of {ALL_ATTENTIONS}.",
  )
  flags.DEFINE_list(
    "remats",
    list(REMATS),
    f"model.remat values of the memory part, of {REMATS}.",
  )
  flags.DEFINE_list(
    "speed_lengths", ["2048", "8192"], "Row lengths of the speed part."
  )
  flags.DEFINE_integer("repeats", 3, "Timed steps per variant (median).")
  flags.DEFINE_integer("chunk", 512, "model.attention_chunk.")
  flags.DEFINE_bool("quick", False, "Tiny sizes: a smoke check.")
  flags.DEFINE_string(
    "out", "benchmarks/results/attention_bench.json", "The JSON to write."
  )


def _rl():
  return experiment.Experiment.from_config(qwen25_coder_0p5b.get_config()).rl


def _actor_step(model, tx, rl):
  """The actor's PPO step on one micro-batch, temperature 1, full vocab."""
  return functools.partial(
    steps.actor_step,
    model=model,
    tx=tx,
    rl=rl,
    temperature=1.0,
    vocab_limit=0,
    num_micro=1,
  )


def _abstract_batch(t: int) -> steps.PPOBatch:
  def spec(dtype):
    return jax.ShapeDtypeStruct((1, t), dtype)

  f32 = spec(jnp.float32)
  return steps.PPOBatch(
    tokens=spec(jnp.int32),
    valid=spec(jnp.bool_),
    trainable=spec(jnp.bool_),
    old_logp=f32,
    ref_logp=f32,
    advantages=f32,
    returns=f32,
    old_values=f32,
  )


def compiled_bytes(cfg, which: str, t: int) -> tuple[int, int]:
  """(compiled memory, argument bytes) of pass `which`, one row of `t`."""
  rl = _rl()
  tx = optax.adamw(1e-6)
  batch = _abstract_batch(t)
  cls = transformer.Critic if which == "critic_step" else transformer.Actor
  model = cls(cfg)
  tokens = jnp.zeros((1, 8), jnp.int32)
  valid = jnp.ones((1, 8), bool)

  def init(key):
    params = model.init(
      key, tokens, transformer.positions_from_valid(valid), valid
    )["params"]
    return state_lib.TrainState.create(sharding.unbox(params), tx)

  state = jax.eval_shape(init, jax.random.key(0))
  rng = jax.eval_shape(lambda: jax.random.key(0))
  if which == "actor_step":
    fn = _actor_step(model, tx, rl)
    lowered = jax.jit(fn, donate_argnums=0).lower(state, batch, rng)
  elif which == "critic_step":
    fn = functools.partial(
      steps.critic_step, model=model, tx=tx, rl=rl, num_micro=1
    )
    lowered = jax.jit(fn, donate_argnums=0).lower(state, batch, rng)
  else:
    fn = functools.partial(
      steps.actor_log_probs, model=model, temperature=1.0, vocab_limit=0
    )
    lowered = jax.jit(fn).lower(state.params, batch.tokens, batch.valid)
  mem = lowered.compile().memory_analysis()
  total = (
    mem.argument_size_in_bytes
    + mem.output_size_in_bytes
    + mem.temp_size_in_bytes
    - mem.alias_size_in_bytes
  )
  return int(total), int(mem.argument_size_in_bytes)


def memory_rows(
  lengths, attentions, remats, passes, layers, chunk, quick
) -> list[dict]:
  """One row per length x attention x remat x pass (see the docstring)."""
  base = transformer.TransformerConfig.from_config(
    qwen25_coder_0p5b.get_config().model
  )
  if quick:
    base = dataclasses.replace(
      base, vocab_size=512, embed_dim=64, num_heads=4, num_kv_heads=2,
      head_dim=16, mlp_dim=128, logits_chunk=64,
    )  # fmt: skip
  rows = []
  for t in lengths:
    for attention in attentions:
      for remat in remats:
        for which in passes:
          start = time.perf_counter()

          def at(n, attention=attention, remat=remat, which=which, t=t):
            cfg = dataclasses.replace(
              base,
              num_layers=n,
              attention=attention,
              attention_chunk=chunk,
              remat=remat,
            )
            return compiled_bytes(cfg, which, t)

          row = {"length": t, "attention": attention, "remat": remat}
          row.update({"pass": which, "layers": layers})
          if remat == "none":
            (one, args_1), (two, args_2) = at(1), at(2)
            per_layer = two - one
            row.update(
              bytes_1_layer=one,
              bytes_2_layers=two,
              bytes_per_layer=per_layer,
              bytes=one + (layers - 1) * per_layer,
              method="extended from 1 and 2 layers",
            )
            args = args_1 + (layers - 1) * (args_2 - args_1)
          else:
            total, args = at(layers)
            row.update(bytes=total, method=f"compiled at {layers} layers")
          row["argument_bytes"] = args
          row["compile_s"] = round(time.perf_counter() - start, 1)
          rows.append(row)
          print(_memory_line(row), flush=True)
  return rows


def both_models(rows: list[dict]) -> list[dict]:
  """Each step's memory plus the other model's resident arguments.

  A device that trains both keeps the actor's parameters and optimiser
  state while the critic steps, and the other way round; the batch is
  counted twice (a few MB), so the figure errs high.
  """
  by = {(r["length"], r["attention"], r["remat"], r["pass"]): r for r in rows}
  out = []
  for (t, attention, remat, which), actor in by.items():
    critic = by.get((t, attention, remat, "critic_step"))
    if which != "actor_step" or critic is None:
      continue
    peak = max(
      actor["bytes"] + critic["argument_bytes"],
      critic["bytes"] + actor["argument_bytes"],
    )
    out.append(
      {"length": t, "attention": attention, "remat": remat, "bytes": peak}
    )
  return out


def _memory_line(r: dict) -> str:
  return (
    f"{r['length']:>6} {r['attention']:>8} {r['remat']:>13}"
    f" {r['pass']:>12} {r['bytes'] / GIB:10.2f}   {r['method']}"
  )


def _tiny_model(attention: str, chunk: int):
  cfg = transformer.TransformerConfig.from_config(
    long_horizon.get_config().model
  )
  return dataclasses.replace(cfg, attention=attention, attention_chunk=chunk)


def speed_rows(lengths, chunk, repeats) -> list[dict]:
  """Tokens/s of the tiny model's actor step, plain and chunked."""
  rl = experiment.Experiment.from_config(long_horizon.get_config()).rl
  tx = optax.adamw(1e-4)
  rows = []
  for t in lengths:
    rng = np.random.default_rng(0)
    valid = np.ones((1, t), bool)
    trainable = valid.copy()
    trainable[:, : t // 8] = False
    noise = rng.standard_normal((1, t)).astype(np.float32) * trainable
    runs = {}
    for attention in ATTENTIONS:
      cfg = _tiny_model(attention, chunk)
      model = transformer.Actor(cfg)
      tokens = jnp.asarray(rng.integers(1, cfg.vocab_size, (1, t)), jnp.int32)
      batch = steps.PPOBatch(
        tokens=tokens,
        valid=jnp.asarray(valid),
        trainable=jnp.asarray(trainable),
        old_logp=jnp.asarray(-(noise**2)),
        ref_logp=jnp.asarray(-(noise**2)),
        advantages=jnp.asarray(noise),
        returns=jnp.asarray(noise),
        old_values=jnp.zeros((1, t), jnp.float32),
      )
      params = model.init(
        jax.random.key(0),
        tokens[:, :8],
        transformer.positions_from_valid(batch.valid[:, :8]),
        batch.valid[:, :8],
      )["params"]
      state = state_lib.TrainState.create(sharding.unbox(params), tx)
      fn = jax.jit(_actor_step(model, tx, rl))
      compiled = fn.lower(state, batch, jax.random.key(0)).compile()
      runs[attention] = (compiled, state, batch)
    times = {a: [] for a in ATTENTIONS}
    for attention in ATTENTIONS:  # warm-up
      compiled, state, batch = runs[attention]
      jax.block_until_ready(compiled(state, batch, jax.random.key(0)))
    for _ in range(repeats):
      for attention in ATTENTIONS:
        compiled, state, batch = runs[attention]
        start = time.perf_counter()
        jax.block_until_ready(compiled(state, batch, jax.random.key(0)))
        times[attention].append(time.perf_counter() - start)
    for attention in ATTENTIONS:
      median = statistics.median(times[attention])
      rows.append(
        {
          "length": t,
          "attention": attention,
          "step_s": median,
          "tokens_per_s": t / median,
          "times_s": times[attention],
        }
      )
    ratio = rows[-1]["tokens_per_s"] / rows[-2]["tokens_per_s"]
    rows[-1]["chunked_over_plain"] = ratio
    print(
      f"{t:>6} plain {rows[-2]['tokens_per_s']:9.0f} tok/s, chunked"
      f" {rows[-1]['tokens_per_s']:9.0f} tok/s: chunked/plain {ratio:.2f}",
      flush=True,
    )
  return rows


def main(argv) -> None:
  """Runs the parts asked for, prints their tables, writes the JSON."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  try:
    lengths = [int(x) for x in FLAGS.lengths]
    speed_lengths = [int(x) for x in FLAGS.speed_lengths]
  except ValueError:
    sys.exit("--lengths, --speed_lengths: comma-separated integers.")
  remats, attentions = FLAGS.remats, FLAGS.attentions
  if FLAGS.quick:
    lengths, speed_lengths, remats = [256], [128], ["none", "full"]
  chunk = 64 if FLAGS.quick else FLAGS.chunk
  if min(lengths + speed_lengths) < 1 or chunk < 1 or FLAGS.repeats < 1:
    sys.exit("--lengths, --speed_lengths, --chunk, --repeats: must be >= 1.")
  for name, given, known in (
    ("passes", FLAGS.passes, PASSES),
    ("attentions", attentions, ALL_ATTENTIONS),
    ("remats", remats, REMATS),
  ):
    if not given or set(given) - set(known):
      sys.exit(f"--{name}={','.join(given)}: expected some of {known}.")
  out = {
    "date": datetime.date.today().isoformat(),
    "command": " ".join(
      ["python -m benchmarks.attention_bench", *sys.argv[1:]]
    ),
    "settings": {
      "lengths": lengths,
      "speed_lengths": speed_lengths,
      "chunk": chunk,
      "layers": FLAGS.layers,
      "quick": FLAGS.quick,
      "device": str(jax.devices()[0].device_kind),
      # What "fused" runs for the 0.5B shape's bfloat16 rows (None: chunked).
      "fused_kernel": attention_lib.fused_kernel(jnp.bfloat16),
    },
  }
  if FLAGS.part in ("all", "memory"):
    print("length attention         remat         pass GiB@layers   how")
    out["memory"] = memory_rows(
      lengths,
      attentions,
      remats,
      FLAGS.passes,
      FLAGS.layers,
      chunk,
      FLAGS.quick,
    )
    out["actor_and_critic"] = both_models(out["memory"])
    for r in out["actor_and_critic"]:
      print(
        f"{r['length']:>6} {r['attention']:>8} {r['remat']:>13}"
        f"  actor+critic {r['bytes'] / GIB:10.2f}",
        flush=True,
      )
  if FLAGS.part in ("all", "speed"):
    out["speed"] = speed_rows(speed_lengths, chunk, FLAGS.repeats)
  if FLAGS.out:
    with open(FLAGS.out, "w", encoding="utf-8") as f:
      json.dump(out, f, indent=1)
    print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
