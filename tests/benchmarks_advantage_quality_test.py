"""benchmarks/advantage_quality.py: its ground truth, statistics and a run.

The pure parts are checked on cases worked out by hand; the restoring of
states on a deterministic policy, whose continuations must replay each
episode (so every true value is the episode's reward and every true
advantage 0); the whole script once, end to end, on a small SFT model.
"""

import json
import math
import re
import types as types_lib

import jax
import numpy as np
import pytest

from benchmarks import advantage_quality as aq
from codeagent_rl import types
from codeagent_rl.envs import code_env
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.rl import diagnostics
from codeagent_rl.rollout import agent_loop
from codeagent_rl.tasks import probes
from codeagent_rl.tasks import schema
from configs import long_horizon
from tests.helpers import envs
from tests.helpers import processes

TOK = tokenizer_lib.ByteTokenizer()


def test_true_values_and_advantages_by_hand():
  # Two open states, K = 2: s_0 solved once, s_1 always; the episode (and
  # so its terminal state) solved.
  values = aq.true_values(1.0, np.asarray([[0.0, 1.0], [1.0, 1.0]]))
  np.testing.assert_allclose(values, [0.5, 1.0, 1.0])
  np.testing.assert_allclose(aq.true_advantages(values), [0.5, 0.0])
  # A failed last turn after a promising start.
  values = aq.true_values(0.0, np.asarray([[0.25, 0.75], [1.0, 0.5]]))
  np.testing.assert_allclose(aq.true_advantages(values), [0.25, -0.75])
  with pytest.raises(ValueError, match="expected"):
    aq.true_values(1.0, np.zeros((3,)))


def test_replayed_continuations_give_zero_true_advantages():
  """A deterministic policy's continuations all earn the episode's reward."""
  rng = np.random.default_rng(0)
  for n, k in ((1, 1), (5, 3), (40, 8)):
    reward = float(rng.uniform())
    values = aq.true_values(reward, np.full((n, k), reward))
    assert values.shape == (n + 1,)
    np.testing.assert_array_equal(values, reward)
    np.testing.assert_array_equal(aq.true_advantages(values), np.zeros(n))


def test_per_turn_means_average_each_run_of_trainable_tokens():
  trainable = np.asarray(
    [
      [0, 1, 1, 0, 1, 1, 1, 0],
      [0, 0, 1, 0, 0, 0, 0, 0],
      [0, 0, 0, 0, 0, 0, 0, 0],
    ],
    bool,
  )
  x = np.arange(24, dtype=np.float32).reshape(3, 8)
  means = aq.per_turn_means(x, trainable)
  np.testing.assert_allclose(means[0], [1.5, 5.0])
  np.testing.assert_allclose(means[1], [10.0])
  assert means[2].shape == (0,)
  np.testing.assert_array_equal(aq.turn_starts(trainable[0]), [1, 4])


def test_agreement_correlation_and_signs():
  truth = np.asarray([0.5, -0.25, 0.0, 1.0])
  same = aq.agreement(2 * truth + 0.1, truth)
  assert same["corr"] == pytest.approx(1.0)
  # The true 0 has no sign; the others all agree.
  assert same["sign_agreement"] == 1.0
  assert (same["n"], same["n_signed"]) == (4, 3)
  flipped = aq.agreement(-truth, truth)
  assert flipped["corr"] == pytest.approx(-1.0)
  assert flipped["sign_agreement"] == 0.0
  half = aq.agreement(np.asarray([1.0, 1.0, 3.0, -1.0]), truth)
  assert half["sign_agreement"] == pytest.approx(1 / 3)
  # Constant sides have no correlation; no signed turn, no agreement.
  flat = aq.agreement(np.ones(4), truth)
  assert flat["corr"] is None and flat["sign_agreement"] == pytest.approx(2 / 3)
  none = aq.agreement(np.arange(3.0), np.zeros(3))
  assert none["corr"] is None and none["sign_agreement"] is None
  assert none["n_signed"] == 0


def test_tercile_rows_split_episodes_by_turns():
  turns = [4, 1, 6, 2, 5, 3]
  buckets = aq.terciles(turns)
  np.testing.assert_array_equal(buckets, [1, 0, 2, 0, 2, 1])
  truths = [np.arange(n, dtype=np.float64) - 1 for n in turns]
  estimates = [t * 3.0 for t in truths]
  rows = aq.tercile_rows("x", estimates, truths, buckets)
  assert [r["tercile"] for r in rows] == list(aq.TERCILES)
  by = {r["tercile"]: r for r in rows}
  assert by["all"]["n"] == sum(turns)
  assert (by["short"]["n"], by["medium"]["n"], by["long"]["n"]) == (3, 7, 11)
  assert all(r["corr"] == pytest.approx(1.0) for r in rows)
  assert all(r["estimator"] == "x" for r in rows)


def test_error_by_depth_buckets_states_by_turn():
  values = [np.asarray([0.5, 0.5, 0.5, 0.5, 0.5]), np.asarray([1.0])]
  truths = [np.asarray([0.0, 1.0, 0.5, 0.25, 0.75]), np.asarray([0.0])]
  errors = aq.error_by_depth(values, truths)
  assert list(errors) == list(diagnostics.DEPTH_BUCKETS)
  # Turn 1 (V(s_0)) of both; turns 2-3; turns 4-5.
  assert errors["turn_1"] == {"mae": pytest.approx(0.75), "n": 2}
  assert errors["turn_2_3"] == {"mae": pytest.approx(0.25), "n": 2}
  assert errors["turn_4_7"] == {"mae": pytest.approx(0.25), "n": 2}
  assert errors["turn_8_15"] == {"mae": None, "n": 0}


def test_truth_reliability_from_split_halves():
  rewards = [1.0, 0.0, 0.5]
  turns = [3, 2, 1]
  rng = np.random.default_rng(0)
  half = [rng.uniform(size=(n, 1)) for n in turns]
  buckets = aq.terciles(turns)
  # Both halves alike: the true advantages are as reliable as can be.
  same = aq.truth_reliability(rewards, [np.tile(h, 2) for h in half], buckets)
  assert same["all"]["split_half_corr"] == pytest.approx(1.0)
  assert same["all"]["corr_ceiling"] == pytest.approx(1.0)
  assert [same[t]["n"] for t in aq.TERCILES] == [6, 1, 2, 3]
  # Halves opposed (r < 0): no ceiling; one continuation: no halves.
  opposed = [np.concatenate([h, 1 - h], axis=1) for h in half]
  rel = aq.truth_reliability([0.5] * 3, opposed, buckets)
  assert rel["all"]["split_half_corr"] < 0
  assert rel["all"]["corr_ceiling"] is None
  one = aq.truth_reliability(rewards, half, buckets)
  assert one["all"] == {"split_half_corr": None, "corr_ceiling": None, "n": 6}
  # Halves that agree partly: ceiling sqrt(2r / (1 + r)) of their r.
  noisy = [
    np.concatenate([h, h + 0.3 * rng.normal(size=h.shape)], 1) for h in half
  ]
  rel = aq.truth_reliability(rewards, noisy, buckets)
  r = rel["all"]["split_half_corr"]
  assert 0 < r < 1
  assert rel["all"]["corr_ceiling"] == pytest.approx(math.sqrt(2 * r / (1 + r)))


def test_explained_variance_against_true_values():
  truths = [np.asarray([0.0, 1.0]), np.asarray([0.5, 0.5])]
  # Var[V*] = 0.125; off by 0.25 everywhere with alternating sign: Var 0.0625.
  values = [np.asarray([0.25, 0.75]), np.asarray([0.75, 0.25])]
  assert aq.explained_variance(truths, truths) == 1.0
  assert aq.explained_variance(values, truths) == pytest.approx(0.5)
  # A constant offset costs nothing (a variance); constant truths say nothing.
  shifted = [t + 0.3 for t in truths]
  assert aq.explained_variance(shifted, truths) == pytest.approx(1.0)
  assert aq.explained_variance(values, [np.ones(2), np.ones(2)]) is None


class _Recorder:
  """Records the calls a policy gets."""

  def __init__(self):
    self.calls = []

  def begin(self, prompts):
    self.calls.append(("begin", prompts))

  def observe(self, observations):
    self.calls.append(("observe", observations))


def test_chunked_prefill_feeds_long_starts_in_pieces():
  inner = _Recorder()
  short, long = list(range(5)), list(range(1000, 1600))
  aq.ChunkedPrefill(inner, chunk=256).begin([short, long])
  assert inner.calls == [
    ("begin", [short, long[:256]]),
    ("observe", [[], long[256:512]]),
    ("observe", [[], long[512:]]),
  ]


SECRET = 37
_FOUND = re.compile(r"found, s = (-?\d+)")


def _probe_task():
  def tests(xs):
    return tuple(
      {"args": [x], "expected": (x > SECRET) - (x < SECRET)} for x in xs
    )

  return schema.Task(
    task_id="probe/aq",
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


class BisectPolicy:
  """Greedy and deterministic: its turn is a function of its conversation.

  Probes the middle of what is left until an answer says found, then
  submits that secret; what it does next depends only on what it was
  shown, so it can resume from any point of an episode.
  """

  def begin(self, prompts):
    self.rows = [list(p) for p in prompts]

  def generate(self, budgets, rng):
    del rng
    out = []
    for row, budget in zip(self.rows, budgets, strict=True):
      if not budget:
        out.append(([], []))
        continue
      found = _FOUND.findall(TOK.decode(row))
      if found:
        action = f"<submit>{probes.reference_solution(found[-1])}</submit>"
      else:
        action = "<run>probe((lo + hi) // 2)</run>"
      ids = TOK.encode(action)[:budget]
      row += ids
      out.append((ids, [0.0] * len(ids)))
    return out

  def observe(self, observations):
    for row, obs in zip(self.rows, observations, strict=True):
      row += list(obs)

  def end(self):
    self.rows = None


def test_restored_states_of_a_deterministic_policy_replay_the_episode(
  module_pool,
):
  env = code_env.CodeEnv(module_pool, TOK, envs.budgets(max_turns=10))
  task = _probe_task()
  key = jax.random.PRNGKey(0)
  whole = agent_loop.collect(env, BisectPolicy(), [task], [0], key)
  final = whole.episodes[0]
  reward = final.outcome.suite_a
  # 49, 24, 36, 42, 39, 37 (found), then the submission.
  assert [t.probe for t in final.turns] == [49, 24, 36, 42, 39, 37, None]
  assert reward == 1.0
  opened = aq.states_after_turns(
    env.reset(task), final, whole.batch.tokens[0], whole.batch.trainable[0]
  )
  assert len(opened) == len(final.turns)
  for k, (state, ids) in enumerate(opened):
    assert state.turns == final.turns[:k] and not state.done
    assert state.num_tokens == len(ids)
    assert ids[: len(state.prompt_ids)] == list(state.prompt_ids)
  k_samples = 2
  starts = [s for s in opened for _ in range(k_samples)]
  out = agent_loop.collect(
    env,
    BisectPolicy(),
    [task] * len(starts),
    list(range(len(starts))),
    key,
    starts=starts,
  )
  for (state, _), episode in zip(starts, out.episodes, strict=True):
    assert [t.action_text for t in episode.turns] == [
      t.action_text for t in final.turns
    ]
    assert episode.turns[len(state.turns)].probe == (
      final.turns[len(state.turns)].probe
    )
  rewards = np.asarray([e.outcome.suite_a for e in out.episodes])
  values = aq.true_values(reward, rewards.reshape(len(opened), k_samples))
  np.testing.assert_array_equal(values, reward)
  np.testing.assert_array_equal(
    aq.true_advantages(values), np.zeros(len(opened))
  )
  # A row whose turns are not its episode's is refused.
  with pytest.raises(ValueError, match="runs of trainable tokens"):
    aq.states_after_turns(
      env.reset(task),
      final,
      whole.batch.tokens[0],
      np.zeros_like(whole.batch.trainable[0]),
    )


def test_every_estimator_is_a_valid_config_and_gives_turn_advantages():
  config = long_horizon.get_config("smoke")
  experiments = aq.estimator_experiments(config, list(aq.ESTIMATORS))
  assert experiments["gae_old"].rl.advantage.lam_critic == 0.95
  assert experiments["gae_vapo"].rl.advantage.lam_length_alpha == 0.05
  assert experiments["gae_turn"].rl.advantage.credit == "turn"
  assert experiments["gae_tests"].privileged.mode == "tests"
  assert experiments["gae_trust"].rl.advantage.critic_trust != "none"
  assert not experiments["rloo"].uses_critic
  assert {
    e.rl.advantage.critic_trust
    for n, e in experiments.items()
    if n != "gae_trust" and e.uses_critic
  } == {"none"}
  # Critics with Monte-Carlo targets train alike whatever the actor's
  # lambda; the others differ in targets, credit or input.
  key = {n: aq.critic_key(e) for n, e in experiments.items()}
  assert key["gae_vapo"] == key["gae_trust"]
  others = [key[n] for n in ("gae_old", "gae_turn", "gae_tests", "gae_vapo")]
  assert len(set(others)) == 4
  trainable = np.zeros((4, 12), bool)
  trainable[:, 2:5] = trainable[:, 7:11] = True
  batch = types.TrajectoryBatch(
    tokens=np.ones((4, 12), np.int32),
    trainable=trainable,
    valid=np.ones((4, 12), bool),
    length=np.full((4,), 12, np.int32),
    truncated=np.asarray([False, False, True, False]),
    group_id=np.asarray([0, 0, 1, 1], np.int32),
  )
  total = np.asarray([1.0, 0.0, 0.0, 0.5])
  values = np.linspace(0, 1, 48, dtype=np.float32).reshape(4, 12)
  critic = (values, np.full((4,), 0.3, np.float32))
  for name, exp in experiments.items():
    adv = aq.estimator_advantages(
      exp, batch, total, critic if exp.uses_critic else None
    )
    assert adv.shape == (4, 12) and np.all(np.isfinite(adv))
    assert np.all(adv[~trainable] == 0)
    turns = aq.per_turn_means(adv, trainable)
    if name in ("grpo", "rloo", "dr_grpo", "gae_turn"):
      # One advantage per episode, or per turn: a turn's mean is its tokens'.
      for row in range(4):
        first, second = adv[row, 2], adv[row, 7]
        np.testing.assert_allclose(turns[row], [first, second], rtol=1e-6)
    if name in ("grpo", "rloo", "dr_grpo"):
      np.testing.assert_allclose(turns[0][0], turns[0][1], rtol=1e-6)
      # The group's better episode is ahead of the worse one.
      assert turns[0][0] > turns[1][0]


def test_continuations_get_the_wall_clock_budget_from_their_start(
  module_pool,
):
  """States made long before their batch runs are not timed out by that."""
  now = [0.0]
  env = code_env.CodeEnv(
    module_pool, TOK, envs.budgets(max_turns=10), clock=lambda: now[0]
  )
  task = _probe_task()
  whole = agent_loop.collect(
    env, BisectPolicy(), [task], [0], jax.random.PRNGKey(0)
  )
  final = whole.episodes[0]
  opened = aq.states_after_turns(
    env.reset(task), final, whole.batch.tokens[0], whole.batch.trainable[0]
  )
  # The states were made at 0; their batches run past the 60 s budget.
  now[0] = 1000.0
  learner = types_lib.SimpleNamespace(
    env=env,
    rewards_of=lambda rollout, start, stopper: types_lib.SimpleNamespace(
      total=np.asarray([e.outcome.suite_a for e in rollout.episodes])
    ),
  )
  lines = []
  rewards, stops = aq.continuation_rewards(
    learner,
    BisectPolicy(),
    opened,
    [len(final.turns) - k for k in range(len(opened))],
    3,
    jax.random.PRNGKey(1),
    console=lines.append,
  )
  np.testing.assert_array_equal(rewards, np.ones(len(opened)))
  assert stops == {code_env.STOP_SUBMIT: len(opened)}
  assert len(lines) == 3 and not any("WARNING" in x for x in lines)


def _bench(*args, llvm_optimised=True):
  return processes.run_python(
    "benchmarks/advantage_quality.py", *args, llvm_optimised=llvm_optimised
  )


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
  config = "--config=configs/long_horizon.py:smoke"
  (tmp_path / "sft").mkdir()
  for arg, message in (
    ("--estimators=gae,grpo", "--estimators=gae,grpo"),
    ("--continuations=0", "--continuations=0"),
    ("--prompts=0", "--prompts=0"),
  ):
    bad = _bench(config, f"--workdir={tmp_path}", arg)
    assert bad.returncode != 0
    assert message in bad.stderr
    assert "Traceback" not in bad.stderr
  empty = tmp_path / "empty"
  empty.mkdir()
  bad = _bench(config, f"--workdir={empty}")
  assert bad.returncode != 0 and "has no SFT checkpoint" in bad.stderr


# Trains the SFT model of configs/long_horizon.py:smoke with these
# settings into argv[1] (no evaluation, no PPO: only what the benchmark
# reads). 100 steps: its episodes take several turns and some submissions
# pass tests, so rewards and true advantages vary.
SFT_STEPS = 100
SMOKE = [
  "--config=configs/long_horizon.py:smoke",
  "--config.data.num_train_tasks=8",
  "--config.data.num_eval_tasks=4",
  f"--config.sft.steps={SFT_STEPS}",
]
_MAKE_SFT = f"""
import sys
from codeagent_rl.envs import code_env
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.sandbox import pools
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import run as run_lib
from codeagent_rl.train import sft as sft_lib
from configs import long_horizon

config = long_horizon.get_config("smoke")
config.data.num_train_tasks = 8
config.data.num_eval_tasks = 4
config.sft.steps = {SFT_STEPS}
exp = run_lib.job_from_config(config).exp
sets = data_lib.make_task_sets(exp.data, exp.data_seed)
mesh, rules = exp.make_mesh()
sandbox = exp.sandbox.apply(sandbox_config.SandboxConfig(backend="process"))
with pools.open_pool(sandbox) as pool:
  env = code_env.CodeEnv(pool, exp.conversation, exp.env)
  arrays = data_lib.sft_arrays(env, sets, sys.argv[1])
  sft_lib.run_sft(exp, arrays, sys.argv[1], mesh, rules)
"""


def _in_range(x, lo, hi):
  return x is None or (math.isfinite(x) and lo <= x <= hi)


def test_smoke_run_writes_rows_errors_and_plot(tmp_path):
  run = tmp_path / "run"
  # Both runs execute more than they compile: with LLVM's optimisation they
  # took 68 s instead of 95 s (idle machine).
  made = processes.run_python("-c", _MAKE_SFT, str(run), llvm_optimised=True)
  assert made.returncode == 0, made.stderr[-3000:]
  out = tmp_path / "aq.json"
  # A test-aware critic, one shared by two estimators, no critic: the kinds
  # the benchmark treats apart (a third pre-trained critic added ~10 s).
  names = ["gae_tests", "gae_vapo", "gae_trust", "rloo"]
  critics_of_run = {"gae_tests", "gae_vapo", "gae_trust"}
  proc = _bench(
    *SMOKE,
    f"--workdir={run}",
    "--prompts=2",
    "--continuations=2",
    "--value_pretrain_rounds=1",
    f"--estimators={','.join(names)}",
    "--rows=32",
    f"--out={out}",
    "--sandbox_backend=process",
    llvm_optimised=True,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  data = json.loads(out.read_text())
  settings = data["settings"]
  assert (settings["episodes"], settings["continuations"]) == (8, 2)
  assert set(settings["estimators"]) == set(names)
  turns = settings["states"]
  assert 8 <= turns <= 8 * 10
  assert data["horizon"]["episodes"] == 8
  reliability = data["truth_reliability"]
  assert list(reliability) == list(aq.TERCILES)
  assert reliability["all"]["n"] == turns
  for rel in reliability.values():
    assert _in_range(rel["split_half_corr"], -1.0, 1.0)
    assert _in_range(rel["corr_ceiling"], 0.0, 1.0)
  saved = data["episodes"]
  assert len(saved) == 8 and sum(e["turns"] for e in saved) == turns
  for e in saved:
    assert np.asarray(e["continuation_rewards"]).shape == (e["turns"], 2)
    assert len(e["true_values"]) == e["turns"] + 1
    assert e["true_values"][-1] == pytest.approx(e["reward"], abs=1e-6)
    assert {len(a) for a in e["advantages"].values()} == {e["turns"]}
    assert set(e["critic_values"]) == critics_of_run
  stops = data["continuation_stop_reasons"]
  assert sum(stops.values()) == 2 * turns
  assert set(stops) <= set(code_env.STOP_REASONS)
  assert code_env.STOP_MAX_WALL_S not in stops
  rows = data["rows"]
  assert [(r["estimator"], r["tercile"]) for r in rows] == [
    (n, t) for n in names for t in aq.TERCILES
  ]
  for row in rows:
    assert set(row) >= {"estimator", "tercile", "corr", "sign_agreement", "n"}
    assert _in_range(row["corr"], -1.0, 1.0)
    assert _in_range(row["sign_agreement"], 0.0, 1.0)
    assert 0 <= row["n_signed"] <= row["n"]
  for name in names:
    by = {r["tercile"]: r for r in rows if r["estimator"] == name}
    assert by["all"]["n"] == turns
    assert sum(by[t]["n"] for t in diagnostics.BUCKETS) == turns
  # The 100-step model's rewards vary, so do the true advantages: every
  # estimator has a correlation over all turns.
  assert all(r["corr"] is not None for r in rows if r["tercile"] == "all")
  critics = critics_of_run
  assert set(data["critic_error_by_depth"]) == critics
  # gae_trust's critic is gae_vapo's: pre-trained once.
  assert settings["estimators"]["gae_trust"]["critic"] == "gae_vapo"
  assert settings["estimators"]["rloo"]["critic"] is None
  assert (
    data["value_pretrain"]["gae_trust"] == data["value_pretrain"]["gae_vapo"]
  )
  for by_depth in data["critic_error_by_depth"].values():
    assert list(by_depth) == list(diagnostics.DEPTH_BUCKETS)
    assert sum(b["n"] for b in by_depth.values()) == turns
    assert all(_in_range(b["mae"], 0.0, 1.0) for b in by_depth.values())
  for name in critics:
    assert _in_range(data["critic_explained_variance"][name], -1e6, 1.0)
    assert _in_range(data["critic_explained_variance_true"][name], -1e6, 1.0)
    assert len(data["value_pretrain"][name]) == 1
  assert 0.0 <= data["true_value_s0_mean"] <= 1.0
  assert set(data["wall_s"]) == {
    "sample_s",
    "value_pretrain_s",
    "continuations_s",
    "estimators_s",
    "total_s",
  }
  with open(out.with_suffix(".png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  assert "corr with A*" in proc.stdout
