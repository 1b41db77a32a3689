"""Tests of codeagent_rl.parallel.transfers (8 fake CPU devices).

On CPU the guard checks host-to-device and device-to-device copies; a
device-to-host copy of a CPU array shares host memory and is not checked.
"""

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
import numpy as np
import pytest

from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import transfers


def _mesh():
  return mesh_lib.make_mesh(
    mesh_lib.MeshConfig(data=-1, fsdp=1, tensor=1, rules=())
  )


def test_replicated_like_follows_the_params_mesh():
  mesh = _mesh()
  params = {
    "w": jax.device_put(
      np.ones((8, 4), np.float32), NamedSharding(mesh, PartitionSpec("data"))
    ),
    "b": jax.device_put(
      np.ones(4, np.float32), NamedSharding(mesh, PartitionSpec())
    ),
  }
  placement = transfers.replicated_like(params)
  assert placement == NamedSharding(mesh, PartitionSpec())
  # An input placed there meets the params without an implicit copy.
  f = jax.jit(lambda p, x: p["w"].sum() + x.sum())
  x = jax.device_put(np.arange(3, dtype=np.float32), placement)
  with jax.transfer_guard("disallow"):
    assert float(jax.device_get(f(params, x))) == 32.0 + 3.0


def test_an_input_left_on_the_default_device_is_refused_beside_a_mesh():
  """Why `replicated_like` exists: jit would reshard it implicitly."""
  mesh = _mesh()
  w = jax.device_put(
    np.ones((8, 4), np.float32), NamedSharding(mesh, PartitionSpec("data"))
  )
  x = jax.device_put(np.ones(3, np.float32))  # uncommitted, device 0
  f = jax.jit(lambda w, x: w.sum() + x.sum())
  with jax.transfer_guard("disallow"):
    with pytest.raises(jax.errors.JaxRuntimeError, match="device-to-device"):
      f(w, x)


def test_replicated_like_on_one_device():
  device = jax.devices()[3]
  params = jax.device_put(np.ones(2, np.float32), device)
  placement = transfers.replicated_like({"p": params})
  assert placement.device_set == {device}


@pytest.mark.parametrize(
  "tree,match",
  [
    ({"w": np.ones(2)}, "no jax.Array"),
    ({}, "no jax.Array"),
  ],
)
def test_replicated_like_refuses_host_trees(tree, match):
  with pytest.raises(ValueError, match=match):
    transfers.replicated_like(tree)


def test_replicated_like_refuses_two_device_sets():
  a = jax.device_put(np.ones(2), jax.devices()[0])
  b = jax.device_put(np.ones(2), jax.devices()[1])
  with pytest.raises(ValueError, match="different device sets"):
    transfers.replicated_like([a, b])


@pytest.mark.parametrize("seed", [0, 1, 7, 2**31 + 5, 2**32 - 1])
def test_key_and_fold_in_equal_jax_with_python_ints(seed):
  want = jax.random.fold_in(jax.random.key(seed), 12345)
  with jax.transfer_guard("disallow"):
    got = transfers.fold_in(transfers.key(seed), 12345)
  np.testing.assert_array_equal(
    jax.random.key_data(got), jax.random.key_data(want)
  )


def test_fold_in_runs_where_the_key_is():
  mesh = _mesh()
  replicated = NamedSharding(mesh, PartitionSpec())
  key = jax.device_put(jax.random.key(3), replicated)
  with jax.transfer_guard("disallow"):
    folded = transfers.fold_in(key, 2)
  assert folded.sharding.is_equivalent_to(replicated, folded.ndim)


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, True, "3"])
def test_bad_indices_and_seeds_are_named(bad):
  with pytest.raises(ValueError, match="must be"):
    transfers.key(bad)
  with pytest.raises(ValueError, match="must be"):
    transfers.fold_in(jax.random.key(0), bad)
