"""The learner's jitted steps: pure functions of arrays, bound by partial.

Alignment of a [B, T] trajectory with the model's outputs: the actor's
logits at position t predict token t + 1, so the log-prob of token t is read
from position t - 1 (`shifted_log_probs`; token 0 gets 0, it is never
trainable). Likewise the critic's value of the state in which token t is
produced is its output at t - 1 (`shifted_values`), and the value after the
last valid token (where a truncated trajectory stopped) is its output at
`length - 1`. The actor's forwards never hold [B, T, V] logits: its hidden
states go to `token_stats`, `model.logits_chunk` positions at a time
(`shifted_token_stats`).

Every step has the shape `(state, batch, rng) -> (state, metrics)` or is a
pure forward; hyperparameters (model, optimiser, frozen configs) are bound
with `functools.partial` before `jax.jit`. `ppo_epoch` scans a PPO epoch's
minibatches through the bound actor and critic steps in one jitted call.
"""

from __future__ import annotations

from collections.abc import Callable
import functools
from typing import Any

import chex
from flax import struct
import jax
import jax.numpy as jnp
import optax

from codeagent_rl.models import token_stats
from codeagent_rl.models import transformer
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.rl import advantages as adv_lib
from codeagent_rl.rl import config as rl_config
from codeagent_rl.rl import diagnostics
from codeagent_rl.rl import gae
from codeagent_rl.rl import kl as kl_lib
from codeagent_rl.rl import losses
from codeagent_rl.train import keys
from codeagent_rl.train import packing


@struct.dataclass
class PPOBatch:
  """One iteration's rollouts with everything the PPO epochs need.

  All fields are [B, T].

  Attributes:
    tokens: int32 token ids.
    valid: bool, not padding.
    trainable: bool, policy tokens (the loss mask).
    old_logp: float32 log-probs under the rollout policy (recomputed).
    ref_logp: float32 log-probs under the reference (SFT) policy.
    advantages: float32 advantages (0 off the mask).
    returns: float32 value targets (0 off the mask).
    old_values: float32 critic values at rollout time.
    behaviour_logp: None (the rollouts are on policy), or float32 log-probs
      under the older policy that sampled them (`ppo.max_staleness`).
    positive: None, or bool: the trainable tokens of episodes solved on
      suites A and B, the targets of `rl.loss.positive_nll_coef`'s term.
    critic_prefix: None, or int32 [B, P] ids the critic reads before each
      row (`critic.privileged`; left-padded, see `critic_inputs`); the
      actor never sees them.
    critic_prefix_valid: None, or [B, P] bool: which of them are real.
    pack_src: None, or the `packing.Plan.src` of each micro-batch stacked
      ([micro-batches * R, T]): the forwards run on packed rows.
    pack_dst: None, or [B, T] `packing.Plan.dst` of each row, into its
      micro-batch's packed rows.
  """

  tokens: jax.Array
  valid: jax.Array
  trainable: jax.Array
  old_logp: jax.Array
  ref_logp: jax.Array
  advantages: jax.Array
  returns: jax.Array
  old_values: jax.Array
  behaviour_logp: jax.Array | None = None
  positive: jax.Array | None = None
  critic_prefix: jax.Array | None = None
  critic_prefix_valid: jax.Array | None = None
  pack_src: jax.Array | None = None
  pack_dst: jax.Array | None = None

  @property
  def pack(self) -> tuple[jax.Array, jax.Array] | None:
    """(src, dst) of a packed micro-batch, or None."""
    if self.pack_src is None:
      return None
    return self.pack_src, self.pack_dst


def _shift(stats: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """Stats of positions 0..T-2 (predicting tokens 1..T-1) -> [B, T], 0 first."""
  return {k: jnp.pad(v, ((0, 0), (1, 0))) for k, v in stats.items()}


def shifted_log_probs(
  logits_btv: jax.Array,
  tokens_bt: jax.Array,
  temperature: float,
  vocab_limit: int = 0,
) -> jax.Array:
  """[B, T] log p(token t | tokens < t); 0 at t = 0.

  The distribution is the sampler's: logits over `temperature`, ids at or
  above `vocab_limit` (vocabulary padding) excluded.
  """
  stats = token_stats.stats_from_logits(
    logits_btv[:, :-1],
    tokens_bt[:, 1:],
    temperature=temperature,
    vocab_limit=vocab_limit,
  )
  return _shift(stats)["logp"]


def shifted_entropy(
  logits_btv: jax.Array, temperature: float, vocab_limit: int = 0
) -> jax.Array:
  """[B, T] entropy of the distribution token t was drawn from; 0 at t = 0."""
  targets = jnp.zeros(logits_btv.shape[:2], jnp.int32)[:, 1:]
  stats = token_stats.stats_from_logits(
    logits_btv[:, :-1],
    targets,
    temperature=temperature,
    vocab_limit=vocab_limit,
    extra=("entropy",),
  )
  return _shift(stats)["entropy"]


def shifted_values(values_bt: jax.Array) -> jax.Array:
  """[B, T] value of the state that produces token t; 0 at t = 0."""
  return jnp.pad(values_bt[:, :-1], ((0, 0), (1, 0)))


def _apply(model, params, tokens, valid, pack=None, method=None):
  """The model's per-token output on [B, T] rows, packed or not.

  With `pack` (src, dst) the rows run as `packing` lays them out and the
  output comes back unpacked: [B, T, ...], zeros at padding.
  """
  positions = transformer.positions_from_valid(valid)
  variables = {"params": params}
  if pack is None:
    out, _ = model.apply(variables, tokens, positions, valid, method=method)
    return out
  src, dst = pack
  out, _ = model.apply(
    variables,
    packing.pack(tokens, src),
    packing.pack(positions, src),
    src >= 0,
    None,
    packing.segments(src, tokens.shape[1]),
    method=method,
  )
  return packing.unpack(out, dst)


def shifted_token_stats(
  model: transformer.Actor,
  params: Any,
  tokens: jax.Array,
  valid: jax.Array,
  *,
  temperature: float = 1.0,
  vocab_limit: int = 0,
  extra: tuple[str, ...] = (),
  pack: tuple[jax.Array, jax.Array] | None = None,
) -> dict[str, jax.Array]:
  """[B, T] stats of token t given the tokens before it; 0 at t = 0.

  Equal to `shifted_log_probs` (and `shifted_entropy`, the argmax hits) of
  the actor's logits, computed from its hidden states
  `model.config.logits_chunk` positions at a time (`token_stats`). With
  `pack` (a `packing.Plan`'s src, dst) the forward runs on packed rows;
  the stats at valid positions are the same.
  """
  variables = {"params": params}

  def head(h):
    return model.apply(variables, h, method=transformer.Actor.logits)

  chunk = model.config.logits_chunk
  if pack is not None:
    src, dst = pack
    t = tokens.shape[1]
    packed = packing.pack(tokens, src)
    hidden, _ = model.apply(
      variables,
      packed,
      packing.pack(transformer.positions_from_valid(valid), src),
      src >= 0,
      None,
      packing.segments(src, t),
      method=transformer.Actor.hidden,
    )
    # Slot j predicts slot j + 1: the next token of its own trajectory
    # (a trajectory's last slot predicts a neighbour's first token; that
    # value lands past the row's end, off every mask).
    stats = token_stats.token_stats(
      head,
      hidden,
      jnp.pad(packed[:, 1:], ((0, 0), (0, 1))),
      chunk=chunk,
      temperature=temperature,
      vocab_limit=vocab_limit,
      extra=extra,
    )
    return _shift({k: packing.unpack(v, dst)[:, :-1] for k, v in stats.items()})
  positions = transformer.positions_from_valid(valid)
  hidden, _ = model.apply(
    variables, tokens, positions, valid, method=transformer.Actor.hidden
  )
  if not chunk:
    # All positions' logits, then the first T - 1: the same matmul shapes as
    # the actor's own forward, so a run without chunking keeps its numbers
    # to the last digit (a [B, T - 1, D] head differs in rounding).
    stats = token_stats.stats_from_logits(
      head(hidden)[:, :-1],
      tokens[:, 1:],
      temperature=temperature,
      vocab_limit=vocab_limit,
      extra=extra,
    )
    return _shift(stats)
  stats = token_stats.token_stats(
    head,
    hidden[:, :-1],
    tokens[:, 1:],
    chunk=chunk,
    temperature=temperature,
    vocab_limit=vocab_limit,
    extra=extra,
  )
  return _shift(stats)


def in_row_groups(fn, num_groups: int, arrays: tuple, pack=None):
  """`fn(*arrays, pack)` run on `num_groups` consecutive row groups in turn.

  A forward over a whole iteration's rollouts at once would hold all their
  activations (attention alone is [B, heads, T, T]); `lax.map` runs one
  group at a time. `pack` is per group as in `PPOBatch` (src stacked
  [num_groups * R, T], dst relative to its group). The outputs are
  concatenated back to [B, ...].
  """
  if num_groups == 1:
    return fn(*arrays, pack)

  def split(x):
    return x.reshape((num_groups, -1) + x.shape[1:])

  groups = jax.tree.map(split, (arrays, pack))
  out = jax.lax.map(lambda g: fn(*g[0], g[1]), groups)
  return jax.tree.map(lambda y: y.reshape((-1,) + y.shape[2:]), out)


def actor_log_probs(
  params: Any,
  tokens: jax.Array,
  valid: jax.Array,
  *,
  model: transformer.Actor,
  temperature: float,
  vocab_limit: int,
  pack: tuple[jax.Array, jax.Array] | None = None,
  num_groups: int = 1,
) -> jax.Array:
  """[B, T] shifted log-probs of `tokens` under the actor.

  `num_groups` row groups run one after another (`in_row_groups`).
  """

  def one(tokens, valid, pack):
    return shifted_token_stats(
      model,
      params,
      tokens,
      valid,
      temperature=temperature,
      vocab_limit=vocab_limit,
      pack=pack,
    )["logp"]

  return in_row_groups(one, num_groups, (tokens, valid), pack)


def critic_outputs(
  model: transformer.Critic,
  params: Any,
  tokens: jax.Array,
  valid: jax.Array,
  pack: tuple[jax.Array, jax.Array] | None = None,
  prefix: jax.Array | None = None,
  prefix_valid: jax.Array | None = None,
) -> jax.Array:
  """[B, T] the critic's per-token outputs (unshifted) on the rows.

  With `prefix` ([B, P] ids and validity) the critic reads them before each
  row, and the outputs are those at the row's own positions: the same
  trajectory positions as without. Such rows run padded (`pack` is
  ignored: the packing plans are the actor's rows').
  """
  if prefix is None:
    return _apply(model, params, tokens, valid, pack)
  chex.assert_equal_shape([prefix, prefix_valid])
  chex.assert_equal_shape_prefix([prefix, tokens], 1)
  width = prefix.shape[1]
  out = _apply(
    model,
    params,
    jnp.concatenate([prefix, tokens], axis=1),
    jnp.concatenate([prefix_valid.astype(bool), valid.astype(bool)], axis=1),
  )
  return out[:, width:]


def critic_values(
  params: Any,
  tokens: jax.Array,
  valid: jax.Array,
  length: jax.Array,
  *,
  model: transformer.Critic,
  pack: tuple[jax.Array, jax.Array] | None = None,
  num_groups: int = 1,
  prefix: jax.Array | None = None,
  prefix_valid: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
  """([B, T] shifted values, [B] value after the last valid token).

  `num_groups` row groups run one after another (`in_row_groups`). With
  `prefix` the critic reads it before each row (`critic_outputs`).
  """
  if prefix is None:
    values = in_row_groups(
      lambda tokens, valid, pack: critic_outputs(
        model, params, tokens, valid, pack
      ),
      num_groups,
      (tokens, valid),
      pack,
    )
  else:
    values = in_row_groups(
      lambda tokens, valid, prefix, prefix_valid, pack: critic_outputs(
        model, params, tokens, valid, None, prefix, prefix_valid
      ),
      num_groups,
      (tokens, valid, prefix, prefix_valid),
      None,
    )
  last = jnp.clip(length - 1, 0, values.shape[1] - 1)
  after_last = jnp.take_along_axis(values, last[:, None], axis=1)[:, 0]
  return shifted_values(values), after_last


def targets(
  total_b: jax.Array,
  trainable: jax.Array,
  old_logp: jax.Array,
  ref_logp: jax.Array,
  values: jax.Array,
  truncated: jax.Array,
  bootstrap_value: jax.Array,
  group_id: jax.Array,
  length: jax.Array | None = None,
  *,
  rl: rl_config.RLConfig,
) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
  """Token rewards (terminal score, k1 KL penalty) -> advantages, returns.

  Args:
    total_b: [B] trajectory rewards after anti-cheat.
    trainable: [B, T] loss mask.
    old_logp: [B, T] rollout-policy log-probs.
    ref_logp: [B, T] reference log-probs.
    values: [B, T] critic values (zeros for critic-free estimators).
    truncated: [B] rows stopped by a budget.
    bootstrap_value: [B] value where a truncated row stopped (0 otherwise).
    group_id: [B] prompt ids.
    length: optional [B] episode lengths in tokens: the metrics then also
      hold `diagnostics.by_length` (GAE's and GRPO's advantages on this
      batch by length tercile).
    rl: the validated `config.rl`.

  Returns:
    (advantages [B, T], returns [B, T], metrics): metrics hold the mean
    per-token KL to the reference and the mean token reward.
  """
  chex.assert_equal_shape([trainable, old_logp, ref_logp, values])
  mask = trainable.astype(bool)
  token_rewards = gae.place_terminal_reward(total_b, trainable)
  kl_bt = kl_lib.kl_estimate(old_logp, ref_logp, rl.kl.estimator)
  kl_bt = jnp.where(mask, kl_bt, 0.0)
  if rl.kl.placement == "reward":
    token_rewards, kl_bt = kl_lib.kl_reward_penalty(
      token_rewards,
      old_logp,
      ref_logp,
      trainable,
      coef=rl.kl.coef,
      estimator=rl.kl.estimator,
    )
  inputs = adv_lib.AdvantageInputs(
    rewards=token_rewards,
    values=values,
    trainable=mask,
    truncated=truncated,
    bootstrap_value=bootstrap_value,
    group_id=group_id,
  )
  advantages, returns = adv_lib.compute_advantages(inputs, rl.advantage)
  norm = losses.normalizer_for(mask)
  metrics = {}
  if rl.advantage.estimator == "gae":
    rows = jnp.any(mask, axis=1)
    lam = adv_lib.actor_lambda(inputs, rl.advantage)
    metrics["advantage/actor_lambda_mean"] = jnp.sum(
      jnp.where(rows, lam, 0.0)
    ) / jnp.maximum(jnp.sum(rows), 1)
    metrics["advantage/critic_trust"] = adv_lib.critic_trust(
      inputs, rl.advantage
    )
  metrics |= {
    "kl/ref_mean": losses.token_mean(kl_bt, mask, norm),
    "kl/ref_seq_sum": jnp.sum(kl_bt) / norm.num_seqs,
    "advantage/mean": losses.token_mean(advantages, mask, norm),
    "advantage/abs_mean": losses.token_mean(jnp.abs(advantages), mask, norm),
    "return/mean": losses.token_mean(returns, mask, norm),
  }
  if length is not None:
    metrics.update(diagnostics.by_length(inputs, length, rl.advantage))
  return advantages, returns, metrics


def _micro_batches(batch: PPOBatch, num_micro: int) -> PPOBatch:
  """[B, T] leaves -> [num_micro, B / num_micro, T]."""
  return jax.tree.map(lambda x: x.reshape((num_micro, -1) + x.shape[1:]), batch)


def _accumulate(loss_fn, params, batch: PPOBatch, num_micro: int):
  """Sums gradients and metrics of `loss_fn` over micro-batches (lax.scan).

  `loss_fn(params, micro) -> (loss, metrics)` must normalise by the whole
  minibatch, so that the sums equal the minibatch's gradient and metrics.
  """
  grad_fn = jax.grad(loss_fn, has_aux=True)

  def body(carry, micro):
    grads, metrics = carry
    g, m = grad_fn(params, micro)
    return (
      jax.tree.map(jnp.add, grads, g),
      jax.tree.map(jnp.add, metrics, m),
    ), None

  micro = _micro_batches(batch, num_micro)
  first = jax.tree.map(lambda x: x[0], micro)
  zeros = jax.tree.map(jnp.zeros_like, params)
  zero_metrics = jax.tree.map(
    jnp.zeros_like, jax.eval_shape(lambda: grad_fn(params, first)[1])
  )
  (grads, metrics), _ = jax.lax.scan(body, (zeros, zero_metrics), micro)
  return grads, metrics


def _actor_loss(
  params, micro, *, model, rl, temperature, vocab_limit, norm, pos_norm
):
  stats = shifted_token_stats(
    model,
    params,
    micro.tokens,
    micro.valid,
    temperature=temperature,
    vocab_limit=vocab_limit,
    extra=("entropy",),
    pack=micro.pack,
  )
  logp = stats["logp"]
  loss_cfg = rl.loss
  loss, diag = losses.ppo_policy_loss(
    logp,
    micro.old_logp,
    micro.advantages,
    micro.trainable,
    eps_low=loss_cfg.eps_low,
    eps_high=loss_cfg.eps_high,
    dual_clip=loss_cfg.dual_clip,
    agg_mode=loss_cfg.agg_mode,
    norm=norm,
    norm_length=loss_cfg.norm_length,
    behaviour_logp=micro.behaviour_logp,
    behaviour_cap=loss_cfg.behaviour_cap,
  )
  metrics = {"loss/policy": loss, **{f"policy/{k}": v for k, v in diag.items()}}
  if rl.kl.placement == "loss":
    kl_term = kl_lib.kl_loss(
      logp,
      micro.ref_logp,
      micro.trainable,
      estimator=rl.kl.estimator,
      agg_mode=loss_cfg.agg_mode,
      norm=norm,
      norm_length=loss_cfg.norm_length,
    )
    loss = loss + rl.kl.coef * kl_term
    metrics["loss/kl"] = kl_term
  if loss_cfg.positive_nll_coef:
    # VAPO's positive-example LM loss: the NLL of solved episodes' tokens,
    # averaged over those tokens of the whole minibatch.
    nll = losses.token_mean(-logp, micro.positive, pos_norm)
    loss = loss + loss_cfg.positive_nll_coef * nll
    metrics["loss/positive_nll"] = nll
  ent = losses.token_mean(stats["entropy"], micro.trainable, norm)
  metrics["policy/entropy"] = jax.lax.stop_gradient(ent)
  if loss_cfg.entropy_coef:
    loss = loss - loss_cfg.entropy_coef * ent
  return loss, metrics


def actor_step(
  state: state_lib.TrainState,
  batch: PPOBatch,
  rng: jax.Array,
  *,
  model: transformer.Actor,
  tx: optax.GradientTransformation,
  rl: rl_config.RLConfig,
  temperature: float,
  vocab_limit: int,
  num_micro: int,
) -> tuple[state_lib.TrainState, dict[str, jax.Array]]:
  """One PPO policy update on a minibatch, accumulated over micro-batches."""
  del rng  # the forward is deterministic (no dropout)
  norm = losses.normalizer_for(batch.trainable)
  pos_norm = None
  if rl.loss.positive_nll_coef:
    if batch.positive is None:
      raise ValueError(
        "rl.loss.positive_nll_coef > 0 needs PPOBatch.positive (the solved"
        " episodes' tokens)."
      )
    pos_norm = losses.normalizer_for(batch.positive)
  loss_fn = functools.partial(
    _actor_loss,
    model=model,
    rl=rl,
    temperature=temperature,
    vocab_limit=vocab_limit,
    norm=norm,
    pos_norm=pos_norm,
  )
  grads, metrics = _accumulate(loss_fn, state.params, batch, num_micro)
  metrics["grad_norm/actor"] = optax.tree.norm(grads)
  return state.apply_gradients(grads, tx), metrics


def _critic_loss(params, micro, *, model, rl, norm):
  values = shifted_values(
    critic_outputs(
      model,
      params,
      micro.tokens,
      micro.valid,
      micro.pack,
      micro.critic_prefix,
      micro.critic_prefix_valid,
    )
  )
  loss_cfg = rl.loss
  loss, diag = losses.clipped_value_loss(
    values,
    micro.old_values,
    micro.returns,
    micro.trainable,
    clip_eps=loss_cfg.value_clip,
    agg_mode=loss_cfg.agg_mode,
    norm=norm,
    norm_length=loss_cfg.norm_length,
  )
  metrics = {"loss/critic": loss, **{f"critic/{k}": v for k, v in diag.items()}}
  return loss_cfg.value_coef * loss, metrics


def critic_step(
  state: state_lib.TrainState,
  batch: PPOBatch,
  rng: jax.Array,
  *,
  model: transformer.Critic,
  tx: optax.GradientTransformation,
  rl: rl_config.RLConfig,
  num_micro: int,
) -> tuple[state_lib.TrainState, dict[str, jax.Array]]:
  """One clipped value-loss update on a minibatch (micro-batched)."""
  del rng
  norm = losses.normalizer_for(batch.trainable)
  loss_fn = functools.partial(_critic_loss, model=model, rl=rl, norm=norm)
  grads, metrics = _accumulate(loss_fn, state.params, batch, num_micro)
  metrics["grad_norm/critic"] = optax.tree.norm(grads)
  return state.apply_gradients(grads, tx), metrics


def _sft_loss(params, micro, *, model, norm):
  stats = shifted_token_stats(
    model, params, micro["tokens"], micro["valid"], extra=("argmax_hit",)
  )
  mask = micro["trainable"]
  nll = losses.token_mean(-stats["logp"], mask, norm)
  acc = losses.token_mean(stats["argmax_hit"].astype(jnp.float32), mask, norm)
  return nll, {"sft/loss": nll, "sft/token_accuracy": acc}


def sft_step(
  state: state_lib.TrainState,
  batch: dict[str, jax.Array],
  rng: jax.Array,
  *,
  model: transformer.Actor,
  tx: optax.GradientTransformation,
  num_micro: int,
) -> tuple[state_lib.TrainState, dict[str, jax.Array]]:
  """Next-token cross-entropy on the trainable (action) tokens only.

  Args:
    state: the actor's train state.
    batch: `tokens` [B, T] int32, `valid` and `trainable` [B, T] bool.
    rng: unused (no dropout); kept for the step signature.
    model: the actor.
    tx: its optimiser.
    num_micro: micro-batches to accumulate over.

  Returns:
    (new state, {"sft/loss", "sft/token_accuracy", "grad_norm/actor"}).
  """
  del rng
  norm = losses.normalizer_for(batch["trainable"])
  loss_fn = functools.partial(_sft_loss, model=model, norm=norm)
  grads, metrics = _accumulate(loss_fn, state.params, batch, num_micro)
  metrics["grad_norm/actor"] = optax.tree.norm(grads)
  return state.apply_gradients(grads, tx), metrics


def epoch_order(
  update_rng: jax.Array, epoch: jax.Array, *, rows: int, minibatches: int
) -> jax.Array:
  """[M, rows // M] the rows of each minibatch of an epoch (a permutation)."""
  size = rows // minibatches
  perm = jax.random.permutation(keys.epoch(update_rng, epoch), rows)
  return perm[: minibatches * size].reshape(minibatches, size)


def ppo_epoch(
  actor: state_lib.TrainState,
  critic: state_lib.TrainState | None,
  batch: PPOBatch,
  update_rng: jax.Array,
  epoch: jax.Array,
  packs: tuple[jax.Array, jax.Array] | None = None,
  *,
  actor_step: Callable | None,
  critic_step: Callable | None,
  minibatches: int,
  batch_sharding: jax.sharding.Sharding,
):
  """One pass over the batch in shuffled minibatches (jitted by `Learner`).

  Args:
    actor: the actor's state (not updated when `actor_step` is None).
    critic: the critic's state, or None.
    batch: the iteration's [B, T] `PPOBatch`, on the devices.
    update_rng: the iteration's update key (`keys.ppo_iteration`).
    epoch: int32 scalar, the epoch's index.
    packs: None (rows run padded), or each minibatch's packing in the
      order `epoch_order` gives: src [M, micro-batches * R, T] and dst
      [M, B // M, T] (see `PPOBatch.pack_src`).
    actor_step: `steps.actor_step` with its hyperparameters bound, or None
      when the actor does not train this iteration.
    critic_step: `steps.critic_step` bound likewise, or None.
    minibatches: M; each minibatch holds B // M rows.
    batch_sharding: how a minibatch's rows are laid out on the mesh.

  Returns:
    (actor, critic, metrics): the metrics of each step stacked over the M
    minibatches, under "actor" and "critic".
  """
  order = epoch_order(
    update_rng, epoch, rows=batch.tokens.shape[0], minibatches=minibatches
  )

  def one_minibatch(carry, xs):
    actor, critic = carry
    m, idx, pack = xs
    minibatch = jax.tree.map(lambda x: x[idx], batch)
    minibatch = jax.lax.with_sharding_constraint(minibatch, batch_sharding)
    if pack is not None:
      minibatch = minibatch.replace(pack_src=pack[0], pack_dst=pack[1])
    step_rng = keys.minibatch(update_rng, epoch, m)
    out = {}
    if actor_step is not None:
      actor, out["actor"] = actor_step(actor, minibatch, step_rng)
    if critic_step is not None:
      critic, out["critic"] = critic_step(critic, minibatch, step_rng)
    return (actor, critic), out

  (actor, critic), metrics = jax.lax.scan(
    one_minibatch,
    (actor, critic),
    (jnp.arange(minibatches, dtype=jnp.int32), order, packs),
  )
  return actor, critic, metrics


def no_values(logp_bt: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Values of a critic-free estimator: [B, T] and [B] zeros."""
  return jnp.zeros_like(logp_bt), jnp.zeros(logp_bt.shape[:1], jnp.float32)


def bootstrap_values(
  truncated_b: jax.Array, after_last_b: jax.Array
) -> jax.Array:
  """[B] the value a truncated row bootstraps from; 0 where it ended."""
  return jnp.where(truncated_b, after_last_b, 0.0)
