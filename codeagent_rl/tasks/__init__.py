"""Tasks: their format, the judge, and the loaders that make them.

- `schema`: the frozen `Task` and its JSONL files.
- `judge`: compares sandbox outputs with a task's expected values (host
  side).
- `synthetic`: generated function tasks and SFT demonstration plans, from
  the families in `families/`.
- `humaneval`: the HumanEval import (suite A recorded in the sandbox).
- `suite_b/`: held-out tests by differential testing against the reference.
"""
