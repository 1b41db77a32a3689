"""Tiny experiment on a 2-core CPU: byte tokenizer, synthetic code tasks.

Only the `rl` section exists so far; the model, sandbox and trainer sections
and the command that runs this config arrive with the trainer issue.

Presets: `configs/tiny.py` (default) and `configs/tiny.py:smoke` (the
smallest settings, used by tests).
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Returns the tiny config; `arg` selects a preset ("smoke")."""
  preset = arg or "default"
  if preset not in ("default", "smoke"):
    raise ValueError(
      f"configs/tiny.py: unknown preset {preset!r}; expected 'default' or"
      " 'smoke'."
    )
  config = ml_collections.ConfigDict()
  # Name of the preset, recorded in logs.
  config.preset = preset
  # Seed of parameters, data order and sampling.
  config.seed = 0
  # Advantage estimation, PPO losses and KL; defaults in configs/common.py.
  config.rl = common.get_rl_config()
  config.lock()
  return config
