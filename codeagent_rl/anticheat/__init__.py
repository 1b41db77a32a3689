"""Anti-cheat: trajectory features, stage 1 and 2 reward gates, monitors."""
