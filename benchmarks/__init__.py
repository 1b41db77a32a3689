"""Benchmarks: `python -m benchmarks.NAME` (one per measured quantity)."""
