"""The long-horizon comparison: estimators x seeds, one work unit each.

python launch/launch_xm.py --config=configs/long_horizon.py \
    --sweep=launch/sweeps/seeds_estimators.py --executor=local
"""

ESTIMATORS = ("gae", "grpo", "rloo")
SEEDS = (0, 1, 2)


def sweep():
  """Yields {"seed": s, "rl.advantage.estimator": e} for every pair."""
  for seed in SEEDS:
    for estimator in ESTIMATORS:
      yield {"seed": seed, "rl.advantage.estimator": estimator}
