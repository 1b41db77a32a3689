"""Sharded actor and critic train states and their optimisers.

States are created as DESIGN.md's "Scale" section says: `jax.eval_shape`
gives the abstract params (with logical axis names) and optimiser state,
`sharding.param_specs` turns the names into mesh shardings, and one
`jax.jit(init, out_shardings=...)` creates every array directly in its
shards, so no device ever holds a whole model.

The learner jits its step with `train_state_shardings` as in/out shardings,
`sharding.batch_sharding` for the batch, and donates the states.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
import math
from typing import Any

from flax import linen as nn
from flax import struct
import jax
import jax.numpy as jnp
import optax

from codeagent_rl import config_utils
from codeagent_rl import jit_cache
from codeagent_rl.models import transformer
from codeagent_rl.parallel import distributed
from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import sharding


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  """Validated `config.optim` section: one AdamW per model.

  Both optimisers clip the global gradient norm, then apply AdamW (decoupled
  weight decay on every parameter, as torch AdamW over `parameters()`), with
  an optional linear warmup: step s (1-based) uses lr * min(1, s / warmup),
  then optionally a cosine decay that reaches `final_lr_fraction` * lr at
  step `decay_steps` and stays there.

  Attributes:
    actor_lr: peak learning rate of the actor.
    critic_lr: peak learning rate of the critic.
    weight_decay: AdamW decoupled weight decay (multiplied by the lr).
    b1: Adam first-moment decay.
    b2: Adam second-moment decay.
    eps: Adam denominator epsilon.
    grad_clip_norm: global gradient-norm clip, or None for no clipping.
    warmup_steps: linear warmup steps; 0 for a constant rate.
    decay_steps: the step at which the cosine decay after warmup ends; 0
      for no decay (the peak rate after warmup).
    final_lr_fraction: the rate at `decay_steps`, as a fraction of the peak.
  """

  actor_lr: float
  critic_lr: float
  weight_decay: float
  b1: float
  b2: float
  eps: float
  grad_clip_norm: float | None
  warmup_steps: int
  decay_steps: int
  final_lr_fraction: float

  def __post_init__(self):
    for name in ("actor_lr", "critic_lr", "eps"):
      value = getattr(self, name)
      if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"optim.{name}={value}: must be finite and > 0.")
    if not self.weight_decay >= 0.0:
      raise ValueError(f"optim.weight_decay={self.weight_decay}: must be >= 0.")
    for name in ("b1", "b2"):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ValueError(
          f"optim.{name}={getattr(self, name)}: must be in [0, 1)."
        )
    if self.grad_clip_norm is not None and not self.grad_clip_norm > 0.0:
      raise ValueError(
        f"optim.grad_clip_norm={self.grad_clip_norm}: must be > 0 or None."
      )
    if (
      not isinstance(self.warmup_steps, int)
      or isinstance(self.warmup_steps, bool)
      or self.warmup_steps < 0
    ):
      raise ValueError(
        f"optim.warmup_steps={self.warmup_steps!r}: must be an int >= 0."
      )
    if (
      not isinstance(self.decay_steps, int)
      or isinstance(self.decay_steps, bool)
      or not (self.decay_steps == 0 or self.decay_steps > self.warmup_steps)
    ):
      raise ValueError(
        f"optim.decay_steps={self.decay_steps!r}: must be 0 (no decay) or an"
        f" int > warmup_steps ({self.warmup_steps})."
      )
    if not 0.0 <= self.final_lr_fraction <= 1.0:
      raise ValueError(
        f"optim.final_lr_fraction={self.final_lr_fraction}: must be in [0, 1]."
      )

  @classmethod
  def from_config(cls, section: Any) -> OptimConfig:
    """Builds from a ConfigDict or dict, naming unknown or missing fields."""
    return config_utils.from_section(cls, section, "optim")


# Cached: an optimiser is a pair of closures, compared by identity, and
# jitted steps that bind it are shared by equal bindings (jit_cache.py).
@functools.lru_cache(maxsize=64)
def make_optimizer(
  config: OptimConfig, learning_rate: float
) -> optax.GradientTransformation:
  """Global-norm clipping then AdamW at `learning_rate` (see `OptimConfig`).

  Equal arguments give the same object (optax transformations are pure).
  """
  warmup = config.warmup_steps
  if not warmup and not config.decay_steps:
    schedule = learning_rate
  else:

    def schedule(count):
      # optax counts from 0 at the first update; step s = count + 1.
      s = (count + 1).astype(jnp.float32)
      rate = learning_rate * jnp.minimum(1.0, s / max(warmup, 1))
      if config.decay_steps:
        span = config.decay_steps - warmup
        done = jnp.clip((s - warmup) / span, 0.0, 1.0)
        low = config.final_lr_fraction
        rate *= low + (1.0 - low) * 0.5 * (1.0 + jnp.cos(jnp.pi * done))
      return rate

  parts = []
  if config.grad_clip_norm is not None:
    parts.append(optax.clip_by_global_norm(config.grad_clip_norm))
  parts.append(
    optax.adamw(
      schedule,
      b1=config.b1,
      b2=config.b2,
      eps=config.eps,
      weight_decay=config.weight_decay,
    )
  )
  return optax.chain(*parts)


def make_optimizers(
  config: OptimConfig,
) -> tuple[optax.GradientTransformation, optax.GradientTransformation]:
  """(actor optimiser, critic optimiser)."""
  return (
    make_optimizer(config, config.actor_lr),
    make_optimizer(config, config.critic_lr),
  )


@struct.dataclass
class TrainState:
  """Params and optimiser state of one model; pure data, no callables.

  Attributes:
    step: scalar int32, optimiser updates applied so far.
    params: the unboxed `params` collection.
    opt_state: the optax state of the model's optimiser.
  """

  step: jax.Array
  params: Any
  opt_state: Any

  @classmethod
  def create(cls, params: Any, tx: optax.GradientTransformation) -> TrainState:
    """A state at step 0 with a fresh optimiser state."""
    return cls(
      step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params)
    )

  def apply_gradients(
    self, grads: Any, tx: optax.GradientTransformation
  ) -> TrainState:
    """One optimiser update with `grads` (same structure as params)."""
    updates, opt_state = tx.update(grads, self.opt_state, self.params)
    return self.replace(
      step=self.step + 1,
      params=optax.apply_updates(self.params, updates),
      opt_state=opt_state,
    )


def _init_boxed_params(model: nn.Module, rng: jax.Array) -> Any:
  """The model's `params`, boxed with logical axis names."""
  tokens = jnp.zeros((1, 1), jnp.int32)
  valid = jnp.ones((1, 1), bool)
  positions = transformer.positions_from_valid(valid)
  # No rules while initialising: activation constraints on a 1-row dummy
  # batch would ask for an uneven split.
  with nn.logical_axis_rules(()):
    return model.init(rng, tokens, positions, valid)["params"]


def _models(
  model_cfg: transformer.TransformerConfig,
  critic_cfg: transformer.TransformerConfig | None,
):
  return transformer.Actor(model_cfg), transformer.Critic(
    model_cfg if critic_cfg is None else critic_cfg
  )


def _state_shardings(
  model: nn.Module,
  tx: optax.GradientTransformation,
  mesh: jax.sharding.Mesh,
  rules: mesh_lib.Rules,
) -> TrainState:
  """TrainState of shardings: params per the rules, opt state follows."""
  # The key is made inside the trace: shapes only, nothing transferred.
  boxed = jax.eval_shape(lambda: _init_boxed_params(model, jax.random.key(0)))
  params_sh = sharding.param_shardings(boxed, mesh, rules)
  abstract_params = sharding.unbox(boxed)
  abstract_opt = jax.eval_shape(tx.init, abstract_params)
  replicated = sharding.replicated(mesh)

  def follow(state_leaf, param, param_sh):
    # A params-shaped subtree of the optimiser state (Adam's mu, nu).
    if state_leaf.shape != param.shape:
      raise ValueError(
        f"optimiser state leaf of shape {state_leaf.shape} sits where a"
        f" param of shape {param.shape} is; cannot give it that sharding."
      )
    return param_sh

  # tree_map_params runs `tx.init` eagerly to learn the state's structure:
  # its scalar counters are made on the device from Python numbers and
  # thrown away, transfers of no data the job uses.
  with jax.transfer_guard("allow"):
    opt_sh = optax.tree_map_params(
      tx,
      follow,
      abstract_opt,
      abstract_params,
      params_sh,
      transform_non_params=lambda _: replicated,
    )
  return TrainState(step=replicated, params=params_sh, opt_state=opt_sh)


def train_state_shardings(
  model_cfg: transformer.TransformerConfig,
  optim_cfg: OptimConfig,
  mesh: jax.sharding.Mesh,
  rules: mesh_lib.Rules,
  critic_cfg: transformer.TransformerConfig | None = None,
) -> tuple[TrainState, TrainState]:
  """Shardings of (actor state, critic state), for jit in/out shardings.

  `critic_cfg` is the critic's model when it is not `model_cfg` (a critic
  from another, e.g. smaller, checkpoint).

  Raises:
    ValueError: a parameter cannot be sharded as the rules say (see
      `sharding.param_specs`).
  """
  args = (model_cfg, optim_cfg, mesh, tuple(rules), critic_cfg)
  try:
    hash(args)
  except TypeError:  # rules not as `mesh_lib.normalize_rules` makes them
    return _cached_train_state_shardings.__wrapped__(*args)
  return _cached_train_state_shardings(*args)


# The shardings are a pure function of the configs, mesh and rules, and
# working them out traces the models' init twice (`eval_shape`): 33 s of
# the test suite's tracing (py-spy) went there, as every learner, SFT run,
# evaluation job and checkpoint restore asked again for the same ones.
# The result is immutable (frozen TrainStates of NamedShardings).
@functools.lru_cache(maxsize=16)
def _cached_train_state_shardings(
  model_cfg: transformer.TransformerConfig,
  optim_cfg: OptimConfig,
  mesh: jax.sharding.Mesh,
  rules: mesh_lib.Rules,
  critic_cfg: transformer.TransformerConfig | None,
) -> tuple[TrainState, TrainState]:
  actor, critic = _models(model_cfg, critic_cfg)
  actor_tx, critic_tx = make_optimizers(optim_cfg)
  return (
    _state_shardings(actor, actor_tx, mesh, rules),
    _state_shardings(critic, critic_tx, mesh, rules),
  )


def _jit_states(
  states_fn: Callable[..., tuple[TrainState, TrainState]],
  model_cfg: transformer.TransformerConfig,
  optim_cfg: OptimConfig,
  mesh: jax.sharding.Mesh,
  rules: mesh_lib.Rules,
  critic_init: str,
  critic_cfg: transformer.TransformerConfig | None = None,
) -> Callable[..., tuple[TrainState, TrainState]]:
  """`states_fn`, its models and optimisers bound, jitted into its shards.

  Args:
    states_fn: `_init_states` or `_states_from_actor`; it takes the keyword
      arguments actor, critic, actor_tx, critic_tx and critic_init.
    model_cfg: the model both states are built for.
    optim_cfg: learning rates and AdamW settings.
    mesh: the device mesh.
    rules: validated logical-to-mesh rules.
    critic_init: "random" or "actor".
    critic_cfg: the critic's model, when it is not `model_cfg`.

  Returns:
    `states_fn` of its remaining (array) arguments, whose output is sharded
    as `train_state_shardings` says.

  Raises:
    ValueError: unknown `critic_init`, or a parameter cannot be sharded.
  """
  if critic_init not in transformer.CRITIC_INITS:
    raise ValueError(
      f"critic_init={critic_init!r}: expected one of"
      f" {transformer.CRITIC_INITS}."
    )
  actor, critic = _models(model_cfg, critic_cfg)
  actor_tx, critic_tx = make_optimizers(optim_cfg)
  shardings = train_state_shardings(
    model_cfg, optim_cfg, mesh, rules, critic_cfg
  )
  return jit_cache.jit(
    states_fn,
    jit_kwargs={"out_shardings": shardings},
    actor=actor,
    critic=critic,
    actor_tx=actor_tx,
    critic_tx=critic_tx,
    critic_init=critic_init,
  )


def _init_states(
  rng: jax.Array,
  *,
  actor: nn.Module,
  critic: nn.Module,
  actor_tx: optax.GradientTransformation,
  critic_tx: optax.GradientTransformation,
  critic_init: str,
) -> tuple[TrainState, TrainState]:
  actor_rng, critic_rng = jax.random.split(rng)
  actor_params = sharding.unbox(_init_boxed_params(actor, actor_rng))
  critic_params = sharding.unbox(_init_boxed_params(critic, critic_rng))
  if critic_init == "actor":
    critic_params = transformer.init_critic_from_actor(
      critic_params, actor_params
    )
  return (
    TrainState.create(actor_params, actor_tx),
    TrainState.create(critic_params, critic_tx),
  )


def create_train_states(
  model_cfg: transformer.TransformerConfig,
  optim_cfg: OptimConfig,
  mesh: jax.sharding.Mesh,
  rules: mesh_lib.Rules,
  rng: jax.Array,
  critic_init: str = "random",
  critic_cfg: transformer.TransformerConfig | None = None,
) -> tuple[TrainState, TrainState]:
  """Actor and critic train states, initialised directly in their shards.

  Args:
    model_cfg: the model both states are built for.
    optim_cfg: learning rates and AdamW settings (see `OptimConfig`).
    mesh: the device mesh.
    rules: validated logical-to-mesh rules.
    rng: PRNG key; the same key gives the same values on any mesh.
    critic_init: "random" (own initialisation) or "actor" (the critic's
      trunk starts as a copy of the actor's; its value head is zeros).
    critic_cfg: the critic's model when it is not `model_cfg` (then
      `critic_init` must be "random": trunks of two shapes).

  Returns:
    (actor state, critic state), sharded as `train_state_shardings` says.

  Raises:
    ValueError: unknown `critic_init`, or a parameter cannot be sharded.
  """
  if critic_cfg not in (None, model_cfg) and critic_init == "actor":
    raise ValueError(
      "create_train_states: critic_init='actor' copies the actor's trunk;"
      " a critic of another architecture cannot hold it."
    )
  init = _jit_states(
    _init_states, model_cfg, optim_cfg, mesh, rules, critic_init, critic_cfg
  )
  rng = distributed.put_replicated(rng, sharding.replicated(mesh))
  return init(rng)


def _states_from_actor(
  actor_params: Any,
  rng: jax.Array,
  critic_params: Any,
  *,
  actor: nn.Module,
  critic: nn.Module,
  actor_tx: optax.GradientTransformation,
  critic_tx: optax.GradientTransformation,
  critic_init: str,
) -> tuple[TrainState, TrainState]:
  del actor  # the actor starts at `actor_params`, not at an init
  if critic_params is None:
    critic_params = sharding.unbox(_init_boxed_params(critic, rng))
    if critic_init == "actor":
      critic_params = transformer.init_critic_from_actor(
        critic_params, actor_params
      )
  # A copy: the states are donated to the train step, the SFT params (the
  # KL reference) must survive it.
  actor_params = jax.tree.map(jnp.copy, actor_params)
  return (
    TrainState.create(actor_params, actor_tx),
    TrainState.create(critic_params, critic_tx),
  )


def states_from_actor_params(
  actor_params: Any,
  model_cfg: transformer.TransformerConfig,
  optim_cfg: OptimConfig,
  mesh: jax.sharding.Mesh,
  rules: mesh_lib.Rules,
  rng: jax.Array,
  critic_init: str,
  *,
  critic_cfg: transformer.TransformerConfig | None = None,
  critic_params: Any = None,
) -> tuple[TrainState, TrainState]:
  """Fresh actor and critic states whose actor starts at `actor_params`.

  The PPO starting point: the actor is a copy of the SFT params (which stay
  valid, as the KL reference), with a fresh optimiser state; the critic
  starts at `critic_params` when given (e.g. another checkpoint's trunk
  with a zero value head, `hf_import.critic_from_hf`), else it is
  initialised as `critic_init` says ("actor": the SFT trunk and a zero
  value head), directly in its shards.

  Args:
    actor_params: the actor's `params` collection (e.g. after SFT).
    model_cfg: the model both states are built for.
    optim_cfg: learning rates and AdamW settings.
    mesh: the device mesh.
    rules: validated logical-to-mesh rules.
    rng: PRNG key of the critic's initialisation.
    critic_init: "random" or "actor" (unused with `critic_params`).
    critic_cfg: the critic's model when it is not `model_cfg`; a critic of
      another architecture starts at `critic_params`.
    critic_params: the critic's `params` collection, or None.

  Returns:
    (actor state, critic state), sharded as `train_state_shardings` says.

  Raises:
    ValueError: a critic of its own architecture without `critic_params`.
  """
  if critic_cfg not in (None, model_cfg) and critic_params is None:
    raise ValueError(
      "states_from_actor_params: a critic whose model differs from the"
      " actor's starts at its own weights; pass critic_params."
    )
  init = _jit_states(
    _states_from_actor,
    model_cfg,
    optim_cfg,
    mesh,
    rules,
    critic_init,
    critic_cfg,
  )
  rng = distributed.put_replicated(rng, sharding.replicated(mesh))
  return init(actor_params, rng, critic_params)
