"""The critic's recipe in the learner's steps.

A test-aware critic's prefix (`steps.critic_outputs`), the positive-example
NLL term of the actor loss (`rl.loss.positive_nll_coef`), and the texts a
privileged critic reads (`train/critic_inputs.py`).
"""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.models import chat
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.models import transformer
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.tasks import probes
from codeagent_rl.train import critic_inputs
from codeagent_rl.train import steps
from tests.helpers import learner_steps

MODEL = learner_steps.MODEL
BATCH, LENGTH = learner_steps.BATCH, learner_steps.LENGTH


@pytest.fixture(scope="module")
def params():
  return learner_steps.init_params()


def _critic_out(critic_params, tokens, valid, prefix=None, prefix_valid=None):
  fn = jax.jit(steps.critic_outputs, static_argnums=0)
  return fn(
    transformer.Critic(MODEL),
    critic_params,
    tokens,
    valid,
    None,
    prefix,
    prefix_valid,
  )


def test_an_empty_prefix_changes_no_value(params):
  batch = learner_steps.ppo_batch(0)
  plain = _critic_out(params[1], batch.tokens, batch.valid)
  prefix = jnp.full((BATCH, 5), 7, jnp.int32)
  empty = _critic_out(
    params[1], batch.tokens, batch.valid, prefix, jnp.zeros((BATCH, 5), bool)
  )
  valid = np.asarray(batch.valid)
  np.testing.assert_allclose(
    np.asarray(empty)[valid], np.asarray(plain)[valid], atol=1e-5
  )


def test_a_prefix_is_read_and_values_come_back_at_row_positions(params):
  batch = learner_steps.ppo_batch(1)
  rng = np.random.default_rng(0)
  prefix = jnp.asarray(rng.integers(0, 40, (BATCH, 6)), jnp.int32)
  prefix_valid = np.ones((BATCH, 6), bool)
  prefix_valid[:, :2] = False  # left padding
  got = _critic_out(
    params[1], batch.tokens, batch.valid, prefix, jnp.asarray(prefix_valid)
  )
  assert got.shape == (BATCH, LENGTH)
  # The same as the critic on [real prefix | row] written out by hand.
  full = jnp.concatenate([prefix[:, 2:], batch.tokens], axis=1)
  full_valid = jnp.concatenate(
    [jnp.ones((BATCH, 4), bool), batch.valid], axis=1
  )
  want = _critic_out(params[1], full, full_valid)[:, 4:]
  valid = np.asarray(batch.valid)
  np.testing.assert_allclose(
    np.asarray(got)[valid], np.asarray(want)[valid], atol=1e-5
  )
  plain = _critic_out(params[1], batch.tokens, batch.valid)
  assert np.abs(np.asarray(got - plain)[valid]).max() > 1e-4


def test_critic_values_with_a_prefix_in_row_groups(params):
  batch = learner_steps.ppo_batch(2)
  prefix = jnp.full((BATCH, 3), 5, jnp.int32)
  prefix_valid = jnp.ones((BATCH, 3), bool)
  length = jnp.sum(batch.valid, axis=1)
  outs = [
    jax.jit(
      lambda p, n=n: steps.critic_values(
        p,
        batch.tokens,
        batch.valid,
        length,
        model=transformer.Critic(MODEL),
        num_groups=n,
        prefix=prefix,
        prefix_valid=prefix_valid,
      )
    )(params[1])
    for n in (1, 4)
  ]
  chex.assert_trees_all_close(outs[0], outs[1], atol=1e-5)


def _nll_step(coef):
  rl = learner_steps.rl(loss__positive_nll_coef=coef, kl__coef=0.0)
  return jax.jit(
    lambda state, batch: steps.actor_step(
      state,
      batch,
      jax.random.key(0),
      model=transformer.Actor(MODEL),
      tx=learner_steps.TX,
      rl=rl,
      temperature=1.0,
      vocab_limit=learner_steps.VOCAB_LIMIT,
      num_micro=2,
    )
  )


def _logp(actor_params, batch):
  return steps.actor_log_probs(
    actor_params,
    batch.tokens,
    batch.valid,
    model=transformer.Actor(MODEL),
    temperature=1.0,
    vocab_limit=learner_steps.VOCAB_LIMIT,
  )


def test_positive_nll_raises_the_solved_episodes_tokens(params):
  """With zero advantages only the NLL term moves the actor: up on them."""
  batch = learner_steps.ppo_batch(3, advantages=np.zeros((BATCH, LENGTH)))
  trainable = np.asarray(batch.trainable)
  positive = trainable.copy()
  positive[BATCH // 2 :] = False
  batch = batch.replace(
    positive=jnp.asarray(positive), old_logp=_logp(params[0], batch)
  )
  state = state_lib.TrainState.create(params[0], learner_steps.TX)
  new, metrics = _nll_step(1.0)(state, batch)
  assert float(metrics["loss/positive_nll"]) > 0
  gain = np.asarray(_logp(new.params, batch) - batch.old_logp)
  assert gain[positive].mean() > 1e-3
  off, _ = _nll_step(0.0)(state, batch)
  chex.assert_trees_all_close(off.params, state.params, atol=1e-7)


def test_positive_nll_is_exact_over_micro_batches(params):
  batch = learner_steps.ppo_batch(4)
  positive = np.asarray(batch.trainable).copy()
  positive[::3] = False
  batch = batch.replace(positive=jnp.asarray(positive))
  state = state_lib.TrainState.create(params[0], learner_steps.TX)
  rl = learner_steps.rl(loss__positive_nll_coef=0.1)
  outs = [
    jax.jit(
      lambda s, b, n=n: steps.actor_step(
        s,
        b,
        jax.random.key(0),
        model=transformer.Actor(MODEL),
        tx=learner_steps.TX,
        rl=rl,
        temperature=1.0,
        vocab_limit=learner_steps.VOCAB_LIMIT,
        num_micro=n,
      )
    )(state, batch)
    for n in (1, 4)
  ]
  chex.assert_trees_all_close(outs[0][0].params, outs[1][0].params, atol=1e-5)
  np.testing.assert_allclose(
    outs[0][1]["loss/positive_nll"], outs[1][1]["loss/positive_nll"], rtol=1e-5
  )


def test_positive_nll_without_the_mask_is_refused(params):
  batch = learner_steps.ppo_batch(5)
  state = state_lib.TrainState.create(params[0], learner_steps.TX)
  with pytest.raises(ValueError, match="PPOBatch.positive"):
    _nll_step(0.1)(state, batch)


def _probe_task():
  cfg = probes.ProbeConfig(
    num_tasks=1,
    seed=0,
    split="train",
    bisect=1.0,
    scan=0.0,
    give_up=0.0,
    off_by_one=0.0,
  )
  return probes.generate(cfg)[0][0]


def test_tests_text_holds_every_hidden_test_and_its_expected_value():
  task = _probe_task()
  text = critic_inputs.tests_text(task)
  lines = text.splitlines()
  assert lines[0] == critic_inputs.HEADER
  assert len(lines) == 1 + len(task.hidden_tests)
  for test, line in zip(task.hidden_tests, lines[1:], strict=True):
    assert line.startswith(f"{task.entry_point}(")
    assert line.endswith(f"== {test['expected']}")
  # The held-out suite stays out of it.
  assert critic_inputs.HEADER in text and "heldout" not in text


def test_prefix_arrays_are_left_padded_cut_and_plain_text():
  fmt = chat.ByteProtocolFormat(tokenizer_lib.ByteTokenizer())
  task = _probe_task()
  short = dataclasses.replace(task, hidden_tests=task.hidden_tests[:1])
  ids, valid = critic_inputs.prefix_arrays(fmt, [task, short], 64)
  assert ids.shape == valid.shape and ids.shape[1] == 64
  assert valid[0].all()  # cut to 64
  n = int(valid[1].sum())
  assert n == len(fmt.encode_plain(critic_inputs.tests_text(short))) < 64
  assert not valid[1, : 64 - n].any() and valid[1, 64 - n :].all()
  assert (ids[1, : 64 - n] == fmt.pad_id).all()
  np.testing.assert_array_equal(
    ids[0], fmt.encode_plain(critic_inputs.tests_text(task))[:64]
  )
  with pytest.raises(ValueError, match="max_tokens=0"):
    critic_inputs.prefix_arrays(fmt, [task], 0)
