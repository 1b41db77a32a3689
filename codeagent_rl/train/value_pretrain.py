"""VAPO's value pre-training: the critic learns the SFT policy's returns first.

A critic copied from the actor's trunk with a zero value head starts far
from the returns, and its early errors would be the actor's advantages.
`pretrain_value` runs before the first PPO iteration (`ppo_loop.run_ppo`) with
the actor frozen; see its docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import json
import pathlib
from typing import Any

from absl import logging

from codeagent_rl.parallel import distributed
from codeagent_rl.tasks import schema
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import keys

# What a value pre-training round records (`value_pretrain.jsonl`).
_PRETRAIN_SCALARS = (
  "loss/critic",
  "critic/explained_variance",
  "critic/value_mean",
  "return/mean",
  "reward/total_mean",
  "grad_norm/critic",
  "sampling/episodes",
  "sampling/tokens",
)


def pretrain_value(
  learner: Any,
  states: tuple[Any, Any],
  train_tasks: Sequence[schema.Task],
  path: pathlib.Path,
  console: Callable[[str], None] = print,
) -> tuple[Any, Any]:
  """Pre-trains the critic of `learner` (a `ppo.Learner`).

  Each round rolls out the frozen SFT policy on its own prompts and keys
  (`keys.value_pretrain`, `data.VALUE_PRETRAIN_PROMPTS`: PPO's draws stay
  as they are) and regresses the critic on Monte-Carlo returns. Rounds stop
  at `ppo.value_pretrain_iterations`, or once the explained variance (of
  the values before each round's update) gained less than
  `ppo.value_pretrain_min_gain` over `ppo.value_pretrain_patience` rounds.
  One JSON line per round goes to `path`, rewritten after every round (a
  stopped run keeps the rounds it did: the record of a 30-round run
  killed at round 10 is what says its explained variance was flat);
  `ppo_loop.run_ppo` then saves the pre-trained critic as checkpoint step 0,
  which a resumed run starts from (an interrupted pre-training starts
  again).

  Returns:
    (actor, critic): the actor as it was, the pre-trained critic.
  """
  exp = learner.exp
  cfg = exp.ppo
  rows, evs = [], []
  for k in range(cfg.value_pretrain_iterations):
    prompts = data_lib.iteration_prompts(
      train_tasks,
      exp.seed,
      k,
      cfg.prompts_per_iteration,
      salt=data_lib.VALUE_PRETRAIN_PROMPTS,
    )
    states, metrics = learner.iteration(
      states,
      prompts,
      keys.value_pretrain(exp.seed, k),
      index=0,
      value_only=True,
    )
    scalars = metrics.scalars
    row = {"round": k, **{n: scalars.get(n) for n in _PRETRAIN_SCALARS}}
    rows.append(row)
    evs.append(scalars.get("critic/explained_variance", float("nan")))
    if distributed.is_primary():  # the others computed the same rows
      tmp = path.with_name(path.name + ".tmp")
      tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
      tmp.replace(path)
    console(
      f"value pretrain {k + 1}/{cfg.value_pretrain_iterations} | critic"
      f" {row['loss/critic']:.2e} | explained variance {evs[-1]:.3f}"
    )
    patience = cfg.value_pretrain_patience
    if len(evs) > patience and not (
      evs[-1] - evs[-1 - patience] >= cfg.value_pretrain_min_gain
    ):
      logging.info("value pre-training: levelled off after %d rounds", k + 1)
      break
  return states
