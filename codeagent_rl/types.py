"""Pytrees that cross module boundaries.

Shapes use `B` for trajectories and `T` for token positions; `F` is the number
of stage-1 rule flags. Every type is a `flax.struct.dataclass`, so it can be
passed through `jax.jit`, sharded and checkpointed as it is.
"""

from __future__ import annotations

import chex
from flax import struct
import jax
import numpy as np

# Re-exported: sandbox-side code imports it from the jax-free module.
from codeagent_rl.status import JobStatus  # noqa: F401


@struct.dataclass
class TrajectoryBatch:
  """A padded batch of multi-turn trajectories, one row per trajectory.

  The rollout builds it as host (numpy) arrays; the learner cuts it to its
  longest row and sends it to the devices once.

  Attributes:
    tokens: [B, T] int32 token ids (prompt, actions, observations, padding).
    trainable: [B, T] bool, True where the policy produced the token. Prompt,
      observation and padding tokens are False: they are not MDP steps.
    valid: [B, T] bool, True where the token is not padding.
    length: [B] int32 number of valid tokens.
    truncated: [B] bool, True when a budget stopped the episode rather than a
      `<submit>` action; the learner bootstraps such a row from the critic's
      value after its last token.
    group_id: [B] int32 id of the prompt the trajectory was sampled for;
      group-relative baselines (GRPO, RLOO) normalise within a group.
  """

  tokens: jax.Array
  trainable: jax.Array
  valid: jax.Array
  length: jax.Array
  truncated: jax.Array
  group_id: jax.Array

  @property
  def shape(self) -> tuple[int, int]:
    """(B, T)."""
    return self.tokens.shape

  def check(self) -> None:
    """Raises AssertionError when shapes or dtypes break the contract."""
    b, t = self.tokens.shape
    chex.assert_shape([self.trainable, self.valid], (b, t))
    chex.assert_shape([self.length, self.truncated, self.group_id], (b,))
    chex.assert_type([self.trainable, self.valid, self.truncated], bool)
    chex.assert_type([self.tokens, self.length, self.group_id], int)


@struct.dataclass
class Rewards:
  """Per-trajectory reward components; anti-cheat stages map it to itself.

  Attributes:
    suite_a: [B] float32 pass fraction of the hidden tests (suite A).
    suite_b: [B] float32 pass fraction of the held-out tests (suite B).
    suite_gen: [B] float32 pass fraction of the tests generated from the
      reference beside suite B (1 where a task has none).
    executed: [B] bool, True when the submission ran in the sandbox.
    status: [B] int32 `JobStatus` of the submission's job.
    stage1_score: [B] float32 stage-1 classifier probability of cheating.
    stage1_flags: [B, F] bool stage-1 rule flags.
    stage2_ok: [B] bool, True when the held-out suite gate passed.
    total: [B] float32 the scalar reward RL optimises.
  """

  suite_a: jax.Array
  suite_b: jax.Array
  suite_gen: jax.Array
  executed: jax.Array
  status: jax.Array
  stage1_score: jax.Array
  stage1_flags: jax.Array
  stage2_ok: jax.Array
  total: jax.Array

  @classmethod
  def from_suites(
    cls,
    suite_a: jax.Array,
    suite_b: jax.Array,
    executed: jax.Array,
    status: jax.Array,
    num_flags: int,
    suite_gen: jax.Array | None = None,
  ) -> Rewards:
    """Rewards before anti-cheat: no flags, stage 2 open, total = suite A.

    Built on the host (numpy): the sandbox's results are host data, and the
    anti-cheat sends the batch to the device once, explicitly.

    Args:
      suite_a: [B] pass fraction on suite A.
      suite_b: [B] pass fraction on suite B.
      executed: [B] bool.
      status: [B] int `JobStatus` codes.
      num_flags: F, the number of stage-1 rule flags.
      suite_gen: [B] pass fraction on the generated suite (None: 1, as for
        tasks without one).

    Returns:
      A `Rewards` of numpy arrays whose `total` is `suite_a`.
    """
    suite_a = np.asarray(suite_a, np.float32)
    (b,) = suite_a.shape
    return cls(
      suite_a=suite_a,
      suite_b=np.asarray(suite_b, np.float32),
      suite_gen=(
        np.ones((b,), np.float32)
        if suite_gen is None
        else np.asarray(suite_gen, np.float32)
      ),
      executed=np.asarray(executed, bool),
      status=np.asarray(status, np.int32),
      stage1_score=np.zeros((b,), np.float32),
      stage1_flags=np.zeros((b, num_flags), bool),
      stage2_ok=np.ones((b,), bool),
      total=suite_a.copy(),
    )

  def check(self) -> None:
    """Raises AssertionError when shapes or dtypes break the contract."""
    (b,) = self.suite_a.shape
    chex.assert_shape(
      [
        self.suite_b,
        self.suite_gen,
        self.executed,
        self.status,
        self.stage1_score,
        self.stage2_ok,
        self.total,
      ],
      (b,),
    )
    chex.assert_rank(self.stage1_flags, 2)
    chex.assert_axis_dimension(self.stage1_flags, 0, b)
    chex.assert_type(
      [
        self.suite_a,
        self.suite_b,
        self.suite_gen,
        self.stage1_score,
        self.total,
      ],
      float,
    )
    chex.assert_type([self.executed, self.stage1_flags, self.stage2_ok], bool)
    chex.assert_type(self.status, int)
