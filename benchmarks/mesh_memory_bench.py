r"""Compiled memory per device of the 7B's PPO steps on an 8-device mesh.

Run from the repository root:

  python -m benchmarks.mesh_memory_bench          # the defaults below
  python -m benchmarks.mesh_memory_bench --lengths=8192 --remats=full
  python -m benchmarks.mesh_memory_bench --quick  # smoke: a tiny 4-layer
                                                  # model, one length

What is measured: XLA's compiled memory of one device (`memory_analysis()`:
arguments + outputs + temporaries - aliased) of one-minibatch programs of
the Qwen2.5-Coder-7B shape (configs/qwen25_coder_7b.py: 28 layers, width
3584, bfloat16 activations, float32 parameters, its optimisers and rl
section) partitioned over 8 CPU devices as (data=1, fsdp=4, tensor=2)
with the config's logical-axis rules, the mesh of
tests/parallel/qwen_partition_specs_test.py. The programs are the actor's
PPO train step, the critic's and the actor's log-prob pass (temperature 1,
the full vocabulary, as in attention_bench), jitted like the learner's
(states sharded by `state.train_state_shardings` and donated, a batch of
one row per shard of the batch axes, 4 here, split by
`sharding.batch_sharding`) and traced under `sharding.axis_rules`, where
the model's activation constraints take effect. Each row is one
`--lengths` x `--attentions` x `--remats` x `--passes`.

Compiled only, never run: every input is abstract (`jax.ShapeDtypeStruct`
with its sharding, the states from `jax.eval_shape`), so no size is too
large for this machine. The 8 devices are fake CPU devices; the script sets
`--xla_force_host_platform_device_count=8` before jax is imported.

With remat "none" the layers are unrolled: each program is compiled at 1
and 2 layers and the 28-layer figure is their line extended (memory is
a + b * layers; the JSON keeps both measured points). With a remat policy
the layers are one `lax.scan` (`transformer.Trunk`), so the program is
compiled at 28 layers itself (`--quick`: 4). The "actor_and_critic" rows
add the other model's resident arguments to each step
(`attention_bench.both_models`): the peak of a device that holds both
models.

Prints a table (GiB per device) and writes `--out` (JSON: the date, the
command, the settings, "memory" and "actor_and_critic" rows).
"""

from __future__ import annotations

import os

_DEVICES = 8
_DEVICE_FLAG = "--xla_force_host_platform_device_count"
# The fake devices exist only if the flag is set before jax initialises its
# backends; a count set by the caller would give another mesh, so it goes.
os.environ["XLA_FLAGS"] = " ".join(
  [
    *(
      f
      for f in os.environ.get("XLA_FLAGS", "").split()
      if not f.startswith(_DEVICE_FLAG)
    ),
    f"{_DEVICE_FLAG}={_DEVICES}",
  ]
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import dataclasses  # noqa: E402 (after the device flag)
import datetime  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks import attention_bench  # noqa: E402
from codeagent_rl.models import transformer  # noqa: E402
from codeagent_rl.parallel import mesh as mesh_lib  # noqa: E402
from codeagent_rl.parallel import sharding  # noqa: E402
from codeagent_rl.parallel import state as state_lib  # noqa: E402
from codeagent_rl.rl import config as rl_config  # noqa: E402
from codeagent_rl.train import experiment  # noqa: E402
from codeagent_rl.train import steps  # noqa: E402
from configs import qwen25_coder_7b  # noqa: E402

FLAGS = flags.FLAGS
MESH_SIZES = {"data": 1, "fsdp": 4, "tensor": 2}
ATTENTIONS = attention_bench.ATTENTIONS
REMATS = tuple(transformer.REMAT_POLICIES)
PASSES = attention_bench.PASSES
GIB = 2**30


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_list("lengths", ["8192", "32768"], "Row lengths.")
  flags.DEFINE_list("attentions", ["chunked"], f"Attentions, of {ATTENTIONS}.")
  flags.DEFINE_list("remats", ["full", "none"], f"Remat policies, of {REMATS}.")
  flags.DEFINE_list("passes", list(PASSES), f"Programs, of {PASSES}.")
  flags.DEFINE_bool(
    "quick", False, "Tiny 4-layer model, one length of 256: a smoke check."
  )
  flags.DEFINE_string(
    "out", "benchmarks/results/mesh_memory_bench.json", "The JSON to write."
  )


@dataclasses.dataclass(frozen=True)
class Setup:
  """What every compilation shares.

  Attributes:
    model: the 7B's model section (or the quick run's tiny one).
    optim: its optimiser section; the states' optax trees follow it.
    rl: its rl section, bound into the steps.
    mesh: the (data, fsdp, tensor) mesh of the 8 devices.
    rules: the config's logical-to-mesh rules.
  """

  model: transformer.TransformerConfig
  optim: state_lib.OptimConfig
  rl: rl_config.RLConfig
  mesh: jax.sharding.Mesh
  rules: mesh_lib.Rules


def make_setup(quick: bool) -> Setup:
  """The 7B's sections and the mesh; `quick` shrinks the model's dims."""
  config = qwen25_coder_7b.get_config()
  exp = experiment.Experiment.from_config(config)
  mesh_cfg = mesh_lib.MeshConfig.from_config(
    {**config.mesh.to_dict(), **MESH_SIZES}
  )
  model = exp.model
  if quick:
    # Every sharded dimension still divides its mesh axes; 4 layers, as
    # compiling the scan's 28 layers of parameters alone takes half a
    # minute on CPU.
    model = dataclasses.replace(
      model, num_layers=4, vocab_size=512, embed_dim=64, num_heads=4,
      num_kv_heads=2, head_dim=16, mlp_dim=128, logits_chunk=64,
      attention_chunk=64,
    )  # fmt: skip
  return Setup(
    model=model,
    optim=exp.optim,
    rl=exp.rl,
    mesh=mesh_lib.make_mesh(mesh_cfg),
    rules=mesh_cfg.rules,
  )


def _with_shardings(tree, shardings):
  return jax.tree.map(
    lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh),
    tree,
    shardings,
  )


def _nbytes(tree) -> int:
  # `dtype.itemsize`, not `np.dtype`: a PRNG key's dtype is jax's own.
  return sum(
    math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree)
  )


def compiled_bytes(setup: Setup, cfg, which: str, t: int) -> dict:
  """Memory of one device for pass `which` of `cfg` on rows of `t` tokens.

  The batch has one row per shard of the batch axes (4 on this mesh).

  Returns:
    {"bytes": arguments + outputs + temporaries - aliased, "argument_bytes",
    "temp_bytes": of one device; "unsharded_argument_bytes": the whole
    arguments, as one device would hold them without the mesh}.
  """
  mesh, rules = setup.mesh, setup.rules
  actor_tx, critic_tx = state_lib.make_optimizers(setup.optim)
  actor_sh, critic_sh = state_lib.train_state_shardings(
    cfg, setup.optim, mesh, rules
  )
  if which == "critic_step":
    model, tx, state_sh = transformer.Critic(cfg), critic_tx, critic_sh
  else:
    model, tx, state_sh = transformer.Actor(cfg), actor_tx, actor_sh

  def init(key):
    tokens = jnp.zeros((1, 1), jnp.int32)
    valid = jnp.ones((1, 1), bool)
    positions = transformer.positions_from_valid(valid)
    params = model.init(key, tokens, positions, valid)["params"]
    return state_lib.TrainState.create(sharding.unbox(params), tx)

  # Outside the rules, as `state._init_boxed_params`: the dummy row cannot
  # be split over the batch axes.
  state = _with_shardings(jax.eval_shape(init, jax.random.key(0)), state_sh)
  batch_sh = sharding.batch_sharding(mesh, rules)
  rows = mesh_lib.mesh_axis_size(mesh, batch_sh.spec[0])
  batch = jax.tree.map(
    lambda x: jax.ShapeDtypeStruct((rows, t), x.dtype, sharding=batch_sh),
    attention_bench._abstract_batch(t),
  )
  rng = jax.eval_shape(lambda: jax.random.key(0))
  with sharding.axis_rules(mesh, rules):
    if which == "log_probs":
      fn = functools.partial(
        steps.actor_log_probs, model=model, temperature=1.0, vocab_limit=0
      )
      args = (state.params, batch.tokens, batch.valid)
      lowered = jax.jit(fn, out_shardings=batch_sh).lower(*args)
    else:
      if which == "actor_step":
        fn = attention_bench._actor_step(model, tx, setup.rl)
      else:
        fn = functools.partial(
          steps.critic_step, model=model, tx=tx, rl=setup.rl, num_micro=1
        )
      args = (state, batch, rng)
      # As the learner's epoch: the state keeps its shardings, donated.
      lowered = jax.jit(
        fn, out_shardings=(state_sh, None), donate_argnums=0
      ).lower(*args)
    mem = lowered.compile().memory_analysis()
  return {
    "bytes": int(
      mem.argument_size_in_bytes
      + mem.output_size_in_bytes
      + mem.temp_size_in_bytes
      - mem.alias_size_in_bytes
    ),
    "argument_bytes": int(mem.argument_size_in_bytes),
    "temp_bytes": int(mem.temp_size_in_bytes),
    "unsharded_argument_bytes": _nbytes(args),
  }


def memory_rows(setup: Setup, lengths, attentions, remats, passes):
  """One row per length x attention x remat x pass (see the docstring)."""
  layers = setup.model.num_layers
  rows = []
  for t in lengths:
    for attention in attentions:
      for remat in remats:
        for which in passes:
          start = time.perf_counter()

          def at(n, attention=attention, remat=remat, which=which, t=t):
            cfg = dataclasses.replace(
              setup.model, num_layers=n, attention=attention, remat=remat
            )
            return compiled_bytes(setup, cfg, which, t)

          row = {"length": t, "attention": attention, "remat": remat}
          row.update({"pass": which, "layers": layers})
          if remat == "none":
            one, two = at(1), at(2)
            row.update(
              {k: one[k] + (layers - 1) * (two[k] - one[k]) for k in one}
            )
            row.update(
              bytes_1_layer=one["bytes"],
              bytes_2_layers=two["bytes"],
              bytes_per_layer=two["bytes"] - one["bytes"],
              method="extended from 1 and 2 layers",
            )
          else:
            row.update(at(layers))
            row["method"] = f"compiled at {layers} layers"
          row["compile_s"] = round(time.perf_counter() - start, 1)
          rows.append(row)
          print(_memory_line(row), flush=True)
  return rows


def _memory_line(r: dict) -> str:
  return (
    f"{r['length']:>6} {r['attention']:>8} {r['remat']:>13}"
    f" {r['pass']:>12} {r['bytes'] / GIB:8.2f} {r['argument_bytes'] / GIB:8.2f}"
    f" {r['compile_s']:8.1f}   {r['method']}"
  )


def _parse(values: list[str], allowed: tuple[str, ...], name: str):
  unknown = sorted(set(values) - set(allowed))
  if unknown or not values:
    sys.exit(f"--{name}={','.join(values)}: expected some of {allowed}.")
  return list(values)


def main(argv) -> None:
  """Compiles every configuration, prints the table, writes the JSON."""
  if len(argv) > 1:
    sys.exit(f"unexpected arguments: {argv[1:]}")
  try:
    lengths = [int(x) for x in FLAGS.lengths]
  except ValueError:
    sys.exit(f"--lengths={','.join(FLAGS.lengths)}: comma-separated integers.")
  if not lengths or min(lengths) < 1:
    sys.exit(f"--lengths={','.join(FLAGS.lengths)}: each must be >= 1.")
  attentions = _parse(FLAGS.attentions, ATTENTIONS, "attentions")
  remats = _parse(FLAGS.remats, REMATS, "remats")
  passes = _parse(FLAGS.passes, PASSES, "passes")
  if FLAGS.quick:
    lengths = [256]
  if jax.device_count() != _DEVICES:
    sys.exit(
      f"{jax.device_count()} devices, expected {_DEVICES}: jax was set up"
      f" before this script could set {_DEVICE_FLAG}."
    )
  setup = make_setup(FLAGS.quick)
  out = {
    "date": datetime.date.today().isoformat(),
    "command": " ".join(
      ["python -m benchmarks.mesh_memory_bench", *sys.argv[1:]]
    ),
    "settings": {
      "mesh": dict(setup.mesh.shape),
      "devices": jax.device_count(),
      "device_kind": str(jax.devices()[0].device_kind),
      "layers": setup.model.num_layers,
      "embed_dim": setup.model.embed_dim,
      "batch_rows": mesh_lib.mesh_axis_size(
        setup.mesh, sharding.batch_sharding(setup.mesh, setup.rules).spec[0]
      ),
      "lengths": lengths,
      "attentions": attentions,
      "remats": remats,
      "passes": passes,
      "quick": FLAGS.quick,
    },
  }
  print("GiB per device (compiled, not run)")
  print(
    "length attention         remat         pass    total     args"
    " compile_s   how",
    flush=True,
  )
  out["memory"] = memory_rows(setup, lengths, attentions, remats, passes)
  out["actor_and_critic"] = attention_bench.both_models(out["memory"])
  for r in out["actor_and_critic"]:
    print(
      f"{r['length']:>6} {r['attention']:>8} {r['remat']:>13}"
      f" actor+critic {r['bytes'] / GIB:8.2f}",
      flush=True,
    )
  with open(FLAGS.out, "w", encoding="utf-8") as f:
    json.dump(out, f, indent=1)
  print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
