r"""Time breakdown of one PPO iteration, gVisor pool vs `process` backend.

    python -m benchmarks.e2e_bench --sft_workdir=/tmp/tiny \
      --iterations=3

Runs the tiny config's PPO (same config, seed and SFT checkpoint) once per
sandbox backend and reports the per-phase seconds of its iterations
(generation, sandbox wait, anti-cheat, log-probs/values, update, checkpoint)
from `metrics.jsonl`, side by side. The first iteration compiles every step
function, so the table shows the mean over the later ones (`--iterations`
>= 2); the first is reported separately. The held-out evaluation that ends
a run is excluded.

`--sft_workdir` reuses a finished run's SFT checkpoint (and its rendered
demonstrations); without it, each backend runs the preset's SFT first.
Writes benchmarks/results/e2e_bench.json.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import shutil
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

from codeagent_rl.sandbox import harness
from codeagent_rl.train import experiment
from codeagent_rl.train import metrics as metrics_lib
from codeagent_rl.train import run
from codeagent_rl.train import workdir as workdir_lib
from configs import tiny


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_string("preset", "", "configs/tiny.py preset.")
  flags.DEFINE_string(
    "sft_workdir", "", "A run whose SFT checkpoint to start from ('' trains)."
  )
  flags.DEFINE_integer(
    "iterations", 3, "PPO iterations per backend (the first compiles)."
  )
  flags.DEFINE_list(
    "backends", ["gvisor", "process"], "Sandbox backends to compare."
  )
  flags.DEFINE_integer(
    "eval_tasks", 8, "Held-out tasks of the final evaluation (not timed)."
  )
  flags.DEFINE_string(
    "out",
    str(pathlib.Path(__file__).parent / "results" / "e2e_bench.json"),
    "JSON output.",
  )
  harness.define_flags()


PHASES = (
  "generation",
  "sandbox_wait",
  "anticheat",
  "logprobs_values",
  "update",
  "checkpoint",
)
# Files of a finished run that let PPO start without redoing SFT.
_SFT_FILES = (workdir_lib.SFT_DIR, workdir_lib.SFT_DATA, workdir_lib.EVAL_SFT)


def _prepare(workdir: pathlib.Path) -> None:
  source = pathlib.Path(flags.FLAGS.sft_workdir)
  for name in _SFT_FILES:
    path = source / name
    if not path.exists():
      raise app.UsageError(f"--sft_workdir: {path} is missing.")
    if path.is_dir():
      shutil.copytree(path, workdir / name)
    else:
      shutil.copy2(path, workdir / name)


def _one_backend(backend: str, root: pathlib.Path) -> dict:
  workdir = root / backend
  workdir.mkdir()
  if flags.FLAGS.sft_workdir:
    _prepare(workdir)
  config = tiny.get_config(flags.FLAGS.preset or None)
  config.unlock()
  config.ppo.iterations = flags.FLAGS.iterations
  config.ppo.eval_every = 10**6  # only the final evaluation (excluded)
  config.data.num_eval_tasks = flags.FLAGS.eval_tasks
  config.lock()
  sandbox = harness.config_from_flags(backend=backend)
  start = time.perf_counter()
  run.train_and_evaluate(
    experiment.Experiment.from_config(config),
    workdir,
    sandbox,
    console=lambda _: None,
  )
  wall = time.perf_counter() - start
  records = metrics_lib.read_metrics(str(workdir))
  rows = {}
  for phase in PHASES:
    values = [r.get(f"time/{phase}_s", 0.0) for r in records]
    rows[phase] = {
      "first_s": values[0],
      "later_mean_s": float(np.mean(values[1:])) if len(values) > 1 else None,
    }
  later = records[1:] or records
  return {
    "backend": backend,
    "wall_s": wall,
    "phases": rows,
    "iteration_s": float(
      np.mean([sum(r.get(f"time/{p}_s", 0.0) for p in PHASES) for r in later])
    ),
    "sandbox_wait_share": float(
      np.mean([r.get("time/sandbox_wait_share", 0.0) for r in later])
    ),
    "tokens_per_s": float(np.mean([r["perf/tokens_per_s"] for r in later])),
    "reward_total_mean": float(
      np.mean([r["reward/total_mean"] for r in records])
    ),
  }


def main(argv: list[str]) -> None:
  """Runs every backend, prints the table, writes the JSON."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  load_start = os.getloadavg()
  with tempfile.TemporaryDirectory(prefix="e2e_bench_") as tmp:
    results = [_one_backend(b, pathlib.Path(tmp)) for b in flags.FLAGS.backends]
  header = f"{'phase (s/iteration)':<22}" + "".join(
    f"{r['backend']:>12}" for r in results
  )
  if len(results) == 2:
    header += f"{'ratio':>8}"
  print(header)
  for phase in (*PHASES, "total"):
    cells = []
    for r in results:
      cells.append(
        r["iteration_s"]
        if phase == "total"
        else r["phases"][phase]["later_mean_s"] or 0.0
      )
    line = f"{phase:<22}" + "".join(f"{c:>12.2f}" for c in cells)
    if len(cells) == 2 and cells[1] > 0:
      line += f"{cells[0] / cells[1]:>8.2f}"
    print(line)
  for r in results:
    print(
      f"{r['backend']}: sandbox wait share {r['sandbox_wait_share']:.1%},"
      f" {r['tokens_per_s']:.0f} generated tokens/s, first iteration"
      f" (compiles) {sum(p['first_s'] for p in r['phases'].values()):.1f} s"
    )
  out = {
    "machine": {
      "cpu_count": os.cpu_count(),
      "processor": platform.processor(),
      "load_average_start": load_start,
      "load_average_end": os.getloadavg(),
      "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    },
    "settings": {
      "preset": flags.FLAGS.preset or "default",
      "iterations": flags.FLAGS.iterations,
      "sft_workdir": flags.FLAGS.sft_workdir,
    },
    "results": results,
  }
  pathlib.Path(flags.FLAGS.out).parent.mkdir(parents=True, exist_ok=True)
  pathlib.Path(flags.FLAGS.out).write_text(json.dumps(out, indent=1))
  print(f"wrote {flags.FLAGS.out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
