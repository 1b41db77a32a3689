"""Device mesh, logical-axis rules, sharded train states and checkpointing."""
