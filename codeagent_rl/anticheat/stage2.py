"""Stage 2 of the anti-cheat: the held-out suite gate (pure JAX).

  apply = jax.jit(functools.partial(stage2.stage2, cfg=cfg))
  rewards = apply(rewards)

`stage2_ok = suite_b >= cfg.stage2_threshold and suite_gen >=
cfg.stage2_threshold` (default 1.0: every test of the task's own suite B
and every test generated from the reference beside it; `suite_gen` is 1
for a task without generated tests, so such a task is gated as before).
Each suite is held to the threshold on its own: a large generated suite
cannot dilute a failure of the given one, nor the reverse. A trajectory
that fails gets total 0 ("zero") or `cfg.stage2_penalty` ("penalty"); with
`cfg.total_min_suites` one that passes gets `min(total, suite_b,
suite_gen)`, i.e. `min(suite_a, suite_b, suite_gen)` for the total
`code_env.rewards` starts with (suite A). A total
stage 1 already replaced (rejected) is kept as stage 1 left it: a penalty is
never undone and never applied twice.

Run it after stage 1. Suite B is held out and generated independently of
suite A (tasks/synthetic.py, tasks/suite_b/augment.py), so a solution
fitted to the hidden tests rarely passes it. A task without suite B has
suite_b 0 in `code_env.rewards`; pass suite_b 1 for such tasks
(`pipeline.rewards_from_outcomes` does) when stage 2 should not reject them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from codeagent_rl import types
from codeagent_rl.anticheat import config as config_lib
from codeagent_rl.anticheat import stage1 as stage1_lib


def stage2(
  rewards: types.Rewards, cfg: config_lib.AntiCheatConfig
) -> types.Rewards:
  """Applies the suite-B gate to a batch (or, under vmap, one trajectory).

  Args:
    rewards: [B] rewards after stage 1.
    cfg: the anti-cheat config (bind it with functools.partial).

  Returns:
    `rewards` with `stage2_ok` set and `total` updated.
  """
  ok = (rewards.suite_b >= cfg.stage2_threshold) & (
    rewards.suite_gen >= cfg.stage2_threshold
  )
  accepted = ~stage1_lib.rejected(
    rewards.stage1_flags, rewards.stage1_score, cfg
  )
  base = rewards.total
  if cfg.total_min_suites:
    base = jnp.minimum(base, jnp.minimum(rewards.suite_b, rewards.suite_gen))
  failed = 0.0 if cfg.stage2_action == "zero" else cfg.stage2_penalty
  total = jnp.where(ok, base, jnp.float32(failed))
  total = jnp.where(accepted, total, rewards.total)
  return rewards.replace(stage2_ok=ok, total=total.astype(jnp.float32))


def gap(rewards: types.Rewards) -> jax.Array:
  """Mean suite-A minus suite-B pass fraction (an overfitting signal)."""
  return jnp.mean(rewards.suite_a - rewards.suite_b)
