"""A test that ends at its time limit is a timeout, never a lost job.

The job process times each test with SIGALRM. An alarm delivered as the
timer is cancelled must give that test the "timeout" status, and the run
must go on to the next test and end with "done", as for any timeout.
Here the alarm is delivered exactly then, in this process, by a stand-in
for `signal.setitimer`; the frames are collected instead of written.
"""

import signal

import pytest

from codeagent_rl.sandbox import wire
from codeagent_rl.sandbox.guest import child


class _Exited(BaseException):
  """The runner's `os._exit`, here."""


def test_an_alarm_while_cancelling_is_that_tests_timeout(monkeypatch):
  frames = []
  monkeypatch.setattr(
    child, "_WRITE_FRAME", lambda fd, frame: frames.append(dict(frame))
  )

  def exit_(code):
    raise _Exited(code)

  def setitimer(which, seconds):
    if seconds == 0:  # the alarm arrives as the timer is cancelled
      signal.getsignal(signal.SIGALRM)(signal.SIGALRM, None)

  monkeypatch.setattr(child.os, "_exit", exit_)
  monkeypatch.setattr(child.signal, "setitimer", setitimer)
  job = {
    "code": "def f(x):\n  return x + 1\n",
    "entry_point": "f",
    "test_timeout_s": 1.0,
    "tests": [
      {"args": wire.encode([x]), "kwargs": wire.encode({})} for x in (1, 2)
    ],
  }
  old = signal.getsignal(signal.SIGALRM)
  try:
    run = child._runner(job)  # noqa: SLF001
    with pytest.raises(_Exited):
      run(child._fresh_module("child_alarm_test_job"))  # noqa: SLF001
  finally:
    signal.signal(signal.SIGALRM, old)
  events = [f["event"] for f in frames]
  assert events == ["start", "result", "result", "done"]
  for frame in frames[1:3]:
    assert frame["status"] == "timeout", frame
    assert "output" not in frame
