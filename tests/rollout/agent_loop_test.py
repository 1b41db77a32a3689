"""Agent loop: scripted policies against a real (process-backend) pool."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.envs import code_env
from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.models import transformer
from codeagent_rl.rl import gae
from codeagent_rl.rollout import agent_loop
from codeagent_rl.tasks import probes
from codeagent_rl.tasks import schema
from tests.helpers import models
from tests.helpers import policies

TOK = tokenizer_lib.ByteTokenizer()
ENV = code_env.EnvConfig(
  max_turns=3,
  max_tokens_per_turn=120,
  max_total_tokens=1200,
  max_wall_s=60.0,
  obs_max_bytes=200,
)
GOOD = "def double(x):\n  return 2 * x\n"
BAD = "def double(x):\n  return x + 2\n"


def _task(task_id="double"):
  tests = lambda xs: tuple({"args": [x], "expected": 2 * x} for x in xs)  # noqa: E731
  return schema.Task(
    task_id=task_id,
    prompt="Write double(x) returning 2 * x.",
    entry_point="double",
    kind="function",
    visible_tests=tests([1, 5]),
    hidden_tests=tests([0, 3, 7, -4, 11]),
    heldout_tests=tests(range(20, 45)),
    reference_solution=GOOD,
    metadata={},
  )


class ScriptedPolicy:
  """Emits pre-written turns (as token ids) and records what it was shown."""

  def __init__(self, scripts):
    self.scripts = [[TOK.encode(t) for t in turns] for turns in scripts]
    self.turn = [0] * len(scripts)
    self.prompts = None
    self.observed = [[] for _ in scripts]
    self.budgets = []

  def begin(self, prompts):
    self.prompts = [list(p) for p in prompts]

  def generate(self, budgets, rng):
    del rng
    self.budgets.append(list(budgets))
    out = []
    for i, budget in enumerate(budgets):
      if budget == 0:
        out.append(([], []))
        continue
      ids = self.scripts[i][self.turn[i]][:budget]
      self.turn[i] += 1
      out.append((ids, [-0.5] * len(ids)))
    return out

  def observe(self, observations):
    for i, obs in enumerate(observations):
      if obs:
        self.observed[i].append(list(obs))

  def end(self):
    self.ended = True


@pytest.fixture(scope="module")
def env(module_pool):
  return code_env.CodeEnv(module_pool, TOK, ENV)


def test_masks_turns_and_reward_placement_exact(env):
  run_bad = f"<run>{BAD}</run>"
  submit_good = f"<submit>{GOOD}</submit>"
  policy = ScriptedPolicy(
    [
      [run_bad, submit_good],  # two turns, observation between
      [submit_good],  # one turn
      [f"<submit>{BAD}</submit>"],  # wrong answer
    ]
  )
  tasks = [_task("a"), _task("b"), _task("c")]
  out = agent_loop.collect(env, policy, tasks, [0, 0, 1], jax.random.PRNGKey(0))
  batch = out.batch
  batch.check()
  assert batch.shape == (3, ENV.max_total_tokens)
  tokens = np.asarray(batch.tokens)
  trainable = np.asarray(batch.trainable)
  prompt = policy.prompts[0]
  obs = policy.observed[0][0]
  a1, a2 = TOK.encode(run_bad), TOK.encode(submit_good)
  expected = prompt + a1 + obs + a2
  n = len(expected)
  assert tokens[0, :n].tolist() == expected
  assert np.all(tokens[0, n:] == TOK.pad_id)
  assert int(batch.length[0]) == n
  want_train = (
    [0] * len(prompt) + [1] * len(a1) + [0] * len(obs) + [1] * len(a2)
  )
  assert trainable[0, :n].astype(int).tolist() == want_train
  assert not trainable[0, n:].any()
  # The observation is framed by the real protocol ids.
  assert obs[0] == TOK.special_ids[tokenizer_lib.OBS]
  assert obs[-1] == TOK.special_ids[tokenizer_lib.OBS_END]
  assert "tests: 0/2 passed" in TOK.decode(obs)
  # Rewards: rows 0 and 1 solved it, row 2 did not.
  rewards = code_env.rewards([e.outcome for e in out.episodes])
  np.testing.assert_allclose(rewards.suite_a, [1.0, 1.0, 0.0])
  np.testing.assert_allclose(rewards.suite_b, [1.0, 1.0, 0.0])
  assert not np.asarray(batch.truncated).any()
  np.testing.assert_array_equal(batch.group_id, [0, 0, 1])
  # The terminal reward lands on the last token of the submit action.
  placed = np.asarray(gae.place_terminal_reward(rewards.total, batch.trainable))
  assert placed[0, n - 1] == 1.0 and placed[0].sum() == 1.0
  # Finished rows get no budget: turn 2 asks only row 0.
  assert policy.budgets[1] == [ENV.max_tokens_per_turn, 0, 0]
  assert [e.stop_reason for e in out.episodes] == ["submit"] * 3
  assert out.episodes[0].final_code.strip() == GOOD.strip()


def test_truncation_by_turn_budget(env):
  run = f"<run>{BAD}</run>"
  policy = ScriptedPolicy([[run, run, run, run]])
  out = agent_loop.collect(env, policy, [_task()], [0], jax.random.PRNGKey(1))
  assert bool(out.batch.truncated[0])
  assert out.episodes[0].stop_reason == code_env.STOP_MAX_TURNS
  assert out.episodes[0].outcome.suite_a == 0.0
  trainable = np.asarray(out.batch.trainable[0])
  # Three turns; the last observation is not appended (nothing follows it).
  assert len(out.episodes[0].turns) == ENV.max_turns
  assert len(policy.observed[0]) == ENV.max_turns - 1
  last_trainable = np.flatnonzero(trainable)[-1]
  assert last_trainable == int(out.batch.length[0]) - 1


def test_cut_generation_is_truncated_by_tokens_per_turn(env):
  long_code = "# " + "x" * 300 + "\n" + GOOD
  policy = ScriptedPolicy([[f"<submit>{long_code}</submit>"]])
  out = agent_loop.collect(env, policy, [_task()], [0], jax.random.PRNGKey(2))
  assert policy.budgets[0] == [ENV.max_tokens_per_turn]
  assert out.episodes[0].stop_reason == code_env.STOP_MAX_TOKENS_PER_TURN
  assert bool(out.batch.truncated[0])
  assert (
    int(np.asarray(out.batch.trainable[0]).sum()) == ENV.max_tokens_per_turn
  )


def test_prompt_longer_than_budget_is_refused(env):
  task = _task()
  small = code_env.CodeEnv(
    env.pool,
    TOK,
    code_env.EnvConfig(
      max_turns=2,
      max_tokens_per_turn=10,
      max_total_tokens=20,
      max_wall_s=10.0,
      obs_max_bytes=64,
    ),
  )
  with pytest.raises(ValueError, match="max_total_tokens is 20"):
    agent_loop.collect(
      small, ScriptedPolicy([["x"]]), [task], [0], jax.random.PRNGKey(0)
    )


def test_sampler_policy_drives_the_transformer(env):
  cfg = models.transformer_config(
    vocab_size=TOK.vocab_size,
    init_std=0.02,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    head_dim=16,
    mlp_dim=64,
  )
  actor = transformer.Actor(cfg)
  valid = jnp.ones((1, 4), bool)
  params = actor.init(
    jax.random.PRNGKey(0),
    jnp.zeros((1, 4), jnp.int32),
    transformer.positions_from_valid(valid),
    valid,
  )
  env_cfg = code_env.EnvConfig(
    max_turns=2,
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
  tasks = [_task("a"), _task("b")]
  prompt_len = max(len(small_env.reset(t).prompt_ids) for t in tasks)
  policy = policies.LogProbRecorder(
    agent_loop.SamplerPolicy(
      sampler,
      params,
      small_env.format,
      agent_loop.cache_len_for(env_cfg, prompt_len, small_env.format),
    )
  )
  cache_len = agent_loop.cache_len_for(env_cfg, prompt_len, small_env.format)
  policy.begin([small_env.reset(tasks[0]).prompt_ids] * 2)
  assert len(policies.live_cache_arrays(cfg, cache_len)) == 2  # k and v
  policy.end()
  out = agent_loop.collect(
    small_env, policy, tasks, [0, 0], jax.random.PRNGKey(3)
  )
  assert policy.inner._state is None  # the KV cache is released afterwards
  assert not policies.live_cache_arrays(cfg, cache_len)
  batch = out.batch
  batch.check()
  trainable = np.asarray(batch.trainable)
  # A random policy cannot solve it; every row made at least one turn.
  assert trainable.sum(axis=1).min() >= 1
  assert all(e.outcome.suite_a == 0 for e in out.episodes)
  # Log-probs of sampled tokens are real (negative) numbers.
  lp = policy.on_tokens(trainable)
  assert np.all(lp[trainable] < 0) and np.all(lp[~trainable] == 0)
  # Recomputing log-probs with a full forward matches the sampler's.
  tokens = jnp.asarray(batch.tokens)
  valid = jnp.asarray(batch.valid)
  logits, _ = actor.apply(
    params, tokens, transformer.positions_from_valid(valid), valid
  )
  logp = jax.nn.log_softmax(logits[:, :-1], -1)
  taken = jnp.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0]
  np.testing.assert_allclose(
    np.asarray(taken)[trainable[:, 1:]], lp[:, 1:][trainable[:, 1:]], atol=2e-4
  )


class _GatedPool:
  """Holds every submission job until the policy opens the gate."""

  def __init__(self, pool, gate):
    self.pool = pool
    self.config = pool.config
    self.gate = gate
    self.blocked = False

  def submit(self, job):
    if len(job.inputs) > 2:  # suites A + B, not the 2 visible tests
      if not self.gate.wait(timeout=10):
        self.blocked = True
    return self.pool.submit(job)


class _OpeningPolicy(ScriptedPolicy):
  """Opens the gate while generating turn 2."""

  def __init__(self, scripts, gate):
    super().__init__(scripts)
    self.gate = gate

  def generate(self, budgets, rng):
    if len(self.budgets) == 1:
      self.gate.set()
    return super().generate(budgets, rng)


def test_submissions_are_graded_while_others_generate(env):
  import threading

  gate = threading.Event()
  gated = code_env.CodeEnv(_GatedPool(env.pool, gate), TOK, ENV)
  policy = _OpeningPolicy(
    [
      [f"<submit>{GOOD}</submit>"],
      [f"<run>{BAD}</run>", f"<submit>{GOOD}</submit>"],
    ],
    gate,
  )
  out = agent_loop.collect(
    gated, policy, [_task("a"), _task("b")], [0, 1], jax.random.PRNGKey(0)
  )
  # Row 0's grading waited for turn 2's generation: it did not block it.
  assert not gated.pool.blocked
  np.testing.assert_allclose(
    [e.outcome.suite_a for e in out.episodes], [1.0, 1.0]
  )
  assert [e.stop_reason for e in out.episodes] == ["submit", "submit"]
  assert policy.budgets[1] == [0, ENV.max_tokens_per_turn]


def test_concat_joins_parts_as_one_collect_would(env):
  """Each process's share of a batch, joined, is the batch run at once."""
  submit_good = f"<submit>{GOOD}</submit>"
  scripts = [
    [f"<run>{BAD}</run>", submit_good],
    [submit_good],
    [f"<submit>{BAD}</submit>"],
  ]
  tasks = [_task("a"), _task("b"), _task("c")]
  key = jax.random.PRNGKey(0)
  whole = agent_loop.collect(
    env, ScriptedPolicy(scripts), tasks, [0, 0, 1], key
  )
  parts = [
    agent_loop.collect(env, ScriptedPolicy(scripts[:1]), tasks[:1], [0], key),
    agent_loop.collect(
      env, ScriptedPolicy(scripts[1:]), tasks[1:], [0, 1], key
    ),
  ]
  joined = agent_loop.concat(parts)
  joined.batch.check()
  for name in ("tokens", "trainable", "valid", "length", "truncated"):
    np.testing.assert_array_equal(
      getattr(joined.batch, name), getattr(whole.batch, name)
    )
  assert [e.task.task_id for e in joined.episodes] == ["a", "b", "c"]
  assert [e.outcome.suite_a for e in joined.episodes] == [
    e.outcome.suite_a for e in whole.episodes
  ]
  np.testing.assert_array_equal(joined.render_ok, whole.render_ok)
  assert joined.timings == {
    k: max(p.timings[k] for p in parts) for k in whole.timings
  }
  with pytest.raises(ValueError, match="no rollouts"):
    agent_loop.concat([])


SECRET = 37


def _probe_task():
  """A probe task (0..99): each answer depends on the probes before it."""

  def tests(xs):
    return tuple(
      {"args": [x], "expected": (x > SECRET) - (x < SECRET)} for x in xs
    )

  return schema.Task(
    task_id="probe/resume",
    prompt=probes.prompt(0, 99),
    entry_point=probes.ENTRY_POINT,
    kind="function",
    visible_tests=(),
    hidden_tests=tests([SECRET - 1, SECRET, SECRET + 1]),
    heldout_tests=tests([0, 50, 99]),
    reference_solution=probes.reference_solution(SECRET),
    metadata={
      "probe": {"family": "secret", "lo": 0, "hi": 99, "secret": SECRET}
    },
  )


def test_resumed_episode_continues_as_the_uninterrupted_one(env):
  """The state after k turns and its ids reproduce the rest of the episode."""
  task = _probe_task()
  bisect = "<run>probe((lo + hi) // 2)</run>"
  script = [
    bisect,
    bisect,
    f"<submit>{probes.reference_solution(SECRET)}</submit>",
  ]
  key = jax.random.PRNGKey(0)
  whole = agent_loop.collect(env, ScriptedPolicy([script]), [task], [0], key)
  final = whole.episodes[0]
  # 49: lower, in 0..48; then 24: higher, in 25..48; then the submission.
  assert [t.probe for t in final.turns] == [49, 24, None]
  assert final.outcome.suite_a == 1.0
  tokens = np.asarray(whole.batch.tokens)
  trainable = np.asarray(whole.batch.trainable)
  starts_at = np.flatnonzero(np.asarray(gae.turn_starts(trainable))[0])
  assert len(starts_at) == 3
  for k in (0, 1, 2):
    prefix = tokens[0, : starts_at[k]].tolist()
    state = dataclasses.replace(
      env.reset(task), turns=final.turns[:k], num_tokens=len(prefix)
    )
    policy = ScriptedPolicy([script[k:]])
    out = agent_loop.collect(
      env, policy, [task], [0], key, starts=[(state, prefix)]
    )
    assert policy.prompts == [prefix]
    np.testing.assert_array_equal(out.batch.tokens, tokens)
    want = trainable.copy()
    want[0, : starts_at[k]] = False
    np.testing.assert_array_equal(out.batch.trainable, want)
    np.testing.assert_array_equal(out.batch.length, whole.batch.length)
    episode = out.episodes[0]
    assert [t.action_text for t in episode.turns] == script
    assert [t.probe for t in episode.turns] == [49, 24, None]
    assert [t.observation for t in episode.turns] == [
      t.observation for t in final.turns
    ]
    assert episode.stop_reason == final.stop_reason == code_env.STOP_SUBMIT
    assert episode.outcome.suite_a == episode.outcome.suite_b == 1.0
    assert out.render_ok.tolist() == [True]
  # The turns are part of the state: the same ids without them ask the
  # environment about the whole range again.
  prefix = tokens[0, : starts_at[1]].tolist()
  forgetful = dataclasses.replace(env.reset(task), num_tokens=len(prefix))
  out = agent_loop.collect(
    env,
    ScriptedPolicy([script[1:]]),
    [task],
    [0],
    key,
    starts=[(forgetful, prefix)],
  )
  assert out.episodes[0].turns[0].probe == 49


def test_bad_starts_are_refused(env):
  task = _probe_task()
  state = env.reset(task)
  ids = list(state.prompt_ids)
  key = jax.random.PRNGKey(0)
  policy = ScriptedPolicy([["<run>probe(lo)</run>"]])
  for start, message in (
    ((state, ids[:-1]), "ids that must be"),
    ((state, [ids[1], *ids[1:]]), "its prompt first"),
    ((dataclasses.replace(state, done=True), ids), "is done"),
    ((env.reset(_task()), ids), "continues task 'double'"),
  ):
    with pytest.raises(ValueError, match=message):
      agent_loop.collect(env, policy, [task], [0], key, starts=[start])
  with pytest.raises(ValueError, match="1 tasks but 2 starts"):
    agent_loop.collect(env, policy, [task], [0], key, starts=[(state, ids)] * 2)
