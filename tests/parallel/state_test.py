"""Tests of codeagent_rl.parallel.state on 8 fake CPU devices.

The train states of configs/tiny.py:smoke's model are created once per mesh
(module fixtures): jit compiles are the slow part of these tests.
"""

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from codeagent_rl.models import transformer
from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state
from configs import common
from configs import tiny

P = jax.sharding.PartitionSpec
RULES = mesh_lib.normalize_rules(common.get_mesh_config().rules)
# The smoke model with one layer (compiling on 8 devices dominates test
# time) and no qkv bias: the key bias's gradient is zero in exact arithmetic
# (softmax ignores a shift shared by all of a query's logits), so Adam would
# scale pure float noise up to ~lr and sharded and unsharded updates of it
# would differ by chance.
MODEL = transformer.TransformerConfig.from_config(
  {
    **tiny.get_config("smoke").model.to_dict(),
    "num_layers": 1,
    "qkv_bias": False,
  }
)
# lr 1e-3: Adam moves every parameter with a gradient by ~1e-3 per step, far
# above the 1e-5 tolerance, so a wrong sharded update cannot pass.
OPTIM = state.OptimConfig.from_config(
  {**common.get_optim_config().to_dict(), "actor_lr": 1e-3, "critic_lr": 1e-3}
)
BATCH, LENGTH = 8, 16


def make_mesh(data, fsdp, tensor, devices=None):
  cfg = mesh_lib.MeshConfig(data=data, fsdp=fsdp, tensor=tensor, rules=RULES)
  return mesh_lib.make_mesh(cfg, devices=devices)


@pytest.fixture(scope="module")
def mesh8():
  return make_mesh(2, 2, 2)


@pytest.fixture(scope="module")
def states8(mesh8):
  return state.create_train_states(
    MODEL, OPTIM, mesh8, RULES, jax.random.key(0), critic_init="actor"
  )


def path_leaves(tree):
  return jax.tree_util.tree_leaves_with_path(tree)


def test_param_and_opt_state_shardings(mesh8, states8):
  actor, critic = states8
  want_actor, want_critic = state.train_state_shardings(
    MODEL, OPTIM, mesh8, RULES
  )
  for got, want in ((actor, want_actor), (critic, want_critic)):
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for (path, x), w in zip(
      path_leaves(got), jax.tree.leaves(want), strict=True
    ):
      assert x.sharding.is_equivalent_to(w, x.ndim), sharding.path_str(path)
    # Adam's moments are sharded exactly like the params.
    adam = got.opt_state[1][0]
    assert isinstance(adam, optax.ScaleByAdamState)
    for moments in (adam.mu, adam.nu):
      for p, m in zip(
        jax.tree.leaves(got.params), jax.tree.leaves(moments), strict=True
      ):
        assert m.sharding == p.sharding
    assert adam.count.sharding.is_fully_replicated
    assert got.step.sharding.is_fully_replicated


@pytest.mark.parametrize(
  "model,path,spec,shard_shape",
  [
    # shapes: embed 64, heads 4, kv heads 2, head 16, mlp 128, vocab 384.
    ("actor", "trunk/embed/embedding", P("tensor", "fsdp"), (192, 32)),
    (
      "actor",
      "trunk/layers_0/attn/q_proj/kernel",
      P("fsdp", "tensor", None),
      (32, 2, 16),
    ),
    (
      "actor",
      "trunk/layers_0/attn/k_proj/kernel",
      P("fsdp", "tensor", None),
      (32, 1, 16),
    ),
    (
      "actor",
      "trunk/layers_0/attn/o_proj/kernel",
      P("tensor", None, "fsdp"),
      (2, 16, 32),
    ),
    (
      "actor",
      "trunk/layers_0/mlp/up_proj/kernel",
      P("fsdp", "tensor"),
      (32, 64),
    ),
    ("actor", "lm_head/kernel", P("fsdp", "tensor"), (32, 192)),
    ("critic", "value_head/kernel", P("fsdp", None), (32, 1)),
  ],
)
def test_params_live_in_shards(states8, model, path, spec, shard_shape):
  params = states8[0 if model == "actor" else 1].params
  leaf = functools.reduce(lambda t, k: t[k], path.split("/"), params)
  assert leaf.sharding.spec == spec
  assert len(leaf.addressable_shards) == 8
  assert {s.data.shape for s in leaf.addressable_shards} == {shard_shape}


def test_critic_init_from_actor(states8):
  actor, critic = states8
  chex.assert_trees_all_equal(actor.params["trunk"], critic.params["trunk"])
  chex.assert_trees_all_equal(
    critic.params["value_head"]["kernel"], jnp.zeros((MODEL.embed_dim, 1))
  )
  assert int(actor.step) == 0 and int(critic.step) == 0


def test_unknown_critic_init_raises(mesh8):
  with pytest.raises(ValueError, match="critic_init='sft'"):
    state.create_train_states(
      MODEL, OPTIM, mesh8, RULES, jax.random.key(0), critic_init="sft"
    )


def test_shardings_are_worked_out_once_per_configs_mesh_and_rules(mesh8):
  first = state.train_state_shardings(MODEL, OPTIM, mesh8, RULES)
  assert state.train_state_shardings(MODEL, OPTIM, mesh8, list(RULES)) is first
  # Rules as lists (not normalised) are worked out again, to the same.
  as_lists = [
    [name, list(axes) if isinstance(axes, tuple) else axes]
    for name, axes in RULES
  ]
  again = state.train_state_shardings(MODEL, OPTIM, mesh8, as_lists)
  assert again is not first and again == first
  # Another mesh, other rules, another model: their own shardings.
  mesh4 = make_mesh(2, 2, 1, devices=jax.devices()[:4])
  on_4 = state.train_state_shardings(MODEL, OPTIM, mesh4, RULES)
  assert on_4[0].params != first[0].params
  replicated = tuple((name, None) for name, _ in RULES)
  flat = state.train_state_shardings(MODEL, OPTIM, mesh8, replicated)

  def axes(shardings):
    return {a for s in jax.tree.leaves(shardings.params) for a in s.spec}

  assert axes(flat[0]) == {None}
  assert axes(first[0]) != {None}
  wide = dataclasses.replace(MODEL, num_layers=2)
  two = state.train_state_shardings(wide, OPTIM, mesh8, RULES)
  assert len(jax.tree.leaves(two[0].params)) > len(
    jax.tree.leaves(first[0].params)
  )


def test_unshardable_model_raises_before_compiling():
  mesh = make_mesh(2, 1, 4)
  with pytest.raises(ValueError, match=r"k_proj/kernel dim 1 \(heads=2\)"):
    state.train_state_shardings(MODEL, OPTIM, mesh, RULES)


def _adam_moves(steps: int, **fields) -> tuple[list[float], state.OptimConfig]:
  """How far each of `steps` AdamW updates of a constant gradient moves.

  `fields` override the common optim section (rate 0.1, no weight decay,
  no clipping by default); returns (moves, the config).
  """
  cfg = state.OptimConfig.from_config(
    {
      **common.get_optim_config().to_dict(),
      "actor_lr": 0.1,
      "weight_decay": 0.0,
      "grad_clip_norm": None,
      **fields,
    }
  )
  tx, _ = state.make_optimizers(cfg)
  s = state.TrainState.create(jnp.zeros(3), tx)
  moved = []
  for _ in range(steps):
    before = s.params
    s = s.apply_gradients(jnp.ones(3), tx)
    moved.append(float(before[0] - s.params[0]))
  assert int(s.step) == steps
  return moved, cfg


def test_warmup_then_cosine_decay():
  moved, _ = _adam_moves(
    8, warmup_steps=2, decay_steps=6, final_lr_fraction=0.1
  )
  # A constant gradient moves Adam by ~lr per step: warmup 1/2, 2/2, then
  # a cosine from the peak to 0.1 x peak at step 6, flat after.
  cosine = [
    0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * d)) for d in (0.25, 0.5, 0.75)
  ]
  expected = [0.05, 0.1, *(0.1 * c for c in cosine), 0.01, 0.01, 0.01]
  np.testing.assert_allclose(moved, expected, rtol=1e-3)


@pytest.mark.parametrize(
  "field, value",
  [("decay_steps", 2), ("decay_steps", -1), ("final_lr_fraction", 1.5)],
)
def test_bad_decay_is_named(field, value):
  section = {**common.get_optim_config().to_dict(), "warmup_steps": 2}
  with pytest.raises(ValueError, match=f"optim.{field}="):
    state.OptimConfig.from_config({**section, field: value})


def test_warmup_and_clip():
  moved, cfg = _adam_moves(6, warmup_steps=4)
  # Adam's first steps with a constant gradient move by ~lr; warmup scales it.
  np.testing.assert_allclose(moved, [0.025, 0.05, 0.075, 0.1, 0.1, 0.1], 1e-3)
  clip_cfg = state.OptimConfig.from_config(
    {**cfg.__dict__, "grad_clip_norm": 1.0, "warmup_steps": 0}
  )
  clip_tx, _ = state.make_optimizers(clip_cfg)
  grads = jnp.array([30.0, 40.0, 0.0])
  clipped, _ = clip_tx.update(grads, clip_tx.init(grads), jnp.zeros(3))
  sgd_like = optax.clip_by_global_norm(1.0).update(grads, None)[0]
  np.testing.assert_allclose(sgd_like, [0.6, 0.8, 0.0], 1e-6)
  assert clipped.shape == (3,)


# --- One sharded actor+critic step equals the unsharded one ------------------


def train_step(actor_state, critic_state, batch, *, actor_tx, critic_tx):
  """Next-token cross-entropy for the actor, MSE to returns for the critic."""
  tokens, valid = batch["tokens"], batch["valid"]
  positions = transformer.positions_from_valid(valid)

  def actor_loss(params):
    logits, _ = transformer.Actor(MODEL).apply(
      {"params": params}, tokens, positions, valid
    )
    logp = jax.nn.log_softmax(logits[:, :-1])
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    mask = (valid[:, 1:] & valid[:, :-1]).astype(jnp.float32)
    return jnp.sum(nll * mask) / jnp.sum(mask)

  def critic_loss(params):
    values, _ = transformer.Critic(MODEL).apply(
      {"params": params}, tokens, positions, valid
    )
    mask = valid.astype(jnp.float32)
    return jnp.sum(jnp.square(values - batch["returns"]) * mask) / jnp.sum(mask)

  a_loss, a_grads = jax.value_and_grad(actor_loss)(actor_state.params)
  c_loss, c_grads = jax.value_and_grad(critic_loss)(critic_state.params)
  metrics = {
    "actor_loss": a_loss,
    "critic_loss": c_loss,
    "actor_grad_norm": optax.tree.norm(a_grads),
    "critic_grad_norm": optax.tree.norm(c_grads),
  }
  return (
    actor_state.apply_gradients(a_grads, actor_tx),
    critic_state.apply_gradients(c_grads, critic_tx),
    metrics,
  )


def host_batch(seed):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, MODEL.vocab_size, (BATCH, LENGTH)).astype(np.int32)
  lengths = rng.integers(LENGTH // 2, LENGTH + 1, BATCH)
  valid = np.arange(LENGTH)[None] < lengths[:, None]
  returns = rng.uniform(0.0, 1.0, (BATCH, 1)).repeat(LENGTH, 1)
  return {"tokens": tokens, "valid": valid, "returns": returns}


def run_steps(mesh, actor, critic, num_steps=2):
  """Params and metrics after `num_steps` jitted steps (states donated)."""
  actor_tx, critic_tx = state.make_optimizers(OPTIM)
  actor_sh, critic_sh = state.train_state_shardings(MODEL, OPTIM, mesh, RULES)
  batch_sh = sharding.batch_sharding(mesh, RULES)
  chex.clear_trace_counter()
  step = jax.jit(
    functools.partial(
      chex.assert_max_traces(train_step, n=1),
      actor_tx=actor_tx,
      critic_tx=critic_tx,
    ),
    in_shardings=(actor_sh, critic_sh, batch_sh),
    out_shardings=(actor_sh, critic_sh, sharding.replicated(mesh)),
    donate_argnums=(0, 1),
  )
  metrics = []
  for i in range(num_steps):
    batch = sharding.shard_batch(host_batch(i), mesh, RULES)
    actor, critic, m = step(actor, critic, batch)
    metrics.append(jax.device_get(m))
  assert int(actor.step) == int(critic.step) == num_steps
  for x in jax.tree.leaves((actor, critic)):
    assert x.sharding.mesh == mesh
  return jax.device_get((actor.params, critic.params)), metrics


def test_sharded_step_equals_unsharded(mesh8, states8):
  # Copies: the step donates its input states, and the fixture is shared.
  actor8, critic8 = jax.tree.map(lambda x: x.copy(), states8)
  mesh1 = make_mesh(1, 1, 1, jax.devices()[:1])
  actor1, critic1 = state.create_train_states(
    MODEL, OPTIM, mesh1, RULES, jax.random.key(0), critic_init="actor"
  )
  initial = jax.device_get((actor1.params, critic1.params))
  # Same key, same values, whatever the sharding.
  chex.assert_trees_all_equal(
    jax.device_get((actor8.params, critic8.params)), initial
  )
  # Two steps: the critic's value head starts at zero, so its trunk gets a
  # gradient only in the second step.
  final8, metrics8 = run_steps(mesh8, actor8, critic8)
  final1, metrics1 = run_steps(mesh1, actor1, critic1)
  for m8, m1 in zip(metrics8, metrics1, strict=True):
    chex.assert_trees_all_close(m8, m1, rtol=1e-5)
  # The 8-way sums round differently from the 1-way ones; Adam divides
  # each gradient by its own running scale, so a rounding difference in a
  # small gradient shows at the learning rate's scale in its parameter.
  # Measured: at most 1.1e-5 on one of 24576 entries (on one CPU model;
  # exactly within 1e-5 on another).
  chex.assert_trees_all_close(final8, final1, atol=5e-5, rtol=0)
  # The steps moved every parameter by more than the tolerance.
  for model in (0, 1):
    for (path, a), b in zip(
      path_leaves(initial[model]), jax.tree.leaves(final1[model]), strict=True
    ):
      assert np.max(np.abs(a - b)) > 1e-4, sharding.path_str(path)
