"""Episode budgets and a small task for tests that run CodeEnv episodes."""

from collections.abc import Iterable

from codeagent_rl.envs import code_env
from codeagent_rl.tasks import schema


def budgets(max_turns: int) -> code_env.EnvConfig:
  """Budgets roomy enough for the tests' scripted actions, and `max_turns`."""
  return code_env.EnvConfig(
    max_turns=max_turns,
    max_tokens_per_turn=400,
    max_total_tokens=4000,
    max_wall_s=60.0,
    obs_max_bytes=400,
  )


def _sums(pairs: Iterable[tuple[int, int]]) -> tuple[dict, ...]:
  return tuple({"args": [a, b], "expected": a + b} for a, b in pairs)


def add_task(
  hidden: Iterable[tuple[int, int]], heldout: Iterable[tuple[int, int]]
) -> schema.Task:
  """`add(a, b)`: visible test (1, 2); suites A and B on these pairs."""
  return schema.Task(
    task_id="add",
    prompt="Add two numbers.",
    entry_point="add",
    kind="function",
    visible_tests=_sums([(1, 2)]),
    hidden_tests=_sums(hidden),
    heldout_tests=_sums(heldout),
    reference_solution="def add(a, b):\n  return a + b\n",
    metadata={},
  )
