"""Decoder-only transformer of the Llama / Qwen2 family, in Flax Linen.

Token embedding, RMSNorm, rotary position embeddings, grouped-query attention,
SwiGLU MLP, optional qkv bias (Qwen2), tied or untied output embedding. The
layers are in `models/layers.py`; here the config, the cache, the stack of
blocks and the actor and critic heads.

Masking is by explicit positions and a validity mask, never by array index:
token q attends to token k when k is valid and position(k) <= position(q).
So left padding, right padding and multi-turn continuation through a KV cache
all use the same code. Every parameter and the main activations carry logical
axis names (`batch`, `length`, `embed`, `heads`, `kv`, `mlp`, `vocab`); the
config maps them to mesh axes (see `codeagent_rl/parallel`).

The KV cache is an explicit pytree passed in and returned, one `LayerKV` per
layer, with slot-level `valid` and `positions`. New tokens are written at
slots [index, index + C) of every row. The caller keeps index + C within the
cache length (the sampler checks this statically): under jit,
`dynamic_update_slice` would clamp an overflowing write.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import chex
from flax import linen as nn
from flax import struct
import jax
import jax.numpy as jnp

from codeagent_rl import config_utils
from codeagent_rl.models import attention as attention_lib
from codeagent_rl.models import layers

# One layer's keys and values (defined with the layers that write them).
LayerKV = layers.LayerKV

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
# jax.checkpoint policies by `model.remat` name (see TransformerConfig).
REMAT_POLICIES = {
  "none": None,
  "full": jax.checkpoint_policies.nothing_saveable,
  "dots": jax.checkpoint_policies.checkpoint_dots,
  "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Validated `config.model` section.

  Attributes:
    vocab_size: number of token ids (embedding rows).
    num_layers: decoder blocks.
    embed_dim: model width.
    num_heads: query heads.
    num_kv_heads: key/value heads (grouped-query attention); divides
      num_heads.
    head_dim: width of one head.
    mlp_dim: hidden width of the SwiGLU MLP.
    rope_theta: base of the rotary frequencies (Llama 10000, Qwen2 1e6).
    rms_eps: epsilon of RMSNorm.
    qkv_bias: biases on q, k, v projections (Qwen2) or not (Llama).
    tie_embeddings: output projection shares the input embedding.
    dtype: activation dtype name ("float32", "bfloat16").
    param_dtype: parameter dtype name.
    remat: what the backward pass of a whole-row pass keeps of each block,
      a key of REMAT_POLICIES: "none" everything; otherwise the blocks run
      as one `lax.scan` whose body is recomputed, keeping each block's
      input ("full") and also the matrix products' outputs ("dots",
      "dots_no_batch"). The KV-cache path runs unrolled blocks.
    init_std: stddev of the normal initialiser of all weights.
    logits_chunk: positions per chunk when log-probs, entropies and argmaxes
      are computed from hidden states (`models/token_stats.py`): the
      [B, T, V] logits are never materialised, only [B, chunk, V] at a time.
      0: all positions at once (small vocabularies).
    attention: how a pass over whole rows, or a prefill of T tokens into
      the KV cache, attends (`models/attention.py`): "plain" (the [T, S]
      scores at once), "chunked" (online softmax over chunks: memory
      linear in T, forward and backward), "fused" (cuDNN's kernel on a
      GPU for bfloat16 rows, chunked where it does not apply), "auto"
      (chunked when T is longer than one chunk). Decode steps (T = 1) are
      the same for all.
    attention_chunk: query and key positions per chunk of "chunked".
  """

  vocab_size: int
  num_layers: int
  embed_dim: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  mlp_dim: int
  rope_theta: float
  rms_eps: float
  qkv_bias: bool
  tie_embeddings: bool
  dtype: str
  param_dtype: str
  remat: str
  init_std: float
  logits_chunk: int = 0
  attention: str = "plain"
  attention_chunk: int = 512

  def __post_init__(self):
    for name in (
      "vocab_size",
      "num_layers",
      "embed_dim",
      "num_heads",
      "num_kv_heads",
      "head_dim",
      "mlp_dim",
    ):
      value = getattr(self, name)
      if not isinstance(value, int) or value <= 0:
        raise ValueError(f"model.{name}={value!r}: must be a positive int.")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
        f"model.num_kv_heads={self.num_kv_heads}: must divide"
        f" model.num_heads={self.num_heads}."
      )
    if self.head_dim % 2:
      raise ValueError(
        f"model.head_dim={self.head_dim}: rotary embeddings need it even."
      )
    for name in ("dtype", "param_dtype"):
      if getattr(self, name) not in DTYPES:
        raise ValueError(
          f"model.{name}={getattr(self, name)!r}: expected one of"
          f" {sorted(DTYPES)}."
        )
    if self.remat not in REMAT_POLICIES:
      raise ValueError(
        f"model.remat={self.remat!r}: expected one of {sorted(REMAT_POLICIES)}."
      )
    if (
      not isinstance(self.logits_chunk, int)
      or isinstance(self.logits_chunk, bool)
      or self.logits_chunk < 0
    ):
      raise ValueError(
        f"model.logits_chunk={self.logits_chunk!r}: must be an int >= 0"
        " (0: no chunking)."
      )
    if self.attention not in attention_lib.IMPLEMENTATIONS:
      raise ValueError(
        f"model.attention={self.attention!r}: expected one of"
        f" {attention_lib.IMPLEMENTATIONS}."
      )
    if (
      not isinstance(self.attention_chunk, int)
      or isinstance(self.attention_chunk, bool)
      or self.attention_chunk <= 0
    ):
      raise ValueError(
        f"model.attention_chunk={self.attention_chunk!r}: must be a positive"
        " int."
      )
    if self.rope_theta <= 0 or self.rms_eps <= 0 or self.init_std <= 0:
      raise ValueError(
        "model.rope_theta, model.rms_eps and model.init_std must be > 0;"
        f" got {self.rope_theta}, {self.rms_eps}, {self.init_std}."
      )

  @classmethod
  def from_config(cls, section: Any) -> TransformerConfig:
    """Builds from a ConfigDict or dict, naming unknown or missing fields."""
    return config_utils.from_section(cls, section, "model")

  @property
  def jnp_dtype(self):
    """The activation dtype as a jnp type."""
    return DTYPES[self.dtype]

  @property
  def jnp_param_dtype(self):
    """The parameter dtype as a jnp type."""
    return DTYPES[self.param_dtype]

  def num_params(self, *, with_lm_head: bool = True) -> int:
    """Parameter count of the trunk (+ output embedding when untied)."""
    d, h, k, hd, f = (
      self.embed_dim,
      self.num_heads,
      self.num_kv_heads,
      self.head_dim,
      self.mlp_dim,
    )
    attn = d * h * hd * 2 + d * k * hd * 2
    if self.qkv_bias:
      attn += (h + 2 * k) * hd
    block = attn + 3 * d * f + 2 * d
    total = self.vocab_size * d + self.num_layers * block + d
    if with_lm_head and not self.tie_embeddings:
      total += self.vocab_size * d
    return total


@struct.dataclass
class KVCache:
  """Attention cache of all layers.

  Attributes:
    layers: one `LayerKV` per layer.
    valid: [B, S] bool, slot holds a real token.
    positions: [B, S] int32 position of the token in each slot.
    index: scalar int32, next slot to write (shared by all rows).
  """

  layers: tuple[LayerKV, ...]
  valid: jax.Array
  positions: jax.Array
  index: jax.Array

  @property
  def max_len(self) -> int:
    """Slots per row."""
    return self.valid.shape[1]


def init_cache(
  config: TransformerConfig, batch: int, max_len: int, dtype=None
) -> KVCache:
  """An empty cache of `max_len` slots per row."""
  dtype = dtype or config.jnp_dtype
  shape = (batch, config.num_kv_heads, max_len, config.head_dim)
  return KVCache(
    layers=tuple(
      LayerKV(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype))
      for _ in range(config.num_layers)
    ),
    valid=jnp.zeros((batch, max_len), bool),
    positions=jnp.zeros((batch, max_len), jnp.int32),
    index=jnp.zeros((), jnp.int32),
  )


def positions_from_valid(valid: jax.Array, start=None) -> jax.Array:
  """[B, T] positions counting valid tokens (padding repeats the last one).

  Args:
    valid: [B, T] bool mask of real tokens, any padding layout.
    start: optional [B] position of each row's first new token (multi-turn
      continuation: the row's number of tokens so far).

  Returns:
    [B, T] int32 positions; the first valid token of a row gets `start`.
  """
  pos = jnp.cumsum(valid.astype(jnp.int32), axis=1) - 1
  pos = jnp.maximum(pos, 0)
  if start is not None:
    pos = pos + start[:, None].astype(jnp.int32)
  return pos


class Trunk(nn.Module):
  """Embedding and decoder blocks; returns final-normed hidden states."""

  config: TransformerConfig

  def setup(self):
    """Declares the embedding, the blocks and the final norm."""
    cfg = self.config
    self.embed = nn.Embed(
      cfg.vocab_size,
      cfg.embed_dim,
      dtype=cfg.jnp_dtype,
      param_dtype=cfg.jnp_param_dtype,
      embedding_init=layers.normal_init(cfg, ("vocab", "embed")),
      name="embed",
    )
    policy = REMAT_POLICIES[cfg.remat]
    block_cls = (
      layers.Block
      if cfg.remat == "none"
      else nn.remat(layers.Block, policy=policy, prevent_cse=True)
    )
    self.blocks = [
      block_cls(cfg, name=f"layers_{i}") for i in range(cfg.num_layers)
    ]
    self.final_norm = layers.RMSNorm(cfg, name="final_norm")

  def __call__(self, tokens, positions, valid, cache=None, segments=None):
    """Hidden states of `tokens`.

    Args:
      tokens: [B, T] int token ids.
      positions: [B, T] int positions (see `positions_from_valid`).
      valid: [B, T] bool, False at padding.
      cache: optional `KVCache`; the tokens are written at its `index`.
      segments: optional [B, T] int ids of the sequences packed into each
        row (no cache); attention stays inside a segment, and positions
        are the caller's (restarting per segment).

    Returns:
      ([B, T, D] hidden states, updated cache or None).
    """
    chex.assert_rank([tokens, positions, valid], 2)
    chex.assert_equal_shape([tokens, positions, valid])
    if segments is not None:
      if cache is not None:
        raise ValueError("Trunk: packed segments cannot continue a KV cache.")
      chex.assert_equal_shape([tokens, segments])
    valid = valid.astype(bool)
    x = self.embed(tokens)
    x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
    if cache is None:
      cache_meta = None
      layer_kvs = [None] * len(self.blocks)
    else:
      t = tokens.shape[1]
      cache_valid = jax.lax.dynamic_update_slice(
        cache.valid, valid, (0, cache.index)
      )
      cache_pos = jax.lax.dynamic_update_slice(
        cache.positions, positions.astype(jnp.int32), (0, cache.index)
      )
      cache_meta = (cache_valid, cache_pos, cache.index)
      layer_kvs = list(cache.layers)
    if cache is None and self.config.remat != "none":
      if self.is_initializing():
        # The parameters are made by the unrolled blocks, so the tree is
        # the same whatever the policy (checkpoints, HF import and export).
        for block in self.blocks:
          x, _ = block(x, positions, valid, None, None, segments)
      else:
        x = self._scanned_blocks(x, positions, valid, segments)
      new_layers = []
    else:
      new_layers = []
      for block, layer_kv in zip(self.blocks, layer_kvs, strict=True):
        x, new_kv = block(x, positions, valid, layer_kv, cache_meta, segments)
        new_layers.append(new_kv)
    x = self.final_norm(x)
    if cache is None:
      return x, None
    return x, KVCache(
      layers=tuple(new_layers),
      valid=cache_valid,
      positions=cache_pos,
      index=cache.index + t,
    )

  def _scanned_blocks(self, x, positions, valid, segments):
    """The blocks of a whole-row pass as one `lax.scan`, each recomputed.

    Rematerialising unrolled blocks saved nothing in XLA's compiled memory
    (a toy of 4 layers: 438 MiB with `jax.checkpoint` per block and
    without); under a scan the backward pass keeps only each block's input
    and recomputes the rest one block at a time (89 MiB), as the policy
    allows (`REMAT_POLICIES`). The blocks' parameters stay one subtree per
    layer and are stacked here, at the cost of one copy of them.
    """
    cfg = self.config
    params = self.variables["params"]
    per_layer = [
      _unboxed(params[f"layers_{i}"]) for i in range(len(self.blocks))
    ]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *per_layer)
    block = layers.Block(cfg, parent=None)

    def body(h, layer_params):
      # Masks computed from the positions, validity and segments alone are
      # the same in every layer, and JAX hoists such loop-invariant work out
      # of a scan by stacking each inner block's result: chunked attention's
      # masks, [T/C, T/C, C, C], were 148 GiB at 32k tokens. Tied to the
      # carry by a barrier they are computed per layer, block by block.
      h, pos, val, seg = jax.lax.optimization_barrier(
        (h, positions, valid, segments)
      )
      h, _ = block.apply({"params": layer_params}, h, pos, val, None, None, seg)
      return h, None

    body = jax.checkpoint(
      body, policy=REMAT_POLICIES[cfg.remat], prevent_cse=False
    )
    x, _ = jax.lax.scan(body, x, stacked)
    return x


def _unboxed(tree):
  """`tree` with logical-partitioning boxes replaced by their values."""

  def is_box(x):
    return isinstance(x, nn.meta.AxisMetadata)

  return jax.tree.map(
    lambda x: x.unbox(apply_constraint=False) if is_box(x) else x,
    tree,
    is_leaf=is_box,
  )


class Actor(nn.Module):
  """The policy: trunk plus an output projection to vocabulary logits."""

  config: TransformerConfig

  def setup(self):
    """Declares the trunk and, when untied, the output projection."""
    cfg = self.config
    self.trunk = Trunk(cfg, name="trunk")
    if not cfg.tie_embeddings:
      self.lm_head = nn.Dense(
        cfg.vocab_size,
        use_bias=False,
        dtype=cfg.jnp_dtype,
        param_dtype=cfg.jnp_param_dtype,
        kernel_init=layers.normal_init(cfg, ("embed", "vocab")),
        name="lm_head",
      )

  def __call__(self, tokens, positions, valid, cache=None, segments=None):
    """Next-token logits.

    Args:
      tokens: [B, T] int token ids.
      positions: [B, T] int positions.
      valid: [B, T] bool, False at padding.
      cache: optional `KVCache` to continue.
      segments: optional [B, T] segment ids of packed rows (see `Trunk`).

    Returns:
      ([B, T, V] float32 logits, updated cache or None).
    """
    h, cache = self.hidden(tokens, positions, valid, cache, segments)
    return self.logits(h), cache

  def hidden(self, tokens, positions, valid, cache=None, segments=None):
    """([B, T, D] final-normed hidden states, cache): `__call__` sans head.

    With a large vocabulary, `token_stats` turns these into log-probs a
    chunk of positions at a time instead of materialising [B, T, V].
    """
    return self.trunk(tokens, positions, valid, cache, segments)

  def logits(self, h):
    """[..., T, V] float32 logits of [..., T, D] hidden states."""
    if self.config.tie_embeddings:
      logits = self.trunk.embed.attend(h)
    else:
      logits = self.lm_head(h)
    logits = nn.with_logical_constraint(logits, ("batch", "length", "vocab"))
    return logits.astype(jnp.float32)


class Critic(nn.Module):
  """The value function: its own trunk plus a scalar head per token.

  The head is a zero-initialised vector without bias, so every value starts
  at 0 whatever the trunk (a random one, or a copy of a pretrained actor's)
  computes; as in OpenRLHF's and verl's critics, the head has no bias.
  """

  config: TransformerConfig

  @nn.compact
  def __call__(self, tokens, positions, valid, cache=None, segments=None):
    """Per-token values.

    Args:
      tokens: [B, T] int token ids.
      positions: [B, T] int positions.
      valid: [B, T] bool, False at padding.
      cache: optional `KVCache` to continue.
      segments: optional [B, T] segment ids of packed rows (see `Trunk`).

    Returns:
      ([B, T] float32 values, updated cache or None).
    """
    cfg = self.config
    h, cache = Trunk(cfg, name="trunk")(
      tokens, positions, valid, cache, segments
    )
    values = nn.Dense(
      1,
      dtype=jnp.float32,
      param_dtype=cfg.jnp_param_dtype,
      use_bias=False,
      kernel_init=nn.with_logical_partitioning(
        nn.initializers.zeros, ("embed", None)
      ),
      name="value_head",
    )(h.astype(jnp.float32))
    return values[..., 0], cache


CRITIC_INITS = ("random", "actor")


def init_critic_from_actor(critic_params, actor_params):
  """Critic params whose trunk is a copy of the actor's trunk.

  Args:
    critic_params: the critic's `params` collection (its value head is kept).
    actor_params: the actor's `params` collection.

  Returns:
    A new critic `params` collection; the copy shares no buffers with the
    actor (updates to one never alias the other).
  """
  if "trunk" not in actor_params or "trunk" not in critic_params:
    raise ValueError("init_critic_from_actor: both params need a 'trunk'.")
  trunk = jax.tree.map(jnp.copy, actor_params["trunk"])
  if jax.tree.structure(trunk) != jax.tree.structure(critic_params["trunk"]):
    raise ValueError(
      "init_critic_from_actor: actor and critic trunks differ in structure;"
      " they must share the model config."
    )
  return {**critic_params, "trunk": trunk}
