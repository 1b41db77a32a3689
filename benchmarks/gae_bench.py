r"""Times GAE: a NumPy loop against `compute_gae` with both JAX methods.

Run from the repository root:

  python -m benchmarks.gae_bench

  # Smoke check on small shapes (writes JSON only when --out is given):
  python -m benchmarks.gae_bench --quick

For each shape B x T it times three variants on the same random ragged
multi-turn batch (prompt, alternating action/observation runs, padding;
float32 rewards and values; half the rows truncated with a bootstrap value):

  numpy        reverse loop over T, vectorised over B, in float32;
  scan         jax.jit(compute_gae, method="scan");
  associative  jax.jit(compute_gae, method="associative").

The NumPy loop is also the reference: both JAX variants must match its
advantages and returns to rtol = atol = 1e-3, else the script exits non-zero
after printing the table and writing the JSON. JAX compile time (lower +
compile) is measured apart from run time; run time is the median of
--repeats calls after one warm-up, each ended by `block_until_ready`, with
inputs already on the device. "x numpy" and "x scan" are speedups: the other
variant's median time divided by this one's, so > 1 means faster.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import pathlib
import platform
import statistics
import sys
import time

from absl import app
from absl import flags
import jax
import numpy as np

from codeagent_rl.rl import gae

# (B, T) shapes; "full" is the benchmark, "quick" a smoke check of the script.
SHAPES = {
  "full": ((64, 1024), (64, 8192), (16, 32768)),
  "quick": ((8, 256), (4, 1024)),
}
JAX_METHODS = ("scan", "associative")
# Agreement of each JAX variant with the NumPy reference.
RTOL = 1e-3
ATOL = 1e-3


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_integer(
    "repeats",
    5,
    "Timed calls per variant and shape; the median is reported.",
    lower_bound=1,
  )
  flags.DEFINE_bool(
    "quick", False, f"Use the small shapes {SHAPES['quick']} (smoke check)."
  )
  flags.DEFINE_string(
    "out",
    "benchmarks/results/gae_bench.json",
    "JSON file for the results. With --quick it is written only when this"
    " flag is given explicitly, so a smoke check keeps the full results.",
  )
  flags.DEFINE_integer("seed", 0, "Seed of the random inputs.")
  flags.DEFINE_float("gamma", 0.99, "Discount per MDP step.")
  flags.DEFINE_float("lam", 0.95, "GAE lambda.")


def random_batch(rng: np.random.Generator, b: int, t: int) -> dict:
  """Random ragged multi-turn batch, as NumPy arrays.

  Each row is a prompt, then alternating action (trainable) and observation
  runs, then padding; row 0 has no trainable token at all. Run lengths scale
  with T so that a row holds a few dozen turns at every size.

  Args:
    rng: NumPy generator.
    b: batch size.
    t: tokens per row.

  Returns:
    Dict with rewards, values [B, T] float32; trainable [B, T] bool;
    truncated [B] bool; bootstrap_value [B] float32.
  """
  max_run = max(4, t // 64)
  trainable = np.zeros((b, t), bool)
  for i in range(1, b):
    pos = int(rng.integers(0, t // 8 + 1))  # prompt
    end = int(rng.integers(pos, t + 1))  # padding after `end`
    while pos < end:
      run = int(rng.integers(1, max_run + 1))
      trainable[i, pos : min(pos + run, end)] = True
      pos += run + int(rng.integers(1, max_run + 1))  # observation
  return {
    "rewards": rng.normal(size=(b, t)).astype(np.float32),
    "values": rng.normal(size=(b, t)).astype(np.float32),
    "trainable": trainable,
    "truncated": rng.random(b) < 0.5,
    "bootstrap_value": rng.normal(size=b).astype(np.float32),
  }


def numpy_gae(
  rewards: np.ndarray,
  values: np.ndarray,
  trainable: np.ndarray,
  *,
  gamma: float,
  lam: float,
  truncated: np.ndarray,
  bootstrap_value: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
  """Reference GAE: reverse loop over T, vectorised over B, in float32.

  Non-trainable positions pass the next value and the running advantage
  through unchanged and get advantage 0; the value after a row's last
  trainable token is `bootstrap_value` where truncated, else 0.

  Args:
    rewards: [B, T] float32.
    values: [B, T] float32.
    trainable: [B, T] bool mask of MDP steps.
    gamma: discount per MDP step.
    lam: GAE lambda.
    truncated: [B] bool.
    bootstrap_value: [B] float32.

  Returns:
    (advantages, returns), [B, T] float32, zero at non-trainable positions.
  """
  # Time-major copies so that each step reads contiguous memory.
  rewards_tb = np.ascontiguousarray(rewards.T)
  values_tb = np.ascontiguousarray(values.T)
  mask_tb = np.ascontiguousarray(trainable.T)
  gamma = np.float32(gamma)
  decay = np.float32(gamma * lam)
  next_value = np.where(truncated, bootstrap_value, 0.0).astype(np.float32)
  next_adv = np.zeros_like(next_value)
  adv_tb = np.zeros_like(rewards_tb)
  for t in range(rewards_tb.shape[0] - 1, -1, -1):
    mask = mask_tb[t]
    adv = rewards_tb[t] + gamma * next_value - values_tb[t] + decay * next_adv
    next_value = np.where(mask, values_tb[t], next_value)
    next_adv = np.where(mask, adv, next_adv)
    adv_tb[t] = np.where(mask, adv, 0.0)
  advantages = adv_tb.T
  returns = np.where(trainable, advantages + values, 0.0).astype(np.float32)
  return advantages, returns


def _median_seconds(fn, repeats: int) -> float:
  """Median wall time of `fn()` over `repeats` calls after one warm-up."""
  jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _max_abs_diff(got, want) -> float:
  return float(
    max(
      np.max(np.abs(np.asarray(g) - w)) for g, w in zip(got, want, strict=True)
    )
  )


def bench_shape(b: int, t: int, rng: np.random.Generator) -> list[dict]:
  """Times all variants at one shape; returns one row per variant."""
  batch = random_batch(rng, b, t)
  hyper = {"gamma": flags.FLAGS.gamma, "lam": flags.FLAGS.lam}
  rows = []

  reference = numpy_gae(**batch, **hyper)
  seconds = _median_seconds(
    functools.partial(numpy_gae, **batch, **hyper), flags.FLAGS.repeats
  )
  rows.append({"variant": "numpy", "compile_s": None, "median_s": seconds})

  device_batch = jax.device_put(batch)
  for method in JAX_METHODS:
    fn = jax.jit(functools.partial(gae.compute_gae, **hyper, method=method))
    start = time.perf_counter()
    compiled = fn.lower(**device_batch).compile()
    compile_s = time.perf_counter() - start
    out = jax.block_until_ready(compiled(**device_batch))
    diff = _max_abs_diff(out, reference)
    agrees = all(
      np.allclose(np.asarray(g), w, rtol=RTOL, atol=ATOL)
      for g, w in zip(out, reference, strict=True)
    )
    seconds = _median_seconds(
      functools.partial(compiled, **device_batch), flags.FLAGS.repeats
    )
    rows.append(
      {
        "variant": method,
        "compile_s": compile_s,
        "median_s": seconds,
        "max_abs_diff": diff,
        "agrees": agrees,
      }
    )

  by_variant = {row["variant"]: row["median_s"] for row in rows}
  for row in rows:
    row.update(
      batch=b,
      tokens=t,
      trainable_fraction=float(batch["trainable"].mean()),
      median_ms=1e3 * row["median_s"],
      tokens_per_s=b * t / row["median_s"],
      speedup_vs_numpy=by_variant["numpy"] / row["median_s"],
      speedup_vs_scan=by_variant["scan"] / row["median_s"],
    )
  return rows


def machine_info() -> dict:
  device = jax.devices()[0]
  return {
    "jax_version": jax.__version__,
    "jaxlib_version": jax.lib.__version__,
    "numpy_version": np.__version__,
    "python_version": platform.python_version(),
    "backend": jax.default_backend(),
    "device_kind": device.device_kind,
    "device_count": jax.device_count(),
    "cpu_count": os.cpu_count(),
    "cpu_affinity": len(os.sched_getaffinity(0)),
    "processor": platform.processor() or platform.machine(),
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
  }


def format_table(rows: list[dict]) -> str:
  header = (
    f"{'shape':>10}  {'variant':<11}  {'compile s':>9}  {'median ms':>10}"
    f"  {'tokens/s':>10}  {'x numpy':>8}  {'x scan':>7}  {'max|diff|':>9}"
  )
  lines = [header, "-" * len(header)]
  for row in rows:
    compile_s = "-" if row["compile_s"] is None else f"{row['compile_s']:.2f}"
    diff = "-" if "max_abs_diff" not in row else f"{row['max_abs_diff']:.1e}"
    lines.append(
      f"{row['batch']:>4}x{row['tokens']:<5}  {row['variant']:<11}"
      f"  {compile_s:>9}  {row['median_ms']:>10.3f}"
      f"  {row['tokens_per_s']:>10.3g}  {row['speedup_vs_numpy']:>8.2f}"
      f"  {row['speedup_vs_scan']:>7.2f}  {diff:>9}"
    )
  return "\n".join(lines)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  info = machine_info()
  print(
    f"jax {info['jax_version']} on {info['backend']}"
    f" ({info['device_kind']}), {info['cpu_count']} CPUs,"
    f" repeats={flags.FLAGS.repeats}"
  )
  shapes = SHAPES["quick" if flags.FLAGS.quick else "full"]
  rng = np.random.default_rng(flags.FLAGS.seed)
  rows = []
  for b, t in shapes:
    rows.extend(bench_shape(b, t, rng))
  print(format_table(rows))

  if flags.FLAGS.quick and not flags.FLAGS["out"].present:
    print("--quick: not writing JSON; pass --out to keep the results.")
  else:
    out = pathlib.Path(flags.FLAGS.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
      "machine": info,
      "settings": {
        "quick": flags.FLAGS.quick,
        "repeats": flags.FLAGS.repeats,
        "seed": flags.FLAGS.seed,
        "gamma": flags.FLAGS.gamma,
        "lam": flags.FLAGS.lam,
        "rtol": RTOL,
        "atol": ATOL,
      },
      "rows": rows,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"Wrote {out}")

  failed = [r for r in rows if r.get("agrees") is False]
  if failed:
    sys.exit(
      "JAX GAE disagrees with the NumPy reference beyond"
      f" rtol=atol={RTOL}: "
      + ", ".join(
        f"{r['variant']} at {r['batch']}x{r['tokens']}" for r in failed
      )
    )


if __name__ == "__main__":
  define_flags()
  app.run(main)
