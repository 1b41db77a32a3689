"""Checkpoint round trips, retention, crash safety, resharding and errors."""

import dataclasses
import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import threading

from absl import logging as absl_logging
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np
import optax
import pytest

from codeagent_rl.parallel import checkpoint
from configs import common

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
SYNC = checkpoint.CheckpointConfig(keep=3, save_every=1, async_save=False)


class _MLP(nn.Module):
  @nn.compact
  def __call__(self, x):
    return nn.Dense(4)(nn.relu(nn.Dense(16)(x)))


def _train_state(params, seed):
  """A train state: params, adamw state after one update (mu, nu > 0), step."""
  tx = optax.adamw(1e-2)
  opt_state = tx.init(params)
  grads = jax.tree.map(lambda p: jnp.full_like(p, 0.1 * seed), params)
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  step = jnp.asarray(seed, jnp.int32)
  return {"params": params, "opt_state": opt_state, "step": step}


@jax.jit
def _states(seed):
  """An actor (flax MLP) and a critic (plain dict) train state."""
  key_actor, key_critic = jax.random.split(jax.random.key(seed))
  actor = _MLP().init(key_actor, jnp.zeros((1, 8)))
  critic = {"w": jax.random.normal(key_critic, (8, 2)), "b": jnp.ones((2,))}
  return _train_state(actor, seed), _train_state(critic, seed)


def _fsdp_tensor(x):
  """The saving layout: matrices on (fsdp, tensor), vectors on tensor."""
  return {0: P(), 1: P("tensor"), 2: P("fsdp", "tensor")}[x.ndim]


def _data_rows(shape, mesh):
  """The restoring layout: dim 0 on `data` where it divides."""
  if shape and shape[0] % mesh.shape["data"] == 0:
    return P("data")
  return P()


def _abstract(tree, sharding_of):
  return jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding_of(x)),
    tree,
  )


def _like(tree):
  """Abstract target with the same shardings as `tree`."""
  return _abstract(tree, lambda x: x.sharding)


def _ckpt(step, *, typed_key=True, critic=True, seed=None):
  actor, critic_state = _states(step if seed is None else seed)
  rng = jax.random.key(step) if typed_key else jax.random.PRNGKey(step)
  return checkpoint.TrainCheckpoint(
    actor=actor,
    critic=critic_state if critic else None,
    step=step,
    rng=rng,
    data_position={"epoch": 1, "index": 10 * step, "seed": 7},
  )


def _assert_trees_equal(got, want):
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    assert g.dtype == w.dtype
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def _key_data(key):
  if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    return jax.random.key_data(key)
  return key


def _assert_restored(got, want):
  _assert_trees_equal(got.actor, want.actor)
  _assert_trees_equal(got.critic, want.critic)
  assert got.step == want.step
  assert got.data_position == want.data_position
  assert got.rng.dtype == want.rng.dtype
  np.testing.assert_array_equal(_key_data(got.rng), _key_data(want.rng))


def _restore_latest(ckptr, like):
  return ckptr.restore_latest(
    actor=_like(like.actor),
    critic=None if like.critic is None else _like(like.critic),
    rng=like.rng,
  )


# --- Config ------------------------------------------------------------------


def test_config_defaults_validate():
  config = checkpoint.CheckpointConfig.from_config(
    common.get_checkpoint_config()
  )
  assert config.keep >= 1 and config.save_every >= 1


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("keep", 0, "checkpoint.keep=0"),
    ("save_every", -1, "checkpoint.save_every=-1"),
    ("keep", True, "checkpoint.keep=True"),
    ("async_save", "yes", "checkpoint.async_save='yes'"),
  ],
)
def test_config_rejects_bad_values(field, value, match):
  fields = {"keep": 2, "save_every": 1, "async_save": False, field: value}
  with pytest.raises(ValueError, match=match):
    checkpoint.CheckpointConfig(**fields)


def test_config_names_stray_and_missing_fields():
  with pytest.raises(ValueError, match=r"unknown fields \['kep'\].*\['keep'\]"):
    checkpoint.CheckpointConfig.from_config(
      {"kep": 2, "save_every": 1, "async_save": False}
    )


# --- Round trips and retention -----------------------------------------------


@pytest.mark.parametrize(
  "typed_key,async_save", [(True, False), (False, False), (True, True)]
)
def test_round_trip(tmp_path, typed_key, async_save):
  config = checkpoint.CheckpointConfig(
    keep=3, save_every=1, async_save=async_save
  )
  want = _ckpt(7, typed_key=typed_key)
  with checkpoint.Checkpointer(tmp_path, config) as ckptr:
    assert ckptr.save(want)
  # A fresh Checkpointer (a restarted job) finds the step on its own.
  with checkpoint.Checkpointer(tmp_path, config) as ckptr:
    assert ckptr.latest_step() == 7
    got = _restore_latest(ckptr, _ckpt(0, typed_key=typed_key))
  _assert_restored(got, want)
  # The target decided the layout: replicated-on-device-0 like `want`.
  assert got.actor["params"]["params"]["Dense_0"]["kernel"].sharding == (
    want.actor["params"]["params"]["Dense_0"]["kernel"].sharding
  )


def test_round_trip_without_critic(tmp_path):
  want = _ckpt(3, critic=False)
  with checkpoint.Checkpointer(tmp_path, SYNC) as ckptr:
    ckptr.save(want)
    got = _restore_latest(ckptr, _ckpt(0, critic=False))
  assert got.critic is None
  _assert_trees_equal(got.actor, want.actor)


def test_keeps_last_n(tmp_path):
  config = checkpoint.CheckpointConfig(keep=2, save_every=1, async_save=False)
  with checkpoint.Checkpointer(tmp_path, config) as ckptr:
    for step in range(1, 6):
      assert ckptr.save(_ckpt(step))
  assert sorted(p.name for p in tmp_path.iterdir()) == ["4", "5"]
  with checkpoint.Checkpointer(tmp_path, config) as ckptr:
    assert ckptr.all_steps() == [4, 5]
    assert ckptr.latest_step() == 5
    got = _restore_latest(ckptr, _ckpt(0))
  _assert_restored(got, _ckpt(5))


def test_saves_every_n_steps_unless_forced(tmp_path):
  config = checkpoint.CheckpointConfig(keep=5, save_every=3, async_save=False)
  with checkpoint.Checkpointer(tmp_path, config) as ckptr:
    saved = [ckptr.save(_ckpt(step)) for step in (1, 2, 3, 4)]
    assert saved == [False, False, True, False]
    assert ckptr.save(_ckpt(5), force=True)
    assert not ckptr.should_save(5) and ckptr.should_save(6)
    assert ckptr.all_steps() == [3, 5]


def test_empty_or_missing_directory(tmp_path):
  with checkpoint.Checkpointer(tmp_path / "new", SYNC) as ckptr:
    assert ckptr.latest_step() is None
    assert _restore_latest(ckptr, _ckpt(0)) is None
  with pytest.raises(FileNotFoundError, match="missing.*does not exist"):
    checkpoint.Checkpointer(tmp_path / "missing", SYNC, read_only=True)


def test_read_only_reader_sees_new_steps(tmp_path):
  with checkpoint.Checkpointer(tmp_path, SYNC) as writer:
    writer.save(_ckpt(1))
    reader = checkpoint.Checkpointer(tmp_path, SYNC, read_only=True)
    writer.save(_ckpt(2))
    assert reader.latest_step() == 2
    _assert_restored(_restore_latest(reader, _ckpt(0)), _ckpt(2))
    with pytest.raises(RuntimeError, match="read-only"):
      reader.save(_ckpt(3))
    reader.close()


def test_opening_to_read_logs_no_warning(tmp_path, caplog):
  # Orbax's "Given directory is read only" reads like a fault with the
  # user's files; only the reader's own notice is hidden.
  with checkpoint.Checkpointer(tmp_path, SYNC) as writer:
    writer.save(_ckpt(1))
  with caplog.at_level(logging.WARNING):
    with checkpoint.Checkpointer(tmp_path, SYNC, read_only=True) as reader:
      assert reader.latest_step() == 1
  assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [
    r.getMessage() for r in caplog.records
  ]
  # The filter goes with the manager: absl's later warnings still show.
  with caplog.at_level(logging.WARNING):
    absl_logging.warning("Given directory is read only=%s", "elsewhere")
  assert "elsewhere" in caplog.text


# --- Crash safety ------------------------------------------------------------

# Saves step 1, then starts step 2 and hangs at one of orbax's commit renames
# (argv[3]): "item" renames one item's tmp dir inside the step's tmp dir,
# "step" renames the step's tmp dir once every file is written. It says so on
# stdout; the test then SIGKILLs it.
_KILLED_SAVE = """
import os
import sys
import time

import jax
import jax.numpy as jnp

from codeagent_rl.parallel import checkpoint


def ckpt(step):
  x = jnp.full((256, 256), float(step))
  return checkpoint.TrainCheckpoint(
    actor={"w": x}, critic={"w": x + 1}, step=step, rng=jax.random.key(step),
    data_position={"index": step},
  )


directory, mode, point = sys.argv[1:]
config = checkpoint.CheckpointConfig(
  keep=3, save_every=1, async_save=mode == "async"
)
ckptr = checkpoint.Checkpointer(directory, config)
ckptr.save(ckpt(1))
ckptr.wait_until_finished()
real_rename = os.rename
hang_at = "2" if point == "step" else ("state", "meta")


def hanging_rename(src, dst, *args, **kwargs):
  if os.path.basename(os.fspath(dst)) in hang_at:
    print("COMMITTING", flush=True)
    time.sleep(600)
  return real_rename(src, dst, *args, **kwargs)


os.rename = hanging_rename
ckptr.save(ckpt(2))
ckptr.wait_until_finished()
print("NOT KILLED", flush=True)
"""


def _kill_while_saving(directory, mode, point, stderr_path):
  """Runs _KILLED_SAVE and SIGKILLs it at its commit; returns its stdout."""
  env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = ""
  with open(stderr_path, "w") as stderr:
    proc = subprocess.Popen(
      [sys.executable, "-c", _KILLED_SAVE, str(directory), mode, point],
      stdout=subprocess.PIPE,
      stderr=stderr,
      text=True,
      env=env,
    )
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    try:
      line = proc.stdout.readline()
      proc.send_signal(signal.SIGKILL)
      proc.wait()
    finally:
      watchdog.cancel()
  return line


@pytest.mark.parametrize(
  "mode,point", [("sync", "step"), ("sync", "item"), ("async", "step")]
)
def test_save_killed_mid_commit_keeps_previous(tmp_path, mode, point):
  directory = tmp_path / "ckpt"
  line = _kill_while_saving(directory, mode, point, tmp_path / "stderr")
  assert line == "COMMITTING\n", (tmp_path / "stderr").read_text()[-3000:]
  # Killed mid-save: step 2's files sit in an unfinalized tmp dir.
  names = sorted(p.name for p in directory.iterdir())
  assert "2" not in names
  (partial,) = [n for n in names if n.startswith("2.orbax-checkpoint-tmp")]
  inside = sorted(p.name for p in (directory / partial).iterdir())
  if point == "step":
    assert {"state", "meta"} <= set(inside), inside
  else:
    assert any(n.endswith("orbax-checkpoint-tmp") for n in inside), inside

  want = checkpoint.TrainCheckpoint(
    actor={"w": jnp.full((256, 256), 1.0)},
    critic={"w": jnp.full((256, 256), 2.0)},
    step=1,
    rng=jax.random.key(1),
    data_position={"index": 1},
  )
  with checkpoint.Checkpointer(directory, SYNC) as ckptr:
    assert ckptr.all_steps() == [1]
    _assert_restored(_restore_latest(ckptr, want), want)
    # The restarted job can save step 2 again.
    assert ckptr.save(dataclasses.replace(want, step=2))
    assert ckptr.latest_step() == 2
  assert sorted(p.name for p in directory.iterdir()) == ["1", "2"]


def test_partially_written_step_is_ignored(tmp_path):
  with checkpoint.Checkpointer(tmp_path, SYNC) as ckptr:
    ckptr.save(_ckpt(1))
  # What a crash mid-write of step 2 can leave: a tmp dir with some of the
  # files, a truncated one among them, and no commit marker.
  partial = tmp_path / "2.orbax-checkpoint-tmp-1234567"
  (partial / "state").mkdir(parents=True)
  (partial / "state" / "manifest.ocdbt").write_bytes(b"\x00" * 10)
  (partial / "meta").write_text('{"format": 1, "st')
  with checkpoint.Checkpointer(tmp_path, SYNC, read_only=True) as reader:
    assert reader.all_steps() == [1]
    _assert_restored(_restore_latest(reader, _ckpt(0)), _ckpt(1))
  with checkpoint.Checkpointer(tmp_path, SYNC) as ckptr:
    assert ckptr.latest_step() == 1
    assert ckptr.save(_ckpt(2))
  assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2"]


# --- Resharding --------------------------------------------------------------


@pytest.fixture(name="saved_on_2x2x2", scope="module")
def _saved_on_2x2x2(tmp_path_factory):
  """Step 5 saved from states sharded on a (data=2, fsdp=2, tensor=2) mesh."""
  mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "tensor"))
  actor, critic = jax.tree.map(
    lambda x: jax.device_put(x, NamedSharding(mesh, _fsdp_tensor(x))),
    _states(5),
  )
  kernel = actor["params"]["params"]["Dense_0"]["kernel"]
  assert kernel.sharding.spec == P("fsdp", "tensor")
  want = checkpoint.TrainCheckpoint(
    actor=actor,
    critic=critic,
    step=5,
    rng=jax.device_put(jax.random.key(5), NamedSharding(mesh, P())),
    data_position={"epoch": 0, "index": 3, "seed": 1},
  )
  directory = tmp_path_factory.mktemp("saved_on_2x2x2")
  with checkpoint.Checkpointer(directory, SYNC) as ckptr:
    ckptr.save(want)
  return directory, want


@pytest.mark.parametrize("target", ["8x1", "2_devices", "one_device"])
def test_restore_onto_another_mesh(saved_on_2x2x2, target):
  directory, want = saved_on_2x2x2
  if target == "one_device":
    device = jax.devices()[3]
    sharding_of = lambda x: jax.sharding.SingleDeviceSharding(device)  # noqa: E731
  else:
    n = 8 if target == "8x1" else 2
    mesh = jax.make_mesh(
      (n, 1), ("data", "fsdp"), devices=jax.devices()[8 - n :]
    )
    sharding_of = lambda x: NamedSharding(mesh, _data_rows(x.shape, mesh))  # noqa: E731
  # The target is abstract: eval_shape + the new mesh's shardings.
  abstract_actor, abstract_critic = jax.eval_shape(lambda: _states(0))
  abstract_rng = jax.eval_shape(lambda: jax.random.key(0))
  targets = [
    _abstract(abstract_actor, sharding_of),
    _abstract(abstract_critic, sharding_of),
    _abstract(abstract_rng, sharding_of),
  ]
  with checkpoint.Checkpointer(directory, SYNC, read_only=True) as ckptr:
    got = ckptr.restore(5, actor=targets[0], critic=targets[1], rng=targets[2])
  _assert_restored(got, want)
  for tree, target_tree in zip(
    [got.actor, got.critic, got.rng], targets, strict=True
  ):
    for leaf, abstract in zip(
      jax.tree.leaves(tree), jax.tree.leaves(target_tree), strict=True
    ):
      assert leaf.sharding == abstract.sharding
  if target == "8x1":
    restored_kernel = got.actor["params"]["params"]["Dense_0"]["kernel"]
    assert restored_kernel.sharding.spec == P("data")
    assert len(restored_kernel.addressable_shards) == 8


# --- Errors ------------------------------------------------------------------


@pytest.fixture(name="saved")
def _saved(tmp_path):
  """A directory holding step 4 with an actor, a critic and a typed key."""
  with checkpoint.Checkpointer(tmp_path, SYNC) as ckptr:
    ckptr.save(_ckpt(4))
  return tmp_path


def _restore(directory, step=4, **changes):
  like = _ckpt(0)
  target = {
    "actor": _like(like.actor),
    "critic": _like(like.critic),
    "rng": like.rng,
    **changes,
  }
  with checkpoint.Checkpointer(directory, SYNC, read_only=True) as ckptr:
    return ckptr.restore(step, **target)


def test_missing_critic_is_named(tmp_path, saved):
  with pytest.raises(ValueError, match="has a critic but the restore target"):
    _restore(saved, critic=None)
  with checkpoint.Checkpointer(tmp_path / "no_critic", SYNC) as ckptr:
    ckptr.save(_ckpt(4, critic=False))
  with pytest.raises(ValueError, match="has no critic but the restore target"):
    _restore(tmp_path / "no_critic")


def test_missing_leaf_is_named(saved):
  actor = _like(_ckpt(0).actor)
  del actor["params"]["params"]["Dense_1"]["bias"]
  with pytest.raises(
    ValueError,
    match=r"In the checkpoint, not in the target: \['actor'\]\['params'\]"
    r"\['params'\]\['Dense_1'\]\['bias'\]",
  ):
    _restore(saved, actor=actor)


def test_wrong_shape_is_named(saved):
  critic = _like(_ckpt(0).critic)
  critic["params"]["w"] = jax.ShapeDtypeStruct(
    (4, 2), jnp.float32, sharding=critic["params"]["b"].sharding
  )
  with pytest.raises(
    ValueError, match=r"\['critic'\]\['params'\]\['w'\] has shape \(8, 2\)"
  ):
    _restore(saved, critic=critic)


def test_wrong_key_kind_is_named(saved):
  with pytest.raises(ValueError, match=r"\['rng'\] is a typed key"):
    _restore(saved, rng=jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match="key<fry>.*key<rbg>"):
    _restore(saved, rng=jax.random.key(0, impl="rbg"))


def test_target_without_sharding_is_rejected(saved):
  actor = jax.eval_shape(lambda: _states(0)[0])
  with pytest.raises(ValueError, match="needs a sharding on concrete devices"):
    _restore(saved, actor=actor)


def test_missing_step_lists_steps(saved):
  with pytest.raises(FileNotFoundError, match=r"step 9 .*steps there: \[4\]"):
    _restore(saved, step=9)


def test_unknown_meta_format_is_rejected(saved):
  meta = saved / "4" / "meta" / "metadata"
  data = json.loads(meta.read_text())
  meta.write_text(json.dumps({**data, "format": 99}))
  with pytest.raises(ValueError, match="unknown meta format 99"):
    _restore(saved)


def test_bad_data_position_is_rejected(tmp_path):
  with checkpoint.Checkpointer(tmp_path, SYNC) as ckptr:
    for position, match in [
      ({"index": np.int64(3)}, "not JSON-able"),
      ({"pair": (1, 2)}, "JSON would change it"),
      ([1, 2], "must be a dict"),
    ]:
      bad = dataclasses.replace(_ckpt(1), data_position=position)
      with pytest.raises(ValueError, match=match):
        ckptr.save(bad)
    assert ckptr.all_steps() == []


def test_unwritable_directory_is_explained(tmp_path):
  blocker = tmp_path / "a_file"
  blocker.write_text("")
  with pytest.raises(OSError, match="a_file/ckpt is not writable"):
    checkpoint.Checkpointer(blocker / "ckpt", SYNC)
