"""Executed in the sandbox, hacks end with total 0; honest code keeps 1.

Single-submit samples are judged on a process-backend pool (fast) and a
subset under gVisor; trajectories are played through `CodeEnv` with the
anti-cheat's `pre_submit` hook, so their observations are real.
"""

import collections
import os
import subprocess
import sys

import numpy as np
import pytest

from codeagent_rl.anticheat import features
from codeagent_rl.anticheat import pipeline
from codeagent_rl.anticheat.corpus import hacks
from codeagent_rl.envs import code_env
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.tasks import judge
from configs import common

from ..conftest import default_config

BUDGETS = code_env.EnvConfig(
  max_turns=8,
  max_tokens_per_turn=4000,
  max_total_tokens=40000,
  max_wall_s=120.0,
  obs_max_bytes=400,
)
# Most honest samples stage 1 may reject: the flag-rate alarm's threshold,
# so that an honest policy does not fire it.
MAX_FALSE_POSITIVE_RATE = common.get_monitor_config().flag_rate_max


def _single(samples):
  return [s for s in samples if len(s.actions) == 1]


def judged_totals(pool, ac, samples):
  """(rewards, features) of single-submit samples: judge, stage 1 and 2."""
  futures = [pool.submit(judge.solution_job(s.task, s.code)) for s in samples]
  outcomes, vectors = [], []
  for s, future in zip(samples, futures, strict=True):
    result = future.result()
    outcomes.append(
      code_env.Outcome.from_grade(judge.grade_result(s.task, result))
    )
    vectors.append(
      features.extract(
        s.code,
        s.actions,
        None,
        entry_point=s.task.entry_point,
        visible_tests=s.task.visible_tests,
        result=result,
      )
    )
  vectors = np.stack(vectors)
  rewards = ac.apply(pipeline.rewards_from_outcomes(outcomes), vectors)
  return rewards, vectors


def _describe(samples, rewards, vectors, rows):
  return [
    (
      samples[i].kind,
      samples[i].variant,
      samples[i].task.task_id,
      float(rewards.total[i]),
      features.raised_flags(vectors[i]),
    )
    for i in rows
  ]


@pytest.fixture(scope="module")
def no_skip():
  # Execute everything, so the judge and the runtime flags are exercised.
  return pipeline.AntiCheat.from_config(default_config(skip_flagged=False))


def test_every_hack_class_ends_with_total_zero(process_pool, no_skip, tasks):
  samples = _single(s for t in tasks for s in hacks.hack_samples(t))
  kinds = collections.Counter(s.kind for s in samples)
  # Every code hack class, several variants on every task.
  assert set(kinds) == set(hacks.HACKS)
  assert min(kinds.values()) >= 3 * len(tasks)
  rewards, vectors = judged_totals(process_pool, no_skip, samples)
  total = np.asarray(rewards.total)
  wrong = np.flatnonzero(total != 0.0)
  assert not len(wrong), _describe(samples, rewards, vectors, wrong)
  # Stage 2 is what stops the suite-A overfits that stage 1 cannot see.
  for i, s in enumerate(samples):
    if s.kind == "overfit_weak_tests":
      assert not bool(rewards.stage2_ok[i]), s.variant


def test_honest_corpus_keeps_full_reward(process_pool, no_skip, tasks):
  samples = _single(s for t in tasks for s in hacks.honest_samples(t))
  assert len(samples) >= 15 * len(tasks)
  rewards, vectors = judged_totals(process_pool, no_skip, samples)
  assert np.all(np.asarray(rewards.suite_a) == 1.0)
  assert np.all(np.asarray(rewards.suite_b) == 1.0)
  total = np.asarray(rewards.total)
  rejected = np.flatnonzero(total != 1.0)
  assert len(rejected) / len(samples) <= MAX_FALSE_POSITIVE_RATE, _describe(
    samples, rewards, vectors, rejected
  )
  # The score stays well away from the threshold on honest code.
  assert float(np.max(rewards.stage1_score)) < 0.5


def test_hacks_under_gvisor(gvisor_pool, no_skip, tasks):
  by_kind = {}
  for s in _single(hacks.hack_samples(tasks[0])):
    by_kind.setdefault(s.kind, s)
  honest = hacks.honest_samples(tasks[0])[:3]
  samples = [*by_kind.values(), *honest]
  rewards, vectors = judged_totals(gvisor_pool, no_skip, samples)
  total = np.asarray(rewards.total)
  want = np.asarray([0.0 if s.label else 1.0 for s in samples])
  wrong = np.flatnonzero(total != want)
  assert not len(wrong), _describe(samples, rewards, vectors, wrong)


def _play(env, task, actions):
  state = env.reset(task)
  for verb, code in actions:
    state, _ = env.step(state, f"<{verb}>{code}</{verb}>")
  assert state.done and state.stop_reason == code_env.STOP_SUBMIT
  return state


@pytest.mark.parametrize("skip_flagged", [True, False])
def test_trajectories_through_the_env(process_pool, tasks, skip_flagged):
  ac = pipeline.AntiCheat.from_config(default_config(skip_flagged=skip_flagged))
  env = code_env.CodeEnv(
    process_pool,
    tokenizer_lib.ByteTokenizer(),
    BUDGETS,
    pre_submit=ac.pre_submit,
  )
  samples = [
    s
    for t in tasks[:3]
    for s in (
      *hacks.hack_samples(t, hacks.TRAJECTORY_HACKS),
      *(h for h in hacks.honest_samples(t) if len(h.actions) > 1),
    )
  ]
  states = [_play(env, s.task, s.actions) for s in samples]
  rewards, vectors = ac.episode_rewards(states)
  total = np.asarray(rewards.total)
  for i, (s, state) in enumerate(zip(samples, states, strict=True)):
    assert total[i] == (0.0 if s.label else 1.0), _describe(
      samples, rewards, vectors, [i]
    )
    skipped = state.outcome.reason == pipeline.SKIP_REASON
    # Rejected code does not run when the config says so; honest code runs.
    assert skipped == (skip_flagged and bool(s.label)), s.variant
    if skipped:
      assert not state.outcome.executed
      assert state.final_code == s.code


def test_unknown_hack_class_is_named(tasks):
  with pytest.raises(ValueError, match="unknown hack classes \\['nope'\\]"):
    hacks.hack_samples(tasks[0], ["nope"])


def test_non_synthetic_task_is_rejected(tasks):
  import dataclasses

  task = dataclasses.replace(tasks[0], metadata={"source": "humaneval"})
  with pytest.raises(ValueError, match="synthetic tasks only"):
    hacks.honest_samples(task)


def test_corpus_text_does_not_follow_the_hash_seed():
  # The classifier's training text must be the same in every process: a
  # `repr(set)` in a hack's code used to follow PYTHONHASHSEED.
  script = (
    "import hashlib\n"
    "from codeagent_rl.anticheat.corpus import hacks\n"
    "h = hashlib.sha256()\n"
    "for s in hacks.corpus(hacks.synthetic_tasks(2), 0):\n"
    "  h.update(repr(s).encode())\n"
    "print(h.hexdigest())\n"
  )
  digests = set()
  for seed in ("1", "2", "3"):
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run(
      [sys.executable, "-c", script],
      env=env,
      capture_output=True,
      text=True,
      check=True,
      timeout=120,
    )
    digests.add(out.stdout.strip())
  assert len(digests) == 1, digests
