"""Packing trajectories of very different lengths into shared rows.

A code agent's trajectories for one prompt run from a few hundred tokens to
tens of thousands; padded to the longest, a micro-batch spends most of its
forward and backward on padding. Packing places several trajectories one
after another in a row of the same length (first-fit decreasing), with
segment ids so that attention stays inside a trajectory and positions
restart at each one.

Only the model's forward runs packed. Its per-token outputs are scattered
back to the [B, T] layout the losses, advantages and loss aggregation use,
so every aggregation mode (and micro-batch accumulation) is unchanged by
construction; the tests check packed and unpacked losses and gradients are
equal.

A plan is made on the host from the rows' validity masks (the lengths are
known once the rollouts are back) and travels to the devices as two int32
index arrays:

  src [R, L]: for each packed slot, the flat index (b * T + t) of the token
    it holds, or -1 for an empty slot;
  dst [B, T]: for each token, the flat index (r * L + j) of its packed slot,
    or -1 for padding.

Rows must be right-padded (valid tokens first), as rollouts and SFT
examples are; the packed row length L is the batch's T.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Plan:
  """Where each token of a [B, T] batch sits in [R, T] packed rows."""

  src: np.ndarray  # [R, T] int32
  dst: np.ndarray  # [B, T] int32

  @property
  def rows(self) -> int:
    """Packed rows R."""
    return self.src.shape[0]


def lengths_of(valid: np.ndarray) -> np.ndarray:
  """[B] lengths of right-padded rows; raises if a row has a gap.

  Raises:
    ValueError: a row's valid tokens are not a prefix of the row.
  """
  valid = np.asarray(valid, bool)
  if valid.ndim != 2:
    raise ValueError(f"packing: valid must be [B, T], got {valid.shape}.")
  lengths = valid.sum(axis=1)
  prefix = np.arange(valid.shape[1])[None, :] < lengths[:, None]
  bad = np.flatnonzero((valid != prefix).any(axis=1))
  if bad.size:
    raise ValueError(
      f"packing: rows {bad[:5].tolist()} are not right-padded (a padding"
      " token before a valid one); packing needs the valid tokens first."
    )
  return lengths


def assign(lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
  """First-fit decreasing: (packed row, offset) of each sequence.

  Longest first (ties by index, so the plan is deterministic), each into
  the first row with room.
  """
  lengths = np.asarray(lengths, np.int64)
  if lengths.size and lengths.max() > capacity:
    raise ValueError(
      f"packing: a sequence of {lengths.max()} tokens does not fit a row of"
      f" {capacity}."
    )
  order = np.argsort(-lengths, kind="stable")
  used: list[int] = []
  row = np.zeros(lengths.shape, np.int64)
  offset = np.zeros(lengths.shape, np.int64)
  for i in order:
    n = int(lengths[i])
    r = next(
      (r for r, filled in enumerate(used) if filled + n <= capacity), None
    )
    if r is None:
      r = len(used)
      used.append(0)
    row[i], offset[i] = r, used[r]
    used[r] += n
  return row, offset


def rows_needed(valid: np.ndarray) -> int:
  """Packed rows first-fit decreasing needs for [B, T] `valid`."""
  lengths = lengths_of(valid)
  row, _ = assign(lengths, valid.shape[1])
  return int(row.max()) + 1 if row.size else 0


def plan(valid: np.ndarray, rows: int | None = None) -> Plan:
  """The packing of right-padded [B, T] rows into `rows` rows of length T.

  Args:
    valid: [B, T] bool validity (right-padded rows).
    rows: packed rows R (a static shape for jit: the caller pads to it); at
      least `rows_needed(valid)`. None: exactly that many.

  Returns:
    The `Plan`.

  Raises:
    ValueError: a row is not right-padded, or `rows` is too few.
  """
  valid = np.asarray(valid, bool)
  b, t = valid.shape
  lengths = lengths_of(valid)
  row, offset = assign(lengths, t)
  need = int(row.max()) + 1 if row.size else 0
  rows = need if rows is None else rows
  if rows < need:
    raise ValueError(f"packing: {need} packed rows needed, {rows} given.")
  src = np.full((rows, t), -1, np.int32)
  dst = np.full((b, t), -1, np.int32)
  for i in range(b):
    n = int(lengths[i])
    slots = row[i] * t + offset[i] + np.arange(n)
    src.reshape(-1)[slots] = i * t + np.arange(n)
    dst[i, :n] = slots
  return Plan(src=src, dst=dst)


def _take(x: jax.Array, index: jax.Array) -> jax.Array:
  """Reads `x`, flattened over its first two axes, at `index` (-1: zero)."""
  flat = x.reshape((-1,) + x.shape[2:])
  out = jnp.take(flat, jnp.maximum(index, 0), axis=0)
  keep = (index >= 0).reshape(index.shape + (1,) * (x.ndim - 2))
  return jnp.where(keep, out, jnp.zeros((), x.dtype))


def pack(x: jax.Array, src: jax.Array) -> jax.Array:
  """[B, T, ...] -> [R, T, ...] packed as `src` says (zeros when empty)."""
  return _take(x, src)


def unpack(x: jax.Array, dst: jax.Array) -> jax.Array:
  """[R, T, ...] packed -> [B, T, ...] (zeros at padding)."""
  return _take(x, dst)


def segments(src: jax.Array, length: int) -> jax.Array:
  """[R, T] int32 segment ids: the source row + 1, 0 for empty slots."""
  return jnp.where(src >= 0, src // length + 1, 0).astype(jnp.int32)
