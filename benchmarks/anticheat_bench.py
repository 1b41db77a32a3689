r"""Anti-cheat cost per trajectory against the sandbox's time per trajectory.

Run from the repository root (configs/ lives there; gVisor needs runsc):

  python -m benchmarks.anticheat_bench

  # Smoke check (fewer trajectories; writes JSON only when --out is given):
  python -m benchmarks.anticheat_bench --quick

The trajectories are `anticheat.corpus.hacks` samples (honest and hacked)
of synthetic tasks. For each trajectory, in one run:

  sandbox[gvisor]    wall time of its sandbox jobs (each `<run>` and the
                     `<submit>`) on a warm one-worker gVisor pool, one
                     client, submit to result;
  sandbox[process]   the same on the `process` backend;
  features           `features.extract` with the submission's result
                     (code AST, trajectory, runtime features);
  stages[b=1]        stage 1 + stage 2, jitted, one trajectory per call;
  stages[b=B]        the same on the whole batch, divided by B;
  anticheat[b=1]     features + stages[b=1]: the per-trajectory cost.

Means over the trajectories; "x sandbox" is a variant's mean divided by
the sandbox's mean per trajectory on that backend. Target: the anti-cheat
costs < 5% of the sandbox's time per trajectory: it judges every episode,
so it should add little to what running the episode's code already costs.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import platform
import time

from absl import app
from absl import flags
import jax
import numpy as np

from codeagent_rl.anticheat import config as config_lib
from codeagent_rl.anticheat import features
from codeagent_rl.anticheat import pipeline
from codeagent_rl.anticheat import stage1
from codeagent_rl.anticheat import stage2
from codeagent_rl.anticheat.corpus import hacks
from codeagent_rl.envs import code_env
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import judge
from configs import common


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_string(
    "out",
    "benchmarks/results/anticheat_bench.json",
    "Where to write the results (JSON); with --quick only if set explicitly.",
  )
  flags.DEFINE_bool("quick", False, "Fewer trajectories (smoke run).")
  flags.DEFINE_list(
    "backends", ["gvisor", "process"], "Sandbox backends to time."
  )


TARGET = 0.05
SANDBOX = sandbox_config.SandboxConfig(
  backend="gvisor", pool_size=1, timeout_s=4.0, test_timeout_s=1.0
)


def _trajectories(quick: bool) -> list[hacks.Sample]:
  per_family = 1
  families = ("affine", "caesar", "gcd", "running", "palindrome")
  tasks = hacks.synthetic_tasks(per_family, seed=7, families=families)
  samples = list(hacks.corpus(tasks))
  stride = 8 if quick else 2
  return samples[::stride]


def _jobs(sample: hacks.Sample) -> list:
  out = []
  for verb, code in sample.actions:
    if verb == "run":
      out.append(judge.tests_job(sample.task, sample.task.visible_tests, code))
    else:
      out.append(judge.solution_job(sample.task, code))
  return out


def _time_sandbox(pool, samples) -> tuple[list[float], list]:
  """Per trajectory: seconds of its jobs (serial), and the submit result."""
  seconds, results = [], []
  for s in samples:
    start = time.perf_counter()
    result = None
    for job in _jobs(s):
      result = pool.run(job)
    seconds.append(time.perf_counter() - start)
    results.append(result)
  return seconds, results


def _extract(s: hacks.Sample, result) -> np.ndarray:
  return features.extract(
    s.code,
    s.actions,
    None,
    entry_point=s.task.entry_point,
    visible_tests=s.task.visible_tests,
    result=result,
  )


def main(argv: list[str]) -> None:
  """Times the variants, prints the table, writes JSON."""
  del argv
  jax.config.update("jax_platforms", "cpu")
  cfg = config_lib.AntiCheatConfig.from_config(common.get_anticheat_config())
  params = pipeline.load_params(cfg.weights_path)
  samples = _trajectories(flags.FLAGS.quick)
  load_start = os.getloadavg()[0]

  sandbox_s, results = {}, None
  for backend in flags.FLAGS.backends:
    config = dataclasses.replace(SANDBOX, backend=backend)
    with harness.SandboxPool(config) as pool:
      _time_sandbox(pool, samples[:3])  # warm up
      sandbox_s[backend], results = _time_sandbox(pool, samples)

  def both(rewards, x, params):
    return stage2.stage2(stage1.stage1(rewards, x, params, cfg), cfg)

  stages = jax.jit(both)
  outcomes = [
    code_env.Outcome.from_grade(judge.grade_result(s.task, r))
    for s, r in zip(samples, results, strict=True)
  ]
  feature_s, single_s, vectors = [], [], []
  for s, r, o in zip(samples, results, outcomes, strict=True):
    start = time.perf_counter()
    vec = _extract(s, r)
    feature_s.append(time.perf_counter() - start)
    vectors.append(vec)
    rewards = pipeline.rewards_from_outcomes([o])
    jax.block_until_ready(stages(rewards, vec[None], params))  # compiled
    start = time.perf_counter()
    jax.block_until_ready(stages(rewards, vec[None], params))
    single_s.append(time.perf_counter() - start)
  batch = pipeline.rewards_from_outcomes(outcomes)
  x = np.stack(vectors)
  jax.block_until_ready(stages(batch, x, params))
  start = time.perf_counter()
  for _ in range(10):
    jax.block_until_ready(stages(batch, x, params))
  batch_s = (time.perf_counter() - start) / 10 / len(samples)

  rows = {f"sandbox[{b}]": float(np.mean(v)) for b, v in sandbox_s.items()}
  rows["features"] = float(np.mean(feature_s))
  rows["stages[b=1]"] = float(np.mean(single_s))
  rows[f"stages[b={len(samples)}]"] = batch_s
  rows["anticheat[b=1]"] = rows["features"] + rows["stages[b=1]"]
  print(f"{len(samples)} trajectories, load {load_start:.1f}")
  header = "variant".ljust(20) + "ms/traj".rjust(10)
  header += "".join(f"  x sandbox[{b}]".rjust(20) for b in sandbox_s)
  print(header)
  ratios = {}
  for name, value in rows.items():
    line = name.ljust(20) + f"{1e3 * value:10.3f}"
    for b in sandbox_s:
      ratio = value / rows[f"sandbox[{b}]"]
      ratios[(name, b)] = ratio
      line += f"{ratio:20.4f}"
    print(line)
  met = {b: ratios[("anticheat[b=1]", b)] < TARGET for b in sandbox_s}
  for b, ok in met.items():
    print(
      f"target: anticheat[b=1] < {TARGET:.0%} of sandbox[{b}]:"
      f" {'met' if ok else 'NOT met'} ({ratios[('anticheat[b=1]', b)]:.2%})"
    )
  out = flags.FLAGS.out
  if flags.FLAGS.quick and not flags.FLAGS["out"].present:
    return
  record = {
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "machine": {
      "platform": platform.platform(),
      "cpus": os.cpu_count(),
      "load_start": load_start,
      "load_end": os.getloadavg()[0],
    },
    "trajectories": len(samples),
    "ms_per_trajectory": {k: 1e3 * v for k, v in rows.items()},
    "ratio_to_sandbox": {
      b: {name: ratios[(name, b)] for name in rows} for b in sandbox_s
    },
    "target": {"anticheat_over_sandbox_below": TARGET, "met": met},
  }
  pathlib.Path(out).parent.mkdir(parents=True, exist_ok=True)
  with open(out, "w", encoding="utf-8") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
  print(f"wrote {out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
