"""Pure RL math: GAE, PPO losses, KL estimators, advantage estimators."""
