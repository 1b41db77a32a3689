"""Explicit transfers between host and devices, for guarded code.

The main job runs under `jax.transfer_guard("disallow")`: every copy
between host and devices, and between devices, is one the code asks for
(`jax.device_put`, `jax.device_get`, `jax.make_array_from_process_local_data`).
Two things make that easy to get wrong, and the helpers here get them right:

- an array that is fed to a computation on a mesh must already be on that
  mesh: an uncommitted array on the default device beside mesh-sharded
  parameters is resharded by `jit` (a device-to-device transfer the guard
  refuses). `replicated_like(params)` is the sharding to put small inputs
  (token chunks, budgets, keys) on;
- a Python number in an eager operation is a host-to-device transfer
  (`jax.random.fold_in(key, 3)`); `fold_in` sends the index explicitly, to
  where the key is.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
from jax.sharding import SingleDeviceSharding
import numpy as np

# The directions `jax_transfer_guard` sets at once.
_DIRECTIONS = (
  "jax_transfer_guard_host_to_device",
  "jax_transfer_guard_device_to_device",
  "jax_transfer_guard_device_to_host",
)
# fold_in's data is a uint32.
MAX_INDEX = 2**32 - 1


def replicated_like(tree: Any) -> jax.sharding.Sharding:
  """The sharding that copies an array to every device `tree` lives on.

  Args:
    tree: a pytree of `jax.Array`s placed on one mesh (or one device).

  Returns:
    `NamedSharding(mesh, P())` for arrays on a mesh; the device's
    `SingleDeviceSharding` for arrays on one device.

  Raises:
    ValueError: `tree` has no `jax.Array` leaf (e.g. host arrays: put them
      on the devices first), or its leaves use different device sets.
  """
  leaves = [x for x in jax.tree.leaves(tree) if isinstance(x, jax.Array)]
  if not leaves:
    raise ValueError(
      "replicated_like: the tree holds no jax.Array (host arrays?); place"
      " the parameters on the devices first (jax.device_put)."
    )
  devices = {frozenset(x.sharding.device_set) for x in leaves}
  if len(devices) > 1:
    raise ValueError(
      f"replicated_like: the tree's arrays live on {len(devices)} different"
      " device sets; place them on one mesh."
    )
  sharding = leaves[0].sharding
  if isinstance(sharding, NamedSharding):
    return NamedSharding(sharding.mesh, PartitionSpec())
  if len(sharding.device_set) == 1:
    return SingleDeviceSharding(next(iter(sharding.device_set)))
  raise ValueError(
    f"replicated_like: arrays sharded by {type(sharding).__name__} over"
    f" {len(sharding.device_set)} devices; use a NamedSharding."
  )


def fold_in(key: jax.Array, index: int) -> jax.Array:
  """`jax.random.fold_in(key, index)` for a concrete key and a host index.

  The index is placed where the key is (an explicit transfer), so the fold
  runs there. Inside a jitted function use `jax.random.fold_in`.

  Raises:
    ValueError: `index` is not an integer in [0, MAX_INDEX].
  """
  if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
    raise ValueError(f"key index {index!r}: must be an integer.")
  if not 0 <= index <= MAX_INDEX:
    raise ValueError(f"key index {index}: must be in [0, {MAX_INDEX}].")
  return jax.random.fold_in(key, jax.device_put(np.uint32(index), key.sharding))


def key(seed: int) -> jax.Array:
  """`jax.random.key(seed)`, the seed sent to the device explicitly.

  Raises:
    ValueError: `seed` is not an integer in [0, MAX_INDEX].
  """
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
    raise ValueError(f"seed {seed!r}: must be an integer.")
  if not 0 <= seed <= MAX_INDEX:
    raise ValueError(f"seed {seed}: must be in [0, {MAX_INDEX}].")
  return jax.random.key(jax.device_put(np.uint32(seed)))


@contextlib.contextmanager
def disallow_implicit() -> Iterator[None]:
  """Refuses implicit transfers in every thread until the block ends.

  `jax.transfer_guard("disallow")` holds only in the thread that enters
  it; a job's helper threads (the rollout's grader runs the anti-cheat's
  pre-submit gate) would escape it. This sets the process-wide default
  instead and restores the previous one on exit. On CPU, device-to-host
  copies share host memory and are not checked; the other directions are.
  """
  before = {name: getattr(jax.config, name) for name in _DIRECTIONS}
  jax.config.update("jax_transfer_guard", "disallow")
  try:
    yield
  finally:
    for name, value in before.items():
      jax.config.update(name, value)
