"""Experiments over many training runs (codeagent_rl.experiments.compare)."""
