"""Multi-turn rollouts: the agent loop."""
