"""`Learner.update` on a hand-made rollout: who trains when rewards are flat.

The smoke model cut to one block, on the 8 fake test devices; one
minibatch of 8 rollouts.
The KL reference is the actor plus noise, so the KL penalty in the reward
makes the advantages non-zero even when every rollout scores the same: the
noise that `ppo.skip_actor_on_flat_rewards` keeps away from the actor.
"""

import copy
import dataclasses
import logging
import types as pytypes

import jax
import numpy as np
import pytest

from codeagent_rl import types
from codeagent_rl.anticheat import features
from codeagent_rl.anticheat import pipeline
from codeagent_rl.envs import code_env
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.parallel import transfers
from codeagent_rl.rollout import agent_loop
from codeagent_rl.status import JobStatus
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import experiment
from codeagent_rl.train import keys
from codeagent_rl.train import metrics as metrics_lib
from codeagent_rl.train import ppo as ppo_lib
from configs import tiny
from tests.helpers import policies

BATCH = 8  # 2 prompts x 4 samples: one row per fake device
LENGTH = 32
PROMPT = 8  # leading tokens that are not trainable
FLAG = "skip_actor_on_flat_rewards"


@pytest.fixture(scope="module")
def learner():
  config = tiny.get_config("smoke")
  config.ppo.minibatches = 1
  config.ppo.micro_batch_size = BATCH
  config.ppo.length_bucket = LENGTH
  # One block compiles faster; the loop does not depend on depth.
  config.model.num_layers = 1
  # Without decay a param moves only if its gradient is non-zero.
  config.optim.weight_decay = 0.0
  # On as in the default preset (smoke turns it off).
  config.ppo[FLAG] = True
  # Value targets below lambda 1, so value pre-training's differ.
  config.rl.advantage.lam_critic = 0.95
  exp = experiment.Experiment.from_config(config)
  assert exp.ppo.rollouts_per_iteration == BATCH
  assert exp.ppo.critic_warmup_iterations == 0
  mesh, rules = exp.make_mesh()
  return ppo_lib.Learner(exp, mesh, rules)


@pytest.fixture(scope="module")
def params(learner):
  """(SFT params the actor starts from, KL reference params).

  The reference is the SFT params plus noise, so the KL penalty is non-zero.
  """
  exp = learner.exp
  with sharding.axis_rules(learner.mesh, learner.rules):
    actor, _ = state_lib.create_train_states(
      exp.model, exp.optim, learner.mesh, learner.rules, jax.random.key(0)
    )
  actor = actor.params
  rng = np.random.default_rng(1)
  ref = jax.tree.map(
    lambda x: x + 0.05 * rng.standard_normal(x.shape, np.float32),
    jax.device_get(actor),
  )
  return actor, ref


def _with_ppo(learner, **fields):
  """The same jitted steps (they do not read these fields); `ppo` changed."""
  other = copy.copy(learner)
  ppo = dataclasses.replace(learner.exp.ppo, **fields)
  other.exp = dataclasses.replace(learner.exp, ppo=ppo)
  return other


def _rollout(total):
  batch = policies.ragged_rollout(BATCH, LENGTH, PROMPT)
  return batch, np.asarray(total, np.float32)


def _moved(before, after) -> float:
  return max(
    float(np.abs(np.asarray(a) - np.asarray(b)).max())
    for a, b in zip(
      jax.tree.leaves(after), jax.tree.leaves(before), strict=True
    )
  )


def _iterate(learner, params, total, iteration=0):
  """(actor moved, critic moved, metrics) of one `Learner.update`.

  Args:
    learner: the learner (its `exp` says what trains).
    params: (SFT params the actor starts from, KL reference params).
    total: [B] `Rewards.total`.
    iteration: 0-based iteration.
  """
  sft_params, ref_params = params
  states = learner.initial_states(sft_params, jax.random.key(1))
  # Host copies: the steps donate the states.
  before = jax.device_get((states[0].params, states[1].params))
  batch, total = _rollout(total)
  # Placed as SFT leaves them: sharded like the actor.
  learner.ref_params = jax.device_put(ref_params, learner.shardings[0].params)
  (actor, critic), metrics = learner.update(
    states,
    batch,
    total,
    iteration,
    jax.random.key(3),
    metrics_lib.PhaseTimer(),
  )
  return (
    _moved(before[0], actor.params),
    _moved(before[1], critic.params),
    metrics,
  )


@pytest.mark.parametrize("reward", [0.0, 1.0])
def test_flat_rewards_freeze_the_actor_but_not_the_critic(
  learner, params, reward, caplog
):
  caplog.set_level(logging.INFO, logger="absl")
  actor_moved, critic_moved, metrics = _iterate(
    learner, params, [reward] * BATCH
  )
  assert actor_moved == 0.0
  assert critic_moved > 1e-6
  assert metrics["policy/actor_trained"] == 0.0
  assert metrics["policy/flat_rewards"] == 1.0
  assert "loss/policy" not in metrics
  assert np.isfinite(metrics["loss/critic"])
  assert any(
    f"ppo.{FLAG}" in r.getMessage() and "iteration 0" in r.getMessage()
    for r in caplog.records
  ), [r.getMessage() for r in caplog.records]


def test_without_the_flag_the_actor_moves_on_flat_rewards(learner, params):
  actor_moved, critic_moved, metrics = _iterate(
    _with_ppo(learner, **{FLAG: False}), params, [0.0] * BATCH
  )
  # Whitened KL noise alone moves it: what the flag prevents.
  assert actor_moved > 1e-6
  assert critic_moved > 1e-6
  assert metrics["policy/actor_trained"] == 1.0
  assert metrics["policy/flat_rewards"] == 1.0
  assert np.isfinite(metrics["loss/policy"])


def test_differing_rewards_train_the_actor(learner, params, caplog):
  caplog.set_level(logging.INFO, logger="absl")
  # One rollout of eight differs, by a hair: the check is exact.
  total = [0.0] * (BATCH - 1) + [1e-6]
  actor_moved, critic_moved, metrics = _iterate(learner, params, total)
  assert actor_moved > 1e-6
  assert critic_moved > 1e-6
  assert metrics["policy/actor_trained"] == 1.0
  assert metrics["policy/flat_rewards"] == 0.0
  assert not any(f"ppo.{FLAG}" in r.getMessage() for r in caplog.records)


def test_warm_up_freezes_the_actor_without_blaming_the_rewards(
  learner, params, caplog
):
  caplog.set_level(logging.INFO, logger="absl")
  warm = _with_ppo(learner, critic_warmup_iterations=1)
  actor_moved, _, metrics = _iterate(warm, params, [0.0] * BATCH)
  assert actor_moved == 0.0
  assert metrics["policy/actor_trained"] == 0.0
  assert metrics["policy/flat_rewards"] == 1.0
  # Warm-up, not the flat rewards, froze it: no line about the flag.
  assert not any(f"ppo.{FLAG}" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
  "total, flat",
  [
    ([0.0, 0.0, 0.0], True),
    ([0.25, 0.25], True),
    ([0.0, 0.0, 1.0], False),
    ([1.0, np.nextafter(np.float32(1), np.float32(2))], False),
  ],
)
def test_rewards_are_flat(total, flat):
  assert ppo_lib.rewards_are_flat(np.asarray(total, np.float32)) is flat


def test_rollout_metrics_count_stage1_rejected_episodes_as_unsolved():
  exp = experiment.Experiment.from_config(tiny.get_config("smoke"))
  passed_all = code_env.Outcome(
    status=JobStatus.OK,
    executed=True,
    suite_a_passed=2,
    suite_a_total=2,
    suite_b_passed=3,
    suite_b_total=3,
  )
  # Every episode passed every test; they differ in turns (1, 2, 3).
  episodes = [
    pytypes.SimpleNamespace(
      outcome=passed_all, turns=(None,) * k, final_code="x"
    )
    for k in (1, 2, 3)
  ]
  rollout = pytypes.SimpleNamespace(
    episodes=episodes,
    batch=pytypes.SimpleNamespace(
      length=np.asarray([10, 20, 30]),
      truncated=np.zeros(3, bool),
      group_id=np.asarray([0, 0, 1]),
    ),
    render_ok=None,
  )
  accepted = types.Rewards.from_suites(
    suite_a=np.ones(3, np.float32),
    suite_b=np.ones(3, np.float32),
    executed=np.ones(3, bool),
    status=np.zeros(3, np.int32),
    num_flags=features.NUM_FLAGS,
  )
  scalars, _ = eval_lib.rollout_metrics(rollout, accepted, exp.anticheat)
  assert scalars["reward/pass_a"] == scalars["reward/pass_ab"] == 1.0
  assert "episode/render_mismatch" not in scalars  # the check was off
  assert scalars["episode/turns_p50"] == 2.0
  assert scalars["episode/turns_p90"] == pytest.approx(2.8)
  assert scalars["episode/turns_p95"] == pytest.approx(2.9)
  # Groups: turns (1, 2) and (3,).
  assert scalars["episode/group_turns_ratio_max"] == 2.0
  assert scalars["episode/group_turns_ratio_p50"] == 1.5
  assert scalars["episode/turns_max"] == 3.0
  assert scalars["episode/tokens_p50"] == 20.0
  assert scalars["episode/tokens_max"] == 30.0
  rollout.render_ok = np.asarray([True, False, True])
  scalars, _ = eval_lib.rollout_metrics(rollout, accepted, exp.anticheat)
  assert scalars["episode/render_mismatch"] == pytest.approx(1 / 3)
  # Stage 1 rejects the second by an enforced rule flag, the third by the
  # classifier's score.
  flags = np.zeros((3, features.NUM_FLAGS), bool)
  flags[1, features.FLAG_NAMES.index("process_exit")] = True
  rejected = accepted.replace(
    stage1_flags=flags,
    stage1_score=np.asarray([0.0, 0.0, 0.99], np.float32),
    total=np.asarray([1.0, 0.0, 0.0], np.float32),
  )
  scalars, hists = eval_lib.rollout_metrics(rollout, rejected, exp.anticheat)
  assert scalars["reward/pass_a"] == pytest.approx(1 / 3)
  assert scalars["reward/pass_ab"] == pytest.approx(1 / 3)
  assert scalars["reward/total_mean"] == pytest.approx(1 / 3)
  assert scalars["length/passing_turns"] == 1.0
  assert scalars["length/failing_turns"] == 2.5
  assert hists["length/failing_tokens"].tolist() == [20.0, 30.0]


def test_an_update_makes_only_explicit_transfers(learner, params):
  """The batch goes to the devices once, by `device_put`, and back by get.

  The update runs under `jax.transfer_guard("disallow")`: a KL reference
  left on the host (an implicit transfer in the forward) is refused.
  """
  sft_params, ref_params = params
  batch, total = _rollout([0.0] * (BATCH - 1) + [1.0])
  learner.ref_params = ref_params  # host arrays
  states = learner.initial_states(sft_params, jax.random.key(1))
  with pytest.raises(
    jax.errors.JaxRuntimeError, match="Disallowed host-to-device transfer"
  ):
    learner.update(
      states, batch, total, 0, jax.random.key(3), metrics_lib.PhaseTimer()
    )
  learner.ref_params = jax.device_put(ref_params, learner.shardings[0].params)
  states = learner.initial_states(sft_params, jax.random.key(1))
  rng = jax.random.key(3)
  with jax.transfer_guard("disallow"):  # the caller's side too
    (actor, critic), metrics = learner.update(
      states, batch, total, 0, rng, metrics_lib.PhaseTimer()
    )
  assert metrics["policy/actor_trained"] == 1.0
  assert np.isfinite(metrics["loss/policy"])


def test_an_iteration_makes_only_explicit_transfers(
  learner, params, module_pool
):
  """Rollout, anti-cheat, update and metrics with implicit copies refused.

  The guard is process-wide, as the main job sets it: the rollout grades
  submissions in a helper thread, which runs stage 1's pre-submit gate.
  """
  exp = learner.exp
  sft_params, ref_params = params
  fmt = exp.conversation
  anticheat = pipeline.AntiCheat.from_config(exp.anticheat)
  assert exp.anticheat.skip_flagged  # the gate runs in the grader thread
  env = code_env.CodeEnv(
    module_pool, fmt, exp.env, pre_submit=anticheat.pre_submit
  )
  train = data_lib.make_task_sets(exp.data, exp.seed).train
  prompts = data_lib.iteration_prompts(
    train,
    exp.seed,
    0,
    exp.ppo.rollouts_per_iteration // exp.ppo.samples_per_prompt,
  )
  saved = (
    learner.ref_params,
    learner.env,
    learner.anticheat,
    learner.cache_len,
  )
  learner.ref_params = jax.device_put(ref_params, learner.shardings[0].params)
  learner.env, learner.anticheat = env, anticheat
  learner.cache_len = agent_loop.cache_len_for(
    exp.env, data_lib.longest_prompt(env, train), fmt
  )
  try:
    with transfers.disallow_implicit():
      states = learner.initial_states(sft_params, keys.ppo_init(exp.seed))
      (actor, critic), metrics = learner.iteration(
        states, prompts, keys.ppo_iteration(exp.seed, 0), index=0
      )
  finally:
    learner.ref_params, learner.env, learner.anticheat, learner.cache_len = (
      saved
    )
  scalars = metrics.scalars
  assert scalars["episode/tokens_mean"] > 0
  assert 0.0 <= scalars["anticheat/flag_rate"] <= 1.0
  assert np.isfinite(scalars["loss/critic"])
  updates = exp.ppo.epochs * exp.ppo.minibatches
  assert int(jax.device_get(critic.step)) == updates
  trained = scalars["policy/actor_trained"]
  assert int(jax.device_get(actor.step)) == updates * trained
  # Outside the block the process-wide default is back.
  assert jax.config.jax_transfer_guard_host_to_device is None


def test_value_pretraining_freezes_the_actor(learner, params):
  """A value-only update: the critic regresses, the actor does not move."""
  sft_params, ref_params = params
  states = learner.initial_states(sft_params, jax.random.key(1))
  before = jax.device_get((states[0].params, states[1].params))
  batch, total = _rollout([0.0] * (BATCH - 1) + [1.0])
  learner.ref_params = jax.device_put(ref_params, learner.shardings[0].params)
  (actor, critic), metrics = learner.update(
    states,
    batch,
    total,
    5,  # past any warm-up: only value_only freezes the actor
    jax.random.key(3),
    metrics_lib.PhaseTimer(),
    value_only=True,
  )
  assert _moved(before[0], actor.params) == 0.0
  assert _moved(before[1], critic.params) > 0.0
  assert metrics["policy/actor_trained"] == 0.0
  assert np.isfinite(metrics["loss/critic"])


def test_value_pretraining_targets_are_monte_carlo_returns(learner):
  """With lambda 1 every trainable token's return is the episode's reward."""
  assert learner.exp.rl.advantage.lam_critic < 1.0  # PPO's targets differ
  batch, total = _rollout([0.0, 1.0, 0.5, 0.25, 0.0, 1.0, 0.75, 0.5])
  rng = np.random.default_rng(0)
  logp = np.zeros(batch.tokens.shape, np.float32)  # no KL: only the score
  values = rng.standard_normal(batch.tokens.shape).astype(np.float32)
  args = jax.device_put(
    (
      total,
      batch.trainable,
      logp,
      logp,
      values,
      batch.truncated,
      np.zeros(BATCH, np.float32),
      batch.group_id,
    )
  )
  _, mc_returns, _ = jax.device_get(learner._mc_targets(*args))
  _, gae_returns, _ = jax.device_get(learner.targets(*args))
  mask = batch.trainable
  want = np.broadcast_to(total[:, None], mask.shape)
  np.testing.assert_allclose(mc_returns[mask], want[mask], atol=1e-6)
  assert np.abs(gae_returns[mask] - want[mask]).max() > 0.1


def _update(learner, params, total):
  """(host params of actor and critic, metrics) after one update."""
  sft_params, ref_params = params
  states = learner.initial_states(sft_params, jax.random.key(1))
  batch, total = _rollout(total)
  learner.ref_params = jax.device_put(ref_params, learner.shardings[0].params)
  (actor, critic), metrics = learner.update(
    states, batch, total, 0, jax.random.key(3), metrics_lib.PhaseTimer()
  )
  return jax.device_get((actor.params, critic.params)), metrics


def _update_from(learner, params, total, behaviour):
  """`_update` with `behaviour(actor params) -> behaviour params`."""
  sft_params, ref_params = params
  states = learner.initial_states(sft_params, jax.random.key(1))
  batch, total = _rollout(total)
  learner.ref_params = jax.device_put(ref_params, learner.shardings[0].params)
  (actor, critic), metrics = learner.update(
    states,
    batch,
    total,
    0,
    jax.random.key(3),
    metrics_lib.PhaseTimer(),
    behaviour_params=behaviour(states[0].params),
  )
  return jax.device_get((actor.params, critic.params)), metrics


def test_behaviour_params_equal_to_the_actor_change_nothing(learner, params):
  """Staleness 0 through the off-policy path: the very same update."""
  total = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.5]
  want_params, want = _update(learner, params, total)
  copy_of = lambda p: jax.tree.map(jax.numpy.copy, p)  # noqa: E731
  got_params, got = _update_from(learner, params, total, copy_of)
  # The weight is exactly 1: the behaviour log-probs are the proximal ones,
  # bit for bit (the same pass computes both).
  assert got["policy/behaviour_weight_mean"] == 1.0
  assert got["policy/behaviour_cap_frac"] == 0.0
  # The loss with the weight is another XLA program, whose fused sums may
  # round differently: measured on one CPU model, loss/policy -3.5e-8
  # against -1.8e-8 (terms of order 1 that cancel), identical on another.
  for key, value in want.items():
    if not key.startswith(("perf/", "time/")):
      assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
  jax.tree.map(
    lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=1e-6),
    got_params,
    want_params,
  )


def test_stale_behaviour_params_weight_the_loss(learner, params):
  total = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.5]
  want_params, want = _update(learner, params, total)
  rng = np.random.default_rng(5)

  def older(p):
    noisy = jax.tree.map(
      lambda x: x + 0.05 * rng.standard_normal(x.shape, np.float32),
      jax.device_get(p),
    )
    return jax.device_put(noisy, learner.shardings[0].params)

  got_params, got = _update_from(learner, params, total, older)
  weight = got["policy/behaviour_weight_mean"]
  assert np.isfinite(weight) and weight != 1.0
  assert 0.0 <= got["policy/behaviour_cap_frac"] <= 1.0
  assert got["loss/policy"] != want["loss/policy"]
  # Only the actor's loss is weighted: the critic's update is the same.
  np.testing.assert_allclose(got["loss/critic"], want["loss/critic"], rtol=1e-6)
  assert _moved(want_params[0], got_params[0]) > 0


def test_packed_rows_give_the_update_of_padded_rows(learner, params):
  """`ppo.packing` changes the layout of the forwards, not the update."""
  total = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.5]
  want_params, want = _update(learner, params, total)
  got_params, got = _update(_with_ppo(learner, packing=True), params, total)
  assert 0 < got["perf/pack_density"] <= 1
  for key, value in want.items():
    if not key.startswith(("perf/", "time/")):
      np.testing.assert_allclose(
        got[key], value, rtol=1e-4, atol=1e-6, err_msg=key
      )
  jax.tree.map(
    lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5),
    got_params,
    want_params,
  )


def test_a_reference_in_host_memory_gives_the_same_update(learner, params):
  total = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.5]
  want_params, want = _update(learner, params, total)
  host = _with_ppo(learner, reference_on_host=True)
  # The same compiled steps; the reference pass is the one a learner built
  # with the flag makes.
  host._ref_log_probs = ppo_lib.Learner(
    host.exp, learner.mesh, learner.rules
  )._ref_log_probs
  got_params, got = _update(host, params, total)
  kinds = {x.sharding.memory_kind for x in jax.tree.leaves(host.ref_params)}
  assert kinds == {"pinned_host"}
  for key, value in want.items():
    if not key.startswith(("perf/", "time/")):
      np.testing.assert_allclose(
        got[key], value, rtol=1e-6, atol=1e-7, err_msg=key
      )
  jax.tree.map(np.testing.assert_array_equal, got_params, want_params)
