"""Tests of codeagent_rl.parallel.distributed in one process.

The launcher's environment is parsed without starting anything; the
helpers that act across processes are checked for what they do with one
(nothing, or the obvious). tests/parallel/multihost_test.py runs the
trainer in two processes.
"""

import jax
import numpy as np
import pytest

from codeagent_rl.parallel import distributed
from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import sharding

FULL = {
  "JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234",
  "JAX_PROCESS_COUNT": "4",
  "JAX_PROCESS_ID": "3",
}


def test_no_variables_is_one_process():
  assert distributed.from_environ({}) is None
  # Set to nothing counts as unset (a launcher template left blank).
  assert distributed.from_environ(dict.fromkeys(FULL, "")) is None
  assert distributed.initialize({"HOME": "/root"}) is None


def test_all_variables_give_the_group():
  group = distributed.from_environ(FULL)
  assert group == distributed.ProcessGroup("10.0.0.1:1234", 4, 3)
  padded = {k: f" {v} " for k, v in FULL.items()}
  assert distributed.from_environ(padded) == group


@pytest.mark.parametrize(
  "unset", ["JAX_COORDINATOR_ADDRESS", "JAX_PROCESS_COUNT", "JAX_PROCESS_ID"]
)
def test_some_but_not_all_variables_name_the_missing_one(unset):
  environ = {k: v for k, v in FULL.items() if k != unset}
  with pytest.raises(ValueError, match=f"but {unset} not:.*unset them all"):
    distributed.from_environ(environ)


@pytest.mark.parametrize(
  "name,value,match",
  [
    ("JAX_PROCESS_COUNT", "two", r"JAX_PROCESS_COUNT='two': must be an int"),
    ("JAX_PROCESS_ID", "1.5", r"JAX_PROCESS_ID='1.5': must be an integer"),
    ("JAX_PROCESS_COUNT", "0", r"JAX_PROCESS_COUNT=0: must be >= 1"),
    ("JAX_PROCESS_ID", "4", r"JAX_PROCESS_ID=4: must be in \[0, .*=4\)"),
    ("JAX_PROCESS_ID", "-1", r"JAX_PROCESS_ID=-1: must be in"),
    ("JAX_COORDINATOR_ADDRESS", "10.0.0.1", r"expected host:port"),
    ("JAX_COORDINATOR_ADDRESS", ":1234", r"expected host:port"),
    ("JAX_COORDINATOR_ADDRESS", "h:port", r"expected host:port"),
    ("JAX_COORDINATOR_ADDRESS", "h:70000", r"expected host:port"),
  ],
)
def test_bad_values_name_the_variable(name, value, match):
  with pytest.raises(ValueError, match=match):
    distributed.from_environ({**FULL, name: value})


def test_bad_variables_stop_before_jax_distributed(monkeypatch):
  def refuse(**kwargs):
    raise AssertionError(f"jax.distributed.initialize({kwargs}) was called")

  monkeypatch.setattr(jax.distributed, "initialize", refuse)
  with pytest.raises(ValueError, match="JAX_PROCESS_ID"):
    distributed.initialize({**FULL, "JAX_PROCESS_ID": "9"})
  assert distributed.initialize({}) is None


def test_initialize_passes_the_group_and_sets_cpu_collectives(monkeypatch):
  calls = []
  monkeypatch.setattr(
    jax.distributed, "initialize", lambda **kw: calls.append(kw)
  )
  before = jax.config.jax_cpu_collectives_implementation
  try:
    assert distributed.initialize(FULL) == distributed.from_environ(FULL)
    assert jax.config.jax_cpu_collectives_implementation == "gloo"
  finally:
    jax.config.update("jax_cpu_collectives_implementation", before)
  assert calls == [
    {
      "coordinator_address": "10.0.0.1:1234",
      "num_processes": 4,
      "process_id": 3,
    }
  ]


def test_one_process_helpers():
  assert jax.process_count() == 1
  assert distributed.is_primary()
  assert distributed.even_share(5) == (0, 5)
  obj = {"a": np.arange(3)}
  assert distributed.gather(obj)[0] is obj
  mesh = mesh_lib.make_mesh(
    mesh_lib.MeshConfig(
      data=-1, fsdp=1, tensor=1, rules=(("batch", ("data", "fsdp")),)
    )
  )
  assert mesh_lib.local_mesh(mesh) is mesh
  batch = sharding.batch_sharding(mesh, (("batch", ("data", "fsdp")),))
  assert sharding.process_rows(batch, 16) == slice(0, 16)
  tree = {"w": jax.device_put(np.ones((8, 2)), batch)}
  assert distributed.host_copy(tree) is tree
  distributed.barrier("nothing to wait for")


@pytest.mark.parametrize(
  "count,shares",
  [
    (2, [(0, 4), (4, 7)]),
    (3, [(0, 3), (3, 5), (5, 7)]),
    (8, [(0, 1)] + [(k, k + 1) for k in range(1, 7)] + [(7, 7)]),
  ],
)
def test_even_share_splits_in_order(monkeypatch, count, shares):
  monkeypatch.setattr(jax, "process_count", lambda: count)
  got = []
  for index in range(count):
    monkeypatch.setattr(jax, "process_index", lambda index=index: index)
    got.append(distributed.even_share(7))
  assert got == shares


def test_put_replicated_with_one_process_is_device_put():
  mesh = mesh_lib.make_mesh(
    mesh_lib.MeshConfig(data=-1, fsdp=1, tensor=1, rules=())
  )
  everywhere = sharding.replicated(mesh)
  key = jax.random.key(3)
  placed = distributed.put_replicated(key, everywhere)
  assert placed.sharding == everywhere
  np.testing.assert_array_equal(
    jax.random.key_data(placed), jax.random.key_data(key)
  )
