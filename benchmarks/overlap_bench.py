r"""PPO iterations with rollouts synchronous vs overlapping the update.

Run from the repository root:

  python -m benchmarks.overlap_bench           # all 4 variants
  python -m benchmarks.overlap_bench --quick   # smoke run

Each variant is the main job (`run.train_and_evaluate`) on the same config
and the same SFT model (trained by the first variant, copied to the
others), for `--iterations` PPO iterations:

  sync      ppo.max_staleness=0: rollouts, then the update, in turn
  overlap   ppo.max_staleness=1: iteration k+1's rollouts (generation and
            sandbox) run in a thread while iteration k updates

each with the local sandbox pool (`--backend`, `--pool_size` workers) and
with the Ray fleet (a local Ray cluster, `--ray_actors` actors of
`--pool_size / --ray_actors` sandboxes each, same total). The config is
configs/tiny.py's default preset (its SFT cut to `--sft_steps`); what the
runs learn is not compared (the overlapped runs train on other rollouts),
only their time. Columns, means over the iterations after the first
(compilation) and before the last (the final evaluation):

  iter s      wall time of an iteration
  update s    the learner's device work: log-prob/value passes and epochs
  wait s      the learner waiting for rollouts (overlap: for the thread)
  idle        trainer idle share: 1 - update s / iter s, the share of an
              iteration in which the learner's devices had no update work
  speedup     sync iteration time of the same backend / this one

On this CPU machine generation and the update share the same two cores,
so overlap can only hide the sandbox and host work; on an accelerator the
update and the generation contend for the device instead.

Writes benchmarks/results/overlap_bench.json.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import shutil
import tempfile
import time

from absl import app
from absl import flags
import jax
import numpy as np

from codeagent_rl.train import experiment
from codeagent_rl.train import run
from codeagent_rl.train import workdir as workdir_lib
from configs import tiny
from tests.helpers import sandboxes

# What a variant copies from the first variant's workdir: its SFT.
_SHARED = (workdir_lib.SFT_DIR, workdir_lib.SFT_DATA, workdir_lib.EVAL_SFT)


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_bool("quick", False, "3 iterations, the local pool only.")
  flags.DEFINE_integer("iterations", 6, "PPO iterations per variant.")
  flags.DEFINE_integer("sft_steps", 100, "SFT steps (trained once).")
  flags.DEFINE_enum(
    "backend", "gvisor", ["gvisor", "process"], "Sandboxes of every variant."
  )
  flags.DEFINE_integer("pool_size", 2, "Sandboxes in all, per variant.")
  flags.DEFINE_integer("ray_actors", 2, "Ray sandbox actors (ray variants).")
  flags.DEFINE_string(
    "out",
    str(pathlib.Path(__file__).parent / "results" / "overlap_bench.json"),
    "Where the JSON goes ('' for nowhere).",
  )


def _config(iterations: int, sft_steps: int, staleness: int):
  config = tiny.get_config()
  config.sft.steps = sft_steps
  config.ppo.iterations = iterations
  config.ppo.eval_every = iterations  # one evaluation, at the end
  config.ppo.max_staleness = staleness
  # The timed iterations should all train the actor.
  config.ppo.critic_warmup_iterations = 0
  config.ppo.skip_actor_on_flat_rewards = False
  return config


def _share_sft(first: pathlib.Path, target: pathlib.Path) -> None:
  target.mkdir(parents=True, exist_ok=True)
  for name in _SHARED:
    src = first / name
    if src.is_dir():
      shutil.copytree(src, target / name)
    elif src.exists():
      shutil.copy2(src, target / name)


def _timed(records: list[dict]) -> dict[str, float]:
  """Means over the iterations after the first and before the last."""
  timed = records[1:-1] or records[-1:]

  def mean(key):
    return float(np.mean([r.get(key, 0.0) for r in timed]))

  iteration = mean("time/iteration_s")
  update = mean("time/logprobs_values_s") + mean("time/update_s")
  return {
    "iterations_timed": len(timed),
    "iteration_s": iteration,
    "update_s": update,
    "rollout_wait_s": mean("time/rollout_wait_s"),
    "generation_s": mean("time/generation_s"),
    "sandbox_wait_s": mean("time/sandbox_wait_s"),
    "trainer_idle_share": 1.0 - update / iteration if iteration else 0.0,
  }


def main(argv):
  del argv
  f = flags.FLAGS
  quick = f.quick
  iterations = 3 if quick else f.iterations
  sft_steps = 10 if quick else f.sft_steps
  local = sandboxes.short_config(f.backend, f.pool_size)
  fleets = [("local", local)]
  if not quick:
    import ray  # noqa: PLC0415 (the ray extra; the quick run does without)

    ray.init(**{**sandboxes.RAY_TEST_CLUSTER, "num_cpus": os.cpu_count()})
    per_actor = max(1, f.pool_size // f.ray_actors)
    fleets.append(
      (
        "ray",
        sandboxes.ray_config(
          dataclasses.replace(local, pool_size=per_actor),
          actors=f.ray_actors,
          in_flight=2 * per_actor,
        ),
      )
    )
  rows = []
  root = pathlib.Path(tempfile.mkdtemp(prefix="overlap_bench."))
  first = None
  try:
    for fleet, sandbox in fleets:
      for mode, staleness in (("sync", 0), ("overlap", 1)):
        name = f"{mode}_{fleet}"
        workdir = root / name
        if first is not None:
          _share_sft(first, workdir)
        exp = experiment.Experiment.from_config(
          _config(iterations, sft_steps, staleness)
        )
        start = time.perf_counter()
        run.train_and_evaluate(exp, workdir, sandbox, console=lambda _: None)
        wall = time.perf_counter() - start
        first = first or workdir
        records = [
          json.loads(line)
          for line in (workdir / workdir_lib.METRICS).read_text().splitlines()
        ]
        stale = [r["perf/staleness"] for r in records]
        rows.append(
          {
            "variant": name,
            "sandbox": fleet,
            "max_staleness": staleness,
            "staleness_per_iteration": stale,
            "run_wall_s": wall,
            **_timed(records),
          }
        )
  finally:
    shutil.rmtree(root, ignore_errors=True)
  for row in rows:
    base = next(
      r
      for r in rows
      if r["sandbox"] == row["sandbox"] and r["max_staleness"] == 0
    )
    row["speedup_vs_sync"] = base["iteration_s"] / row["iteration_s"]
  print(
    f"{'variant':>13} {'iter s':>7} {'update s':>8} {'wait s':>7}"
    f" {'idle':>6} {'speedup':>7}"
  )
  for r in rows:
    print(
      f"{r['variant']:>13} {r['iteration_s']:>7.2f} {r['update_s']:>8.2f}"
      f" {r['rollout_wait_s']:>7.2f} {r['trainer_idle_share']:>6.1%}"
      f" {r['speedup_vs_sync']:>7.2f}"
    )
  if f.out and (not quick or f.out != f["out"].default):
    out = pathlib.Path(f.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
      json.dumps(
        {
          "benchmark": "overlap_bench",
          "date": datetime.datetime.now(datetime.UTC).isoformat(),
          "jax": jax.__version__,
          "backend": jax.default_backend(),
          "cpu_count": os.cpu_count(),
          "load_avg_1m": os.getloadavg()[0],
          "settings": {
            "config": "configs/tiny.py (default preset)",
            "iterations": iterations,
            "sft_steps": sft_steps,
            "sandbox_backend": f.backend,
            "pool_size": f.pool_size,
            "ray_actors": f.ray_actors,
            "quick": quick,
          },
          "rows": rows,
        },
        indent=1,
      )
      + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
