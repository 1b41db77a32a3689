"""Tests of codeagent_rl.parallel.sharding (8 fake CPU devices).

The golden file testdata/tiny_partition_specs.json holds the mesh
PartitionSpec of every actor and critic parameter of configs/tiny.py's model
on a (data=2, fsdp=2, tensor=2) mesh with the default rules. After an
intended change to the model, the rules or the tiny config, regenerate it
and review the diff:

  UPDATE_GOLDEN=1 python -m pytest tests/parallel/sharding_test.py -k golden

That run writes the file and skips; every other run compares.
"""

import functools
import json
import os
import pathlib

from flax import linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.models import transformer
from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import sharding
from configs import common
from configs import tiny

GOLDEN = pathlib.Path(__file__).parent / "testdata/tiny_partition_specs.json"
RULES = mesh_lib.normalize_rules(common.get_mesh_config().rules)
P = jax.sharding.PartitionSpec


def make_mesh(data, fsdp, tensor, rules=RULES):
  return mesh_lib.make_mesh(
    mesh_lib.MeshConfig(data=data, fsdp=fsdp, tensor=tensor, rules=rules)
  )


def model_config(preset=None, **changes):
  section = tiny.get_config(preset).model.to_dict()
  section.update(changes)
  return transformer.TransformerConfig.from_config(section)


def boxed_params(model):
  tokens = jnp.zeros((1, 1), jnp.int32)
  valid = jnp.ones((1, 1), bool)
  init = functools.partial(
    model.init,
    tokens=tokens,
    positions=transformer.positions_from_valid(valid),
    valid=valid,
  )
  return jax.eval_shape(init, jax.random.key(0))["params"]


def spec_json(spec):
  """A PartitionSpec as JSON: one null, axis name or list of names per dim."""
  return [list(e) if isinstance(e, tuple) else e for e in spec]


def flat_specs(specs):
  leaves = jax.tree_util.tree_leaves_with_path(
    specs, is_leaf=lambda x: isinstance(x, P)
  )
  return {sharding.path_str(p): spec_json(s) for p, s in leaves}


def tiny_golden_specs():
  cfg = model_config()
  mesh = make_mesh(2, 2, 2)
  return {
    "about": (
      "Mesh PartitionSpecs of configs/tiny.py's model (default preset) on a"
      " data=2, fsdp=2, tensor=2 mesh with configs/common.py's rules;"
      " regenerate: see tests/parallel/sharding_test.py."
    ),
    "rules": [[name, axes] for name, axes in RULES],
    "actor": flat_specs(
      sharding.param_specs(boxed_params(transformer.Actor(cfg)), mesh, RULES)
    ),
    "critic": flat_specs(
      sharding.param_specs(boxed_params(transformer.Critic(cfg)), mesh, RULES)
    ),
  }


def golden_text(golden):
  """JSON with one parameter per line, so diffs read well."""
  lines = ["{", f'  "about": {json.dumps(golden["about"])},']
  lines.append(f'  "rules": {json.dumps(golden["rules"])},')
  for i, model in enumerate(("actor", "critic")):
    lines.append(f'  "{model}": {{')
    items = sorted(golden[model].items())
    for j, (path, spec) in enumerate(items):
      comma = "," if j < len(items) - 1 else ""
      lines.append(f"    {json.dumps(path)}: {json.dumps(spec)}{comma}")
    lines.append("  }," if i == 0 else "  }")
  lines.append("}")
  return "\n".join(lines) + "\n"


def test_golden_partition_specs():
  got = json.loads(json.dumps(tiny_golden_specs()))
  if os.environ.get("UPDATE_GOLDEN"):
    GOLDEN.write_text(golden_text(got))
    pytest.skip(f"UPDATE_GOLDEN: wrote {GOLDEN}; review and commit the diff.")
  want = json.loads(GOLDEN.read_text())
  for key in ("rules", "actor", "critic"):
    assert got[key] == want[key], (
      f"{key} differs from {GOLDEN.name}; if intended, regenerate (see the"
      " module docstring)."
    )


def test_golden_file_spot_checks():
  # A few entries checked by hand, so the golden file itself is not trusted
  # blindly.
  want = json.loads(GOLDEN.read_text())
  actor, critic = want["actor"], want["critic"]
  attn = "trunk/layers_0/attn"
  assert actor["trunk/embed/embedding"] == ["tensor", "fsdp"]
  assert actor[f"{attn}/q_proj/kernel"] == ["fsdp", "tensor", None]
  assert actor[f"{attn}/o_proj/kernel"] == ["tensor", None, "fsdp"]
  assert actor["trunk/layers_0/mlp/down_proj/kernel"] == ["tensor", "fsdp"]
  assert actor["lm_head/kernel"] == ["fsdp", "tensor"]
  assert critic["value_head/kernel"] == ["fsdp", None]
  assert "value_head/bias" not in critic  # no bias: values start at 0
  assert "lm_head/kernel" not in critic
  n_layers = tiny.get_config().model.num_layers
  assert f"trunk/layers_{n_layers - 1}/mlp_norm/scale" in actor


def test_specs_agree_with_flax_where_flax_is_defined():
  # Flax's mapping gives the same result whenever ours succeeds.
  boxed = boxed_params(transformer.Actor(model_config("smoke")))
  ours = sharding.param_specs(boxed, make_mesh(2, 2, 2), RULES)
  theirs = nn.get_partition_spec(boxed)
  for (path, spec), logical in zip(
    jax.tree_util.tree_leaves_with_path(
      ours, is_leaf=lambda x: isinstance(x, P)
    ),
    jax.tree.leaves(theirs, is_leaf=lambda x: isinstance(x, P)),
    strict=True,
  ):
    assert spec == nn.logical_to_mesh_axes(tuple(logical), RULES), path


def test_indivisible_dimension_names_param_dim_and_axis():
  # 2 key/value heads cannot split over tensor=4.
  boxed = boxed_params(transformer.Actor(model_config("smoke")))
  mesh = make_mesh(2, 1, 4)
  with pytest.raises(ValueError) as info:
    sharding.param_specs(boxed, mesh, RULES)
  message = str(info.value)
  assert (
    "param trunk/layers_0/attn/k_proj/kernel dim 1 (heads=2) is not"
    " divisible by mesh axis 'tensor' of size 4"
  ) in message
  assert "trunk/layers_1/attn/v_proj/bias dim 0 (heads=2)" in message
  assert "q_proj" not in message  # 4 query heads do split.


def test_indivisible_over_a_tuple_of_mesh_axes():
  rules = mesh_lib.normalize_rules(
    [(n, ("fsdp", "tensor")) if n == "embed" else (n, a) for n, a in RULES]
  )
  rules = tuple(
    (n, None if n in ("heads", "mlp", "vocab") else a) for n, a in rules
  )
  boxed = boxed_params(transformer.Actor(model_config("smoke", embed_dim=36)))
  with pytest.raises(
    ValueError,
    match=(
      r"param lm_head/kernel dim 0 \(embed=36\) is not divisible by mesh axes"
      r" \('fsdp', 'tensor'\) of size 8"
    ),
  ):
    sharding.param_specs(boxed, make_mesh(1, 2, 4), rules)


def test_logical_axis_without_rule_raises():
  rules = tuple((n, a) for n, a in RULES if n != "mlp")
  boxed = boxed_params(transformer.Actor(model_config("smoke")))
  with pytest.raises(
    ValueError,
    match=(
      r"param trunk/layers_0/mlp/down_proj/kernel dim 0 has logical axis"
      r" 'mlp', which has no rule"
    ),
  ):
    sharding.param_specs(boxed, make_mesh(2, 2, 2), rules)


def test_mesh_axis_used_twice_in_one_param_raises():
  rules = tuple((n, "tensor" if n == "embed" else a) for n, a in RULES)
  boxed = boxed_params(transformer.Actor(model_config("smoke")))
  with pytest.raises(
    ValueError,
    match=(
      r"param lm_head/kernel: mesh axis 'tensor' is used by dim 0 \(embed\)"
      r" and dim 1 \(vocab\)"
    ),
  ):
    sharding.param_specs(boxed, make_mesh(2, 2, 2), rules)


def test_unboxed_param_raises():
  boxed = {"w": nn.LogicallyPartitioned(jnp.zeros((4, 2)), ("embed", None))}
  boxed["b"] = jnp.zeros(2)
  with pytest.raises(ValueError, match="param b .* has no logical axis names"):
    sharding.param_specs(boxed, make_mesh(2, 2, 2), RULES)


def test_wrong_number_of_names_raises():
  boxed = {"w": nn.LogicallyPartitioned(jnp.zeros((4, 2)), ("embed",))}
  with pytest.raises(ValueError, match=r"param w has shape \(4, 2\) but 1"):
    sharding.param_specs(boxed, make_mesh(2, 2, 2), RULES)


def test_shard_batch_splits_rows_over_data_and_fsdp():
  mesh = make_mesh(2, 2, 2)
  batch = {
    "tokens": np.arange(8 * 3).reshape(8, 3),
    "length": np.arange(8),
  }
  out = sharding.shard_batch(batch, mesh, RULES)
  for name, x in out.items():
    np.testing.assert_array_equal(np.asarray(x), batch[name])
    assert x.sharding == jax.sharding.NamedSharding(mesh, P(("data", "fsdp")))
    # 4 row blocks, each on the 2 devices of one tensor pair.
    assert {s.data.shape[0] for s in x.addressable_shards} == {2}


def test_shard_batch_names_indivisible_and_scalar_leaves():
  mesh = make_mesh(2, 2, 2)
  batch = {"tokens": np.zeros((6, 3)), "step": np.zeros(())}
  with pytest.raises(ValueError) as info:
    sharding.shard_batch(batch, mesh, RULES)
  message = str(info.value)
  assert "batch leaf tokens has global batch size 6, not divisible by" in (
    message
  )
  assert "('data', 'fsdp') of size 4" in message
  assert "batch leaf step is a scalar" in message


def test_axis_rules_constrain_activations():
  mesh = make_mesh(2, 2, 2)

  def f(x):
    return nn.with_logical_constraint(x * 2, ("batch", "length", "embed"))

  x = jnp.zeros((8, 4, 6))
  with sharding.axis_rules(mesh, RULES):
    hlo = jax.jit(f).lower(x).as_text()
  # Rows over data and fsdp; embed asks for fsdp too but batch's rule comes
  # first, so embed stays whole.
  assert '[{"data", "fsdp"}, {}, {}]' in hlo
  # Without the context the constraint is a no-op.
  assert "sharding_constraint" not in jax.jit(f).lower(x).as_text()


def test_axis_rules_need_every_activation_axis():
  rules = tuple((n, a) for n, a in RULES if n != "length")
  with pytest.raises(ValueError, match=r"activation axes \['length'\]"):
    with sharding.axis_rules(make_mesh(2, 2, 2), rules):
      pass


def test_model_traces_under_axis_rules():
  model = transformer.Actor(model_config("smoke"))
  params = sharding.unbox(boxed_params(model))
  valid = jnp.ones((8, 4), bool)
  tokens = jnp.zeros((8, 4), jnp.int32)
  positions = transformer.positions_from_valid(valid)

  def forward(p):
    return model.apply({"params": p}, tokens, positions, valid)[0]

  with sharding.axis_rules(make_mesh(2, 2, 2), RULES):
    out = jax.eval_shape(forward, params)
  assert out.shape == (8, 4, model.config.vocab_size)
