"""The layers of the decoder (`transformer.Trunk` stacks the blocks).

RMSNorm, rotary embeddings, grouped-query attention with its KV-cache
path, the SwiGLU MLP and the pre-norm block, with the masking and logical
axis names `transformer` documents; `LayerKV` is one layer's cache.
"""

from __future__ import annotations

from typing import Any

from flax import linen as nn
from flax import struct
import jax
import jax.numpy as jnp

from codeagent_rl.models import attention as attention_lib

# `transformer.TransformerConfig` (which imports this module).
TransformerConfig = Any

# Large finite negative: a query with no visible key (a padding position)
# gets a uniform average instead of NaN.
_MASK_VALUE = attention_lib.MASK_VALUE


@struct.dataclass
class LayerKV:
  """Keys and values of one layer: each [B, K, S, H].

  Heads before slots: a decode step then reads each head's keys as one
  contiguous [S, H] block (with [B, S, K, H] the attention einsum made XLA
  transpose the whole cache on every step: ~1.4x slower decoding, measured).
  """

  k: jax.Array
  v: jax.Array


def normal_init(config: TransformerConfig, names: tuple[str | None, ...]):
  """A normal(init_std) initialiser whose parameter carries `names`."""
  return nn.with_logical_partitioning(
    nn.initializers.normal(config.init_std), names
  )


class RMSNorm(nn.Module):
  """x * rsqrt(mean(x^2) + eps) * scale, computed in float32."""

  config: TransformerConfig

  @nn.compact
  def __call__(self, x):
    """Normalises the last axis of x."""
    cfg = self.config
    scale = self.param(
      "scale",
      nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
      (x.shape[-1],),
      cfg.jnp_param_dtype,
    )
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(
      jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + cfg.rms_eps
    )
    return x32.astype(cfg.jnp_dtype) * scale.astype(cfg.jnp_dtype)


def apply_rope(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
  """Rotary embedding, half-split layout (as Llama/Qwen2 in `transformers`).

  Args:
    x: [B, T, N, H] queries or keys.
    positions: [B, T] int positions.
    theta: frequency base.

  Returns:
    [B, T, N, H] rotated, in x's dtype.
  """
  h = x.shape[-1]
  inv_freq = 1.0 / (theta ** (jnp.arange(0, h, 2, dtype=jnp.float32) / h))
  angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, H/2]
  sin = jnp.sin(angles)[:, :, None, :]
  cos = jnp.cos(angles)[:, :, None, :]
  x32 = x.astype(jnp.float32)
  x1, x2 = x32[..., : h // 2], x32[..., h // 2 :]
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x.dtype)


class HeadProjection(nn.Module):
  """x [B, T, D] -> [B, T, N, H] with a 3-D kernel [D, N, H] (+ bias [N, H]).

  The kernel is created 3-D (not flattened as `nn.DenseGeneral` does), so its
  three logical axis names apply to the array as stored and it can be
  sharded along heads under `nn.logical_axis_rules`.
  """

  config: TransformerConfig
  heads: int
  use_bias: bool

  @nn.compact
  def __call__(self, x):
    """Projects the last axis of x to `heads` heads."""
    cfg = self.config
    kernel = self.param(
      "kernel",
      normal_init(cfg, ("embed", "heads", "kv")),
      (x.shape[-1], self.heads, cfg.head_dim),
      cfg.jnp_param_dtype,
    )
    y = jnp.einsum(
      "btd,dnh->btnh", x.astype(cfg.jnp_dtype), kernel.astype(cfg.jnp_dtype)
    )
    if self.use_bias:
      bias = self.param(
        "bias",
        nn.with_logical_partitioning(nn.initializers.zeros, ("heads", "kv")),
        (self.heads, cfg.head_dim),
        cfg.jnp_param_dtype,
      )
      y = y + bias.astype(cfg.jnp_dtype)
    return y


class OutProjection(nn.Module):
  """[B, T, N, H] -> [B, T, D] with a 3-D kernel [N, H, D]."""

  config: TransformerConfig

  @nn.compact
  def __call__(self, x):
    """Merges the heads of x into the model width."""
    cfg = self.config
    kernel = self.param(
      "kernel",
      normal_init(cfg, ("heads", "kv", "embed")),
      (x.shape[-2], x.shape[-1], cfg.embed_dim),
      cfg.jnp_param_dtype,
    )
    return jnp.einsum(
      "btnh,nhd->btd", x.astype(cfg.jnp_dtype), kernel.astype(cfg.jnp_dtype)
    )


class Attention(nn.Module):
  """Grouped-query self-attention with rotary embeddings and a KV cache."""

  config: TransformerConfig

  def _proj(self, name, heads, x):
    return HeadProjection(self.config, heads, self.config.qkv_bias, name=name)(
      x
    )

  @nn.compact
  def __call__(self, x, positions, valid, layer_kv, cache_meta, segments=None):
    """Attends from x ([B, T, D]) to itself or to the updated cache.

    Args:
      x: [B, T, D] normalised inputs.
      positions: [B, T] positions of the inputs.
      valid: [B, T] validity of the inputs.
      layer_kv: this layer's `LayerKV` or None (no cache).
      cache_meta: (valid [B, S], positions [B, S], index) of the cache after
        the new tokens are written, or None.
      segments: optional [B, T] int segment ids of packed rows (no cache):
        a token sees only tokens of its own segment.

    Returns:
      ([B, T, D] output, updated `LayerKV` or None).
    """
    cfg = self.config
    q = self._proj("q_proj", cfg.num_heads, x)
    k = self._proj("k_proj", cfg.num_kv_heads, x)
    v = self._proj("v_proj", cfg.num_kv_heads, x)
    q = apply_rope(q, positions, cfg.rope_theta)
    k = apply_rope(k, positions, cfg.rope_theta)
    q = nn.with_logical_constraint(q, ("batch", "length", "heads", "kv"))
    k = nn.with_logical_constraint(k, ("batch", "length", "heads", "kv"))
    v = nn.with_logical_constraint(v, ("batch", "length", "heads", "kv"))

    b, t = q.shape[:2]
    groups = cfg.num_heads // cfg.num_kv_heads
    q = q.reshape(b, t, cfg.num_kv_heads, groups, cfg.head_dim)
    if layer_kv is None:
      out = attention_lib.attend(
        cfg.attention, cfg.attention_chunk,
        q, k, v, positions, positions, valid, segments,
      )  # fmt: skip
      out = out.reshape(b, t, cfg.num_heads, cfg.head_dim)
      out = nn.with_logical_constraint(out, ("batch", "length", "heads", "kv"))
      return OutProjection(cfg, name="o_proj")(out), None
    key_valid, key_pos, index = cache_meta
    k_all = jax.lax.dynamic_update_slice(
      layer_kv.k, k.swapaxes(1, 2).astype(layer_kv.k.dtype), (0, 0, index, 0)
    )
    v_all = jax.lax.dynamic_update_slice(
      layer_kv.v, v.swapaxes(1, 2).astype(layer_kv.v.dtype), (0, 0, index, 0)
    )
    new_kv = LayerKV(k=k_all, v=v_all)
    k, v = k_all.astype(cfg.jnp_dtype), v_all.astype(cfg.jnp_dtype)
    if (
      attention_lib.for_cache(cfg.attention, t, cfg.attention_chunk)
      == "chunked"
    ):
      # A long prefill against the cache: chunked, as a whole-row pass is
      # (the keys are the cache's slots, in the [B, S, K, H] layout).
      out = attention_lib.chunked(
        q, k.swapaxes(1, 2), v.swapaxes(1, 2), positions, key_pos, key_valid,
        chunk=cfg.attention_chunk,
      )  # fmt: skip
      out = out.reshape(b, t, cfg.num_heads, cfg.head_dim)
      out = nn.with_logical_constraint(out, ("batch", "length", "heads", "kv"))
      return OutProjection(cfg, name="o_proj")(out), new_kv
    # A decode step (one new token against the cache) multiplies and sums
    # by broadcasting: XLA's CPU dot over [B, K] batches of [G, H] x [S, H]
    # was 2.8x slower at B=32, S=832 (measured); same values.
    step = t == 1
    if step:
      logits = jnp.sum(q[:, 0, :, :, None, :] * k[:, :, None], axis=-1)
      logits = logits[:, :, :, None].astype(jnp.float32)
    else:
      logits = jnp.einsum("btkgh,bksh->bkgts", q, k)
      logits = logits.astype(jnp.float32)
    logits = logits / jnp.sqrt(jnp.float32(cfg.head_dim))
    visible = attention_lib.visible(positions, key_pos, key_valid)
    logits = jnp.where(visible[:, None, None], logits, _MASK_VALUE)
    probs = jax.nn.softmax(logits, axis=-1).astype(cfg.jnp_dtype)
    if step:
      out = jnp.sum(probs[:, :, :, 0, :, None] * v[:, :, None], axis=-2)
      out = out[:, None]
    else:
      out = jnp.einsum("bkgts,bksh->btkgh", probs, v)
    out = out.reshape(b, t, cfg.num_heads, cfg.head_dim)
    out = nn.with_logical_constraint(out, ("batch", "length", "heads", "kv"))
    out = OutProjection(cfg, name="o_proj")(out)
    return out, new_kv


class MLP(nn.Module):
  """SwiGLU: down(silu(gate(x)) * up(x))."""

  config: TransformerConfig

  @nn.compact
  def __call__(self, x):
    """[B, T, D] -> [B, T, D]."""
    cfg = self.config

    def dense(features, names, name):
      return nn.Dense(
        features,
        use_bias=False,
        dtype=cfg.jnp_dtype,
        param_dtype=cfg.jnp_param_dtype,
        kernel_init=normal_init(cfg, names),
        name=name,
      )

    gate = dense(cfg.mlp_dim, ("embed", "mlp"), "gate_proj")(x)
    up = dense(cfg.mlp_dim, ("embed", "mlp"), "up_proj")(x)
    h = nn.with_logical_constraint(
      nn.silu(gate) * up, ("batch", "length", "mlp")
    )
    return dense(cfg.embed_dim, ("mlp", "embed"), "down_proj")(h)


class Block(nn.Module):
  """Pre-norm decoder block."""

  config: TransformerConfig

  @nn.compact
  def __call__(self, x, positions, valid, layer_kv, cache_meta, segments):
    """Attention then MLP, each residual; arguments as `Attention`."""
    cfg = self.config
    h, new_kv = Attention(cfg, name="attn")(
      RMSNorm(cfg, name="attn_norm")(x),
      positions,
      valid,
      layer_kv,
      cache_meta,
      segments,
    )
    x = x + h
    x = x + MLP(cfg, name="mlp")(RMSNorm(cfg, name="mlp_norm")(x))
    x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
    return x, new_kv
