"""The code-agent environment: action protocol, observations, budgets."""
