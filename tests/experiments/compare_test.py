"""The variant comparison: its arguments, layout, tables, one small run."""

import json
import math
import pathlib

import numpy as np
import pytest

from codeagent_rl.experiments import compare
from codeagent_rl.experiments import compare_results as results_lib
from codeagent_rl.experiments import variants
from codeagent_rl.tasks import schema
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import run
from configs import long_horizon
from tests.helpers import processes


def test_lists_are_validated():
  assert compare.parse_lists(["gae", " vapo"], ["0", "2"]) == (
    ["gae", "vapo"],
    [0, 2],
    None,
  )
  for names, seeds in (
    (["ppo2"], ["0"]),
    (["gae", "gae"], ["0"]),
    ([], ["0"]),
    (["gae"], ["-1"]),
    (["gae"], ["x"]),
    (["gae"], ["1", "1"]),
  ):
    with pytest.raises(ValueError, match="--estimators|--seeds"):
      compare.parse_lists(names, seeds, flag="--estimators")
  with pytest.raises(ValueError, match="known variants are gae, grpo, rloo"):
    compare.parse_lists(["gae", "ppo2"], ["0"])


def test_variants_flag_and_its_old_name():
  assert compare.choose_variants(None, None) == (
    ["gae", "grpo", "rloo"],
    "--variants",
  )
  assert compare.choose_variants(["vapo", "grpo"], None) == (
    ["vapo", "grpo"],
    "--variants",
  )
  assert compare.choose_variants(None, ["gae", "rloo"]) == (
    ["gae", "rloo"],
    "--estimators",
  )
  with pytest.raises(ValueError, match="give one"):
    compare.choose_variants(["gae"], ["gae"])


def test_data_seeds_need_a_shared_sft():
  parse = compare.parse_lists
  assert parse(["gae"], ["3", "4"], None, "shared")[2] is None
  assert parse(["gae"], ["3"], [], "per_seed")[2] is None
  assert parse(["gae"], ["3"], ["0", "1"], "shared")[2] == [0, 1]
  with pytest.raises(ValueError, match="needs --sft=shared"):
    parse(["gae"], ["3"], ["0", "1"], "per_seed")
  for bad in (["0", "0"], ["-2"]):
    with pytest.raises(ValueError, match="--data_seeds"):
      parse(["gae"], ["3"], bad, "shared")


def test_layout_keeps_old_directories_and_nests_data_seeds():
  def paths(*args):
    return [(s.path, s.data_seed, s.sft_group) for s in compare.layout(*args)]

  # As before: one SFT per seed, or the first seed's for all.
  assert paths(["gae", "vapo"], [3, 5]) == [
    ("seed3/gae", 3, 3),
    ("seed3/vapo", 3, 3),
    ("seed5/gae", 5, 5),
    ("seed5/vapo", 5, 5),
  ]
  old_shared = paths(["gae"], [3, 5], None, "shared")
  assert old_shared == [("seed3/gae", 3, 3), ("seed5/gae", 3, 3)]
  assert paths(["gae"], [3, 5], [3], "shared") == old_shared
  assert paths(["gae"], [3, 5], [0, 1], "shared") == [
    ("data0/seed3/gae", 0, 0),
    ("data0/seed5/gae", 0, 0),
    ("data1/seed3/gae", 1, 1),
    ("data1/seed5/gae", 1, 1),
  ]
  # One data seed that is not the first seed is named: an old directory of
  # that seed holds runs of another task set.
  assert paths(["gae"], [3], [7], "shared") == [("data7/seed3/gae", 7, 7)]
  specs = compare.layout(["gae"], [3], [0, 1], "shared")
  assert [s.name for s in specs] == ["gae/data0/seed3", "gae/data1/seed3"]
  with pytest.raises(ValueError, match="--sft='both'"):
    compare.layout(["gae"], [0], None, "both")


def _run(final, buckets, tokens=100.0, **training):
  return {
    "final": {"sampled": final},
    "sft": {"sampled": {t: 0.0 for t in final}},
    "buckets": buckets,
    "tokens": tokens,
    "episodes": 8.0,
    "curves": {},
    **training,
  }


def test_table_pairs_tasks_within_a_seed():
  buckets = {"a": "short", "b": "long", "c": "long"}
  runs = {
    ("gae", 0, 0): _run({"a": 1.0, "b": 0.5, "c": 0.0}, buckets),
    ("gae", 0, 1): _run({"a": 1.0, "b": 1.0, "c": 0.5}, buckets),
    ("grpo", 0, 0): _run({"a": 0.5, "b": 0.5, "c": 0.5}, buckets, 50.0),
    ("grpo", 0, 1): _run({"a": 1.0, "b": 0.0, "c": 0.0}, buckets, 70.0),
  }
  numbers = results_lib.table(runs, ["gae", "grpo"])
  grpo = numbers["rows"]["grpo"]
  diffs = np.asarray([-0.5, 0.0, 0.5, 0.0, -1.0, -0.5])
  assert grpo["paired_diff"] == pytest.approx(diffs.mean())
  assert grpo["paired_diff_se"] == pytest.approx(
    diffs.std(ddof=1) / math.sqrt(6)
  )
  assert grpo["paired_pairs"] == 6
  finals = np.asarray([0.5, 1 / 3])
  assert grpo["pass1"] == pytest.approx(finals.mean())
  assert grpo["pass1_se_over_seeds"] == pytest.approx(
    finals.std(ddof=1) / math.sqrt(2)
  )
  assert grpo["by_bucket"]["long"]["pass1"] == pytest.approx(0.25)
  assert grpo["by_bucket"]["long"]["n"] == 4
  assert grpo["tokens"] == 60.0
  assert numbers["rows"]["gae"]["paired_diff"] == 0.0
  assert numbers["buckets"] == ["short", "long"]
  assert math.isnan(grpo["paired_diff_se_over_data_seeds"])  # one data seed
  text = results_lib.table_text(numbers)
  assert "vs gae" in text and "-0.250" in text


def test_table_over_data_seeds_and_variants():
  """Two SFT models (data seeds) of two seeds each, checked by hand.

  Task ids repeat across data seeds but name other tasks: pairs stay
  within a data seed.
  """
  buckets = {"a": "short", "b": "long", "c": "long"}
  finals = {
    ("gae", 0, 0): {"a": 1.0, "b": 0.0},
    ("gae", 0, 1): {"a": 0.5, "b": 0.5},
    ("gae", 1, 0): {"a": 0.0, "c": 1.0},
    ("gae", 1, 1): {"a": 1.0, "c": 1.0},
    ("vapo", 0, 0): {"a": 1.0, "b": 0.5},
    ("vapo", 0, 1): {"a": 1.0, "b": 0.0},
    ("vapo", 1, 0): {"a": 0.5, "c": 1.0},
    ("vapo", 1, 1): {"a": 0.0, "c": 0.5},
  }
  slopes = {(0, 0): 0.1, (0, 1): 0.2, (1, 0): 0.3, (1, 1): 0.0}
  runs = {}
  for (name, d, s), final in finals.items():
    critic = name == "vapo"
    runs[(name, d, s)] = _run(
      final,
      buckets,
      iterations=6,
      episodes_per_iteration=16.0 + d,
      tokens_per_iteration=1000.0 * (1 + s),
      explained_variance=0.1 * (1 + d) if critic else None,
      value_pretrain={
        "rounds": 4 + s if critic else 0,
        "explained_variance": 0.5 if critic else None,
        "episodes": 16.0 * (4 + s) if critic else 0.0,
      },
      end_slope={"slope": slopes[(d, s)], "se": 0.05, "points": 3},
    )
  numbers = results_lib.table(runs, ["gae", "vapo"])
  assert numbers["data_seeds"] == [0, 1]
  vapo = numbers["rows"]["vapo"]
  by_data = {0: [0.0, 0.5, 0.5, -0.5], 1: [0.5, 0.0, -1.0, -0.5]}
  pooled = np.asarray(by_data[0] + by_data[1])
  assert vapo["paired_pairs"] == 8
  assert vapo["paired_diff"] == pytest.approx(-0.0625)
  assert vapo["paired_diff_se"] == pytest.approx(
    pooled.std(ddof=1) / math.sqrt(8)
  )
  # Data seed means 0.125 and -0.25: s.e. |0.125 - (-0.25)| / 2.
  assert vapo["paired_diff_se_over_data_seeds"] == pytest.approx(0.1875)
  per_run = np.asarray([0.75, 0.5, 0.75, 0.25])
  assert vapo["pass1"] == pytest.approx(0.5625)
  assert vapo["pass1_se_over_seeds"] == pytest.approx(per_run.std(ddof=1) / 2)
  assert vapo["seeds"] == 4
  for d, (pass1, se) in {0: (0.625, 0.125), 1: (0.5, 0.25)}.items():
    cell = vapo["by_data_seed"][str(d)]
    assert cell["pass1"] == pytest.approx(pass1)
    assert cell["se"] == pytest.approx(se)
    assert cell["paired_diff"] == pytest.approx(np.mean(by_data[d]))
    assert cell["paired_diff_se"] == pytest.approx(
      np.std(by_data[d], ddof=1) / 2
    )
    assert cell["paired_pairs"] == 4 and cell["runs"] == 2
  gae_cell = numbers["rows"]["gae"]["by_data_seed"]["1"]
  assert gae_cell["pass1"] == pytest.approx(0.75)
  assert gae_cell["paired_diff"] == 0.0
  # The long bucket: task b of data seed 0 and c of data seed 1.
  assert vapo["by_bucket"]["long"]["pass1"] == pytest.approx(0.5)
  assert vapo["by_bucket"]["long"]["n"] == 4
  # Training figures: means over the four runs.
  assert vapo["iterations"] == 6
  assert vapo["episodes_per_iteration"] == pytest.approx(16.5)
  assert vapo["tokens_per_iteration"] == pytest.approx(1500.0)
  assert vapo["explained_variance"] == pytest.approx(0.15)
  assert vapo["value_pretrain_rounds"] == pytest.approx(4.5)
  assert vapo["value_pretrain_episodes"] == pytest.approx(72.0)
  assert vapo["value_pretrain_explained_variance"] == pytest.approx(0.5)
  assert math.isnan(numbers["rows"]["gae"]["explained_variance"])
  assert vapo["end_slope"] == pytest.approx(0.15)
  assert vapo["end_slope_se"] == pytest.approx(
    np.std([0.1, 0.2, 0.3, 0.0], ddof=1) / 2
  )
  # With one run, the slope's s.e. is that run's regression's.
  one = results_lib.table(
    {k: v for k, v in runs.items() if k[1:] == (0, 0)}, ["gae", "vapo"]
  )
  assert one["rows"]["vapo"]["end_slope"] == pytest.approx(0.1)
  assert one["rows"]["vapo"]["end_slope_se"] == pytest.approx(0.05)
  text = results_lib.report_text(
    {"tables": {"sampled": numbers}, "variant_settings": {}}
  )
  assert "per data seed" in text and "-0.062" in text and " 0.187\n" in text
  assert "+0.1500" in text  # the end slope


def test_end_slope_is_the_least_squares_slope_of_the_last_third():
  # Last 3 of 6: (3, 1), (4, 2), (5, 4): slope 1.5, residuals 1/6, -1/3,
  # 1/6, so s.e. sqrt((1/6) / 1 / 2).
  out = results_lib.end_slope([0.0, 0.0, 0.0, 1.0, 2.0, 4.0])
  assert out["slope"] == pytest.approx(1.5)
  assert out["se"] == pytest.approx(math.sqrt(1 / 12))
  assert (out["points"], out["first"]) == (3, 3)
  flat = results_lib.end_slope([0.1, 0.9, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
  assert (flat["slope"], flat["se"], flat["points"]) == (0.0, 0.0, 3)
  # 12 iterations: the last 4; a missing value is left out of the fit.
  out = results_lib.end_slope([0.0] * 8 + [1.0, None, 3.0, 4.0])
  assert (out["first"], out["points"]) == (8, 3)
  assert out["slope"] == pytest.approx(1.0)
  assert out["se"] == pytest.approx(0.0, abs=1e-12)
  two = results_lib.end_slope([0.0, 1.0])
  assert two["slope"] == 1.0 and math.isnan(two["se"])
  assert math.isnan(results_lib.end_slope([0.5])["slope"])
  assert math.isnan(results_lib.end_slope([])["slope"])


def test_mean_band_over_runs_of_different_lengths():
  mean, se = results_lib.mean_band([[1.0, 2.0, None], [3.0, None], [5.0]])
  assert mean[0] == pytest.approx(3.0)
  assert se[0] == pytest.approx(np.std([1, 3, 5], ddof=1) / math.sqrt(3))
  assert (mean[1], se[1]) == (2.0, 0.0)  # one run: no band
  assert math.isnan(mean[2]) and math.isnan(se[2])


def _write_run(root, records, pretrain=None, final=None):
  root.mkdir(parents=True)
  (root / "metrics.jsonl").write_text(
    "".join(json.dumps(r) + "\n" for r in records)
  )
  if pretrain is not None:
    (root / "value_pretrain.jsonl").write_text(
      "".join(json.dumps(r) + "\n" for r in pretrain)
    )
  config = {"ppo": {"prompts_per_iteration": 4, "samples_per_prompt": 4}}
  (root / "config.json").write_text(json.dumps(config))
  final = {"per_task": {"sampled": {"task_id": ["t"], "pass_ab": [1.0]}}}
  for name in ("eval_final.json", "eval_sft.json"):
    (root / name).write_text(json.dumps(final))
  (root / "eval_tasks.jsonl").write_text("")


def test_read_run_counts_what_was_sampled(tmp_path):
  records = [
    {
      "reward/total_mean": 0.1 * i,
      "episode/count": 16.0,
      "episode/tokens_mean": 100.0,
      # Dynamic sampling drew a second round: 32 episodes sampled.
      "sampling/episodes": 32.0,
      "sampling/tokens": 3000.0,
      "critic/explained_variance": ev,
    }
    for i, ev in enumerate([0.0, 0.1, 0.2, 0.4, None])
  ]
  pretrain = [
    {"round": k, "critic/explained_variance": ev}
    for k, ev in enumerate([0.1, 0.3, 0.35])
  ]
  _write_run(tmp_path / "new", records, pretrain)
  r = results_lib.read_run(tmp_path / "new")
  assert r["iterations"] == 5
  assert (r["episodes"], r["tokens"]) == (160.0, 15000.0)
  assert r["episodes_per_iteration"] == 32.0
  assert r["tokens_per_iteration"] == 3000.0
  # Last 3 iterations, one of them without a value.
  assert r["explained_variance"] == pytest.approx(0.3)
  assert r["value_pretrain"] == {
    "rounds": 3,
    "explained_variance": 0.35,
    "episodes": 48.0,  # 3 rounds of 4 prompts x 4 samples
    "tokens": None,  # not recorded
  }
  assert r["end_slope"]["slope"] == pytest.approx(0.1)
  assert r["curves"]["critic/explained_variance"][-1] is None
  assert r["final"] == {"sampled": {"t": 1.0}}
  # Metrics from before `sampling/*`: the trained episodes and their mean
  # length; no critic, no value pre-training.
  old = [
    {"reward/total_mean": 0.5, "episode/count": 16.0, "episode/tokens_mean": x}
    for x in (100.0, 150.0)
  ]
  _write_run(tmp_path / "old", old)
  r = results_lib.read_run(tmp_path / "old")
  assert (r["episodes"], r["tokens"]) == (32.0, 4000.0)
  assert r["tokens_per_iteration"] == 2000.0
  assert r["explained_variance"] is None
  assert r["value_pretrain"]["rounds"] == 0


def test_an_older_compare_json_still_prints():
  shipped = json.loads(
    (
      processes.REPO_ROOT
      / "benchmarks/results/long_horizon/before_critic_recipe/compare.json"
    ).read_text()
  )
  text = results_lib.report_text(shipped)
  assert text.startswith("held-out pass@1 (suites A and B, sampled)")
  assert "vs gae" in text
  # The training table from what the old runs' records hold: 6 iterations
  # of 16 episodes, no critic metrics.
  [gae] = [line for line in text.splitlines() if line.startswith("gae  ")][-1:]
  assert gae.split()[1:3] == ["6", "16.0"] and "n/a" in gae
  grouped = results_lib.runs_by_variant(shipped)
  assert sorted(grouped) == ["gae", "grpo", "rloo"]
  assert all(len(v) == 3 for v in grouped.values())


def test_bad_estimator_is_refused_before_anything_runs(tmp_path):
  proc = processes.run_python(
    "-m",
    "codeagent_rl.experiments.compare",
    "--config=configs/long_horizon.py:smoke",
    "--estimators=gae,ppo2",
    f"--workdir={tmp_path}",
    timeout=300,
  )
  assert proc.returncode != 0
  assert "--estimators=gae,ppo2" in proc.stderr
  assert "known variants are gae" in proc.stderr
  assert not any(tmp_path.iterdir())


def test_a_bad_override_is_refused_before_anything_runs(tmp_path, monkeypatch):
  config = long_horizon.get_config("smoke")
  monkeypatch.setitem(
    variants.VARIANTS, "bad", variants.Variant("gae", {"rl.loss.eps_high": -1})
  )
  with pytest.raises(
    ValueError, match=r"variant 'bad' \(bad/seed0\): rl.loss.eps_high"
  ):
    compare.compare(
      config, ["gae", "bad"], [0], tmp_path / "w", lambda limits: None
    )
  assert not (tmp_path / "w").exists()


def _saved_config(root, name, seed, variant=None):
  """Leaves the config.json of a run of `name` (or `variant`) in `root`."""
  config = variants.apply(long_horizon.get_config("smoke"), name, variant)
  with config.unlocked():
    config.seed = seed
  job = run.job_from_config(config)
  root.mkdir(parents=True)
  (root / "config.json").write_text(json.dumps(exp_lib.to_dict(job.exp)))


def test_a_run_of_another_variant_or_data_seed_is_not_resumed(tmp_path):
  config = long_horizon.get_config("smoke")
  # Runs of the same variants resume.
  _saved_config(tmp_path / "seed0" / "gae", "gae", 0)
  _saved_config(tmp_path / "seed0" / "vapo", "vapo", 0)
  compare.plan(config, ["gae", "vapo"], [0], tmp_path)
  _saved_config(tmp_path / "seed0" / "rloo", "grpo", 0)
  with pytest.raises(exp_lib.SetupError, match="estimator='grpo'"):
    compare.plan(config, ["gae", "rloo"], [0], tmp_path)
  # A Dr. GRPO run from before its variant set the loss aggregation.
  plain = variants.Variant("dr_grpo")
  _saved_config(tmp_path / "seed0" / "dr_grpo", "dr_grpo", 0, plain)
  with pytest.raises(exp_lib.SetupError, match="agg_mode='token_mean'"):
    compare.plan(config, ["gae", "dr_grpo"], [0], tmp_path)
  # Seed 1 trained on its own tasks (per_seed); shared, it would take
  # seed 0's.
  _saved_config(tmp_path / "seed1" / "gae", "gae", 1)
  compare.plan(config, ["gae"], [0, 1], tmp_path)
  with pytest.raises(exp_lib.SetupError, match="data seed=1"):
    compare.plan(config, ["gae"], [0, 1], tmp_path, sft="shared")


def _stand_in_jobs(tmp_path, monkeypatch):
  """Replaces the jobs by a stand-in; the list of what each was given.

  The stand-in leaves an SFT checkpoint directory and its evaluation, as a
  finished run does; the runs' records are made up.
  """
  calls = []

  def fake_run_job(job, target, sandbox):
    del sandbox
    target = pathlib.Path(target)
    trained = not (target / "sft").exists()
    calls.append(
      (
        target.relative_to(tmp_path).as_posix(),
        job.exp.seed,
        job.exp.data_seed,
        trained,
      )
    )
    if trained:
      (target / "sft").mkdir(parents=True)
      (target / "sft" / "weights").write_text(
        target.relative_to(tmp_path).as_posix()
      )
      (target / "eval_sft.json").write_text("{}")

  buckets = {"a": "short"}
  monkeypatch.setattr(compare.run, "run_job", fake_run_job)
  monkeypatch.setattr(
    results_lib,
    "read_run",
    lambda root: {**_run({"a": 1.0}, buckets), "sft_policy_horizon": {}},
  )
  monkeypatch.setattr(results_lib, "plot", lambda *args: [])
  return calls


@pytest.mark.parametrize(
  "sft,data_seeds", [("per_seed", None), ("shared", None), ("shared", [0, 1])]
)
def test_sft_is_trained_once_per_seed_or_data_seed(
  tmp_path, monkeypatch, sft, data_seeds
):
  """Which runs train SFT and which copy it, and the data seed each gets."""
  calls = _stand_in_jobs(tmp_path, monkeypatch)
  config = long_horizon.get_config("smoke")
  result = compare.compare(
    config,
    ["gae", "grpo"],
    [3, 5],
    tmp_path,
    lambda limits: None,
    console=lambda line: None,
    sft=sft,
    data_seeds=data_seeds,
  )
  assert result["sft"] == sft
  assert result["variants"] == result["estimators"] == ["gae", "grpo"]
  trained = [c[0] for c in calls if c[3]]
  if data_seeds is None:
    runs = [c[0] for c in calls]
    assert runs == ["seed3/gae", "seed3/grpo", "seed5/gae", "seed5/grpo"]
    assert [c[1] for c in calls] == [3, 3, 5, 5]
    assert set(result["runs"]) == {
      "gae/seed3",
      "grpo/seed3",
      "gae/seed5",
      "grpo/seed5",
    }
  if sft == "per_seed":
    assert [c[2] for c in calls] == [3, 3, 5, 5]
    assert result["data_seeds"] == [3, 5]
    assert trained == ["seed3/gae", "seed5/gae"]
    copied_from = {"seed3/grpo": "seed3/gae", "seed5/grpo": "seed5/gae"}
  elif data_seeds is None:
    assert [c[2] for c in calls] == [3, 3, 3, 3]
    assert result["data_seeds"] == [3]
    assert trained == ["seed3/gae"]
    copied_from = dict.fromkeys(
      ["seed3/grpo", "seed5/gae", "seed5/grpo"], "seed3/gae"
    )
  else:
    assert [c[0] for c in calls] == [
      f"data{d}/seed{s}/{v}"
      for d in (0, 1)
      for s in (3, 5)
      for v in ("gae", "grpo")
    ]
    assert [c[1] for c in calls] == [3, 3, 5, 5] * 2
    assert [c[2] for c in calls] == [0] * 4 + [1] * 4
    assert result["data_seeds"] == [0, 1]
    assert trained == ["data0/seed3/gae", "data1/seed3/gae"]
    copied_from = {
      f"data{d}/{run}": f"data{d}/seed3/gae"
      for d in (0, 1)
      for run in ("seed3/grpo", "seed5/gae", "seed5/grpo")
    }
    assert "gae/data1/seed5" in result["runs"]
    assert result["runs"]["gae/data1/seed5"]["data_seed"] == 1
    assert result["tables"]["sampled"]["rows"]["grpo"]["paired_pairs"] == 4
  for run_dir, name in copied_from.items():
    weights = tmp_path / run_dir / "sft" / "weights"
    assert weights.read_text() == name
  saved = json.loads((tmp_path / "compare.json").read_text())
  assert saved["variant_settings"]["grpo"]["estimator"] == "grpo"


def test_a_variant_added_first_later_copies_the_finished_sft(
  tmp_path, monkeypatch
):
  calls = _stand_in_jobs(tmp_path, monkeypatch)
  config = long_horizon.get_config("smoke")
  for names in (["gae"], ["vapo", "gae"]):
    compare.compare(
      config,
      names,
      [3],
      tmp_path,
      lambda limits: None,
      console=lambda line: None,
    )
  assert [(c[0], c[3]) for c in calls] == [
    ("seed3/gae", True),
    ("seed3/vapo", False),
    ("seed3/gae", False),
  ]
  weights = tmp_path / "seed3" / "vapo" / "sft" / "weights"
  assert weights.read_text() == "seed3/gae"


def test_run_seconds_add_up_over_resumed_calls(tmp_path):
  assert compare.add_run_seconds(tmp_path, 10.0) == 10.0
  assert compare.add_run_seconds(tmp_path, 2.5) == 12.5
  saved = json.loads((tmp_path / compare.RUN_SECONDS).read_text())
  assert saved == {"seconds": 12.5}
  # A damaged total starts over from this call instead of failing a run
  # that has already finished.
  (tmp_path / compare.RUN_SECONDS).write_text("{not json")
  assert compare.add_run_seconds(tmp_path, 1.0) == 1.0


# The smallest run that still has every stage: the smoke model's episodes
# are noise, so few and short ones. (One padded length of 768 for SFT and
# PPO rows compiled fewer steps but ran slower: 60 s instead of 50 s.)
SMOKE_FIELDS = {
  "ppo.iterations": 1,
  "env.max_turns": 3,
  "data.num_train_tasks": 8,
  "data.num_eval_tasks": 4,
}
SMOKE = ["--config=configs/long_horizon.py:smoke"] + [
  f"--config.{name}={value}" for name, value in SMOKE_FIELDS.items()
]


def _smoke_config():
  """configs/long_horizon.py:smoke with SMOKE's overrides."""
  config = long_horizon.get_config("smoke")
  config.update_from_flattened_dict(SMOKE_FIELDS)
  return config


def test_smoke_comparison_writes_table_and_plots(tmp_path):
  # One device, as a user runs it (the tests' 8 fake devices would need
  # batches divisible by 8). One data seed, not the default: one SFT model
  # shared by both variants, trained on that seed's tasks. Which runs
  # train and which copy with several data seeds is checked above with
  # stand-in jobs (a second data seed here cost an SFT model and two PPO
  # runs, ~35% of the module). Level 0: the runs compile more than they
  # execute (111 user seconds for the module instead of 127).
  proc = processes.run_python(
    "-m",
    "codeagent_rl.experiments.compare",
    *SMOKE,
    "--variants=gae,grpo",
    "--seeds=0",
    "--sft=shared",
    "--data_seeds=1",
    f"--workdir={tmp_path}",
    "--sandbox_backend=process",
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  saved = json.loads((tmp_path / "compare.json").read_text())
  assert saved["variants"] == saved["estimators"] == ["gae", "grpo"]
  assert saved["data_seeds"] == [1]
  names = [f"{v}/data1/seed0" for v in ("gae", "grpo")]
  assert set(saved["runs"]) == set(names)
  for path in saved["plots"]:
    with open(path, "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  table = saved["tables"]["sampled"]
  assert set(table["rows"]) == {"gae", "grpo"}
  assert table["rows"]["gae"]["paired_diff"] == 0.0
  assert set(table["rows"]["grpo"]["by_data_seed"]) == {"1"}
  assert table["rows"]["grpo"]["paired_pairs"] == 4  # 4 held-out tasks
  assert set(table["buckets"]) <= {"short", "medium", "long"}
  # Both variants start from one SFT model: the second reused it.
  gae, grpo = (saved["runs"][f"{v}/data1/seed0"] for v in ("gae", "grpo"))
  assert gae["sft"] == grpo["sft"]
  assert gae["iterations"] == grpo["iterations"] == 1
  assert gae["episodes"] == grpo["episodes"] == 8
  assert gae["episodes_per_iteration"] == 8
  assert (gae["data_seed"], gae["seed"]) == (1, 0)
  # Only the critic has an explained variance.
  assert gae["curves"]["critic/explained_variance"][0] is not None
  assert grpo["explained_variance"] is None
  runs = tmp_path / "data1" / "seed0"
  assert sorted(p.name for p in (runs / "grpo" / "sft").iterdir()) == sorted(
    p.name for p in (runs / "gae" / "sft").iterdir()
  )
  config = json.loads((runs / "grpo" / "config.json").read_text())
  assert config["data"]["seed"] == 1 and config["seed"] == 0
  # The data seed, not the run's seed, chose the tasks: seed 0's differ.
  eval_tasks = [
    json.loads(line)
    for line in (runs / "gae" / "eval_tasks.jsonl").read_text().splitlines()
  ]
  smoke = exp_lib.Experiment.from_config(_smoke_config())
  data_seed_1, data_seed_0 = (
    [
      schema.task_to_json(t)
      for t in data_lib.make_task_sets(smoke.data, d).eval
    ]
    for d in (1, 0)
  )
  assert eval_tasks == data_seed_1 != data_seed_0
  assert "gae/seed0" not in saved["runs"] and not (tmp_path / "seed0").exists()
  for name in names:
    v, data, seed = name.split("/")
    kept = json.loads(
      (tmp_path / data / seed / v / compare.RUN_SECONDS).read_text()
    )
    assert kept["seconds"] == round(saved["seconds"][name], 1) > 0
  text = (tmp_path / "compare.txt").read_text()
  assert text.startswith("held-out pass@1") and text in proc.stdout
  # One data seed: no table per data seed (one is made above from numbers).
  assert "per data seed" not in text and "training (" in text
  _check_horizon_bench(runs / "gae", tmp_path)


def _check_horizon_bench(run, tmp_path):
  """benchmarks/horizon_bench.py on the SFT model of `run`."""
  out, samples = tmp_path / "horizon.json", tmp_path / "episodes.jsonl"
  proc = processes.run_python(
    "benchmarks/horizon_bench.py",
    *SMOKE,
    f"--workdir={run}",
    "--temperatures=1.0,0",
    "--prompts=2",
    f"--out={out}",
    f"--samples_out={samples}",
    "--sandbox_backend=process",
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  data = json.loads(out.read_text())
  assert data["checkpoint"] == "sft"
  assert (data["prompts"], data["samples_per_prompt"]) == (2, 4)
  assert [r["temperature"] for r in data["rows"]] == [1.0, 0.0]
  for row in data["rows"]:
    assert row["episodes"] == 8
    assert sum(row["stop_reasons"].values()) == 8
    assert 1 <= row["turns_p50"] <= row["turns_max"] <= 3
  lines = [json.loads(x) for x in samples.read_text().splitlines()]
  assert len(lines) == 16
  assert [x["temperature"] for x in lines] == [1.0] * 8 + [0.0] * 8
  assert [x["group"] for x in lines[:8]] == [0] * 4 + [1] * 4
  assert all(1 <= len(x["trajectory"]) <= 3 for x in lines)
  # Greedy decoding gives every copy of a prompt the same episode.
  for g in (0, 1):
    greedy = [x["trajectory"] for x in lines[8:] if x["group"] == g]
    assert all(t == greedy[0] for t in greedy)
