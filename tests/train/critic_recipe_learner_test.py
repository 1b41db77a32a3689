"""The critic's recipe through `ppo.Learner` and `ppo_loop.run_ppo`.

A test-aware critic leaves the actor's forwards untouched; dynamic sampling
draws rounds until groups with a reward spread fill the batch (or its cap),
and reports what it sampled; the pre-trained critic is saved and a resumed
run does not pre-train again.
"""

import dataclasses
import json

import jax
import numpy as np
import pytest

from codeagent_rl.anticheat import pipeline
from codeagent_rl.envs import code_env
from codeagent_rl.parallel import checkpoint as ckpt_lib
from codeagent_rl.rollout import agent_loop
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import dynamic_sampling
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import experiment
from codeagent_rl.train import keys
from codeagent_rl.train import metrics as metrics_lib
from codeagent_rl.train import ppo as ppo_lib
from codeagent_rl.train import ppo_loop
from codeagent_rl.train import workdir as workdir_lib
from configs import tiny
from tests.helpers import learner_steps
from tests.helpers import policies

BATCH, LENGTH, PROMPT = 8, 32, 8


def _config(**fields):
  config = tiny.get_config("smoke")
  config.ppo.minibatches = 1
  config.ppo.micro_batch_size = BATCH
  config.ppo.length_bucket = LENGTH
  config.model.num_layers = 1
  for dotted, value in fields.items():
    section, name = dotted.split("__")
    config[section][name] = value
  return config


def _learner(config):
  """A learner for `update` only."""
  exp = experiment.Experiment.from_config(config)
  return ppo_lib.Learner(exp, *exp.make_mesh())


def _iterating_learner(config, pool):
  """(A learner with an environment and anti-cheat, the train tasks)."""
  exp = experiment.Experiment.from_config(config)
  mesh, rules = exp.make_mesh()
  anticheat = pipeline.AntiCheat.from_config(exp.anticheat)
  env = code_env.CodeEnv(
    pool, exp.conversation, exp.env, pre_submit=anticheat.pre_submit
  )
  train = data_lib.make_task_sets(exp.data, exp.data_seed).train
  return ppo_lib.Learner(
    exp,
    mesh,
    rules,
    env=env,
    anticheat=anticheat,
    cache_len=agent_loop.cache_len_for(
      exp.env, data_lib.longest_prompt(env, train), exp.conversation
    ),
  ), train


_sft_params = learner_steps.actor_params_of


def test_a_test_aware_critic_leaves_the_actor_byte_identical():
  """The actor's forwards see the same ids and give the same log-probs."""
  train = data_lib.make_task_sets(
    experiment.Experiment.from_config(_config()).data, 0
  ).train
  tasks = [train[i // 4] for i in range(BATCH)]
  batch = policies.ragged_rollout(BATCH, LENGTH, PROMPT)
  total = np.asarray([0, 1, 0, 1, 1, 0, 0.5, 1], np.float32)
  seen = {}
  for mode in ("none", "tests"):
    learner = _learner(_config(critic__privileged=mode))
    calls = []
    log_probs = learner.log_probs

    def recording(params, tokens, valid, pack=None, calls=calls, fn=log_probs):
      out = fn(params, tokens, valid, pack=pack)
      calls.append(jax.device_get((tokens, valid, out)))
      return out

    learner.log_probs = recording
    values = learner.values
    value_calls = []

    def recording_values(*args, value_calls=value_calls, fn=values, **kw):
      out = fn(*args, **kw)
      value_calls.append((kw.get("prefix") is not None, jax.device_get(out)))
      return out

    learner.values = recording_values
    sft = _sft_params(learner)
    learner.ref_params = sft
    states = learner.initial_states(sft, jax.random.key(1))
    # A non-zero value head, so the prefix can change the values.
    critic = states[1].replace(
      params=jax.tree_util.tree_map_with_path(
        lambda p, x: x + 0.05 if "value_head" in str(p) else x,
        states[1].params,
      )
    )
    learner.update(
      (states[0], critic),
      batch,
      total,
      0,
      jax.random.key(3),
      metrics_lib.PhaseTimer(),
      tasks=tasks,
    )
    seen[mode] = (calls, value_calls)
  (plain, plain_values), (aware, aware_values) = seen["none"], seen["tests"]
  assert len(plain) == len(aware) >= 1
  for a, b in zip(plain, aware, strict=True):
    for x, y in zip(a, b, strict=True):
      np.testing.assert_array_equal(x, y)  # ids, validity, log-probs
  assert [p for p, _ in plain_values] == [False]
  assert [p for p, _ in aware_values] == [True]
  mask = batch.trainable[:, : plain_values[0][1][0].shape[1]]
  differ = np.abs(plain_values[0][1][0] - aware_values[0][1][0])[mask]
  assert differ.max() > 1e-4  # the critic read the tests


def test_a_test_aware_critic_needs_the_rows_tasks():
  learner = _learner(_config(critic__privileged="tests"))
  sft = _sft_params(learner)
  learner.ref_params = sft
  states = learner.initial_states(sft, jax.random.key(1))
  batch = policies.ragged_rollout(BATCH, LENGTH, PROMPT)
  with pytest.raises(ValueError, match="task of every row"):
    learner.update(
      states,
      batch,
      np.zeros(BATCH, np.float32),
      0,
      jax.random.key(3),
      metrics_lib.PhaseTimer(),
    )


@pytest.mark.parametrize(
  "fields,match",
  [
    (
      {"critic__privileged": "tests", "rl__advantage__estimator": "grpo"},
      "trains no critic",
    ),
    ({"critic__privileged": "hints"}, "critic.privileged='hints'"),
    (
      {"critic__privileged": "tests", "critic__privileged_max_tokens": 0},
      "privileged_max_tokens=0",
    ),
    (
      {"ppo__dynamic_sampling": True, "ppo__max_staleness": 1},
      "dynamic_sampling needs",
    ),
    ({"ppo__dynamic_sampling_max_rounds": 0}, "max_rounds=0"),
  ],
)
def test_bad_settings_are_named(fields, match):
  config = tiny.get_config("smoke")
  for dotted, value in fields.items():
    *path, name = dotted.split("__")
    section = config
    for part in path:
      section = section[part]
    section[name] = value
  with pytest.raises(ValueError, match=match):
    experiment.Experiment.from_config(config)


def _fake_rollout(seed, groups=(0, 0, 1, 1, 2, 2, 3, 3)):
  batch = policies.ragged_rollout(len(groups), LENGTH, PROMPT, seed=seed)
  batch = batch.replace(group_id=np.asarray(groups, np.int32))
  episodes = [f"episode {seed}/{i}" for i in range(len(groups))]
  return agent_loop.Rollout(batch, episodes, {"generate_s": 1.0, "env_s": 2.0})


def test_dynamic_sampling_keeps_groups_with_a_spread_in_order():
  first = _fake_rollout(0)
  first_total = np.asarray([1, 1, 0, 1, 0, 0, 1, 1], np.float32)  # group 1
  extra = {
    1: (_fake_rollout(1), [0, 0, 0, 0, 0, 0, 0, 0]),
    2: (_fake_rollout(2), [1, 0, 0.5, 0.5, 0, 1, 0, 0]),
  }
  asked = []

  def more(r):
    asked.append(r)
    rollout, total = extra[r]
    return rollout, np.asarray(total, np.float32)

  rollout, rounds = dynamic_sampling.sample(
    first, first_total, more, want=3, max_rounds=5
  )
  assert asked == [1, 2]  # stopped once three groups had a spread
  assert rounds.rounds == 3 and rounds.flat_groups_kept == 0
  assert rounds.episodes_sampled == 24
  assert rollout.episodes == [
    "episode 0/2",
    "episode 0/3",
    "episode 2/0",
    "episode 2/1",
    "episode 2/4",
    "episode 2/5",
  ]
  np.testing.assert_array_equal(rollout.batch.group_id, [0, 0, 1, 1, 2, 2])
  np.testing.assert_array_equal(
    rollout.batch.tokens[2], extra[2][0].batch.tokens[0]
  )
  assert rollout.timings == {"generate_s": 3.0, "env_s": 6.0}
  tokens = sum(
    int(r.batch.trainable.sum()) for r in (first, extra[1][0], extra[2][0])
  )
  assert rounds.tokens_sampled == tokens


def test_dynamic_sampling_fills_a_short_batch_with_flat_groups_at_the_cap():
  first = _fake_rollout(0)
  calls = []

  def more(r):
    calls.append(r)
    return _fake_rollout(r), np.zeros(8, np.float32)

  total = np.asarray([0, 0, 0, 0, 1, 0, 0, 0], np.float32)  # group 2
  rollout, rounds = dynamic_sampling.sample(
    first, total, more, want=2, max_rounds=3
  )
  assert calls == [1, 2] and rounds.rounds == 3
  assert rounds.flat_groups_kept == 1
  # The first flat group (round 0, group 0), then the one with a spread:
  # groups keep their sampling order.
  assert rollout.episodes == [
    "episode 0/0",
    "episode 0/1",
    "episode 0/4",
    "episode 0/5",
  ]
  one, _ = dynamic_sampling.sample(
    first, np.zeros(8, np.float32), more, want=4, max_rounds=1
  )
  assert one.episodes == first.episodes and calls == [1, 2]


def test_dynamic_sampling_in_an_iteration_and_the_sampling_budget(
  module_pool,
):
  """An untrained policy scores 0 everywhere: every round, flat groups."""
  learner, train = _iterating_learner(
    _config(ppo__dynamic_sampling=True, ppo__dynamic_sampling_max_rounds=2),
    module_pool,
  )
  exp = learner.exp
  sft = _sft_params(learner)
  learner.ref_params = sft
  prompts = data_lib.iteration_prompts(
    train, exp.seed, 0, exp.ppo.prompts_per_iteration
  )
  states = learner.initial_states(sft, keys.ppo_init(exp.seed))
  asked = []

  def more(r):
    asked.append(r)
    return ppo_loop._dynamic_round_prompts(train, exp, 0, r)  # noqa: SLF001

  collected = learner.collect(
    states[0].params,
    states[1],
    prompts,
    keys.ppo_iteration(exp.seed, 0),
    index=0,
    more_prompts=more,
  )
  rows = exp.ppo.rollouts_per_iteration
  scalars = collected.sampling_scalars
  assert np.ptp(collected.total) == 0  # a random policy solves nothing
  assert asked == [1]
  assert scalars["dynamic_sampling/rounds"] == 2
  assert scalars["dynamic_sampling/episodes_sampled"] == 2 * rows
  assert len(collected.rollout.episodes) == rows
  assert len(collected.solved) == rows == len(collected.total)
  _, metrics = learner.learn(
    states, collected, keys.ppo_iteration(exp.seed, 0), index=0
  )
  assert (
    metrics.scalars["sampling/episodes"]
    == (scalars["dynamic_sampling/episodes_sampled"])
  )
  assert (
    metrics.scalars["sampling/tokens"]
    == (scalars["dynamic_sampling/tokens_sampled"])
  )
  # The second round's prompts are drawn by their own salt.
  again = ppo_loop._dynamic_round_prompts(train, exp, 0, 1)  # noqa: SLF001
  assert [t.task_id for t in again] == [t.task_id for t in more(1)]


def test_the_pre_trained_critic_is_saved_and_not_pre_trained_again(
  module_pool, tmp_path
):
  learner, train = _iterating_learner(
    _config(
      ppo__value_pretrain_iterations=2,
      ppo__value_pretrain_patience=5,
    ),
    module_pool,
  )
  exp = learner.exp
  sft = _sft_params(learner)
  learner.ref_params = sft
  evaluator = eval_lib.Evaluator(exp, learner.env, train[:2], batch_size=2)
  lines = []
  common = dict(
    evaluator=evaluator,
    writer=metrics_lib.NullWriter(),
    console=lines.append,
  )
  ppo_loop.run_ppo(learner, train, sft, tmp_path, iterations=0, **common)
  assert [line.split("|")[0].strip() for line in lines] == [
    "value pretrain 1/2",
    "value pretrain 2/2",
  ]
  paths = workdir_lib.Workdir(tmp_path)
  assert len(paths.value_pretrain.read_text().splitlines()) == 2
  lines.clear()
  result = ppo_loop.run_ppo(
    learner, train, sft, tmp_path, iterations=0, **common
  )
  assert lines == [] and result.iterations_done == 0
  with ckpt_lib.Checkpointer(
    paths.checkpoints, dataclasses.replace(exp.checkpoint, async_save=False)
  ) as ckpt:
    assert ckpt.latest_step() == 0


def test_a_stopped_pre_training_keeps_the_rounds_it_did(module_pool, tmp_path):
  learner, train = _iterating_learner(
    _config(
      ppo__value_pretrain_iterations=3,
      ppo__value_pretrain_patience=5,
    ),
    module_pool,
  )
  sft = _sft_params(learner)
  learner.ref_params = sft
  real = learner.iteration
  calls = []

  def stopping(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
      raise KeyboardInterrupt  # the run is stopped in round 2
    return real(*args, **kwargs)

  learner.iteration = stopping
  with pytest.raises(KeyboardInterrupt):
    ppo_loop.run_ppo(
      learner,
      train,
      sft,
      tmp_path,
      iterations=0,
      evaluator=eval_lib.Evaluator(
        learner.exp, learner.env, train[:2], batch_size=2
      ),
      writer=metrics_lib.NullWriter(),
      console=lambda line: None,
    )
  saved = workdir_lib.Workdir(tmp_path).value_pretrain.read_text()
  rows = [json.loads(line) for line in saved.splitlines()]
  assert [r["round"] for r in rows] == [0]
  assert np.isfinite(rows[0]["loss/critic"])
