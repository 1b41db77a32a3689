"""What a comparison's runs give: their records, the tables, text and plots.

`experiments.compare` runs the variants; this module reads each finished
run's workdir (`read_run`), builds the tables of held-out pass@1, paired
differences, budget, critic and curve flatness (`table`), prints them
(`report_text`) and draws the curves and horizon buckets (`plot`, or
`draw_curves` / `draw_horizon` on a notebook's axes). The text and drawing
functions take compare.json's contents, so a notebook can use them on a
results directory alone.
"""

from __future__ import annotations

from collections.abc import Sequence
import json
import math
import pathlib
from typing import Any

import numpy as np

from codeagent_rl.tasks import probes
from codeagent_rl.tasks import schema
from codeagent_rl.train import workdir as workdir_lib

# Held-out evaluation mode of the table (the training rollouts sample too).
MODES = ("sampled", "greedy")
_UNBUCKETED = "all"
# Per-iteration metrics kept for the curves.
CURVES = (
  "reward/total_mean",
  "reward/pass_ab",
  "episode/turns_mean",
  "episode/tokens_mean",
  "critic/explained_variance",
)
# The curves.png panels: (metric, axis label).
PANELS = (
  ("reward/total_mean", "reward (training rollouts)"),
  ("reward/pass_ab", "pass rate A&B (training rollouts)"),
  ("critic/explained_variance", "critic explained variance"),
)
# The critic's explained variance is averaged over this many last iterations.
EV_LAST = 3
# How flat a training curve ends: the least-squares slope of this metric
# over the last third of the iterations (at least 3 of them).
FLAT_KEY = "reward/total_mean"
FLAT_FRACTION = 1 / 3
FLAT_MIN_POINTS = 3


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


def _finite(values: Sequence[Any]) -> list[float]:
  return [
    float(v)
    for v in values
    if isinstance(v, int | float) and math.isfinite(float(v))
  ]


def sampled(record: dict[str, Any]) -> tuple[float, float]:
  """(episodes, policy tokens) one iteration sampled, dropped ones included.

  Metrics written before `sampling/*` existed give the trained episodes
  and their mean length instead.
  """
  if "sampling/episodes" in record and "sampling/tokens" in record:
    return float(record["sampling/episodes"]), float(record["sampling/tokens"])
  count = float(record.get("episode/count", 0.0))
  return count, float(record.get("episode/tokens_mean", 0.0)) * count


def end_slope(
  values: Sequence[float | None],
  fraction: float = FLAT_FRACTION,
  min_points: int = FLAT_MIN_POINTS,
) -> dict[str, float]:
  """How flat a curve ends: its least-squares slope over the last iterations.

  Args:
    values: one value per iteration (None: not measured).
    fraction: the share of the iterations fitted, the last ones.
    min_points: fit at least this many (when there are as many).

  Returns:
    {"slope": per iteration, "se": its standard error (NaN under 3 points),
    "points": values fitted, "first": index of the first iteration fitted}.
  """
  n = len(values)
  k = min(n, max(min_points, math.ceil(n * fraction)))
  x = np.arange(n - k, n, dtype=np.float64)
  y = np.asarray(
    [math.nan if v is None else v for v in values[n - k :]], np.float64
  )
  keep = np.isfinite(y)
  x, y = x[keep], y[keep]
  out = {
    "slope": math.nan,
    "se": math.nan,
    "points": int(x.size),
    "first": n - k,
  }
  if x.size < 2:
    return out
  dx = x - x.mean()
  sxx = float(dx @ dx)
  slope = float(dx @ (y - y.mean())) / sxx
  out["slope"] = slope
  if x.size > 2:
    resid = y - y.mean() - slope * dx
    out["se"] = math.sqrt(float(resid @ resid) / (x.size - 2) / sxx)
  return out


def _value_pretrain(paths: workdir_lib.Workdir) -> dict[str, Any]:
  """Rounds, last explained variance and episodes of value pre-training."""
  rows = _read_jsonl(paths.value_pretrain)
  out = {"rounds": len(rows), "explained_variance": None, "episodes": 0.0}
  out["tokens"] = 0.0 if not rows else None
  if not rows:
    return out
  out["explained_variance"] = rows[-1].get("critic/explained_variance")
  if all("sampling/episodes" in r for r in rows):
    out["episodes"] = sum(float(r["sampling/episodes"]) for r in rows)
  else:
    # Rounds record no episode count: one iteration's prompts x samples.
    ppo = json.loads(paths.config.read_text())["ppo"]
    per_round = ppo["prompts_per_iteration"] * ppo["samples_per_prompt"]
    out["episodes"] = float(len(rows) * per_round)
  if all("sampling/tokens" in r for r in rows):
    out["tokens"] = sum(float(r["sampling/tokens"]) for r in rows)
  return out


def read_run(root: pathlib.Path) -> dict[str, Any]:
  """What the tables need from one finished run's workdir."""
  paths = workdir_lib.Workdir(root)
  records = _read_jsonl(paths.metrics)
  curves = {key: [r.get(key) for r in records] for key in CURVES}
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
  per_iteration = [sampled(r) for r in records]
  episodes = sum(e for e, _ in per_iteration)
  tokens = sum(t for _, t in per_iteration)
  n = len(records)
  ev = _finite(curves["critic/explained_variance"][-EV_LAST:])
  return {
    "iterations": n,
    "curves": curves,
    "sft_policy_horizon": horizon,
    "episodes": episodes,
    "tokens": tokens,
    "episodes_per_iteration": episodes / n if n else math.nan,
    "tokens_per_iteration": tokens / n if n else math.nan,
    "explained_variance": float(np.mean(ev)) if ev else None,
    "value_pretrain": _value_pretrain(paths),
    "end_slope": end_slope(curves[FLAT_KEY]),
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


def _mean(values: Sequence[Any]) -> float:
  return _mean_se(_finite(values))[0]


def _training(rs: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """A variant's budget, critic and curve flatness: means over its runs."""
  slopes = [r.get("end_slope") or {} for r in rs]
  finite = [s for s in slopes if _finite([s.get("slope")])]
  slope, slope_se = _mean_se([s["slope"] for s in finite])
  if len(finite) == 1:  # one run: its regression's standard error
    slope_se = finite[0]["se"]
  pre = [r.get("value_pretrain") or {} for r in rs]
  return {
    "iterations": _mean([r.get("iterations") for r in rs]),
    "episodes_per_iteration": _mean(
      [r.get("episodes_per_iteration") for r in rs]
    ),
    "tokens_per_iteration": _mean([r.get("tokens_per_iteration") for r in rs]),
    "explained_variance": _mean([r.get("explained_variance") for r in rs]),
    "value_pretrain_rounds": _mean([p.get("rounds") for p in pre]),
    "value_pretrain_explained_variance": _mean(
      [p.get("explained_variance") for p in pre]
    ),
    "value_pretrain_episodes": _mean([p.get("episodes") for p in pre]),
    "end_slope": slope,
    "end_slope_se": slope_se,
    "end_slope_points": _mean([s["points"] for s in finite]),
  }


def _filled(record: dict[str, Any]) -> dict[str, Any]:
  """A compare.json run record with what older files lack derived."""
  n = record.get("iterations") or 0
  out = {
    "episodes_per_iteration": record["episodes"] / n if n else None,
    "tokens_per_iteration": record["tokens"] / n if n else None,
    "end_slope": end_slope((record.get("curves") or {}).get(FLAT_KEY) or []),
  }
  out.update(record)
  return out


def training_rows(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
  """Per variant, `table`'s training figures from compare.json's runs.

  Files written before those figures existed get the ones their runs'
  records allow (episodes and tokens per iteration, the end slope).
  """
  grouped = runs_by_variant(result)
  names = result.get("variants") or result["estimators"]
  return {n: _training([_filled(r) for r in grouped.get(n, [])]) for n in names}


def table(
  runs: dict[tuple[str, int, int], dict[str, Any]],
  names: Sequence[str],
  mode: str = "sampled",
) -> dict[str, Any]:
  """The comparison's numbers from `read_run` results.

  Args:
    runs: (variant, data seed, seed) -> `read_run`'s record.
    names: the variants; the first is the paired baseline.
    mode: "sampled" or "greedy" held-out pass@1.

  Returns:
    {"mode", "baseline", "rows": {variant: {...}}, "buckets",
    "data_seeds"}: per variant the held-out pass@1 (mean over runs, with
    the standard error over runs), the SFT model's, the paired difference
    to the baseline over (data seed, seed, task) triples (and its standard
    error over data seeds' mean differences, with 2 or more), pass@1 per
    horizon bucket and per data seed, episodes and policy tokens sampled
    (mean over runs), and `_training`'s figures.
  """
  baseline = names[0]
  buckets = sorted(
    {b for r in runs.values() for b in r["buckets"].values()},
    key=lambda b: (
      probes.HORIZON_BUCKETS.index(b) if b in probes.HORIZON_BUCKETS else 99
    ),
  )
  data_seeds = sorted({d for _, d, _ in runs})
  rows = {}
  for name in names:
    keys = sorted(k for k in runs if k[0] == name)
    finals, sfts, tokens, episodes = [], [], [], []
    diffs = {d: [] for d in data_seeds}
    per_data = {d: {"finals": [], "sfts": []} for d in data_seeds}
    by_bucket = {b: [] for b in buckets}
    for key in keys:
      _, d, s = key
      r = runs[key]
      final = r["final"].get(mode, {})
      if not final:
        continue
      finals.append(float(np.mean(list(final.values()))))
      per_data[d]["finals"].append(finals[-1])
      sft = r["sft"].get(mode, {})
      if sft:
        sfts.append(float(np.mean(list(sft.values()))))
        per_data[d]["sfts"].append(sfts[-1])
      base_run = runs.get((baseline, d, s))
      base = base_run["final"].get(mode, {}) if base_run else {}
      diffs[d] += [final[t] - base[t] for t in final if t in base]
      for task, rate in final.items():
        by_bucket[r["buckets"].get(task, _UNBUCKETED)].append(rate)
      tokens.append(r["tokens"])
      episodes.append(r["episodes"])
    mean, se = _mean_se(finals)
    pooled = [x for d in data_seeds for x in diffs[d]]
    dmean, dse = _mean_se(pooled)
    data_means = [np.mean(diffs[d]) for d in data_seeds if diffs[d]]
    by_data = {}
    for d in data_seeds:
      pmean, pse = _mean_se(per_data[d]["finals"])
      dm, ds = _mean_se(diffs[d])
      by_data[str(d)] = {
        "pass1": pmean,
        "se": pse,
        "sft_pass1": _mean_se(per_data[d]["sfts"])[0],
        "paired_diff": dm,
        "paired_diff_se": ds,
        "paired_pairs": len(diffs[d]),
        "runs": len(per_data[d]["finals"]),
      }
    rows[name] = {
      "pass1": mean,
      "pass1_se_over_seeds": se,
      "sft_pass1": _mean_se(sfts)[0],
      "paired_diff": dmean,
      "paired_diff_se": dse,
      "paired_pairs": len(pooled),
      "paired_diff_se_over_data_seeds": (
        _mean_se(data_means)[1] if len(data_means) > 1 else math.nan
      ),
      "by_bucket": {
        b: {"pass1": _mean_se(v)[0], "se": _mean_se(v)[1], "n": len(v)}
        for b, v in by_bucket.items()
      },
      "by_data_seed": by_data,
      "tokens": _mean_se(tokens)[0],
      "episodes": _mean_se(episodes)[0],
      "seeds": len(finals),
      **_training([runs[k] for k in keys]),
    }
  return {
    "mode": mode,
    "baseline": baseline,
    "rows": rows,
    "buckets": buckets,
    "data_seeds": data_seeds,
  }


def _fmt(x: float | None, spec: str = ".3f") -> str:
  if x is None or not math.isfinite(x):
    return "n/a"
  return format(x, spec)


def table_text(numbers: dict[str, Any]) -> str:
  """The pass@1 table as printed (one line per variant)."""
  buckets = numbers["buckets"]
  width = max(9, *(len(v) for v in numbers["rows"]))
  head = (
    f"{'variant':<{width}} {'pass@1':>12} {'SFT':>6} "
    f"{'vs ' + numbers['baseline']:>16} "
    + " ".join(f"{b:>13}" for b in buckets)
    + f" {'episodes':>8} {'tokens':>9}"
  )
  lines = [f"held-out pass@1 (suites A and B, {numbers['mode']})", head]
  for name, row in numbers["rows"].items():
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
      f"{name:<{width}} {pass1} {_fmt(row['sft_pass1']):>6} {diff} {cells}"
      f" {_fmt(row['episodes'], '.0f'):>8} {_fmt(row['tokens'], '.0f'):>9}"
    )
  return "\n".join(lines)


def data_seed_text(numbers: dict[str, Any]) -> str:
  """Pass@1 per data seed (each its own tasks and SFT model), per variant."""
  data_seeds = [str(d) for d in numbers.get("data_seeds") or ()]
  width = max(9, *(len(v) for v in numbers["rows"]))
  lines = [
    f"held-out pass@1 per data seed ({numbers['mode']}; mean ± s.e. over"
    f" seeds, paired difference to {numbers['baseline']} ± s.e.; SFT)",
    f"{'variant':<{width}} "
    + " ".join(f"{'data ' + d:>36}" for d in data_seeds)
    + f" {'diff s.e. over data seeds':>26}",
  ]
  for name, row in numbers["rows"].items():
    cells = []
    for d in data_seeds:
      c = (row.get("by_data_seed") or {}).get(d)
      if c is None:
        cells.append(f"{'n/a':>36}")
        continue
      cells.append(
        f"{_fmt(c['pass1'])} ± {_fmt(c['se'])}"
        f" {_fmt(c['paired_diff'], '+.3f'):>6} ± {_fmt(c['paired_diff_se'])}"
        f" ({_fmt(c['sft_pass1'])})".rjust(36)
      )
    se = _fmt(row.get("paired_diff_se_over_data_seeds"))
    lines.append(f"{name:<{width}} {' '.join(cells)} {se:>26}")
  return "\n".join(lines)


def training_text(rows: dict[str, dict[str, Any]]) -> str:
  """Budget, critic and curve flatness per variant (means over its runs).

  Args:
    rows: variant -> `training_rows`' figures (or a `table` row).
  """
  width = max(9, *(len(v) for v in rows))
  lines = [
    "training (mean over runs; value pre-training: rounds, episodes, its"
    f" last explained variance; critic EV: last {EV_LAST} iterations;"
    f" slope: {FLAT_KEY} per iteration over the last third, ± s.e.)",
    f"{'variant':<{width}} {'iters':>5} {'episodes/it':>11}"
    f" {'tokens/it':>9} {'pretrain':>8} {'pre eps':>7} {'pre EV':>6}"
    f" {'critic EV':>9} {'end slope':>17}",
  ]
  for name, row in rows.items():
    get = row.get
    slope = (
      f"{_fmt(get('end_slope'), '+.4f')} ± {_fmt(get('end_slope_se'), '.4f')}"
    )
    lines.append(
      f"{name:<{width}} {_fmt(get('iterations'), '.0f'):>5}"
      f" {_fmt(get('episodes_per_iteration'), '.1f'):>11}"
      f" {_fmt(get('tokens_per_iteration'), '.0f'):>9}"
      f" {_fmt(get('value_pretrain_rounds'), '.1f'):>8}"
      f" {_fmt(get('value_pretrain_episodes'), '.0f'):>7}"
      f" {_fmt(get('value_pretrain_explained_variance'), '.2f'):>6}"
      f" {_fmt(get('explained_variance'), '.3f'):>9} {slope:>17}"
    )
  return "\n".join(lines)


def report_text(result: dict[str, Any]) -> str:
  """Every table of a compare.json (older ones print what they hold)."""
  tables = list(result["tables"].values())
  parts = []
  for numbers in tables:
    parts.append(table_text(numbers))
    if len(numbers.get("data_seeds") or ()) > 1:
      parts.append(data_seed_text(numbers))
  if result.get("runs"):
    parts.append(training_text(training_rows(result)))
  elif tables and "iterations" in next(iter(tables[0]["rows"].values())):
    parts.append(training_text(tables[0]["rows"]))
  text = "\n\n".join(parts)
  horizon = result.get("sft_policy_horizon")
  if horizon:
    text += "\n\nSFT policy's first rollouts (median over runs): " + ", ".join(
      f"{k} {v:g}" for k, v in horizon.items()
    )
  settings = result.get("variant_settings") or {}
  if settings:
    text += "\n\nvariants:\n" + "\n".join(
      f"  {name}: {s['description']} ({s['estimator']}"
      + "".join(f", {k}={v!r}" for k, v in s["overrides"].items())
      + ")"
      for name, s in settings.items()
    )
  return text


def runs_by_variant(
  result: dict[str, Any],
) -> dict[str, list[dict[str, Any]]]:
  """compare.json's runs grouped by variant (older files: by name)."""
  out = {}
  for name, record in result["runs"].items():
    out.setdefault(record.get("variant", name.split("/")[0]), []).append(record)
  return out


def mean_band(
  curves: Sequence[Sequence[float | None]],
) -> tuple[np.ndarray, np.ndarray]:
  """Per iteration: the mean over runs and its standard error across them.

  Runs may differ in length and miss values (None); an iteration's mean
  is over the runs that have it, NaN where none has, and its s.e. is 0
  with one run.
  """
  n = max((len(c) for c in curves), default=0)
  values = np.full((len(curves), n), np.nan)
  for i, c in enumerate(curves):
    values[i, : len(c)] = [np.nan if v is None else v for v in c]
  seen = np.isfinite(values)
  count = seen.sum(axis=0)
  total = np.where(seen, values, 0.0).sum(axis=0)
  mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
  dev = np.where(seen, values - mean, 0.0)
  var = (dev**2).sum(axis=0) / np.maximum(count - 1, 1)
  se = np.where(count > 1, np.sqrt(var / np.maximum(count, 1)), 0.0)
  return mean, np.where(count > 0, se, np.nan)


def draw_curves(
  axes: Sequence[Any],
  grouped: dict[str, list[dict[str, Any]]],
  names: Sequence[str],
) -> None:
  """One `PANELS` metric per axis: per variant the mean ± s.e. band."""
  for ax, (key, label) in zip(axes, PANELS, strict=True):
    drawn = False
    for name in names:
      curves = [r["curves"].get(key) or [] for r in grouped.get(name, [])]
      mean, se = mean_band(curves)
      if not np.isfinite(mean).any():
        continue  # e.g. no critic: no explained variance
      x = np.arange(1, mean.size + 1)
      (line,) = ax.plot(x, mean, marker="o", markersize=3, label=name)
      ax.fill_between(
        x, mean - se, mean + se, color=line.get_color(), alpha=0.2
      )
      drawn = True
    ax.set_xlabel("PPO iteration")
    ax.set_ylabel(label)
    if drawn:
      ax.legend()
    else:
      ax.text(0.5, 0.5, "not measured", ha="center", transform=ax.transAxes)


def draw_horizon(
  ax: Any, numbers: dict[str, Any], names: Sequence[str]
) -> None:
  """Held-out pass@1 per horizon bucket, one bar per variant (± s.e.)."""
  buckets = numbers["buckets"]
  width = 0.8 / max(len(names), 1)
  for i, name in enumerate(names):
    row = numbers["rows"][name]["by_bucket"]
    ax.bar(
      np.arange(len(buckets)) + i * width,
      [_nan(row[b]["pass1"]) for b in buckets],
      width,
      yerr=[_nan(row[b]["se"]) for b in buckets],
      label=name,
    )
  ax.set_xticks(np.arange(len(buckets)) + width * (len(names) - 1) / 2)
  ax.set_xticklabels(buckets)
  ax.set_xlabel("horizon bucket (probe range size)")
  ax.set_ylabel(f"held-out pass@1 ({numbers['mode']})")
  ax.legend()


def _nan(x: float | None) -> float:
  return math.nan if x is None else x


def plot(result: dict[str, Any], out: pathlib.Path) -> list[str]:
  """Writes curves.png and horizon.png to `out`; returns their paths."""
  import matplotlib  # noqa: PLC0415 (an optional dependency: plots only)

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  names = result["variants"]
  fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 4))
  draw_curves(axes, runs_by_variant(result), names)
  fig.tight_layout()
  curves_path = out / "curves.png"
  fig.savefig(curves_path, dpi=100)
  plt.close(fig)

  fig, ax = plt.subplots(figsize=(6, 4))
  draw_horizon(ax, result["tables"]["sampled"], names)
  fig.tight_layout()
  horizon_path = out / "horizon.png"
  fig.savefig(horizon_path, dpi=100)
  plt.close(fig)
  return [str(curves_path), str(horizon_path)]


def json_safe(x: Any) -> Any:
  """`x` with NaN and infinities as None (strict JSON) and tuples as lists."""
  if isinstance(x, dict):
    return {k: json_safe(v) for k, v in x.items()}
  if isinstance(x, list | tuple):
    return [json_safe(v) for v in x]
  if isinstance(x, float) and not math.isfinite(x):
    return None
  return x
