"""The rollout KV cache is sized by the episode token budget (`cache_len_for`).

A random model behind `SamplerPolicy` samples every turn for real through
the cache. Its stop ids are a band of 40 bytes (not the format's), so its
turns end after a few tokens; the environment reads them as format errors
and answers each with an observation, so episodes run many turns until the
token budget ends them. The same rollouts with the old turn-sized cache
(no compaction) must give the same episodes.
"""

import dataclasses
import types

import jax
import numpy as np
import pytest

from codeagent_rl.envs import code_env
from codeagent_rl.models import chat
from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.rollout import agent_loop
from codeagent_rl.rollout import continuous
from configs import long_horizon
from configs import tiny
from tests.helpers import envs
from tests.helpers import models
from tests.helpers import policies

TOK = tokenizer_lib.ByteTokenizer()
FMT = chat.ByteProtocolFormat(TOK)
# Up to 40 turns of at most 24 tokens: the 700-token budget ends episodes
# after 12-15 turns, long before the turn budget.
ENV = code_env.EnvConfig(
  max_turns=40,
  max_tokens_per_turn=24,
  max_total_tokens=700,
  max_wall_s=60.0,
  obs_max_bytes=64,
)
TASKS = [
  dataclasses.replace(
    envs.add_task([(3, 4)], [(10, 20)]),
    task_id=f"add{i}",
    prompt=f"Add two numbers (task {i}).",
  )
  for i in range(5)
]
SLOTS = 2


def _by_turns(env_config, prompt_len, fmt):
  """The turn-sized bound `cache_len_for` returned before: a reference."""
  around = len(fmt.observation_ids("", action_ended=False))
  obs_chunk = agent_loop._bucket(env_config.obs_max_bytes + around)
  return agent_loop._bucket(prompt_len) + env_config.max_turns * (
    env_config.max_tokens_per_turn + obs_chunk
  )


def _one_call(env_config, fmt):
  """The largest write of one call: an action or an observation chunk."""
  around = len(fmt.observation_ids("", action_ended=False))
  obs_chunk = agent_loop._bucket(env_config.obs_max_bytes + around)
  return max(env_config.max_tokens_per_turn, obs_chunk)


# One worker runs the module's tests, so the rollouts below happen once
# (each of two workers spent ~9 s on them).
pytestmark = pytest.mark.xdist_group("cache_len")


@pytest.fixture(scope="module")
def rollouts(module_pool):
  """{(loop, "budget" | "turns"): (rollout, log-probs, compactions)}."""
  env = code_env.CodeEnv(module_pool, TOK, ENV)
  cfg, actor, params = models.random_actor(TOK.vocab_size)
  sampler = sampler_lib.Sampler(
    actor,
    cfg,
    sampler_lib.SamplerConfig(
      temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=24
    ),
    pad_id=TOK.pad_id,
  )
  compactions = []
  compact = sampler.compact
  sampler.compact = lambda state: compactions.append(1) or compact(state)
  # What `SamplerPolicy` reads of a format: its pad id and stop ids.
  stopping = types.SimpleNamespace(
    pad_id=TOK.pad_id, stop_ids=tuple(range(100, 140))
  )
  prompt_len = max(len(env.reset(t).prompt_ids) for t in TASKS)
  lengths = {
    "budget": agent_loop.cache_len_for(ENV, prompt_len, env.format),
    "turns": _by_turns(ENV, prompt_len, env.format),
  }
  groups = list(range(len(TASKS)))
  out = {}
  for loop in ("lockstep", "slots"):
    for name, cache_len in lengths.items():
      compactions.clear()
      policy = policies.EpisodeLogProbs(
        agent_loop.SamplerPolicy(sampler, params, stopping, cache_len),
        env,
        TASKS,
      )
      rng = jax.random.PRNGKey(1)
      if loop == "lockstep":
        rollout = agent_loop.collect(env, policy, TASKS, groups, rng)
      else:
        rollout = continuous.collect(
          env, policy, TASKS, groups, rng, slots=SLOTS
        )
      out[loop, name] = (rollout, policy.log_probs, len(compactions))
  out["lengths"] = lengths
  return out


@pytest.mark.parametrize("loop", ["lockstep", "slots"])
def test_a_budget_sized_cache_gives_the_turn_sized_caches_episodes(
  rollouts, loop
):
  small, big = rollouts["lengths"]["budget"], rollouts["lengths"]["turns"]
  assert small < big / 4
  got, got_logp, compactions = rollouts[loop, "budget"]
  want, want_logp, big_compactions = rollouts[loop, "turns"]
  # The episodes ran into the token budget after many turns, the rows
  # filled to within one call of it: the worst case the cache is sized for.
  stops = [e.stop_reason for e in got.episodes]
  assert stops.count(code_env.STOP_MAX_TOTAL_TOKENS) >= 3, stops
  assert max(len(e.turns) for e in got.episodes) >= 12
  assert int(got.batch.length.max()) > ENV.max_total_tokens - 24
  # The small cache had to be compacted (every write still fit: the
  # sampler raises before one would not); the old one never was.
  assert compactions >= 2
  assert big_compactions == 0
  for field in ("tokens", "trainable", "valid", "length", "truncated"):
    np.testing.assert_array_equal(
      getattr(got.batch, field), getattr(want.batch, field), field
    )
  assert stops == [e.stop_reason for e in want.episodes]
  for a, b in zip(got_logp, want_logp, strict=True):
    assert len(a) == len(b)
    np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize(
  "module,preset,prompt_len",
  [
    # The longest prompt of each config's tasks (`data.longest_prompt`).
    (tiny, "", 202),
    (tiny, "smoke", 197),
    (long_horizon, "", 265),
    (long_horizon, "smoke", 265),
  ],
)
def test_the_budget_bounds_long_episodes_and_keeps_short_ones(
  module, preset, prompt_len
):
  env_config = code_env.EnvConfig(**module.get_config(preset).env.to_dict())
  got = agent_loop.cache_len_for(env_config, prompt_len, FMT)
  old = _by_turns(env_config, prompt_len, FMT)
  # Never below one episode's budget plus the largest call after it.
  assert got >= env_config.max_total_tokens + _one_call(env_config, FMT)
  if module is tiny:
    # Two turns: the turn bound is the smaller one and stays (the demo's
    # numbers do not move).
    assert got == old
  else:
    # 64 (smoke: 10) turns of 80 + 160 slots against a 3072 (768) budget:
    # 3328 slots, not 15648 (smoke: 1024, not 2688).
    assert got * (4 if preset == "" else 2) < old
