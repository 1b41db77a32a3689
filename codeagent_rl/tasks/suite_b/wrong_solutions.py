"""Plausible but wrong HumanEval solutions: what suite B must catch.

  for wrong in wrong_solutions.WRONG:
    code = humaneval.body_completion(problem[wrong.task_id], wrong.body)

Each passes HumanEval's own `check` (suite A) and is wrong on inputs that
check does not try: the fitted-to-suite-A solutions that the stage-2 gate
(suite B must pass too) is there to refuse. `tests/tasks/suite_b_test.py`
asserts that suite B catches each of them; `benchmarks/
humaneval_grade_bench.py` counts how many pass suite B as the import
builds it.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Wrong:
  """One wrong solution: a function body for a HumanEval prompt.

  Attributes:
    task_id: the HumanEval problem.
    name: what is wrong, in a few words.
    body: the body of the prompt's function (unindented).
  """

  task_id: str
  name: str
  body: str


WRONG = (
  Wrong(
    "HumanEval/0",
    "smallest gap of sorted neighbours (fails under two numbers)",
    """\
s = sorted(numbers)
return min(b - a for a, b in zip(s, s[1:])) < threshold""",
  ),
  Wrong(
    "HumanEval/0",
    "<= threshold instead of <",
    """\
for i, a in enumerate(numbers):
    for b in numbers[i + 1:]:
        if abs(a - b) <= threshold:
            return True
return False""",
  ),
  Wrong(
    "HumanEval/2",
    "rounded to 6 decimals (within the original 1e-6 tolerance)",
    "return round(number % 1.0, 6)",
  ),
  Wrong(
    "HumanEval/13",
    "off-by-one: never tries min(a, b) itself",
    """\
for d in range(min(a, b) - 1, 0, -1):
    if a % d == 0 and b % d == 0:
        return d
return 1""",
  ),
  Wrong(
    "HumanEval/26",
    "sorted instead of the input order",
    "return sorted(x for x in numbers if numbers.count(x) == 1)",
  ),
  Wrong(
    "HumanEval/31",
    "off-by-one trial-division bound",
    """\
if n < 2:
    return False
if n % 2 == 0:
    return n == 2
for k in range(3, int(n ** 0.5), 2):
    if n % k == 0:
        return False
return True""",
  ),
  Wrong(
    "HumanEval/32",
    "bisection on [-100, 100] (zeros further out)",
    """\
lo, hi = -100.0, 100.0
for _ in range(200):
    mid = (lo + hi) / 2
    if poly(xs, lo) * poly(xs, mid) <= 0:
        hi = mid
    else:
        lo = mid
return lo""",
  ),
  Wrong(
    "HumanEval/35",
    "running max starts at 0 (all-negative lists)",
    """\
best = 0
for e in l:
    if e > best:
        best = e
return best""",
  ),
  Wrong(
    "HumanEval/43",
    "x and -x only for x != 0 (two zeros)",
    "return any(-x in l for x in l if x != 0)",
  ),
  Wrong(
    "HumanEval/52",
    "max(l) fails on the empty list",
    "return max(l) < t",
  ),
  Wrong(
    "HumanEval/57",
    "off-by-one loop bound (last pair unchecked)",
    """\
up = all(l[i] <= l[i + 1] for i in range(len(l) - 2))
down = all(l[i] >= l[i + 1] for i in range(len(l) - 2))
return up or down""",
  ),
  Wrong(
    "HumanEval/83",
    "/ instead of // (float rounding for n >= 24)",
    "return 1 if n == 1 else int(18 * 10 ** (n - 1) / 10)",
  ),
  Wrong(
    "HumanEval/140",
    "runs of exactly 3 spaces become '-', longer ones do not",
    "return text.replace('   ', '-').replace(' ', '_')",
  ),
)
