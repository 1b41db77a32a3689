"""What a test-aware critic reads before a trajectory (`critic.privileged`).

An asymmetric critic (SWEET-RL's) may see what the policy must not: with
`critic.privileged = "tests"` the critic's input is the task's hidden tests
(suite A, the tests that decide the reward), rendered as text, followed by
the trajectory's own ids. The actor's inputs, log-probs and samples are
untouched: the prefix is a separate pair of arrays in the learner's batch
(`steps.PPOBatch.critic_prefix`) that only the critic's forwards read
(`steps.critic_outputs`), and the critic is discarded after training, so
nothing of the tests reaches the deployed policy.

The prefix is encoded as untrusted text (`encode_plain`: never a special
id), cut to `critic.privileged_max_tokens` ids, and left-padded to the
batch's longest: positions count valid ids only
(`transformer.positions_from_valid`), so the padding changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from codeagent_rl.envs import protocol
from codeagent_rl.models import chat
from codeagent_rl.tasks import schema

HEADER = "Hidden tests:"


def test_line(task: schema.Task, test: dict) -> str:
  """One hidden test as the critic reads it (checkers in full)."""
  if "stdin" in test:  # a stdio task's, or a run of a repo's program
    return (
      f"stdin {protocol.value_repr(test['stdin'], None)} -> stdout"
      f" {protocol.value_repr(test['expected_stdout'], None)}"
    )
  # A repo task's call names its target; a function task's is the entry.
  target = test.get("call", task.entry_point)
  call = protocol.call_repr(target, test["args"], test.get("kwargs", {}), None)
  if "checker" in test:
    return f"{call} passes: {test['checker']}"
  return f"{call} == {protocol.value_repr(test['expected'], None)}"


def tests_text(task: schema.Task) -> str:
  """The task's hidden tests (suite A) as text, one line each."""
  lines = [HEADER] + [test_line(task, t) for t in task.hidden_tests]
  return "\n".join(lines) + "\n"


def prefix_arrays(
  fmt: chat.ConversationFormat,
  tasks: Sequence[schema.Task],
  max_tokens: int,
) -> tuple[np.ndarray, np.ndarray]:
  """[B, P] int32 ids and bool validity of each task's tests, left-padded.

  Args:
    fmt: the conversation format (its tokenizer and pad id).
    tasks: one task per row of the batch.
    max_tokens: the most ids of one row's text (cut at the end).

  Returns:
    (ids, valid); P is the longest row's length (at least 1).
  """
  if max_tokens < 1:
    raise ValueError(f"prefix_arrays: max_tokens={max_tokens} must be >= 1.")
  rows = [fmt.encode_plain(tests_text(t))[:max_tokens] for t in tasks]
  width = max(1, max((len(r) for r in rows), default=0))
  ids = np.full((len(rows), width), fmt.pad_id, np.int32)
  valid = np.zeros((len(rows), width), bool)
  for i, row in enumerate(rows):
    if row:
      ids[i, width - len(row) :] = row
      valid[i, width - len(row) :] = True
  return ids, valid
