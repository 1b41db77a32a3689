r"""One PPO iteration of a Qwen2.5-Coder-0.5B-shaped model, phase by phase.

Run from the repository root (the configs/ package lives there):

  # CPU: 2 layers, the full 151,936-token vocabulary, 4 x 512 (about five
  # minutes; PLATFORM_DEFAULTS says why 4 rows):
  python -m benchmarks.hf_ppo_bench

  # One setting (on a GPU: all 24 layers):
  python -m benchmarks.hf_ppo_bench --batch=64 --length=8192

  # Smoke check (1 layer, 4,096 ids, 2 x 64; JSON only with --out):
  python -m benchmarks.hf_ppo_bench --quick

The model is configs/qwen25_coder_0p5b.py's (real dimensions, remat and
dtypes) with random weights; nothing is downloaded. `--num_layers` and
`--vocab` shrink it. For each batch x length setting (`--batch` and
`--length` are zipped lists) it measures:

  generation  `Sampler.extend` over a prompt of length - decode_steps
              tokens, `--prefill_chunk` tokens a call, then `Sampler.decode`
              of `--decode_steps` tokens a row (temperature 1, no stop
              token): prefill and decode tokens/s apart. The sampler does
              not depend on the learner's variant: one row per setting,
              the JSON's "generation".
  learner     per variant (VARIANTS; the JSON's "rows"): the actor's
              log-prob pass and the critic's value pass
              (`steps.actor_log_probs`, `steps.critic_values`), then one
              train step, `steps.actor_step` then `steps.critic_step` (the
              real PPO losses), jitted with donated states and accumulated
              over micro-batches of at most `--micro_tokens` padded tokens;
              the passes take the same row groups, one call each.

The variants: `chunked` computes log-probs from hidden states
`--logits_chunk` positions at a time, `unchunked` all [rows, T, V] logits
at once; `packed` is `chunked` with each micro-batch's trajectories packed
first-fit decreasing into R shared rows of length T (`train/packing.py`;
segment ids keep attention inside a trajectory), R the most any
micro-batch needs, as `ppo.Learner` packs them; the passes' groups are
packed alike. A learner row records the rows a micro-batch has
("padded_rows"), the rows it runs packed ("packed_rows", null unless
packed) and "row_density", valid tokens over the slots the forwards run.

Each row has its own length, log-uniform between length / 16 and length
(seeded; row 0 at full length), right-padded, its first eighth prompt (not
trainable); every variant gets the same rows. tokens/s counts valid
(non-padding) tokens only. Times are medians of `--repeats` runs after an
untimed one: even compiled ahead of time, a first run on CPU took twice as
long (measured at 2 x 512; the fresh buffers' page faults).

FLOPs (stated so the numbers can be checked; valid tokens only):

  forward(n) = 2 * n * N_matmul + 4 * L * H * hd * n^2   per trajectory
  N_matmul = L * (2*d*H*hd + 2*d*K*hd + 3*d*F) + d * head_out

head_out is V for the actor (the tied embedding is its output projection)
and 1 for the critic. The n^2 term is the attention-score and
weighted-value products over the full n x n matrix (PaLM, Chowdhery et al.
2022, appendix B), not halved for the causal mask. A train step counts
3 * (forward_actor + forward_critic) a trajectory (forward, input and weight
gradients; remat's recomputation is not counted: model FLOPs, not hardware
FLOPs), the log-prob pass forward_actor, the value pass forward_critic,
and prefill forward_trunk(prompt) + 2 * d * V a row, forward_trunk being
forward with head_out = 0: `extend` asks for the logits of every position
but keeps only each row's last, and XLA moves that gather before the
output projection (seen in the optimised HLO on CPU). Norms, softmax,
losses and the optimiser are not counted.
n is a trajectory's valid tokens, so every variant counts the same FLOPs,
however its rows are laid out. The model computes more: attention over all
T x T positions of a padded row, and of a packed row too (segment ids mask
the pairs of different trajectories, they do not skip them), so a packed
row of several trajectories does more attention work than the sum of
their n^2 terms; like padding, that is not counted.
MFU = FLOPs / median time / peak: on a GPU the dense bfloat16 peak of its
device kind (GPU_PEAK_FLOPS; none for other kinds or dtypes), on a CPU the
FLOP/s of a square `jnp.dot` in the run's dtype measured in the same run.

Peak memory: each setting x part runs in a subprocess of its own, since a
device's peak cannot be reset. With `memory_stats()` (GPUs) a row reports
the process's `peak_bytes_in_use` ("device_peak"); without (CPUs), the
largest compiled executable's argument + output + temp - aliased bytes
("compiled_analysis"; it leaves out buffers that are not its arguments,
e.g. the optimiser states during the passes). A phase that by its
compiled analysis needs more, beyond its arguments, than the device (or
the host's MemAvailable) has free is not run and gets status "oom", as
does a run that fails RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
import dataclasses
import datetime
import functools
import json
import math
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.models import transformer
from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.rl import config as rl_config
from codeagent_rl.train import packing
from codeagent_rl.train import steps
from configs import qwen25_coder_0p5b

# Dense bfloat16 peak FLOP/s by device_kind substring, first match wins
# (vendor datasheets; SXM parts unless named).
GPU_PEAK_FLOPS = (
  ("H100 PCIe", 756e12),
  ("H200", 989e12),
  ("H100", 989e12),
  ("A100", 312e12),
)
# What a flag left unset means, by platform. The CPU run takes about five
# minutes on 2 cores: a 4 x 512 train step of the 2-layer model computes
# ~2.4 TFLOP over its padded positions, most in the 151,936-wide output
# projection. 4 rows, not 2: row 0 is full length, so 2 rows cannot pack
# into fewer; the seed's 4 (512, 67, 35, 33 tokens) pack into 2, which
# `packed` runs instead of 4 padded ones.
PLATFORM_DEFAULTS = {
  "cpu": {
    "num_layers": 2,
    "settings": ((4, 512),),
    "repeats": 1,
    # Rows of 512 tokens hold 511 targets, fewer than the config's chunk of
    # 512, and would be computed in one piece by `chunked` too.
    "logits_chunk": 128,
  },
  "gpu": {
    "num_layers": None,  # the config's 24
    "settings": ((8, 2048), (64, 8192)),
    "repeats": 3,
  },
}
# --quick: a smaller vocabulary, a smaller matmul for the peak and three
# parts at once, because compiling the train step alone takes ~15 s on 2
# cores and each part compiles its own; the timings then overlap and only
# show that the script runs.
QUICK = {
  "num_layers": 1,
  "vocab": 4096,
  "settings": ((2, 64),),
  "repeats": 1,
  "decode_steps": 8,
  "jobs": 3,
  "dot_size": 1024,
}
# Side of the square matmul that measures a peak: at 2048 bfloat16 on 2
# cores it ran at 57 GFLOP/s, at 4096 at 70 (~2 s a run), a truer ceiling.
DOT_SIZE = {"cpu": 4096, "gpu": 8192}
FLOPS_FORMULA = (
  "forward(n) = 2*n*N_matmul + 4*L*H*hd*n^2 per trajectory of n valid"
  " tokens (padded or packed);"
  " N_matmul = L*(2*d*H*hd + 2*d*K*hd + 3*d*F) + d*head_out (actor V,"
  " critic 1); train step = 3*(forward_actor + forward_critic); log-prob"
  " pass = forward_actor; value pass = forward_critic; prefill ="
  " forward(prompt) with head_out=0, + 2*d*V, per row"
)


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_list(
    "batch", None, "Rows of each setting, zipped with --length."
  )
  flags.DEFINE_list(
    "length", None, "Tokens per row of each setting (one value: all)."
  )
  flags.DEFINE_integer(
    "num_layers", None, "Decoder blocks; default by platform.", lower_bound=1
  )
  flags.DEFINE_integer("vocab", None, "Vocabulary; default: the config's.", 2)
  flags.DEFINE_enum(
    "dtype", None, list(transformer.DTYPES), "Activations; default: config's."
  )
  flags.DEFINE_integer(
    "logits_chunk",
    None,
    "Positions per log-prob chunk (`chunked`); default: the config's (CPU:"
    " PLATFORM_DEFAULTS).",
    lower_bound=1,
  )
  flags.DEFINE_list("variants", None, "Learner variants; default: VARIANTS.")
  flags.DEFINE_integer("repeats", None, "Timed runs; default by platform.", 1)
  flags.DEFINE_bool("warmup", True, "An untimed run before the timed ones.")
  flags.DEFINE_integer("decode_steps", 32, "Tokens decoded per row.", 1)
  flags.DEFINE_integer("prefill_chunk", 512, "Tokens per `extend` call.", 1)
  flags.DEFINE_integer(
    "micro_tokens",
    16384,
    "Padded tokens per train micro-batch and per pass call (>= one row).",
    lower_bound=1,
  )
  flags.DEFINE_integer("seed", 0, "Seed of weights, lengths and tokens.")
  flags.DEFINE_bool("quick", False, "QUICK settings: checks the script runs.")
  flags.DEFINE_integer(
    "jobs",
    None,
    "Parts run at once (>1 skews timings); default 1, --quick 3.",
    1,
  )
  flags.DEFINE_integer(
    "worker_timeout_s", 0, "Stop a part after this long (0: never).", 0
  )
  flags.DEFINE_integer(
    "budget_s",
    0,
    "Seconds for all parts: a part gets at most what is left, and parts"
    " after it are 'skipped' (0: no limit).",
    lower_bound=0,
  )
  flags.DEFINE_string(
    "out",
    "benchmarks/results/hf_ppo_bench.json",
    "JSON file; with --quick written only when given explicitly.",
  )
  # Internal: the parent runs each part as a subprocess of this script.
  flags.DEFINE_string("worker", None, "Internal: the part to run.")
  flags.DEFINE_string("worker_out", None, "Internal: its JSON file.")
  flags.DEFINE_float("worker_peak", None, "Internal: peak FLOP/s for MFU.")


@dataclasses.dataclass(frozen=True)
class Options:
  """One part's settings: the setting, then flags resolved by the parent."""

  batch: int
  length: int
  num_layers: int | None
  vocab: int | None
  dtype: str | None
  logits_chunk: int | None
  repeats: int
  warmup: bool
  seed: int
  decode_steps: int
  prefill_chunk: int
  micro_tokens: int


# Flags the parent resolves and hands each worker: Options but the setting.
WORKER_FLAGS = tuple(f.name for f in dataclasses.fields(Options))[2:]


# --- Model, rows and FLOPs ----------------------------------------------------


def experiment_config():
  return qwen25_coder_0p5b.get_config()


def model_config(opts: Options) -> transformer.TransformerConfig:
  """The 0.5B model with the depth, vocabulary, dtype and chunk of opts."""
  cfg = transformer.TransformerConfig.from_config(experiment_config().model)
  changes = {
    "num_layers": opts.num_layers,
    "vocab_size": opts.vocab,
    "dtype": opts.dtype,
    "logits_chunk": opts.logits_chunk,
  }
  return dataclasses.replace(
    cfg, **{k: v for k, v in changes.items() if v is not None}
  )


@dataclasses.dataclass(frozen=True)
class Rows:
  """The ragged trajectories every variant trains on (host arrays).

  Attributes:
    lengths: [B] valid tokens per row.
    tokens: [B, T] int32 ids, 0 after a row's length.
    valid: [B, T] bool.
    trainable: [B, T] bool, valid tokens after a row's first eighth.
    advantages: [B, T] float32, standard normal where trainable, else 0.
    returns: [B, T] float32, likewise.
  """

  lengths: np.ndarray
  tokens: np.ndarray
  valid: np.ndarray
  trainable: np.ndarray
  advantages: np.ndarray
  returns: np.ndarray


def make_rows(vocab: int, b: int, t: int, seed: int) -> Rows:
  """Heavy-tailed lengths: log-uniform in [t / 16, t], row 0 at t."""
  rng = np.random.default_rng(seed)
  low = max(2, t // 16)
  lengths = np.exp(rng.uniform(np.log(low), np.log(t), b)).astype(np.int64)
  lengths = np.clip(lengths, low, t)
  lengths[0] = t
  pos = np.arange(t)[None, :]
  valid = pos < lengths[:, None]
  trainable = valid & (pos >= np.maximum(1, lengths[:, None] // 8))
  noise = rng.standard_normal((2, b, t)).astype(np.float32) * trainable
  return Rows(
    lengths=lengths,
    tokens=np.where(valid, rng.integers(0, vocab, (b, t)), 0).astype(np.int32),
    valid=valid,
    trainable=trainable,
    advantages=noise[0],
    returns=noise[1],
  )


def matmul_params(cfg: transformer.TransformerConfig, head_out: int) -> int:
  """Weights used in matrix products (see the module docstring)."""
  d, h, k, hd = cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  attn = 2 * d * h * hd + 2 * d * k * hd
  return cfg.num_layers * (attn + 3 * d * cfg.mlp_dim) + d * head_out


def forward_flops(
  cfg: transformer.TransformerConfig, head_out: int, lengths: np.ndarray
) -> float:
  """Sum over rows of forward(n) (module docstring) for `lengths` n."""
  n = np.asarray(lengths, np.float64)
  attention = 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim
  return float(np.sum(2 * n * matmul_params(cfg, head_out) + attention * n**2))


# --- Variants -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Learner:
  """What a variant hands the timing code.

  Attributes:
    model_cfg: the model the train states are created for.
    log_probs: (actor params, group) -> log-probs; the caller jits it.
    values: (critic params, group) -> values; the caller jits it.
    groups: host dicts of arrays, one per call of the passes: a
      micro-batch's rows ("tokens", "valid", "length"), and when packed
      its plan's "src" [R, T] and "dst" [rows, T].
    train_step: (actor, critic, batch, rng) -> (actor, critic, metrics).
    batch: the train step's host batch (a pytree of arrays).
    micro_batches: micro-batches the train step accumulates over.
    padded_rows: rows of a micro-batch (and of a pass's group).
    packed_rows: rows a micro-batch is packed into (R, the same for all),
      or None when the rows run padded.
  """

  model_cfg: transformer.TransformerConfig
  log_probs: Callable[..., Any]
  values: Callable[..., Any]
  groups: list[dict[str, np.ndarray]]
  train_step: Callable[..., Any]
  batch: Any
  micro_batches: int
  padded_rows: int
  packed_rows: int | None


def _ppo_train_step(actor, critic, batch, rng, *, actor_step, critic_step):
  """The actor's PPO update, then the critic's, on one minibatch."""
  actor, actor_metrics = actor_step(actor, batch, rng)
  critic, critic_metrics = critic_step(critic, batch, rng)
  return actor, critic, {**actor_metrics, **critic_metrics}


def _group_pack(group):
  """The group's packing (src, dst), or None when its rows run padded."""
  return (group["src"], group["dst"]) if "src" in group else None


def _group_log_probs(params, group, *, model):
  return steps.actor_log_probs(
    params,
    group["tokens"],
    group["valid"],
    model=model,
    temperature=1.0,
    vocab_limit=0,
    pack=_group_pack(group),
  )


def _group_values(params, group, *, model):
  return steps.critic_values(
    params,
    group["tokens"],
    group["valid"],
    group["length"],
    model=model,
    pack=_group_pack(group),
  )


def padded_learner(
  cfg: transformer.TransformerConfig,
  rows: Rows,
  micro_tokens: int,
  pack: bool = False,
) -> Learner:
  """Rows right-padded to T, as `ppo.Learner` trains them.

  Args:
    cfg: the model.
    rows: the trajectories.
    micro_tokens: padded tokens per micro-batch (at least one row).
    pack: pack each micro-batch's rows into R shared rows of length T
      (`packing`), R the most any micro-batch needs, as
      `ppo.Learner._epoch_packs` does; the passes' groups are the
      micro-batches, packed alike.

  Returns:
    The `Learner`.
  """
  b, t = rows.tokens.shape
  exp = experiment_config()
  actor, critic = transformer.Actor(cfg), transformer.Critic(cfg)
  actor_tx, critic_tx = state_lib.make_optimizers(
    state_lib.OptimConfig.from_config(exp.optim)
  )
  rl = rl_config.RLConfig.from_config(exp.rl)
  # Rows per micro-batch: the largest divisor of b within micro_tokens.
  per_call = max(
    r for r in range(1, b + 1) if b % r == 0 and r * t <= max(micro_tokens, t)
  )
  num_micro = b // per_call
  # A random init predicts almost uniformly: -log V is what the rollout
  # and reference policies' log-probs would be.
  uniform = np.where(rows.trainable, -math.log(cfg.vocab_size), 0.0)
  batch = steps.PPOBatch(
    tokens=rows.tokens,
    valid=rows.valid,
    trainable=rows.trainable,
    old_logp=uniform.astype(np.float32),
    ref_logp=uniform.astype(np.float32),
    advantages=rows.advantages,
    returns=rows.returns,
    old_values=np.zeros((b, t), np.float32),
  )
  groups = [
    {
      "tokens": rows.tokens[i : i + per_call],
      "valid": rows.valid[i : i + per_call],
      "length": rows.lengths[i : i + per_call].astype(np.int32),
    }
    for i in range(0, b, per_call)
  ]
  pack_rows = None
  if pack:
    # One R for every micro-batch, so one compiled step serves them all;
    # the learner rounds it up to a multiple of the batch's device shards,
    # 1 here.
    pack_rows = max(packing.rows_needed(g["valid"]) for g in groups)
    plans = [packing.plan(g["valid"], pack_rows) for g in groups]
    for group, plan in zip(groups, plans, strict=True):
      group.update(src=plan.src, dst=plan.dst)
    # `steps` splits every leaf into micro-batches along its first axis:
    # src stacks each micro-batch's R rows, dst holds each row's slots in
    # its own micro-batch's packed rows.
    batch = batch.replace(
      pack_src=np.concatenate([p.src for p in plans]),
      pack_dst=np.concatenate([p.dst for p in plans]),
    )
  actor_step = functools.partial(
    steps.actor_step,
    model=actor,
    tx=actor_tx,
    rl=rl,
    temperature=1.0,
    vocab_limit=0,
    num_micro=num_micro,
  )
  critic_step = functools.partial(
    steps.critic_step, model=critic, tx=critic_tx, rl=rl, num_micro=num_micro
  )
  return Learner(
    model_cfg=cfg,
    log_probs=functools.partial(_group_log_probs, model=actor),
    values=functools.partial(_group_values, model=critic),
    groups=groups,
    train_step=functools.partial(
      _ppo_train_step, actor_step=actor_step, critic_step=critic_step
    ),
    batch=batch,
    micro_batches=num_micro,
    padded_rows=per_call,
    packed_rows=pack_rows,
  )


def chunked(cfg, rows: Rows, opts: Options) -> Learner:
  """Log-probs from hidden states, `logits_chunk` positions at a time."""
  return padded_learner(cfg, rows, opts.micro_tokens)


def unchunked(cfg, rows: Rows, opts: Options) -> Learner:
  """All [rows, T, V] logits of a micro-batch at once (`logits_chunk=0`)."""
  cfg = dataclasses.replace(cfg, logits_chunk=0)
  return padded_learner(cfg, rows, opts.micro_tokens)


def packed(cfg, rows: Rows, opts: Options) -> Learner:
  """`chunked`, each micro-batch's trajectories packed into shared rows."""
  return padded_learner(cfg, rows, opts.micro_tokens, pack=True)


# name -> (model with the flags applied, rows, options) -> Learner. A
# variant that lays the rows out otherwise carries its own groups, batch and
# steps in its Learner.
VARIANTS: dict[str, Callable[..., Learner]] = {
  "chunked": chunked,
  "unchunked": unchunked,
  "packed": packed,
}


# --- Timing and memory --------------------------------------------------------


def _free_bytes() -> tuple[int | None, str]:
  """Bytes a new executable may still take, and where the number is from."""
  stats = jax.devices()[0].memory_stats()
  if stats and "bytes_limit" in stats:
    return stats["bytes_limit"] - stats["bytes_in_use"], "the device"
  for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
    if line.startswith("MemAvailable:"):
      return int(line.split()[1]) * 1024, "the host (MemAvailable)"
  return None, "unknown"


def compile_checked(jitted, *args) -> tuple[Any, dict]:
  """Compiles ahead of time; says how long, how much memory, if it fits.

  Returns:
    (the executable, or None when it would not fit; a dict of compile_s,
    compiled_memory_bytes and status "ok" or "oom" with oom_reason).
  """
  start = time.perf_counter()
  compiled = jitted.lower(*args).compile()
  info = {"compile_s": time.perf_counter() - start, "status": "ok"}
  mem = compiled.memory_analysis()
  if mem is None:
    info["compiled_memory_bytes"] = None
    return compiled, info
  beyond_args = mem.output_size_in_bytes + mem.temp_size_in_bytes
  beyond_args -= mem.alias_size_in_bytes
  info["compiled_memory_bytes"] = int(mem.argument_size_in_bytes + beyond_args)
  free, source = _free_bytes()
  if free is not None and beyond_args > free:
    info["status"] = "oom"
    info["oom_reason"] = (
      f"compiled analysis: {beyond_args / 2**30:.1f} GiB beyond the"
      f" arguments; {source} has {free / 2**30:.1f} GiB free"
    )
    return None, info
  return compiled, info


def _timed(fn: Callable[[], Any], repeats: int, warmup: bool) -> list[float]:
  """Wall times of `repeats` calls of fn (which blocks), after a warm-up."""
  if warmup:
    fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return times


def _rates(times, tokens, flops, peak) -> dict:
  median = statistics.median(times)
  return {
    "times_s": times,
    "median_s": median,
    "tokens_per_s": tokens / median,
    "flops": flops,
    "achieved_flops_per_s": flops / median,
    "mfu": None if peak is None else flops / median / peak,
  }


def _run_phase(info: dict, run: Callable[[], dict]) -> None:
  """Updates info with run(), or sets status "oom" when memory ran out."""
  try:
    info.update(run())
  except jax.errors.JaxRuntimeError as err:
    text = str(err)
    if "RESOURCE_EXHAUSTED" not in text and "Out of memory" not in text:
      raise
    info.update(status="oom", oom_reason=text.splitlines()[0])


def _peak_memory(phases: dict) -> tuple[int | None, str]:
  stats = jax.devices()[0].memory_stats()
  if stats and "peak_bytes_in_use" in stats:
    return stats["peak_bytes_in_use"], "device_peak"
  sizes = [p.get("compiled_memory_bytes") for p in phases.values()]
  sizes = [s for s in sizes if s is not None]
  return (max(sizes) if sizes else None), "compiled_analysis"


def one_device_mesh():
  mesh_cfg = mesh_lib.MeshConfig.from_config(experiment_config().mesh)
  return mesh_lib.make_mesh(mesh_cfg, jax.devices()[:1]), mesh_cfg.rules


def bench_learner(variant: str, opts: Options, peak: float | None) -> dict:
  """Times one variant's two passes and its train step at one setting."""
  base = model_config(opts)
  rows = make_rows(base.vocab_size, opts.batch, opts.length, opts.seed)
  learner = VARIANTS[variant](base, rows, opts)
  cfg = learner.model_cfg
  mesh, rules = one_device_mesh()
  optim = state_lib.OptimConfig.from_config(experiment_config().optim)
  actor, critic = state_lib.create_train_states(
    cfg, optim, mesh, rules, jax.random.key(opts.seed)
  )
  tokens = int(rows.lengths.sum())
  rows_run = learner.packed_rows or learner.padded_rows
  flops = {
    "log_probs": forward_flops(cfg, cfg.vocab_size, rows.lengths),
    "values": forward_flops(cfg, 1, rows.lengths),
  }
  flops["train_step"] = 3 * (flops["log_probs"] + flops["values"])
  groups = [jax.device_put(g) for g in learner.groups]
  phases = {}
  for name, fn, params in (
    ("log_probs", learner.log_probs, actor.params),
    ("values", learner.values, critic.params),
  ):
    with sharding.axis_rules(mesh, rules):
      compiled, phases[name] = compile_checked(jax.jit(fn), params, groups[0])
    if compiled is not None:

      def run_pass(compiled=compiled, params=params):
        jax.block_until_ready([compiled(params, g) for g in groups])

      _run_phase(
        phases[name],
        lambda name=name, run_pass=run_pass: _rates(
          _timed(run_pass, opts.repeats, opts.warmup),
          tokens,
          flops[name],
          peak,
        ),
      )

  batch = jax.device_put(learner.batch)
  rng = jax.random.key(opts.seed + 1)
  step = jax.jit(learner.train_step, donate_argnums=(0, 1))
  with sharding.axis_rules(mesh, rules):
    compiled, train = compile_checked(step, actor, critic, batch, rng)
  phases["train_step"] = train
  holder = {"states": (actor, critic)}

  def run_step():
    a, c, metrics = compiled(*holder["states"], batch, rng)
    holder["states"] = (a, c)
    holder["metrics"] = jax.block_until_ready(metrics)

  def time_steps():
    times = _timed(run_step, opts.repeats, opts.warmup)
    out = _rates(times, tokens, flops["train_step"], peak)
    metrics = jax.device_get(holder["metrics"])
    out["losses"] = {k: float(v) for k, v in metrics.items() if "loss/" in k}
    if not all(math.isfinite(v) for v in out["losses"].values()):
      raise RuntimeError(f"{variant}: non-finite losses {out['losses']}")
    return out

  if compiled is not None:
    _run_phase(train, time_steps)
  peak_bytes, source = _peak_memory(phases)
  oom = [name for name, p in phases.items() if p["status"] == "oom"]
  return {
    "variant": variant,
    "batch": opts.batch,
    "length": opts.length,
    "status": "oom" if oom else "ok",
    "oom_phases": oom,
    "tokens_per_s": train.get("tokens_per_s"),
    "mfu": train.get("mfu"),
    "peak_memory_bytes": peak_bytes,
    "memory_source": source,
    "valid_tokens": tokens,
    "padded_tokens": opts.batch * opts.length,
    "row_lengths": rows.lengths.tolist(),
    "logits_chunk": cfg.logits_chunk,
    "micro_batches": learner.micro_batches,
    "padded_rows": learner.padded_rows,
    "packed_rows": learner.packed_rows,
    "row_density": tokens / (learner.micro_batches * rows_run * opts.length),
    "phases": phases,
  }


def bench_generation(opts: Options, peak: float | None) -> dict:
  """Times prefill (`extend` a chunk at a time) and `decode`, one setting."""
  cfg = model_config(opts)
  b, n = opts.batch, opts.decode_steps
  prompt_len = opts.length - n
  if prompt_len < 1:
    raise app.UsageError(f"--length={opts.length} leaves no prompt for {n}.")
  width = min(opts.prefill_chunk, prompt_len)
  calls = -(-prompt_len // width)
  # The last chunk is padded (valid False) so that every call has one
  # shape and compiles once.
  valid = np.arange(calls * width) < prompt_len
  valid = np.broadcast_to(valid, (b, calls * width))
  rng = np.random.default_rng(opts.seed)
  tokens = np.where(valid, rng.integers(0, cfg.vocab_size, valid.shape), 0)
  chunks = [
    (
      jnp.asarray(tokens[:, i : i + width], jnp.int32),
      jnp.asarray(valid[:, i : i + width]),
    )
    for i in range(0, calls * width, width)
  ]
  max_len = calls * width + n
  actor = transformer.Actor(cfg)

  def init(key):
    ids = jnp.zeros((1, 1), jnp.int32)
    return sharding.unbox(actor.init(key, ids, ids, jnp.ones((1, 1), bool)))

  params = jax.jit(init)(jax.random.key(opts.seed))
  sampler_cfg = sampler_lib.SamplerConfig(
    temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=n
  )
  sampler = sampler_lib.Sampler(actor, cfg, sampler_cfg, pad_id=0)
  budgets = jnp.full((b,), n, jnp.int32)
  stop = jnp.array([-1], jnp.int32)
  key = jax.random.key(opts.seed + 1)
  row = {
    "batch": b,
    "length": opts.length,
    "prompt_len": prompt_len,
    "decode_steps": n,
    "prefill_chunk": width,
    "status": "ok",
  }
  phases = {"prefill": {"status": "ok"}, "decode": {"status": "ok"}}
  if not jax.devices()[0].memory_stats():
    # No device peak to read: compile the two steps as `Sampler` binds
    # them (its jitted functions are private) for their memory analysis.
    empty = sampler.start(b, max_len)
    _, phases["prefill"] = compile_checked(
      jax.jit(functools.partial(sampler_lib.extend, model=actor)),
      *(params, empty, *chunks[0]),
    )
    decode_fn = functools.partial(
      sampler_lib.decode, model=actor, cfg=sampler_cfg, pad_id=0
    )
    _, phases["decode"] = compile_checked(
      jax.jit(decode_fn), params, empty, key, budgets, stop
    )
    del empty
  times = {"prefill": [], "decode": []}

  def one_turn(record: bool) -> None:
    start = time.perf_counter()
    state = sampler.start(b, max_len)
    for chunk_tokens, chunk_valid in chunks:
      state = sampler.extend(params, state, chunk_tokens, chunk_valid)
    jax.block_until_ready(state)
    middle = time.perf_counter()
    _, out = sampler.decode(params, state, key, budgets, stop)
    jax.block_until_ready(out.tokens)
    if record:
      times["prefill"].append(middle - start)
      times["decode"].append(time.perf_counter() - middle)
    if not np.all(np.asarray(out.lengths) == n):
      raise RuntimeError(f"decode made {out.lengths} tokens, not {n} a row")

  def run() -> dict:
    one_turn(record=False)  # `Sampler` compiles on its first call
    for _ in range(opts.repeats):
      one_turn(record=True)
    prefill_flops = b * (
      forward_flops(cfg, 0, [prompt_len]) + 2 * cfg.embed_dim * cfg.vocab_size
    )
    phases["prefill"].update(
      _rates(times["prefill"], b * prompt_len, prefill_flops, peak)
    )
    decode_s = statistics.median(times["decode"])
    phases["decode"].update(
      times_s=times["decode"], median_s=decode_s, tokens_per_s=b * n / decode_s
    )
    return {
      "prefill_tokens_per_s": phases["prefill"]["tokens_per_s"],
      "prefill_mfu": phases["prefill"]["mfu"],
      "decode_tokens_per_s": phases["decode"]["tokens_per_s"],
    }

  if all(p["status"] == "ok" for p in phases.values()):
    _run_phase(row, run)
  else:
    row["status"] = "oom"
  row["peak_memory_bytes"], row["memory_source"] = _peak_memory(phases)
  row["phases"] = phases
  return row


# --- Probe: the machine and the peak MFU is measured against ------------------


def gpu_peak(device_kind: str, dtype: str) -> float | None:
  if dtype != "bfloat16":
    return None
  return next((p for name, p in GPU_PEAK_FLOPS if name in device_kind), None)


def measure_dot(n: int, dtype: str, repeats: int = 5) -> float:
  """FLOP/s of an [n, n] x [n, n] `jnp.dot` in `dtype` (median run)."""
  dt = transformer.DTYPES[dtype]
  a, b = jax.random.normal(jax.random.key(0), (2, n, n), dt)
  dot = jax.jit(jnp.dot)
  times = _timed(lambda: dot(a, b).block_until_ready(), repeats, True)
  return 2 * n**3 / statistics.median(times)


def probe(dtype: str | None) -> dict:
  """The machine block, the run's dtype, and the peak for MFU."""
  device = jax.devices()[0]
  backend = jax.default_backend()
  dtype = dtype or experiment_config().model.dtype
  stats = device.memory_stats() or {}
  size = DOT_SIZE.get(backend, DOT_SIZE["gpu"])
  dot = measure_dot(QUICK["dot_size"] if flags.FLAGS.quick else size, dtype)
  if backend == "cpu":
    peak, source = dot, f"jnp.dot measured in this run ({dtype})"
  else:
    peak = gpu_peak(device.device_kind, dtype)
    source = f"GPU_PEAK_FLOPS, {device.device_kind} ({dtype} dense)"
    if peak is None:
      source = f"none: {device.device_kind} / {dtype} not in GPU_PEAK_FLOPS"
  now = datetime.datetime.now(datetime.UTC)
  machine = {
    "jax_version": jax.__version__,
    "optax_version": optax.__version__,
    "numpy_version": np.__version__,
    "python_version": platform.python_version(),
    "backend": backend,
    "device_kind": device.device_kind,
    "device_count": jax.device_count(),
    "device_memory_bytes": stats.get("bytes_limit"),
    "cpu_count": os.cpu_count(),
    "cpu_affinity": len(os.sched_getaffinity(0)),
    "load_average_1m": os.getloadavg()[0],
    "processor": platform.processor() or platform.machine(),
    "date": now.isoformat(timespec="seconds"),
  }
  return {
    "machine": machine,
    "dtype": dtype,
    "measured_dot_flops_per_s": dot,
    "peak_flops_per_s": peak,
    "peak_source": source,
  }


# --- Parent: settings, subprocesses, tables -----------------------------------


def worker_main() -> None:
  """Runs one part (probe, generation or a variant); writes its JSON."""
  f = flags.FLAGS
  if f.worker == "probe":
    result = probe(f.dtype)
  else:
    values = {name: f[name].value for name in WORKER_FLAGS}
    opts = Options(batch=int(f.batch[0]), length=int(f.length[0]), **values)
    if f.worker == "generation":
      result = bench_generation(opts, f.worker_peak)
    else:
      result = bench_learner(f.worker, opts, f.worker_peak)
  pathlib.Path(f.worker_out).write_text(json.dumps(result))


def run_worker(part: str, args: list[str], timeout: float | None) -> dict:
  """This script as a subprocess for `part`: its JSON, or a failure row."""
  with tempfile.TemporaryDirectory() as tmp:
    out = pathlib.Path(tmp) / "out.json"
    cmd = [sys.executable, os.path.abspath(__file__), f"--worker={part}"]
    start = time.perf_counter()
    try:
      proc = subprocess.run(
        [*cmd, f"--worker_out={out}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
      )
    except subprocess.TimeoutExpired:
      return {"status": "timeout", "error": f"stopped after {timeout:.0f} s"}
    if proc.returncode == 0 and out.exists():
      return json.loads(out.read_text()) | {
        "worker_wall_s": time.perf_counter() - start
      }
  tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
  print(f"--- {part} {args} failed (exit {proc.returncode}):\n{tail}")
  # A signal (the kernel's OOM killer sends SIGKILL) is not a Python error.
  status = "killed" if proc.returncode < 0 else "error"
  return {"status": status, "error": tail[-2000:], "exit": proc.returncode}


def resolve(backend: str) -> dict:
  """The flags, with PLATFORM_DEFAULTS (and QUICK) where they are unset."""
  f = flags.FLAGS
  defaults = dict(PLATFORM_DEFAULTS["cpu" if backend == "cpu" else "gpu"])
  if f.quick:
    defaults.update(QUICK)
  batches = [int(x) for x in f.batch or []]
  lengths = [int(x) for x in f.length or []]
  if not batches and not lengths:
    settings = list(defaults["settings"])
  else:
    batches = batches or [defaults["settings"][0][0]]
    lengths = lengths or [defaults["settings"][0][1]]
    count = max(len(batches), len(lengths))
    if {len(batches), len(lengths)} - {1, count}:
      raise app.UsageError("--batch and --length: equal lengths, or one.")
    batches *= count // len(batches)
    lengths *= count // len(lengths)
    settings = list(zip(batches, lengths, strict=True))
  variants = f.variants or list(VARIANTS)
  if set(variants) - set(VARIANTS):
    raise app.UsageError(f"--variants={variants}: have {list(VARIANTS)}.")
  resolved = {name: f[name].value for name in WORKER_FLAGS}
  for name in (
    "num_layers",
    "vocab",
    "logits_chunk",
    "repeats",
    "decode_steps",
  ):
    if not f[name].present and name in defaults:
      resolved[name] = defaults[name]
  jobs = f.jobs or defaults.get("jobs", 1)
  return {"settings": settings, "variants": variants, "jobs": jobs, **resolved}


def _cell(x, fmt: str) -> str:
  return "-" if x is None else format(x, fmt)


def _gib(x) -> float | None:
  return None if x is None else x / 2**30


def _phase_rate(phase: str) -> Callable[[dict], Any]:
  return lambda r: r.get("phases", {}).get(phase, {}).get("tokens_per_s")


def _rows_run(r: dict) -> str | None:
  """Rows a micro-batch runs: "R of padded" when packed."""
  padded, packed_rows = r.get("padded_rows"), r.get("packed_rows")
  if padded is None:
    return None
  return f"{packed_rows} of {padded}" if packed_rows else str(padded)


# (header, format, value of a row) of each table's columns.
GENERATION_COLUMNS = (
  ("prompt", "d", lambda r: r.get("prompt_len")),
  ("prefill tok/s", ".0f", lambda r: r.get("prefill_tokens_per_s")),
  ("prefill MFU", ".1%", lambda r: r.get("prefill_mfu")),
  ("decode tok/s", ".1f", lambda r: r.get("decode_tokens_per_s")),
)
LEARNER_COLUMNS = (
  ("variant", "", lambda r: r["variant"]),
  ("valid tok", "d", lambda r: r.get("valid_tokens")),
  ("rows/micro", "", _rows_run),
  ("density", ".0%", lambda r: r.get("row_density")),
  ("logp tok/s", ".0f", _phase_rate("log_probs")),
  ("value tok/s", ".0f", _phase_rate("values")),
  ("train tok/s", ".0f", _phase_rate("train_step")),
  ("train MFU", ".1%", lambda r: r.get("mfu")),
  (
    "compile s",
    ".1f",
    lambda r: sum(p.get("compile_s", 0) for p in r.get("phases", {}).values()),
  ),
)
SHARED_COLUMNS = (
  ("peak GiB", ".2f", lambda r: _gib(r.get("peak_memory_bytes"))),
  ("memory", "", lambda r: r.get("memory_source")),
  ("status", "", lambda r: r["status"]),
)


def format_table(title: str, columns, rows: list[dict]) -> str:
  """`title`, then a line per row: its BxT and the columns' values."""
  columns = (("BxT", "", lambda r: f"{r['batch']}x{r['length']}"), *columns)
  cells = [[_cell(get(r), fmt) for _, fmt, get in columns] for r in rows]
  widths = [
    max(len(head), *(len(row[i]) for row in cells))
    for i, (head, *_) in enumerate(columns)
  ]

  def line(values):
    return "  ".join(v.rjust(w) for v, w in zip(values, widths, strict=True))

  head = line([h for h, *_ in columns])
  return "\n".join([title, head, "-" * len(head), *map(line, cells)])


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  f = flags.FLAGS
  if f.worker:
    worker_main()
    return
  # The parent never starts a backend: on a GPU, JAX would take most of
  # the device's memory for itself, away from the workers.
  probe_args = [f"--dtype={f.dtype}"] if f.dtype else []
  info = run_worker("probe", probe_args + ["--quick"] * f.quick, None)
  if "machine" not in info:
    raise SystemExit("The probe subprocess failed; see above.")
  machine = info["machine"]
  run = resolve(machine["backend"])
  run["dtype"] = info["dtype"]
  forwarded = [
    f"--{name}={run[name]}" for name in WORKER_FLAGS if run[name] is not None
  ]
  if info["peak_flops_per_s"] is not None:
    forwarded.append(f"--worker_peak={info['peak_flops_per_s']}")
  print(
    f"jax {machine['jax_version']} on {machine['backend']}"
    f" ({machine['device_kind']}), {machine['cpu_count']} CPUs, load"
    f" {machine['load_average_1m']:.1f}; {run['dtype']}, layers"
    f" {run['num_layers'] or 'config'}, vocab {run['vocab'] or 'config'},"
    f" repeats {run['repeats']}, warm-up {run['warmup']}, jobs {run['jobs']};"
    f" MFU peak {_cell(info['peak_flops_per_s'], '.3g')} FLOP/s"
    f" ({info['peak_source']})",
    flush=True,
  )
  parts = [
    (part, b, t)
    for b, t in run["settings"]
    for part in ("generation", *run["variants"])
  ]

  deadline = time.monotonic() + f.budget_s if f.budget_s else math.inf

  def one(part, b, t):
    args = [f"--batch={b}", f"--length={t}", *forwarded]
    left = deadline - time.monotonic()
    timeout = min(f.worker_timeout_s or math.inf, left)
    if timeout < 1:
      row = {"status": "skipped", "error": f"--budget_s={f.budget_s} spent"}
    else:
      row = run_worker(part, args, None if timeout == math.inf else timeout)
    print(f"{b}x{t} {part}: {row['status']}", flush=True)
    head = {"batch": b, "length": t}
    return (
      head | row if part == "generation" else {"variant": part} | head | row
    )

  with futures.ThreadPoolExecutor(run["jobs"]) as pool:
    done = list(pool.map(lambda p: one(*p), parts))
  rows = [r for r in done if "variant" in r]
  generation = [r for r in done if "variant" not in r]
  print(
    format_table(
      "generation (Sampler; the same for every variant)",
      GENERATION_COLUMNS + SHARED_COLUMNS,
      generation,
    )
  )
  print(
    format_table(
      "\nlearner (valid tokens/s; MFU of valid-token FLOPs)",
      LEARNER_COLUMNS + SHARED_COLUMNS,
      rows,
    )
  )
  print(f"FLOPs: {FLOPS_FORMULA}")
  print(f"MFU peak: {info['peak_source']}")
  if f.quick and not f["out"].present:
    print("--quick: not writing JSON; pass --out to keep the results.")
  else:
    out = pathlib.Path(f.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
      "machine": machine,
      "settings": {
        "quick": f.quick,
        "model": "configs/qwen25_coder_0p5b.py, random weights",
        "worker_timeout_s": f.worker_timeout_s,
        "budget_s": f.budget_s,
        **run,
      },
      "flops_formula": FLOPS_FORMULA,
      "measured_dot_flops_per_s": info["measured_dot_flops_per_s"],
      "peak_flops_per_s": info["peak_flops_per_s"],
      "peak_source": info["peak_source"],
      "tokens_per_s_counts": "valid (non-padding) tokens",
      "generation": generation,
      "rows": rows,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"Wrote {out}")
  # "oom", "timeout" and "skipped" are results (of the settings, of
  # --worker_timeout_s and --budget_s); a crash is not.
  failed = [r for r in done if r["status"] in ("error", "killed")]
  if failed:
    raise SystemExit(f"{len(failed)} part(s) crashed; see above.")


if __name__ == "__main__":
  define_flags()
  app.run(main)
