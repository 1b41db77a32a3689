"""The one definition of "solved" (grade, evaluation and PPO metrics)."""

import pytest

from codeagent_rl import solved


@pytest.mark.parametrize(
  "passed,total,executed,rejected,want",
  [
    (3, 3, True, False, True),
    (2, 3, True, False, False),
    # No test: nothing was shown to work.
    (0, 0, True, False, False),
    # Not executed (stage-1 gate, a budget, a sandbox error): 0 of 0 tests.
    (0, 0, False, False, False),
    # Counts that claim a pass without a run are still not a solve.
    (3, 3, False, False, False),
    # Rejected by stage 1 after passing every test.
    (3, 3, True, True, False),
  ],
)
def test_suite_a(passed, total, executed, rejected, want):
  got = solved.suite_a(
    passed=passed, total=total, executed=executed, rejected=rejected
  )
  assert got is want


@pytest.mark.parametrize(
  "a,b,rejected,want",
  [
    ((3, 3), (4, 4), False, True),
    ((3, 3), (3, 4), False, False),
    ((2, 3), (4, 4), False, False),
    # An empty suite B counts as passed, for a sample solved on suite A.
    ((3, 3), (0, 0), False, True),
    ((2, 3), (0, 0), False, False),
    ((0, 0), (0, 0), False, False),
    ((3, 3), (0, 0), True, False),
    ((3, 3), (4, 4), True, False),
  ],
)
def test_suites_a_and_b(a, b, rejected, want):
  got = solved.suites_a_and_b(
    a_passed=a[0],
    a_total=a[1],
    b_passed=b[0],
    b_total=b[1],
    executed=True,
    rejected=rejected,
  )
  assert got is want
  unrun = solved.suites_a_and_b(
    a_passed=a[0],
    a_total=a[1],
    b_passed=b[0],
    b_total=b[1],
    executed=False,
    rejected=rejected,
  )
  assert unrun is False


@pytest.mark.parametrize(
  "executed,rejected,a,b,want_a,want_ab",
  [
    (True, False, (3, 3), (4, 4), True, True),
    (True, False, (3, 3), (1, 4), True, False),
    (False, False, (0, 0), (0, 0), False, False),  # not executed
    (True, True, (3, 3), (4, 4), False, False),  # stage 1 rejected
  ],
)
def test_result_lines(executed, rejected, a, b, want_a, want_ab):
  line = {
    "executed": executed,
    "stage1_rejected": rejected,
    "suite_a": {"passed": a[0], "total": a[1]},
    "suite_b": {"passed": b[0], "total": b[1]},
  }
  assert solved.line_a(line) is want_a
  assert solved.line_a_and_b(line) is want_ab
