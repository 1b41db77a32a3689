"""The sampler's decode state on a mesh (8 fake CPU devices).

The KV cache is split like the batch (rows over data x fsdp, key/value
heads over tensor) and stays so from call to call; greedy rollouts through
`agent_loop.SamplerPolicy`, under a transfer guard, give the same tokens on
8 devices as on one, whatever the batch size.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.models import chat
from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.models import transformer as tf
from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import transfers
from codeagent_rl.rollout import agent_loop
from configs import common
from tests.helpers import models

P = jax.sharding.PartitionSpec
RULES = mesh_lib.normalize_rules(common.get_mesh_config().rules)
FMT = chat.ByteProtocolFormat()
# Qwen-like: qkv bias, tied embeddings, 2 key/value heads for 4 query heads.
CFG = models.transformer_config(
  vocab_size=FMT.vocab_size, init_std=0.5, qkv_bias=True
)
ACTOR = tf.Actor(CFG)
GREEDY = sampler_lib.SamplerConfig(
  temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=6
)
# Two prefill buckets (prompt, observation) and two turns.
CACHE_LEN = 2 * agent_loop.PREFILL_BUCKET + 2 * GREEDY.max_new_tokens
ROWS = ("data", "fsdp")


def make_mesh(data, fsdp, tensor, devices=None):
  cfg = mesh_lib.MeshConfig(data=data, fsdp=fsdp, tensor=tensor, rules=RULES)
  return mesh_lib.make_mesh(cfg, devices=devices)


@functools.cache
def boxed_params():
  """The actor's params in logical-axis boxes, made once."""
  valid = jnp.ones((1, 4), bool)
  # Jitted: eager flax init dispatches op by op (seconds).
  return jax.jit(ACTOR.init)(
    jax.random.key(0),
    jnp.zeros((1, 4), jnp.int32),
    tf.positions_from_valid(valid),
    valid,
  )["params"]


def placed_params(where):
  """The params on "1" or "8" devices, or on the "default" device.

  On a mesh they are split by the rules, as the learner holds them; on the
  default device they are uncommitted, as before the cache was sharded.
  """
  boxed = boxed_params()
  host = jax.device_get(sharding.unbox(boxed))
  if where == "default":
    return jax.device_put({"params": host})
  if where == "1":
    mesh = make_mesh(1, 1, 1, devices=jax.devices()[:1])
  else:
    mesh = make_mesh(2, 2, 2)
  shardings = sharding.param_shardings(boxed, mesh, RULES)
  return {"params": jax.device_put(host, shardings)}


def prompts(batch):
  """`batch` ragged prompts of 3 to 9 ids."""
  rng = np.random.default_rng(batch)
  return [
    rng.integers(16, 256, size=3 + (2 * i) % 7).tolist() for i in range(batch)
  ]


@functools.cache
def greedy_rollout(where, batch):
  """(ids, log-probs) of two greedy turns with an observation between them.

  Params placed as `placed_params(where)` says; the sampler has the rules
  except on "default". Runs with implicit transfers refused, as the main
  job does.
  """
  params = placed_params(where)
  rules = None if where == "default" else RULES
  sampler = sampler_lib.Sampler(
    ACTOR, CFG, GREEDY, pad_id=FMT.pad_id, rules=rules
  )
  policy = agent_loop.SamplerPolicy(sampler, params, FMT, CACHE_LEN)
  rng = jax.random.key(0)
  observations = [[20 + i, 30, 40][: 1 + i % 3] for i in range(batch)]
  with jax.transfer_guard("disallow"):
    policy.begin(prompts(batch))
    first = policy.generate([GREEDY.max_new_tokens] * batch, rng)
    policy.observe(observations)
    second = policy.generate([4] * batch, rng)
    policy.end()
  # The state kept the layout it was made in, turn after turn.
  layout = sampler.shardings_for(transfers.replicated_like(params), batch)
  assert list(sampler._steps) == [layout]
  ids = [a + b for (a, _), (b, _) in zip(first, second, strict=True)]
  logp = [a + b for (_, a), (_, b) in zip(first, second, strict=True)]
  return ids, logp


def test_state_shardings_split_rows_and_kv_heads():
  mesh = make_mesh(2, 2, 2)
  state_sh = sampler_lib.state_shardings(CFG, mesh, RULES, batch=4)
  assert len(state_sh.cache.layers) == CFG.num_layers
  for layer in state_sh.cache.layers:
    assert layer.k.spec == layer.v.spec == P(ROWS, "tensor")
  for rows in (
    state_sh.cache.valid,
    state_sh.cache.positions,
    state_sh.last_logits,
    state_sh.next_pos,
  ):
    assert rows.spec == P(ROWS)
  assert state_sh.cache.index.spec == P()


@pytest.mark.parametrize(
  "sizes, batch, rows, heads",
  [
    ((2, 2, 2), 3, None, "tensor"),  # 3 rows do not split over 4
    ((2, 2, 2), 6, None, "tensor"),
    ((1, 2, 4), 4, ROWS, None),  # 2 kv heads do not split over 4
    ((1, 1, 8), 5, ROWS, None),  # rows over 1 device split anything
  ],
)
def test_axes_that_do_not_divide_are_replicated(sizes, batch, rows, heads):
  state_sh = sampler_lib.state_shardings(CFG, make_mesh(*sizes), RULES, batch)
  assert state_sh.cache.layers[0].k.spec == P(rows, heads)
  assert state_sh.next_pos.spec == P(rows)


def test_heads_stay_whole_when_rows_use_their_mesh_axis():
  rules = tuple((n, "fsdp" if n == "heads" else a) for n, a in RULES)
  mesh = make_mesh(2, 2, 2)
  taken = sampler_lib.state_shardings(CFG, mesh, rules, batch=4)
  assert taken.cache.layers[0].k.spec == P(ROWS, None)
  free = sampler_lib.state_shardings(CFG, mesh, rules, batch=3)
  assert free.cache.layers[0].k.spec == P(None, "fsdp")


def test_a_missing_rule_raises():
  rules = tuple((n, a) for n, a in RULES if n != "heads")
  with pytest.raises(ValueError, match=r"no rule for \['heads'\]"):
    sampler_lib.state_shardings(CFG, make_mesh(2, 2, 2), rules, batch=4)


def test_cache_is_made_and_kept_in_its_shardings():
  mesh = make_mesh(2, 2, 2)
  params = placed_params("8")
  sampler = sampler_lib.Sampler(
    ACTOR, CFG, GREEDY, pad_id=FMT.pad_id, rules=RULES
  )
  state_sh = sampler.shardings_for(sharding.replicated(mesh), 4)
  assert state_sh == sampler_lib.state_shardings(CFG, mesh, RULES, 4)
  state = sampler.start(4, 16, sharding=state_sh)

  def check(state):
    for leaf, want in zip(
      jax.tree.leaves(state), jax.tree.leaves(state_sh), strict=True
    ):
      assert leaf.sharding == want
    k = state.cache.layers[0].k
    # [B, K, S, H] = [4, 2, 16, 8]: a row and a head per device.
    assert {s.data.shape for s in k.addressable_shards} == {(1, 1, 16, 8)}

  check(state)
  tokens = np.asarray([[17, 18, 19]] * 4, np.int32)
  valid = np.ones_like(tokens, bool)
  rng = jax.random.key(0)
  with jax.transfer_guard("disallow"):
    state = sampler.extend(
      params, state, *jax.device_put((tokens, valid), state_sh.next_pos)
    )
    check(state)
    state, out = sampler.decode(
      params,
      state,
      jax.device_put(rng, sharding.replicated(mesh)),
      jax.device_put(np.full(4, 3, np.int32), state_sh.next_pos),
      jax.device_put(np.asarray([-1], np.int32), sharding.replicated(mesh)),
    )
  check(state)
  assert out.tokens.sharding == state_sh.next_pos
  assert int(jax.device_get(state.cache.index)) == 3 + 3


@pytest.mark.parametrize("batch", [4, 3])
def test_greedy_rollout_on_8_devices_equals_one_device(batch):
  want_ids, want_logp = greedy_rollout("1", batch)
  got_ids, got_logp = greedy_rollout("8", batch)
  assert got_ids == want_ids
  assert sum(map(len, want_ids)) > 2 * batch  # turns of several tokens
  for got, want in zip(got_logp, want_logp, strict=True):
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_one_device_results_are_bit_identical_to_an_unsharded_state():
  # Rules on a 1-device mesh change nothing but the specs; without rules
  # and a mesh every leaf is on the default device, as before sharding.
  assert greedy_rollout("1", 4) == greedy_rollout("default", 4)
