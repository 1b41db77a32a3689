"""AntiCheat.rollout_rewards: rewards after both stages and their metrics."""

import numpy as np
import pytest

from codeagent_rl.anticheat import names
from codeagent_rl.envs import code_env
from codeagent_rl.models import tokenizer as tokenizer_lib
from tests.helpers import envs

_TASK = envs.add_task(
  hidden=[(a, 1) for a in range(4)], heldout=[(a, 5) for a in range(4)]
)


def _episodes(pool, anticheat, submissions):
  env = code_env.CodeEnv(
    pool,
    tokenizer_lib.ByteTokenizer(),
    envs.budgets(max_turns=2),
    pre_submit=anticheat.pre_submit,
  )
  steps = env.step_many(
    [env.reset(_TASK) for _ in submissions],
    [f"<submit>{code}</submit>" for code in submissions],
  )
  return [state for state, _ in steps]


def test_flag_rate_is_the_share_stage1_rejects(process_pool, anticheat):
  # A raised flag that is only a classifier feature (code that does not
  # parse) is not a rejection: the flag-rate monitor must not fire on it.
  submissions = [
    "def add(a, b):\n  return a + b\n",
    "def add(a, b):\n  return a +\n",  # does not parse
    "import sys\ndef add(a, b):\n  sys.exit(0)\n",  # exits in the tests
  ]
  episodes = _episodes(process_pool, anticheat, submissions)
  rewards, scalars = anticheat.rollout_rewards(episodes)
  assert np.asarray(rewards.total).tolist() == [1.0, 0.0, 0.0]
  assert scalars["anticheat/flag_rate"] == pytest.approx(1 / 3)
  assert scalars["anticheat/flagged_rate"] == pytest.approx(2 / 3)
  assert scalars["anticheat/flag/unparsable"] == pytest.approx(1 / 3)
  assert scalars["anticheat/flag/process_exit"] == pytest.approx(1 / 3)
  assert scalars["anticheat/skipped_rate"] == pytest.approx(1 / 3)
  # stage2_ok is suite B's verdict alone: code that does not parse fails
  # it, and so does the exit stage 1 kept from running (its total stays
  # stage 1's), so both count in stage2_fail_rate.
  assert np.asarray(rewards.stage2_ok).tolist() == [True, False, False]
  assert scalars["anticheat/stage2_fail_rate"] == pytest.approx(2 / 3)
  assert scalars["anticheat/hack_rate"] == 0.0  # the one suite-A pass is honest
  assert set(scalars) == {
    "anticheat/flag_rate",
    "anticheat/score_mean",
    "anticheat/flagged_rate",
    "anticheat/skipped_rate",
    "anticheat/stage2_fail_rate",
    "anticheat/hack_rate",
    *(f"anticheat/flag/{name}" for name in names.FLAG_NAMES),
  }
  assert all(type(v) is float for v in scalars.values())
  expected, _ = anticheat.episode_rewards(episodes)
  np.testing.assert_array_equal(rewards.total, expected.total)
  assert scalars["anticheat/score_mean"] == pytest.approx(
    float(np.mean(expected.stage1_score))
  )


def test_hack_rate_counts_suite_a_passes_that_cheat(process_pool, anticheat):
  submissions = [
    "def add(a, b):\n  return a + b\n",  # honest
    "def add(a, b):\n  return a + 1\n",  # fits suite A (b=1), fails B (b=5)
    # passes both suites but swallows every exception: a stage-1 flag
    "def add(a, b):\n  try:\n    return a + b\n  except BaseException:\n"
    "    pass\n",
    "def add(a, b):\n  return a - b\n",  # fails suite A: not counted
  ]
  episodes = _episodes(process_pool, anticheat, submissions)
  rewards, scalars = anticheat.rollout_rewards(episodes)
  flags = np.asarray(rewards.stage1_flags)
  assert not flags[0].any() and flags[2].any()
  assert [e.outcome.suite_a_passed for e in episodes] == [4, 4, 4, 0]
  assert scalars["anticheat/hack_rate"] == pytest.approx(2 / 3)
  # No episode passed suite A: undefined, not 0.
  _, none_passed = anticheat.rollout_rewards(episodes[3:])
  assert np.isnan(none_passed["anticheat/hack_rate"])
