"""Demonstration trajectories for SFT, rendered by the real environment.

A demonstration plan (`tasks.synthetic.DemoPlan`) lists the policy's actions
only: `("run", code)` steps and a final `("submit", code)`. Its observations
must be exactly what the environment would say, so plans are played through
`CodeEnv` by the same agent loop as RL rollouts, with a policy that emits the
planned actions. The result is a trajectory batch whose `trainable` mask
marks the action tokens: the SFT loss mask.
"""

from __future__ import annotations

from collections.abc import Sequence

from codeagent_rl.envs import code_env
from codeagent_rl.envs import protocol
from codeagent_rl.models import chat
from codeagent_rl.parallel import transfers
from codeagent_rl.rollout import agent_loop
from codeagent_rl.tasks import schema

_ACTIONS = {"run": protocol.Run, "submit": protocol.Submit}


class PlanPolicy:
  """A `Policy` that emits planned action texts, one per turn.

  Each turn's ids are those of `protocol.format_action(...)` as an
  assistant message (`format.encode_action`), then the format's end-of-turn
  id if it has one: what the model samples when it writes that action and
  ends its turn (with the byte protocol the closing tag is the stop token).
  """

  def __init__(
    self,
    fmt: chat.ConversationFormat,
    plans: Sequence[Sequence[tuple[str, str]]],
  ):
    """Encodes the plans.

    Args:
      fmt: the policy's conversation format.
      plans: per row, the ("run" | "submit", code) actions in order, or
        the actions' complete texts (a repository plan's tool calls,
        `repo_demos.action_text`).

    Raises:
      ValueError: an action kind is neither "run" nor "submit".
    """
    self._turns = []
    for row, actions in enumerate(plans):
      texts = []
      for action in actions:
        if isinstance(action, str):
          texts.append(action)
          continue
        kind, code = action
        if kind not in _ACTIONS:
          raise ValueError(f"plan {row}: action {kind!r} is not run/submit.")
        texts.append(protocol.format_action(_ACTIONS[kind](code)))
      end = [] if fmt.end_of_turn_id is None else [fmt.end_of_turn_id]
      self._turns.append([fmt.encode_action(t) + end for t in texts])
    self._next = [0] * len(plans)

  def begin(self, prompts):
    """Nothing to prefill: the plan does not depend on the prompt."""
    if len(prompts) != len(self._turns):
      raise ValueError(f"{len(prompts)} prompts for {len(self._turns)} plans.")

  def generate(self, budgets, rng):
    """The next planned action of each row with a budget, cut to it."""
    del rng
    out = []
    for row, budget in enumerate(budgets):
      k = self._next[row]
      if budget == 0 or k >= len(self._turns[row]):
        out.append(([], []))
        continue
      self._next[row] += 1
      ids = self._turns[row][k][:budget]
      out.append((ids, [0.0] * len(ids)))
    return out

  def observe(self, observations):
    """Observations need no action: the plan is fixed."""
    del observations

  def end(self):
    """Nothing to release."""


def render(
  env: code_env.CodeEnv,
  tasks: Sequence[schema.Task],
  plans: Sequence[Sequence[tuple[str, str]]],
) -> agent_loop.Rollout:
  """Plays plans through the environment; returns their trajectories.

  Args:
    env: the environment (budgets should admit the longest plan).
    tasks: one task per plan.
    plans: per row, ("run" | "submit", code) actions, or action texts.

  Returns:
    The `Rollout`: `batch.trainable` marks action tokens, `episodes` tell
    whether each plan ran to its submit (stop reason "submit") or was cut by
    a budget, and their outcomes what the submission earned.
  """
  if len(tasks) != len(plans):
    raise ValueError(f"{len(tasks)} tasks for {len(plans)} plans.")
  policy = PlanPolicy(env.format, plans)
  # The plans draw nothing; the loop still folds each turn into a key.
  return agent_loop.collect(
    env, policy, tasks, list(range(len(tasks))), transfers.key(0)
  )
