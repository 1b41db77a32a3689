"""codeagent_rl: PPO with a critic for code agents, on sandboxed rewards."""
