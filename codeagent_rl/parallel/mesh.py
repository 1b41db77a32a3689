"""The device mesh and the logical-to-mesh axis rules, from `config.mesh`.

The mesh has three named axes, always in this order:

  data    pure data parallelism: params replicated, batch split;
  fsdp    data parallelism with params and optimiser state split as well;
  tensor  tensor (model) parallelism inside a layer.

Models name logical axes only (`batch`, `embed`, `heads`, ...); the rules
map each logical axis to one mesh axis, a tuple of mesh axes, or None
(replicated). A rule is a decision: a logical axis with no rule is an error
(see `codeagent_rl.parallel.sharding`), never a silent replication.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
from jax.experimental import mesh_utils
import numpy as np

from codeagent_rl import config_utils

# Mesh axis names, outermost first.
MESH_AXES = ("data", "fsdp", "tensor")

# One rule: (logical axis, mesh axis | tuple of mesh axes | None).
MeshAxes = str | tuple[str, ...] | None
Rules = tuple[tuple[str, MeshAxes], ...]


def _normalize_mesh_axes(logical: str, value: Any) -> MeshAxes:
  """Checks one rule's right-hand side; a 1-tuple becomes its string."""
  if value is None:
    return None
  names = (value,) if isinstance(value, str) else value
  if not isinstance(names, (tuple, list)) or not names:
    raise ValueError(
      f"mesh.rules[{logical!r}]={value!r}: expected a mesh axis, a non-empty"
      f" tuple of mesh axes or None; mesh axes are {MESH_AXES}."
    )
  for name in names:
    if name not in MESH_AXES:
      raise ValueError(
        f"mesh.rules[{logical!r}]={value!r}: unknown mesh axis {name!r};"
        f" expected one of {MESH_AXES}."
      )
  if len(set(names)) != len(names):
    raise ValueError(
      f"mesh.rules[{logical!r}]={value!r}: a mesh axis appears twice."
    )
  return names[0] if len(names) == 1 else tuple(names)


def normalize_rules(rules: Any) -> Rules:
  """Validates logical-to-mesh rules and returns them as nested tuples.

  Args:
    rules: a sequence of (logical axis, mesh axes) pairs; mesh axes is a mesh
      axis name, a sequence of names, or None.

  Returns:
    The rules as a tuple of pairs, mesh axes as str, tuple of str or None.

  Raises:
    ValueError: a malformed pair, an unknown mesh axis, or a logical axis
      with two rules (the first would always win for params, so a second is
      a mistake).
  """
  if isinstance(rules, (str, bytes)) or not isinstance(rules, (tuple, list)):
    raise ValueError(
      f"mesh.rules={rules!r}: expected a sequence of (logical, mesh) pairs."
    )
  out = []
  seen = set()
  for pair in rules:
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
      raise ValueError(
        f"mesh.rules: entry {pair!r} is not a (logical, mesh) pair."
      )
    logical, value = pair
    if not isinstance(logical, str) or not logical:
      raise ValueError(
        f"mesh.rules: entry {pair!r} needs a logical axis name (a string)."
      )
    if logical in seen:
      raise ValueError(
        f"mesh.rules: logical axis {logical!r} has more than one rule."
      )
    seen.add(logical)
    out.append((logical, _normalize_mesh_axes(logical, value)))
  return tuple(out)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """Validated `config.mesh` section.

  Attributes:
    data: size of the `data` axis, or -1 for the devices left over.
    fsdp: size of the `fsdp` axis, or -1.
    tensor: size of the `tensor` axis, or -1.
    rules: logical-to-mesh axis rules (see `normalize_rules`). For
      activations, Flax applies them in order and skips a rule whose mesh
      axis an earlier dimension already took, so list `batch` first.
  """

  data: int
  fsdp: int
  tensor: int
  rules: Rules

  def __post_init__(self):
    for name in MESH_AXES:
      size = getattr(self, name)
      if not isinstance(size, int) or isinstance(size, bool):
        raise ValueError(f"mesh.{name}={size!r}: must be an int.")
      if size != -1 and size < 1:
        raise ValueError(f"mesh.{name}={size}: must be >= 1, or -1 (rest).")
    rest = [name for name in MESH_AXES if getattr(self, name) == -1]
    if len(rest) > 1:
      raise ValueError(
        f"mesh: at most one axis may be -1 (the rest of the devices); got"
        f" {rest}."
      )
    object.__setattr__(self, "rules", normalize_rules(self.rules))

  @classmethod
  def from_config(cls, section: Any) -> MeshConfig:
    """Builds from a ConfigDict or dict, naming unknown or missing fields."""
    return config_utils.from_section(cls, section, "mesh")

  def axis_sizes(self, num_devices: int) -> dict[str, int]:
    """Resolves -1 and checks that the mesh uses exactly `num_devices`.

    Args:
      num_devices: devices the mesh will span.

    Returns:
      {axis name: size} in `MESH_AXES` order.

    Raises:
      ValueError: the sizes do not multiply to `num_devices`, or the -1 axis
        cannot take a whole share of them.
    """
    sizes = {name: getattr(self, name) for name in MESH_AXES}
    fixed = math.prod(s for s in sizes.values() if s != -1)
    rest = [name for name, s in sizes.items() if s == -1]
    if rest:
      if num_devices % fixed:
        raise ValueError(
          f"mesh.{rest[0]}=-1: the other axes {sizes} take {fixed} devices,"
          f" which does not divide the {num_devices} devices."
        )
      sizes[rest[0]] = num_devices // fixed
    elif fixed != num_devices:
      raise ValueError(
        f"mesh: axis sizes {sizes} multiply to {fixed}, but there are"
        f" {num_devices} devices; make the product {num_devices} or set one"
        " axis to -1."
      )
    return sizes


def make_mesh(
  config: MeshConfig, devices: list[jax.Device] | None = None
) -> jax.sharding.Mesh:
  """Builds the (`data`, `fsdp`, `tensor`) mesh over `devices`.

  Args:
    config: the validated mesh section.
    devices: devices to span; all devices (of every process) by default.

  Returns:
    A `jax.sharding.Mesh` with `Auto` axes (shardings are propagated by the
    compiler from the ones given at jit boundaries and constraints).
  """
  devices = list(jax.devices() if devices is None else devices)
  sizes = config.axis_sizes(len(devices))
  shape = tuple(sizes[name] for name in MESH_AXES)
  # create_device_mesh orders devices by the physical topology (TPU, GPU);
  # on CPU it is a plain reshape.
  device_array = mesh_utils.create_device_mesh(
    shape, devices=devices, allow_split_physical_axes=True
  )
  return jax.sharding.Mesh(
    np.asarray(device_array),
    MESH_AXES,
    axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES),
  )


def mesh_axis_size(mesh: jax.sharding.Mesh, mesh_axes: MeshAxes) -> int:
  """Devices a dimension mapped to `mesh_axes` is split across."""
  if mesh_axes is None:
    return 1
  names = (mesh_axes,) if isinstance(mesh_axes, str) else mesh_axes
  return math.prod(mesh.shape[name] for name in names)


def local_mesh(mesh: jax.sharding.Mesh) -> jax.sharding.Mesh:
  """This process's block of `mesh`: its own devices, the same axis names.

  With one process it is `mesh` itself. Host-local work (a process's
  rollouts) runs on it, so that nothing waits on another process.

  Raises:
    ValueError: this process's devices do not form one block of the mesh
      (an axis interleaves processes); the mesh cannot be cut per host.
  """
  if jax.process_count() == 1:
    return mesh
  devices = np.asarray(mesh.devices)
  here = np.vectorize(lambda d: d.process_index == jax.process_index())(devices)
  # The bounding box of this process's devices, along every axis.
  block = tuple(slice(i.min(), i.max() + 1) for i in np.nonzero(here))
  if not here[block].all() or here[block].size != here.sum():
    raise ValueError(
      f"mesh {dict(mesh.shape)}: the devices of process"
      f" {jax.process_index()} are not one block of it; order the mesh so"
      " that each process's devices are contiguous along every axis."
    )
  return jax.sharding.Mesh(
    devices[block], mesh.axis_names, axis_types=mesh.axis_types
  )
