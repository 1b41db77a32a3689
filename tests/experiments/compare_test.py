"""The estimator comparison: its arguments, its table, one small run."""

import json
import math
import pathlib

import numpy as np
import pytest

from codeagent_rl.experiments import compare
from tests.helpers import processes


def test_lists_are_validated():
  assert compare.parse_lists(["gae", " rloo"], ["0", "2"]) == (
    ["gae", "rloo"],
    [0, 2],
  )
  for estimators, seeds in (
    (["ppo"], ["0"]),
    (["gae", "gae"], ["0"]),
    ([], ["0"]),
    (["gae"], ["-1"]),
    (["gae"], ["x"]),
    (["gae"], ["1", "1"]),
  ):
    with pytest.raises(ValueError, match="--estimators|--seeds"):
      compare.parse_lists(estimators, seeds)


def _run(final, buckets, tokens=100.0):
  return {
    "final": {"sampled": final},
    "sft": {"sampled": {t: 0.0 for t in final}},
    "buckets": buckets,
    "tokens": tokens,
    "episodes": 8.0,
    "curves": {},
  }


def test_table_pairs_tasks_within_a_seed():
  buckets = {"a": "short", "b": "long", "c": "long"}
  runs = {
    ("gae", 0): _run({"a": 1.0, "b": 0.5, "c": 0.0}, buckets),
    ("gae", 1): _run({"a": 1.0, "b": 1.0, "c": 0.5}, buckets),
    ("grpo", 0): _run({"a": 0.5, "b": 0.5, "c": 0.5}, buckets, 50.0),
    ("grpo", 1): _run({"a": 1.0, "b": 0.0, "c": 0.0}, buckets, 70.0),
  }
  numbers = compare.table(runs, ["gae", "grpo"], [0, 1])
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
  text = compare.table_text(numbers)
  assert "vs gae" in text and "-0.250" in text


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
  assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("sft", compare.SFT_MODES)
def test_sft_is_trained_once_per_seed_or_once_for_all(
  tmp_path, monkeypatch, sft
):
  """Which runs train SFT and which copy it, and the data seed each gets.

  The jobs are replaced by a stand-in that records what it was given and
  leaves an SFT checkpoint directory, as a finished run does.
  """
  from ml_collections import config_dict  # noqa: PLC0415

  from configs import long_horizon  # noqa: PLC0415

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
        f"{target.parent.name}/{target.name}"
      )

  buckets = {"a": "short"}
  monkeypatch.setattr(compare.run, "run_job", fake_run_job)
  monkeypatch.setattr(
    compare,
    "read_run",
    lambda root: {**_run({"a": 1.0}, buckets), "sft_policy_horizon": {}},
  )
  monkeypatch.setattr(compare, "plot", lambda *args: [])
  config = long_horizon.get_config("smoke")
  assert isinstance(config, config_dict.ConfigDict)
  result = compare.compare(
    config,
    ["gae", "grpo"],
    [3, 5],
    tmp_path,
    lambda limits: None,
    console=lambda line: None,
    sft=sft,
  )
  assert result["sft"] == sft
  runs = [c[0] for c in calls]
  assert runs == ["seed3/gae", "seed3/grpo", "seed5/gae", "seed5/grpo"]
  assert [c[1] for c in calls] == [3, 3, 5, 5]
  trained = [c[0] for c in calls if c[3]]
  if sft == "per_seed":
    assert [c[2] for c in calls] == [3, 3, 5, 5]
    assert trained == ["seed3/gae", "seed5/gae"]
    copied_from = {"seed3/grpo": "seed3/gae", "seed5/grpo": "seed5/gae"}
  else:
    assert [c[2] for c in calls] == [3, 3, 3, 3]
    assert trained == ["seed3/gae"]
    copied_from = dict.fromkeys(
      ["seed3/grpo", "seed5/gae", "seed5/grpo"], "seed3/gae"
    )
  for run_dir, name in copied_from.items():
    weights = tmp_path / run_dir / "sft" / "weights"
    assert weights.read_text() == name
  with pytest.raises(ValueError, match="--sft='both'"):
    compare.compare(
      config, ["gae"], [0], tmp_path, lambda limits: None, sft="both"
    )


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
# are noise, so few and short ones.
SMOKE = [
  "--config=configs/long_horizon.py:smoke",
  "--config.ppo.iterations=1",
  "--config.env.max_turns=3",
  "--config.data.num_train_tasks=8",
  "--config.data.num_eval_tasks=4",
]


def test_smoke_comparison_writes_table_and_plots(tmp_path):
  # One device, as a user runs it (the tests' 8 fake devices would need
  # batches divisible by 8).
  proc = processes.run_python(
    "-m",
    "codeagent_rl.experiments.compare",
    *SMOKE,
    "--estimators=gae,grpo",
    "--seeds=0",
    f"--workdir={tmp_path}",
    "--sandbox_backend=process",
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  saved = json.loads((tmp_path / "compare.json").read_text())
  assert saved["estimators"] == ["gae", "grpo"]
  assert set(saved["runs"]) == {"gae/seed0", "grpo/seed0"}
  for path in saved["plots"]:
    with open(path, "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  table = saved["tables"]["sampled"]
  assert set(table["rows"]) == {"gae", "grpo"}
  assert table["rows"]["gae"]["paired_diff"] == 0.0
  assert set(table["buckets"]) <= {"short", "medium", "long"}
  # Both estimators start from one SFT model: the second reused it.
  gae, grpo = saved["runs"]["gae/seed0"], saved["runs"]["grpo/seed0"]
  assert gae["sft"] == grpo["sft"]
  assert gae["iterations"] == grpo["iterations"] == 1
  assert gae["episodes"] == grpo["episodes"] == 8
  assert "turns_p95" in gae["sft_policy_horizon"]
  for name in ("gae/seed0", "grpo/seed0"):
    est = name.split("/")[0]
    kept = json.loads(
      (tmp_path / "seed0" / est / compare.RUN_SECONDS).read_text()
    )
    assert kept["seconds"] == round(saved["seconds"][name], 1) > 0
  text = (tmp_path / "compare.txt").read_text()
  assert text.startswith("held-out pass@1") and text in proc.stdout
  runs = tmp_path / "seed0"
  assert sorted(p.name for p in (runs / "grpo" / "sft").iterdir()) == sorted(
    p.name for p in (runs / "gae" / "sft").iterdir()
  )
  _check_horizon_bench(tmp_path / "seed0" / "gae", tmp_path)


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
