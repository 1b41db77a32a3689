"""The learner's steps: alignment, vocab masking, targets, accumulation.

Every check compares with a hand case or a plain NumPy reference; the
update steps run on a one-layer model small enough to compile in seconds.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.models import transformer
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.train import steps
from tests.helpers import learner_steps

MODEL = learner_steps.MODEL
VOCAB_LIMIT = learner_steps.VOCAB_LIMIT
BATCH, LENGTH = learner_steps.BATCH, learner_steps.LENGTH
_rl = learner_steps.rl


def _log_softmax(x):
  x = x - x.max(axis=-1, keepdims=True)
  return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


# --- Alignment and vocabulary masking ---------------------------------------


def test_shifted_log_probs_hand_case():
  # Logits at t put all mass (nearly) on token t + 1 of the row.
  tokens = jnp.asarray([[3, 1, 2, 0]], jnp.int32)
  logits = np.full((1, 4, 5), -30.0, np.float32)
  for t in range(3):
    logits[0, t, int(tokens[0, t + 1])] = 30.0
  logp = np.asarray(steps.shifted_log_probs(jnp.asarray(logits), tokens, 1.0))
  assert logp.shape == (1, 4)
  assert logp[0, 0] == 0.0  # token 0 has no predictor
  np.testing.assert_allclose(logp[0, 1:], 0.0, atol=1e-6)
  # Unaligned reading (logits at t scoring token t) would be ~ -60.
  wrong = np.asarray(
    steps.shifted_log_probs(jnp.asarray(logits), tokens[:, ::-1], 1.0)
  )
  assert (wrong[0, 1:] < -50).all()


def test_shifted_log_probs_uniform_and_temperature():
  logits = jnp.zeros((2, 3, 8))
  tokens = jnp.asarray([[1, 2, 3], [4, 5, 6]], jnp.int32)
  logp = steps.shifted_log_probs(logits, tokens, 0.5)
  np.testing.assert_allclose(
    np.asarray(logp), [[0, -np.log(8), -np.log(8)]] * 2, rtol=1e-6
  )


def test_shifted_values_hand_case():
  values = jnp.asarray([[10.0, 11.0, 12.0, 13.0]])
  np.testing.assert_array_equal(
    np.asarray(steps.shifted_values(values)), [[0.0, 10.0, 11.0, 12.0]]
  )


def test_vocab_limit_matches_numpy_reference():
  rng = np.random.default_rng(0)
  vocab, limit, temperature = 16, 11, 0.7
  logits = rng.normal(size=(3, 6, vocab)).astype(np.float32) * 3
  tokens = rng.integers(0, limit, size=(3, 6)).astype(np.int32)
  got = np.asarray(
    steps.shifted_log_probs(
      jnp.asarray(logits), jnp.asarray(tokens), temperature, limit
    )
  )
  ref_all = _log_softmax(
    logits[:, :-1, :limit].astype(np.float64) / temperature
  )
  ref = np.take_along_axis(ref_all, tokens[:, 1:, None], axis=-1)[..., 0]
  np.testing.assert_allclose(got[:, 1:], ref, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(got[:, 0], 0.0)
  # Without the limit the padding ids take mass: the log-probs are lower.
  unlimited = np.asarray(
    steps.shifted_log_probs(jnp.asarray(logits), jnp.asarray(tokens), 0.7)
  )
  assert (unlimited[:, 1:] <= got[:, 1:] + 1e-6).all()
  assert (got[:, 1:] - unlimited[:, 1:]).max() > 0.1


def test_ids_at_or_above_the_limit_get_no_probability():
  logits = jnp.zeros((1, 3, 8)).at[:, :, 6].set(50.0)  # padding id favoured
  tokens = jnp.asarray([[0, 6, 7]], jnp.int32)
  logp = np.asarray(steps.shifted_log_probs(logits, tokens, 1.0, 6))
  assert (logp[0, 1:] < -1e6).all() or np.isneginf(logp[0, 1:]).all()
  ent = np.asarray(steps.shifted_entropy(logits, 1.0, 6))
  # Six equally likely ids remain.
  np.testing.assert_allclose(ent[0, 1:], np.log(6), rtol=1e-5)


# --- Targets ------------------------------------------------------------------


def _gae_reference(rewards, values, trainable, truncated, bootstrap, lam):
  """Backward GAE over trainable tokens only (gamma 1), as in DESIGN.md."""
  b, t = rewards.shape
  adv = np.zeros((b, t))
  for i in range(b):
    next_value = bootstrap[i] if truncated[i] else 0.0
    running = 0.0
    for s in reversed(range(t)):
      if not trainable[i, s]:
        continue
      delta = rewards[i, s] + next_value - values[i, s]
      running = delta + lam * running
      adv[i, s] = running
      next_value = values[i, s]
  return adv, np.where(trainable, adv + values, 0.0)


def _random_rollout(seed):
  rng = np.random.default_rng(seed)
  b, t = 5, 9
  trainable = np.zeros((b, t), bool)
  lengths = rng.integers(4, t + 1, size=b)
  for i, n in enumerate(lengths):
    trainable[i, 2:n] = rng.random(n - 2) < 0.7  # observations in between
  trainable[0, :] = False  # a row without any action
  trainable[1, 2:7] = True
  trainable[1, 7:] = False  # observation tokens after the last action
  return {
    "total_b": rng.normal(size=b).astype(np.float32),
    "trainable": trainable,
    "old_logp": -rng.random((b, t)).astype(np.float32) * 3,
    "ref_logp": -rng.random((b, t)).astype(np.float32) * 3,
    "values": rng.normal(size=(b, t)).astype(np.float32),
    "truncated": np.asarray([False, True, False, True, False]),
    "bootstrap_value": rng.normal(size=b).astype(np.float32),
    "group_id": np.arange(b, dtype=np.int32),
  }


def _last_trainable_reward(total, trainable):
  rewards = np.zeros(trainable.shape)
  for i in range(trainable.shape[0]):
    idx = np.flatnonzero(trainable[i])
    if idx.size:
      rewards[i, idx[-1]] = total[i]
  return rewards


@pytest.mark.parametrize("placement", ["reward", "loss"])
def test_targets_match_numpy_reference(placement):
  coef, lam = 0.1, 0.9
  rl = _rl(
    kl__placement=placement,
    kl__coef=coef,
    kl__estimator="k1",
    advantage__lam=lam,
    advantage__lam_critic=lam,
    advantage__critic_trust="none",
    advantage__whiten=False,
  )
  r = _random_rollout(1)
  adv, ret, metrics = steps.targets(
    *(jnp.asarray(v) for v in r.values()), rl=rl
  )
  rewards = _last_trainable_reward(r["total_b"], r["trainable"])
  k1 = np.where(r["trainable"], r["old_logp"] - r["ref_logp"], 0.0)
  if placement == "reward":
    rewards = rewards - coef * k1
  want_adv, want_ret = _gae_reference(
    rewards,
    r["values"],
    r["trainable"],
    r["truncated"],
    r["bootstrap_value"],
    lam,
  )
  np.testing.assert_allclose(np.asarray(adv), want_adv, atol=1e-5)
  np.testing.assert_allclose(np.asarray(ret), want_ret, atol=1e-5)
  # The KL metric is reported in both placements.
  np.testing.assert_allclose(
    float(metrics["kl/ref_mean"]), k1.sum() / r["trainable"].sum(), rtol=1e-5
  )


def test_terminal_reward_sits_on_the_last_trainable_token():
  # gamma = lam = 1, values 0, no KL: every trainable token's return is the
  # row's score, and nothing else gets any.
  rl = _rl(kl__coef=0.0, advantage__lam=1.0, advantage__whiten=False)
  r = _random_rollout(2)
  r["values"] = np.zeros_like(r["values"])
  r["truncated"] = np.zeros_like(r["truncated"])
  _, ret, _ = steps.targets(*(jnp.asarray(v) for v in r.values()), rl=rl)
  want = np.where(r["trainable"], r["total_b"][:, None], 0.0)
  np.testing.assert_allclose(np.asarray(ret), want, atol=1e-6)


def test_kl_penalty_only_when_placed_in_the_reward():
  r = _random_rollout(3)
  args = [jnp.asarray(v) for v in r.values()]
  common_kw = {"kl__coef": 0.5, "advantage__whiten": False}
  _, ret_reward, _ = steps.targets(*args, rl=_rl(**common_kw))
  _, ret_loss, _ = steps.targets(
    *args, rl=_rl(kl__placement="loss", **common_kw)
  )
  _, ret_zero, _ = steps.targets(*args, rl=_rl(kl__coef=0.0))
  np.testing.assert_allclose(np.asarray(ret_loss), np.asarray(ret_zero))
  assert np.abs(np.asarray(ret_reward) - np.asarray(ret_loss)).max() > 1e-2


# --- Update steps -------------------------------------------------------------


@pytest.fixture(scope="module")
def params():
  return learner_steps.init_params()


_ppo_batch = learner_steps.ppo_batch
TX = learner_steps.TX


def _assert_same_update(before, a, b):
  moved = max(
    float(jnp.abs(x - y).max())
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(before), strict=True)
  )
  assert moved > 1e-3, "the step did not move the params: the test is void"
  chex.assert_trees_all_close(a, b, atol=1e-5, rtol=1e-5)


@functools.cache
def _actor_step(num_micro, rl):
  return jax.jit(
    functools.partial(
      steps.actor_step,
      model=transformer.Actor(MODEL),
      tx=TX,
      rl=rl,
      temperature=1.0,
      vocab_limit=VOCAB_LIMIT,
      num_micro=num_micro,
    )
  )


# KL in the loss, an entropy bonus and per-sequence means: every term of the
# actor loss must use the whole minibatch's normaliser.
RL_FULL_LOSS = _rl(
  kl__placement="loss",
  kl__estimator="k3",
  loss__entropy_coef=0.01,
  loss__agg_mode="seq_mean_token_mean",
)


def test_actor_step_accumulation_is_exact(params):
  rl = RL_FULL_LOSS
  batch = _ppo_batch(0)
  state = state_lib.TrainState.create(params[0], TX)
  outs = {
    n: _actor_step(n, rl)(state, batch, jax.random.key(0)) for n in (1, 4)
  }
  _assert_same_update(state.params, outs[1][0].params, outs[4][0].params)
  for key in ("loss/policy", "policy/entropy", "grad_norm/actor"):
    np.testing.assert_allclose(
      float(outs[1][1][key]), float(outs[4][1][key]), rtol=1e-5, atol=1e-6
    )


def test_critic_step_accumulation_is_exact(params):
  rl = _rl()
  batch = _ppo_batch(1)
  state = state_lib.TrainState.create(params[1], TX)
  outs = {}
  for n in (1, 4):
    fn = jax.jit(
      functools.partial(
        steps.critic_step,
        model=transformer.Critic(MODEL),
        tx=TX,
        rl=rl,
        num_micro=n,
      )
    )
    outs[n] = fn(state, batch, jax.random.key(0))
  _assert_same_update(state.params, outs[1][0].params, outs[4][0].params)
  np.testing.assert_allclose(
    float(outs[1][1]["loss/critic"]),
    float(outs[4][1]["loss/critic"]),
    rtol=1e-5,
  )


def test_sft_step_accumulation_is_exact(params):
  ppo = _ppo_batch(2)
  batch = {"tokens": ppo.tokens, "valid": ppo.valid, "trainable": ppo.trainable}
  state = state_lib.TrainState.create(params[0], TX)
  outs = {}
  for n in (1, 4):
    fn = jax.jit(
      functools.partial(
        steps.sft_step, model=transformer.Actor(MODEL), tx=TX, num_micro=n
      )
    )
    outs[n] = fn(state, batch, jax.random.key(0))
  _assert_same_update(state.params, outs[1][0].params, outs[4][0].params)
  np.testing.assert_allclose(
    float(outs[1][1]["sft/loss"]), float(outs[4][1]["sft/loss"]), rtol=1e-5
  )
  # The loss is the mean NLL over trainable tokens (NumPy reference).
  logits, _ = transformer.Actor(MODEL).apply(
    {"params": params[0]},
    ppo.tokens,
    transformer.positions_from_valid(ppo.valid),
    ppo.valid,
  )
  logp = _log_softmax(np.asarray(logits, np.float64))[:, :-1]
  nll = -np.take_along_axis(logp, np.asarray(ppo.tokens)[:, 1:, None], axis=-1)[
    ..., 0
  ]
  mask = np.asarray(ppo.trainable)[:, 1:]
  np.testing.assert_allclose(
    float(outs[1][1]["sft/loss"]), nll[mask].mean(), rtol=1e-4
  )


def test_jitted_actor_step_does_not_retrace(params):
  rl = _rl()
  bound = functools.partial(
    steps.actor_step,
    model=transformer.Actor(MODEL),
    tx=TX,
    rl=rl,
    temperature=1.0,
    vocab_limit=VOCAB_LIMIT,
    num_micro=2,
  )

  @chex.assert_max_traces(n=1)
  def traced(state, batch, rng):
    return bound(state, batch, rng)

  step = jax.jit(traced)
  state = state_lib.TrainState.create(params[0], TX)
  for seed in range(3):  # same shapes, new values and a new state
    state, _ = step(state, _ppo_batch(seed), jax.random.key(seed))
  # The check itself works: a new shape is a second trace.
  short = jax.tree.map(lambda x: x[:, : LENGTH // 2], _ppo_batch(9))
  with pytest.raises(AssertionError):
    step(state, short, jax.random.key(9))


def test_zero_advantages_give_zero_policy_loss(params):
  rl = _rl(kl__placement="reward", loss__entropy_coef=0.0)
  batch = _ppo_batch(4, advantages=np.zeros((BATCH, LENGTH)))
  state = state_lib.TrainState.create(params[0], TX)
  new, metrics = _actor_step(4, rl)(state, batch, jax.random.key(0))
  assert float(metrics["loss/policy"]) == 0.0
  assert float(metrics["grad_norm/actor"]) == 0.0
  assert "loss/kl" not in metrics
  chex.assert_trees_all_equal(new.params, state.params)
  # With KL in the loss the same batch has a non-zero gradient.
  _, metrics = _actor_step(4, RL_FULL_LOSS)(state, batch, jax.random.key(0))
  assert float(metrics["loss/kl"]) > 0
  assert float(metrics["grad_norm/actor"]) > 0
