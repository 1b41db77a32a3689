"""A one-layer model, rollout batches and configs for the learner's steps.

Shared by the step tests (no side effects on import).
"""

from flax import linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from codeagent_rl.models import transformer
from codeagent_rl.parallel import sharding
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.rl import config as rl_config
from codeagent_rl.train import steps
from configs import common
from configs import tiny

# One layer, small widths, no qkv bias (its key-bias gradient is zero in
# exact arithmetic, so only float noise would move it).
MODEL = transformer.TransformerConfig.from_config(
  {
    **tiny.get_config("smoke").model.to_dict(),
    "vocab_size": 48,
    "num_layers": 1,
    "embed_dim": 32,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "mlp_dim": 64,
    "qkv_bias": False,
  }
)
VOCAB_LIMIT = 40  # ids 40..47 play the vocabulary padding
BATCH, LENGTH = 8, 12


def rl(**overrides) -> rl_config.RLConfig:
  """The default `config.rl` with `section.field` overrides."""
  rl = common.get_rl_config()
  for key, value in overrides.items():
    section, field = key.split("__")
    rl[section][field] = value
  return rl_config.RLConfig.from_config(rl)


def init_params():
  """(actor, critic) params of `MODEL`; the value head is not zero."""
  rng = jax.random.key(0)
  tokens = jnp.zeros((1, 1), jnp.int32)
  valid = jnp.ones((1, 1), bool)
  pos = transformer.positions_from_valid(valid)
  init = jax.jit(
    lambda m: nn.unbox(m.init(rng, tokens, pos, valid)["params"]),
    static_argnums=0,
  )
  actor = init(transformer.Actor(MODEL))
  critic = init(transformer.Critic(MODEL))
  # A non-zero value head, so the critic's trunk gets gradients too.
  critic = jax.tree_util.tree_map_with_path(
    lambda p, x: x + 0.05 if "kernel" in str(p[-1]) and x.shape[-1] == 1 else x,
    critic,
  )
  return actor, critic


def ppo_batch(seed, advantages=None):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(LENGTH // 2, LENGTH + 1, size=BATCH)
  valid = np.arange(LENGTH)[None, :] < lengths[:, None]
  trainable = valid & (rng.random((BATCH, LENGTH)) < 0.6)
  trainable[:, 0] = False
  tokens = np.where(valid, rng.integers(0, VOCAB_LIMIT, (BATCH, LENGTH)), 0)
  adv = rng.normal(size=(BATCH, LENGTH)) if advantages is None else advantages
  f32 = lambda x: jnp.asarray(np.where(trainable, x, 0.0), jnp.float32)  # noqa: E731
  return steps.PPOBatch(
    tokens=jnp.asarray(tokens, jnp.int32),
    valid=jnp.asarray(valid),
    trainable=jnp.asarray(trainable),
    old_logp=f32(-rng.random((BATCH, LENGTH)) * 4 - 1),
    ref_logp=f32(-rng.random((BATCH, LENGTH)) * 4 - 1),
    advantages=f32(adv),
    returns=f32(rng.normal(size=(BATCH, LENGTH))),
    old_values=f32(rng.normal(size=(BATCH, LENGTH)) * 0.1),
  )


# SGD: the update is linear in the gradient, so equal updates mean equal
# accumulated gradients (Adam would amplify float noise on near-zero ones).
TX = optax.sgd(0.5)


def actor_params_of(learner):
  """Randomly initialised actor params on a `ppo.Learner`'s mesh."""
  exp = learner.exp
  with sharding.axis_rules(learner.mesh, learner.rules):
    actor, _ = state_lib.create_train_states(
      exp.model, exp.optim, learner.mesh, learner.rules, jax.random.key(0)
    )
  return actor.params
