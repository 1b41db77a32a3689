r"""Compares advantage estimators at the same rollout budget.

    python -m codeagent_rl.experiments.compare \
      --config=configs/long_horizon.py --estimators=gae,grpo,rloo \
      --seeds=0,1,2 --workdir=DIR

For each seed the first estimator's run does SFT; the others start from a
copy of its SFT checkpoint (sft/, its rendered demonstrations and its
held-out evaluation), so every estimator of a seed starts from the same
model and KL reference. With `--sft=shared` only the first run of all
does SFT: every run generates its tasks with the first seed
(`config.data.seed`) and starts from that one SFT model, so the seeds
vary only what RL draws (prompts, samples, minibatches), and the
comparison trains one SFT model instead of one per seed. Each run is the
ordinary train job (`train.run`) in DIR/seed<N>/<estimator>, with the same
iterations, prompts and samples per prompt: the same number of episodes
(the tokens they take are the policy's; the table reports them). Running
the command again resumes: finished runs are read, unfinished ones
continue.

Written to DIR: `jax_cache/` (compiled programs the runs share),
`compare.json` (the table's numbers and each run's),
`compare.txt` (the table as printed), `curves.png` (reward and pass rate
of the training rollouts per iteration, per estimator, mean over seeds)
and `horizon.png` (held-out pass@1 per horizon bucket, per estimator).
Pass@1 counts an episode solved when it passes suites A and B (the
anti-cheat's view). The paired difference is each estimator's per-task
pass rate minus the first estimator's on the same task and seed, its
standard error taken over those (task, seed) pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
import copy
import json
import math
import os
import pathlib
import shutil
import sys
import time
from typing import Any

from absl import app
from absl import flags
import jax
from ml_collections import config_flags
import numpy as np

from codeagent_rl import logs
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import probes
from codeagent_rl.tasks import schema
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import run
from codeagent_rl.train import workdir as workdir_lib

ESTIMATORS = ("gae", "grpo", "dr_grpo", "rloo")
# The SFT artefacts a later estimator's run copies from the seed's first.
_SHARED = (workdir_lib.SFT_DIR, workdir_lib.SFT_DATA, workdir_lib.EVAL_SFT)
# Held-out evaluation mode of the table (the training rollouts sample too).
MODES = ("sampled", "greedy")
# Each run's wall seconds over every compare call that worked on it.
RUN_SECONDS = "compare_seconds.json"
_UNBUCKETED = "all"
SFT_MODES = ("per_seed", "shared")


def define_flags() -> None:
  """--config, --estimators, --seeds, --workdir and the sandbox's flags."""
  config_flags.DEFINE_config_file(
    "config", None, "Experiment config, e.g. configs/long_horizon.py."
  )
  flags.DEFINE_list("estimators", ["gae", "grpo", "rloo"], "Estimators.")
  flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds.")
  flags.DEFINE_string("workdir", None, "Directory of the runs and results.")
  flags.DEFINE_enum(
    "sft",
    "per_seed",
    list(SFT_MODES),
    "per_seed: one SFT model (and task set) per seed; shared: one for all"
    " runs, the seeds varying only RL.",
  )
  harness.define_flags()
  flags.mark_flags_as_required(["config", "workdir"])


def parse_lists(
  estimators: Sequence[str], seeds: Sequence[str]
) -> tuple[list[str], list[int]]:
  """Validates the flags' lists.

  Raises:
    ValueError: an unknown or repeated estimator, a seed that is not a
      non-negative integer, a repeated seed, or an empty list.
  """
  estimators = [e.strip() for e in estimators if e.strip()]
  bad = [e for e in estimators if e not in ESTIMATORS]
  if not estimators or bad or len(set(estimators)) != len(estimators):
    raise ValueError(
      f"--estimators={','.join(estimators)}: give distinct names from"
      f" {ESTIMATORS}."
    )
  out = []
  for s in seeds:
    s = str(s).strip()
    if not s.isdigit():
      raise ValueError(f"--seeds: {s!r} is not a non-negative integer.")
    out.append(int(s))
  if not out or len(set(out)) != len(out):
    raise ValueError(f"--seeds={seeds}: give distinct seeds.")
  return estimators, out


def run_config(
  config: Any, estimator: str, seed: int, data_seed: int | None = None
) -> Any:
  """`config` with the estimator and seed (and data seed) set (a copy)."""
  config = copy.deepcopy(config)
  with config.unlocked():
    config.seed = seed
    if data_seed is not None:
      config.data.seed = data_seed
    config.rl.advantage.estimator = estimator
    config.preset = f"{config.preset} [{estimator}, seed {seed}]"
  return config


def share_sft(first: pathlib.Path, target: pathlib.Path) -> None:
  """Copies the seed's SFT artefacts into a run that has none yet."""
  target.mkdir(parents=True, exist_ok=True)
  if (target / workdir_lib.SFT_DIR).exists():
    return
  for name in _SHARED:
    src, dst = first / name, target / name
    if src.is_dir():
      shutil.copytree(src, dst)
    elif src.exists():
      shutil.copy2(src, dst)


def share_compilations(root: pathlib.Path) -> None:
  """Lets every run reuse the programs the first compiled (same shapes).

  JAX's persistent compilation cache, in DIR/jax_cache unless one is set
  already; each run builds its own jitted functions, which without it
  compile again (most of a small run's time).
  """
  if jax.config.jax_compilation_cache_dir:
    return
  jax.config.update("jax_compilation_cache_dir", str(root / "jax_cache"))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def add_run_seconds(target: pathlib.Path, seconds: float) -> float:
  """Adds one call's wall seconds to the run's total in `target`; the total.

  A resumed comparison times only what it still had to do; the total kept
  beside the run counts every call that worked on it.
  """
  path = target / RUN_SECONDS
  total = 0.0
  try:
    total = float(json.loads(path.read_text())["seconds"])
  except (OSError, ValueError, KeyError, TypeError):
    pass  # first call, or an unreadable file: start from this call
  total += seconds
  path.write_text(json.dumps({"seconds": round(total, 1)}) + "\n")
  return total


def _read_jsonl(path: pathlib.Path) -> list[dict]:
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line]


def _per_task(path: pathlib.Path) -> dict[str, dict[str, float]]:
  """Per mode, task_id -> pass@1 (suites A and B) of an evaluation file."""
  saved = json.loads(path.read_text()).get("per_task") or {}
  return {
    mode: dict(zip(rates["task_id"], rates["pass_ab"], strict=True))
    for mode, rates in saved.items()
  }


def _buckets(path: pathlib.Path) -> dict[str, str]:
  """task_id -> horizon bucket of the held-out tasks (`_UNBUCKETED`)."""
  return {
    t.task_id: probes.horizon_bucket(t) or _UNBUCKETED
    for t in schema.read_tasks(path)
  }


def read_run(root: pathlib.Path) -> dict[str, Any]:
  """What the table needs from one finished run's workdir."""
  paths = workdir_lib.Workdir(root)
  records = _read_jsonl(paths.metrics)
  curves = {
    key: [r.get(key) for r in records]
    for key in (
      "reward/total_mean",
      "reward/pass_ab",
      "episode/turns_mean",
      "episode/tokens_mean",
    )
  }
  first = records[0] if records else {}
  horizon = {
    k.split("/", 1)[1]: first[k]
    for k in (
      "episode/turns_p50",
      "episode/turns_p95",
      "episode/turns_max",
      "episode/group_turns_ratio_p50",
      "episode/group_turns_ratio_max",
    )
    if k in first
  }
  tokens = sum(
    r.get("episode/tokens_mean", 0.0) * r.get("episode/count", 0.0)
    for r in records
  )
  return {
    "iterations": len(records),
    "curves": curves,
    "sft_policy_horizon": horizon,
    "episodes": sum(r.get("episode/count", 0.0) for r in records),
    "tokens": tokens,
    "sft": _per_task(paths.eval_sft),
    "final": _per_task(paths.eval_final),
    "buckets": _buckets(paths.eval_tasks),
  }


def _mean_se(values: Sequence[float]) -> tuple[float, float]:
  values = np.asarray(values, np.float64)
  if values.size == 0:
    return math.nan, math.nan
  se = values.std(ddof=1) / math.sqrt(values.size) if values.size > 1 else 0
  return float(values.mean()), float(se)


def table(
  runs: dict[tuple[str, int], dict[str, Any]],
  estimators: Sequence[str],
  seeds: Sequence[int],
  mode: str = "sampled",
) -> dict[str, Any]:
  """The comparison's numbers from `read_run` results.

  Returns:
    {"mode", "baseline", "rows": {estimator: {...}}, "buckets"}: per
    estimator the held-out pass@1 (mean over seeds, with the standard error
    over seeds), the SFT model's, the paired difference to the baseline
    (the first estimator) over (task, seed) pairs, pass@1 per horizon
    bucket, and episodes and tokens trained on (mean over seeds).
  """
  baseline = estimators[0]
  buckets = sorted(
    {b for r in runs.values() for b in r["buckets"].values()},
    key=lambda b: (
      probes.HORIZON_BUCKETS.index(b) if b in probes.HORIZON_BUCKETS else 99
    ),
  )
  rows = {}
  for est in estimators:
    finals, sfts, diffs, tokens, episodes = [], [], [], [], []
    by_bucket = {b: [] for b in buckets}
    for seed in seeds:
      r = runs[(est, seed)]
      final = r["final"].get(mode, {})
      if not final:
        continue
      finals.append(float(np.mean(list(final.values()))))
      sft = r["sft"].get(mode, {})
      if sft:
        sfts.append(float(np.mean(list(sft.values()))))
      base = runs[(baseline, seed)]["final"].get(mode, {})
      diffs += [final[t] - base[t] for t in final if t in base]
      for task, rate in final.items():
        by_bucket[r["buckets"].get(task, _UNBUCKETED)].append(rate)
      tokens.append(r["tokens"])
      episodes.append(r["episodes"])
    mean, se = _mean_se(finals)
    dmean, dse = _mean_se(diffs)
    rows[est] = {
      "pass1": mean,
      "pass1_se_over_seeds": se,
      "sft_pass1": _mean_se(sfts)[0],
      "paired_diff": dmean,
      "paired_diff_se": dse,
      "paired_pairs": len(diffs),
      "by_bucket": {
        b: {"pass1": _mean_se(v)[0], "se": _mean_se(v)[1], "n": len(v)}
        for b, v in by_bucket.items()
      },
      "tokens": _mean_se(tokens)[0],
      "episodes": _mean_se(episodes)[0],
      "seeds": len(finals),
    }
  return {"mode": mode, "baseline": baseline, "rows": rows, "buckets": buckets}


def _fmt(x: float, spec: str = ".3f") -> str:
  return "n/a" if x is None or not math.isfinite(x) else format(x, spec)


def table_text(numbers: dict[str, Any]) -> str:
  """The table as printed (one line per estimator)."""
  buckets = numbers["buckets"]
  head = (
    f"{'estimator':<9} {'pass@1':>12} {'SFT':>6} "
    f"{'vs ' + numbers['baseline']:>16} "
    + " ".join(f"{b:>13}" for b in buckets)
    + f" {'episodes':>8} {'tokens':>9}"
  )
  lines = [f"held-out pass@1 (suites A and B, {numbers['mode']})", head]
  for est, row in numbers["rows"].items():
    by = row["by_bucket"]
    cells = " ".join(
      f"{_fmt(by[b]['pass1']):>6} (n={by[b]['n']:>3})" for b in buckets
    )
    pass1 = f"{_fmt(row['pass1']):>5} ± {_fmt(row['pass1_se_over_seeds']):>5}"
    diff = (
      f"{_fmt(row['paired_diff'], '+.3f'):>7} ±"
      f" {_fmt(row['paired_diff_se']):>6}"
    )
    lines.append(
      f"{est:<9} {pass1} {_fmt(row['sft_pass1']):>6} {diff} {cells}"
      f" {_fmt(row['episodes'], '.0f'):>8} {_fmt(row['tokens'], '.0f'):>9}"
    )
  return "\n".join(lines)


def plot(
  runs: dict[tuple[str, int], dict[str, Any]],
  numbers: dict[str, Any],
  estimators: Sequence[str],
  seeds: Sequence[int],
  out: pathlib.Path,
) -> list[str]:
  """Writes curves.png and horizon.png to `out`; returns their paths."""
  import matplotlib  # noqa: PLC0415 (an optional dependency: plots only)

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  for ax, key, label in (
    (axes[0], "reward/total_mean", "reward (training rollouts)"),
    (axes[1], "reward/pass_ab", "pass rate A&B (training rollouts)"),
  ):
    for est in estimators:
      curves = [runs[(est, s)]["curves"][key] for s in seeds]
      n = min(len(c) for c in curves)
      if not n:
        continue
      values = np.asarray([c[:n] for c in curves], np.float64)
      ax.plot(np.arange(1, n + 1), np.nanmean(values, axis=0), label=est)
    ax.set_xlabel("PPO iteration")
    ax.set_ylabel(label)
    ax.legend()
  fig.tight_layout()
  curves_path = out / "curves.png"
  fig.savefig(curves_path, dpi=100)
  plt.close(fig)

  fig, ax = plt.subplots(figsize=(6, 4))
  buckets = numbers["buckets"]
  width = 0.8 / max(len(estimators), 1)
  for i, est in enumerate(estimators):
    row = numbers["rows"][est]["by_bucket"]
    heights = [row[b]["pass1"] for b in buckets]
    errors = [row[b]["se"] for b in buckets]
    ax.bar(
      np.arange(len(buckets)) + i * width,
      heights,
      width,
      yerr=errors,
      label=est,
    )
  ax.set_xticks(np.arange(len(buckets)) + width * (len(estimators) - 1) / 2)
  ax.set_xticklabels(buckets)
  ax.set_xlabel("horizon bucket (probe range size)")
  ax.set_ylabel(f"held-out pass@1 ({numbers['mode']})")
  ax.legend()
  fig.tight_layout()
  horizon_path = out / "horizon.png"
  fig.savefig(horizon_path, dpi=100)
  plt.close(fig)
  return [str(curves_path), str(horizon_path)]


def compare(
  config: Any,
  estimators: Sequence[str],
  seeds: Sequence[int],
  workdir: str | os.PathLike[str],
  sandbox_from_limits,
  console=print,
  sft: str = "per_seed",
) -> dict[str, Any]:
  """Runs (or resumes) every (estimator, seed) and writes the results.

  Args:
    config: the experiment config (its estimator and seed are replaced).
    estimators: advantage estimators; the first is the paired baseline.
    seeds: seeds.
    workdir: where the runs and results go.
    sandbox_from_limits: `harness.config_from_flags`-like: the job's
      sandbox limits -> the machine's sandbox config.
    console: where progress lines go.
    sft: "per_seed" or "shared" (the module docstring).

  Returns:
    What compare.json holds.
  """
  if sft not in SFT_MODES:
    raise ValueError(f"--sft={sft!r}: expected one of {SFT_MODES}.")
  try:  # before hours of runs, not after them
    import matplotlib  # noqa: F401, PLC0415 (optional: the plots only)
  except ImportError:
    raise exp_lib.SetupError(
      "the comparison's plots need matplotlib: pip install -e '.[experiments]'"
    ) from None
  root = pathlib.Path(workdir)
  root.mkdir(parents=True, exist_ok=True)
  share_compilations(root)
  runs, seconds = {}, {}
  data_seed = seeds[0] if sft == "shared" else None
  first = None
  for seed in seeds:
    if sft == "per_seed":
      first = None
    for est in estimators:
      target = root / f"seed{seed}" / est
      if first is not None:
        share_sft(first, target)
      job = run.job_from_config(run_config(config, est, seed, data_seed))
      start = time.perf_counter()
      console(f"compare: {est}, seed {seed} -> {target}")
      run.run_job(job, target, sandbox_from_limits(job.exp.sandbox))
      seconds[f"{est}/seed{seed}"] = add_run_seconds(
        target, time.perf_counter() - start
      )
      runs[(est, seed)] = read_run(target)
      first = first or target
  result = {"estimators": list(estimators), "seeds": list(seeds), "sft": sft}
  result["tables"] = {m: table(runs, estimators, seeds, m) for m in MODES}
  result["runs"] = {
    f"{e}/seed{s}": {k: v for k, v in r.items() if k != "buckets"}
    for (e, s), r in runs.items()
  }
  result["seconds"] = seconds
  text = "\n\n".join(table_text(t) for t in result["tables"].values())
  horizons = [r["sft_policy_horizon"] for r in runs.values()]
  if horizons and horizons[0]:
    keys = horizons[0].keys()
    result["sft_policy_horizon"] = {
      k: float(np.median([h[k] for h in horizons if k in h])) for k in keys
    }
    text += "\n\nSFT policy's first rollouts (median over runs): " + ", ".join(
      f"{k} {v:g}" for k, v in result["sft_policy_horizon"].items()
    )
  result["plots"] = plot(
    runs, result["tables"]["sampled"], estimators, seeds, root
  )
  result["wall_s"] = sum(seconds.values())
  (root / "compare.json").write_text(json.dumps(result, indent=1))
  (root / "compare.txt").write_text(text + "\n")
  console(text)
  console(f"wrote {root / 'compare.json'} and {', '.join(result['plots'])}")
  return result


def main(argv: list[str]) -> None:
  """Entry point of `python -m codeagent_rl.experiments.compare`."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logs.quiet_library_logs()
  values = flags.FLAGS
  try:
    estimators, seeds = parse_lists(values.estimators, values.seeds)
    for est in estimators:  # validate every run's config before any starts
      run.job_from_config(run_config(values.config, est, seeds[0]))
  except ValueError as e:
    sys.exit(f"error: {e}")
  try:
    compare(
      values.config,
      estimators,
      seeds,
      values.workdir,
      harness.config_from_flags,
      sft=values.sft,
    )
  except exp_lib.SetupError as e:
    sys.exit(f"error: {e}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
