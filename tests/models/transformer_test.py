"""Tests of codeagent_rl.models.transformer."""

import dataclasses

import chex
from flax import linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.models import transformer as tf
from tests.helpers import models

CFG = models.transformer_config(
  vocab_size=61, init_std=0.2, qkv_bias=True, tie_embeddings=False
)


def init(model, cfg=CFG, b=2, t=6, seed=0):
  tokens = jnp.zeros((b, t), jnp.int32)
  valid = jnp.ones((b, t), bool)
  return model.init(
    jax.random.PRNGKey(seed), tokens, tf.positions_from_valid(valid), valid
  )


def random_tokens(b, t, seed=1, vocab=CFG.vocab_size):
  return jax.random.randint(jax.random.PRNGKey(seed), (b, t), 0, vocab)


def test_param_count_and_logical_axes():
  params = init(tf.Actor(CFG))
  unboxed = nn.unbox(params)
  assert sum(x.size for x in jax.tree.leaves(unboxed)) == CFG.num_params()
  specs = nn.get_partition_spec(params)["params"]
  attn = specs["trunk"]["layers_0"]["attn"]
  assert tuple(attn["q_proj"]["kernel"]) == ("embed", "heads", "kv")
  assert tuple(attn["o_proj"]["kernel"]) == ("heads", "kv", "embed")
  mlp = specs["trunk"]["layers_0"]["mlp"]
  assert tuple(mlp["down_proj"]["kernel"]) == ("mlp", "embed")
  assert tuple(specs["trunk"]["embed"]["embedding"]) == ("vocab", "embed")
  assert tuple(specs["lm_head"]["kernel"]) == ("embed", "vocab")
  # Every parameter is named: no leaf is left without logical axes.
  for path, leaf in jax.tree_util.tree_leaves_with_path(
    params, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned)
  ):
    assert isinstance(leaf, nn.LogicallyPartitioned), path


def test_tied_embeddings_have_no_lm_head():
  cfg = dataclasses.replace(CFG, tie_embeddings=True)
  params = nn.unbox(init(tf.Actor(cfg), cfg))["params"]
  assert "lm_head" not in params
  assert sum(x.size for x in jax.tree.leaves(params)) == cfg.num_params()


def test_causal_masking_future_tokens_change_nothing():
  actor = tf.Actor(CFG)
  params = init(actor)
  tokens = random_tokens(1, 8)
  valid = jnp.ones((1, 8), bool)
  pos = tf.positions_from_valid(valid)
  a, _ = actor.apply(params, tokens, pos, valid)
  b, _ = actor.apply(params, tokens.at[0, 5:].set(3), pos, valid)
  np.testing.assert_allclose(a[:, :5], b[:, :5], atol=1e-6)
  assert not np.allclose(a[:, 5:], b[:, 5:])


@pytest.mark.parametrize("pad_side", ["left", "right"])
def test_padding_does_not_change_logits(pad_side):
  actor = tf.Actor(CFG)
  params = init(actor)
  tokens = random_tokens(1, 5)
  ref, _ = actor.apply(
    params, tokens, jnp.arange(5)[None], jnp.ones((1, 5), bool)
  )
  pad = jnp.full((1, 3), 7, jnp.int32)  # garbage ids under the padding
  if pad_side == "left":
    padded = jnp.concatenate([pad, tokens], 1)
    valid = jnp.arange(8)[None] >= 3
    sl = slice(3, 8)
  else:
    padded = jnp.concatenate([tokens, pad], 1)
    valid = jnp.arange(8)[None] < 5
    sl = slice(0, 5)
  out, _ = actor.apply(params, padded, tf.positions_from_valid(valid), valid)
  np.testing.assert_allclose(out[:, sl], ref, atol=1e-5)
  assert np.all(np.isfinite(out))


def test_cached_decoding_equals_full_forward_at_every_position():
  actor = tf.Actor(CFG)
  params = init(actor)
  tokens = random_tokens(3, 12)
  # Row 1 left-padded, row 2 right-padded.
  valid = jnp.ones((3, 12), bool).at[1, :3].set(False).at[2, 9:].set(False)
  pos = tf.positions_from_valid(valid)
  full, _ = actor.apply(params, tokens, pos, valid)
  cache = tf.init_cache(CFG, 3, 16)
  outs = []
  apply = jax.jit(actor.apply)
  for start, end in [(0, 4), (4, 5), (5, 9), (9, 10), (10, 11), (11, 12)]:
    out, cache = apply(
      params,
      tokens[:, start:end],
      pos[:, start:end],
      valid[:, start:end],
      cache,
    )
    outs.append(out)
  inc = jnp.concatenate(outs, 1)
  mask = np.asarray(valid)
  np.testing.assert_allclose(
    np.asarray(inc)[mask], np.asarray(full)[mask], atol=2e-5
  )
  assert int(cache.index) == 12


def test_gqa_equals_mha_with_repeated_kv_weights():
  mha_cfg = dataclasses.replace(CFG, num_kv_heads=4)
  gqa, mha = tf.Actor(CFG), tf.Actor(mha_cfg)
  gqa_params = nn.unbox(init(gqa))
  mha_params = jax.tree.map(jnp.copy, nn.unbox(init(mha, mha_cfg)))
  p = mha_params["params"]
  for i in range(CFG.num_layers):
    src = gqa_params["params"]["trunk"][f"layers_{i}"]
    dst = p["trunk"][f"layers_{i}"]
    dst["attn"]["q_proj"] = src["attn"]["q_proj"]
    for name in ("k_proj", "v_proj"):
      dst["attn"][name] = {
        "kernel": jnp.repeat(src["attn"][name]["kernel"], 2, axis=1),
        "bias": jnp.repeat(src["attn"][name]["bias"], 2, axis=0),
      }
    for name in ("o_proj",):
      dst["attn"][name] = src["attn"][name]
    for name in ("mlp", "attn_norm", "mlp_norm"):
      dst[name] = src[name]
  for name in ("embed", "final_norm"):
    p["trunk"][name] = gqa_params["params"]["trunk"][name]
  p["lm_head"] = gqa_params["params"]["lm_head"]
  tokens = random_tokens(2, 7)
  valid = jnp.ones((2, 7), bool)
  pos = tf.positions_from_valid(valid)
  a, _ = gqa.apply(gqa_params, tokens, pos, valid)
  b, _ = mha.apply(mha_params, tokens, pos, valid)
  np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("policy", ["full", "dots"])
def test_remat_gives_same_values_and_grads(policy):
  cfg = dataclasses.replace(CFG, remat=policy)
  base, remat = tf.Actor(CFG), tf.Actor(cfg)
  params = init(base)
  tokens = random_tokens(2, 6)
  valid = jnp.ones((2, 6), bool)
  pos = tf.positions_from_valid(valid)

  def loss(p, model):
    return jnp.mean(model.apply(p, tokens, pos, valid)[0] ** 2)

  grad_fn = jax.jit(jax.value_and_grad(loss), static_argnums=1)
  la, ga = grad_fn(params, base)
  lb, gb = grad_fn(params, remat)
  np.testing.assert_allclose(la, lb, rtol=1e-6)
  chex.assert_trees_all_close(ga, gb, atol=1e-6)


def test_bfloat16_activations_run_and_stay_close():
  cfg = dataclasses.replace(CFG, dtype="bfloat16")
  params = init(tf.Actor(CFG))
  tokens = random_tokens(2, 6)
  valid = jnp.ones((2, 6), bool)
  pos = tf.positions_from_valid(valid)
  a, _ = tf.Actor(CFG).apply(params, tokens, pos, valid)
  b, _ = tf.Actor(cfg).apply(params, tokens, pos, valid)
  assert b.dtype == jnp.float32  # logits are returned in float32
  np.testing.assert_allclose(a, b, atol=0.15)


def test_critic_has_its_own_trunk_and_can_copy_the_actor():
  actor, critic = tf.Actor(CFG), tf.Critic(CFG)
  actor_params = nn.unbox(init(actor, seed=0))
  critic_params = nn.unbox(init(critic, seed=1))
  tokens = random_tokens(2, 6)
  valid = jnp.ones((2, 6), bool)
  pos = tf.positions_from_valid(valid)
  values, _ = critic.apply(critic_params, tokens, pos, valid)
  assert values.shape == (2, 6) and values.dtype == jnp.float32
  a_trunk = actor_params["params"]["trunk"]
  c_trunk = critic_params["params"]["trunk"]
  assert not np.allclose(
    a_trunk["embed"]["embedding"], c_trunk["embed"]["embedding"]
  )
  copied = tf.init_critic_from_actor(
    critic_params["params"], actor_params["params"]
  )
  chex.assert_trees_all_equal(copied["trunk"], a_trunk)
  chex.assert_trees_all_equal(
    copied["value_head"], critic_params["params"]["value_head"]
  )
  # Hidden states of the copied critic equal the actor's trunk output.
  h_actor, _ = tf.Trunk(CFG).apply({"params": a_trunk}, tokens, pos, valid)
  h_critic, _ = tf.Trunk(CFG).apply(
    {"params": copied["trunk"]}, tokens, pos, valid
  )
  np.testing.assert_array_equal(h_actor, h_critic)
  # Gradients of the critic loss never reach the actor.
  grads = jax.grad(
    lambda p: jnp.sum(critic.apply({"params": p}, tokens, pos, valid)[0])
  )(copied)
  assert set(grads) == {"trunk", "value_head"}


def test_rope_is_relative():
  # Shifting all positions by a constant leaves attention scores unchanged.
  actor = tf.Actor(CFG)
  params = init(actor)
  tokens = random_tokens(1, 6)
  valid = jnp.ones((1, 6), bool)
  a, _ = actor.apply(params, tokens, jnp.arange(6)[None], valid)
  b, _ = actor.apply(params, tokens, jnp.arange(6)[None] + 37, valid)
  np.testing.assert_allclose(a, b, atol=2e-4)


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("num_kv_heads", 3, "num_kv_heads=3"),
    ("head_dim", 7, "head_dim=7"),
    ("dtype", "float16", "dtype='float16'"),
    ("remat", "some", "remat='some'"),
    ("num_layers", 0, "num_layers=0"),
  ],
)
def test_config_validation(field, value, match):
  with pytest.raises(ValueError, match=match):
    dataclasses.replace(CFG, **{field: value})


def test_from_config_names_stray_fields():
  fields = dataclasses.asdict(CFG)
  fields["n_layers"] = 2
  with pytest.raises(ValueError, match=r"unknown fields \['n_layers'\]"):
    tf.TransformerConfig.from_config(fields)
