"""Adaptive truncation: the rule, the stopper in the agent loop, metrics.

The loop tests drive `agent_loop.collect` with scripted turns against the
process-backend pool and a stand-in critic whose value is a function of
marker characters in the tokens, so which turns count as high is known.
The critic tests use the tiny transformer critic and check the stopper's
values against the learner's `steps.critic_values`.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.envs import code_env
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.models import transformer
from codeagent_rl.parallel import sharding
from codeagent_rl.rl import config as rl_config
from codeagent_rl.rollout import agent_loop
from codeagent_rl.rollout import truncation
from codeagent_rl.tasks import schema
from codeagent_rl.train import experiment
from codeagent_rl.train import steps
from configs import common
from configs import tiny
from tests.helpers import models

TOK = tokenizer_lib.ByteTokenizer()
ENV = code_env.EnvConfig(
  max_turns=4,
  max_tokens_per_turn=120,
  max_total_tokens=1600,
  max_wall_s=60.0,
  obs_max_bytes=200,
)
GOOD = "def double(x):\n  return 2 * x\n"
BAD = "def double(x):\n  return x + 2\n"
# A "~" anywhere in a row makes the stand-in critic sure (0.75); each "^"
# adds 0.375 (values that rise turn by turn: high, never stable).
SURE, RISE = TOK.encode("~"), TOK.encode("^")
SURE_VALUE, RISE_STEP = 0.75, 0.375


def _task(task_id):
  tests = lambda xs: tuple({"args": [x], "expected": 2 * x} for x in xs)  # noqa: E731
  return schema.Task(
    task_id=task_id,
    prompt="Write double(x) returning 2 * x.",
    entry_point="double",
    kind="function",
    visible_tests=tests([1, 5]),
    hidden_tests=tests([0, 3, 7]),
    heldout_tests=tests([20, 21]),
    reference_solution=GOOD,
    metadata={},
  )


def _cfg(**fields) -> rl_config.AdaptiveTruncationConfig:
  values = dict(
    enabled=True,
    threshold=0.5,
    k=2,
    tolerance=0.25,
    min_turns=2,
    audit_fraction=0.0,
  )
  return rl_config.AdaptiveTruncationConfig(**{**values, **fields})


class ScriptedPolicy:
  """Emits pre-written turns; records budgets and observations."""

  def __init__(self, scripts):
    self.scripts = [[TOK.encode(t) for t in turns] for turns in scripts]
    self.turn = [0] * len(scripts)
    self.observed = [[] for _ in scripts]
    self.budgets = []

  def begin(self, prompts):
    self.turn = [0] * len(prompts)
    self.observed = [[] for _ in prompts]
    self.budgets = []

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
    pass


def _marker_values(params, tokens, valid, length):
  """The stand-in critic: [N] value from the markers in each row.

  On the host (numpy), so the loop tests compile nothing.
  """
  del params, length
  tokens, valid = np.asarray(tokens), np.asarray(valid)
  sure = np.any((tokens == SURE[0]) & valid, axis=1)
  rises = np.sum((tokens == RISE[0]) & valid, axis=1)
  return np.where(sure, SURE_VALUE, 0.0) + RISE_STEP * rises


class RecordingStopper(truncation.Stopper):
  """A `Stopper` that also records what it was asked and the widths."""

  def __init__(self, *args, **kwargs):
    self.calls, self.widths = [], []
    super().__init__(*args, **kwargs)

  def decide(self, episode_ids, prefixes, turns):
    self.calls.append((list(episode_ids), list(turns)))
    return super().decide(episode_ids, prefixes, turns)


def _marker_stopper(**fields):
  stopper = None

  def value_fn(params, tokens, valid, length):
    stopper.widths.append(tokens.shape)
    return _marker_values(params, tokens, valid, length)

  stopper = RecordingStopper(
    _cfg(**fields),
    value_fn,
    {"w": jnp.zeros(())},
    TOK.pad_id,
    seed=(0, 0),
    bucket=32,
  )
  return stopper


# Row 0 is sure from its first turn (cut after turn 2); row 1's values rise
# 0.375 a turn (high from turn 2, never within tolerance); row 2 is never
# high and submits at turn 2; row 3 submits at once.
SCRIPTS = [
  [f"<run>{BAD}# ~</run>"] * 3 + [f"<submit>{GOOD}</submit>"],
  [f"<run>{BAD}# ^</run>"] * 4,
  [f"<run>{BAD}</run>", f"<submit>{GOOD}</submit>"],
  [f"<submit>{GOOD}# ~</submit>"],
]


@pytest.fixture(scope="module")
def env(module_pool):
  return code_env.CodeEnv(module_pool, TOK, ENV)


def _collect(env, stopper):
  policy = ScriptedPolicy(SCRIPTS)
  tasks = [_task(f"t{i}") for i in range(len(SCRIPTS))]
  out = agent_loop.collect(
    env,
    policy,
    tasks,
    list(range(len(SCRIPTS))),
    jax.random.PRNGKey(0),
    stopper=stopper,
  )
  return policy, out


# The rule on hand-made histories (k=2, threshold 0.5, tolerance 0.25,
# min_turns 2; binary fractions, so the boundaries are exact).
@pytest.mark.parametrize(
  "history,turns,fields,want",
  [
    ([0.75, 0.75], 1, {}, False),  # below min_turns
    ([0.75, 0.75, 0.75], 2, {"min_turns": 3}, False),  # below min_turns
    ([0.75], 2, {}, False),  # not yet k values
    ([0.5, 1.0], 2, {}, False),  # unstable: spread 0.5 > 0.25
    ([0.75, 0.25], 2, {}, False),  # below the threshold
    ([0.0, 0.75, 0.75], 3, {}, True),  # only the last k count
    ([0.5, 0.75], 2, {}, True),  # at the threshold and the tolerance
    ([0.75, 0.75], 2, {"enabled": False}, False),  # off
    ([0.75, 0.75, 0.5], 3, {"k": 3}, True),
    ([0.25, 0.75, 0.5], 3, {"k": 3}, False),
  ],
)
def test_should_cut(history, turns, fields, want):
  assert truncation.should_cut(history, turns, _cfg(**fields)) is want


def test_stopper_cuts_the_sure_episode_in_the_loop(env):
  stopper = _marker_stopper()
  policy, out = _collect(env, stopper)
  episodes, batch = out.episodes, out.batch
  batch.check()
  assert [e.stop_reason for e in episodes] == [
    code_env.STOP_ADAPTIVE,
    code_env.STOP_MAX_TURNS,
    code_env.STOP_SUBMIT,
    code_env.STOP_SUBMIT,
  ]
  assert batch.truncated.tolist() == [True, True, False, False]
  assert episodes[0].truncated and len(episodes[0].turns) == 2
  assert not episodes[0].outcome.executed
  # Asked after each turn about the episodes still open, and only them.
  assert stopper.calls == [([0, 1, 2], [1, 1, 1]), ([0, 1], [2, 2]), ([1], [3])]
  # The cut row takes no more turns; it keeps its last observation.
  full = ENV.max_tokens_per_turn
  assert [b[0] for b in policy.budgets] == [full, full, 0, 0]
  assert len(policy.observed[0]) == 2
  n = int(batch.length[0])
  last_obs = policy.observed[0][-1]
  assert batch.tokens[0, n - len(last_obs) : n].tolist() == last_obs
  assert not batch.trainable[0, n - len(last_obs) :].any()
  assert out.render_ok.tolist() == [True] * 4  # messages include that obs
  assert stopper.cuts == [truncation.Decision(0, 2, SURE_VALUE, n)]
  assert stopper.audits == []
  # Prefixes are bucketed: widths a multiple of 32, rows a power of two.
  assert all(w % 32 == 0 and r in (1, 2, 4) for r, w in stopper.widths)
  assert out.timings["stop_s"] >= 0.0
  total = np.asarray([0.0, 0.0, 1.0, 1.0])
  scalars = stopper.metrics(total, batch.length)
  assert scalars["truncation/cut_share"] == 0.25
  assert scalars["truncation/audit_count"] == 0.0
  assert scalars["truncation/tokens_saved_est"] == 0.0
  assert all(math.isfinite(v) for v in scalars.values())
  # reset(): a second rollout starts from nothing.
  _, again = _collect(env, stopper)
  assert len(stopper.cuts) == 1
  assert again.episodes[0].stop_reason == code_env.STOP_ADAPTIVE


def test_audited_episode_runs_to_its_end(env):
  stopper = _marker_stopper(audit_fraction=1.0)
  policy, out = _collect(env, stopper)
  first = out.episodes[0]
  assert first.stop_reason == code_env.STOP_SUBMIT  # turn 4, not cut
  assert len(first.turns) == 4 and first.outcome.suite_a == 1.0
  assert not out.batch.truncated[0]
  # Recorded once, at the first cut decision (the rule held at turn 3 too).
  prompt = len(env.reset(_task("t0")).prompt_ids)
  at_cut = prompt + sum(
    len(ids) for ids in policy.scripts[0][:2] + policy.observed[0][:2]
  )
  assert stopper.audits == [truncation.Decision(0, 2, SURE_VALUE, at_cut)]
  assert stopper.cuts == []
  total = np.asarray(
    [e.outcome.suite_a for e in out.episodes], np.float32
  )  # what Rewards.total is before the anti-cheat
  scalars = stopper.metrics(total, out.batch.length)
  assert scalars == pytest.approx(
    {
      "truncation/cut_share": 0.0,
      "truncation/tokens_saved_est": 0.0,  # nothing was cut
      "truncation/audit_count": 1.0,
      "truncation/audit_value_mean": SURE_VALUE,
      "truncation/audit_reward_mean": 1.0,
      "truncation/audit_abs_error": 1.0 - SURE_VALUE,
    }
  )


def test_without_a_stopper_nothing_is_cut(env):
  _, out = _collect(env, None)
  assert out.episodes[0].stop_reason == code_env.STOP_SUBMIT
  assert "stop_s" not in out.timings


def test_metrics_worked_by_hand():
  cuts = [truncation.Decision(0, 3, 0.9, 100), truncation.Decision(1, 2, 1, 50)]
  audits = [
    truncation.Decision(2, 3, 0.75, 100),  # ran 60 more tokens, reward 1
    truncation.Decision(3, 4, 0.5, 200),  # ran 20 more tokens, reward 0
  ]
  total = np.asarray([0.0, 0.0, 1.0, 0.0, 0.5])
  length = np.asarray([100, 50, 160, 220, 300])
  scalars = truncation.metrics(cuts, audits, total, length)
  assert scalars == pytest.approx(
    {
      "truncation/cut_share": 2 / 5,
      "truncation/tokens_saved_est": 40.0 * 2,
      "truncation/audit_count": 2.0,
      "truncation/audit_value_mean": 0.625,
      "truncation/audit_reward_mean": 0.5,
      "truncation/audit_abs_error": (0.25 + 0.5) / 2,
    }
  )
  empty = truncation.metrics([], [], np.zeros(0), np.zeros(0))
  assert set(empty) == set(scalars)
  assert all(v == 0.0 for v in empty.values())
  with pytest.raises(ValueError, match="episode 7, but there are 5"):
    truncation.metrics([truncation.Decision(7, 1, 0.0, 1)], [], total, length)


def test_audit_draws_are_deterministic_and_take_their_share():
  draws = [
    truncation.audit_draw((3, 1), e, t) for e in range(50) for t in range(8)
  ]
  again = [
    truncation.audit_draw((3, 1), e, t) for e in range(50) for t in range(8)
  ]
  other = [
    truncation.audit_draw((3, 2), e, t) for e in range(50) for t in range(8)
  ]
  assert draws == again and draws != other
  assert all(0.0 <= d < 1.0 for d in draws)
  assert 0.4 < np.mean(np.asarray(draws) < 0.5) < 0.6


def test_decide_refuses_a_cut_episode_and_mismatched_lengths():
  stopper = _marker_stopper(min_turns=1, k=1)
  assert stopper.decide([0, 1], [SURE * 3, [9] * 3], [1, 1]) == [True, False]
  with pytest.raises(ValueError, match="episode 0 was cut"):
    stopper.decide([0], [SURE * 4], [2])
  with pytest.raises(ValueError, match="2 episode ids, 1 prefixes"):
    stopper.decide([1, 2], [[9]], [2, 1])
  with pytest.raises(ValueError, match="ids repeat"):
    stopper.decide([1, 1], [[9], [9]], [2, 2])


@pytest.fixture(scope="module")
def critic():
  """(params, the value fn: `steps.critic_values`'s after_last, jitted).

  The tiny critic with random params drawn on the host (compiling `init`
  costs more than the rest of this module), norm scales at 1 and a random
  value head (flax's zero head would make every value 0).
  """
  cfg = models.transformer_config(
    vocab_size=TOK.vocab_size, init_std=0.02, num_layers=1
  )
  model = transformer.Critic(cfg)
  valid = jnp.ones((1, 4), bool)
  shapes = sharding.unbox(
    jax.eval_shape(
      model.init,
      jax.random.PRNGKey(0),
      jnp.zeros((1, 4), jnp.int32),
      transformer.positions_from_valid(valid),
      valid,
    )["params"]
  )
  rng = np.random.default_rng(0)

  def draw(path, leaf):
    if jax.tree_util.keystr(path).endswith("['scale']"):
      return np.ones(leaf.shape, np.float32)
    return (0.3 * rng.standard_normal(leaf.shape)).astype(np.float32)

  params = jax.tree_util.tree_map_with_path(draw, shapes)
  values = functools.partial(steps.critic_values, model=model)
  value_fn = jax.jit(lambda p, t, v, n: values(p, t, v, n)[1])
  return jax.device_put(params), value_fn


def test_values_do_not_depend_on_the_padding(critic):
  """Bucketed, chunked prefixes give each prefix's value on its own."""
  params, value_fn = critic
  rng = np.random.default_rng(0)
  prefixes = [rng.integers(9, 200, n).tolist() for n in (5, 40, 70)]
  stopper = truncation.Stopper(
    _cfg(), value_fn, params, TOK.pad_id, bucket=32, max_rows=2
  )
  with jax.transfer_guard("disallow"):  # only explicit copies
    got = stopper.values(prefixes)  # rows [2, 64], then [1, 96]
  want = []
  for p in prefixes:  # one row each, [1, 96]: no compile of its own
    tokens = np.zeros((1, 96), np.int32)
    valid = np.zeros((1, 96), bool)
    tokens[0, : len(p)], valid[0, : len(p)] = p, True
    want.append(float(value_fn(params, tokens, valid, valid.sum(1))[0]))
  assert np.abs(want).min() > 1e-3  # not trivially zero
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_cut_rows_bootstrap_is_the_value_it_was_cut_on(env, critic):
  """The learner's bootstrap value of a cut row equals the decision's."""
  params, value_fn = critic
  cfg = _cfg(threshold=-1e9, tolerance=1e9, k=1, min_turns=1)
  width = 512  # every row fits: one compiled shape for both forwards
  stopper = truncation.Stopper(cfg, value_fn, params, TOK.pad_id, bucket=width)
  _, out = _collect(env, stopper)
  batch = out.batch
  cut = [d.episode_id for d in stopper.cuts]
  assert cut == [0, 1, 2]  # every episode open after turn 1
  assert batch.truncated.tolist() == [True, True, True, False]
  assert int(batch.length.max()) <= width
  after_last = value_fn(
    params, batch.tokens[:, :width], batch.valid[:, :width], batch.length
  )
  bootstrap = np.asarray(steps.bootstrap_values(batch.truncated, after_last))
  np.testing.assert_allclose(
    bootstrap[cut], [d.value for d in stopper.cuts], rtol=1e-5, atol=1e-5
  )
  assert [d.tokens for d in stopper.cuts] == batch.length[:3].tolist()


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("enabled", 1, r"rl\.adaptive_truncation\.enabled=1: must be a bool"),
    ("threshold", math.inf, r"adaptive_truncation\.threshold=inf"),
    ("threshold", "0.9", r"adaptive_truncation\.threshold='0.9'"),
    ("k", 0, r"rl\.adaptive_truncation\.k=0"),
    ("k", 2.0, r"rl\.adaptive_truncation\.k=2\.0"),
    ("min_turns", 0, r"rl\.adaptive_truncation\.min_turns=0"),
    ("tolerance", -0.1, r"adaptive_truncation\.tolerance=-0\.1"),
    ("audit_fraction", 1.5, r"adaptive_truncation\.audit_fraction=1\.5"),
    ("audit_fraction", -0.1, r"adaptive_truncation\.audit_fraction=-0\.1"),
  ],
)
def test_bad_values_name_the_field(field, value, match):
  section = common.get_rl_config().to_dict()
  section["adaptive_truncation"][field] = value
  with pytest.raises(ValueError, match=match):
    rl_config.RLConfig.from_config(section)


def test_defaults_validate_and_stray_fields_are_named():
  rl = rl_config.RLConfig.from_config(common.get_rl_config())
  assert rl.adaptive_truncation.enabled is False
  section = common.get_rl_config().to_dict()
  section["adaptive_truncation"]["kk"] = 3
  del section["adaptive_truncation"]["k"]
  with pytest.raises(ValueError, match=r"unknown fields \['kk'\].*\['k'\]"):
    rl_config.RLConfig.from_config(section)
  del section["adaptive_truncation"]
  with pytest.raises(ValueError, match="no section 'adaptive_truncation'"):
    rl_config.RLConfig.from_config(section)


@pytest.mark.parametrize("algo", ["grpo", "rloo", "dr_grpo"])
def test_enabled_needs_a_critic(algo):
  config = tiny.get_config(f"smoke,algo={algo}")
  experiment.Experiment.from_config(config)  # valid while off
  config.rl.adaptive_truncation.enabled = True
  with pytest.raises(
    ValueError,
    match=(
      r"rl\.adaptive_truncation\.enabled=True .* rl\.advantage\.estimator="
      f"'{algo}'"
    ),
  ):
    experiment.Experiment.from_config(config)
  config = tiny.get_config("smoke")
  config.rl.adaptive_truncation.enabled = True
  config.env.max_turns = 8  # room to cut after k = min_turns = 3 turns
  exp = experiment.Experiment.from_config(config)
  assert dataclasses.asdict(exp.rl.adaptive_truncation)["enabled"] is True


def test_disabled_stopper_computes_nothing():
  calls = []

  def value_fn(*args):
    calls.append(args)
    return np.zeros(args[1].shape[:1])

  stopper = truncation.Stopper(
    _cfg(enabled=False), value_fn, {"w": jnp.zeros(())}, TOK.pad_id
  )
  assert stopper.decide([0, 1], [SURE * 2, SURE * 2], [5, 5]) == [False] * 2
  assert calls == []
