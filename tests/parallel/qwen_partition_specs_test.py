"""Sharding of the Qwen2.5-Coder 0.5B and 7B train states at their real sizes.

Everything here is abstract (`jax.eval_shape`, shardings): no weight of
either model is made or read. The golden files
testdata/qwen25_coder_{0p5b,7b}_partition_specs.json hold the mesh
PartitionSpec of every leaf of the actor's and the critic's train state
(params, step, both AdamW states) from `state.train_state_shardings`, on
the 8 fake devices as (data=1, fsdp=4, tensor=2). The configs' own mesh
section is the all-`data` default, which replicates every parameter; the
test sets fsdp and tensor as a run on 8 chips would
(`--config.mesh.data=1 --config.mesh.fsdp=4 --config.mesh.tensor=2`).
After an intended change to the model, the rules or these configs,
regenerate both files and review the diff:

  UPDATE_GOLDEN=1 python -m pytest tests/parallel/qwen_partition_specs_test.py

That run writes the files and skips; every other run compares.
"""

import json
import math
import os
import pathlib
import resource

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.models import transformer
from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state
from configs import qwen25_coder_0p5b
from configs import qwen25_coder_7b

P = jax.sharding.PartitionSpec
TESTDATA = pathlib.Path(__file__).parent / "testdata"
CONFIGS = {"0p5b": qwen25_coder_0p5b, "7b": qwen25_coder_7b}
MESH_SIZES = {"data": 1, "fsdp": 4, "tensor": 2}
# An array this large (elements) must not be replicated over fsdp x tensor.
BIG = 1_000_000
# Peak-RSS growth allowed while building everything: the smallest real
# array the test must not make, the 0.5B embedding, is 545 MB in float32.
MAX_RSS_GROWTH_MB = 256


def golden_path(name):
  return TESTDATA / f"qwen25_coder_{name}_partition_specs.json"


def experiment_parts(name):
  """(model config, optim config, mesh, rules) of one Qwen config."""
  config = CONFIGS[name].get_config()
  model_cfg = transformer.TransformerConfig.from_config(config.model)
  optim_cfg = state.OptimConfig.from_config(config.optim)
  mesh_cfg = mesh_lib.MeshConfig.from_config(
    {**config.mesh.to_dict(), **MESH_SIZES}
  )
  mesh = mesh_lib.make_mesh(mesh_cfg)
  return model_cfg, optim_cfg, mesh, mesh_cfg.rules


def boxed_params(model):
  """The model's `params` as `ShapeDtypeStruct`s in logical-axis boxes."""
  tokens = jnp.zeros((1, 1), jnp.int32)
  valid = jnp.ones((1, 1), bool)
  positions = transformer.positions_from_valid(valid)
  return jax.eval_shape(
    lambda: model.init(jax.random.key(0), tokens, positions, valid)
  )["params"]


def abstract_state(boxed, tx):
  """A `TrainState` of `ShapeDtypeStruct`s: params, step, optimiser state."""
  return jax.eval_shape(
    lambda p: state.TrainState.create(p, tx), sharding.unbox(boxed)
  )


def flat(tree, leaf_type):
  leaves = jax.tree_util.tree_leaves_with_path(
    tree, is_leaf=lambda x: isinstance(x, leaf_type)
  )
  return {sharding.path_str(p): x for p, x in leaves}


def spec_json(spec):
  """A PartitionSpec as JSON: one null, axis name or list of names per dim."""
  return [list(e) if isinstance(e, tuple) else e for e in spec]


def num_shards(mesh, spec):
  """Distinct pieces an array with this spec is cut into."""
  return math.prod(mesh_lib.mesh_axis_size(mesh, axes) for axes in spec)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def built(request):
  """Everything one config's checks need, made abstractly; RSS watched."""
  name = request.param
  rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  live_before = {id(x) for x in jax.live_arrays()}
  model_cfg, optim_cfg, mesh, rules = experiment_parts(name)
  actor_sh, critic_sh = state.train_state_shardings(
    model_cfg, optim_cfg, mesh, rules
  )
  actor_tx, critic_tx = state.make_optimizers(optim_cfg)
  actor_boxed = boxed_params(transformer.Actor(model_cfg))
  actor = abstract_state(actor_boxed, actor_tx)
  critic = abstract_state(
    boxed_params(transformer.Critic(model_cfg)), critic_tx
  )
  ref_specs = sharding.param_specs(actor_boxed, mesh, rules)
  # Arrays over 1 MB made meanwhile and still alive (none should be).
  new_arrays = [
    x
    for x in jax.live_arrays()
    if id(x) not in live_before and x.nbytes > 2**20
  ]
  rss_growth_mb = (
    resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
  ) / 1024  # Linux reports kilobytes
  return {
    "name": name,
    "model_cfg": model_cfg,
    "mesh": mesh,
    "rules": rules,
    "shardings": (actor_sh, critic_sh),
    "abstract": (actor, critic),
    "ref_specs": ref_specs,
    "new_arrays": new_arrays,
    "rss_growth_mb": rss_growth_mb,
  }


def golden_of(built):
  actor_sh, critic_sh = built["shardings"]
  specs = {}
  for model, tree in (("actor", actor_sh), ("critic", critic_sh)):
    specs[model] = {
      path: spec_json(sh.spec)
      for path, sh in flat(tree, jax.sharding.NamedSharding).items()
    }
  mesh = built["mesh"]
  return {
    "about": (
      f"Mesh PartitionSpecs of every leaf of the actor's and the critic's"
      f" train state (params, step, AdamW state) of"
      f" configs/qwen25_coder_{built['name']}.py's model on a data=1,"
      " fsdp=4, tensor=2 mesh (8 devices; the config's mesh section with"
      " those sizes) with its rules, from jax.eval_shape; regenerate: see"
      " tests/parallel/qwen_partition_specs_test.py."
    ),
    "mesh": dict(mesh.shape),
    "rules": [[name, axes] for name, axes in built["rules"]],
    **specs,
  }


def golden_text(golden):
  """JSON with one leaf per line, so diffs read well."""
  lines = ["{"]
  for key in ("about", "mesh", "rules"):
    lines.append(f"  {json.dumps(key)}: {json.dumps(golden[key])},")
  for i, model in enumerate(("actor", "critic")):
    lines.append(f'  "{model}": {{')
    items = sorted(golden[model].items())
    for j, (path, spec) in enumerate(items):
      comma = "," if j < len(items) - 1 else ""
      lines.append(f"    {json.dumps(path)}: {json.dumps(spec)}{comma}")
    lines.append("  }," if i == 0 else "  }")
  lines.append("}")
  return "\n".join(lines) + "\n"


def test_nothing_real_sized_is_allocated(built):
  assert not built["new_arrays"], [x.shape for x in built["new_arrays"]]
  for tree in built["abstract"]:
    for leaf in jax.tree.leaves(tree):
      assert isinstance(leaf, jax.ShapeDtypeStruct), type(leaf)
  assert built["rss_growth_mb"] < MAX_RSS_GROWTH_MB, built["rss_growth_mb"]


def test_golden_partition_specs(built):
  got = json.loads(json.dumps(golden_of(built)))
  path = golden_path(built["name"])
  if os.environ.get("UPDATE_GOLDEN"):
    path.write_text(golden_text(got))
    pytest.skip(f"UPDATE_GOLDEN: wrote {path}; review and commit the diff.")
  want = json.loads(path.read_text())
  for key in ("mesh", "rules", "actor", "critic"):
    assert got[key] == want[key], (
      f"{key} differs from {path.name}; if intended, regenerate (see the"
      " module docstring)."
    )


def test_golden_file_spot_checks(built):
  # Entries checked by hand, so the golden file is not trusted blindly.
  want = json.loads(golden_path(built["name"]).read_text())
  actor, critic = want["actor"], want["critic"]
  cfg = built["model_cfg"]
  last = f"trunk/layers_{cfg.num_layers - 1}"
  assert actor["step"] == critic["step"] == []
  assert actor["params/trunk/embed/embedding"] == ["tensor", "fsdp"]
  assert actor[f"params/{last}/attn/k_proj/kernel"] == ["fsdp", "tensor", None]
  assert actor[f"params/{last}/attn/k_proj/bias"] == ["tensor", None]
  assert actor[f"params/{last}/mlp/down_proj/kernel"] == ["tensor", "fsdp"]
  assert critic["params/value_head/kernel"] == ["fsdp", None]
  assert ("params/lm_head/kernel" in actor) == (not cfg.tie_embeddings)
  assert "params/lm_head/kernel" not in critic
  # AdamW's moments (chain: clip, then adamw's scale_by_adam first) follow
  # their params; its step counter is replicated.
  for model in (actor, critic):
    params = {k: v for k, v in model.items() if k.startswith("params/")}
    for moment in ("mu", "nu"):
      for path, spec in params.items():
        key = path.replace("params/", f"opt_state/1/0/{moment}/", 1)
        assert model[key] == spec, key
    assert model["opt_state/1/0/count"] == []
  # Params, two moments, the step and Adam's counter: nothing else.
  for model in (actor, critic):
    assert len(model) == 3 * sum(k.startswith("params/") for k in model) + 2


def test_reference_is_sharded_like_the_actor_params(built):
  # The KL reference is the actor's params without an optimiser state,
  # placed in `shardings[0].params`; the params alone map the same way.
  actor_sh, _ = built["shardings"]
  ref = flat(built["ref_specs"], P)
  actor = {
    k: sh.spec
    for k, sh in flat(actor_sh.params, jax.sharding.NamedSharding).items()
  }
  assert ref == actor


def test_no_big_array_is_replicated(built):
  mesh = built["mesh"]
  need = mesh.shape["fsdp"] * mesh.shape["tensor"]
  checked = 0
  for abstract, shardings in zip(
    built["abstract"], built["shardings"], strict=True
  ):
    shapes = flat(abstract, jax.ShapeDtypeStruct)
    specs = flat(shardings, jax.sharding.NamedSharding)
    assert shapes.keys() == specs.keys()
    for path, leaf in shapes.items():
      if leaf.size > BIG:
        checked += 1
        split = num_shards(mesh, specs[path].spec)
        assert split >= need, (path, leaf.shape, specs[path].spec)
  assert checked > 0


def test_vocabulary_matrices_are_split_both_ways(built):
  cfg = built["model_cfg"]
  actor, _ = built["abstract"]
  actor_sh, _ = built["shardings"]
  names = ["trunk/embed/embedding"]
  if not cfg.tie_embeddings:
    names.append("lm_head/kernel")
  shapes = flat(actor.params, jax.ShapeDtypeStruct)
  specs = flat(actor_sh.params, jax.sharding.NamedSharding)
  for name in names:
    assert cfg.vocab_size in shapes[name].shape
    vocab_dim = shapes[name].shape.index(cfg.vocab_size)
    assert specs[name].spec[vocab_dim] == "tensor", name
    assert num_shards(built["mesh"], specs[name].spec) == 8, name


def test_per_device_bytes_are_an_eighth(built):
  """Actor + critic + AdamW in float32: what each of the 8 devices holds."""
  mesh = built["mesh"]
  total = per_device = 0
  for abstract, shardings in zip(
    built["abstract"], built["shardings"], strict=True
  ):
    for leaf, sh in zip(
      jax.tree.leaves(abstract), jax.tree.leaves(shardings), strict=True
    ):
      itemsize = np.dtype(leaf.dtype).itemsize
      assert leaf.dtype != jnp.float32 or itemsize == 4
      total += leaf.size * itemsize
      per_device += math.prod(sh.shard_shape(leaf.shape)) * itemsize
  actor, _ = built["abstract"]
  ref = sum(
    leaf.size * np.dtype(leaf.dtype).itemsize
    for leaf in jax.tree.leaves(actor.params)
  )
  gb = 1e9
  message = (
    f"{built['name']}: actor + critic + AdamW state {total / gb:.2f} GB,"
    f" / {mesh.size} devices = {total / mesh.size / gb:.2f} GB; held per"
    f" device as sharded: {per_device / gb:.3f} GB (+ the KL reference"
    f" {ref / mesh.size / gb:.2f} GB per device)"
  )
  # Only small arrays (norms, biases) are replicated: within 0.1%.
  assert per_device <= total / mesh.size * 1.001, message
  if built["name"] == "7b":
    # 3 copies (params, mu, nu) of actor (7.62B) + critic (7.07B) params.
    assert 170e9 < total < 180e9, message
    assert per_device < 23e9, message
