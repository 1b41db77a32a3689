"""Logical axis names -> mesh shardings, strictly.

Flax's own mapping (`nn.logical_to_mesh_sharding`) replicates a dimension
whose logical axis has no rule, and leaves it to XLA to complain (or pad)
when a dimension does not divide its mesh axes. Here every parameter is
checked first and every problem is reported by parameter path, dimension
and axis:

  - a parameter without logical axis names;
  - a logical axis without a rule;
  - a mesh axis used by two dimensions of one parameter;
  - a dimension not divisible by the size of its mesh axes.

Activations are constrained inside the model with `nn.with_logical_constraint`;
those constraints take effect only under `axis_rules(mesh, rules)`.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
from typing import Any

from flax import linen as nn
import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
import numpy as np

from codeagent_rl.parallel import mesh as mesh_lib

# Logical axis of the leading dimension of every data-batch array.
BATCH_AXIS = "batch"
# Logical axes that codeagent_rl.models.transformer puts on activations;
# `axis_rules` requires a rule for each, so none is replicated by default.
ACTIVATION_AXES = ("batch", "length", "embed", "heads", "kv", "mlp", "vocab")
# Problems listed in one error before the rest are only counted.
_MAX_LISTED = 20


def path_str(path: tuple[Any, ...]) -> str:
  """'trunk/layers_0/attn/q_proj/kernel' for a pytree key path."""
  parts = []
  for key in path:
    for attr in ("key", "name", "idx"):
      if hasattr(key, attr):
        parts.append(str(getattr(key, attr)))
        break
    else:
      parts.append(str(key))
  return "/".join(parts)


def _raise_problems(problems: list[str], header: str) -> None:
  if not problems:
    return
  listed = problems[:_MAX_LISTED]
  if len(problems) > _MAX_LISTED:
    listed.append(f"... and {len(problems) - _MAX_LISTED} more.")
  raise ValueError(header + "\n  " + "\n  ".join(listed))


def mesh_spec(
  what: str,
  names: tuple[str | None, ...],
  shape: tuple[int, ...],
  mesh: jax.sharding.Mesh,
  rules: mesh_lib.Rules,
) -> tuple[PartitionSpec | None, list[str]]:
  """Maps one array's logical axis names to a PartitionSpec.

  Args:
    what: how errors name the array, e.g. "param trunk/embed/embedding".
    names: one logical axis name (or None: replicated) per dimension.
    shape: the array's shape.
    mesh: the device mesh.
    rules: validated logical-to-mesh rules (`mesh.normalize_rules`).

  Returns:
    (spec, problems): the PartitionSpec, or None when `problems` (one message
    per problem) is not empty.
  """
  if len(names) != len(shape):
    return None, [
      f"{what} has shape {shape} but {len(names)} logical axis names"
      f" {tuple(names)}."
    ]
  table = dict(rules)
  problems = []
  spec = []
  owner = {}  # mesh axis -> the dimension that uses it
  for dim, (name, size) in enumerate(zip(names, shape, strict=True)):
    if name is None:
      spec.append(None)
      continue
    if name not in table:
      problems.append(
        f"{what} dim {dim} has logical axis {name!r}, which has no rule in"
        f" mesh.rules; add ({name!r}, <mesh axes or None>)."
      )
      continue
    mesh_axes = table[name]
    spec.append(mesh_axes)
    if mesh_axes is None:
      continue
    axes = (mesh_axes,) if isinstance(mesh_axes, str) else mesh_axes
    unknown = [a for a in axes if a not in mesh.shape]
    if unknown:
      problems.append(
        f"{what} dim {dim} ({name}): mesh axes {unknown} are not in the mesh"
        f" {dict(mesh.shape)}."
      )
      continue
    for axis in axes:
      if axis in owner:
        problems.append(
          f"{what}: mesh axis {axis!r} is used by dim {owner[axis][0]}"
          f" ({owner[axis][1]}) and dim {dim} ({name}); change mesh.rules."
        )
      owner[axis] = (dim, name)
    split = mesh_lib.mesh_axis_size(mesh, mesh_axes)
    if size % split:
      label = (
        f"mesh axis {mesh_axes!r}"
        if isinstance(mesh_axes, str)
        else f"mesh axes {mesh_axes!r}"
      )
      problems.append(
        f"{what} dim {dim} ({name}={size}) is not divisible by {label} of"
        f" size {split}; change the model size, the mesh, or the rule for"
        f" {name!r}."
      )
  if problems:
    return None, problems
  return PartitionSpec(*spec), []


def _is_box(x: Any) -> bool:
  return isinstance(x, nn.LogicallyPartitioned)


def unbox(boxed_params: Any) -> Any:
  """The values inside `nn.LogicallyPartitioned` boxes, with no constraint.

  `nn.unbox` also applies a sharding constraint when a mesh is set, which
  fails on abstract values; here nothing but the values come out.
  """
  return jax.tree.map(
    lambda x: x.unbox(apply_constraint=False) if _is_box(x) else x,
    boxed_params,
    is_leaf=_is_box,
  )


def param_specs(
  boxed_params: Any, mesh: jax.sharding.Mesh, rules: mesh_lib.Rules
) -> Any:
  """Mesh PartitionSpecs of every parameter, checked.

  Args:
    boxed_params: a params collection whose leaves are
      `nn.LogicallyPartitioned` boxes (e.g. from `jax.eval_shape(model.init,
      ...)["params"]`); the values may be arrays or `ShapeDtypeStruct`s.
    mesh: the device mesh.
    rules: validated logical-to-mesh rules.

  Returns:
    A tree of `PartitionSpec` with the structure of the unboxed params.

  Raises:
    ValueError: listing every parameter that cannot be sharded as the rules
      say, by path, dimension and axis.
  """
  problems = []

  def one(path, leaf):
    what = f"param {path_str(path)}"
    if not _is_box(leaf):
      problems.append(
        f"{what} (shape {np.shape(leaf)}) has no logical axis names; wrap"
        " its initializer in nn.with_logical_partitioning."
      )
      return None
    value = leaf.unbox(apply_constraint=False)
    spec, found = mesh_spec(what, tuple(leaf.names), value.shape, mesh, rules)
    problems.extend(found)
    return spec

  specs = jax.tree_util.tree_map_with_path(one, boxed_params, is_leaf=_is_box)
  _raise_problems(
    problems,
    f"Cannot shard the params on mesh {dict(mesh.shape)} with rules {rules}:",
  )
  return specs


def param_shardings(
  boxed_params: Any, mesh: jax.sharding.Mesh, rules: mesh_lib.Rules
) -> Any:
  """`NamedSharding`s of every parameter; see `param_specs`."""
  return jax.tree.map(
    lambda spec: NamedSharding(mesh, spec),
    param_specs(boxed_params, mesh, rules),
    is_leaf=lambda x: isinstance(x, PartitionSpec),
  )


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
  """The sharding of an array copied to every device of the mesh."""
  return NamedSharding(mesh, PartitionSpec())


def batch_sharding(
  mesh: jax.sharding.Mesh, rules: mesh_lib.Rules
) -> NamedSharding:
  """Sharding of a data array: leading dimension along `batch`, rest whole.

  A PartitionSpec shorter than the array leaves the trailing dimensions
  unsharded, so one sharding serves [B], [B, T] and [B, T, ...] arrays.

  Raises:
    ValueError: the rules have no `batch` rule.
  """
  table = dict(rules)
  if BATCH_AXIS not in table:
    raise ValueError(
      f"mesh.rules has no rule for {BATCH_AXIS!r}; add e.g."
      f" ({BATCH_AXIS!r}, ('data', 'fsdp'))."
    )
  return NamedSharding(mesh, PartitionSpec(table[BATCH_AXIS]))


def shard_batch(batch: Any, mesh: jax.sharding.Mesh, rules: mesh_lib.Rules):
  """Places a host batch on the mesh, split along its leading dimension.

  Each process passes the rows it holds (all rows on a single host); the
  global batch is their concatenation in process order.

  Args:
    batch: a pytree of host arrays, each [B, ...] with the same local B.
    mesh: the device mesh.
    rules: validated logical-to-mesh rules (the `batch` rule is used).

  Returns:
    The same pytree of global `jax.Array`s sharded by `batch_sharding`.

  Raises:
    ValueError: naming a leaf that is a scalar or whose global batch size
      does not divide the devices the `batch` axis spans.
  """
  sharding = batch_sharding(mesh, rules)
  mesh_axes = dict(rules)[BATCH_AXIS]
  split = mesh_lib.mesh_axis_size(mesh, mesh_axes)
  problems = []

  def one(path, leaf):
    leaf = np.asarray(leaf)
    what = f"batch leaf {path_str(path) or '<root>'}"
    if leaf.ndim == 0:
      problems.append(f"{what} is a scalar; it has no batch dimension.")
      return None
    rows = leaf.shape[0] * jax.process_count()
    if rows % split:
      problems.append(
        f"{what} has global batch size {rows}, not divisible by mesh axes"
        f" {mesh_axes!r} of size {split}."
      )
      return None
    return leaf

  host = jax.tree_util.tree_map_with_path(one, batch)
  _raise_problems(problems, "Cannot shard the batch:")
  # An explicit transfer, which jax carries out across processes by puts
  # per device that a transfer guard would count as implicit.
  with jax.transfer_guard_host_to_device("allow"):
    return jax.tree.map(
      lambda x: jax.make_array_from_process_local_data(sharding, x), host
    )


@contextlib.contextmanager
def axis_rules(mesh: jax.sharding.Mesh, rules: mesh_lib.Rules) -> Iterator:
  """Context in which the model's activation constraints take effect.

  Trace (first call) jitted steps inside it: Flax reads the rules and the
  mesh while tracing `nn.with_logical_constraint`. Where two dimensions of an
  activation map to the same mesh axis, Flax gives it to the dimension whose
  rule comes first and leaves the other unsharded (e.g. `batch` over `fsdp`
  wins over `embed` over `fsdp`); that is how FSDP shards activations.

  Raises:
    ValueError: a logical axis of `ACTIVATION_AXES` has no rule.
  """
  missing = [a for a in ACTIVATION_AXES if a not in dict(rules)]
  if missing:
    raise ValueError(
      f"mesh.rules has no rule for the activation axes {missing}; add one"
      " (mesh axes or None) for each."
    )
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    yield


def process_rows(sharding: NamedSharding, rows: int) -> slice:
  """The rows of a [rows, ...] array under `sharding` this process holds.

  What this process passes to `shard_batch` (or
  `jax.make_array_from_process_local_data`) for that array: the global
  batch is the processes' rows in process order. With one process, all.

  Raises:
    ValueError: `rows` does not split evenly over the processes, or this
      process's rows are not its contiguous 1/process_count share (the
      `batch` rule must split rows across processes, not copy them).
  """
  count, index = jax.process_count(), jax.process_index()
  if count == 1:
    return slice(0, rows)
  if rows % count:
    raise ValueError(f"{rows} rows do not split evenly over {count} processes.")
  share = rows // count
  held = sorted(
    {
      i
      for index_slices in sharding.addressable_devices_indices_map(
        (rows,)
      ).values()
      for i in range(rows)[index_slices[0]]
    }
  )
  wanted = list(range(index * share, (index + 1) * share))
  if held != wanted:
    raise ValueError(
      f"process {index} holds rows {held[:3]}... of a {rows}-row batch"
      f" under {sharding.spec}; each process must hold its own contiguous"
      f" 1/{count} of them: map the `batch` rule to the mesh axes that"
      " span the processes (e.g. ('data', 'fsdp'))."
    )
  return slice(wanted[0], wanted[-1] + 1)
