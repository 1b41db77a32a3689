"""Slot refill (continuous batching) against lockstep, and the sampler side.

Scripted policies pick each row's script by its prompt, so the same episode
gets the same turns whichever row it runs in; the env is a real
(process-backend) pool.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.envs import code_env
from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.models import transformer
from codeagent_rl.rollout import agent_loop
from codeagent_rl.rollout import continuous
from codeagent_rl.tasks import schema
from tests.helpers import models
from tests.helpers import policies

TOK = tokenizer_lib.ByteTokenizer()
ENV = code_env.EnvConfig(
  max_turns=4,
  max_tokens_per_turn=120,
  max_total_tokens=1200,
  max_wall_s=60.0,
  obs_max_bytes=200,
)
GOOD = "def double(x):\n  return 2 * x\n"
BAD = "def double(x):\n  return x + 2\n"
RUN = f"<run>{BAD}</run>"
SUBMIT = f"<submit>{GOOD}</submit>"
# Episode i's turns: 1 to 4 turns, in an order where the long ones start
# first (rows free up at different turns); episode 3 hits max_turns.
SCRIPTS = [
  [RUN, RUN, SUBMIT],
  [SUBMIT],
  [RUN, SUBMIT],
  [RUN, RUN, RUN, RUN],
  [f"<submit>{BAD}</submit>"],
]


def _task(i):
  tests = lambda xs: tuple({"args": [x], "expected": 2 * x} for x in xs)  # noqa: E731
  return schema.Task(
    task_id=f"t{i}",
    prompt=f"Write double(x) returning 2 * x (task {i}).",
    entry_point="double",
    kind="function",
    visible_tests=tests([1, 5]),
    hidden_tests=tests([0, 3, 7]),
    heldout_tests=tests([20, 21]),
    reference_solution=GOOD,
    metadata={},
  )


TASKS = [_task(i) for i in range(len(SCRIPTS))]
GROUPS = [0, 0, 1, 1, 2]


class PromptScripted:
  """Plays episode i's script in whichever row holds task i's prompt."""

  def __init__(self, env, scripts=SCRIPTS, tasks=TASKS):
    self.by_prompt = {
      tuple(env.reset(t).prompt_ids): i for i, t in enumerate(tasks)
    }
    self.scripts = [[TOK.encode(t) for t in turns] for turns in scripts]
    self.episode = []
    self.turn = {}
    self.budgets = []
    self.restarts = 0
    self.observed = {}

  def _start(self, row, prompt):
    e = self.by_prompt[tuple(prompt)] if prompt else None
    self.episode[row] = e
    if e is not None:
      self.turn[e] = 0
      self.observed[e] = []

  def begin(self, prompts):
    self.episode = [None] * len(prompts)
    for row, prompt in enumerate(prompts):
      self._start(row, prompt)

  def restart(self, rows, prompts):
    for row, prompt in zip(rows, prompts, strict=True):
      self.restarts += bool(prompt)
      self._start(row, prompt)

  def generate(self, budgets, rng):
    del rng
    self.budgets.append(list(budgets))
    out = []
    for row, budget in enumerate(budgets):
      e = self.episode[row]
      if budget == 0:
        out.append(([], []))
        continue
      ids = self.scripts[e][self.turn[e]][:budget]
      self.turn[e] += 1
      out.append((ids, [-0.5] * len(ids)))
    return out

  def observe(self, observations):
    for row, obs in enumerate(observations):
      if obs:
        self.observed[self.episode[row]].append(list(obs))

  def end(self):
    self.ended = True


@pytest.fixture(scope="module")
def env(module_pool):
  return code_env.CodeEnv(module_pool, TOK, ENV)


def _assert_same_batch(a, b):
  for field in ("tokens", "trainable", "valid", "length", "truncated"):
    np.testing.assert_array_equal(
      np.asarray(getattr(a, field)), np.asarray(getattr(b, field)), field
    )
  np.testing.assert_array_equal(a.group_id, b.group_id)


@pytest.fixture(scope="module")
def lockstep(env):
  policy = PromptScripted(env)
  out = agent_loop.collect(env, policy, TASKS, GROUPS, jax.random.PRNGKey(0))
  return out, policy


@pytest.mark.parametrize("slots", [1, 2, len(TASKS)])
def test_same_episodes_as_lockstep_in_task_order(env, lockstep, slots):
  want, want_policy = lockstep
  policy = PromptScripted(env)
  out = continuous.collect(
    env, policy, TASKS, GROUPS, jax.random.PRNGKey(0), slots=slots
  )
  out.batch.check()
  _assert_same_batch(out.batch, want.batch)
  assert [e.stop_reason for e in out.episodes] == [
    e.stop_reason for e in want.episodes
  ]
  assert [e.task.task_id for e in out.episodes] == [t.task_id for t in TASKS]
  assert [len(e.turns) for e in out.episodes] == [3, 1, 2, 4, 1]
  np.testing.assert_allclose(
    [e.outcome.suite_a for e in out.episodes], [1, 1, 1, 0, 0]
  )
  assert policy.observed == want_policy.observed
  assert out.render_ok.all()
  assert set(out.timings) == {"generate_s", "env_s"}
  # Every task after the first `slots` starts by a restart, in a row of
  # the policy's `slots`.
  assert policy.restarts == len(TASKS) - slots
  assert {len(b) for b in policy.budgets} == {slots}
  assert policy.ended


def test_rows_refill_as_soon_as_an_episode_ends(env):
  policy = PromptScripted(env)
  continuous.collect(env, policy, TASKS, GROUPS, jax.random.PRNGKey(0), slots=2)
  # Turn by turn, the episode in each row (scripts of 3, 1, 2, 4, 1
  # turns): no row idles while a task is waiting; only the end of the
  # rollout leaves a row empty.
  idle = [[b == 0 for b in budgets] for budgets in policy.budgets]
  assert idle == [
    [False, False],  # episodes 0 and 1
    [False, False],  # 0 and 2 (1 submitted)
    [False, False],  # 0 and 2
    [False, False],  # 3 and 4 (0 and 2 submitted)
    [False, True],  # 3; 4 submitted and no task is left
    [False, True],
    [False, True],
  ]
  # Lockstep over the same tasks idles on 9 of its 20 row-turns.
  lock = PromptScripted(env)
  agent_loop.collect(env, lock, TASKS, GROUPS, jax.random.PRNGKey(0))
  assert sum(b == 0 for bs in lock.budgets for b in bs) == 20 - 11


class CutAfterFirstTurn:
  """Cuts episodes in `victims` once they are open after one turn."""

  def __init__(self, victims):
    self.victims = set(victims)
    self.calls = []
    self.resets = 0

  def reset(self):
    self.resets += 1

  def decide(self, episode_ids, prefixes, turns):
    self.calls.append((list(episode_ids), [len(p) for p in prefixes], turns))
    return [
      e in self.victims and t == 1
      for e, t in zip(episode_ids, turns, strict=True)
    ]


def test_the_stopper_cuts_the_episodes_it_names(env, lockstep):
  stopper = CutAfterFirstTurn({0, 3})
  policy = PromptScripted(env)
  out = continuous.collect(
    env,
    policy,
    TASKS,
    GROUPS,
    jax.random.PRNGKey(0),
    slots=2,
    stopper=stopper,
  )
  assert stopper.resets == 1
  stops = [e.stop_reason for e in out.episodes]
  assert stops[0] == stops[3] == code_env.STOP_ADAPTIVE
  assert stops[1] == stops[2] == stops[4] == code_env.STOP_SUBMIT
  np.testing.assert_array_equal(
    out.batch.truncated, [True, False, False, True, False]
  )
  assert [len(e.turns) for e in out.episodes] == [1, 1, 2, 1, 1]
  # The stopper saw each open episode's whole prefix (observation
  # appended); a cut row keeps that observation, the others are unchanged.
  want = lockstep[0].batch
  seen = {
    (e, n)
    for ids, lens, _ in stopper.calls
    for e, n in zip(ids, lens, strict=True)
  }
  for e in (0, 3):
    n = int(out.batch.length[e])
    assert (e, n) in seen
    assert not out.batch.trainable[e, n - 1]
    assert policy.observed[e] == []  # nothing fed after the cut
  for e in (1, 2, 4):
    np.testing.assert_array_equal(out.batch.tokens[e], want.tokens[e])
  # Only open episodes are asked: turn 1 episode 0 (1 submitted), turn 2
  # episodes 2 and 3 (in the rows 0 and 1 freed), turn 3 none (submits).
  assert [(ids, turns) for ids, _, turns in stopper.calls] == [
    ([0], [1]),
    ([2, 3], [1, 1]),
  ]
  assert "stop_s" in out.timings
  assert out.render_ok.all()


@pytest.mark.parametrize(
  "slots,match",
  [
    (0, r"slots=0: must be an integer >= 1"),
    (-2, r"slots=-2: must be an integer >= 1"),
    (True, r"slots=True: must be an integer"),
    (2.0, r"slots=2\.0: must be an integer"),
    (6, r"slots=6 but only 5 tasks"),
  ],
)
def test_bad_slots_are_refused(env, slots, match):
  with pytest.raises(ValueError, match=match):
    continuous.collect(
      env,
      PromptScripted(env),
      TASKS,
      GROUPS,
      jax.random.PRNGKey(0),
      slots=slots,
    )


def test_row_keys_depend_on_episode_and_turn_only():
  rng = jax.random.PRNGKey(7)
  keys = continuous.row_keys(rng, [3, 0, 3], [2, 1, 2])
  want = jax.random.fold_in(jax.random.fold_in(rng, 3), 2)
  np.testing.assert_array_equal(keys[0], want)
  np.testing.assert_array_equal(keys[0], keys[2])
  assert not np.array_equal(keys[0], keys[1])


# --- The sampler side -------------------------------------------------------

CFG = models.transformer_config(vocab_size=40, init_std=0.5)
ACTOR = transformer.Actor(CFG)
GREEDY = sampler_lib.SamplerConfig(
  temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=4
)
STOP = jnp.array([-1], jnp.int32)
# One sampler for the greedy tests: its jitted steps compile once.
SAMPLER = sampler_lib.Sampler(ACTOR, CFG, GREEDY, pad_id=0)


@pytest.fixture(scope="module")
def params():
  valid = jnp.ones((1, 4), bool)
  # Jitted: an eager init dispatches op by op and took most of this file.
  return jax.jit(ACTOR.init)(
    jax.random.PRNGKey(0),
    jnp.zeros((1, 4), jnp.int32),
    transformer.positions_from_valid(valid),
    valid,
  )


def _prefill(sampler, params, prompts, max_len=32):
  width = max(len(p) for p in prompts)
  tokens = np.zeros((len(prompts), width), np.int32)
  valid = np.zeros((len(prompts), width), bool)
  for i, p in enumerate(prompts):
    tokens[i, : len(p)] = p
    valid[i, : len(p)] = True
  state = sampler.start(len(prompts), max_len)
  return sampler.extend(params, state, tokens, valid)


def test_a_restarted_row_forgets_its_old_conversation(params):
  sampler = SAMPLER
  state = _prefill(sampler, params, [[5, 6, 7, 8], [11, 12, 13]])
  state, _ = sampler.decode(
    params, state, jax.random.PRNGKey(0), jnp.array([4, 2]), STOP
  )
  other_logits = np.asarray(state.last_logits[1])
  new = [21, 22, 23]
  tokens = np.array([new + [0], [0] * 4], np.int32)
  valid = np.array([[1, 1, 1, 0], [0] * 4], bool)
  state = sampler.restart(params, state, np.array([True, False]), tokens, valid)
  # The new prompt went to the row's first slots: the write index, past
  # them already (4 prompt + 4 decode slots), did not move.
  assert int(state.cache.index) == 8
  np.testing.assert_array_equal(state.next_pos, [3, 5])
  np.testing.assert_array_equal(state.last_logits[1], other_logits)
  fresh = _prefill(sampler, params, [new, [1]])
  np.testing.assert_allclose(
    state.last_logits[0], fresh.last_logits[0], atol=1e-5
  )
  # Decoding on: row 0 continues the new prompt as a fresh state does, and
  # row 1 its own conversation as if nothing had happened.
  state, out = sampler.decode(
    params, state, jax.random.PRNGKey(0), jnp.array([4, 4]), STOP
  )
  _, want = sampler.decode(
    params, fresh, jax.random.PRNGKey(0), jnp.array([4, 4]), STOP
  )
  np.testing.assert_array_equal(out.tokens[0], want.tokens[0])
  # Compaction keeps every conversation: the same next tokens.
  compacted = sampler.compact(
    jax.tree.map(jnp.copy, state)  # compact donates its input
  )
  assert int(compacted.cache.index) == int(state.cache.valid.sum(1).max())
  _, a = sampler.decode(
    params, state, jax.random.PRNGKey(0), jnp.array([3, 3]), STOP
  )
  _, b = sampler.decode(
    params, compacted, jax.random.PRNGKey(0), jnp.array([3, 3]), STOP
  )
  np.testing.assert_array_equal(a.tokens, b.tokens)


def test_reset_rows_then_extend_equals_a_fresh_prompt(params):
  sampler = SAMPLER
  state = _prefill(sampler, params, [[5, 6, 7, 8], [11, 12, 13, 14]])
  state = sampler.reset_rows(state, np.array([False, True]))
  np.testing.assert_array_equal(state.next_pos, [4, 0])
  assert not np.asarray(state.cache.valid[1]).any()
  tokens = np.array([[0, 0, 0, 0], [21, 22, 23, 0]], np.int32)
  valid = np.array([[0, 0, 0, 0], [1, 1, 1, 0]], bool)
  state = sampler.extend(params, state, tokens, valid)
  fresh = _prefill(sampler, params, [[1], [21, 22, 23]])
  np.testing.assert_allclose(
    state.last_logits[1], fresh.last_logits[1], atol=1e-5
  )
  with pytest.raises(ValueError, match=r"rows has shape \(3,\)"):
    sampler.reset_rows(state, np.zeros((3,), bool))


def test_per_row_keys_make_a_row_independent_of_its_batch(params):
  cfg = sampler_lib.SamplerConfig(
    temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=4
  )
  sampler = sampler_lib.Sampler(ACTOR, CFG, cfg, pad_id=0)
  keys = jax.random.split(jax.random.key(3), 2)
  both = _prefill(sampler, params, [[5, 6, 7], [11, 12, 13]])
  _, out = sampler.decode(params, both, keys, jnp.array([4, 4]), STOP)
  # Row 1 alone (in another row of another batch) with its key: same draw.
  alone = _prefill(sampler, params, [[11, 12, 13], [5, 6, 7]])
  _, swapped = sampler.decode(
    params, alone, keys[::-1], jnp.array([4, 4]), STOP
  )
  np.testing.assert_array_equal(out.tokens, swapped.tokens[::-1])


def test_sampler_policy_refills_rows_and_matches_a_full_forward(env):
  cfg, actor, params = models.random_actor(TOK.vocab_size)
  # A random model's turn runs to its budget unparsed, which ends the
  # episode: one turn each. 20 episodes in 2 rows fill the write index
  # (12 slots a turn) past a cache sized for one episode.
  env_cfg = code_env.EnvConfig(
    max_turns=1,
    max_tokens_per_turn=12,
    max_total_tokens=400,
    max_wall_s=60.0,
    obs_max_bytes=64,
  )
  small_env = code_env.CodeEnv(env.pool, TOK, env_cfg)
  sampler = sampler_lib.Sampler(
    actor,
    cfg,
    sampler_lib.SamplerConfig(
      temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=12
    ),
    pad_id=TOK.pad_id,
  )
  compactions = []
  compact = sampler.compact
  sampler.compact = lambda state: compactions.append(1) or compact(state)
  tasks = [_task(i) for i in range(20)]
  prompt_len = max(len(small_env.reset(t).prompt_ids) for t in tasks)
  policy = policies.EpisodeLogProbs(
    agent_loop.SamplerPolicy(
      sampler,
      params,
      small_env.format,
      agent_loop.cache_len_for(env_cfg, prompt_len, small_env.format),
    ),
    small_env,
    tasks,
  )
  out = continuous.collect(
    small_env, policy, tasks, list(range(20)), jax.random.PRNGKey(3), slots=2
  )
  assert policy.inner._state is None  # the KV cache is released afterwards
  assert compactions
  batch = out.batch
  batch.check()
  trainable = np.asarray(batch.trainable)
  assert trainable.sum(axis=1).min() >= 1
  # Each action was sampled from its own episode's context alone (never a
  # previous episode's cache): the sampler's log-probs equal those of a
  # full forward over the episode's row.
  tokens = jnp.asarray(batch.tokens)
  valid = jnp.asarray(batch.valid)
  logits, _ = jax.jit(actor.apply)(
    params, tokens, transformer.positions_from_valid(valid), valid
  )
  logp = jax.nn.log_softmax(logits[:, :-1], -1)
  taken = np.asarray(jnp.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0])
  sampled = np.zeros(trainable.shape, np.float32)
  for e, row in enumerate(policy.log_probs):
    sampled[e, trainable[e]] = row
  np.testing.assert_allclose(
    taken[trainable[:, 1:]], sampled[:, 1:][trainable[:, 1:]], atol=2e-4
  )
