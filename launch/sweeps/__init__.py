"""Sweeps: each module's `sweep()` yields dicts of config overrides."""
