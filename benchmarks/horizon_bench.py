r"""The horizon of a trained policy: turns per episode, by sampling setting.

Run from the repository root, on a run directory whose SFT has finished
(`python -m codeagent_rl.main --config=configs/long_horizon.py ...`):

  python -m benchmarks.horizon_bench \
    --config=configs/long_horizon.py --workdir=DIR --temperatures=1.0,0.7
  python -m benchmarks.horizon_bench --config=... \
    --workdir=DIR --checkpoint=latest   # the newest PPO checkpoint instead

The policy (the SFT actor, or a PPO checkpoint) rolls out `--prompts`
training tasks (the first ones of the run's train split), each
`ppo.samples_per_prompt` times as one group, through the run's
environment and its slot-refill loop (`ppo.rollout_slots` rows, or
lockstep), once per temperature (0: greedy). Columns, per temperature:

  turns p50/p95/max      turns per episode
  ratio p50/max          within one prompt's group: longest over shortest
                         episode, in turns (what GRPO's in-group
                         normalisation must absorb)
  >=20                   share of episodes of 20 turns or more
  budget                 share of episodes a budget ended (turns or tokens)
  pass A                 share whose submission passed suite A
  stop reasons           how the episodes ended

The horizon targets of the long-horizon experiment are turns p50 3-5,
p95 >= 20, max >= 50 and group ratios of 5x or more.

Writes benchmarks/results/horizon_bench.json (or --out).
"""

from __future__ import annotations

import collections
import datetime
import json
import pathlib
import sys
import time

from absl import app
from absl import flags
import jax
from ml_collections import config_flags
import numpy as np

from codeagent_rl import samples as samples_lib
from codeagent_rl.envs import code_env
from codeagent_rl.rollout import agent_loop
from codeagent_rl.rollout import continuous
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import pools
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import eval_job
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import run as run_lib
from codeagent_rl.train import sft as sft_lib
from codeagent_rl.train import workdir as workdir_lib

DEFAULT_OUT = "benchmarks/results/horizon_bench.json"
CHECKPOINTS = ("sft", "latest")


def define_flags():
  """Registers the benchmark's flags."""
  config_flags.DEFINE_config_file("config", None, "The run's config.")
  flags.DEFINE_string("workdir", None, "Run directory with a finished SFT.")
  flags.DEFINE_string(
    "checkpoint",
    "sft",
    "'sft' (the SFT actor) or 'latest' (the newest PPO checkpoint).",
  )
  flags.DEFINE_list("temperatures", ["1.0"], "Sampling temperatures.")
  flags.DEFINE_integer("prompts", 16, "Training tasks, one group each.")
  flags.DEFINE_integer("seed", 0, "Sampling seed.")
  flags.DEFINE_string("out", DEFAULT_OUT, "JSON file to write.")
  flags.DEFINE_string(
    "samples_out",
    None,
    "Also write every episode (samples JSONL, one line per episode with"
    " its temperature) to this file.",
  )
  harness.define_flags()
  flags.mark_flags_as_required(["config", "workdir"])


def _params(exp, workdir: str, which: str, mesh, rules):
  """The actor params to roll out: the SFT actor or the newest checkpoint."""
  if which == "sft":
    params, _ = sft_lib.run_sft(exp, None, workdir, mesh, rules)
    return params
  params, what = eval_job.restore_actor_params(
    exp, pathlib.Path(workdir), mesh, rules, exp.preset
  )
  print(f"policy: {what}")
  return params


def horizon_row(
  episodes: list[code_env.EpisodeState], group_ids: np.ndarray
) -> dict:
  """The horizon's statistics over finished episodes (module docstring)."""
  turns = np.asarray([len(e.turns) for e in episodes], np.float64)
  ratios = eval_lib.group_ratios(group_ids, turns)
  reasons = collections.Counter(e.stop_reason for e in episodes)
  budget = sum(
    n
    for r, n in reasons.items()
    if r not in (code_env.STOP_SUBMIT, code_env.STOP_ADAPTIVE)
  )
  passed = [
    e.outcome is not None and e.outcome.suite_a == 1.0 for e in episodes
  ]
  return {
    "episodes": len(episodes),
    "turns_p50": float(np.percentile(turns, 50)),
    "turns_p90": float(np.percentile(turns, 90)),
    "turns_p95": float(np.percentile(turns, 95)),
    "turns_max": float(turns.max()),
    "turns_mean": float(turns.mean()),
    "share_20_turns": float(np.mean(turns >= 20)),
    "group_ratio_p50": float(np.median(ratios)),
    "group_ratio_max": float(ratios.max()),
    "group_ratio_ge5": float(np.mean(ratios >= 5)),
    "budget_share": budget / len(episodes),
    "pass_a": float(np.mean(passed)),
    "stop_reasons": dict(sorted(reasons.items())),
  }


def main(argv):
  del argv
  f = flags.FLAGS
  if f.checkpoint not in CHECKPOINTS:
    sys.exit(
      f"error: --checkpoint={f.checkpoint!r}: expected one of {CHECKPOINTS}."
    )
  if not (pathlib.Path(f.workdir) / workdir_lib.SFT_DIR).is_dir():
    sys.exit(
      f"error: {f.workdir} has no SFT checkpoint ({workdir_lib.SFT_DIR}/):"
      " run the main job on it first."
    )
  job = run_lib.job_from_config(f.config)
  exp = job.exp
  sandbox = exp.sandbox.apply(harness.config_from_flags(exp.sandbox))
  mesh, rules = exp.make_mesh()
  task_sets = data_lib.make_task_sets(exp.data, exp.data_seed)
  tasks = task_sets.train[: f.prompts]
  group = exp.ppo.samples_per_prompt
  episodes_tasks = [t for t in tasks for _ in range(group)]
  group_ids = np.repeat(np.arange(len(tasks)), group)
  slots = min(exp.ppo.rollout_slots, len(episodes_tasks))
  rows, lines, started = [], [], time.perf_counter()
  with pools.open_pool(sandbox) as pool:
    env = data_lib.make_env(pool, exp.conversation, exp.env, exp.data.generator)
    params = _params(exp, f.workdir, f.checkpoint, mesh, rules)
    cache_len = agent_loop.cache_len_for(
      exp.env, data_lib.longest_prompt(env, tasks), exp.conversation
    )
    for k, temperature in enumerate(float(t) for t in f.temperatures):
      sampler = eval_lib.make_sampler(exp, temperature)
      policy = agent_loop.SamplerPolicy(
        sampler, {"params": params}, exp.conversation, cache_len
      )
      rng = jax.random.fold_in(jax.random.key(f.seed), k)
      t0 = time.perf_counter()
      if slots:
        rollout = continuous.collect(
          env, policy, episodes_tasks, group_ids.tolist(), rng, slots=slots
        )
      else:
        rollout = agent_loop.collect(
          env, policy, episodes_tasks, group_ids.tolist(), rng
        )
      row = {
        "temperature": temperature,
        **horizon_row(rollout.episodes, group_ids),
        "wall_s": round(time.perf_counter() - t0, 1),
      }
      rows.append(row)
      lines += [
        samples_lib.episode_line(e, temperature=temperature, group=int(g))
        for e, g in zip(rollout.episodes, group_ids, strict=True)
      ]
      print(
        f"T={temperature:<4} turns p50 {row['turns_p50']:.0f} p95"
        f" {row['turns_p95']:.1f} max {row['turns_max']:.0f} |"
        f" ratio p50 {row['group_ratio_p50']:.1f} max"
        f" {row['group_ratio_max']:.1f} | >=20 {row['share_20_turns']:.2f}"
        f" budget {row['budget_share']:.2f} pass A {row['pass_a']:.2f}"
        f" | {row['stop_reasons']} ({row['wall_s']:.0f} s)",
        flush=True,
      )
  result = {
    "date": datetime.date.today().isoformat(),
    "config": exp.preset,
    "workdir": str(f.workdir),
    "checkpoint": f.checkpoint,
    "prompts": len(tasks),
    "samples_per_prompt": group,
    "slots": slots,
    "env": {
      "max_turns": exp.env.max_turns,
      "max_total_tokens": exp.env.max_total_tokens,
    },
    "rows": rows,
    "wall_s": round(time.perf_counter() - started, 1),
  }
  out = pathlib.Path(f.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(result, indent=2) + "\n")
  print(f"wrote {out}")
  if f.samples_out:
    samples_lib.write_samples(f.samples_out, lines)
    print(f"wrote {f.samples_out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
