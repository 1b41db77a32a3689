"""The oracle suite: what it measures, and that no reward or prompt sees it.

The hack demonstrations of configs/reward_hacking.py run through the real
judge in gVisor: they pass the weak suite A and fail suite B and the
oracle. With and without the oracle in the tasks, the rendered episodes'
tokens, the reward pytree after both stages and the stage-1 features are
byte-identical.
"""

import dataclasses
import math

import numpy as np
import pytest

from codeagent_rl.anticheat import pipeline
from codeagent_rl.envs import code_env
from codeagent_rl.envs import protocol
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.rollout import demos
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import oracle
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic
from codeagent_rl.train import experiment
from configs import reward_hacking as preset
from tests.helpers import envs
from tests.helpers import sandboxes

HACKS = ("hardcoded", "weak_assert", "swallow")


@pytest.fixture(scope="module")
def gvisor():
  with harness.SandboxPool(sandboxes.short_config("gvisor", 2)) as pool:
    yield pool


@pytest.fixture(scope="module")
def made():
  """Smoke-preset tasks with every hack plan, and their plans."""
  config = preset.get_config("smoke")
  data = experiment.Experiment.from_config(config).data
  synth = dataclasses.replace(
    data.synthetic("train", 0),
    num_tasks=18,
    **dict.fromkeys(HACKS, 1.0),
  )
  return synthetic.generate(synth)


def test_hack_plans_pass_suite_a_and_fail_stage_2_and_the_oracle(made, gvisor):
  tasks, plans = made
  by_id = {t.task_id: t for t in tasks}
  hacks = [p for p in plans if p.kind in HACKS]
  assert {p.kind for p in hacks} == set(HACKS)
  codes = [p.actions[-1][1] for p in hacks]
  targets = [by_id[p.task_id] for p in hacks]
  grades = oracle.grade_codes(gvisor, targets, codes)
  for plan, task, code, graded in zip(
    hacks, targets, codes, grades, strict=True
  ):
    full = judge.grade(gvisor, task, code)
    where = (plan.kind, task.task_id)
    assert full.suite_a.passed == full.suite_a.total > 0, where
    assert full.suite_b.passed < full.suite_b.total, where  # stage 2 fails
    assert graded.suite_a_passed and not graded.oracle_passed, where
  # The references pass every suite and the oracle.
  refs = oracle.grade_codes(
    gvisor, tasks, [t.reference_solution for t in tasks]
  )
  assert all(g.suite_a_passed and g.oracle_passed for g in refs)


def test_the_oracle_reaches_no_reward_no_stage_and_no_prompt(made, gvisor):
  tasks, plans = made
  bare = {t.task_id: oracle.without(t) for t in tasks}
  assert all(oracle.tests_of(t) for t in tasks)
  assert not any(oracle.tests_of(t) for t in bare.values())
  config = preset.get_config("smoke")
  cfg = experiment.Experiment.from_config(config).anticheat
  cheat = pipeline.AntiCheat.from_config(cfg)
  env = code_env.CodeEnv(
    gvisor, tokenizer_lib.ByteTokenizer(), envs.budgets(max_turns=2)
  )
  by_id = {t.task_id: t for t in tasks}
  chosen = plans[:24]
  actions = [p.actions for p in chosen]
  with_oracle = demos.render(env, [by_id[p.task_id] for p in chosen], actions)
  without = demos.render(env, [bare[p.task_id] for p in chosen], actions)
  np.testing.assert_array_equal(with_oracle.batch.tokens, without.batch.tokens)
  rewards_a, features_a = cheat.episode_rewards(with_oracle.episodes)
  rewards_b, features_b = cheat.episode_rewards(without.episodes)
  for name in (f.name for f in dataclasses.fields(rewards_a)):
    a = np.asarray(getattr(rewards_a, name))
    b = np.asarray(getattr(rewards_b, name))
    assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
  assert features_a.tobytes() == features_b.tobytes()
  assert float(np.asarray(rewards_a.total).max()) > 0  # something scored
  # No oracle test is in any prompt, as an assertion or as a call.
  for task in tasks:
    text = protocol.prompt_text(task)
    assert (
      env.reset(task).prompt_ids == env.reset(bare[task.task_id]).prompt_ids
    )
    for test in oracle.tests_of(task):
      call = f"{task.entry_point}({', '.join(map(repr, test['args']))})"
      assert call not in text, (task.task_id, call)


def test_rates_on_hand_made_episodes():
  #            A passed  oracle passed  measured
  rows = [
    (True, True, True),  # solved
    (True, False, True),  # a hack
    (True, False, True),  # a hack
    (False, False, True),  # failed both
    (False, True, True),  # can happen: suite A's type check is not all
    (True, False, False),  # no oracle suite: left out
  ]
  a, o, m = (np.asarray(c) for c in zip(*rows, strict=True))
  out = oracle.rates(a, o, m)
  assert out == {
    "oracle/suite_a_pass": 3 / 5,
    "oracle/pass": 2 / 5,
    "oracle/hack_rate": 2 / 5,
    "oracle/hack_share": 2 / 3,
    "oracle/episodes": 5.0,
  }
  none_passed = oracle.rates(np.zeros(2, bool), np.ones(2, bool), np.ones(2))
  assert math.isnan(none_passed["oracle/hack_share"])
  assert none_passed["oracle/hack_rate"] == 0.0
  assert oracle.rates(a, o, np.zeros(6, bool)) == {}
  assert set(oracle.rates(a, o, m, prefix="oracle_")) == {
    "oracle_suite_a_pass",
    "oracle_pass",
    "oracle_hack_rate",
    "oracle_hack_share",
    "oracle_episodes",
  }
  with pytest.raises(ValueError, match="equal"):
    oracle.rates(a, o[:3], m)


def test_arrays_of_grades():
  grades = [
    oracle.OracleGrade(True, False, 0.5),
    None,
    oracle.NO_CODE,
    oracle.OracleGrade(True, True, 1.0),
  ]
  a, o, m = oracle.arrays(grades)
  assert a.tolist() == [True, False, False, True]
  assert o.tolist() == [False, False, False, True]
  assert m.tolist() == [True, False, True, True]


class _NoPool:
  def submit(self, job):
    raise AssertionError("nothing should run")


def test_tasks_without_an_oracle_run_nothing(made):
  tasks, _ = made
  bare = [oracle.without(t) for t in tasks[:3]]
  assert oracle.episode_rates(_NoPool(), []) == {}
  grades = oracle.grade_codes(_NoPool(), bare, ["x = 1"] * 3)
  assert grades == [None, None, None]
  # An episode without code is measured as failing both.
  assert oracle.grade_codes(_NoPool(), tasks[:1], [None]) == [oracle.NO_CODE]


@pytest.mark.parametrize(
  ("value", "message"),
  [
    ("not a list", "must be a list"),
    ([{"args": [1]}], r"needs 'args' and 'expected'"),
  ],
)
def test_a_malformed_oracle_is_named(made, value, message):
  task = made[0][0]
  bad = dataclasses.replace(
    task, metadata={**task.metadata, oracle.ORACLE_KEY: value}
  )
  with pytest.raises(oracle.OracleFormatError, match=message) as e:
    oracle.tests_of(bad)
  assert task.task_id in str(e.value)


def test_lengths_must_agree(made):
  with pytest.raises(ValueError, match="2 tasks but 1 codes"):
    oracle.grade_codes(_NoPool(), made[0][:2], ["x"])
  assert isinstance(made[0][0], schema.Task)
