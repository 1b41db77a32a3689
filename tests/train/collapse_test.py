"""The long-horizon collapse of PPO with a critic, reproduced on a small preset.

What happened (configs/long_horizon.py, GAE, seed 0): after one critic
warm-up iteration the first actor update took the training reward from
0.75 to 0.06 and episodes from 6 to 2.4 turns. The critic then explained
none of the returns (explained variance 0.16 on the batch, its lambda-0.95
targets themselves mostly its own guesses), and with one lambda of 0.95
per token the terminal reward reaches only the last ~20 tokens of an
episode: every other token's advantage is a sum of the critic's value
differences, noise that whitening scales to unit size. The update moved
the policy by a KL of 0.045 per token (GRPO's first update: 0.0006). The
same update at lambda 1, or with the critic-trust rule
(`rl.advantage.critic_trust`, the default now), keeps the episode's outcome
in every token's advantage.

These tests run the learner's own advantage path (`Learner.targets`) on
the values of a critic after a real warm-up update, on long rows, and ask
the question the collapse answers: does the advantage of an early turn
still say whether its episode succeeded?
"""

import copy
import dataclasses
import functools

import jax
import numpy as np
import pytest

from codeagent_rl.train import experiment
from codeagent_rl.train import metrics as metrics_lib
from codeagent_rl.train import ppo as ppo_lib
from codeagent_rl.train import steps
from configs import long_horizon
from tests.helpers import learner_steps
from tests.helpers import policies

BATCH, LENGTH, PROMPT = 16, 768, 16


@functools.cache
def _base_learner():
  config = long_horizon.get_config("smoke")
  config.ppo.prompts_per_iteration = BATCH // config.ppo.samples_per_prompt
  config.ppo.minibatches = 1
  config.ppo.micro_batch_size = BATCH
  config.ppo.logprob_micro_batch_size = BATCH
  config.ppo.length_bucket = LENGTH
  config.ppo.critic_warmup_iterations = 1
  config.env.max_total_tokens = LENGTH
  config.model.num_layers = 1
  exp = experiment.Experiment.from_config(config)
  return ppo_lib.Learner(exp, *exp.make_mesh())


def _learner(**advantage):
  """The base learner with other advantage settings.

  Only its targets depend on them: the steps bind the losses, not the
  lambdas.
  """
  base = _base_learner()
  rl = dataclasses.replace(
    base.exp.rl,
    advantage=dataclasses.replace(base.exp.rl.advantage, **advantage),
  )
  learner = copy.copy(base)
  learner.exp = dataclasses.replace(base.exp, rl=rl)
  learner.targets = jax.jit(functools.partial(steps.targets, rl=rl))
  return learner


def _rows(seed):
  """Long rows: turns of 12 policy tokens between 6 observation tokens."""
  batch = policies.ragged_rollout(BATCH, LENGTH, PROMPT, seed=seed)
  pos = np.arange(LENGTH)[None, :]
  turns = ((pos - PROMPT) % 18) < 12
  return batch.replace(trainable=batch.trainable & turns)


# Successes and failures in every group of four.
TOTAL = np.asarray([1, 0, 1, 0, 0, 1, 1, 0] * 2, np.float32)


@functools.cache
def _warmed_up(lam_critic):
  """(batch, actor log-probs, critic values) after a critic warm-up.

  The critic is warmed up for one iteration on one batch (actor frozen),
  then reads another batch. Of the advantage settings only `lam_critic`
  (its targets) changes the warm-up, so the tests share one per value.
  """
  learner = _learner(lam_critic=lam_critic)
  sft = learner_steps.actor_params_of(learner)
  learner.ref_params = sft
  states = learner.initial_states(sft, jax.random.key(1))
  states, metrics = learner.update(
    states,
    _rows(1),
    TOTAL[::-1].copy(),
    0,
    jax.random.key(2),
    metrics_lib.PhaseTimer(),
  )
  assert metrics["policy/actor_trained"] == 0.0  # the warm-up
  batch = _rows(2)
  tokens, valid = batch.tokens, batch.valid
  logp = learner.log_probs(states[0].params, tokens, valid)
  values, _ = learner.values(states[1].params, tokens, valid, batch.length)
  return batch, logp, values


def _early_turn_outcome_corr(learner):
  """Correlation over rows of the first turns' mean advantage and outcome.

  The advantages of `_warmed_up`'s batch, from its critic's values.
  """
  batch, logp, values = _warmed_up(learner.exp.rl.advantage.lam_critic)
  adv, _, targets = learner.targets(
    TOTAL,
    batch.trainable,
    logp,
    logp,  # the reference is the actor: no KL term
    values,
    batch.truncated,
    np.zeros(BATCH, np.float32),
    batch.group_id,
  )
  adv = np.asarray(adv)
  # Each row's first third of policy tokens: at least ~170 policy tokens
  # from the row's end, where 0.95 per token leaves 2e-4 of the reward.
  rank = np.cumsum(batch.trainable, axis=1)
  early = batch.trainable & (rank <= batch.trainable.sum(1)[:, None] // 3)
  per_row = (adv * early).sum(axis=1) / early.sum(axis=1)
  corr = float(np.corrcoef(per_row, TOTAL)[0, 1])
  return corr, {k: float(v) for k, v in jax.device_get(targets).items()}


@pytest.mark.parametrize(
  "recipe",
  [
    {"lam_critic": 0.95},  # the previous recipe
    {"lam_critic": 1.0},  # decoupled lambdas alone
    {"lam_critic": 1.0, "lam_length_alpha": 0.05},  # VAPO's lambdas alone
  ],
)
def test_lambda_below_one_on_an_unlearnt_critic_loses_the_outcome(recipe):
  """The first third of each row's advantages carries no outcome."""
  learner = _learner(lam=0.95, critic_trust="none", **recipe)
  corr, _ = _early_turn_outcome_corr(learner)
  assert abs(corr) < 0.5, corr


@pytest.mark.parametrize(
  "fix",
  [
    {"lam": 1.0, "critic_trust": "none"},
    {"lam": 0.95, "critic_trust": "explained_variance"},  # the default
  ],
)
def test_the_outcome_reaches_every_turn_after_the_fix(fix):
  learner = _learner(lam_critic=1.0, **fix)
  corr, metrics = _early_turn_outcome_corr(learner)
  assert corr > 0.9, corr
  if fix["critic_trust"] != "none":
    # The critic explains little of the returns: lambda stays near 1.
    assert metrics["advantage/critic_trust"] < 0.3
    assert metrics["advantage/actor_lambda_mean"] > 0.985
