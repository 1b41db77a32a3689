"""Demonstrations rendered through the real environment."""

import numpy as np
import pytest

from codeagent_rl.envs import code_env
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.rollout import demos
from codeagent_rl.tasks import schema

TOK = tokenizer_lib.ByteTokenizer()
ENV = code_env.EnvConfig(
  max_turns=4,
  max_tokens_per_turn=200,
  max_total_tokens=1500,
  max_wall_s=60.0,
  obs_max_bytes=200,
)
GOOD = "def inc(x):\n  return x + 1\n"
BUGGY = "def inc(x):\n  return x + 2\n"


def _task():
  tests = lambda xs: tuple({"args": [x], "expected": x + 1} for x in xs)  # noqa: E731
  return schema.Task(
    task_id="inc",
    prompt="Write inc(x) returning x + 1.",
    entry_point="inc",
    kind="function",
    visible_tests=tests([1, 2]),
    hidden_tests=tests([0, 5, 9, -3, 100]),
    heldout_tests=tests(range(-10, 15)),
    reference_solution=GOOD,
    metadata={},
  )


@pytest.fixture(scope="module")
def env(module_pool):
  return code_env.CodeEnv(module_pool, TOK, ENV)


def test_multi_turn_demo_carries_the_real_observation(env):
  plans = [
    [("run", BUGGY), ("submit", GOOD)],
    [("submit", GOOD)],
    [("submit", BUGGY)],
  ]
  out = demos.render(env, [_task()] * 3, plans)
  assert [e.stop_reason for e in out.episodes] == ["submit"] * 3
  np.testing.assert_allclose(
    [e.outcome.suite_a for e in out.episodes], [1.0, 1.0, 0.0]
  )
  tokens = np.asarray(out.batch.tokens[0])
  trainable = np.asarray(out.batch.trainable[0])
  n = int(out.batch.length[0])
  text = TOK.decode(tokens[:n].tolist())
  # The observation between the two actions is the env's own verdict.
  assert "<run>" in text and "<submit>" in text
  assert "tests: 0/2 passed" in text
  actions = TOK.decode(tokens[:n][trainable[:n]].tolist())
  assert actions == f"<run>{BUGGY}</run><submit>{GOOD}</submit>"
  # Nothing of the observation is trainable.
  obs = TOK.decode(tokens[:n][~trainable[:n]].tolist())
  assert "tests: 0/2 passed" in obs


def test_bad_plans_are_refused(env):
  with pytest.raises(ValueError, match="'exec' is not run/submit"):
    demos.render(env, [_task()], [[("exec", GOOD)]])
  with pytest.raises(ValueError, match="1 tasks for 2 plans"):
    demos.render(env, [_task()], [[("submit", GOOD)]] * 2)
