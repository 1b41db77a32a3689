"""Packed learner rows (`train/packing.py`): plans, and equal losses.

The packed forward must give the same per-token log-probs, entropies and
values as the padded one, so the PPO losses and their gradients are equal
in every aggregation mode, with or without chunked log-probs, and summed
over micro-batches exactly as one step over the whole minibatch.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from codeagent_rl.models import transformer as tf
from codeagent_rl.parallel import sharding
from codeagent_rl.rl import losses
from codeagent_rl.train import experiment
from codeagent_rl.train import packing
from codeagent_rl.train import steps
from configs import tiny
from tests.helpers import models as model_helpers

T = 24
B = 6
VOCAB = 64


def _valid(lengths, t=T):
  return np.arange(t)[None, :] < np.asarray(lengths)[:, None]


def test_a_plan_places_every_token_once_inside_its_own_segment():
  rng = np.random.default_rng(0)
  lengths = np.concatenate([[T], rng.integers(1, T + 1, 13)])
  valid = _valid(lengths)
  plan = packing.plan(valid)
  assert plan.rows < len(lengths)  # the short rows share
  src, dst = plan.src, plan.dst
  held = src[src >= 0]
  np.testing.assert_array_equal(np.sort(held), np.flatnonzero(valid.ravel()))
  # dst inverts src.
  np.testing.assert_array_equal(src.ravel()[dst[valid]], np.flatnonzero(valid))
  assert (dst[~valid] == -1).all()
  # A trajectory's tokens are consecutive, in order, in one packed row.
  for b, n in enumerate(lengths):
    slots = dst[b, :n]
    assert (np.diff(slots) == 1).all()
    assert slots[0] // T == slots[-1] // T
  seg = np.asarray(packing.segments(jnp.asarray(src), T))
  np.testing.assert_array_equal(seg[src >= 0], src[src >= 0] // T + 1)
  assert (seg[src < 0] == 0).all()


def test_first_fit_decreasing_fills_rows():
  # 12 + 12 and 8 + 8 + 8 fill two rows of 24; 20 and 4 a third.
  row, offset = packing.assign(np.array([8, 12, 4, 8, 20, 12, 8]), 24)
  rows = {}
  for r, o, n in zip(row, offset, [8, 12, 4, 8, 20, 12, 8], strict=True):
    rows.setdefault(int(r), []).append((int(o), n))
  assert len(rows) == 3
  for placed in rows.values():
    placed.sort()
    ends = [o + n for o, n in placed]
    assert ends[-1] <= 24
    assert all(o == e for (o, _), e in zip(placed[1:], ends, strict=False))


def test_bad_layouts_are_refused():
  valid = _valid([3, 5])
  valid[0, 1] = False  # a gap
  with pytest.raises(ValueError, match=r"rows \[0\] are not right-padded"):
    packing.plan(valid)
  with pytest.raises(ValueError, match="2 packed rows needed, 1 given"):
    packing.plan(_valid([T, T]), rows=1)
  with pytest.raises(ValueError, match="does not fit a row of 4"):
    packing.assign(np.array([5]), 4)


def _model_cfg(chunk):
  return model_helpers.transformer_config(
    vocab_size=VOCAB,
    init_std=0.2,
    num_layers=1,
    qkv_bias=True,
    tie_embeddings=False,
    logits_chunk=chunk,
  )


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  lengths = np.array([T, 5, 17, 3, 11, 9])
  valid = _valid(lengths)
  pos = np.arange(T)[None, :]
  trainable = valid & (pos >= 2)
  f32 = lambda x: jnp.asarray(np.where(trainable, x, 0.0), jnp.float32)  # noqa: E731
  return steps.PPOBatch(
    tokens=jnp.asarray(np.where(valid, rng.integers(1, VOCAB, (B, T)), 0)),
    valid=jnp.asarray(valid),
    trainable=jnp.asarray(trainable),
    old_logp=f32(-rng.random((B, T)) * 3),
    ref_logp=f32(-rng.random((B, T)) * 3),
    advantages=f32(rng.standard_normal((B, T))),
    returns=f32(rng.standard_normal((B, T))),
    old_values=f32(0.1 * rng.standard_normal((B, T))),
  )


def _packed(batch, num_micro):
  """`batch` with each of its `num_micro` micro-batches packed."""
  valid = np.asarray(batch.valid)
  parts = np.array_split(np.arange(B), num_micro)
  rows = max(packing.rows_needed(valid[p]) for p in parts)
  plans = [packing.plan(valid[p], rows) for p in parts]
  return batch.replace(
    pack_src=jnp.asarray(np.concatenate([p.src for p in plans])),
    pack_dst=jnp.asarray(np.concatenate([p.dst for p in plans])),
  )


def _rl(mode):
  rl = experiment.Experiment.from_config(tiny.get_config("smoke")).rl
  loss = dataclasses.replace(
    rl.loss, agg_mode=mode, entropy_coef=0.01, norm_length=float(T)
  )
  return dataclasses.replace(rl, loss=loss)


def _grads(step, model, params, batch, rl, num_micro):
  tx = optax.sgd(1.0)  # the update is minus the gradient
  state = steps.state_lib.TrainState.create(params, tx)
  new, metrics = jax.jit(
    functools.partial(step, model=model, tx=tx, rl=rl, num_micro=num_micro)
  )(state, batch, jax.random.key(0))
  grads = jax.tree.map(lambda a, b: a - b, params, new.params)
  return grads, metrics


@pytest.mark.parametrize(
  "mode,chunk,num_micro",
  [(mode, 5, 3) for mode in losses.AGG_MODES] + [("token_mean", 0, 2)],
)
def test_packed_actor_losses_and_gradients_equal_padded(mode, chunk, num_micro):
  """Packed (chunked or not, micro-batched) against one padded step."""
  batch = _batch()
  rl = _rl(mode)
  ref_model = tf.Actor(_model_cfg(0))
  params = sharding.unbox(
    ref_model.init(
      jax.random.key(1),
      batch.tokens,
      tf.positions_from_valid(batch.valid),
      batch.valid,
    )["params"]
  )
  step = functools.partial(steps.actor_step, temperature=0.9, vocab_limit=60)
  want, want_m = _grads(step, ref_model, params, batch, rl, 1)
  model = tf.Actor(_model_cfg(chunk))
  got, got_m = _grads(
    step, model, params, _packed(batch, num_micro), rl, num_micro
  )
  for key in ("loss/policy", "policy/entropy", "policy/clip_frac"):
    np.testing.assert_allclose(got_m[key], want_m[key], rtol=1e-5, atol=1e-6)
  jax.tree.map(
    lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6),
    got,
    want,
  )


@pytest.mark.parametrize("mode", losses.AGG_MODES)
def test_packed_critic_losses_and_gradients_equal_padded(mode):
  batch = _batch(1)
  rl = _rl(mode)
  model = tf.Critic(_model_cfg(0))
  params = sharding.unbox(
    model.init(
      jax.random.key(2),
      batch.tokens,
      tf.positions_from_valid(batch.valid),
      batch.valid,
    )["params"]
  )
  # A non-zero head, so the trunk gets gradients too.
  params["value_head"]["kernel"] = 0.1 * jnp.ones_like(
    params["value_head"]["kernel"]
  )
  want, want_m = _grads(steps.critic_step, model, params, batch, rl, 1)
  got, got_m = _grads(
    steps.critic_step, model, params, _packed(batch, 2), rl, 2
  )
  np.testing.assert_allclose(
    got_m["loss/critic"], want_m["loss/critic"], rtol=1e-5
  )
  jax.tree.map(
    lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6),
    got,
    want,
  )


def test_packed_log_prob_and_value_passes_equal_padded():
  batch = _batch(2)
  plan = packing.plan(np.asarray(batch.valid))
  pack = (jnp.asarray(plan.src), jnp.asarray(plan.dst))
  actor, critic = tf.Actor(_model_cfg(4)), tf.Critic(_model_cfg(0))
  args = (batch.tokens, tf.positions_from_valid(batch.valid), batch.valid)
  a_params = sharding.unbox(actor.init(jax.random.key(3), *args)["params"])
  c_params = sharding.unbox(critic.init(jax.random.key(4), *args)["params"])
  c_params["value_head"]["kernel"] = jnp.ones_like(
    c_params["value_head"]["kernel"]
  )
  mask = np.asarray(batch.valid)
  logp = functools.partial(
    steps.actor_log_probs, model=actor, temperature=1.0, vocab_limit=0
  )
  np.testing.assert_allclose(
    np.where(mask, logp(a_params, batch.tokens, batch.valid, pack=pack), 0),
    np.where(mask, logp(a_params, batch.tokens, batch.valid), 0),
    rtol=1e-5,
    atol=1e-5,
  )
  length = jnp.asarray(mask.sum(1))
  values = functools.partial(steps.critic_values, model=critic)
  got = values(c_params, batch.tokens, batch.valid, length, pack=pack)
  want = values(c_params, batch.tokens, batch.valid, length)
  np.testing.assert_allclose(
    np.where(mask, got[0], 0), np.where(mask, want[0], 0), rtol=1e-5, atol=1e-5
  )
  np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
  # Two row groups one after another, each packed on its own.
  grouped = _packed(batch, 2)
  pack2 = (grouped.pack_src, grouped.pack_dst)
  np.testing.assert_allclose(
    np.where(
      mask,
      logp(a_params, batch.tokens, batch.valid, pack=pack2, num_groups=2),
      0,
    ),
    np.where(mask, logp(a_params, batch.tokens, batch.valid), 0),
    rtol=1e-5,
    atol=1e-5,
  )
  got2 = values(
    c_params, batch.tokens, batch.valid, length, pack=pack2, num_groups=2
  )
  np.testing.assert_allclose(got2[1], want[1], rtol=1e-5, atol=1e-5)
  plain2 = values(c_params, batch.tokens, batch.valid, length, num_groups=2)
  np.testing.assert_allclose(plain2[0], want[0], rtol=1e-5, atol=1e-5)
