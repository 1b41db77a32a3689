"""Small transformer configs that tests and benchmarks share.

No side effects on import (see sandboxes.py), so benchmarks import it too.
"""

from codeagent_rl.models import transformer as tf

# Two layers of width 32 (4 query heads and 2 KV heads of 8), float32,
# without remat. A caller names what its model changes.
_TINY = {
  "num_layers": 2,
  "embed_dim": 32,
  "num_heads": 4,
  "num_kv_heads": 2,
  "head_dim": 8,
  "mlp_dim": 48,
  "rope_theta": 10000.0,
  "rms_eps": 1e-6,
  "qkv_bias": False,
  "tie_embeddings": True,
  "dtype": "float32",
  "param_dtype": "float32",
  "remat": "none",
}


def transformer_config(
  *, vocab_size: int, init_std: float, **fields
) -> tf.TransformerConfig:
  """The tiny model (`_TINY`) with this vocabulary and init, then `fields`."""
  return tf.TransformerConfig(
    **{**_TINY, "vocab_size": vocab_size, "init_std": init_std, **fields}
  )


def random_actor(vocab_size: int):
  """(config, actor, params): a one-layer random actor for rollout tests.

  Imports jax lazily, so importing this module stays free of side effects.
  """
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415

  cfg = transformer_config(
    vocab_size=vocab_size,
    init_std=0.02,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    head_dim=16,
    mlp_dim=64,
  )
  actor = tf.Actor(cfg)
  valid = jnp.ones((1, 4), bool)
  params = jax.jit(actor.init)(
    jax.random.PRNGKey(0),
    jnp.zeros((1, 4), jnp.int32),
    tf.positions_from_valid(valid),
    valid,
  )
  return cfg, actor, params
