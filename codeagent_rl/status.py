"""Sandbox job status codes, importable without jax.

`codeagent_rl.types` re-exports `JobStatus`; the sandbox and its CLI import
it from here so that they start without loading jax.
"""

import enum


class JobStatus(enum.IntEnum):
  """Outcome of one sandbox job, stored as an int in `Rewards.status`."""

  OK = 0
  TIMEOUT = 1
  MEMORY = 2
  OUTPUT_LIMIT = 3
  CRASH = 4
  SANDBOX_ERROR = 5
  # Not sent to the sandbox: stage 1 vetoed it, or no code was submitted.
  NOT_EXECUTED = 6
