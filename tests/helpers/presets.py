"""The smoke preset made smaller, for the suite's end-to-end main jobs.

One set of shapes for every run of configs/tiny.py:smoke that a test starts
(e2e_test's runs, stop_test's, the quickstart notebook's): episodes of one
padded length, one micro-batch per update, two held-out tasks evaluated
greedily. Runs at the same XLA level then compile the same programs, and
the suite's persistent compilation cache serves all but the first.

No side effects on import (see sandboxes.py).
"""

from typing import Any

# Flattened config fields (ConfigDict.update_from_flattened_dict). The
# fields that change the shapes of compiled programs are the lengths, the
# micro-batch size and the held-out tasks' count; the others shorten.
SMALL_SMOKE: dict[str, Any] = {
  "data.num_train_tasks": 8,
  "data.num_eval_tasks": 2,
  "eval.sampled": False,
  "sft.steps": 4,
  "ppo.minibatches": 1,
  "ppo.micro_batch_size": 8,
  # Shorter episodes (demonstrations that do not fit are dropped; most of
  # the level-1 ones fit), and one padded length: every batch has the same
  # shape, so each step compiles once.
  "env.max_tokens_per_turn": 160,
  "env.max_total_tokens": 512,
  "ppo.length_bucket": 512,
}


def cli_flags(fields: dict[str, Any]) -> list[str]:
  """`fields` as the main job's command-line overrides (--config.X=V)."""
  return [f"--config.{name}={value}" for name, value in fields.items()]
