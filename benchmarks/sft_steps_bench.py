r"""The SFT model's held-out pass@1 as SFT goes on, over seeds.

  python -m benchmarks.sft_steps_bench --config=configs/tiny.py \
    --seeds=0,1,2,3,4 --steps=600,800,1000,1300 --workdir=DIR

For each seed (the config's `seed`, which also draws its tasks when
`data.seed` is unset) SFT runs in stages up to each of `--steps`, in
`DIR/seed<N>/`: a stage resumes from the previous stage's checkpoint, and
with a constant rate after warmup (`sft.final_lr_fraction` 1.0, the tiny
preset's) a resumed SFT equals one run straight through, so the model at
900 steps is the one `--config.sft.steps=900` trains. After each stage
the SFT model is evaluated exactly as the main job evaluates it (the
held-out tasks, greedy and `eval.samples_per_task` sampled episodes, the
same sampling key). Columns per (seed, steps):

  loss / acc        the SFT loss and token accuracy over the last
                    `sft.log_every` steps
  greedy / sampled  held-out pass@1 on suites A and B
  sft_s / eval_s    wall time of the stage's SFT steps and its evaluation

What it answers: how many SFT steps put the SFT model inside a band of
pass@1 on every seed (the tiny preset's 0.2-0.7), and where a seed's loss
drop (the model starting to copy the prompt's constants) falls. A second
call with more `--steps` on the same `--workdir` continues from the last
stage (stages already evaluated are evaluated again: cheap next to SFT).

Writes benchmarks/results/sft_steps_bench.json (or --out).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import datetime
import json
import pathlib
import sys
import time
from typing import Any

from absl import app
from absl import flags
from ml_collections import config_flags

from codeagent_rl import provenance
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import pools
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import fingerprint as fingerprint_lib
from codeagent_rl.train import keys
from codeagent_rl.train import run as run_lib
from codeagent_rl.train import sft as sft_lib

DEFAULT_OUT = "benchmarks/results/sft_steps_bench.json"


def define_flags():
  """Registers the benchmark's flags."""
  config_flags.DEFINE_config_file("config", None, "The run's config.")
  flags.DEFINE_list("seeds", ["0"], "Seeds (the config's `seed`).")
  flags.DEFINE_list(
    "steps", ["600", "800", "1000", "1300"], "SFT steps to evaluate at."
  )
  flags.DEFINE_string(
    "workdir", None, "Where each seed's SFT checkpoint goes (seed<N>/)."
  )
  flags.DEFINE_string("out", DEFAULT_OUT, "JSON file to write.")
  harness.define_flags()
  flags.mark_flags_as_required(["config", "workdir"])


def _parse_ints(values: list[str], name: str) -> list[int]:
  try:
    out = [int(v) for v in values]
  except ValueError:
    sys.exit(f"error: --{name}={','.join(values)}: expected integers.")
  if not out or any(v < 0 for v in out) or out != sorted(set(out)):
    sys.exit(
      f"error: --{name}={','.join(values)}: expected distinct non-negative"
      " integers in ascending order."
    )
  return out


def _constant_rate(exp) -> bool:
  return exp.sft.final_lr_fraction == 1.0


def seed_rows(
  config,
  seed: int,
  steps: list[int],
  workdir: pathlib.Path,
  machine: Callable[[Any], sandbox_config.SandboxConfig],
  console: Callable[[str], None] = print,
) -> list[dict]:
  """The rows of one seed: SFT to each of `steps`, then its evaluation.

  Args:
    config: the run's config (its `seed` replaced by `seed`).
    seed: the seed.
    steps: ascending SFT step counts.
    workdir: this seed's directory (its SFT checkpoint and demonstrations).
    machine: `fn(exp.sandbox)` -> the sandbox to run in (the flags' here).
    console: gets one line per row.
  """
  config = config.copy_and_resolve_references()
  config.seed = seed
  exp = run_lib.job_from_config(config).exp
  sandbox = exp.sandbox.apply(machine(exp.sandbox))
  mesh, rules = exp.make_mesh()
  task_sets = data_lib.make_task_sets(exp.data, exp.data_seed)
  workdir.mkdir(parents=True, exist_ok=True)
  rows = []
  with pools.open_pool(sandbox) as pool:
    env = data_lib.make_env(pool, exp.conversation, exp.env, exp.data.generator)
    arrays = data_lib.sft_arrays(
      env,
      task_sets,
      workdir,
      format_key=fingerprint_lib.tokenizer_digest(exp),
    )
    evaluator = eval_lib.Evaluator.of_run(exp, env, task_sets.eval)
    for n in steps:
      stage = dataclasses.replace(
        exp, sft=dataclasses.replace(exp.sft, steps=n)
      )
      t0 = time.perf_counter()
      params, metrics = sft_lib.run_sft(
        stage, arrays, workdir, mesh, rules, console=lambda line: None
      )
      sft_s = time.perf_counter() - t0
      t0 = time.perf_counter()
      scalars = evaluator(params, keys.sft_eval(exp.seed))
      eval_s = time.perf_counter() - t0
      row = {
        "seed": seed,
        "steps": n,
        "loss": metrics.get("sft/loss"),
        "token_accuracy": metrics.get("sft/token_accuracy"),
        "greedy_pass_ab": scalars.get("eval/greedy/pass_ab"),
        "sampled_pass_ab": scalars.get("eval/sampled/pass_ab"),
        "sft_s": round(sft_s, 1),
        "eval_s": round(eval_s, 1),
      }
      rows.append(row)
      console(_format(row))
  return rows


def _num(value, spec: str) -> str:
  return "n/a" if value is None else format(value, spec)


def _format(row: dict) -> str:
  return (
    f"seed {row['seed']} steps {row['steps']:>5} | loss"
    f" {_num(row['loss'], '.4f')} acc {_num(row['token_accuracy'], '.3f')} |"
    f" greedy {_num(row['greedy_pass_ab'], '.3f')} sampled"
    f" {_num(row['sampled_pass_ab'], '.3f')} | SFT {row['sft_s']:.0f} s,"
    f" eval {row['eval_s']:.0f} s"
  )


def table(rows: list[dict], steps: list[int]) -> list[str]:
  """A markdown table: one row per steps, greedy / sampled per seed."""
  seeds = sorted({r["seed"] for r in rows})
  by = {(r["seed"], r["steps"]): r for r in rows}
  lines = [
    "| SFT steps | " + " | ".join(f"seed {s}" for s in seeds) + " |",
    "|---" * (len(seeds) + 1) + "|",
  ]
  for n in steps:
    cells = []
    for s in seeds:
      r = by.get((s, n))
      cells.append(
        "-"
        if r is None
        else f"{_num(r['greedy_pass_ab'], '.3f')} /"
        f" {_num(r['sampled_pass_ab'], '.3f')} ({_num(r['loss'], '.3f')})"
      )
    lines.append(f"| {n} | " + " | ".join(cells) + " |")
  return lines


def main(argv):
  del argv
  f = flags.FLAGS
  seeds = _parse_ints(f.seeds, "seeds")
  steps = _parse_ints(f.steps, "steps")
  workdir = pathlib.Path(f.workdir)
  if workdir.exists() and not workdir.is_dir():
    sys.exit(f"error: --workdir={workdir} is a file; give a directory.")
  exp = run_lib.job_from_config(f.config).exp
  if not _constant_rate(exp) and len(steps) > 1:
    sys.exit(
      "error: sft.final_lr_fraction is"
      f" {exp.sft.final_lr_fraction}, not 1.0: the rate then depends on"
      " sft.steps, so a stage's model is not the one a run of that many"
      " steps trains. Give one --steps value."
    )
  print(provenance.summary_line(provenance.describe()), flush=True)
  started = time.perf_counter()
  rows = []
  for seed in seeds:
    rows += seed_rows(
      f.config,
      seed,
      steps,
      workdir / f"seed{seed}",
      harness.config_from_flags,
      console=lambda line: print(line, flush=True),
    )
  lines = table(rows, steps)
  print(
    "\nheld-out pass@1 A&B greedy / sampled (SFT loss), by SFT steps:\n"
    + "\n".join(lines)
  )
  result = {
    "date": datetime.date.today().isoformat(),
    "config": exp.preset,
    "seeds": seeds,
    "steps": steps,
    "samples_per_task": exp.eval.samples_per_task,
    "rows": rows,
    "table": lines,
    "wall_s": round(time.perf_counter() - started, 1),
  }
  out = pathlib.Path(f.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(result, indent=1) + "\n")
  print(f"wrote {out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
