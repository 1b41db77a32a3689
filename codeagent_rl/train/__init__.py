"""Training: SFT, the PPO learner loop, evaluation and metrics."""
