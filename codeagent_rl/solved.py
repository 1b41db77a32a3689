"""What "solved" means: the one definition grading, evaluation and PPO use.

A sample (an episode's submission) is **solved** (on suite A) when

- it ran: `executed` (not kept from the sandbox by anti-cheat stage 1, not
  cut by a budget, not a sandbox error);
- anti-cheat stage 1 did not reject it, before or after execution
  (`anticheat.stage1.rejected`); without an anti-cheat nothing is rejected;
- suite A has at least one test, and it passed every one.

It is **solved on A and B** when it is solved and it passed every test of
suite B and of the suite generated from the reference beside it (the
task's `generated_tests`, when it has them). An empty suite B counts as
passed, but only for a sample solved on suite A: stage 2 cannot gate a
task without held-out tests (`anticheat.pipeline.rewards_from_outcomes`
lets it through), so what gets full reward is counted as solved too.

Plain Python (no jax) so that every caller, and anything that reads result
files, can use it.
"""

from __future__ import annotations


def suite_a(*, passed: int, total: int, executed: bool, rejected: bool) -> bool:
  """Whether a sample is solved (see the module docstring).

  Args:
    passed: tests of suite A passed.
    total: tests in suite A.
    executed: the sample ran in the sandbox.
    rejected: anti-cheat stage 1 rejected it.

  Returns:
    True when it ran, was not rejected and passed all of a non-empty suite A.
  """
  return bool(executed and not rejected and 0 < total == passed)


def suites_a_and_b(
  *,
  a_passed: int,
  a_total: int,
  b_passed: int,
  b_total: int,
  executed: bool,
  rejected: bool,
  gen_passed: int = 0,
  gen_total: int = 0,
) -> bool:
  """Whether a sample is solved on suites A and B (module docstring).

  Args:
    a_passed: tests of suite A passed.
    a_total: tests in suite A.
    b_passed: tests of suite B passed.
    b_total: tests in suite B (0: no held-out suite, counts as passed).
    executed: the sample ran in the sandbox.
    rejected: anti-cheat stage 1 rejected it.
    gen_passed: tests of the generated suite passed.
    gen_total: tests in the generated suite (0: none).

  Returns:
    True when it is solved on suite A and passed all of suite B and of the
    generated suite.
  """
  solved_a = suite_a(
    passed=a_passed, total=a_total, executed=executed, rejected=rejected
  )
  return solved_a and b_passed == b_total and gen_passed == gen_total


def line_a(line: dict) -> bool:
  """`suite_a` of a result line of `python -m codeagent_rl.grade`."""
  return suite_a(
    passed=line["suite_a"]["passed"],
    total=line["suite_a"]["total"],
    executed=line["executed"],
    rejected=line["stage1_rejected"],
  )


def line_a_and_b(line: dict) -> bool:
  """`suites_a_and_b` of a result line of `python -m codeagent_rl.grade`."""
  return suites_a_and_b(
    a_passed=line["suite_a"]["passed"],
    a_total=line["suite_a"]["total"],
    b_passed=line["suite_b"]["passed"],
    b_total=line["suite_b"]["total"],
    executed=line["executed"],
    rejected=line["stage1_rejected"],
    # Result files written before generated suites existed lack the key.
    **_gen(line.get("suite_gen", {"passed": 0, "total": 0})),
  )


def _gen(score: dict) -> dict:
  return {"gen_passed": score["passed"], "gen_total": score["total"]}
