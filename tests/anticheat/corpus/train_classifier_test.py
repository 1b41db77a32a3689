"""Classifier training: separates a small corpus, deterministic, held out."""

import dataclasses

import numpy as np
import pytest

from codeagent_rl import samples as samples_lib
from codeagent_rl.anticheat import names
from codeagent_rl.anticheat import stage1
from codeagent_rl.anticheat.corpus import edge_cases
from codeagent_rl.anticheat.corpus import hacks
from codeagent_rl.anticheat.corpus import train_classifier
from codeagent_rl.tasks import schema

from ..conftest import default_config


def test_fit_separates_held_out_families():
  heldout = ("gcd",)
  tasks = hacks.synthetic_tasks(
    1, seed=2, families=("affine", "caesar", "running", "gcd")
  )
  samples = [
    s for s in hacks.corpus(tasks) if s.kind not in hacks.LATER_STAGE_KINDS
  ]
  x = train_classifier.featurize(samples)
  y = np.asarray([s.label for s in samples])
  test = np.asarray([s.family in heldout for s in samples])
  kw = dict(steps=300, learning_rate=0.05, l2=1e-3)
  params = train_classifier.fit(x[~test], y[~test], **kw)
  again = train_classifier.fit(x[~test], y[~test], **kw)
  np.testing.assert_array_equal(params.weights, again.weights)
  kinds = np.asarray([s.kind for s in samples])
  report = train_classifier.evaluate(params, x[test], y[test], kinds[test], 0.5)
  assert report["classifier"]["recall"] >= 0.9
  assert report["classifier"]["false_positive_rate"] <= 0.02
  # Runtime features never get weight.
  assert not np.asarray(params.weights)[~train_classifier.STATIC].any()


def test_stage1_metrics_count_only_enforced_flags():
  tasks = hacks.synthetic_tasks(1, seed=2, families=("affine",))
  samples = hacks.hack_samples(tasks[0], ["special_casing", "early_exit"])
  x = train_classifier.featurize(samples)
  y = np.asarray([s.label for s in samples])
  kinds = [s.kind for s in samples]
  # A classifier that never fires: only the rules can reject.
  never = stage1.Stage1Params.zeros().replace(bias=np.float32(-100.0))
  mask = default_config().enforced_mask
  enforced = train_classifier.evaluate(never, x, y, kinds, 0.5, mask)
  every = train_classifier.evaluate(never, x, y, kinds, 0.5)
  # hardcoded_tests is a feature now, process_exit still a rule.
  assert enforced["per_kind"]["special_casing"]["stage1_rate"] == 0.0
  assert every["per_kind"]["special_casing"]["stage1_rate"] == 1.0
  assert enforced["per_kind"]["early_exit"]["stage1_rate"] == 1.0


def test_humaneval_samples_and_held_out_problems():
  task = edge_cases.HONEST[0].task
  he = [
    dataclasses.replace(task, task_id=f"HumanEval/{i}") for i in (0, 3, 5, 7)
  ]
  samples = train_classifier.humaneval_samples(he)
  assert [s.label for s in samples] == [0] * 4
  assert {s.kind for s in samples} == {train_classifier.HUMANEVAL_KIND}
  assert [s.code for s in samples] == [t.reference_solution for t in he]
  held = train_classifier.heldout_groups(samples, 5)
  assert held == {
    *train_classifier.heldout_families(5),
    "HumanEval/0",
    "HumanEval/5",
  }
  assert [train_classifier.group_of(s) for s in samples] == [
    t.task_id for t in he
  ]


def test_observations_are_played_in_the_sandbox(process_pool):
  task = hacks.synthetic_tasks(1, seed=2, families=("affine",))[0]
  ref = task.reference_solution
  passing = hacks.Sample(
    task, ref, (("run", ref),) * 3 + (("submit", ref),), 0, "honest", "runs"
  )
  samples = [
    passing,
    *hacks.hack_samples(task, ["failing_loop"]),
    *hacks.honest_samples(task)[:1],
  ]
  observations = train_classifier.play_observations(process_pool, samples, 400)
  for sample, obs in zip(samples, observations, strict=True):
    if len(sample.actions) == 1:
      assert obs is None
      continue
    assert len(obs) == len(sample.actions) and obs[-1] is None
    assert all(o.startswith("tests: ") for o in obs[:-1]), obs
  loop = names.FEATURE_INDEX["failing_loop"]
  seen = train_classifier.featurize(samples, observations)[:, loop]
  blind = train_classifier.featurize(samples)[:, loop]
  # Runs that passed are no failing loop; unseen, every repeat counts.
  assert seen[0] == 0.0 and blind[0] == 1.0
  assert (seen[1:4] == 1.0).all()


def test_model_samples_keep_solved_distinct_trajectories(
  process_pool, tmp_path
):
  task = hacks.synthetic_tasks(1, seed=3, families=("affine",))[0]
  honest = task.reference_solution
  wrong = honest.replace("return", "return 1 +", 1)
  run_text = f"<run>{wrong}</run>"
  lines = [
    # A run that failed, then the reference: solved, with what it saw.
    {
      "task_id": task.task_id,
      "completion": honest,
      "trajectory": [run_text, f"<submit>{honest}</submit>"],
      "observations": ["tests: 0/2 passed", None],
      "mode": "sampled",
    },
    # The same trajectory again (another sample): kept once.
    {
      "task_id": task.task_id,
      "completion": honest,
      "trajectory": [run_text, f"<submit>{honest}</submit>"],
      "observations": ["tests: 0/2 passed", None],
    },
    # Wrong code, a format error, and an episode that never submitted.
    {"task_id": task.task_id, "completion": wrong},
    {
      "task_id": task.task_id,
      "completion": honest,
      "trajectory": ["no tags here", f"<submit>{honest}</submit>"],
      "observations": ["format error", None],
    },
    {"task_id": task.task_id, "completion": "", "trajectory": [run_text]},
  ]
  schema.write_tasks(tmp_path / train_classifier.RUN_TASKS, [task])
  samples_lib.write_samples(tmp_path / train_classifier.RUN_SAMPLES, lines)
  samples, observations = train_classifier.model_samples(
    process_pool, [str(tmp_path)]
  )
  assert [s.kind for s in samples] == [train_classifier.MODEL_KIND] * 2
  assert [s.label for s in samples] == [0, 0]
  assert observations == [("tests: 0/2 passed", None), ("format error", None)]
  assert train_classifier.group_of(samples[0]) == task.metadata["family"]
  x = train_classifier.featurize(samples, observations)
  index = names.FEATURE_INDEX
  assert x[0, index["log_runs"]] > 0 and x[1, index["log_format_errors"]] > 0
  missing = tmp_path / "none"
  with pytest.raises(OSError, match=str(missing)):
    train_classifier.model_samples(process_pool, [str(missing)])
