"""Chunked log-probs, entropies and argmaxes (`models/token_stats.py`).

The chunked path must equal the unchunked one in values and gradients
(float32, 1e-5), and its compiled peak memory at Qwen2.5's vocabulary must
stay below what one [T, V] float32 logits array takes, which the unchunked
path exceeds. Memory is read from XLA's compiled memory analysis on CPU
(nothing that large is allocated).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.models import token_stats
from codeagent_rl.models import transformer as tf
from codeagent_rl.train import steps
from tests.helpers import models as model_helpers

TOL = dict(rtol=1e-5, atol=1e-5)
ALL = ("entropy", "argmax_hit")


def _linear_head(w):
  return lambda h: jnp.einsum("btd,dv->btv", h, w)


def _random(seed, b=3, t=23, d=8, v=37):
  rng = np.random.default_rng(seed)
  hidden = jnp.asarray(rng.standard_normal((b, t, d)), jnp.float32)
  w = jnp.asarray(rng.standard_normal((d, v)), jnp.float32)
  targets = jnp.asarray(rng.integers(0, v, (b, t)), jnp.int32)
  return hidden, w, targets


@pytest.mark.parametrize("chunk", [1, 4, 7, 23, 64])
def test_chunked_values_equal_unchunked(chunk):
  hidden, w, targets = _random(0)
  kwargs = dict(temperature=0.7, vocab_limit=30, extra=ALL)
  want = token_stats.token_stats(
    _linear_head(w), hidden, targets, chunk=0, **kwargs
  )
  got = token_stats.token_stats(
    _linear_head(w), hidden, targets, chunk=chunk, **kwargs
  )
  assert set(got) == {"logp", "entropy", "argmax_hit"}
  for key in ("logp", "entropy"):
    assert got[key].shape == targets.shape
    np.testing.assert_allclose(got[key], want[key], **TOL)
  np.testing.assert_array_equal(got["argmax_hit"], want["argmax_hit"])


def test_unchunked_is_the_log_softmax_of_the_logits():
  hidden, w, targets = _random(1)
  targets = targets % 30  # ids the padding exclusion leaves
  logits = np.einsum("btd,dv->btv", hidden, w) / 0.5
  logits[..., 30:] = -np.inf  # vocabulary padding is excluded
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  got = token_stats.token_stats(
    _linear_head(w),
    hidden,
    targets,
    chunk=5,
    temperature=0.5,
    vocab_limit=30,
    extra=ALL,
  )
  want = np.take_along_axis(logp, np.asarray(targets)[..., None], -1)[..., 0]
  np.testing.assert_allclose(got["logp"], want, rtol=1e-5, atol=1e-5)
  p = np.exp(logp)
  ent = -(p * np.where(p > 0, logp, 0)).sum(-1)
  np.testing.assert_allclose(got["entropy"], ent, rtol=1e-5, atol=1e-5)
  hit = np.argmax(logits, -1) == np.asarray(targets)
  np.testing.assert_array_equal(got["argmax_hit"], hit)


@pytest.mark.parametrize("chunk", [4, 7])
def test_chunked_gradients_equal_unchunked(chunk):
  hidden, w, targets = _random(2)
  weights = jnp.asarray(np.random.default_rng(3).random(targets.shape))

  def loss(hidden, w, chunk):
    s = token_stats.token_stats(
      _linear_head(w), hidden, targets, chunk=chunk, extra=("entropy",)
    )
    return jnp.sum(weights * s["logp"]) - 0.1 * jnp.sum(weights * s["entropy"])

  want = jax.grad(loss, argnums=(0, 1))(hidden, w, 0)
  got = jax.grad(loss, argnums=(0, 1))(hidden, w, chunk)
  for g, e in zip(got, want, strict=True):
    np.testing.assert_allclose(g, e, **TOL)


def test_unknown_stats_are_named():
  hidden, w, targets = _random(4)
  with pytest.raises(ValueError, match=r"Unknown token stats \['perplexity'\]"):
    token_stats.token_stats(
      _linear_head(w), hidden, targets, chunk=0, extra=("perplexity",)
    )


def _actor(chunk, tie):
  cfg = model_helpers.transformer_config(
    vocab_size=300, init_std=0.3, tie_embeddings=tie, logits_chunk=chunk
  )
  model = tf.Actor(cfg)
  tokens = jnp.asarray(np.random.default_rng(5).integers(0, 260, (2, 19)))
  valid = jnp.arange(19)[None, :] < jnp.asarray([[19], [11]])
  params = model.init(
    jax.random.key(0), tokens, tf.positions_from_valid(valid), valid
  )["params"]
  return model, params, tokens, valid


@pytest.mark.parametrize("tie", [True, False])
def test_the_actors_chunked_stats_equal_its_logits(tie):
  """`steps.shifted_token_stats` (chunk 4) against the actor's full logits."""
  model, params, tokens, valid = _actor(4, tie)
  logits, _ = model.apply(
    {"params": params}, tokens, tf.positions_from_valid(valid), valid
  )
  stats = jax.jit(
    lambda p: steps.shifted_token_stats(
      model, p, tokens, valid, temperature=0.8, vocab_limit=260, extra=ALL
    )
  )(params)
  np.testing.assert_allclose(
    stats["logp"], steps.shifted_log_probs(logits, tokens, 0.8, 260), **TOL
  )
  np.testing.assert_allclose(
    stats["entropy"], steps.shifted_entropy(logits, 0.8, 260), **TOL
  )
  np.testing.assert_array_equal(stats["logp"][:, 0], 0.0)  # token 0
  hit = np.argmax(np.asarray(logits)[:, :-1, :260], -1) == tokens[:, 1:]
  np.testing.assert_array_equal(stats["argmax_hit"][:, 1:], hit)


@pytest.mark.parametrize("tie", [True, False])
def test_the_actors_parameter_gradients_do_not_depend_on_the_chunk(tie):
  _, params, tokens, valid = _actor(0, tie)
  mask = valid & (jnp.arange(19)[None, :] > 3)

  def loss(params, chunk):
    model = _actor(chunk, tie)[0]
    s = steps.shifted_token_stats(
      model, params, tokens, valid, extra=("entropy",)
    )
    return jnp.sum(jnp.where(mask, s["logp"] + 0.01 * s["entropy"], 0.0))

  grad = jax.jit(jax.grad(loss), static_argnums=1)
  want = grad(params, 0)
  got = grad(params, 5)
  jax.tree.map(lambda g, e: np.testing.assert_allclose(g, e, **TOL), got, want)


# Qwen2.5's vocabulary and an 8k-token row.
VOCAB, LENGTH = 151_936, 8192


def _peak_bytes(chunk):
  """Compiled temp memory of one actor loss gradient, B=1, T=8192."""
  cfg = model_helpers.transformer_config(
    vocab_size=VOCAB,
    init_std=0.02,
    # One narrow layer with one head: the T x T attention stays ~0.25 GB,
    # so the logits are what the two paths differ in.
    num_layers=1,
    embed_dim=64,
    num_heads=1,
    num_kv_heads=1,
    head_dim=16,
    mlp_dim=128,
    logits_chunk=chunk,
  )
  model = tf.Actor(cfg)
  one = jnp.zeros((1, 1), jnp.int32)
  params = jax.eval_shape(
    lambda: model.init(jax.random.key(0), one, one, one.astype(bool))
  )["params"]

  def loss(params, tokens, valid):
    s = steps.shifted_token_stats(
      model, params, tokens, valid, extra=("entropy",)
    )
    return jnp.sum(s["logp"]) + 0.01 * jnp.sum(s["entropy"])

  tokens = jax.ShapeDtypeStruct((1, LENGTH), jnp.int32)
  valid = jax.ShapeDtypeStruct((1, LENGTH), bool)
  compiled = jax.jit(jax.grad(loss)).lower(params, tokens, valid).compile()
  return compiled.memory_analysis().temp_size_in_bytes


def test_chunking_keeps_an_8k_row_at_qwen_vocab_under_one_logits_array():
  one_logits_array = VOCAB * LENGTH * 4  # float32 [T, V]: 4.98 GB
  chunked = _peak_bytes(512)
  unchunked = _peak_bytes(0)
  assert unchunked > one_logits_array, unchunked
  assert chunked < one_logits_array / 2, (
    f"chunked peak {chunked / 2**30:.2f} GiB, unchunked"
    f" {unchunked / 2**30:.2f} GiB"
  )


def test_a_negative_chunk_is_refused():
  with pytest.raises(ValueError, match=r"model\.logits_chunk=-1"):
    model_helpers.transformer_config(
      vocab_size=300, init_std=0.02, logits_chunk=-1
    )
