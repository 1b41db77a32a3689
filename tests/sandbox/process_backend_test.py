"""The process backend keeps concurrent sandboxes' jobs apart (as root).

Each forkserver's jobs run as a uid of their own, so one sandbox's job
that holds every process its limit allows cannot make another sandbox's
fork fail, nor signal its processes.
"""

import concurrent.futures
import json
import os
import time

import pytest

from codeagent_rl import types
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import worker
from tests.helpers import sandboxes

pytestmark = pytest.mark.skipif(
  os.geteuid() != 0, reason="jobs change uid only when the host runs as root"
)

# Forks until the kernel refuses, holds the children for `hold` seconds.
FILL = """
import json, os, sys, time
kids = []
while True:
  try:
    pid = os.fork()
  except OSError:
    break
  if pid == 0:
    time.sleep({hold})
    os._exit(0)
  kids.append(pid)
print(json.dumps({{"uid": os.getuid(), "kids": kids}}))
sys.stdout.flush()
time.sleep({hold})
"""

# Forks once, then signals every other process it can see that runs as a
# job uid (its own, or any private one): the other sandbox's children.
FORK_AND_KILL = """
import json, os
me = os.getuid()
out = {"uid": me, "seen": 0, "killed": 0}
pid = os.fork()
if pid == 0:
  os._exit(3)
out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
for name in os.listdir("/proc"):
  if not name.isdigit() or int(name) == os.getpid():
    continue
  try:
    with open(f"/proc/{name}/status") as f:
      uid = int(next(l for l in f if l.startswith("Uid:")).split()[1])
  except (OSError, StopIteration, ValueError):
    continue
  if uid == me or uid >= BASE:
    out["seen"] += 1
    try:
      os.kill(int(name), 9)
      out["killed"] += 1
    except OSError:
      pass
print(json.dumps(out))
"""


def test_private_uids_are_distinct_and_unowned():
  uids = {
    worker.private_uid(pid, n) for pid in (1, 2, 4_194_303) for n in range(3)
  }
  assert len(uids) == 9
  assert min(uids) >= worker.PRIVATE_UID_BASE
  assert max(uids) < 2**32 - 1


def test_a_full_sandbox_does_not_starve_another():
  config = sandboxes.short_config("process", 1, max_processes=4)
  with harness.SandboxPool(config) as hog, harness.SandboxPool(config) as other:
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
      filling = ex.submit(
        hog.run,
        jobs.Job.program(FILL.format(hold=2.0), [""], test_timeout_s=4.0),
      )
      # The hog's children are alive while `other` runs (it holds them 2 s).
      time.sleep(1.0)
      code = f"BASE = {worker.PRIVATE_UID_BASE}\n" + FORK_AND_KILL
      result = other.run(jobs.Job.program(code, [""], test_timeout_s=3.0))
      hogged = filling.result()
  assert result.status == types.JobStatus.OK, result
  assert hogged.status == types.JobStatus.OK, hogged
  out = json.loads(result.tests[0].stdout)
  filled = json.loads(hogged.tests[0].stdout)
  assert len(filled["kids"]) >= 2  # the hog did reach its limit
  assert out["fork"] == 3
  assert out["seen"] >= len(filled["kids"])  # the hog's children were there
  assert out["killed"] == 0
  assert out["uid"] != filled["uid"]
  assert worker.PRIVATE_UID_BASE <= min(out["uid"], filled["uid"])
