r"""Compares training recipes (`variants.VARIANTS`) at the same rollout budget.

    python -m codeagent_rl.experiments.compare \
      --config=configs/long_horizon.py --variants=gae,grpo,rloo \
      --seeds=0,1,2 --workdir=DIR
    python -m codeagent_rl.experiments.compare \
      --config=configs/long_horizon.py --variants=vapo,grpo_dapo \
      --seeds=0,1,2 --sft=shared --data_seeds=0,1 --workdir=DIR

`--variants` names recipes: a plain estimator ("gae", "grpo", "rloo",
"dr_grpo") or a named one ("ppo", "vapo", "ppo_turn", "ppo_tests",
"grpo_dapo"); the first is the paired baseline. `--estimators` is the same
flag under its old name.

For each seed the first variant's run does SFT; the others start from a
copy of its SFT checkpoint (sft/, the record of its inputs, its rendered
demonstrations and its held-out evaluation), so every variant of a seed
starts from the same model and KL reference. With `--sft=shared` the seeds
vary only what RL draws (prompts, samples, minibatches): every run takes
its tasks from a data seed (`config.data.seed`) and starts from that data
seed's SFT model, trained once, by its first run. `--data_seeds` (default:
the first seed) gives several task sets and SFT models, each run with every
variant and seed. Each run is the ordinary train job (`train.run`) with the
same iterations, prompts and samples per prompt: the same number of
episodes (the tokens they take are the policy's; the tables report both,
and what DAPO's dynamic sampling drew and dropped counts). Running the
command again resumes: finished runs are read, unfinished ones continue; a
run whose saved config has another seed, data seed or variant setting is
refused.

Layout: DIR/seed<N>/<variant>, or with `--sft=shared` and data seeds other
than the first seed alone, DIR/data<D>/seed<N>/<variant>. Also written to
DIR: `jax_cache/` (compiled programs the runs share), `compare.json` (the
tables' numbers and each run's), `compare.txt` (the tables as printed),
`curves.png` (reward, pass rate and the critic's explained variance of the
training rollouts per iteration: per variant the mean over its runs, the
band one standard error across them) and `horizon.png` (held-out pass@1
per horizon bucket). Pass@1 counts an episode solved when it passes suites
A and B (the anti-cheat's view). The paired difference is each variant's
per-task pass rate minus the first variant's on the same task, seed and
data seed, its standard error taken over those triples. The tables, their
text and the plots are `compare_results`'.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import json
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

from codeagent_rl import cli
from codeagent_rl import logs
from codeagent_rl import provenance
from codeagent_rl.experiments import compare_results as results_lib
from codeagent_rl.experiments import variants as variants_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import run
from codeagent_rl.train import workdir as workdir_lib

DEFAULT_VARIANTS = ("gae", "grpo", "rloo")
# The SFT artefacts a later variant's run copies from the seed's first.
_SHARED = (
  workdir_lib.SFT_DIR,
  workdir_lib.SFT_FINGERPRINT,
  workdir_lib.SFT_DATA,
  workdir_lib.EVAL_SFT,
)
# Each run's wall seconds over every compare call that worked on it.
RUN_SECONDS = "compare_seconds.json"
SFT_MODES = ("per_seed", "shared")


def define_flags() -> None:
  """--config, --variants (--estimators), --seeds, --data_seeds, --workdir."""
  config_flags.DEFINE_config_file(
    "config", None, "Experiment config, e.g. configs/long_horizon.py."
  )
  known = "; ".join(
    f"{n}: {v.description}" for n, v in variants_lib.VARIANTS.items()
  )
  flags.DEFINE_list(
    "variants",
    None,
    f"Recipes, the first the paired baseline (default"
    f" {','.join(DEFAULT_VARIANTS)}). Known: {known}.",
  )
  flags.DEFINE_list("estimators", None, "The old name of --variants.")
  flags.DEFINE_list("seeds", ["0", "1", "2"], "RL seeds.")
  flags.DEFINE_list(
    "data_seeds",
    None,
    "With --sft=shared: task sets and SFT models, one per data seed"
    " (default: the first seed).",
  )
  flags.DEFINE_string("workdir", None, "Directory of the runs and results.")
  flags.DEFINE_enum(
    "sft",
    "per_seed",
    list(SFT_MODES),
    "per_seed: one SFT model (and task set) per seed; shared: one per data"
    " seed, the seeds varying only RL.",
  )
  harness.define_flags()
  flags.mark_flags_as_required(["config", "workdir"])


def choose_variants(
  variants: Sequence[str] | None, estimators: Sequence[str] | None
) -> tuple[list[str], str]:
  """The variant names of --variants or its alias --estimators, and the flag.

  Raises:
    ValueError: both flags are given.
  """
  if variants is not None and estimators is not None:
    raise ValueError(
      "--variants and --estimators are one flag under two names; give one."
    )
  if estimators is not None:
    return list(estimators), "--estimators"
  if variants is not None:
    return list(variants), "--variants"
  return list(DEFAULT_VARIANTS), "--variants"


def _int_list(values: Sequence[str], flag: str) -> list[int]:
  out = []
  for s in values:
    s = str(s).strip()
    if not s.isdigit():
      raise ValueError(f"{flag}: {s!r} is not a non-negative integer.")
    out.append(int(s))
  if not out or len(set(out)) != len(out):
    raise ValueError(f"{flag}={','.join(map(str, values))}: give distinct.")
  return out


def parse_lists(
  names: Sequence[str],
  seeds: Sequence[str],
  data_seeds: Sequence[str] | None = None,
  sft: str = "per_seed",
  flag: str = "--variants",
) -> tuple[list[str], list[int], list[int] | None]:
  """Validates the flags' lists.

  Args:
    names: variant names (`variants.VARIANTS`).
    seeds: RL seeds.
    data_seeds: data seeds, or None (or empty) for the default.
    sft: --sft; data seeds need "shared".
    flag: the flag `names` came from, for the messages.

  Returns:
    (variants, seeds, data seeds or None for the default).

  Raises:
    ValueError: an unknown or repeated variant (the message lists the known
      ones), a seed that is not a non-negative integer, a repeated seed, an
      empty list, or data seeds without --sft=shared.
  """
  names = [n.strip() for n in names if n.strip()]
  variants_lib.check_names(names, flag)
  seed_list = _int_list(seeds, "--seeds")
  data_seeds = [d for d in data_seeds or () if str(d).strip()]
  if not data_seeds:
    return names, seed_list, None
  if sft != "shared":
    raise ValueError(
      f"--data_seeds={','.join(map(str, data_seeds))} needs --sft=shared;"
      " with --sft=per_seed every seed has its own task set and SFT model."
    )
  return names, seed_list, _int_list(data_seeds, "--data_seeds")


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """One run of the comparison.

  Attributes:
    variant: its name in `variants.VARIANTS`.
    data_seed: the seed of its tasks and SFT model.
    seed: its RL seed.
    name: its key in compare.json's "runs" and "seconds".
    path: its workdir, relative to the comparison's.
    sft_group: the runs of one group share one SFT model.
  """

  variant: str
  data_seed: int
  seed: int
  name: str
  path: str
  sft_group: int


def layout(
  names: Sequence[str],
  seeds: Sequence[int],
  data_seeds: Sequence[int] | None = None,
  sft: str = "per_seed",
) -> list[RunSpec]:
  """Every run, in the order they run (the module docstring's layout).

  Raises:
    ValueError: an unknown --sft, or data seeds with --sft=per_seed.
  """
  if sft not in SFT_MODES:
    raise ValueError(f"--sft={sft!r}: expected one of {SFT_MODES}.")
  if sft == "per_seed" and data_seeds is not None:
    raise ValueError("data seeds need --sft=shared (the module docstring).")
  if data_seeds is None:
    data_seeds = [seeds[0]] if sft == "shared" else [None]
  # One data seed that is the first seed is the layout of old comparisons,
  # which must keep resuming; anything else names its data seed.
  nested = sft == "shared" and list(data_seeds) != [seeds[0]]
  specs = []
  for d in data_seeds:
    for s in seeds:
      for v in names:
        where = f"data{d}/seed{s}" if nested else f"seed{s}"
        name = f"{v}/data{d}/seed{s}" if nested else f"{v}/seed{s}"
        data_seed = s if d is None else d
        group = data_seed if sft == "shared" else s
        specs.append(RunSpec(v, data_seed, s, name, f"{where}/{v}", group))
  return specs


def run_config(
  config: Any,
  variant: str,
  seed: int,
  data_seed: int | None = None,
  tag: str = "",
) -> Any:
  """`config` with the variant, seed (and data seed) set (a copy).

  Raises:
    ValueError: the variant names a field the config lacks, or a value of
      the wrong type (the message names both).
  """
  config = variants_lib.apply(config, variant)
  with config.unlocked():
    config.seed = seed
    if data_seed is not None:
      config.data.seed = data_seed
    config.preset = f"{config.preset} [{variant}, seed {seed}{tag}]"
  return config


def _lookup(tree: Any, path: str) -> tuple[bool, Any]:
  for part in path.split("."):
    if not isinstance(tree, dict) or part not in tree:
      return False, None
    tree = tree[part]
  return True, tree


def check_saved_config(
  spec: RunSpec,
  job: run.Job,
  target: pathlib.Path,
  overridden: Sequence[str] | None = None,
) -> None:
  """Refuses to resume a run that was started as another variant or seed.

  Compares the run's saved config.json (if any) with `job` on the seed, the
  data seed, the estimator and the variant's overridden fields
  (`overridden`, dotted; None: those of `variants.VARIANTS[spec.variant]`);
  a field the saved file lacks (an older run) is not compared.

  Raises:
    exp_lib.SetupError: naming the run, the field and both values.
  """
  path = workdir_lib.Workdir(target).config
  if not path.exists():
    return
  saved = json.loads(path.read_text())
  # As config.json holds it (tuples become lists), to compare equal.
  planned = json.loads(json.dumps(exp_lib.to_dict(job.exp), default=str))
  saved_data = (saved.get("data") or {}).get("seed")
  pairs = [
    (
      "data seed",
      saved.get("seed") if saved_data is None else saved_data,
      job.exp.data_seed,
    )
  ]
  fields = {"seed", "rl.advantage.estimator"}
  if overridden is None:
    overridden = variants_lib.VARIANTS[spec.variant].overrides
  fields |= set(overridden)
  for field in sorted(fields):
    found, value = _lookup(saved, field)
    if found:
      pairs.append((field, value, _lookup(planned, field)[1]))
  for field, before, now in pairs:
    if before != now:
      raise exp_lib.SetupError(
        f"{target} was started with {field}={before!r}; variant"
        f" {spec.variant!r} of this comparison has {now!r}. Use another"
        " --workdir, or delete that run to train it again."
      )


def plan(
  config: Any,
  names: Sequence[str],
  seeds: Sequence[int],
  root: pathlib.Path,
  data_seeds: Sequence[int] | None = None,
  sft: str = "per_seed",
) -> list[tuple[RunSpec, run.Job]]:
  """Every run with its validated job, before any starts.

  Raises:
    ValueError: a variant's field or value the config lacks or rejects
      (the message names the variant), or a saved run of another variant
      or seed in the run's workdir (`check_saved_config`).
  """
  specs = layout(names, seeds, data_seeds, sft)
  nested = any(s.path.startswith("data") for s in specs)
  out = []
  for spec in specs:
    config_data_seed = spec.data_seed if sft == "shared" else None
    tag = f", data {spec.data_seed}" if nested else ""
    config_run = run_config(
      config, spec.variant, spec.seed, config_data_seed, tag
    )
    try:
      job = run.job_from_config(config_run)
    except ValueError as e:
      raise ValueError(f"variant {spec.variant!r} ({spec.name}): {e}") from e
    check_saved_config(spec, job, root / spec.path)
    out.append((spec, job))
  return out


def _sft_record(run_dir: pathlib.Path) -> bytes | None:
  try:
    return (run_dir / workdir_lib.SFT_FINGERPRINT).read_bytes()
  except OSError:
    return None


def share_sft(
  first: pathlib.Path, target: pathlib.Path, retrain: bool = False
) -> None:
  """Copies the group's SFT artefacts (with their record) into a run.

  A run that has its own SFT already keeps it when its record is the
  first run's (its own run then checks it against its config); with
  another record it is replaced by the group's when `retrain`
  (`config.sft.retrain`: the old one is set aside, as a run does), else
  kept, and its run stops naming what differs.
  """
  target.mkdir(parents=True, exist_ok=True)
  if (target / workdir_lib.SFT_DIR).exists():
    if not retrain or _sft_record(target) == _sft_record(first):
      return
    run.set_aside(workdir_lib.Workdir(target), workdir_lib.SFT_OUTPUTS)
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


def run_planned(
  planned: Sequence[tuple[RunSpec, run.Job]],
  root: pathlib.Path,
  sandbox_from_limits,
  console=print,
  label: str = "compare",
) -> dict[str, float]:
  """Runs (or resumes) planned runs in order, sharing each group's SFT.

  The first run of an SFT group trains its SFT model; the others start
  from a copy (`share_sft`). A run of a group that finished already (a
  resumed comparison whose first variant changed) is the group's source.

  Args:
    planned: (spec, job) pairs, e.g. `plan`'s.
    root: the comparison's directory; a run's workdir is root/spec.path.
    sandbox_from_limits: the job's sandbox limits -> the machine's sandbox
      config.
    console: where progress lines go.
    label: the progress lines' prefix.

  Returns:
    Each run's name -> its wall seconds over every call (`add_run_seconds`).
  """
  seconds, firsts = {}, {}
  for spec, _ in planned:
    done = root / spec.path / workdir_lib.EVAL_SFT
    if spec.sft_group not in firsts and done.exists():
      firsts[spec.sft_group] = done.parent
  for spec, job in planned:
    target = root / spec.path
    first = firsts.get(spec.sft_group)
    if first is not None and first != target:
      share_sft(first, target, job.exp.sft.retrain)
    start = time.perf_counter()
    console(f"{label}: {spec.name} -> {target}")
    run.run_job(job, target, sandbox_from_limits(job.exp.sandbox))
    seconds[spec.name] = add_run_seconds(target, time.perf_counter() - start)
    firsts.setdefault(spec.sft_group, target)
  return seconds


def compare(
  config: Any,
  names: Sequence[str],
  seeds: Sequence[int],
  workdir: str | os.PathLike[str],
  sandbox_from_limits,
  console=print,
  sft: str = "per_seed",
  data_seeds: Sequence[int] | None = None,
) -> dict[str, Any]:
  """Runs (or resumes) every (variant, data seed, seed); writes the results.

  Args:
    config: the experiment config (variant, seeds set per run on copies).
    names: variants (`variants.VARIANTS`); the first is the paired baseline.
    seeds: RL seeds.
    workdir: where the runs and results go.
    sandbox_from_limits: `harness.config_from_flags`-like: the job's
      sandbox limits -> the machine's sandbox config.
    console: where progress lines go.
    sft: "per_seed" or "shared" (the module docstring).
    data_seeds: with sft="shared", the task sets and SFT models (default:
      the first seed).

  Returns:
    What compare.json holds (with NaN where the file has null).

  Raises:
    ValueError: a run cannot be built (`plan`), before any starts.
  """
  try:  # before hours of runs, not after them
    import matplotlib  # noqa: F401, PLC0415 (optional: the plots only)
  except ImportError:
    raise exp_lib.SetupError(
      "the comparison's plots need matplotlib: pip install -e '.[experiments]'"
    ) from None
  root = pathlib.Path(workdir)
  planned = plan(config, names, seeds, root, data_seeds, sft)
  root.mkdir(parents=True, exist_ok=True)
  provenance.record_run(root / workdir_lib.ENVIRONMENT, console)
  share_compilations(root)
  runs = {}
  seconds = run_planned(planned, root, sandbox_from_limits, console)
  for spec, job in planned:
    # The data seed the job used (a --config.data.seed holds for per_seed).
    runs[(spec.variant, job.exp.data_seed, spec.seed)] = {
      **results_lib.read_run(root / spec.path),
      "variant": spec.variant,
      "data_seed": job.exp.data_seed,
      "seed": spec.seed,
      "name": spec.name,
    }
  result = {
    "variants": list(names),
    # The old name, kept for readers of earlier files: the runs' and rows'
    # keys are variant names.
    "estimators": list(names),
    "variant_settings": {
      n: {
        "estimator": variants_lib.VARIANTS[n].estimator,
        "overrides": variants_lib.resolve(config, n),
        "description": variants_lib.VARIANTS[n].description,
      }
      for n in names
    },
    "seeds": list(seeds),
    "data_seeds": sorted({job.exp.data_seed for _, job in planned}),
    "sft": sft,
  }
  result["tables"] = {
    m: results_lib.table(runs, names, m) for m in results_lib.MODES
  }
  result["runs"] = {
    r["name"]: {k: v for k, v in r.items() if k not in ("buckets", "name")}
    for r in runs.values()
  }
  result["seconds"] = seconds
  horizons = [r["sft_policy_horizon"] for r in runs.values()]
  if horizons and horizons[0]:
    result["sft_policy_horizon"] = {
      k: float(np.median([h[k] for h in horizons if k in h]))
      for k in horizons[0]
    }
  result["plots"] = results_lib.plot(result, root)
  result["wall_s"] = sum(seconds.values())
  text = results_lib.report_text(result)
  (root / "compare.json").write_text(
    json.dumps(results_lib.json_safe(result), indent=1)
  )
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
    cli.check_workdir(values.workdir)
    names, flag = choose_variants(values.variants, values.estimators)
    names, seeds, data_seeds = parse_lists(
      names, values.seeds, values.data_seeds, values.sft, flag
    )
    # Every run's config, before any starts (compare builds them again).
    plan(
      values.config,
      names,
      seeds,
      pathlib.Path(values.workdir),
      data_seeds,
      values.sft,
    )
  except ValueError as e:
    sys.exit(f"error: {e}")
  try:
    compare(
      values.config,
      names,
      seeds,
      values.workdir,
      harness.config_from_flags,
      sft=values.sft,
      data_seeds=data_seeds,
    )
  except exp_lib.SetupError as e:
    sys.exit(f"error: {e}")


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=cli.parse_flags)
