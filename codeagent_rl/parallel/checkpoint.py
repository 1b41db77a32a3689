"""Training checkpoints with orbax: atomic saves, keep-last-N, resharding.

One checkpoint is one step directory `<dir>/<step>/` with two items:

  state/  the arrays (orbax standard handler): the actor and critic train
          states and the RNG key. Typed keys (`jax.random.key`) are stored as
          their key data and re-wrapped on restore.
  meta/   JSON: the global step, the data position, and every array leaf's
          path, shape and key implementation, so that a restore target that
          does not match is rejected with a message naming the leaf.

Crash safety comes from orbax: a save writes into
`<step>.orbax-checkpoint-tmp-*` and renames it to `<step>` only when every
file is written (on object stores a commit file plays that role). A process
killed mid-save leaves an unfinalized directory that `all_steps` ignores and
the next writable `Checkpointer` deletes, so the previous checkpoint stays the
latest usable one.

Restoring takes an abstract target (`jax.ShapeDtypeStruct`s with concrete
shardings, or live arrays whose shardings are used), so each device reads only
its own shards and the mesh may differ from the one that saved.

With several processes (multi-host) every process calls `save` and
`restore` together, on one directory they all see; each writes its own
shards. An array on one process's devices only (the RNG key, which every
process derives alike) is saved once, as a replicated global array.

With `async_save`, `save` returns once the arrays are copied to host memory
and the files are written in a background thread. `close()` (or leaving a
`with` block) waits for it; `close` is also registered with `atexit`, which
runs on a normal exit, an uncaught exception and `SystemExit`, but not when
SIGTERM's default action kills the process. A trainer that must finish its
last save on SIGTERM installs a handler that raises `SystemExit` (or stops
its loop and calls `close`). Whatever happens, an unfinished save never
damages the previous checkpoint.
"""

from __future__ import annotations

import atexit
import collections.abc
import dataclasses
import json
import logging
import os
from typing import Any

from etils import epath
import jax
import numpy as np
import orbax.checkpoint as ocp

from codeagent_rl import config_utils
from codeagent_rl.parallel import distributed

PyTree = Any

# Item names inside one step directory.
_STATE = "state"
_META = "meta"
# Bumped when the meta layout changes; restore rejects unknown versions.
_FORMAT_VERSION = 1
# Leaf paths listed in a mismatch message before "... and N more".
_MAX_LISTED = 5


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """Validated `config.checkpoint` section; the directory comes at call time.

  Attributes:
    keep: how many of the latest checkpoints to keep (>= 1).
    save_every: save when `step % save_every == 0` (>= 1); see
      `Checkpointer.save`.
    async_save: write files in a background thread (see the module doc).
  """

  keep: int
  save_every: int
  async_save: bool

  def __post_init__(self):
    for name in ("keep", "save_every"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
          f"checkpoint.{name}={value!r}: must be an integer >= 1."
        )
    if not isinstance(self.async_save, bool):
      raise ValueError(
        f"checkpoint.async_save={self.async_save!r}: must be True or False."
      )

  @classmethod
  def from_config(cls, section: Any) -> CheckpointConfig:
    """Builds from an `ml_collections.ConfigDict` (or a dict).

    Raises:
      ValueError: a field is missing, unknown or has a bad value.
    """
    return config_utils.from_section(cls, section, "checkpoint")


@dataclasses.dataclass(frozen=True)
class TrainCheckpoint:
  """Everything one checkpoint holds.

  Attributes:
    actor: the actor train state (params, optimiser state, step): any pytree
      of `jax.Array`s.
    critic: the critic train state, or None for critic-free estimators.
    step: the global training step; it also names the step directory.
    rng: the RNG key, raw (`uint32[2]`) or typed (`jax.random.key`).
    data_position: where the data stream stands (e.g. epoch, index, seed);
      a JSON-able dict with string keys.
  """

  actor: PyTree
  critic: PyTree | None
  step: int
  rng: jax.Array
  data_position: dict[str, Any]


def _hide_read_only_notice(record: logging.LogRecord) -> bool:
  """False for orbax's notice that a manager was opened read-only."""
  return not str(record.msg).startswith("Given directory is read only")


class Checkpointer:
  """Saves and restores `TrainCheckpoint`s in one directory.

  Usage:

    with Checkpointer(workdir / "checkpoints", config) as ckpt:
      restored = ckpt.restore_latest(actor=..., critic=..., rng=...)
      ...
      ckpt.save(TrainCheckpoint(...))  # saves when step % save_every == 0
  """

  def __init__(
    self,
    directory: str | os.PathLike[str],
    config: CheckpointConfig,
    *,
    read_only: bool = False,
  ):
    """Opens `directory` and finds the checkpoints already there.

    Args:
      directory: the checkpoint directory (local path or an epath URL).
      config: keep / save_every / async_save.
      read_only: never write or delete (e.g. an evaluator reading a
        trainer's checkpoints); the directory must then exist.

    Raises:
      FileNotFoundError: `read_only` and `directory` does not exist.
      OSError: `directory` cannot be created or written (not `read_only`).
    """
    self._directory = epath.Path(directory)
    self._read_only = read_only
    if read_only:
      if not self._directory.is_dir():
        raise FileNotFoundError(
          f"checkpoint directory {self._directory} does not exist."
        )
      options = ocp.CheckpointManagerOptions(
        read_only=True,
        create=False,
        save_interval_steps=0,
        enable_async_checkpointing=False,
      )
    else:
      _ensure_writable(self._directory)
      options = ocp.CheckpointManagerOptions(
        save_decision_policy=ocp.checkpoint_managers.AnySavePolicy(
          [
            ocp.checkpoint_managers.FixedIntervalPolicy(config.save_every),
            ocp.checkpoint_managers.PreemptionCheckpointingPolicy(),
          ]
        ),
        preservation_policy=ocp.checkpoint_managers.LatestN(n=config.keep),
        enable_async_checkpointing=config.async_save,
        create=True,
        # Deletes what a killed save left behind (unfinalized tmp dirs).
        cleanup_tmp_directories=True,
      )
    if read_only:
      # Orbax warns "Given directory is read only" when a manager is opened
      # for reading, which users of a resume took for a fault with their
      # files; reading is what was asked for here.
      absl_logger = logging.getLogger("absl")
      absl_logger.addFilter(_hide_read_only_notice)
      try:
        self._manager = ocp.CheckpointManager(self._directory, options=options)
      finally:
        absl_logger.removeFilter(_hide_read_only_notice)
    else:
      self._manager = ocp.CheckpointManager(self._directory, options=options)
    self._closed = False
    if config.async_save and not read_only:
      atexit.register(self.close)

  @property
  def directory(self) -> epath.Path:
    """The checkpoint directory."""
    return self._directory

  def all_steps(self) -> list[int]:
    """The steps of the finalized checkpoints, ascending."""
    self._maybe_reload()
    return sorted(self._manager.all_steps())

  def latest_step(self) -> int | None:
    """The newest finalized step, or None when there is none."""
    self._maybe_reload()
    return self._manager.latest_step()

  def _maybe_reload(self) -> None:
    # A reader sees the steps another process (the trainer) finalized since.
    if self._read_only:
      self._manager.reload()

  def should_save(self, step: int) -> bool:
    """Whether `save` would write `step` (interval, preemption, newer)."""
    return self._manager.should_save(step)

  def save(self, checkpoint: TrainCheckpoint, *, force: bool = False) -> bool:
    """Saves `checkpoint` under `checkpoint.step` if `should_save` says so.

    Older checkpoints beyond `config.keep` are deleted once it is finalized.

    Args:
      checkpoint: what to save; arrays may be sharded on any mesh.
      force: save even when `should_save(step)` is False.

    Returns:
      Whether a save was started (finished, unless `async_save`).

    Raises:
      ValueError: a bad step or data position, or the step already exists.
      OSError: writing failed; the message names the directory and step.
      RuntimeError: the Checkpointer is read-only.
    """
    if self._read_only:
      raise RuntimeError(
        f"Checkpointer({self._directory}) is read-only; it cannot save."
      )
    step = checkpoint.step
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
      raise ValueError(f"TrainCheckpoint.step={step!r}: must be an int >= 0.")
    position = _checked_data_position(checkpoint.data_position)
    if not force and not self.should_save(step):
      return False
    state = _state_tree(checkpoint.actor, checkpoint.critic, checkpoint.rng)
    arrays, leaves = _storable(state)
    arrays = _global(arrays)
    meta = {
      "format": _FORMAT_VERSION,
      "step": step,
      "data_position": position,
      "leaves": leaves,
    }
    args = ocp.args.Composite(
      **{
        _STATE: ocp.args.StandardSave(arrays),
        _META: ocp.args.JsonSave(meta),
      }
    )
    try:
      return self._manager.save(step, args=args, force=force)
    except OSError as e:
      raise type(e)(
        f"saving checkpoint step {step} to {self._directory} failed: {e}"
      ) from e

  def restore(
    self,
    step: int,
    *,
    actor: PyTree,
    critic: PyTree | None,
    rng: jax.Array | jax.ShapeDtypeStruct,
  ) -> TrainCheckpoint:
    """Restores `step` onto the shardings of the given targets.

    Each target leaf is a `jax.ShapeDtypeStruct` with a concrete sharding
    (e.g. from `jax.eval_shape` plus the shardings of the new mesh) or a
    `jax.Array`, whose shape, dtype and sharding are used. Dtypes may differ
    from the saved ones (values are cast); shapes and tree paths may not.

    Args:
      step: the step to restore.
      actor: the actor train state's abstract target.
      critic: the critic's abstract target, or None when there is no critic.
      rng: the RNG key's target: raw (`uint32`) or typed, as saved.

    Returns:
      The checkpoint, its arrays laid out as the targets ask.

    Raises:
      FileNotFoundError: no finalized checkpoint for `step`.
      ValueError: the target does not match the checkpoint (a missing or
        extra leaf or critic, another shape, another kind of RNG key), or a
        target leaf has no concrete sharding.
    """
    self.wait_until_finished()
    steps = self.all_steps()
    if step not in steps:
      raise FileNotFoundError(
        f"no finalized checkpoint for step {step} in {self._directory};"
        f" steps there: {steps}."
      )
    meta = self._manager.restore(
      step, args=ocp.args.Composite(**{_META: ocp.args.JsonRestore()})
    )[_META]
    where = f"checkpoint step {step} in {self._directory}"
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT_VERSION:
      raise ValueError(
        f"{where}: unknown meta format"
        f" {meta.get('format') if isinstance(meta, dict) else meta!r};"
        f" this code reads format {_FORMAT_VERSION}."
      )
    target = _state_tree(actor, critic, rng)
    abstract, key_paths = _abstract_target(target)
    _check_target(where, meta["leaves"], target)
    restored = self._manager.restore(
      step,
      args=ocp.args.Composite(**{_STATE: ocp.args.StandardRestore(abstract)}),
    )[_STATE]
    restored = _rewrap_keys(restored, key_paths, meta["leaves"])
    return TrainCheckpoint(
      actor=restored["actor"],
      critic=restored.get("critic"),
      step=meta["step"],
      rng=restored["rng"],
      data_position=meta["data_position"],
    )

  def restore_latest(
    self,
    *,
    actor: PyTree,
    critic: PyTree | None,
    rng: jax.Array | jax.ShapeDtypeStruct,
  ) -> TrainCheckpoint | None:
    """Restores the newest finalized checkpoint, or returns None if none.

    See `restore` for the targets and the errors.
    """
    step = self.latest_step()
    if step is None:
      return None
    return self.restore(step, actor=actor, critic=critic, rng=rng)

  def wait_until_finished(self) -> None:
    """Blocks until an async save (and old-step deletion) has finished."""
    try:
      self._manager.wait_until_finished()
    except OSError as e:
      raise type(e)(
        f"finishing a checkpoint save in {self._directory} failed: {e}"
      ) from e

  def close(self) -> None:
    """Waits for pending saves and releases orbax's threads. Idempotent."""
    if self._closed:
      return
    self._closed = True
    atexit.unregister(self.close)
    try:
      self.wait_until_finished()
    finally:
      self._manager.close()

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()


def _ensure_writable(directory: epath.Path) -> None:
  """Creates `directory` and writes a probe file, or says why it cannot."""
  probe = directory / f".write_probe.{jax.process_index()}.{os.getpid()}"
  try:
    directory.mkdir(parents=True, exist_ok=True)
    probe.write_text("ok")
    probe.unlink()
  except OSError as e:
    raise type(e)(
      f"checkpoint directory {directory} is not writable"
      f" ({e.strerror or e}); choose a directory this process can write"
      " (e.g. another --workdir) or fix its permissions."
    ) from e


def _checked_data_position(position: Any) -> dict[str, Any]:
  """Returns `position` if JSON keeps it exactly, else raises ValueError."""
  if not isinstance(position, collections.abc.Mapping):
    raise ValueError(
      f"TrainCheckpoint.data_position={position!r}: must be a dict."
    )
  try:
    round_trip = json.loads(json.dumps(dict(position), allow_nan=False))
  except (TypeError, ValueError) as e:
    raise ValueError(
      f"TrainCheckpoint.data_position={position!r}: not JSON-able ({e})."
    ) from e
  if round_trip != position:
    raise ValueError(
      f"TrainCheckpoint.data_position={position!r}: JSON would change it"
      f" into {round_trip!r}; use str keys, lists and plain numbers."
    )
  return round_trip


def _state_tree(actor: PyTree, critic: PyTree | None, rng: Any) -> dict:
  """The saved array tree: {"actor", "critic" (if any), "rng"}."""
  tree = {"actor": actor, "rng": rng}
  if critic is not None:
    tree["critic"] = critic
  return tree


def _is_typed_key(x: Any) -> bool:
  return jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


def _storable(state: dict) -> tuple[dict, dict[str, dict]]:
  """Replaces typed keys by their data; describes every leaf for the meta."""
  leaves = {}

  def convert(path, x):
    info = {"shape": list(x.shape), "key_impl": None}
    if _is_typed_key(x):
      info["key_impl"] = str(jax.random.key_impl(x))
      x = jax.random.key_data(x)
    leaves[jax.tree_util.keystr(path)] = info
    return x

  arrays = jax.tree_util.tree_map_with_path(convert, state)
  return arrays, leaves


def _global(arrays: dict) -> dict:
  """`arrays`, each on every process, for a multi-process save.

  Orbax saves global arrays only; an array on one process's devices (the
  RNG key, which every process derives alike) becomes a replicated one over
  all devices. With one process, `arrays` as they are.
  """
  if jax.process_count() == 1:
    return arrays
  everywhere = jax.sharding.NamedSharding(
    jax.sharding.Mesh(np.asarray(jax.devices()), ("devices",)),
    jax.sharding.PartitionSpec(),
  )

  def one(x):
    if isinstance(x, jax.Array) and x.is_fully_addressable:
      return distributed.put_replicated(x, everywhere)
    return x

  return jax.tree.map(one, arrays)


def _abstract_target(target: dict) -> tuple[dict, set[str]]:
  """Abstract arrays to restore into; typed keys become their key data.

  Returns:
    The abstract tree and the paths of the typed-key leaves.
  """
  key_paths = set()

  def convert(path, x):
    name = jax.tree_util.keystr(path)
    if not isinstance(x, jax.Array | jax.ShapeDtypeStruct):
      raise ValueError(
        f"restore target {name}: expected a jax.Array or a"
        f" jax.ShapeDtypeStruct, got {type(x).__name__}."
      )
    sharding = x.sharding
    if sharding is None or (
      isinstance(sharding, jax.sharding.NamedSharding)
      and isinstance(sharding.mesh, jax.sharding.AbstractMesh)
    ):
      raise ValueError(
        f"restore target {name}: needs a sharding on concrete devices (got"
        f" {sharding}); give jax.ShapeDtypeStruct(shape, dtype,"
        " sharding=NamedSharding(mesh, spec))."
      )
    if not _is_typed_key(x):
      return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
    key_paths.add(name)
    data = jax.eval_shape(
      jax.random.key_data, jax.ShapeDtypeStruct(x.shape, x.dtype)
    )
    return jax.ShapeDtypeStruct(
      data.shape,
      data.dtype,
      sharding=_key_data_sharding(name, sharding, data.ndim),
    )

  return jax.tree_util.tree_map_with_path(convert, target), key_paths


def _key_data_sharding(
  name: str, sharding: jax.sharding.Sharding, ndim: int
) -> jax.sharding.Sharding:
  """The sharding of a typed key's data (`ndim` dims): trailing dims whole."""
  if isinstance(sharding, jax.sharding.SingleDeviceSharding):
    return sharding
  if isinstance(sharding, jax.sharding.NamedSharding):
    spec = tuple(sharding.spec)
    spec += (None,) * (ndim - len(spec))
    return jax.sharding.NamedSharding(
      sharding.mesh, jax.sharding.PartitionSpec(*spec)
    )
  raise ValueError(
    f"restore target {name}: a typed key needs a NamedSharding or a"
    f" SingleDeviceSharding, got {type(sharding).__name__}."
  )


def _listed(paths: list[str]) -> str:
  shown = ", ".join(paths[:_MAX_LISTED])
  more = len(paths) - _MAX_LISTED
  return shown + (f" and {more} more" if more > 0 else "")


def _check_target(where: str, saved: dict[str, dict], target: dict) -> None:
  """Raises ValueError naming how `target` differs from the saved leaves."""
  saved_critic = any(p.startswith("['critic']") for p in saved)
  if saved_critic != ("critic" in target):
    raise ValueError(
      f"{where}: the checkpoint has {'a' if saved_critic else 'no'} critic"
      f" but the restore target has {'none' if saved_critic else 'one'}."
    )
  wanted = {
    jax.tree_util.keystr(path): x
    for path, x in jax.tree_util.tree_leaves_with_path(target)
  }
  missing = sorted(set(wanted) - set(saved))
  extra = sorted(set(saved) - set(wanted))
  if missing or extra:
    raise ValueError(
      f"{where}: the tree structure does not match the restore target."
      f" In the target, not in the checkpoint: {_listed(missing) or 'none'}."
      f" In the checkpoint, not in the target: {_listed(extra) or 'none'}."
    )
  for name, x in wanted.items():
    info = saved[name]
    if (info["key_impl"] is not None) != _is_typed_key(x):
      saved_kind = "a typed key" if info["key_impl"] else "a raw array"
      target_kind = "a typed key" if _is_typed_key(x) else "a raw array"
      raise ValueError(
        f"{where}: {name} is {saved_kind} in the checkpoint but"
        f" {target_kind} in the restore target."
      )
    if info["key_impl"] is not None:
      saved_dtype = jax.eval_shape(
        lambda impl=info["key_impl"]: jax.random.key(0, impl=impl)
      ).dtype
      if saved_dtype != x.dtype:
        raise ValueError(
          f"{where}: {name} is a {saved_dtype} key ({info['key_impl']}) in"
          f" the checkpoint but a {x.dtype} key in the restore target."
        )
    if tuple(info["shape"]) != tuple(x.shape):
      raise ValueError(
        f"{where}: {name} has shape {tuple(info['shape'])} in the checkpoint"
        f" but {tuple(x.shape)} in the restore target."
      )


def _rewrap_keys(
  restored: dict, key_paths: set[str], saved: dict[str, dict]
) -> dict:
  """Wraps the restored key data of typed-key leaves into keys again."""

  def convert(path, x):
    name = jax.tree_util.keystr(path)
    if name not in key_paths:
      return x
    return jax.random.wrap_key_data(x, impl=saved[name]["key_impl"])

  return jax.tree_util.tree_map_with_path(convert, restored)
