"""Rematerialisation (`model.remat`): the same model, less memory.

With a policy other than "none", whole-row passes run the blocks as one
`lax.scan` whose body is recomputed in the backward pass
(`transformer.Trunk`). Here: the values and gradients equal the unrolled
model's on padded and packed rows with either attention; the parameter
tree and the KV-cache path are unchanged; boxed parameters work; and the
memory XLA plans for the gradient is smaller than without remat and
grows linearly in T (JAX hoists mask work that is the same in every layer
out of a scan, which made it quadratic before the barrier in the body).
"""

import dataclasses

from flax import linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.models import transformer as tf
from configs import long_horizon

T = 40


def _config(remat, attention="plain", layers=2, **kw):
  base = tf.TransformerConfig.from_config(long_horizon.get_config().model)
  return dataclasses.replace(
    base,
    remat=remat,
    attention=attention,
    attention_chunk=16,
    num_layers=layers,
    **kw,
  )


def _rows(kind):
  rng = np.random.default_rng(3)
  tokens = jnp.asarray(rng.integers(1, 384, (2, T)), jnp.int32)
  valid = np.ones((2, T), bool)
  segments = None
  if kind == "padded":
    valid[1, T - 11 :] = False
    positions = tf.positions_from_valid(jnp.asarray(valid))
  else:  # two episodes packed into each row, the second row's tail padding
    segments = np.ones((2, T), np.int32)
    segments[:, 17:] = 2
    valid[1, 33:] = False
    segments[1, 33:] = 0
    positions = np.concatenate([np.arange(17), np.arange(T - 17)]) * np.ones(
      (2, 1), np.int32
    )
    positions = jnp.asarray(positions, jnp.int32)
    segments = jnp.asarray(segments)
  return tokens, positions, jnp.asarray(valid), segments


def _values_and_grads(cls, cfg, rows, params=None):
  model = cls(cfg)
  tokens, positions, valid, segments = rows
  if params is None:
    params = model.init(jax.random.key(0), tokens, positions, valid)["params"]
    # The critic's head starts at zero, which would make every gradient
    # zero: move every weight a little, the same way for each policy.
    leaves, tree = jax.tree.flatten(nn.meta.unbox(params))
    keys = jax.random.split(jax.random.key(7), len(leaves))
    params = jax.tree.unflatten(
      tree,
      [
        x + 0.05 * jax.random.normal(k, x.shape)
        for x, k in zip(leaves, keys, strict=True)
      ],
    )

  def loss(p):
    out, _ = model.apply(
      {"params": p}, tokens, positions, valid, segments=segments
    )
    return jnp.sum(jnp.where(valid[..., None] if out.ndim == 3 else valid,
                             out, 0.0) ** 2), out  # fmt: skip

  (_, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  return params, out, grads


@pytest.mark.parametrize(
  "cls,kind,attention,remat",
  [
    (tf.Actor, "packed", "chunked", "full"),
    (tf.Critic, "padded", "chunked", "dots_no_batch"),
    (tf.Critic, "packed", "plain", "full"),
  ],
  ids=["actor-packed-chunked", "critic-padded-chunked", "critic-packed-plain"],
)  # fmt: skip
def test_every_policy_computes_the_unrolled_models_values_and_gradients(
  cls, kind, attention, remat
):
  rows = _rows(kind)
  params, want, want_grads = _values_and_grads(
    cls, _config("none", attention), rows
  )
  got_params, got, grads = _values_and_grads(
    cls, _config(remat, attention), rows
  )
  # The same parameter tree from the same seed: checkpoints, HF import and
  # export do not depend on the policy.
  same = jax.tree.map(np.array_equal, params, got_params)
  assert all(jax.tree.leaves(same)), remat
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  assert float(jnp.max(jnp.abs(want))) > 0.1
  for g, w in zip(
    jax.tree.leaves(grads), jax.tree.leaves(want_grads), strict=True
  ):
    scale = float(jnp.max(jnp.abs(w)))
    assert scale > 0
    # Within float32 rounding of the tensor's largest entry: an entry far
    # smaller than it is a sum that cancelled, and recomputation moves its
    # last bits by the large terms' rounding (7.6e-5 in a gradient of 530).
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=max(1e-6, 1e-6 * scale))


def test_boxed_parameters_give_the_unboxed_result():
  cfg = _config("full", "chunked")
  model = tf.Actor(cfg)
  tokens, positions, valid, _ = _rows("padded")
  boxed = model.init(jax.random.key(1), tokens, positions, valid)["params"]
  assert any(
    isinstance(x, nn.meta.AxisMetadata)
    for x in jax.tree.leaves(
      boxed, is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata)
    )
  )
  unboxed = nn.meta.unbox(boxed)
  got, _ = model.apply({"params": boxed}, tokens, positions, valid)
  want, _ = model.apply({"params": unboxed}, tokens, positions, valid)
  np.testing.assert_array_equal(got, want)


def test_the_cache_path_is_the_same_with_and_without_remat():
  tokens, _, _, _ = _rows("padded")
  outs = {}
  for remat in ("none", "full"):
    model = tf.Actor(_config(remat, "auto"))
    valid = jnp.ones(tokens.shape, bool)
    positions = tf.positions_from_valid(valid)
    params = model.init(jax.random.key(0), tokens, positions, valid)["params"]
    cache = tf.init_cache(model.config, 2, T + 2)
    apply = jax.jit(model.apply)
    first, cache = apply(
      {"params": params}, tokens[:, :30], positions[:, :30], valid[:, :30],
      cache,
    )  # fmt: skip
    rest, cache = apply(
      {"params": params}, tokens[:, 30:], positions[:, 30:], valid[:, 30:],
      cache,
    )  # fmt: skip
    outs[remat] = (first, rest, cache.layers[-1].k)
  for got, want in zip(outs["full"], outs["none"], strict=True):
    np.testing.assert_array_equal(got, want)


def _gradient_temp_bytes(remat, t):
  cfg = _config(remat, "chunked", layers=4, mlp_dim=512)
  cfg = dataclasses.replace(cfg, attention_chunk=64)
  model = tf.Critic(cfg)
  small = jnp.ones((1, 8), bool)
  params = jax.eval_shape(
    lambda: model.init(
      jax.random.key(0),
      jnp.zeros((1, 8), jnp.int32),
      tf.positions_from_valid(small),
      small,
    )["params"]
  )

  def loss(p, tokens, valid):
    values, _ = model.apply(
      {"params": p}, tokens, tf.positions_from_valid(valid), valid
    )
    return jnp.mean(values**2)

  def spec(dtype):
    return jax.ShapeDtypeStruct((1, t), dtype)

  lowered = jax.jit(jax.grad(loss)).lower(
    params, spec(jnp.int32), spec(jnp.bool_)
  )
  return lowered.compile().memory_analysis().temp_size_in_bytes


def test_remat_plans_less_memory_and_stays_linear_in_t():
  none = {t: _gradient_temp_bytes("none", t) for t in (1024, 4096)}
  full = {t: _gradient_temp_bytes("full", t) for t in (1024, 4096)}
  # Measured 2026-12-07 (XLA:CPU): none 67 / 307 MiB, full 30 / 112 MiB;
  # hoisted masks made the scanned model grow ~14x for 4x T.
  for t in (1024, 4096):
    assert full[t] < 0.6 * none[t], (t, full[t], none[t])
  assert full[4096] < 6 * full[1024], full
