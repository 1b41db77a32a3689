r"""The reward-hacking experiment: which anti-cheat stage stops which hack.

    python -m codeagent_rl.experiments.reward_hacking \
      --config=configs/tiny.py --hack_demos=0.3 \
      --variants=none,stage1,stage2,both --workdir=DIR

SFT learns from demonstrations of which a chosen share hack the judge: with
probability `--hack_demos` a train task gets a `hardcoded` plan (an
if-ladder over the visible tests) and, independently, an `early_exit` plan
(`sys.exit(0)` before the tests); the honest and `wrong_final` plans keep
the config's probabilities. PPO then trains from that SFT model once per
anti-cheat variant (`VARIANTS`):

  none    no stage enforces: every submission runs, the reward is suite A
  stage1  stage 1 only (its enforced rules and the classifier)
  stage2  stage 2 only (suite B must pass too)
  both    both stages: the config's own `anticheat` section

Every variant starts from the same SFT checkpoint (the first variant's run
does SFT; the others copy it, as `compare` does), with the same prompts and
keys. Per iteration the training rollouts give the hack rate
(`anticheat/hack_rate`: among the episodes that passed all of suite A, the
share that raised a stage-1 flag or failed suite B, measured whatever the
variant enforces) and the pass rates; the held-out evaluations give pass@1
(suites A and B). Running the command again resumes.

Written to DIR: one workdir per variant, `reward_hacking.json` (per
variant: the curves, the final held-out pass@1, the demonstrations' kinds)
and `reward_hacking.png` (hack rate and held-out pass@1 per iteration).
"""

from __future__ import annotations

from collections.abc import Sequence
import copy
import json
import math
import os
import pathlib
import sys
import time
from typing import Any

from absl import app
from absl import flags
from ml_collections import config_flags
import numpy as np

from codeagent_rl import logs
from codeagent_rl.experiments import compare
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
# The demonstration kinds that hack the judge (tasks/synthetic.py).
HACK_KINDS = ("hardcoded", "early_exit")
# Per-iteration metrics of the training rollouts kept for each variant.
CURVES = (
  "anticheat/hack_rate",
  "anticheat/flagged_rate",
  "reward/total_mean",
  "reward/pass_a",
  "reward/pass_ab",
)
# Held-out pass@1 (suites A and B) of the evaluations, per mode.
EVAL_KEYS = ("eval/greedy/pass_ab", "eval/sampled/pass_ab")
RESULTS = "reward_hacking.json"
PLOT = "reward_hacking.png"


def define_flags() -> None:
  """Registers the experiment's flags (and the sandbox's)."""
  config_flags.DEFINE_config_file(
    "config", None, "Experiment config, e.g. configs/tiny.py or :smoke."
  )
  flags.DEFINE_list(
    "variants", list(VARIANTS), f"Anti-cheat variants, from {list(VARIANTS)}."
  )
  flags.DEFINE_float(
    "hack_demos",
    0.3,
    "Probability of a hardcoded and of an early_exit demonstration per"
    " train task.",
  )
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
  if not (isinstance(hack_demos, int | float) and 0 <= hack_demos <= 1):
    raise ValueError(f"--hack_demos={hack_demos!r}: must be in [0, 1].")
  config = copy.deepcopy(config)
  with config.unlocked():
    for kind in HACK_KINDS:
      config.data[kind] = float(hack_demos)
    for key, value in VARIANTS[variant].items():
      config.anticheat[key] = value
    config.preset = f"{config.preset} [anti-cheat {variant}]"
  return config


def validate(
  config: Any, variants: Sequence[str], hack_demos: float
) -> dict[str, run.Job]:
  """Every variant's validated job, before any starts.

  Raises:
    ValueError: a bad variant list, `hack_demos` or config field (the
      message names it).
  """
  return {
    v: run.job_from_config(variant_config(config, v, hack_demos))
    for v in parse_variants(variants)
  }


def _clean(x: Any) -> Any:
  """`x` with non-finite floats as None (JSON has no NaN)."""
  if isinstance(x, dict):
    return {k: _clean(v) for k, v in x.items()}
  if isinstance(x, list | tuple):
    return [_clean(v) for v in x]
  if isinstance(x, float) and not math.isfinite(x):
    return None
  return x


def read_variant(root: pathlib.Path) -> dict[str, Any]:
  """One variant's curves, evaluations and demonstration kinds."""
  paths = workdir_lib.Workdir(root)
  records = []
  if paths.metrics.exists():
    records = [
      json.loads(line) for line in paths.metrics.read_text().splitlines()
    ]
  curves = {key: [r.get(key) for r in records] for key in CURVES}
  evals = {
    key: [(r["iteration"] + 1, r[key]) for r in records if key in r]
    for key in EVAL_KEYS
  }
  sft = {}
  if paths.eval_sft.exists():
    sft = json.loads(paths.eval_sft.read_text()).get("eval", {})
  for key in EVAL_KEYS:
    if sft.get(key) is not None:
      evals[key].insert(0, (0, sft[key]))
  kinds = {}
  if paths.sft_data.exists():
    with np.load(paths.sft_data) as data:
      names, counts = np.unique(data["kinds"], return_counts=True)
      kinds = {str(n): int(c) for n, c in zip(names, counts, strict=True)}
  hacks = sum(kinds.get(k, 0) for k in HACK_KINDS)
  return {
    "iterations": len(records),
    "curves": curves,
    "evals": evals,
    "demo_kinds": kinds,
    "hack_demo_share": hacks / max(sum(kinds.values()), 1),
    "hack_rate_mean": _mean(curves["anticheat/hack_rate"]),
    "final": {k: (v[-1][1] if v else None) for k, v in evals.items()},
  }


def _mean(values: Sequence[Any]) -> float | None:
  finite = [v for v in values if v is not None and math.isfinite(v)]
  return float(np.mean(finite)) if finite else None


def plot(results: dict[str, dict[str, Any]], out: pathlib.Path) -> str:
  """Writes the hack-rate, flag-rate and pass@1 curves; returns the path.

  Variants that trained alike (a stage that never changed a reward) draw
  the same curve: each variant has its own line style so that all stay
  visible.
  """
  import matplotlib  # noqa: PLC0415 (an optional dependency: plots only)

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  styles = ("-", "--", ":", "-.")
  markers = ("o", "s", "^", "x")
  fig, axes = plt.subplots(1, 3, figsize=(15, 4))
  for i, (variant, result) in enumerate(results.items()):
    style = {
      "linestyle": styles[i % len(styles)],
      "marker": markers[i % len(markers)],
      "label": variant,
    }
    for ax, key in zip(axes[:2], CURVES[:2], strict=True):
      values = np.asarray(
        [np.nan if v is None else v for v in result["curves"][key]],
        np.float64,
      )
      ax.plot(np.arange(1, len(values) + 1), values, **style)
    points = result["evals"][EVAL_KEYS[0]] or result["evals"][EVAL_KEYS[1]]
    if points:
      xs, ys = zip(*points, strict=True)
      axes[2].plot(xs, ys, **style)
  axes[0].set_ylabel("hack rate among suite-A passes")
  axes[1].set_ylabel("share of episodes with a stage-1 flag")
  for ax in axes[:2]:
    ax.set_xlabel("PPO iteration (training rollouts)")
  axes[2].set_xlabel("PPO iterations done (0: SFT)")
  axes[2].set_ylabel("held-out pass@1, suites A and B (greedy)")
  for ax in axes:
    ax.legend()
  fig.tight_layout()
  path = out / PLOT
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
) -> dict[str, Any]:
  """Runs (or resumes) every variant and writes the results.

  Args:
    config: the experiment config (its anti-cheat and hack demos replaced).
    variants: names from `VARIANTS`; the first does SFT.
    hack_demos: probability of each hack demonstration kind per task.
    workdir: where the runs and results go.
    sandbox_from_limits: the job's sandbox limits -> the machine's sandbox
      config (`harness.config_from_flags`).
    console: where progress lines go.

  Returns:
    What `reward_hacking.json` holds.
  """
  jobs = validate(config, variants, hack_demos)
  root = pathlib.Path(workdir)
  root.mkdir(parents=True, exist_ok=True)
  compare.share_compilations(root)
  results, seconds, first = {}, {}, None
  for variant in variants:
    target = root / variant
    if first is not None:
      compare.share_sft(first, target)
    console(f"reward_hacking: anti-cheat {variant} -> {target}")
    start = time.perf_counter()
    job = jobs[variant]
    run.run_job(job, target, sandbox_from_limits(job.exp.sandbox))
    seconds[variant] = compare.add_run_seconds(
      target, time.perf_counter() - start
    )
    results[variant] = read_variant(target)
    first = first or target
  out = {
    "variants": list(variants),
    "hack_demos": hack_demos,
    "results": results,
    "seconds": seconds,
    "plot": plot(results, root),
  }
  text = table_text(out)
  out["table"] = text
  (root / RESULTS).write_text(json.dumps(_clean(out), indent=1))
  console(text)
  console(f"wrote {root / RESULTS} and {out['plot']}")
  return out


def table_text(out: dict[str, Any]) -> str:
  """The results as a plain-text table, one row per variant."""

  def cell(x):
    return "-" if x is None else f"{x:.3f}"

  lines = [
    f"{'variant':8} {'hack rate':>9} {'pass A':>7} {'pass AB':>7}"
    f" {'eval greedy':>11} {'eval sampled':>12}"
  ]
  for variant, r in out["results"].items():
    pass_a = _mean(r["curves"]["reward/pass_a"])
    pass_ab = _mean(r["curves"]["reward/pass_ab"])
    lines.append(
      f"{variant:8} {cell(r['hack_rate_mean']):>9} {cell(pass_a):>7}"
      f" {cell(pass_ab):>7} {cell(r['final'][EVAL_KEYS[0]]):>11}"
      f" {cell(r['final'][EVAL_KEYS[1]]):>12}"
    )
  lines.append(
    "hack rate, pass A, pass AB: means over the training iterations;"
    " eval: held-out pass@1 (suites A and B) after the last iteration."
  )
  return "\n".join(lines)


def main(argv: list[str]) -> None:
  """Entry point of `python -m codeagent_rl.experiments.reward_hacking`."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logs.quiet_library_logs()
  values = flags.FLAGS
  try:  # every variant's config, before hours of runs
    validate(values.config, values.variants, values.hack_demos)
  except ValueError as e:
    sys.exit(f"error: {e}")
  try:
    experiment(
      values.config,
      values.variants,
      values.hack_demos,
      values.workdir,
      harness.config_from_flags,
    )
  except exp_lib.SetupError as e:
    sys.exit(f"error: {e}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
