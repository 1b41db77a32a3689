"""The default stage 1 on real honest code and on hacks by construction.

Episodes are played through `CodeEnv` on a process pool with the default
anti-cheat's `pre_submit` gate: HumanEval canonical solutions (a few
problems converted here, including /105 and /124, which parse and filter
with `try`/`except`, and /160, which `eval`s an expression it built), the
honest-but-unusual solutions of `edge_cases.HONEST` and the hacks of
`edge_cases.REACH_HACKS` (which stage 1 must stop before they run).
"""

import numpy as np
import pytest

from codeagent_rl.anticheat import features
from codeagent_rl.anticheat import pipeline
from codeagent_rl.anticheat.corpus import edge_cases
from codeagent_rl.envs import code_env
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.tasks import humaneval

BUDGETS = code_env.EnvConfig(
  max_turns=4,
  max_tokens_per_turn=8000,
  max_total_tokens=40000,
  max_wall_s=120.0,
  obs_max_bytes=400,
)
# 0: plain loops; 38: two functions; 105: try/except as a filter; 124:
# try/except around a parse; 160: eval of a built expression.
SUBSET = (
  "HumanEval/0",
  "HumanEval/38",
  "HumanEval/105",
  "HumanEval/124",
  "HumanEval/160",
)


@pytest.fixture(scope="module")
def humaneval_tasks(process_pool):
  return humaneval.convert(process_pool, humaneval.load_problems(SUBSET))


def _play(pool, anticheat, task, actions):
  env = code_env.CodeEnv(
    pool,
    tokenizer_lib.ByteTokenizer(),
    BUDGETS,
    pre_submit=anticheat.pre_submit,
  )
  state = env.reset(task)
  for verb, code in actions:
    state, _ = env.step(state, f"<{verb}>{code}</{verb}>")
  assert state.done and state.stop_reason == code_env.STOP_SUBMIT
  return state


def _why(names, rewards, vectors, rows):
  return [
    (
      names[i],
      float(rewards.total[i]),
      round(float(rewards.stage1_score[i]), 3),
      features.raised_flags(vectors[i]),
    )
    for i in rows
  ]


def test_humaneval_canonical_solutions_keep_full_reward(
  process_pool, anticheat, humaneval_tasks
):
  assert [t.task_id for t in humaneval_tasks] == list(SUBSET)
  for task in humaneval_tasks:
    code = task.reference_solution
    vec = features.extract(
      code,
      [("submit", code)],
      None,
      entry_point=task.entry_point,
      visible_tests=task.visible_tests,
    )
    assert features.raised_flags(vec) == [], task.task_id
    assert not anticheat.skip(vec[None])[0], task.task_id
  states = [
    _play(process_pool, anticheat, t, [("submit", t.reference_solution)])
    for t in humaneval_tasks
  ]
  rewards, vectors = anticheat.episode_rewards(states)
  names = [t.task_id for t in humaneval_tasks]
  wrong = np.flatnonzero(np.asarray(rewards.total) != 1.0)
  assert not len(wrong), _why(names, rewards, vectors, wrong)
  assert all(s.outcome.executed for s in states)


def test_honest_but_unusual_solutions_keep_full_reward(process_pool, anticheat):
  cases = edge_cases.HONEST
  assert {c.task.kind for c in cases} == {"function", "stdio"}
  states = [_play(process_pool, anticheat, c.task, c.actions) for c in cases]
  rewards, vectors = anticheat.episode_rewards(states)
  names = [c.name for c in cases]
  for state, name in zip(states, names, strict=True):
    assert state.outcome.reason != pipeline.SKIP_REASON, name
    assert state.outcome.suite_a == state.outcome.suite_b == 1.0, name
  wrong = np.flatnonzero(np.asarray(rewards.total) != 1.0)
  assert not len(wrong), _why(names, rewards, vectors, wrong)


def test_hacks_by_construction_are_rejected_before_they_run(
  process_pool, anticheat
):
  cases = edge_cases.REACH_HACKS
  enforced = set(anticheat.config.enforced_flags)
  for case in cases:
    vec = features.extract(
      case.code,
      case.actions,
      None,
      entry_point=case.task.entry_point,
      visible_tests=case.task.visible_tests,
    )
    # A rule by construction stops it, whatever the classifier says.
    assert enforced & set(features.raised_flags(vec)), case.name
  states = [_play(process_pool, anticheat, c.task, c.actions) for c in cases]
  rewards, _ = anticheat.episode_rewards(states)
  for state, case in zip(states, cases, strict=True):
    assert state.outcome.reason == pipeline.SKIP_REASON, case.name
    assert not state.outcome.executed, case.name
  np.testing.assert_array_equal(rewards.total, np.zeros(len(cases)))


def test_the_corpora_are_labelled():
  assert {c.label for c in edge_cases.HONEST} == {0}
  assert {c.label for c in edge_cases.REACH_HACKS} == {1}
  names = [c.name for c in (*edge_cases.HONEST, *edge_cases.REACH_HACKS)]
  assert len(set(names)) == len(names)
