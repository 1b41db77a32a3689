"""Self-attention without a cache: plain, or chunked in O(T) memory.

`attend` is what the transformer calls for a pass over whole rows (the
training, log-prob and value passes); a prefill of many tokens into the KV
cache calls `chunked` with the cache's slots as keys; decode steps (one
token against the cache) stay in `layers.Attention`. Masking is the
transformer's: query q sees key k when k is valid, position(k) <=
position(q) and, for packed rows, both are in the same segment. A query
that sees no key (padding) averages every key uniformly in both
implementations, so their outputs agree everywhere, padding included.

"plain" materialises the [B, K, G, T, S] scores: memory grows with T^2
(3.8 GB per row and layer at 8k tokens in float32 for the 0.5B shape).

"chunked" is the online-softmax algorithm of FlashAttention (Dao et al.,
2022) in plain JAX: queries in chunks of C, for each a scan over key
chunks keeping the running maximum, normaliser and weighted sum, so at
most [B, K, G, C, C] scores exist at a time. Its gradient is a custom VJP
that recomputes each block's probabilities from the saved maximum and
normaliser instead of storing them, so the backward pass is O(T) in
memory too (autodiff through the scans would save every block's scores).
A key chunk no query of the query chunk can see (the upper triangle of a
causal row) is skipped in both passes.

"fused" is the platform's kernel through `jax.nn.dot_product_attention`:
cuDNN's flash attention on a GPU for bfloat16 and float16 activations,
for rows whose masking its causal-plus-length mask expresses (checked on
the device per call; see `index_ordered`), chunked for the others, for
packed rows and on platforms without a kernel (CPU; TPU, whose Pallas
kernels are not wired in). It is not chosen by "auto": nothing here has
run it on a GPU yet (benchmarks/gpu_check.sh does, where one is lent).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

IMPLEMENTATIONS = ("plain", "chunked", "fused", "auto")
# Large finite negative for a masked key (see layers._MASK_VALUE); keys
# added to fill the last chunk get -inf, so they weigh nothing even in a
# row that sees no real key.
MASK_VALUE = -1e30


def choose(implementation: str, length: int, chunk: int) -> str:
  """The implementation `implementation` means for rows of `length` tokens.

  "auto" is chunked once rows are longer than one chunk (shorter ones
  would be one block: the plain computation with more bookkeeping).
  """
  if implementation == "auto":
    return "chunked" if length > chunk else "plain"
  return implementation


def for_cache(implementation: str, length: int, chunk: int) -> str:
  """How a prefill of `length` tokens into the KV cache attends.

  The cache's slots are not a right-padded row, so no fused kernel applies:
  "fused" prefills as "auto" does.
  """
  if implementation == "fused":
    implementation = "auto"
  return choose(implementation, length, chunk)


def fused_kernel(dtype) -> str | None:
  """The fused kernel `jax.nn.dot_product_attention` has here, or None.

  cuDNN's flash attention on a GPU, for bfloat16 and float16 only. JAX
  ships Pallas splash attention for TPUs, but it is not wired in: "fused"
  on a TPU, as on a CPU, is chunked.
  """
  if jax.default_backend() == "gpu" and jnp.dtype(dtype) in (
    jnp.bfloat16,
    jnp.float16,
  ):
    return "cudnn"
  return None


def index_ordered(q_pos, k_valid):
  """[] bool: the rows are what a fused kernel's masks can express.

  Its masks are causal by index plus a count of valid keys per row; ours
  is causal by position over the valid keys. They agree, at every valid
  query, when each row's valid tokens come first, at positions 0, 1, ...,
  and no row is all padding.
  """
  t = k_valid.shape[1]
  index = jnp.arange(t, dtype=jnp.int32)[None]
  lengths = jnp.sum(k_valid, axis=1, dtype=jnp.int32)
  return (
    jnp.all(k_valid == (index < lengths[:, None]))
    & jnp.all(jnp.where(k_valid, q_pos == index, True))
    & jnp.all(lengths > 0)
  )


def fused(q, k, v, q_pos, k_valid, *, implementation, chunk=512):
  """Self-attention through `jax.nn.dot_product_attention`.

  Used when `index_ordered` holds (decided on the device, per call), with
  `is_causal` and each row's count of valid keys; otherwise `chunked`.
  Equal to `plain` at every valid query; padding queries, which no loss
  reads, may differ. Arguments as `plain` (keys are the queries' own
  positions); `implementation` is the kernel's ("cudnn", or "xla", which
  forms the [T, T] scores and is how this is tested on a CPU).
  """
  b, t, heads, g, h = q.shape

  def kernel(_):
    out = jax.nn.dot_product_attention(
      q.reshape(b, t, heads * g, h),
      k,
      v,
      is_causal=True,
      key_value_seq_lengths=jnp.sum(k_valid, axis=1, dtype=jnp.int32),
      implementation=implementation,
    )
    return out.reshape(b, t, heads, g, h).astype(q.dtype)

  def fallback(_):
    return chunked(q, k, v, q_pos, q_pos, k_valid, chunk=chunk)

  return jax.lax.cond(index_ordered(q_pos, k_valid), kernel, fallback, None)


def visible(q_pos, k_pos, k_valid, q_seg=None, k_seg=None):
  """[B, T, S] bool: which keys each query sees."""
  vis = k_valid[:, None, :] & (k_pos[:, None, :] <= q_pos[:, :, None])
  if q_seg is not None:
    vis &= k_seg[:, None, :] == q_seg[:, :, None]
  return vis


def plain(q, k, v, q_pos, k_pos, k_valid, q_seg=None, k_seg=None):
  """Attention with the whole score matrix.

  Args:
    q: [B, T, K, G, H] queries (K key heads, G queries per key head).
    k: [B, S, K, H] keys.
    v: [B, S, K, H] values.
    q_pos: [B, T] query positions.
    k_pos: [B, S] key positions.
    k_valid: [B, S] key validity.
    q_seg: optional [B, T] segment ids of the queries (packed rows).
    k_seg: optional [B, S] segment ids of the keys.

  Returns:
    [B, T, K, G, H] in q's dtype.
  """
  logits = jnp.einsum("btkgh,bskh->bkgts", q, k).astype(jnp.float32)
  logits = logits / jnp.sqrt(jnp.float32(q.shape[-1]))
  vis = visible(q_pos, k_pos, k_valid, q_seg, k_seg)
  logits = jnp.where(vis[:, None, None], logits, MASK_VALUE)
  probs = jax.nn.softmax(logits, axis=-1).astype(q.dtype)
  return jnp.einsum("bkgts,bskh->btkgh", probs, v)


def chunked(q, k, v, q_pos, k_pos, k_valid, q_seg=None, k_seg=None, chunk=512):
  """`plain`'s result in O(T * chunk) memory, forward and backward.

  Arguments as `plain`; `chunk` is the query and key chunk length. Rows
  are padded to a multiple of it (the padding is cut off again).
  """
  # Without segment ids no segment term is computed at all: a constant
  # one would be loop-invariant inside a scan over layers, and JAX hoists
  # such terms out of the loop by stacking every block's copy (quadratic).
  if (q_seg is None) != (k_seg is None):
    raise ValueError("chunked: give segment ids of both queries and keys.")
  t, s = q.shape[1], k.shape[1]
  c = min(chunk, max(t, s))
  tp, sp = -(-t // c) * c, -(-s // c) * c
  # Padded keys: invalid (-inf below); padded queries: cut off at the end.
  q = _pad(q, 1, tp)
  q_pos, q_seg = _pad(q_pos, 1, tp), _pad(q_seg, 1, tp)
  k, v = _pad(k, 1, sp), _pad(v, 1, sp)
  k_pos, k_seg = _pad(k_pos, 1, sp), _pad(k_seg, 1, sp)
  k_real = _pad(jnp.ones(k_valid.shape, bool), 1, sp) if sp > s else None
  k_valid = _pad(k_valid.astype(bool), 1, sp)
  meta = (q_pos, q_seg, k_pos, k_seg, k_valid, k_real)
  out = _flash(c, q, k, v, meta)
  return out[:, :t]


def attend(implementation, chunk, q, k, v, q_pos, k_pos, k_valid, segments):
  """Dispatches on `choose(implementation, T, chunk)`; arguments as `plain`.

  `segments` ([B, T] or None) are the segment ids of both queries and keys
  (self-attention over packed rows).
  """
  kind = choose(implementation, q.shape[1], chunk)
  if kind == "fused":
    kernel = fused_kernel(q.dtype)
    if kernel is not None and segments is None:
      return fused(q, k, v, q_pos, k_valid, implementation=kernel, chunk=chunk)
    # No kernel here, or packed rows (segment ids no kernel mask expresses).
    kind = "chunked"
  if kind == "plain":
    return plain(q, k, v, q_pos, k_pos, k_valid, segments, segments)
  if kind == "chunked":
    return chunked(
      q, k, v, q_pos, k_pos, k_valid, segments, segments, chunk=chunk
    )
  raise ValueError(f"attention: {implementation!r} is not one of "
                   f"{IMPLEMENTATIONS}.")  # fmt: skip


def _pad(x, axis, size):
  if x is None:
    return None
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, size - x.shape[axis])
  return jnp.pad(x, widths)


def _blocks(x, c, axis=1):
  """Splits `axis` into [n, c] and moves n to the front (scan order).

  None (no segment ids) stays None.
  """
  if x is None:
    return None
  shape = x.shape[:axis] + (x.shape[axis] // c, c) + x.shape[axis + 1 :]
  return jnp.moveaxis(x.reshape(shape), axis, 0)


def _unblocks(x, axis):
  """Inverse of `_blocks` for a result whose block axis is first."""
  x = jnp.moveaxis(x, 0, axis)
  return x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 2 :])


def _scores(qb, kb, q_meta, k_meta):
  """Masked float32 scores [B, K, G, Cq, Ck] of one block, and its mask."""
  q_pos, q_seg = q_meta
  k_pos, k_seg, k_valid, k_real = k_meta
  scale = 1.0 / jnp.sqrt(jnp.float32(qb.shape[-1]))
  s = jnp.einsum("bqkgh,bskh->bkgqs", qb, kb).astype(jnp.float32) * scale
  vis = visible(q_pos, k_pos, k_valid, q_seg, k_seg)[:, None, None]
  s = jnp.where(vis, s, MASK_VALUE)
  if k_real is not None:
    s = jnp.where(k_real[:, None, None, None, :], s, -jnp.inf)
  return s, vis


def _any_visible(q_meta, k_meta):
  q_pos, q_seg = q_meta
  k_pos, k_seg, k_valid, _ = k_meta
  return jnp.any(visible(q_pos, k_pos, k_valid, q_seg, k_seg))


def _blind(q_meta, k_metas):
  """[B, C] bool: the queries of a chunk that see no key of the row.

  Such queries (padding) average every real key, so no key chunk may be
  skipped for them. One scan over the key chunks' masks: O(C) memory.
  """

  def step(seen, k_meta):
    q_pos, q_seg = q_meta
    k_pos, k_seg, k_valid, _ = k_meta
    vis = visible(q_pos, k_pos, k_valid, q_seg, k_seg)
    return seen | jnp.any(vis, axis=-1), None

  seen, _ = jax.lax.scan(step, jnp.zeros(q_meta[0].shape, bool), k_metas)
  return ~seen


def _forward(c, q, k, v, meta):
  """(out [B, T, K, G, H], m and norm [B, K, G, T], blind [B, T]).

  m and norm are each query's running maximum and normaliser at the end: its
  probabilities are exp(score - m) / norm (the backward pass recomputes
  them from these); blind marks the queries that see no key.
  """
  q_pos, q_seg, k_pos, k_seg, k_valid, k_real = meta
  qs = _blocks(q, c)  # [Nq, B, C, K, G, H]
  q_metas = (_blocks(q_pos, c), _blocks(q_seg, c))
  ks, vs = _blocks(k, c), _blocks(v, c)  # [Nk, B, C, K, H]
  k_metas = tuple(_blocks(x, c) for x in (k_pos, k_seg, k_valid, k_real))
  b, _, heads, g, h = q.shape
  shape = (b, heads, g, c)

  def one_query_chunk(args):
    qb, q_meta = args
    qb_blind = _blind(q_meta, k_metas)

    def step(carry, kv):
      m, norm, acc = carry
      kb, vb, k_meta = kv

      def update(carry):
        m, norm, acc = carry
        s, _ = _scores(qb, kb, q_meta, k_meta)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1))
        p = jnp.exp(s - m_new[..., None])
        corr = jnp.exp(m - m_new)
        norm = norm * corr + jnp.sum(p, axis=-1)
        pv = jnp.einsum("bkgqs,bskh->bkgqh", p.astype(vb.dtype), vb)
        acc = acc * corr[..., None] + pv.astype(jnp.float32)
        return m_new, norm, acc

      needed = _any_visible(q_meta, k_meta) | jnp.any(qb_blind)
      return jax.lax.cond(needed, update, lambda x: x, carry), None

    init = (
      jnp.full(shape, MASK_VALUE, jnp.float32),
      jnp.zeros(shape, jnp.float32),
      jnp.zeros((*shape, h), jnp.float32),
    )
    (m, norm, acc), _ = jax.lax.scan(step, init, (ks, vs, k_metas))
    out = (acc / norm[..., None]).astype(qb.dtype)
    return jnp.einsum("bkgqh->bqkgh", out), m, norm, qb_blind

  outs, ms, ls, blind = jax.lax.map(one_query_chunk, (qs, q_metas))
  out = _unblocks(outs, 1)
  return out, _unblocks(ms, 3), _unblocks(ls, 3), _unblocks(blind, 1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(c, q, k, v, meta):
  return _forward(c, q, k, v, meta)[0]


def _flash_fwd(c, q, k, v, meta):
  out, m, norm, blind = _forward(c, q, k, v, meta)
  return out, (q, k, v, meta, out, m, norm, blind)


def _flash_bwd(c, residuals, d_out):
  q, k, v, meta, out, m, norm, blind = residuals
  q_pos, q_seg, k_pos, k_seg, k_valid, k_real = meta
  scale = 1.0 / jnp.sqrt(jnp.float32(q.shape[-1]))
  # D_i = sum_h dO_ih O_ih: the softmax Jacobian's row term.
  d_rows = jnp.einsum(
    "bqkgh,bqkgh->bkgq", d_out.astype(jnp.float32), out.astype(jnp.float32)
  )
  qs, dos = _blocks(q, c), _blocks(d_out, c)
  q_metas = (_blocks(q_pos, c), _blocks(q_seg, c))
  stats = tuple(_blocks(x, c, 3) for x in (m, norm, d_rows))  # [Nq, B,K,G,C]
  blind_blocks = _blocks(blind, c)
  ks, vs = _blocks(k, c), _blocks(v, c)
  k_metas = tuple(_blocks(x, c) for x in (k_pos, k_seg, k_valid, k_real))

  def one_key_chunk(d_q, kv):
    kb, vb, k_meta = kv

    def step(carry, args):
      d_k, d_v = carry
      qb, dob, q_meta, (mb, lb, db), qb_blind = args

      def grads(_):
        s, vis = _scores(qb, kb, q_meta, k_meta)
        p = jnp.exp(s - mb[..., None]) / lb[..., None]
        dob32 = dob.astype(jnp.float32)
        d_v = jnp.einsum("bkgqs,bqkgh->bskh", p, dob32)
        dp = jnp.einsum("bqkgh,bskh->bkgqs", dob32, vb.astype(jnp.float32))
        ds = jnp.where(vis, p * (dp - db[..., None]), 0.0) * scale
        d_qb = jnp.einsum("bkgqs,bskh->bqkgh", ds, kb.astype(jnp.float32))
        d_k = jnp.einsum("bkgqs,bqkgh->bskh", ds, qb.astype(jnp.float32))
        return d_qb, d_k, d_v

      def none(_):
        zq = jnp.zeros(qb.shape, jnp.float32)
        return zq, jnp.zeros(d_k.shape, d_k.dtype), jnp.zeros_like(d_v)

      needed = _any_visible(q_meta, k_meta) | jnp.any(qb_blind)
      d_qb, dk_b, dv_b = jax.lax.cond(needed, grads, none, None)
      return (d_k + dk_b, d_v + dv_b), d_qb

    zeros = jnp.zeros(kb.shape, jnp.float32)
    (d_k, d_v), d_qs = jax.lax.scan(
      step, (zeros, zeros), (qs, dos, q_metas, stats, blind_blocks)
    )
    return d_q + d_qs, (d_k, d_v)

  d_q0 = jnp.zeros(qs.shape, jnp.float32)
  d_qs, (d_ks, d_vs) = jax.lax.scan(one_key_chunk, d_q0, (ks, vs, k_metas))
  d_q = _unblocks(d_qs, 1).astype(q.dtype)
  d_k = _unblocks(d_ks, 1).astype(k.dtype)
  d_v = _unblocks(d_vs, 1).astype(v.dtype)
  return d_q, d_k, d_v, jax.tree.map(lambda _: None, meta)


_flash.defvjp(_flash_fwd, _flash_bwd)
