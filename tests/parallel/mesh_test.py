"""Tests of codeagent_rl.parallel.mesh (8 fake CPU devices, conftest.py)."""

import jax
import pytest

from codeagent_rl.parallel import mesh as mesh_lib

RULES = (("batch", ("data", "fsdp")), ("embed", "fsdp"), ("kv", None))


def config(data, fsdp, tensor, rules=RULES):
  return mesh_lib.MeshConfig(data=data, fsdp=fsdp, tensor=tensor, rules=rules)


def test_eight_fake_devices():
  assert jax.device_count() == 8


@pytest.mark.parametrize(
  "sizes,want",
  [
    ((-1, 1, 1), (8, 1, 1)),
    ((2, -1, 2), (2, 2, 2)),
    ((1, 2, -1), (1, 2, 4)),
    ((2, 2, 2), (2, 2, 2)),
  ],
)
def test_mesh_shape(sizes, want):
  mesh = mesh_lib.make_mesh(config(*sizes))
  assert mesh.axis_names == mesh_lib.MESH_AXES
  assert tuple(mesh.shape[a] for a in mesh_lib.MESH_AXES) == want
  assert sorted(d.id for d in mesh.devices.flat) == list(range(8))
  assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)


def test_mesh_over_some_devices():
  mesh = mesh_lib.make_mesh(config(-1, 1, 1), devices=jax.devices()[:1])
  assert mesh.devices.size == 1
  assert dict(mesh.shape) == {"data": 1, "fsdp": 1, "tensor": 1}


@pytest.mark.parametrize(
  "sizes,match",
  [
    ((2, 2, 1), r"multiply to 4, but there are 8 devices"),
    ((4, 4, 1), r"multiply to 16, but there are 8 devices"),
    ((-1, 3, 1), r"mesh.data=-1: .* take 3 devices, .* the 8 devices"),
  ],
)
def test_bad_sizes_name_axis_and_device_count(sizes, match):
  with pytest.raises(ValueError, match=match):
    mesh_lib.make_mesh(config(*sizes))


@pytest.mark.parametrize(
  "sizes,match",
  [
    ((-1, -1, 1), r"at most one axis may be -1 .*\['data', 'fsdp'\]"),
    ((0, 1, 1), r"mesh.data=0: must be >= 1"),
    ((1, -2, 1), r"mesh.fsdp=-2"),
    ((1, 1, 2.0), r"mesh.tensor=2.0: must be an int"),
  ],
)
def test_bad_sizes_are_rejected_at_construction(sizes, match):
  with pytest.raises(ValueError, match=match):
    config(*sizes)


def test_rules_are_normalised():
  cfg = config(-1, 1, 1, [["batch", ["data", "fsdp"]], ["embed", ["fsdp"]]])
  assert cfg.rules == (("batch", ("data", "fsdp")), ("embed", "fsdp"))


@pytest.mark.parametrize(
  "rules,match",
  [
    ((("embed", "model"),), "unknown mesh axis 'model'"),
    ((("embed", "fsdp"), ("embed", None)), "'embed' has more than one rule"),
    ((("embed", ("fsdp", "fsdp")),), "a mesh axis appears twice"),
    ((("embed",),), "is not a \\(logical, mesh\\) pair"),
    ((("embed", ()),), "non-empty tuple"),
    ("embed", "expected a sequence"),
  ],
)
def test_bad_rules(rules, match):
  with pytest.raises(ValueError, match=match):
    config(-1, 1, 1, rules)


def test_from_config_names_stray_and_missing_fields():
  with pytest.raises(ValueError, match=r"unknown fields \['model'\].*\['fsdp'"):
    mesh_lib.MeshConfig.from_config(
      {"data": -1, "model": 1, "tensor": 1, "rules": RULES}
    )
