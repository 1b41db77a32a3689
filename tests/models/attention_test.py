"""Chunked attention (`models/attention.py`) equals the plain one.

Forward and gradient, float32, on every masking the transformer uses:
causal rows, grouped-query heads, right and left padding, packed segments,
a row that sees no key, lengths that are not a multiple of the chunk and
chunks longer than the row. Then through the model (logits and a PPO
update of the actor and the critic, padded and packed), and the memory
the compiler plans for each at two lengths: the chunked backward grows
linearly in T, the plain one quadratically.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from codeagent_rl.models import attention
from codeagent_rl.models import transformer as tf
from codeagent_rl.parallel import sharding
from codeagent_rl.train import experiment
from codeagent_rl.train import packing
from codeagent_rl.train import steps
from configs import tiny
from tests.helpers import models as model_helpers

TOL = {"rtol": 2e-5, "atol": 2e-6}


def _layout(kind, b, t, rng):
  """(valid, positions, segments or None) of `kind`."""
  valid = np.ones((b, t), bool)
  segments = None
  if kind == "right_padded":
    valid[0, t - 1 - t // 3 :] = False
    valid[-1, t // 2 :] = False
  elif kind == "left_padded":
    valid[0, : t // 3] = False
  elif kind == "blind_row":
    valid[0] = False  # a row of padding: every query sees no key
  positions = np.asarray(tf.positions_from_valid(jnp.asarray(valid)))
  if kind == "packed":
    cuts = np.sort(rng.choice(np.arange(1, t), size=3, replace=False))
    segments = np.zeros((b, t), np.int32)
    positions = np.zeros((b, t), np.int32)
    for row in range(b):
      starts = [0, *cuts, t]
      for s, (lo, hi) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        segments[row, lo:hi] = s + 1
        positions[row, lo:hi] = np.arange(hi - lo)
    valid[-1, cuts[-1] :] = False  # the last segment of a row is padding
    segments[-1, cuts[-1] :] = 0
  return (
    jnp.asarray(valid),
    jnp.asarray(positions, jnp.int32),
    None if segments is None else jnp.asarray(segments),
  )


def _qkv(b, t, kv_heads, groups, h, rng, dtype=jnp.float32):
  def draw(*shape):
    return jnp.asarray(rng.standard_normal(shape), dtype)

  return (
    draw(b, t, kv_heads, groups, h),
    draw(b, t, kv_heads, h),
    draw(b, t, kv_heads, h),
  )


@pytest.mark.parametrize(
  "kind", ["causal", "right_padded", "left_padded", "packed", "blind_row"]
)
@pytest.mark.parametrize("t,chunk,groups", [(37, 8, 3), (32, 8, 1), (5, 8, 2)])
def test_chunked_equals_plain_forward_and_gradient(kind, t, chunk, groups):
  rng = np.random.default_rng(t * 7 + groups)
  b, kv_heads, h = 3, 2, 8
  valid, pos, seg = _layout(kind, b, t, rng)
  q, k, v = _qkv(b, t, kv_heads, groups, h, rng)
  weights = jnp.asarray(rng.standard_normal(q.shape), jnp.float32)

  def plain(q, k, v):
    return attention.plain(q, k, v, pos, pos, valid, seg, seg)

  def chunked(q, k, v):
    return attention.chunked(q, k, v, pos, pos, valid, seg, seg, chunk=chunk)

  want = plain(q, k, v)
  got = jax.jit(chunked)(q, k, v)
  np.testing.assert_allclose(got, want, **TOL)

  def loss(f):
    return lambda q, k, v: jnp.sum(f(q, k, v) * weights)

  want_g = jax.grad(loss(plain), (0, 1, 2))(q, k, v)
  got_g = jax.jit(jax.grad(loss(chunked), (0, 1, 2)))(q, k, v)
  for g, w in zip(got_g, want_g, strict=True):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
  if kind == "blind_row":
    # Padding sees no key in either: the uniform average of the row's keys.
    mean_v = jnp.mean(v[0], axis=0)  # [K, H]
    np.testing.assert_allclose(
      got[0], jnp.broadcast_to(mean_v[None, :, None], got[0].shape), **TOL
    )


def test_bfloat16_chunked_stays_close_to_float32():
  rng = np.random.default_rng(0)
  valid, pos, _ = _layout("right_padded", 2, 48, rng)
  q, k, v = _qkv(2, 48, 2, 2, 16, rng)
  want = attention.plain(q, k, v, pos, pos, valid)
  bf = [x.astype(jnp.bfloat16) for x in (q, k, v)]
  got = jax.jit(functools.partial(attention.chunked, chunk=16))(
    *bf, pos, pos, valid
  )
  assert got.dtype == jnp.bfloat16
  np.testing.assert_allclose(got.astype(jnp.float32), want, atol=0.05)


def test_auto_is_chunked_only_past_one_chunk():
  assert attention.choose("auto", 512, 512) == "plain"
  assert attention.choose("auto", 513, 512) == "chunked"
  assert attention.choose("plain", 9000, 512) == "plain"
  assert attention.choose("chunked", 8, 512) == "chunked"


@pytest.mark.parametrize(
  "field,value,message",
  [
    ("attention", "flash", "model.attention='flash'"),
    ("attention_chunk", 0, "model.attention_chunk=0"),
    ("attention_chunk", True, "model.attention_chunk=True"),
  ],
)
def test_bad_attention_settings_are_named(field, value, message):
  with pytest.raises(ValueError, match=message):
    model_helpers.transformer_config(
      vocab_size=16, init_std=0.02, **{field: value}
    )


VOCAB = 40
T = 24


def _cfg(kind, **fields):
  return model_helpers.transformer_config(
    vocab_size=VOCAB,
    init_std=0.3,
    tie_embeddings=False,
    attention=kind,
    attention_chunk=8,
    **fields,
  )


def _rows(seed=0):
  rng = np.random.default_rng(seed)
  lengths = np.array([T, 5, 17, 11])
  valid = np.arange(T)[None, :] < lengths[:, None]
  tokens = np.where(valid, rng.integers(1, VOCAB, valid.shape), 0)
  return jnp.asarray(tokens, jnp.int32), jnp.asarray(valid)


@pytest.mark.parametrize("remat", ["none", "full"])
def test_the_models_logits_and_gradients_are_the_same(remat):
  tokens, valid = _rows()
  pos = tf.positions_from_valid(valid)
  plain_model = tf.Actor(_cfg("plain", remat=remat))
  params = sharding.unbox(
    plain_model.init(jax.random.key(0), tokens, pos, valid)["params"]
  )

  def loss(model, params):
    logits, _ = model.apply({"params": params}, tokens, pos, valid)
    logp = jax.nn.log_softmax(logits)
    return jnp.sum(jnp.where(valid[..., None], logp, 0.0) * 0.01)

  # ("auto" is "chunked" at these lengths: `choose` is tested above.)
  for kind in ("chunked",):
    model = tf.Actor(_cfg(kind, remat=remat))
    np.testing.assert_allclose(
      model.apply({"params": params}, tokens, pos, valid)[0],
      plain_model.apply({"params": params}, tokens, pos, valid)[0],
      **TOL,
    )
    got = jax.jit(jax.grad(functools.partial(loss, model)))(params)
    want = jax.grad(functools.partial(loss, plain_model))(params)
    jax.tree.map(
      lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5),
      got,
      want,
    )


def _ppo_batch(seed):
  rng = np.random.default_rng(seed)
  tokens, valid = _rows(seed)
  trainable = np.asarray(valid) & (np.arange(T)[None, :] >= 2)

  def f32(x):
    return jnp.asarray(np.where(trainable, x, 0.0), jnp.float32)

  shape = valid.shape
  return steps.PPOBatch(
    tokens=tokens,
    valid=valid,
    trainable=jnp.asarray(trainable),
    old_logp=f32(-rng.random(shape) * 3),
    ref_logp=f32(-rng.random(shape) * 3),
    advantages=f32(rng.standard_normal(shape)),
    returns=f32(rng.standard_normal(shape)),
    old_values=f32(0.1 * rng.standard_normal(shape)),
  )


def _packed(batch):
  plan = packing.plan(np.asarray(batch.valid))
  return batch.replace(
    pack_src=jnp.asarray(plan.src), pack_dst=jnp.asarray(plan.dst)
  )


def _update(step, model, params, batch):
  rl = experiment.Experiment.from_config(tiny.get_config("smoke")).rl
  rl = dataclasses.replace(
    rl, loss=dataclasses.replace(rl.loss, entropy_coef=0.01)
  )
  tx = optax.sgd(1.0)  # the update is minus the gradient
  state = steps.state_lib.TrainState.create(params, tx)
  new, metrics = jax.jit(
    functools.partial(step, model=model, tx=tx, rl=rl, num_micro=1)
  )(state, batch, jax.random.key(0))
  return new.params, metrics


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("role", ["actor", "critic"])
def test_a_ppo_update_is_the_same_update(role, packed):
  batch = _ppo_batch(1)
  cls = tf.Actor if role == "actor" else tf.Critic
  step = (
    functools.partial(steps.actor_step, temperature=0.9, vocab_limit=VOCAB)
    if role == "actor"
    else steps.critic_step
  )
  plain_model = cls(_cfg("plain"))
  params = sharding.unbox(
    plain_model.init(
      jax.random.key(2),
      batch.tokens,
      tf.positions_from_valid(batch.valid),
      batch.valid,
    )["params"]
  )
  if role == "critic":  # a non-zero head, so the trunk moves too
    head = params["value_head"]["kernel"]
    params["value_head"]["kernel"] = 0.1 * jnp.ones_like(head)
  if packed:
    batch = _packed(batch)
  want, want_m = _update(step, plain_model, params, batch)
  got, got_m = _update(step, cls(_cfg("chunked")), params, batch)
  _assert_same_update(got, got_m, want, want_m)


def _assert_same_update(got, got_metrics, want, want_metrics):
  """Updated parameters and loss metrics agree to float32 rounding."""
  for key in want_metrics:
    if key.startswith(("loss/", "policy/", "critic/")):
      np.testing.assert_allclose(
        got_metrics[key], want_metrics[key], rtol=1e-5, atol=1e-6
      )
  jax.tree.map(
    lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6),
    got,
    want,
  )


def _planned_bytes(kind, t, chunk=128):
  """Temporary bytes XLA plans for the gradient of one attention call."""
  b, kv_heads, groups, h = 1, 2, 2, 16
  q = jax.ShapeDtypeStruct((b, t, kv_heads, groups, h), jnp.float32)
  kv = jax.ShapeDtypeStruct((b, t, kv_heads, h), jnp.float32)
  ints = jax.ShapeDtypeStruct((b, t), jnp.int32)
  valid = jax.ShapeDtypeStruct((b, t), jnp.bool_)

  def loss(q, k, v, pos, valid):
    if kind == "plain":
      out = attention.plain(q, k, v, pos, pos, valid)
    else:
      out = attention.chunked(q, k, v, pos, pos, valid, chunk=chunk)
    return jnp.sum(out)

  grad = jax.jit(jax.grad(loss, (0, 1, 2)))
  compiled = grad.lower(q, kv, kv, ints, valid).compile()
  return compiled.memory_analysis().temp_size_in_bytes


def test_the_chunked_backward_plans_memory_linear_in_length():
  """4x the length: plain plans ~16x the memory, chunked ~4x."""
  plain = [_planned_bytes("plain", t) for t in (1024, 4096)]
  chunked = [_planned_bytes("chunked", t) for t in (1024, 4096)]
  assert plain[1] / plain[0] > 12
  assert chunked[1] / chunked[0] < 5
  assert chunked[1] < plain[1] / 8


def test_a_chunked_prefill_into_the_cache_equals_the_plain_one():
  """Prefill pieces longer than a chunk, then decode steps: same logits."""
  tokens, valid = _rows(3)
  valid = valid.at[1, :4].set(False)  # a left-padded row too
  pos = tf.positions_from_valid(valid)
  plain_model = tf.Actor(_cfg("plain"))
  params = plain_model.init(jax.random.key(4), tokens, pos, valid)
  outs = {}
  for kind in ("plain", "chunked"):
    model = tf.Actor(_cfg(kind))
    cache = tf.init_cache(model.config, tokens.shape[0], T + 4)
    apply = jax.jit(model.apply)
    got = []
    # 13 tokens (two chunks of 8 against the cache), then 10, then 1.
    for start, end in [(0, 13), (13, 23), (23, 24)]:
      out, cache = apply(
        params, tokens[:, start:end], pos[:, start:end], valid[:, start:end],
        cache,
      )  # fmt: skip
      got.append(out)
    outs[kind] = jnp.concatenate(got, 1)
  full, _ = plain_model.apply(params, tokens, pos, valid)
  mask = np.asarray(valid)
  np.testing.assert_allclose(
    np.asarray(outs["chunked"])[mask], np.asarray(outs["plain"])[mask],
    atol=2e-5,
  )  # fmt: skip
  np.testing.assert_allclose(
    np.asarray(outs["chunked"])[mask], np.asarray(full)[mask], atol=2e-5
  )
