"""codeagent_rl/jit_cache.py: equal bindings share one jitted function.

The key's rules on made-up bindings (which must match, which must not,
which cannot be cached), then the callers: two learners, samplers and
SFT optimisers of equal settings share their programs; different settings
do not.
"""

import functools

from flax import linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl import jit_cache
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.train import evaluate
from codeagent_rl.train import experiment
from codeagent_rl.train import ppo as ppo_lib
from configs import tiny


def scaled(x, *, factor, offset=0.0):
  return x * factor + offset


def times(x, *, factor):
  return x * factor


def added(x, *, step):
  return x + step(x)


def test_equal_bindings_give_one_function_and_others_another():
  a = jit_cache.jit(scaled, factor=2.0, offset=1.0)
  assert jit_cache.jit(scaled, offset=1.0, factor=2.0) is a
  assert jit_cache.jit(scaled, factor=3.0, offset=1.0) is not a
  assert jit_cache.jit(scaled, factor=2.0) is not a
  assert float(a(jnp.float32(1.0))) == 3.0


def test_numbers_of_another_type_are_another_binding():
  # 1 == 1.0 == True, but the type reaches the trace (an int constant
  # keeps an integer input integer).
  ints = jit_cache.jit(times, factor=2)
  floats = jit_cache.jit(times, factor=2.0)
  assert ints is not floats
  assert jit_cache.jit(times, factor=True) not in (ints, floats)
  assert ints(jnp.int32(3)).dtype == jnp.int32
  assert floats(jnp.int32(3)).dtype != jnp.int32


def test_partials_are_compared_by_function_and_bindings():
  def make(n):
    return functools.partial(scaled, factor=n)

  a = jit_cache.jit(added, step=make(2.0))
  assert jit_cache.jit(added, step=make(2.0)) is a
  assert jit_cache.jit(added, step=make(3.0)) is not a
  assert float(a(jnp.float32(1.0))) == 3.0


def test_pytrees_of_shardings_are_compared_by_value():
  mesh = jax.make_mesh((len(jax.devices()),), ("data",))

  def shardings():
    spec = jax.sharding.PartitionSpec("data")
    return {"x": jax.sharding.NamedSharding(mesh, spec), "none": None}

  a = jit_cache.jit(scaled, jit_kwargs={"out_shardings": shardings()}, factor=2)
  b = jit_cache.jit(scaled, jit_kwargs={"out_shardings": shardings()}, factor=2)
  assert a is b


def test_an_unhashable_binding_is_jitted_afresh_and_works():
  weights = np.arange(3.0)
  a = jit_cache.jit(scaled, factor=weights)
  assert jit_cache.jit(scaled, factor=weights) is not a
  np.testing.assert_array_equal(a(jnp.ones(3)), weights)


def test_the_least_recently_used_go_beyond_the_bound(monkeypatch):
  monkeypatch.setattr(jit_cache, "MAX_ENTRIES", 2)
  jit_cache.clear()
  first = jit_cache.jit(scaled, factor=1.0)
  second = jit_cache.jit(scaled, factor=2.0)
  assert jit_cache.jit(scaled, factor=1.0) is first  # now the most recent
  jit_cache.jit(scaled, factor=3.0)  # evicts factor=2.0
  assert jit_cache.jit(scaled, factor=1.0) is first
  assert jit_cache.jit(scaled, factor=2.0) is not second


def test_equal_optimiser_settings_give_one_optimiser():
  exp = experiment.Experiment.from_config(tiny.get_config("smoke"))
  again = experiment.Experiment.from_config(tiny.get_config("smoke"))
  assert exp.optim is not again.optim
  a = state_lib.make_optimizers(exp.optim)
  actor_tx, critic_tx = state_lib.make_optimizers(again.optim)
  assert actor_tx is a[0] and critic_tx is a[1]
  assert state_lib.make_optimizer(exp.optim, 1e-3) is not a[0]


def constrained(x):
  return nn.with_logical_constraint(x * 2.0, ("batch", "embed"))


def test_the_rules_a_program_is_traced_under_are_part_of_the_key():
  # Flax reads the rules while tracing; jax's caches do not key on them.
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:2]), ("d",))
  by_batch = (("batch", "d"), ("embed", None))
  by_embed = (("batch", None), ("embed", "d"))
  x = jnp.ones((4, 4))

  def spec(fn, rules):
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
      return fn(x).sharding.spec

  a = jit_cache.jit(constrained, context=by_batch)
  assert jit_cache.jit(constrained, context=by_batch) is a
  b = jit_cache.jit(constrained, context=by_embed)
  assert b is not a
  assert spec(a, by_batch) == jax.sharding.PartitionSpec("d")
  assert spec(b, by_embed) == jax.sharding.PartitionSpec(None, "d")
  # Without it one program serves both, with the first rules' layout.
  shared = jit_cache.jit(constrained)
  assert spec(shared, by_batch) == spec(shared, by_embed)


def test_learners_on_other_rules_do_not_share_their_model_programs():
  config = tiny.get_config("smoke")
  exp = experiment.Experiment.from_config(config)
  mesh, rules = exp.make_mesh()
  other = tuple((a, None if a == "embed" else m) for a, m in rules)
  assert other != tuple(rules)
  a = ppo_lib.Learner(exp, mesh, rules)
  b = ppo_lib.Learner(exp, mesh, other)
  assert a.log_probs is not b.log_probs
  assert a._epochs[True] is not b._epochs[True]
  assert a.targets is b.targets  # no model, no constraint


def _learner(**fields):
  config = tiny.get_config("smoke")
  config.update_from_flattened_dict(fields)
  exp = experiment.Experiment.from_config(config)
  mesh, rules = exp.make_mesh()
  return ppo_lib.Learner(exp, mesh, rules)


def test_learners_of_equal_settings_share_their_programs():
  a, b = _learner(), _learner(**{"ppo.iterations": 7})
  for name in ("log_probs", "values", "targets", "prefix_values", "_order"):
    assert getattr(a, name) is getattr(b, name), name
  assert a._epochs[True] is b._epochs[True]
  assert a._epochs[False] is b._epochs[False]
  # Another learning rate or lambda is another program.
  c = _learner(**{"optim.actor_lr": 1e-3, "rl.advantage.lam": 0.5})
  assert c._epochs[True] is not a._epochs[True]
  assert c.targets is not a.targets
  assert c.log_probs is a.log_probs  # the forward pass does not change


def test_samplers_of_equal_settings_share_their_steps():
  exp = experiment.Experiment.from_config(tiny.get_config("smoke"))
  greedy = evaluate.make_sampler(exp, 0.0)
  again = evaluate.make_sampler(exp, 0.0)
  hot = evaluate.make_sampler(exp, 1.0)
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  state = greedy.start(2, 16, sharding=device)
  assert again.start(2, 16, sharding=device).cache.max_len == 16
  assert greedy._jitted(state)[0] is again._jitted(state)[0]  # extend
  assert greedy._jitted(state)[1] is again._jitted(state)[1]  # decode
  assert greedy._row_jitted(state) == again._row_jitted(state)
  # Sampling settings are the decode step's, not extend's.
  assert hot._jitted(state)[0] is greedy._jitted(state)[0]
  assert hot._jitted(state)[1] is not greedy._jitted(state)[1]


@pytest.fixture(autouse=True)
def _fresh_cache():
  jit_cache.clear()
  yield
  jit_cache.clear()
