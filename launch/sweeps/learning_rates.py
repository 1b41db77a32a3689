"""Actor learning rates around configs/tiny.py's 1e-4, two seeds each.

The critic's rate follows 5 x the actor's (configs/common.py) unless a
sweep sets `optim.critic_lr` too.

  python launch/launch_xm.py --config=configs/tiny.py \
    --sweep=launch/sweeps/learning_rates.py --executor=local
"""

ACTOR_LRS = (3e-5, 1e-4, 3e-4)
SEEDS = (0, 1)


def sweep():
  """Yields {"optim.actor_lr": lr, "seed": s}."""
  for lr in ACTOR_LRS:
    for seed in SEEDS:
      yield {"optim.actor_lr": lr, "seed": seed}
