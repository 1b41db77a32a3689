"""Jitted generation with a KV cache, for multi-turn agent rollouts.

A conversation is a `DecodeState`: the cache, the logits that predict each
row's next token, and each row's next position. Two jittable steps grow it:

- `extend` appends tokens (a ragged prompt, or the observation of the last
  turn) without recomputing the prefix: incremental prefill. Prefill of a
  prompt is `extend` on an empty state.
- `decode` samples until every row has emitted one of its stop tokens or
  spent its own budget, in a `lax.while_loop` that feeds one token per step.
  Greedy, temperature, top-k and top-p sampling; one key for the batch, or
  one key per row (a row's tokens then do not depend on its neighbours').
  A batch may be one process's part of a larger batch that shares one key
  (`BatchPart`): its rows then draw what they would in the whole batch.

For continuous batching (`rollout/continuous.py`) a row can start a new
conversation while the others go on: `restart` empties some rows
(`reset_rows`: their slots become invalid, so the old conversation is never
attended again) and prefills the new prompts into those rows only, and
`compact` moves every row's valid slots to the front when the shared write
index runs out of room (rows that restarted leave their old slots behind).

Memory is the cache plus one step of activations; the state is donated from
call to call and dropped after the rollout. On a mesh the state is split
like the batch: rows over the `batch` rule's mesh axes, the cache's
key/value heads over the `heads` rule's (`state_shardings`). `Sampler` is
the host-side wrapper that jits the steps (once per layout of the state),
tracks how full the cache is, and stops with a clear error before a write
would overflow it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import chex
from flax import struct
import jax
from jax import lax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
import numpy as np

from codeagent_rl import jit_cache
from codeagent_rl.models import transformer

_NEG_INF = -1e30
# A logical axis's mesh axes, and logical-to-mesh rules, as
# `codeagent_rl.parallel.mesh` validates them (models import no `parallel`).
MeshAxes = str | tuple[str, ...] | None
Rules = tuple[tuple[str, MeshAxes], ...]


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
  """Validated `config.sampler` section.

  Attributes:
    temperature: 0 for greedy decoding, else the softmax temperature.
    top_k: keep the k most likely tokens (0: no limit).
    top_p: keep the smallest set of tokens with this much probability
      (1.0: no limit).
    max_new_tokens: the most tokens one `decode` call may produce per row (a
      static bound; per-row budgets may be smaller).
    vocab_limit: sample only ids below this (the tokenizer's vocabulary when
      the model's is padded, e.g. 272 of 384); 0: every id.
  """

  temperature: float
  top_k: int
  top_p: float
  max_new_tokens: int
  vocab_limit: int = 0

  def __post_init__(self):
    if self.temperature < 0:
      raise ValueError(f"sampler.temperature={self.temperature}: must be >= 0.")
    if self.top_k < 0:
      raise ValueError(f"sampler.top_k={self.top_k}: must be >= 0.")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"sampler.top_p={self.top_p}: must be in (0, 1].")
    if self.max_new_tokens <= 0:
      raise ValueError(
        f"sampler.max_new_tokens={self.max_new_tokens}: must be > 0."
      )
    if self.vocab_limit < 0:
      raise ValueError(f"sampler.vocab_limit={self.vocab_limit}: must be >= 0.")


@dataclasses.dataclass(frozen=True)
class BatchPart:
  """Rows [start, start + B) of a batch of `total` rows that shares one key.

  A process that runs its share of a lockstep batch (multi-host rollouts)
  samples with the whole batch's key: each step draws the noise of all
  `total` rows, as `jax.random.categorical` over the whole batch would, and
  keeps its own rows'. Its tokens are then the ones the whole batch run in
  one process samples, whatever the number of processes (up to float
  rounding of the logits, which are computed in another batch layout).

  Attributes:
    start: the first row's index in the whole batch.
    total: rows of the whole batch.
  """

  start: int
  total: int

  def __post_init__(self):
    if not 0 <= self.start < self.total:
      raise ValueError(
        f"BatchPart(start={self.start}, total={self.total}): start must be"
        " in [0, total)."
      )


@struct.dataclass
class DecodeState:
  """A batch of conversations in progress.

  Attributes:
    cache: the `KVCache` of everything seen so far.
    last_logits: [B, V] float32 logits predicting each row's next token.
    next_pos: [B] int32 position of each row's next token.
  """

  cache: transformer.KVCache
  last_logits: jax.Array
  next_pos: jax.Array


@struct.dataclass
class SampleOutput:
  """What one `decode` call produced.

  Attributes:
    tokens: [B, N] generated tokens, `pad_id` after a row stopped.
    log_probs: [B, N] float32 log-probs of the sampled tokens under the
      temperature-scaled policy (raw logits when greedy), before top-k/top-p
      truncation; 0 after a row stopped.
    lengths: [B] int32 tokens generated per row (a stop token included).
    stopped: [B] bool, the row emitted one of its stop tokens (False: it ran
      out of budget).
  """

  tokens: jax.Array
  log_probs: jax.Array
  lengths: jax.Array
  stopped: jax.Array


def empty_state(
  config: transformer.TransformerConfig, batch: int, max_len: int
) -> DecodeState:
  """A state with an empty cache of `max_len` slots per row."""
  return DecodeState(
    cache=transformer.init_cache(config, batch, max_len),
    last_logits=jnp.zeros((batch, config.vocab_size), jnp.float32),
    next_pos=jnp.zeros((batch,), jnp.int32),
  )


def _state_tree(
  config: transformer.TransformerConfig, kv: Any, rows: Any, scalar: Any
) -> DecodeState:
  """A `DecodeState`-shaped tree of `kv`, `rows` and `scalar` leaves.

  `kv` sits at every layer's keys and values, `scalar` at the cache's
  index and `rows` at the other (per-row) leaves.
  """
  layer = transformer.LayerKV(k=kv, v=kv)
  return DecodeState(
    cache=transformer.KVCache(
      layers=(layer,) * config.num_layers,
      valid=rows,
      positions=rows,
      index=scalar,
    ),
    last_logits=rows,
    next_pos=rows,
  )


def _mesh_axes_that_split(
  mesh: jax.sharding.Mesh,
  mesh_axes: MeshAxes,
  size: int,
  taken: tuple[str, ...] = (),
) -> MeshAxes:
  """`mesh_axes` if they split `size` evenly and use no `taken` axis."""
  if mesh_axes is None:
    return None
  names = (mesh_axes,) if isinstance(mesh_axes, str) else mesh_axes
  if any(name in taken for name in names):
    return None
  if size % math.prod(mesh.shape[name] for name in names):
    return None
  return mesh_axes


def state_shardings(
  config: transformer.TransformerConfig,
  mesh: jax.sharding.Mesh,
  rules: Rules,
  batch: int,
) -> DecodeState:
  """Where each leaf of a `DecodeState` of `batch` rows lives on `mesh`.

  Rows (of the cache, its slot metadata, `last_logits`, `next_pos`) are
  split over the mesh axes of the `batch` rule, and the cache's key/value
  heads over those of the `heads` rule, each only where the axes divide
  the size: a rollout batch of any size must run, so rows that do not
  divide (e.g. 3 over data x fsdp = 4) are replicated instead, as are
  heads whose mesh axes the rows already use. Slots, head width, the
  vocabulary and the cache's write index are never split: decoding writes
  one slot of every row at a time and samples over the whole vocabulary.

  Args:
    config: the model whose cache it is.
    mesh: the device mesh the params are on.
    rules: validated logical-to-mesh rules.
    batch: rows of the state.

  Returns:
    A `DecodeState` of `NamedSharding`s, for `Sampler.start`.

  Raises:
    ValueError: the rules have no `batch` or no `heads` rule.
  """
  table = dict(rules)
  missing = [name for name in ("batch", "heads") if name not in table]
  if missing:
    raise ValueError(
      f"mesh.rules has no rule for {missing}; the sampler's KV cache needs"
      " one (mesh axes or None) for each."
    )
  rows = _mesh_axes_that_split(mesh, table["batch"], batch)
  taken = () if rows is None else (rows,) if isinstance(rows, str) else rows
  heads = _mesh_axes_that_split(
    mesh, table["heads"], config.num_kv_heads, taken
  )
  return _state_tree(
    config,
    kv=NamedSharding(mesh, PartitionSpec(rows, heads)),
    rows=NamedSharding(mesh, PartitionSpec(rows)),
    scalar=NamedSharding(mesh, PartitionSpec()),
  )


def extend(
  params: Any,
  state: DecodeState,
  tokens: jax.Array,
  valid: jax.Array,
  *,
  model: transformer.Actor,
) -> DecodeState:
  """Appends a ragged chunk of tokens to every conversation.

  Args:
    params: actor variables.
    state: the conversations so far.
    tokens: [B, C] token ids.
    valid: [B, C] bool; a row's valid tokens may sit anywhere in the chunk
      (left or right padding); a row with none keeps its state.
    model: the actor module (bind with functools.partial before jit).

  Returns:
    The state after the chunk; `last_logits` are those at each row's last
    valid token of the chunk.
  """
  chex.assert_rank([tokens, valid], 2)
  chex.assert_equal_shape([tokens, valid])
  valid = valid.astype(bool)
  positions = transformer.positions_from_valid(valid, start=state.next_pos)
  c = tokens.shape[1]
  has_any = jnp.any(valid, axis=1)
  last = c - 1 - jnp.argmax(valid[:, ::-1], axis=1)
  if model.config.logits_chunk:
    # A large vocabulary: only the last position's logits, never [B, C, V]
    # (a 4k-token prompt at V=151936 would be 2.5 GB a row).
    hidden, cache = model.apply(
      params,
      tokens,
      positions,
      valid,
      state.cache,
      method=transformer.Actor.hidden,
    )
    hidden = jnp.take_along_axis(hidden, last[:, None, None], axis=1)
    chunk_last = model.apply(params, hidden, method=transformer.Actor.logits)
    chunk_last = chunk_last[:, 0]
  else:
    # All positions' logits: the matmul shapes the small models' numbers
    # were measured with (a [B, 1, D] head rounds differently).
    logits, cache = model.apply(params, tokens, positions, valid, state.cache)
    chunk_last = jnp.take_along_axis(logits, last[:, None, None], axis=1)
    chunk_last = chunk_last[:, 0]
  return DecodeState(
    cache=cache,
    last_logits=jnp.where(has_any[:, None], chunk_last, state.last_logits),
    next_pos=state.next_pos + jnp.sum(valid, axis=1, dtype=jnp.int32),
  )


def _filter_logits(logits: jax.Array, top_k: int, top_p: float) -> jax.Array:
  """Masks [B, V] logits outside the top-k and the top-p nucleus."""
  if top_k:
    kth = lax.top_k(logits, top_k)[0][:, -1:]
    logits = jnp.where(logits < kth, _NEG_INF, logits)
  if top_p < 1.0:
    sorted_logits = jnp.sort(logits, axis=-1)[:, ::-1]
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    # Probability mass strictly before each sorted token: keep a token while
    # the mass before it is below top_p (the first token is always kept).
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep = mass_before < top_p
    cutoff = jnp.min(
      jnp.where(keep, sorted_logits, jnp.inf), axis=-1, keepdims=True
    )
    logits = jnp.where(logits < cutoff, _NEG_INF, logits)
  return logits


def limit_vocab(logits: jax.Array, vocab_limit: int) -> jax.Array:
  """Logits with ids >= `vocab_limit` (padding of the vocabulary) removed.

  The learner applies the same mask when it recomputes log-probs, so the
  PPO ratio compares the distribution that actually sampled.
  """
  if not vocab_limit or vocab_limit >= logits.shape[-1]:
    return logits
  ids = jnp.arange(logits.shape[-1])
  return jnp.where(ids < vocab_limit, logits, _NEG_INF)


def is_row_keys(rng: jax.Array) -> bool:
  """Whether `rng` is one key per row ([B] typed or [B, 2] raw), not one."""
  if jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key):
    return rng.ndim == 1
  return rng.ndim == 2


def _fold_in(rng: jax.Array, step: jax.Array) -> jax.Array:
  """`fold_in` of one key, or of each row's key."""
  if is_row_keys(rng):
    return jax.vmap(jax.random.fold_in, in_axes=(0, None))(rng, step)
  return jax.random.fold_in(rng, step)


def _categorical_part(
  rng: jax.Array, logits: jax.Array, part: BatchPart
) -> jax.Array:
  """[B] draws of rows `part.start` .. of a `part.total`-row categorical.

  `jax.random.categorical` is the argmax of logits plus Gumbel noise drawn
  for the whole [total, V] batch; these are the same noise's rows.
  """
  b, vocab = logits.shape
  if part.start + b > part.total:
    raise ValueError(
      f"{b} rows from row {part.start} do not fit a batch of {part.total}."
    )
  noise = jax.random.gumbel(rng, (part.total, vocab), logits.dtype)
  noise = lax.slice_in_dim(noise, part.start, part.start + b)
  return jnp.argmax(logits + noise, axis=-1)


def sample_token(
  logits: jax.Array,
  rng: jax.Array,
  cfg: SamplerConfig,
  part: BatchPart | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Samples one token per row of [B, V] logits.

  Args:
    logits: [B, V] logits.
    rng: one key for the batch, or [B] keys (raw: [B, 2]), one per row: a
      row's draw then depends on its key only, not on its place in the
      batch (the same random bits in all: B x V uniforms).
    cfg: sampling settings.
    part: with one key for the batch, which rows of a larger batch sharing
      that key these are (`BatchPart`); None: the whole batch.

  Returns:
    ([B] int32 tokens, [B] float32 log-probs under the temperature-scaled
    distribution before truncation).
  """
  logits = limit_vocab(logits, cfg.vocab_limit)
  if cfg.temperature == 0.0:
    scaled = logits
    tokens = jnp.argmax(logits, axis=-1)
  else:
    scaled = logits / cfg.temperature
    filtered = _filter_logits(scaled, cfg.top_k, cfg.top_p)
    if is_row_keys(rng):
      tokens = jax.vmap(jax.random.categorical)(rng, filtered)
    elif part is not None:
      tokens = _categorical_part(rng, filtered, part)
    else:
      tokens = jax.random.categorical(rng, filtered, axis=-1)
  logp = jax.nn.log_softmax(scaled, axis=-1)
  token_logp = jnp.take_along_axis(logp, tokens[:, None], axis=-1)[:, 0]
  return tokens.astype(jnp.int32), token_logp


def _decode_cond(carry, *, max_new_tokens):
  step, _, _, done, *_ = carry
  return (step < max_new_tokens) & ~jnp.all(done)


def _decode_body(carry, *, params, model, cfg, budgets, stop_ids, pad_id, part):
  step, state, rng, done, stopped, lengths, out_tokens, out_logp = carry
  token, logp = sample_token(state.last_logits, _fold_in(rng, step), cfg, part)
  live = ~done
  token = jnp.where(live, token, pad_id)
  logp = jnp.where(live, logp, 0.0)
  out_tokens = lax.dynamic_update_slice(out_tokens, token[:, None], (0, step))
  out_logp = lax.dynamic_update_slice(out_logp, logp[:, None], (0, step))
  lengths = lengths + live.astype(jnp.int32)
  hit_stop = live & jnp.any(token[:, None] == stop_ids, axis=1)
  stopped = stopped | hit_stop
  done = done | hit_stop | (lengths >= budgets)
  state = extend(params, state, token[:, None], live[:, None], model=model)
  return step + 1, state, rng, done, stopped, lengths, out_tokens, out_logp


def decode(
  params: Any,
  state: DecodeState,
  rng: jax.Array,
  budgets: jax.Array,
  stop_ids: jax.Array,
  *,
  model: transformer.Actor,
  cfg: SamplerConfig,
  pad_id: int,
  part: BatchPart | None = None,
) -> tuple[DecodeState, SampleOutput]:
  """Samples up to `cfg.max_new_tokens` tokens per row.

  A row stops after emitting one of its stop tokens (which is kept and fed to
  the cache) or when it has produced `budgets[row]` tokens.

  Args:
    params: actor variables.
    state: conversations to continue (at least one `extend` done).
    rng: PRNG key, or [B] keys (raw: [B, 2]) one per row; step i uses
      `fold_in(key, i)` (see `sample_token`).
    budgets: [B] int, tokens each row may still produce (<= max_new_tokens;
      0 means the row produces nothing).
    stop_ids: [B, S] int stop tokens of each row (pad unused entries with -1)
      or [S] shared by all rows.
    model: the actor module.
    cfg: sampling settings.
    pad_id: token written after a row stopped.
    part: with one key for the batch, which rows of a larger batch sharing
      that key these are (`sample_token`); None: the whole batch.

  Returns:
    (state after the generated tokens, `SampleOutput`).
  """
  b = state.next_pos.shape[0]
  n = cfg.max_new_tokens
  stop_ids = jnp.asarray(stop_ids, jnp.int32)
  if stop_ids.ndim == 1:
    stop_ids = jnp.broadcast_to(stop_ids, (b, stop_ids.shape[0]))
  chex.assert_shape(budgets, (b,))
  budgets = jnp.minimum(budgets.astype(jnp.int32), n)
  carry = (
    jnp.zeros((), jnp.int32),
    state,
    rng,
    budgets <= 0,
    jnp.zeros((b,), bool),
    jnp.zeros((b,), jnp.int32),
    jnp.full((b, n), pad_id, jnp.int32),
    jnp.zeros((b, n), jnp.float32),
  )
  body = functools.partial(
    _decode_body,
    params=params,
    model=model,
    cfg=cfg,
    budgets=budgets,
    stop_ids=stop_ids,
    pad_id=pad_id,
    part=part,
  )
  cond = functools.partial(_decode_cond, max_new_tokens=n)
  _, state, _, _, stopped, lengths, tokens, logp = lax.while_loop(
    cond, body, carry
  )
  return state, SampleOutput(
    tokens=tokens, log_probs=logp, lengths=lengths, stopped=stopped
  )


def reset_rows(state: DecodeState, rows: jax.Array) -> DecodeState:
  """Empties the conversations of `rows`; the other rows are unchanged.

  Their slots become invalid (attention only sees valid slots, so the old
  keys and values, still in memory, are never read), their next position 0
  and their logits 0. The shared write index does not move.

  Args:
    state: the conversations.
    rows: [B] bool, the rows to empty.

  Returns:
    The state with those rows empty.
  """
  chex.assert_shape(rows, state.next_pos.shape)
  rows = rows.astype(bool)
  cache = state.cache
  return DecodeState(
    cache=cache.replace(valid=cache.valid & ~rows[:, None]),
    last_logits=jnp.where(rows[:, None], 0.0, state.last_logits),
    next_pos=jnp.where(rows, 0, state.next_pos),
  )


def _write_rows(old: jax.Array, new: jax.Array, rows: jax.Array, axis: int):
  """`old` with its first `new.shape[axis]` slots taken from `new` in `rows`."""
  width = new.shape[axis]
  head = lax.slice_in_dim(old, 0, width, axis=axis)
  mask = rows.reshape((-1,) + (1,) * (old.ndim - 1))
  return lax.dynamic_update_slice_in_dim(
    old, jnp.where(mask, new.astype(old.dtype), head), 0, axis=axis
  )


def restart(
  params: Any,
  state: DecodeState,
  rows: jax.Array,
  tokens: jax.Array,
  valid: jax.Array,
  *,
  model: transformer.Actor,
) -> DecodeState:
  """Starts new conversations in `rows`; the other rows keep theirs.

  The rows are emptied (`reset_rows`) and the chunk is prefilled into them
  alone, into their slots [0, C): those are free, as the whole row is. The
  prefill runs on a scratch cache of C slots, so it needs no room at the
  shared write index; the index moves to at least C, so that later writes
  never land on the new prompts.

  Args:
    params: actor variables.
    state: the conversations.
    rows: [B] bool, the rows that start over.
    tokens: [B, C] token ids; rows outside `rows` are ignored.
    valid: [B, C] bool, as for `extend`.
    model: the actor module.

  Returns:
    The state; `last_logits` of the new rows predict their first token.
  """
  chex.assert_rank([tokens, valid], 2)
  chex.assert_equal_shape([tokens, valid])
  chex.assert_shape(rows, state.next_pos.shape)
  rows = rows.astype(bool)
  state = reset_rows(state, rows)
  cache = state.cache
  b, c = tokens.shape
  scratch = DecodeState(
    cache=transformer.init_cache(
      model.config, b, c, dtype=cache.layers[0].k.dtype
    ),
    last_logits=jnp.zeros_like(state.last_logits),
    next_pos=jnp.zeros_like(state.next_pos),
  )
  scratch = extend(
    params, scratch, tokens, valid.astype(bool) & rows[:, None], model=model
  )
  layers = tuple(
    transformer.LayerKV(
      k=_write_rows(old.k, new.k, rows, axis=2),
      v=_write_rows(old.v, new.v, rows, axis=2),
    )
    for old, new in zip(cache.layers, scratch.cache.layers, strict=True)
  )
  return DecodeState(
    cache=transformer.KVCache(
      layers=layers,
      valid=_write_rows(cache.valid, scratch.cache.valid, rows, axis=1),
      positions=_write_rows(
        cache.positions, scratch.cache.positions, rows, axis=1
      ),
      index=jnp.maximum(cache.index, c),
    ),
    last_logits=jnp.where(
      rows[:, None], scratch.last_logits, state.last_logits
    ),
    next_pos=jnp.where(rows, scratch.next_pos, state.next_pos),
  )


def compact(state: DecodeState) -> DecodeState:
  """Moves each row's valid slots to the front, in order.

  Attention depends on slots' validity and positions only, never on where
  they sit, so each row's conversation is unchanged (up to the order of
  float sums). The write index becomes the most valid slots of any row:
  the room that rows' dead slots (left by `reset_rows`, or by decode steps
  of rows that had stopped) took is free again.
  """
  cache = state.cache
  # A stable sort of "invalid" puts valid slots first, in slot order.
  order = jnp.argsort(~cache.valid, axis=1, stable=True)
  kv_order = order[:, None, :, None]
  layers = tuple(
    transformer.LayerKV(
      k=jnp.take_along_axis(layer.k, kv_order, axis=2),
      v=jnp.take_along_axis(layer.v, kv_order, axis=2),
    )
    for layer in cache.layers
  )
  valid = jnp.take_along_axis(cache.valid, order, axis=1)
  return state.replace(
    cache=transformer.KVCache(
      layers=layers,
      valid=valid,
      positions=jnp.take_along_axis(cache.positions, order, axis=1),
      index=jnp.max(jnp.sum(valid, axis=1, dtype=jnp.int32)),
    )
  )


@dataclasses.dataclass(frozen=True)
class _RowSteps:
  """The jitted steps that act on some rows, for one layout of the state."""

  restart: Any
  reset_rows: Any
  compact: Any


class Sampler:
  """Host-side driver: jits the steps, guards the cache.

  Example:
    sampler = Sampler(actor, model_cfg, sampler_cfg, pad_id=tok.pad_id)
    state = sampler.start(batch=8, max_len=1024)
    state = sampler.extend(params, state, prompt_tokens, prompt_valid)
    state, out = sampler.decode(params, state, rng, budgets, stop_ids)
    state = sampler.extend(params, state, obs_tokens, obs_valid)  # next turn
    state = sampler.restart(params, state, rows, new_tokens, new_valid)

  Each step keeps the state where `start` put it: the steps are jitted
  once per layout of the state, with that layout as their output's.
  """

  def __init__(
    self,
    model: transformer.Actor,
    model_cfg: transformer.TransformerConfig,
    cfg: SamplerConfig,
    *,
    pad_id: int,
    rules: Rules | None = None,
  ):
    """Binds the model and the sampling settings.

    Args:
      model: the actor module.
      model_cfg: its config.
      cfg: sampling settings.
      pad_id: token written after a row stopped.
      rules: validated logical-to-mesh rules: a state for params on a
        mesh is then sharded by `state_shardings`; None: it is
        replicated there.
    """
    self._model_cfg = model_cfg
    self.cfg = cfg
    self.rules = rules
    self._model = model
    self._pad_id = pad_id
    # Jitted (extend, decode) per layout of the state (a `DecodeState` of
    # shardings): their output stays in it, call after call.
    self._steps: dict[DecodeState, tuple[Any, Any]] = {}
    # `decode` of a part of a larger batch, per (layout, `BatchPart`).
    self._part_decode: dict[tuple[DecodeState, BatchPart], Any] = {}
    # The same for the steps of continuous batching (`restart` and co.).
    self._row_steps: dict[DecodeState, _RowSteps] = {}
    # Jitted `empty_state` per (batch, max_len, sharding): made on the
    # devices, never copied there from the host.
    self._empty: dict[tuple, Any] = {}

  def shardings_for(
    self, placement: jax.sharding.Sharding, batch: int
  ) -> DecodeState:
    """Where a state of `batch` rows goes, for params at `placement`.

    Args:
      placement: the replicated sharding of the params' devices
        (`transfers.replicated_like(params)`).
      batch: rows.

    Returns:
      A `DecodeState` of shardings: `state_shardings` over the placement's
      mesh when the sampler has rules, else `placement` for every leaf.
      Its `next_pos` is also where [B, ...] inputs (tokens, budgets) go.
    """
    if self.rules is not None and isinstance(placement, NamedSharding):
      return state_shardings(self._model_cfg, placement.mesh, self.rules, batch)
    return _state_tree(self._model_cfg, placement, placement, placement)

  def start(
    self,
    batch: int,
    max_len: int,
    *,
    sharding: jax.sharding.Sharding | DecodeState | None = None,
  ) -> DecodeState:
    """An empty state whose cache holds `max_len` tokens per row.

    Args:
      batch: rows.
      max_len: cache slots per row.
      sharding: where the state is made: one sharding for every leaf, or a
        `DecodeState` of shardings (`shardings_for`, `state_shardings`);
        None: the default device.
    """
    key = (batch, max_len, sharding)
    if key not in self._empty:
      self._empty[key] = jit_cache.jit(
        empty_state,
        self._model_cfg,
        batch,
        max_len,
        jit_kwargs={"out_shardings": sharding},
      )
    return self._empty[key]()

  def _jitted(self, state: DecodeState) -> tuple[Any, Any]:
    """(extend, decode) jitted to return the state in its own shardings."""
    layout = jax.tree.map(lambda x: x.sharding, state)
    if layout not in self._steps:
      rows = layout.next_pos
      out = SampleOutput(
        tokens=rows, log_probs=rows, lengths=rows, stopped=rows
      )
      self._steps[layout] = (
        jit_cache.jit(
          extend,
          jit_kwargs={"out_shardings": layout, "donate_argnums": (1,)},
          context=self.rules,
          model=self._model,
        ),
        self._decode_jit(layout, out, None),
      )
    return self._steps[layout]

  def _decode_jit(self, layout, out, part):
    """`decode` jitted to return the state in `layout`, its output in `out`.

    Shared with every sampler of equal settings in this process (see
    codeagent_rl/jit_cache.py), as the other steps are.
    """
    kwargs = {} if part is None else {"part": part}
    return jit_cache.jit(
      decode,
      jit_kwargs={"out_shardings": (layout, out), "donate_argnums": (1,)},
      context=self.rules,
      model=self._model,
      cfg=self.cfg,
      pad_id=self._pad_id,
      **kwargs,
    )

  def _row_jitted(self, state: DecodeState) -> _RowSteps:
    """`restart`, `reset_rows`, `compact`, jitted like `_jitted`'s."""
    layout = jax.tree.map(lambda x: x.sharding, state)
    if layout not in self._row_steps:
      self._row_steps[layout] = _RowSteps(
        restart=jit_cache.jit(
          restart,
          jit_kwargs={"out_shardings": layout, "donate_argnums": (1,)},
          context=self.rules,
          model=self._model,
        ),
        reset_rows=jit_cache.jit(
          reset_rows,
          jit_kwargs={"out_shardings": layout, "donate_argnums": (0,)},
        ),
        compact=jit_cache.jit(
          compact,
          jit_kwargs={"out_shardings": layout, "donate_argnums": (0,)},
        ),
      )
    return self._row_steps[layout]

  def free_slots(self, state: DecodeState) -> int:
    """Cache slots per row still free at the shared write index."""
    return state.cache.max_len - int(jax.device_get(state.cache.index))

  def _check_room(self, state: DecodeState, needed: int, what: str) -> None:
    used = int(jax.device_get(state.cache.index))
    if used + needed > state.cache.max_len:
      raise ValueError(
        f"Sampler.{what}: the KV cache has {state.cache.max_len} slots,"
        f" {used} used, and this call needs {needed} more. Start the"
        " rollout with a larger max_len (prompt + turns x (max_new_tokens"
        " + observation tokens))."
      )

  def extend(self, params, state, tokens, valid) -> DecodeState:
    """Incremental prefill; see `extend`.

    Under `jax.transfer_guard("disallow")` the arrays must already be on
    the state's devices (`device_put` them where its rows are).
    """
    self._check_room(state, np.shape(tokens)[1], "extend")
    extend_fn, _ = self._jitted(state)
    return extend_fn(params, state, tokens, valid)

  def decode(self, params, state, rng, budgets, stop_ids, part=None):
    """Samples one turn; see `decode`.

    The loop runs at most max(budgets) steps (capped at `max_new_tokens`),
    so that is the room the cache needs. `budgets` may be a host or a
    device array (read back by `device_get`). The output's rows are
    placed like the state's. `part`: see `BatchPart` (compiled once per
    part).
    """
    most = int(np.max(jax.device_get(budgets), initial=0))
    self._check_room(state, min(most, self.cfg.max_new_tokens), "decode")
    _, decode_fn = self._jitted(state)
    if part is not None:
      layout = jax.tree.map(lambda x: x.sharding, state)
      if (layout, part) not in self._part_decode:
        rows = layout.next_pos
        out = SampleOutput(
          tokens=rows, log_probs=rows, lengths=rows, stopped=rows
        )
        self._part_decode[layout, part] = self._decode_jit(layout, out, part)
      decode_fn = self._part_decode[layout, part]
    return decode_fn(params, state, rng, budgets, stop_ids)

  def reset_rows(self, state, rows) -> DecodeState:
    """Empties the rows where `rows` ([B] bool) is True; see `reset_rows`."""
    self._check_rows(state, rows, "reset_rows")
    return self._row_jitted(state).reset_rows(state, rows)

  def restart(self, params, state, rows, tokens, valid) -> DecodeState:
    """Starts new conversations in `rows` only; see `restart`.

    Needs no room at the write index, only a chunk no wider than the
    cache. Arrays go where the state's rows are, as for `extend`.

    Raises:
      ValueError: `rows` is not [B], or the chunk is wider than the cache.
    """
    self._check_rows(state, rows, "restart")
    width = np.shape(tokens)[1]
    if width > state.cache.max_len:
      raise ValueError(
        f"Sampler.restart: a chunk of {width} tokens does not fit the KV"
        f" cache's {state.cache.max_len} slots per row."
      )
    return self._row_jitted(state).restart(params, state, rows, tokens, valid)

  def compact(self, state) -> DecodeState:
    """Frees the slots no row uses; see `compact`."""
    return self._row_jitted(state).compact(state)

  def _check_rows(self, state: DecodeState, rows, what: str) -> None:
    want = tuple(state.next_pos.shape)
    if tuple(np.shape(rows)) != want:
      raise ValueError(
        f"Sampler.{what}: rows has shape {tuple(np.shape(rows))}, the"
        f" state has {want[0]} rows; pass a [B] bool mask."
      )
