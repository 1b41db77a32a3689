r"""Times one actor+critic train step and compares it with its FLOP count.

Run from the repository root (the configs/ package lives there):

  python -m benchmarks.train_step_bench

  # Smoke check (smallest model, 1 timed step; JSON only with --out):
  python -m benchmarks.train_step_bench --quick

One step is what a PPO learner does per minibatch, with stand-in losses:
forward, backward and an AdamW update (after global-norm clipping) of the
actor (next-token cross-entropy) and of the critic (MSE to returns), jitted
once with in/out shardings and donated states, on the default mesh of
configs/common.py (every local device on `data`). Models are configs/tiny.py's
with the sizes in MODELS; the batch is B x T random byte tokens, all valid.

FLOPs per step (stated so the numbers can be checked):

  tokens * sum over {actor, critic} of (6 * N_matmul + 12 * L * H * hd * T)

N_matmul counts the weights used in matrix products: per layer the q, k, v,
o projections and the three MLP matrices, plus the output projection (actor
d * V, critic d * 1); the embedding lookup is a gather and is not counted.
6 = 2 (multiply-add) x 3 (forward, input gradient, weight gradient), as in
Kaplan et al. (2020). 12 * L * H * hd * T is the attention-score and
weighted-value products over the full T x T matrix (PaLM, Chowdhery et al.
2022, appendix B); the causal mask is applied after computing all of it, so
the full count is the work done. Norms, softmax and the optimiser update are
not counted. Achieved FLOP/s = FLOPs per step / median step time.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import pathlib
import platform
import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from codeagent_rl.models import transformer
from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state
from configs import tiny

# name -> (tiny.py preset, fields changed); "small" is ~4.7M params a model.
MODELS = {
  "smoke": ("smoke", {}),
  "tiny": ("default", {}),
  "small": (
    "default",
    {
      "num_layers": 6,
      "embed_dim": 256,
      "num_heads": 8,
      "head_dim": 32,
      "mlp_dim": 768,
    },
  ),
}


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_integer(
    "repeats",
    3,
    "Timed steps per model; the median is reported.",
    lower_bound=1,
  )
  flags.DEFINE_integer("batch", 8, "Rows per step (B).", lower_bound=1)
  flags.DEFINE_integer("length", 128, "Tokens per row (T).", lower_bound=2)
  flags.DEFINE_bool(
    "quick", False, "Only the smoke model, 1 timed step (checks the script)."
  )
  flags.DEFINE_string(
    "out",
    "benchmarks/results/train_step_bench.json",
    "JSON file for the results. With --quick it is written only when this"
    " flag is given explicitly.",
  )
  flags.DEFINE_integer("seed", 0, "Seed of params and tokens.")


def model_config(name: str) -> transformer.TransformerConfig:
  preset, changes = MODELS[name]
  section = tiny.get_config(preset).model.to_dict()
  section.update(changes)
  return transformer.TransformerConfig.from_config(section)


def matmul_params(cfg: transformer.TransformerConfig, head_out: int) -> int:
  """Weights used in matrix products (see the module docstring)."""
  d, h, k, hd = cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  attn = 2 * d * h * hd + 2 * d * k * hd
  mlp = 3 * d * cfg.mlp_dim
  return cfg.num_layers * (attn + mlp) + d * head_out


def step_flops(cfg: transformer.TransformerConfig, b: int, t: int) -> float:
  """FLOPs of one actor+critic train step on a [b, t] batch."""
  attention = 12 * cfg.num_layers * cfg.num_heads * cfg.head_dim * t
  per_token = sum(
    6 * matmul_params(cfg, head_out) + attention
    for head_out in (cfg.vocab_size, 1)  # actor, critic
  )
  return float(b * t * per_token)


def train_step(actor_state, critic_state, batch, *, model_cfg, tx):
  """Actor next-token cross-entropy and critic MSE; one update of each."""
  actor_tx, critic_tx = tx
  tokens, valid = batch["tokens"], batch["valid"]
  positions = transformer.positions_from_valid(valid)

  def actor_loss(params):
    logits, _ = transformer.Actor(model_cfg).apply(
      {"params": params}, tokens, positions, valid
    )
    logp = jax.nn.log_softmax(logits[:, :-1])
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    return jnp.mean(nll)

  def critic_loss(params):
    values, _ = transformer.Critic(model_cfg).apply(
      {"params": params}, tokens, positions, valid
    )
    return jnp.mean(jnp.square(values - batch["returns"]))

  a_loss, a_grads = jax.value_and_grad(actor_loss)(actor_state.params)
  c_loss, c_grads = jax.value_and_grad(critic_loss)(critic_state.params)
  return (
    actor_state.apply_gradients(a_grads, actor_tx),
    critic_state.apply_gradients(c_grads, critic_tx),
    {"actor_loss": a_loss, "critic_loss": c_loss},
  )


def bench_model(name: str, repeats: int) -> dict:
  """Compiles and times the step for one model size."""
  cfg = model_config(name)
  root = tiny.get_config()
  mesh_cfg = mesh_lib.MeshConfig.from_config(root.mesh)
  optim_cfg = state.OptimConfig.from_config(root.optim)
  mesh = mesh_lib.make_mesh(mesh_cfg)
  rules = mesh_cfg.rules
  b, t = flags.FLAGS.batch, flags.FLAGS.length

  start = time.perf_counter()
  actor, critic = state.create_train_states(
    cfg, optim_cfg, mesh, rules, jax.random.key(flags.FLAGS.seed)
  )
  jax.block_until_ready((actor, critic))
  init_s = time.perf_counter() - start

  actor_sh, critic_sh = state.train_state_shardings(cfg, optim_cfg, mesh, rules)
  step = jax.jit(
    functools.partial(
      train_step, model_cfg=cfg, tx=state.make_optimizers(optim_cfg)
    ),
    in_shardings=(actor_sh, critic_sh, sharding.batch_sharding(mesh, rules)),
    out_shardings=(actor_sh, critic_sh, sharding.replicated(mesh)),
    donate_argnums=(0, 1),
  )
  rng = np.random.default_rng(flags.FLAGS.seed)
  batch = sharding.shard_batch(
    {
      "tokens": rng.integers(0, cfg.vocab_size, (b, t)).astype(np.int32),
      "valid": np.ones((b, t), bool),
      "returns": rng.uniform(0.0, 1.0, (b, t)).astype(np.float32),
    },
    mesh,
    rules,
  )

  start = time.perf_counter()
  compiled = step.lower(actor, critic, batch).compile()
  compile_s = time.perf_counter() - start

  actor, critic, metrics = compiled(actor, critic, batch)  # warm-up
  jax.block_until_ready(metrics)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    actor, critic, metrics = compiled(actor, critic, batch)
    jax.block_until_ready((actor, critic, metrics))
    times.append(time.perf_counter() - start)
  losses = {k: float(v) for k, v in jax.device_get(metrics).items()}
  if not all(np.isfinite(v) for v in losses.values()):
    raise RuntimeError(f"{name}: non-finite losses {losses}")

  median_s = statistics.median(times)
  flops = step_flops(cfg, b, t)
  n_params = sum(x.size for x in jax.tree.leaves(actor.params))
  n_critic = sum(x.size for x in jax.tree.leaves(critic.params))
  return {
    "model": name,
    "num_layers": cfg.num_layers,
    "embed_dim": cfg.embed_dim,
    "num_heads": cfg.num_heads,
    "num_kv_heads": cfg.num_kv_heads,
    "head_dim": cfg.head_dim,
    "mlp_dim": cfg.mlp_dim,
    "vocab_size": cfg.vocab_size,
    "actor_params": int(n_params),
    "critic_params": int(n_critic),
    "batch": b,
    "length": t,
    "init_s": init_s,
    "compile_s": compile_s,
    "step_times_s": times,
    "median_s": median_s,
    "tokens_per_s": b * t / median_s,
    "flops_per_step": flops,
    "achieved_flops_per_s": flops / median_s,
    "final_losses": losses,
  }


def machine_info() -> dict:
  device = jax.devices()[0]
  return {
    "jax_version": jax.__version__,
    "optax_version": optax.__version__,
    "numpy_version": np.__version__,
    "python_version": platform.python_version(),
    "backend": jax.default_backend(),
    "device_kind": device.device_kind,
    "device_count": jax.device_count(),
    "cpu_count": os.cpu_count(),
    "cpu_affinity": len(os.sched_getaffinity(0)),
    "load_average_1m": os.getloadavg()[0],
    "processor": platform.processor() or platform.machine(),
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
  }


def format_table(rows: list[dict]) -> str:
  header = (
    f"{'model':<6}  {'params/model':>12}  {'BxT':>7}  {'compile s':>9}"
    f"  {'step ms':>9}  {'tokens/s':>9}  {'GFLOP/step':>10}"
    f"  {'GFLOP/s':>8}"
  )
  lines = [header, "-" * len(header)]
  for r in rows:
    lines.append(
      f"{r['model']:<6}  {r['actor_params']:>12,}"
      f"  {r['batch']:>3}x{r['length']:<3}  {r['compile_s']:>9.1f}"
      f"  {1e3 * r['median_s']:>9.1f}  {r['tokens_per_s']:>9.0f}"
      f"  {r['flops_per_step'] / 1e9:>10.2f}"
      f"  {r['achieved_flops_per_s'] / 1e9:>8.2f}"
    )
  return "\n".join(lines)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  info = machine_info()
  repeats = 1 if flags.FLAGS.quick else flags.FLAGS.repeats
  names = ["smoke"] if flags.FLAGS.quick else list(MODELS)
  print(
    f"jax {info['jax_version']} on {info['backend']} ({info['device_kind']}"
    f" x{info['device_count']}), {info['cpu_count']} CPUs, load"
    f" {info['load_average_1m']:.1f}, repeats={repeats}"
  )
  rows = [bench_model(name, repeats) for name in names]
  print(format_table(rows))

  if flags.FLAGS.quick and not flags.FLAGS["out"].present:
    print("--quick: not writing JSON; pass --out to keep the results.")
    return
  out = pathlib.Path(flags.FLAGS.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  result = {
    "machine": info,
    "settings": {
      "quick": flags.FLAGS.quick,
      "repeats": repeats,
      "batch": flags.FLAGS.batch,
      "length": flags.FLAGS.length,
      "seed": flags.FLAGS.seed,
      "mesh": "configs/common.py defaults (all devices on data)",
    },
    "flops_formula": (
      "B*T * sum_{actor,critic} (6*N_matmul + 12*L*H*hd*T); N_matmul ="
      " L*(2*d*H*hd + 2*d*K*hd + 3*d*F) + d*head_out (actor V, critic 1)"
    ),
    "rows": rows,
  }
  out.write_text(json.dumps(result, indent=2) + "\n")
  print(f"Wrote {out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
