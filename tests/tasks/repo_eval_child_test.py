"""The generator's reference runner survives an alarm at its time limit.

`repo_eval_child` times each call and program run with SIGALRM. An alarm
that goes off as the timer is cancelled (the call ended at its limit)
must count as that call's time limit, never escape and crash the task
generation (it did, in a run's data generation: `_Limit: time` from the
cancelling `setitimer`). Here the alarm is delivered exactly then, every
time, by a stand-in for `signal`.
"""

import signal as real_signal
import sys

from codeagent_rl.tasks import repo_eval_child as child

FILES = {
  "pkg/__init__.py": "",
  "pkg/m.py": "def f(x):\n  return x + 1\n",
  "cli.py": "from pkg import m\nprint(m.f(int(input())))\n",
}


class _AlarmAtCancel:
  """`signal` whose cancelling `setitimer(..., 0)` delivers the alarm."""

  ITIMER_REAL = real_signal.ITIMER_REAL

  def __init__(self):
    self.cancels = 0

  def setitimer(self, which, seconds):
    if seconds == 0:
      self.cancels += 1
      child._on_alarm(real_signal.SIGALRM, None)  # noqa: SLF001


def test_an_alarm_while_cancelling_is_the_calls_limit(monkeypatch):
  monkeypatch.setattr(sys, "stdin", sys.stdin)  # the runner replaces it
  fake = _AlarmAtCancel()
  monkeypatch.setattr(child, "signal", fake)
  out = child._run_variant(  # noqa: SLF001
    FILES, [["pkg.m", "f", [1]], ["pkg.m", "f", [2]]], ["3\n"], "cli.py"
  )
  # The first call hit the limit; what follows it is skipped, as for any
  # call past the limits.
  assert out["calls"] == [["limit", "_Limit"], ["limit", "skipped"]]
  assert out["runs"] == [[-1, ""]]
  assert fake.cancels == 1


def test_a_program_run_at_its_limit_is_a_limit(monkeypatch):
  monkeypatch.setattr(sys, "stdin", sys.stdin)
  fake = _AlarmAtCancel()
  monkeypatch.setattr(child, "signal", fake)
  out = child._run_variant(FILES, [], ["3\n"], "cli.py")  # noqa: SLF001
  assert out == {"calls": [], "runs": [[-1, "4\n"]]}
