"""Launchers of `python -m codeagent_rl.main`: XManager and plain clusters."""
