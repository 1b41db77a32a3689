"""Multi-host JAX: one controller process per host, from a launcher's env.

A launcher that starts the trainer on several hosts sets, on each:

  JAX_COORDINATOR_ADDRESS  host:port of process 0 (the coordinator)
  JAX_PROCESS_COUNT        how many processes the run has
  JAX_PROCESS_ID           this process's index, 0 .. count - 1

`initialize()` reads them and calls `jax.distributed.initialize`; with none
of them set it does nothing (one process, as before). It must run before
anything touches a JAX backend (`main.py` calls it first). Afterwards
`jax.devices()` lists every process's devices, the mesh spans them all, and
each process drives its own (`jax.local_devices()`).

How the trainer divides the work (`train/ppo.py`, `train/evaluate.py`):
each process rolls out its contiguous share of an iteration's episodes on
its own devices, with its own sandbox pool, from a host-local copy of the
actor (`host_copy`); the finished episodes are gathered (`gather`) so that
every process holds the whole rollout and computes the same metrics; the
learner's batch is one global array to which each process contributes the
rows its devices hold (`sharding.process_rows`). Process 0 alone writes
the workdir's files, except checkpoints, which every process saves
together (orbax).

Every cross-process step (`gather`, `host_copy`, a jitted step on the
global mesh) must be taken by all processes in the same order, from the
main thread: a process that skips one, or takes it in a thread, leaves the
others waiting.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import os
import pickle
from typing import Any

import jax
from jax.experimental import multihost_utils
import numpy as np

from codeagent_rl.parallel import mesh as mesh_lib

COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"
PROCESS_COUNT = "JAX_PROCESS_COUNT"
PROCESS_ID = "JAX_PROCESS_ID"
ENV_VARS = (COORDINATOR_ADDRESS, PROCESS_COUNT, PROCESS_ID)


@dataclasses.dataclass(frozen=True)
class ProcessGroup:
  """Where this process stands in a multi-process run.

  Attributes:
    coordinator_address: host:port of process 0.
    process_count: processes in the run (>= 1).
    process_id: this process's index, in [0, process_count).
  """

  coordinator_address: str
  process_count: int
  process_id: int


def _int(name: str, text: str) -> int:
  try:
    return int(text.strip())
  except ValueError:
    raise ValueError(
      f"{name}={text!r}: must be an integer; the launcher sets it (unset"
      f" all of {', '.join(ENV_VARS)} to run as one process)."
    ) from None


def from_environ(
  environ: Mapping[str, str] | None = None,
) -> ProcessGroup | None:
  """The process group the environment describes, or None for one process.

  Args:
    environ: the environment (default `os.environ`); a variable set to the
      empty string counts as unset.

  Returns:
    None when none of `ENV_VARS` is set, else the validated group.

  Raises:
    ValueError: some of the variables are set but not all, or one has a bad
      value (not host:port, not an integer, an id outside [0, count)); the
      message names the variable and what to do.
  """
  environ = os.environ if environ is None else environ
  values = {name: environ.get(name, "") for name in ENV_VARS}
  given = [name for name in ENV_VARS if values[name]]
  if not given:
    return None
  missing = [name for name in ENV_VARS if not values[name]]
  if missing:
    raise ValueError(
      f"{', '.join(given)} set but {', '.join(missing)} not: a multi-process"
      f" run needs all of {', '.join(ENV_VARS)} (the launcher sets them);"
      " unset them all to run as one process."
    )
  address = values[COORDINATOR_ADDRESS].strip()
  host, _, port = address.rpartition(":")
  if not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ValueError(
      f"{COORDINATOR_ADDRESS}={address!r}: expected host:port of process 0,"
      " e.g. 10.0.0.1:1234."
    )
  count = _int(PROCESS_COUNT, values[PROCESS_COUNT])
  if count < 1:
    raise ValueError(f"{PROCESS_COUNT}={count}: must be >= 1.")
  index = _int(PROCESS_ID, values[PROCESS_ID])
  if not 0 <= index < count:
    raise ValueError(
      f"{PROCESS_ID}={index}: must be in [0, {PROCESS_COUNT}={count});"
      " process ids count from 0."
    )
  return ProcessGroup(address, count, index)


def initialize(environ: Mapping[str, str] | None = None) -> ProcessGroup | None:
  """Joins the run's process group, if the environment describes one.

  Call before any JAX computation. Without the variables nothing happens
  (no `jax.distributed` call at all). On CPU, collectives between
  processes need an implementation: gloo, set here (it affects only the
  CPU backend; GPU and TPU bring their own).

  Args:
    environ: the environment (default `os.environ`).

  Returns:
    The group joined, or None for a single process.

  Raises:
    ValueError: the variables are incomplete or bad (`from_environ`).
  """
  group = from_environ(environ)
  if group is None:
    return None
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(
    coordinator_address=group.coordinator_address,
    num_processes=group.process_count,
    process_id=group.process_id,
  )
  return group


def is_primary() -> bool:
  """Whether this process writes the run's files (process 0)."""
  return jax.process_index() == 0


def even_share(num: int) -> tuple[int, int]:
  """[start, stop) of this process's contiguous share of `num` items.

  Shares differ by at most one item; the first processes take the larger
  ones (some may be empty when `num` < the process count).
  """
  count, index = jax.process_count(), jax.process_index()
  base, extra = divmod(num, count)
  start = index * base + min(index, extra)
  return start, start + base + (index < extra)


def gather(obj: Any) -> list[Any]:
  """Every process's `obj`, in process order (a collective).

  Objects travel pickled, through a device all-gather: use it for what
  the processes produced themselves (episodes, host arrays), never for
  data from outside the run. With one process: `[obj]`, nothing is
  copied.
  """
  if jax.process_count() == 1:
    return [obj]
  data = np.frombuffer(
    pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8
  )
  # An explicit gather; the job runs under a transfer guard.
  with jax.transfer_guard("allow"):
    sizes = multihost_utils.process_allgather(np.int32(data.size))
    padded = np.zeros((int(sizes.max()),), np.uint8)
    padded[: data.size] = data
    rows = multihost_utils.process_allgather(padded)
  return [
    pickle.loads(row[:size].tobytes())
    for row, size in zip(rows, sizes.tolist(), strict=True)
  ]


def put_replicated(
  x: jax.Array, sharding: jax.sharding.NamedSharding
) -> jax.Array:
  """`jax.device_put(x, sharding)`, also across processes.

  `x` is on this process's devices (a key every process derived alike
  from the seed); `sharding` replicates it over a mesh that may span all
  processes, which `jax.device_put` refuses for a device array. Then `x`
  goes through the host: each process places its own copy, and all must
  hold the same value.
  """
  if jax.process_count() == 1 or not x.is_fully_addressable:
    return jax.device_put(x, sharding)
  typed = jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
  data = jax.random.key_data(x) if typed else x
  placed = jax.device_put(np.asarray(jax.device_get(data)), sharding)
  if not typed:
    return placed
  return jax.random.wrap_key_data(placed, impl=jax.random.key_impl(x))


def host_copy(tree: Any) -> Any:
  """`tree`'s arrays, laid out alike on this process's devices only.

  For host-local work on global arrays (a process's rollouts): the copy
  involves no other process. A collective: every leaf is first replicated
  over all processes (one all-gather; every device briefly holds a whole
  leaf), then each process keeps its own copy, sharded as the leaf's spec
  says over its block of the mesh (`mesh.local_mesh`). With one process,
  `tree` itself.

  Args:
    tree: a pytree of `jax.Array`s with `NamedSharding`s on one mesh.
  """
  if jax.process_count() == 1:
    return tree
  mesh = jax.tree.leaves(tree)[0].sharding.mesh
  here = mesh_lib.local_mesh(mesh)
  whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  replicated = jax.jit(
    lambda t: t, out_shardings=jax.tree.map(lambda _: whole, tree)
  )(tree)
  copy = jax.sharding.NamedSharding(here, jax.sharding.PartitionSpec())

  def local(x, source):
    shards = [s.data for s in x.addressable_shards]
    mine = jax.make_array_from_single_device_arrays(x.shape, copy, shards)
    spec = source.sharding.spec
    return jax.device_put(mine, jax.sharding.NamedSharding(here, spec))

  return jax.tree.map(local, replicated, tree)


def barrier(name: str) -> None:
  """Waits until every process has reached the barrier `name`."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)
