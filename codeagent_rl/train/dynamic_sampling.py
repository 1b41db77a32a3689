"""DAPO's dynamic sampling: a batch of groups whose rewards differ.

A group (the `ppo.samples_per_prompt` rollouts of one prompt) whose
episodes all got the same `Rewards.total` gives a group-relative estimator
no signal at all (every advantage is 0) and a critic-based one only its
own errors. With `ppo.dynamic_sampling` the learner keeps the groups with
a reward spread, draws more prompts (`data.iteration_prompts` with the salt
`DYNAMIC_SAMPLING_PROMPTS + r`, keys `keys.dynamic_sampling_round`) and
rolls them out, round after round, until `ppo.prompts_per_iteration` such
groups are in hand or `ppo.dynamic_sampling_max_rounds` rounds have run
(DAPO, arXiv 2503.14476, section 3.2). A batch still short then is filled
with flat groups, first round first, so its shape never changes. Groups
keep the order they were sampled in; their ids become their position in
the batch.

Everything sampled counts: `dynamic_sampling/episodes_sampled` and
`dynamic_sampling/tokens_sampled` are the episodes and policy tokens of
every round, so estimators can be compared at equal sampling cost.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses

import jax
import numpy as np

from codeagent_rl.rollout import agent_loop


def group_spread(total: np.ndarray, group_id: np.ndarray) -> dict[int, bool]:
  """For each group id (in order of first appearance): rewards differ?"""
  total = np.asarray(total, np.float32)
  group_id = np.asarray(group_id)
  out = {}
  for g in dict.fromkeys(group_id.tolist()):
    rewards = total[group_id == g]
    out[int(g)] = bool(np.ptp(rewards) > 0)
  return out


def choose(
  spreads: Sequence[dict[int, bool]], want: int
) -> tuple[list[tuple[int, int]], int]:
  """Which (round, group) pairs make the batch, and how many are flat.

  Args:
    spreads: per round, `group_spread`'s answer.
    want: groups in the batch.

  Returns:
    (pairs in sampling order, the number of flat groups among them): the
    first `want` groups with a spread, then flat ones, first round first.

  Raises:
    ValueError: fewer than `want` groups were sampled in all.
  """
  spread = [(r, g) for r, s in enumerate(spreads) for g, ok in s.items() if ok]
  flat = [
    (r, g) for r, s in enumerate(spreads) for g, ok in s.items() if not ok
  ]
  if len(spread) + len(flat) < want:
    raise ValueError(
      f"dynamic sampling: {len(spread) + len(flat)} groups sampled, the"
      f" batch needs {want}."
    )
  chosen = spread[:want]
  filler = flat[: want - len(chosen)]
  return sorted([*chosen, *filler]), len(filler)


def select(
  rollouts: Sequence[agent_loop.Rollout], pairs: Sequence[tuple[int, int]]
) -> agent_loop.Rollout:
  """One rollout of the chosen groups' rows; group ids become 0, 1, ...

  Timings add up over the rounds (they ran one after another).
  """
  batches, episodes, checks = [], [], []
  for new_id, (r, g) in enumerate(pairs):
    rollout = rollouts[r]
    rows = np.flatnonzero(np.asarray(rollout.batch.group_id) == g)
    part = jax.tree.map(lambda x, rows=rows: np.asarray(x)[rows], rollout.batch)
    part = part.replace(group_id=np.full(len(rows), new_id, np.int32))
    batches.append(part)
    episodes += [rollout.episodes[i] for i in rows.tolist()]
    if rollout.render_ok is not None:
      checks.append(np.asarray(rollout.render_ok)[rows])
  batch = jax.tree.map(lambda *xs: np.concatenate(xs), *batches)
  timings = {
    k: float(sum(r.timings.get(k, 0.0) for r in rollouts))
    for k in rollouts[0].timings
  }
  render_ok = np.concatenate(checks) if len(checks) == len(batches) else None
  return agent_loop.Rollout(batch, episodes, timings, render_ok)


@dataclasses.dataclass(frozen=True)
class Rounds:
  """What the rounds of one iteration drew (for the metrics)."""

  rounds: int
  episodes_sampled: int
  tokens_sampled: int
  flat_groups_kept: int

  def scalars(self) -> dict[str, float]:
    """`dynamic_sampling/*` metrics of the iteration."""
    return {
      "dynamic_sampling/rounds": float(self.rounds),
      "dynamic_sampling/episodes_sampled": float(self.episodes_sampled),
      "dynamic_sampling/tokens_sampled": float(self.tokens_sampled),
      "dynamic_sampling/flat_groups_kept": float(self.flat_groups_kept),
    }


def sample(
  first: agent_loop.Rollout,
  first_total: np.ndarray,
  more: Callable[[int], tuple[agent_loop.Rollout, np.ndarray]],
  *,
  want: int,
  max_rounds: int,
) -> tuple[agent_loop.Rollout, Rounds]:
  """Rounds of rollouts until `want` groups have a reward spread.

  Args:
    first: round 0's rollout (all processes' episodes).
    first_total: its [B] `Rewards.total`.
    more: round r >= 1 -> (its rollout, its [B] totals); the caller draws
      the prompts and keys and scores the episodes.
    want: groups in the batch (`ppo.prompts_per_iteration`).
    max_rounds: the most rounds, the first included.

  Returns:
    (the batch's rollout, what the rounds drew).
  """
  rollouts = [first]
  spreads = [group_spread(first_total, first.batch.group_id)]
  while sum(sum(s.values()) for s in spreads) < want and len(rollouts) < max(
    max_rounds, 1
  ):
    rollout, total = more(len(rollouts))
    rollouts.append(rollout)
    spreads.append(group_spread(total, rollout.batch.group_id))
  pairs, flat = choose(spreads, want)
  return select(rollouts, pairs), Rounds(
    rounds=len(rollouts),
    episodes_sampled=sum(len(r.episodes) for r in rollouts),
    tokens_sampled=int(
      sum(np.asarray(r.batch.trainable).sum() for r in rollouts)
    ),
    flat_groups_kept=flat,
  )
