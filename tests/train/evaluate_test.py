"""Held-out evaluation: one greedy episode per task, k sampled ones."""

import math
import types

import jax
import numpy as np
import pytest

from codeagent_rl.anticheat import config as anticheat_config
from codeagent_rl.anticheat import pipeline
from codeagent_rl.envs import code_env
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.rollout import agent_loop
from codeagent_rl.rollout import continuous
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.sandbox import harness
from codeagent_rl.status import JobStatus
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import experiment as exp_lib
from configs import common
from configs import tiny
from tests.helpers import envs

SANDBOX = sandbox_config.SandboxConfig(
  backend="process", pool_size=2, timeout_s=4.0, test_timeout_s=1.0
)
TASKS = 3
SAMPLES = 3


def _exp(samples_per_task: int) -> exp_lib.Experiment:
  config = tiny.get_config("smoke")
  config.data.num_eval_tasks = TASKS
  config.eval.samples_per_task = samples_per_task
  # Short actions: an untrained model never stops on its own.
  config.env.max_tokens_per_turn = 24
  config.model.num_layers = 1
  return exp_lib.Experiment.from_config(config)


def test_sampled_mode_runs_every_task_k_times_with_distinct_samples(
  monkeypatch,
):
  exp = _exp(SAMPLES)
  mesh, rules = exp.make_mesh()
  with sharding.axis_rules(mesh, rules):
    actor, _ = state_lib.create_train_states(
      exp.model, exp.optim, mesh, rules, jax.random.key(0)
    )
  tasks = data_lib.make_task_sets(exp.data, exp.seed).eval
  assert len(tasks) == TASKS
  seen = []
  real_collect = agent_loop.collect

  def spy(env, policy, chunk, groups, rng):
    rollout = real_collect(env, policy, chunk, groups, rng)
    seen.append((list(chunk), rollout))
    return rollout

  monkeypatch.setattr(agent_loop, "collect", spy)
  with harness.SandboxPool(SANDBOX) as pool:
    env = code_env.CodeEnv(pool, exp.conversation, exp.env)
    evaluator = eval_lib.Evaluator(exp, env, tasks, batch_size=4)
    out = evaluator(actor.params, jax.random.key(1))
  assert out["eval/greedy/episodes"] == TASKS
  assert out["eval/sampled/episodes"] == TASKS * SAMPLES
  assert 0.0 <= out["eval/sampled/pass_ab"] <= out["eval/sampled/pass_a"]
  # Greedy (first) covers each task once; sampled, each SAMPLES times.
  ids = [t.task_id for chunk, _ in seen for t in chunk]
  greedy, sampled = ids[:TASKS], ids[TASKS:]
  assert sorted(greedy) == sorted(t.task_id for t in tasks)
  assert sorted(sampled) == sorted(
    t.task_id for t in tasks for _ in range(SAMPLES)
  )
  # The copies of one task are separate samples, not one episode repeated.
  rows = {}
  for chunk, rollout in seen[-(-TASKS // 4) :]:
    for i, task in enumerate(chunk):
      length = int(rollout.batch.length[i])
      row = np.asarray(rollout.batch.tokens[i])[:length]
      rows.setdefault(task.task_id, []).append(row.tobytes())
  assert all(len(v) == SAMPLES for v in rows.values()), rows.keys()
  assert all(len(set(v)) > 1 for v in rows.values())
  # Per-task rates of this call: every task once, averaging to the scalars.
  per_task = evaluator.last_per_task
  assert set(per_task) == {"greedy", "sampled"}
  for mode, rates in per_task.items():
    assert sorted(rates["task_id"]) == sorted(t.task_id for t in tasks)
    for name in ("pass_a", "pass_ab"):
      assert np.mean(rates[name]) == pytest.approx(out[f"eval/{mode}/{name}"])
  assert all(
    r * SAMPLES == int(r * SAMPLES) for r in per_task["sampled"]["pass_a"]
  )


def test_slot_refill_evaluates_every_episode_once_and_greedy_as_lockstep(
  monkeypatch,
):
  calls = []
  real = continuous.collect

  def spy(env, policy, tasks, groups, rng, *, slots, stopper=None, **kw):
    calls.append((len(tasks), slots))
    return real(
      env, policy, tasks, groups, rng, slots=slots, stopper=stopper, **kw
    )

  monkeypatch.setattr(continuous, "collect", spy)
  exp = _exp(2)
  mesh, rules = exp.make_mesh()
  with sharding.axis_rules(mesh, rules):
    actor, _ = state_lib.create_train_states(
      exp.model, exp.optim, mesh, rules, jax.random.key(0)
    )
  tasks = data_lib.make_task_sets(exp.data, exp.seed).eval
  with harness.SandboxPool(SANDBOX) as pool:
    env = code_env.CodeEnv(pool, exp.conversation, exp.env)
    lockstep = eval_lib.Evaluator(exp, env, tasks, batch_size=4)
    refill = eval_lib.Evaluator(exp, env, tasks, batch_size=4, slots=2)
    a = lockstep(actor.params, jax.random.key(1))
    b = refill(actor.params, jax.random.key(1))
    with pytest.raises(ValueError, match="slots"):
      eval_lib.Evaluator(exp, env, tasks, batch_size=4, slots=-1)
  assert b["eval/sampled/episodes"] == TASKS * 2
  assert calls == [(TASKS, 2), (TASKS * 2, 2)]  # greedy, then sampled
  assert sorted(refill.last_per_task["sampled"]["task_id"]) == sorted(
    t.task_id for t in tasks
  )
  # Greedy draws no keys: the same episodes, whichever loop ran them.
  greedy_a = [
    [t.action_text for t in e.turns] for e in lockstep.last_episodes["greedy"]
  ]
  greedy_b = [
    [t.action_text for t in e.turns] for e in refill.last_episodes["greedy"]
  ]
  assert greedy_a == greedy_b
  assert a["eval/greedy/pass_a"] == b["eval/greedy/pass_a"]


def _episode(task_id, a_passed, b_passed, b_total=3, outcome=None):
  if outcome is None:
    outcome = code_env.Outcome(
      status=JobStatus.OK,
      executed=True,
      suite_a_passed=a_passed,
      suite_a_total=2,
      suite_b_passed=b_passed,
      suite_b_total=b_total,
    )
  return types.SimpleNamespace(
    task=types.SimpleNamespace(task_id=task_id),
    outcome=outcome,
    turns=(None,),
    final_code="x",
  )


def test_per_task_rates_count_each_tasks_samples():
  episodes = [
    _episode("t1", 2, 3),  # passes A and B
    _episode("t0", 2, 2),  # passes A only
    _episode("t1", 1, 3),  # fails A
    _episode("t0", 2, 3),
    _episode("t1", 2, 3),
    _episode("t0", 0, 0),
  ]
  rates = eval_lib.per_task_rates(episodes, np.zeros(len(episodes), bool))
  assert rates == {
    "task_id": ["t1", "t0"],
    "pass_a": [2 / 3, 2 / 3],
    "pass_ab": [2 / 3, 1 / 3],
  }


def _rejection_cases():
  """Episodes of one task and their stage-1 verdicts; 2 of 6 are solved."""
  cases = [
    (_episode("t", 2, 3), False),  # solved on A and B
    (_episode("t", 2, 3), True),  # passed everything, rejected after
    # Rejected before execution (the pre-submit gate): 0 of 0 tests.
    (_episode("t", 0, 0, outcome=code_env.Outcome.not_executed("gate")), True),
    # Cut by a budget: no submission ran.
    (_episode("t", 0, 0, outcome=code_env.Outcome.not_executed()), False),
    (_episode("t", 2, 0, b_total=0), False),  # no suite B: solved on A and B
    (_episode("t", 1, 0, b_total=0), False),  # no suite B, fails A
  ]
  return [e for e, _ in cases], np.asarray([r for _, r in cases])


def test_rejected_and_unrun_episodes_are_never_solved():
  episodes, rejected = _rejection_cases()
  rates = eval_lib.per_task_rates(episodes, rejected)
  assert rates == {"task_id": ["t"], "pass_a": [2 / 6], "pass_ab": [2 / 6]}
  solved = [
    eval_lib.solved_a(e.outcome, r)
    for e, r in zip(episodes, rejected, strict=True)
  ]
  assert solved == [True, False, False, False, True, False]
  # Accepted, the same outcomes would count once more (the second one).
  rates = eval_lib.per_task_rates(episodes, np.zeros(len(episodes), bool))
  assert rates["pass_a"] == [3 / 6]
  rollout = types.SimpleNamespace(
    episodes=episodes,
    batch=types.SimpleNamespace(
      length=np.full(len(episodes), 10), truncated=np.zeros(len(episodes))
    ),
  )
  scalars = eval_lib.episode_scalars(rollout, rejected)
  assert scalars["pass_a"] == pytest.approx(2 / 6)
  assert scalars["pass_ab"] == pytest.approx(2 / 6)
  assert scalars["rejected"] == pytest.approx(2 / 6)
  with pytest.raises(ValueError, match="one per episode"):
    eval_lib.episode_scalars(rollout, rejected[:-1])


def test_stage1_rejects_finished_episodes_that_passed_every_test():
  # As in the evaluation: no pre-submit gate, so both submissions run.
  correct = "def add(a, b):\n  return a + b\n"
  hardcoded = (
    "def add(a, b):\n  if (a, b) == (1, 2):\n    return 3\n  return a + b\n"
  )
  anticheat = pipeline.AntiCheat.from_config(
    anticheat_config.AntiCheatConfig.from_config(common.get_anticheat_config())
  )
  budgets = envs.budgets(max_turns=2)
  task = envs.add_task(
    hidden=[(a, 1) for a in range(4)], heldout=[(a, 5) for a in range(4)]
  )
  with harness.SandboxPool(SANDBOX) as pool:
    env = code_env.CodeEnv(pool, tokenizer_lib.ByteTokenizer(), budgets)
    states = env.step_many(
      [env.reset(task), env.reset(task)],
      [f"<submit>{correct}</submit>", f"<submit>{hardcoded}</submit>"],
    )
  episodes = [state for state, _ in states]
  for episode in episodes:
    o = episode.outcome
    assert o.executed and o.suite_a_passed == o.suite_a_total == 4
    assert o.suite_b_passed == o.suite_b_total == 4
  rejected = eval_lib.stage1_rejected(anticheat, episodes)
  assert rejected.tolist() == [False, True]
  rates = eval_lib.per_task_rates(episodes, rejected)
  assert rates == {"task_id": ["add"], "pass_a": [0.5], "pass_ab": [0.5]}


def test_paired_difference_by_hand():
  before = {"task_id": ["a", "b", "c", "d"], "pass_ab": [0.0, 0.5, 1.0, 0.25]}
  # Another order, and a task ("e") the first model did not run.
  after = {
    "task_id": ["d", "c", "b", "a", "e"],
    "pass_ab": [0.25, 0.75, 1.0, 0.5, 1.0],
  }
  d = eval_lib.paired_difference(before, after)
  # Differences a +0.5, b +0.5, c -0.25, d 0: mean 0.1875; sample std
  # sqrt(((0.3125^2) * 2 + 0.4375^2 + 0.1875^2) / 3) = 0.375.
  assert d["tasks"] == 4
  assert d["mean"] == pytest.approx(0.1875)
  assert d["se"] == pytest.approx(0.375 / 2)
  assert (d["up"], d["down"]) == (2, 1)
  one = eval_lib.paired_difference(
    {"task_id": ["a"], "pass_ab": [0.0]}, {"task_id": ["a"], "pass_ab": [1.0]}
  )
  assert one["mean"] == 1.0 and math.isnan(one["se"])
  assert (
    eval_lib.paired_difference(before, {"task_id": [], "pass_ab": []}) is None
  )
