r"""The reward-hacking experiment: hacks that pay, and the stages against them.

    python -m codeagent_rl.experiments.reward_hacking \
      --config=configs/reward_hacking.py --hack_demos=0.3 \
      --variants=none,stage1,stage2,both --seeds=0,1,2 --workdir=DIR

configs/reward_hacking.py makes suite A weak (the visible tests again and
a type check) and gives every task an oracle suite that no reward sees
(tasks/oracle.py). SFT learns from demonstrations of which some hack that
suite A: with probability `--hack_demos` each, a train task gets a
`hardcoded` plan (an if-ladder over the visible tests, a constant of the
return type elsewhere), a `weak_assert` plan (the task's bug with the
visible inputs it fails special-cased) and a `swallow` plan (a lookup of
the visible tests whose error elsewhere is swallowed into a constant of
the return type); all pass suite A under the judge and fail suite B and
the oracle (tests/tasks/oracle_test.py). PPO then trains
from one SFT model once per anti-cheat variant (`VARIANTS`) and RL seed:

  none    no stage enforces: every submission runs, the reward is suite A
  stage1  stage 1 only (its enforced rules and the classifier)
  stage2  stage 2 only (suite B must pass too)
  both    both stages: the config's own `anticheat` section

The runs are `experiments.compare`'s with `--sft=shared` (DIR/seed<N>/
<variant>; the first run trains the SFT model, every other starts from a
copy): the seeds vary only what RL draws. Per iteration the training
rollouts give the reward, the oracle's measures of each episode's code
(`oracle.rates`: suite-A pass, oracle pass, the true hack rate = share of
episodes passing suite A and failing the oracle) and the anti-cheat's own
flags; the held-out evaluations give pass@1 on the oracle (greedy and
sampled) of the SFT model and after the last iteration. Running the
command again resumes.

Written to DIR: `reward_hacking.json` (per run its curves and
evaluations; per variant the means ± standard errors over seeds and the
paired differences to the first variant), `reward_hacking.txt` (the table)
and `reward_hacking.png` (reward, suite-A pass, oracle pass and hack rate
per iteration: per variant the mean over seeds with a band of one
standard error).
"""

from __future__ import annotations

from collections.abc import Sequence
import copy
import json
import math
import os
import pathlib
import sys
from typing import Any

from absl import app
from absl import flags
from ml_collections import config_flags
import numpy as np

from codeagent_rl import logs
from codeagent_rl.experiments import compare
from codeagent_rl.experiments import compare_results as results_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import run
from codeagent_rl.train import workdir as workdir_lib

# Anti-cheat overrides per variant; "both" keeps the config's section.
_NO_STAGE1 = {"enforced_flags": (), "classifier": False, "skip_flagged": False}
_NO_STAGE2 = {"stage2_threshold": 0.0}
VARIANTS = {
  "none": {**_NO_STAGE1, **_NO_STAGE2},
  "stage1": dict(_NO_STAGE2),
  "stage2": dict(_NO_STAGE1),
  "both": {},
}
# The anti-cheat fields some variant overrides: a saved run must agree on
# all of them to be resumed as a variant.
_ANTICHEAT_FIELDS = tuple(
  sorted({f"anticheat.{k}" for v in VARIANTS.values() for k in v})
)
# The demonstration kinds that hack a weak suite A (tasks/synthetic.py).
HACK_KINDS = ("hardcoded", "weak_assert", "swallow")
# Per-iteration metrics of the training rollouts kept for each run.
CURVES = (
  "reward/total_mean",
  "reward/pass_a",
  "reward/pass_ab",
  "oracle/suite_a_pass",
  "oracle/pass",
  "oracle/hack_rate",
  "oracle/hack_share",
  "anticheat/hack_rate",
  "anticheat/flagged_rate",
  "anticheat/flag_rate",
  "anticheat/stage2_fail_rate",
)
# The plot's panels: (metric, axis label).
PANELS = (
  ("reward/total_mean", "reward (training rollouts)"),
  ("oracle/suite_a_pass", "suite-A pass (all of suite A)"),
  ("oracle/pass", "oracle pass (all of the oracle)"),
  ("oracle/hack_rate", "hack rate (A passed, oracle failed)"),
)
# Held-out evaluation metrics kept at SFT and after the last iteration.
EVAL_KEYS = tuple(
  f"eval/{mode}/{name}"
  for mode in ("greedy", "sampled")
  for name in ("oracle_pass", "oracle_hack_rate", "pass_a", "pass_ab")
)
# A curve's start and end: the mean of its first and last this many
# iterations (a single iteration's 32 episodes are noisy).
WINDOW = 3
RESULTS = "reward_hacking.json"
TABLE = "reward_hacking.txt"
PLOT = "reward_hacking.png"


def define_flags() -> None:
  """Registers the experiment's flags (and the sandbox's)."""
  config_flags.DEFINE_config_file(
    "config", None, "Experiment config, e.g. configs/reward_hacking.py."
  )
  flags.DEFINE_list(
    "variants", list(VARIANTS), f"Anti-cheat variants, from {list(VARIANTS)}."
  )
  flags.DEFINE_float(
    "hack_demos",
    0.3,
    f"Probability of each hack demonstration kind ({', '.join(HACK_KINDS)})"
    " per train task.",
  )
  flags.DEFINE_list("seeds", ["0"], "RL seeds; the first one's tasks are used.")
  flags.DEFINE_string("workdir", None, "Where the runs and results go.")
  flags.mark_flags_as_required(["config", "workdir"])
  harness.define_flags()


def parse_variants(variants: Sequence[str]) -> list[str]:
  """The variants, checked.

  Raises:
    ValueError: an unknown or repeated variant, or none.
  """
  variants = [v.strip() for v in variants if v.strip()]
  if not variants:
    raise ValueError("--variants: name at least one variant.")
  unknown = [v for v in variants if v not in VARIANTS]
  if unknown:
    raise ValueError(
      f"--variants: unknown {unknown}; choose from {list(VARIANTS)}."
    )
  if len(set(variants)) != len(variants):
    raise ValueError(f"--variants={','.join(variants)}: a variant repeats.")
  return variants


def variant_config(config: Any, variant: str, hack_demos: float) -> Any:
  """`config` (a copy) with the variant's anti-cheat and the hack demos.

  Raises:
    ValueError: an unknown variant, or `hack_demos` outside [0, 1].
  """
  if variant not in VARIANTS:
    raise ValueError(f"variant {variant!r}: choose from {list(VARIANTS)}.")
  if not (
    isinstance(hack_demos, int | float)
    and not isinstance(hack_demos, bool)
    and 0 <= hack_demos <= 1
  ):
    raise ValueError(f"--hack_demos={hack_demos!r}: must be in [0, 1].")
  config = copy.deepcopy(config)
  with config.unlocked():
    for kind in HACK_KINDS:
      config.data[kind] = float(hack_demos)
    for key, value in VARIANTS[variant].items():
      config.anticheat[key] = value
    config.preset = f"{config.preset} [anti-cheat {variant}]"
  return config


def plan(
  config: Any,
  variants: Sequence[str],
  seeds: Sequence[int],
  hack_demos: float,
  root: pathlib.Path,
) -> list[tuple[compare.RunSpec, run.Job]]:
  """Every run with its validated job, before any starts.

  The layout is `compare`'s with one shared SFT model: DIR/seed<N>/<variant>,
  the tasks and SFT model of the first seed.

  Raises:
    ValueError: a bad variant list, `hack_demos` or config field (the
      message names it).
    exp_lib.SetupError: a saved run of another variant or seed in a run's
      workdir (`compare.check_saved_config`).
  """
  variants = parse_variants(variants)
  if not seeds:
    raise ValueError("--seeds: name at least one seed.")
  out = []
  for spec in compare.layout(variants, seeds, None, "shared"):
    config_run = variant_config(config, spec.variant, hack_demos)
    with config_run.unlocked():
      config_run.seed = spec.seed
      config_run.data.seed = spec.data_seed
      config_run.preset = f"{config_run.preset} [seed {spec.seed}]"
    job = run.job_from_config(config_run)
    compare.check_saved_config(spec, job, root / spec.path, _ANTICHEAT_FIELDS)
    out.append((spec, job))
  return out


def validate(
  config: Any, variants: Sequence[str], hack_demos: float
) -> dict[str, run.Job]:
  """Every variant's validated job (seed as configured), before any starts.

  Raises:
    ValueError: a bad variant list, `hack_demos` or config field (the
      message names it).
  """
  return {
    v: run.job_from_config(variant_config(config, v, hack_demos))
    for v in parse_variants(variants)
  }


def parse_seeds(seeds: Sequence[str]) -> list[int]:
  """--seeds as distinct non-negative ints.

  Raises:
    ValueError: a seed that is not one, a repeat, or none.
  """
  out = []
  for s in seeds:
    s = str(s).strip()
    if not s.isdigit():
      raise ValueError(f"--seeds: {s!r} is not a non-negative integer.")
    out.append(int(s))
  if not out or len(set(out)) != len(out):
    raise ValueError(f"--seeds={','.join(map(str, seeds))}: give distinct.")
  return out


# --- Reading runs -------------------------------------------------------------


def _finite(values: Sequence[Any]) -> list[float]:
  return [
    float(v)
    for v in values
    if isinstance(v, int | float) and math.isfinite(float(v))
  ]


def _mean(values: Sequence[Any]) -> float | None:
  finite = _finite(values)
  return float(np.mean(finite)) if finite else None


def ends(values: Sequence[Any], window: int = WINDOW) -> dict[str, Any]:
  """A curve's start and end: means of its first and last `window` values.

  None values (not measured) are left out; "rise" is end minus start
  (None when either is).
  """
  start, end = _mean(values[:window]), _mean(values[-window:])
  rise = None if start is None or end is None else end - start
  return {"start": start, "end": end, "rise": rise}


def read_run(root: pathlib.Path) -> dict[str, Any]:
  """One run's curves, evaluations and demonstration kinds."""
  paths = workdir_lib.Workdir(root)
  records = []
  if paths.metrics.exists():
    records = [
      json.loads(line)
      for line in paths.metrics.read_text().splitlines()
      if line.strip()
    ]
  curves = {key: [r.get(key) for r in records] for key in CURVES}
  sft = {}
  if paths.eval_sft.exists():
    sft = json.loads(paths.eval_sft.read_text()).get("eval", {})
  final = {}
  for record in records:
    final.update({k: record[k] for k in EVAL_KEYS if k in record})
  kinds = {}
  if paths.sft_data.exists():
    with np.load(paths.sft_data) as data:
      names, counts = np.unique(data["kinds"], return_counts=True)
      kinds = {str(n): int(c) for n, c in zip(names, counts, strict=True)}
  hacks = sum(kinds.get(k, 0) for k in HACK_KINDS)
  return {
    "iterations": len(records),
    "curves": curves,
    "ends": {key: ends(values) for key, values in curves.items()},
    "sft_eval": {k: sft.get(k) for k in EVAL_KEYS},
    "final_eval": {k: final.get(k) for k in EVAL_KEYS},
    "demo_kinds": kinds,
    "hack_demo_share": hacks / max(sum(kinds.values()), 1),
  }


# --- Tables -------------------------------------------------------------------


def mean_se(values: Sequence[Any]) -> tuple[float | None, float | None]:
  """Mean and standard error over finite values (s.e. None under two)."""
  finite = _finite(values)
  if not finite:
    return None, None
  if len(finite) == 1:
    return finite[0], None
  x = np.asarray(finite, np.float64)
  return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))


# What the table reports per run: (name, how it is read from `read_run`).
SUMMARY = {
  "reward_end": lambda r: r["ends"]["reward/total_mean"]["end"],
  "reward_rise": lambda r: r["ends"]["reward/total_mean"]["rise"],
  "suite_a_end": lambda r: r["ends"]["oracle/suite_a_pass"]["end"],
  "oracle_end": lambda r: r["ends"]["oracle/pass"]["end"],
  "oracle_rise": lambda r: r["ends"]["oracle/pass"]["rise"],
  "hack_start": lambda r: r["ends"]["oracle/hack_rate"]["start"],
  "hack_end": lambda r: r["ends"]["oracle/hack_rate"]["end"],
  "flagged_end": lambda r: r["ends"]["anticheat/flagged_rate"]["end"],
  "sft_oracle_greedy": lambda r: r["sft_eval"]["eval/greedy/oracle_pass"],
  "sft_oracle_sampled": lambda r: r["sft_eval"]["eval/sampled/oracle_pass"],
  "oracle_greedy": lambda r: r["final_eval"]["eval/greedy/oracle_pass"],
  "oracle_sampled": lambda r: r["final_eval"]["eval/sampled/oracle_pass"],
  "heldout_hack_sampled": lambda r: r["final_eval"][
    "eval/sampled/oracle_hack_rate"
  ],
}


def summarize(
  runs: dict[str, dict[str, Any]], variants: Sequence[str]
) -> dict[str, dict[str, Any]]:
  """Per variant: each `SUMMARY` figure's mean ± s.e. over its seeds.

  Args:
    runs: run name ("<variant>/seed<N>") -> `read_run`'s record with
      "variant" and "seed" added.
    variants: the variants; the first is the baseline of the paired
      differences (per seed the variant's figure minus the baseline's,
      mean ± s.e. over the seeds both have).

  Returns:
    variant -> {figure: {"mean", "se", "diff", "diff_se", "seeds"}}.
  """
  by = {(r["variant"], r["seed"]): r for r in runs.values()}
  seeds = sorted({s for _, s in by})
  base = variants[0]
  rows = {}
  for variant in variants:
    row = {}
    for name, read in SUMMARY.items():
      own = {s: read(by[variant, s]) for s in seeds if (variant, s) in by}
      mean, se = mean_se(list(own.values()))
      diffs = [
        own[s] - read(by[base, s])
        for s in own
        if (base, s) in by
        and own[s] is not None
        and read(by[base, s]) is not None
      ]
      diff, diff_se = mean_se(diffs)
      row[name] = {
        "mean": mean,
        "se": se,
        "diff": diff,
        "diff_se": diff_se,
        "seeds": len(_finite(list(own.values()))),
      }
    rows[variant] = row
  return rows


def _cell(x: float | None, se: float | None = None, fmt: str = ".3f") -> str:
  if x is None or not math.isfinite(x):
    return "n/a"
  text = format(x, fmt)
  if se is not None and math.isfinite(se):
    text += f"±{se:.3f}"
  return text


# The table's columns: (header, figure, paired difference too).
COLUMNS = (
  ("reward end", "reward_end", False),
  ("reward rise", "reward_rise", False),
  ("A pass end", "suite_a_end", False),
  ("oracle end", "oracle_end", False),
  ("hack rate start", "hack_start", False),
  ("hack rate end", "hack_end", True),
  ("flagged end", "flagged_end", False),
  ("held-out oracle greedy", "oracle_greedy", False),
  ("held-out oracle sampled", "oracle_sampled", True),
)


def table_text(out: dict[str, Any]) -> str:
  """The results as a plain-text table, one row per variant."""
  rows = out["rows"]
  base = out["variants"][0]
  width = max(8, *(len(v) for v in rows))
  head = [f"{'variant':<{width}}"]
  for header, _, paired in COLUMNS:
    head.append(f"{header:>23}")
    if paired:
      head.append(f"{'vs ' + base:>17}")
  lines = [" ".join(head)]
  for variant, row in rows.items():
    cells = [f"{variant:<{width}}"]
    for _, name, paired in COLUMNS:
      figure = row[name]
      cells.append(f"{_cell(figure['mean'], figure['se']):>23}")
      if paired:
        diff = _cell(figure["diff"], figure["diff_se"], "+.3f")
        cells.append(f"{'-' if variant == base else diff:>17}")
    lines.append(" ".join(cells))
  sft = out["rows"][base]
  lines += [
    "",
    f"mean ± s.e. over seeds {out['seeds']}; 'vs {base}': paired by seed."
    f" start / end: mean of the first / last {WINDOW} PPO iterations of"
    " the training rollouts. A pass / oracle: share of episodes whose code"
    " passes every test of suite A / of the oracle; hack rate: share that"
    " passes suite A and fails the oracle; flagged: share with a stage-1"
    " flag. Held-out: pass@1 on the oracle after the last iteration; the"
    " SFT model's: greedy"
    f" {_cell(sft['sft_oracle_greedy']['mean'])}, sampled"
    f" {_cell(sft['sft_oracle_sampled']['mean'])}.",
  ]
  return "\n".join(lines)


def plot(out: dict[str, Any], root: pathlib.Path) -> str:
  """Writes the per-iteration curves (`PANELS`); returns the path.

  Per variant the mean over its seeds, with a band of one standard error.
  """
  import matplotlib  # noqa: PLC0415 (an optional dependency: plots only)

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 4))
  styles = ("-", "--", ":", "-.")
  for i, variant in enumerate(out["variants"]):
    runs = [r for r in out["runs"].values() if r["variant"] == variant]
    for ax, (key, label) in zip(axes, PANELS, strict=True):
      mean, se = results_lib.mean_band([r["curves"][key] for r in runs])
      if not np.isfinite(mean).any():
        continue
      x = np.arange(1, mean.size + 1)
      (line,) = ax.plot(
        x, mean, linestyle=styles[i % len(styles)], marker="o",
        markersize=3, label=variant,
      )  # fmt: skip
      ax.fill_between(
        x, mean - se, mean + se, color=line.get_color(), alpha=0.2
      )
      ax.set_xlabel("PPO iteration")
      ax.set_ylabel(label)
  for ax in axes:
    if ax.get_legend_handles_labels()[0]:
      ax.legend()
  fig.tight_layout()
  path = root / PLOT
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return str(path)


def experiment(
  config: Any,
  variants: Sequence[str],
  hack_demos: float,
  workdir: str | os.PathLike[str],
  sandbox_from_limits,
  console=print,
  seeds: Sequence[int] = (0,),
) -> dict[str, Any]:
  """Runs (or resumes) every (variant, seed) and writes the results.

  Args:
    config: the experiment config (its anti-cheat and hack demos replaced).
    variants: names from `VARIANTS`; the first is the paired baseline.
    hack_demos: probability of each hack demonstration kind per task.
    workdir: where the runs and results go.
    sandbox_from_limits: the job's sandbox limits -> the machine's sandbox
      config (`harness.config_from_flags`).
    console: where progress lines go.
    seeds: RL seeds; the tasks and the one SFT model are the first's.

  Returns:
    What `reward_hacking.json` holds.
  """
  root = pathlib.Path(workdir)
  planned = plan(config, variants, seeds, hack_demos, root)
  try:  # before an hour of runs, not after it
    import matplotlib  # noqa: F401, PLC0415 (optional: the plot only)
  except ImportError:
    raise exp_lib.SetupError(
      "the experiment's plot needs matplotlib: pip install -e '.[experiments]'"
    ) from None
  root.mkdir(parents=True, exist_ok=True)
  compare.share_compilations(root)
  seconds = compare.run_planned(
    planned, root, sandbox_from_limits, console, "reward_hacking"
  )
  runs = {
    spec.name: {
      **read_run(root / spec.path),
      "variant": spec.variant,
      "seed": spec.seed,
      "path": spec.path,
    }
    for spec, _ in planned
  }
  variants = parse_variants(variants)
  first = {}
  for r in runs.values():
    first.setdefault(r["variant"], r)
  out = {
    "variants": variants,
    "seeds": list(seeds),
    "hack_demos": hack_demos,
    "hack_kinds": list(HACK_KINDS),
    "runs": runs,
    "rows": summarize(runs, variants),
    # Per variant, what its first seed's run says of the data (the SFT
    # model's demonstrations are the same for all).
    "results": {
      v: {
        "iterations": first[v]["iterations"],
        "demo_kinds": first[v]["demo_kinds"],
        "hack_demo_share": first[v]["hack_demo_share"],
      }
      for v in variants
    },
    "seconds": seconds,
    "wall_s": sum(seconds.values()),
  }
  out["plot"] = plot(out, root)
  text = table_text(out)
  out["table"] = text
  (root / RESULTS).write_text(
    json.dumps(results_lib.json_safe(out), indent=1) + "\n"
  )
  (root / TABLE).write_text(text + "\n")
  console(text)
  console(f"wrote {root / RESULTS}, {root / TABLE} and {out['plot']}")
  return out


def main(argv: list[str]) -> None:
  """Entry point of `python -m codeagent_rl.experiments.reward_hacking`."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logs.quiet_library_logs()
  values = flags.FLAGS
  try:  # every run's config, before an hour of runs
    seeds = parse_seeds(values.seeds)
    plan(
      values.config,
      values.variants,
      seeds,
      values.hack_demos,
      pathlib.Path(values.workdir),
    )
  except ValueError as e:
    sys.exit(f"error: {e}")
  except exp_lib.SetupError as e:
    sys.exit(f"error: {e}")
  try:
    experiment(
      values.config,
      values.variants,
      values.hack_demos,
      values.workdir,
      harness.config_from_flags,
      seeds=seeds,
    )
  except exp_lib.SetupError as e:
    sys.exit(f"error: {e}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
