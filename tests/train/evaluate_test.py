"""Held-out evaluation: one greedy episode per task, k sampled ones."""

import jax
import numpy as np

from codeagent_rl.envs import code_env
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.rollout import agent_loop
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.sandbox import harness
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import experiment as exp_lib
from configs import tiny

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
    env = code_env.CodeEnv(pool, exp.tokenizer(), exp.env)
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
