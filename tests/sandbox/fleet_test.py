"""The Ray sandbox fleet: same results as the local pool, faults, shutdown.

All tests join one local Ray cluster (`ray_cluster`, ~7 s to start) and sit
in the xdist group "ray", so one worker runs them. Attack and judge tests
run against a Ray actor's sandbox too (conftest's `attack_pool`).
"""

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from codeagent_rl import types
from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import fleet
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import pools
from tests.helpers import sandboxes

pytestmark = pytest.mark.xdist_group("ray")

S = types.JobStatus
GVISOR = sandboxes.short_config("gvisor", 2, **sandboxes.SMALL_DISK)
PROCESS = dataclasses.replace(GVISOR, backend="process")


def _fleet(ray_cluster, base=PROCESS, actors=2, in_flight=2, **overrides):
  del ray_cluster  # joined by the fleet
  config = sandboxes.ray_config(base, actors=actors, in_flight=in_flight)
  return pools.open_pool(dataclasses.replace(config, **overrides))


def _sleeper(index: int, seconds: float) -> jobs.Job:
  code = f"import time\ndef f():\n  time.sleep({seconds})\n  return {index}\n"
  return jobs.Job.function(code, "f", [((), {})])


# One of each outcome a job can have, and both job kinds.
MIXED_JOBS = [
  jobs.Job.function("def f(x):\n  return [x, {x}, (x,)]\n", "f", [((3,), {})]),
  jobs.Job.function(
    "def f(x):\n  return 1 / x\n", "f", [((0,), {}), ((4,), {})]
  ),
  jobs.Job.function("def f():\n  while True:\n    pass\n", "f", [((), {})]),
  jobs.Job.program("import sys\nprint(sys.stdin.read()[::-1])\n", ["abc", ""]),
  jobs.Job.program("print('x' * (1 << 20))\n"),
  jobs.Job.program("import os\nos._exit(3)\n"),
  jobs.Job.program("b = bytearray(1 << 30)\n"),
  jobs.Job.program("syntax error here\n"),
]


def _essence(result: jobs.JobResult):
  """What must not depend on the backend (not times, not sandbox names)."""
  return (
    result.status,
    [(t.status, t.output, t.stdout, t.exit_code) for t in result.tests],
    result.exit_code,
    result.signal,
    result.stdout[:200],
  )


def test_fleet_gives_the_local_pools_results(ray_cluster, gvisor_pool):
  with _fleet(ray_cluster, base=GVISOR) as pool:
    remote = pool.map(MIXED_JOBS)
  local = gvisor_pool.map(MIXED_JOBS)
  assert [_essence(r) for r in remote] == [_essence(r) for r in local]
  statuses = {r.status for r in remote}
  # The mix covers what it claims to (a job list that all passes proves
  # little about faithfulness).
  assert {S.OK, S.TIMEOUT, S.OUTPUT_LIMIT} <= statuses


def test_unencodable_inputs_fail_the_future_as_locally(ray_cluster):
  job = jobs.Job.function("def f(x):\n  return x\n", "f", [((object(),), {})])
  with _fleet(ray_cluster) as pool:
    future = pool.submit(job)
    assert future.exception() is not None
    local_error = type(future.exception())
    # The fleet still serves.
    assert pool.run(MIXED_JOBS[0]).status == S.OK
  with harness.SandboxPool(PROCESS) as local:
    assert type(local.submit(job).exception()) is local_error


def test_killed_actor_loses_no_job_and_duplicates_none(ray_cluster):
  ray = ray_cluster
  job_list = [_sleeper(i, 0.4) for i in range(16)]
  with _fleet(ray_cluster, actors=2, in_flight=2) as pool:
    futures = [pool.submit(job) for job in job_list[:4]]
    victim = pool.actor_names()[0]
    time.sleep(0.2)  # its two jobs are running
    ray.kill(ray.get_actor(victim, namespace=fleet.NAMESPACE))
    futures += [pool.submit(job) for job in job_list[4:]]
    results = [f.result(timeout=120) for f in futures]
    stats = pool.stats
  assert [r.status for r in results] == [S.OK] * 16
  assert [r.tests[0].output for r in results] == list(range(16))
  assert stats["jobs"] == 16
  assert stats["actors_lost"] == 1
  assert stats["actors_started"] == 3
  # Its jobs in flight were sent once more, nothing else.
  assert 1 <= stats["retried"] <= 2
  assert stats["gave_up"] == 0
  assert victim not in pool.actor_names()


def _kill_when_running(ray, pool, started: int) -> None:
  """Kills the one actor once it is the `started`-th and holds a call."""
  while not (pool.stats["actors_started"] == started and pool.in_flight()):
    time.sleep(0.05)
  time.sleep(0.3)  # the call reached the actor
  ray.kill(ray.get_actor(pool.actor_names()[0], namespace=fleet.NAMESPACE))


def test_job_whose_actor_dies_twice_is_given_up(ray_cluster):
  ray = ray_cluster
  with _fleet(ray_cluster, actors=1, in_flight=1) as pool:
    future = pool.submit(_sleeper(7, 30.0))
    _kill_when_running(ray, pool, 1)
    _kill_when_running(ray, pool, 2)
    result = future.result(timeout=120)
    assert result.status == S.SANDBOX_ERROR
    assert "lost 2 times" in result.reason
    # The fleet has replaced the actor and still serves.
    assert pool.run(_sleeper(1, 0.0)).tests[0].output == 1
    stats = pool.stats
  assert stats["gave_up"] == 1 and stats["retried"] == 1
  assert stats["actors_lost"] == 2


def test_fleet_whose_actors_keep_dying_stops_and_says_so(ray_cluster):
  ray = ray_cluster
  with _fleet(ray_cluster, actors=1, in_flight=1) as pool:
    first = pool.submit(_sleeper(1, 30.0))
    _kill_when_running(ray, pool, 1)
    _kill_when_running(ray, pool, 2)
    assert first.result(timeout=120).status == S.SANDBOX_ERROR
    second = pool.submit(_sleeper(2, 30.0))
    _kill_when_running(ray, pool, 3)
    result = second.result(timeout=120)
    assert result.status == S.SANDBOX_ERROR
    assert "stopped replacing" in result.reason
    with pytest.raises(fleet.FleetError, match="in a row"):
      pool.submit(_sleeper(3, 0.0))


def test_hung_actor_is_replaced_and_its_job_rerun(ray_cluster, monkeypatch):
  # An actor that stops answering (a node cut off) is lost once a call is
  # past its deadline; SIGSTOP makes one.
  monkeypatch.setattr(fleet, "CALL_MARGIN_S", 3.0)
  with _fleet(ray_cluster, actors=2, in_flight=1, timeout_s=2.0) as pool:
    pid = pool.actor_info()[0]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
      results = pool.map([_sleeper(i, 0.1) for i in range(4)])
    finally:
      try:
        os.kill(pid, signal.SIGCONT)
      except ProcessLookupError:
        pass  # killed by the fleet
    stats = pool.stats
  assert [r.tests[0].output for r in results] == [0, 1, 2, 3]
  assert stats["actors_lost"] == 1 and stats["retried"] == 1


def test_back_pressure_bounds_jobs_in_flight(ray_cluster):
  finished, returned = [], []
  with _fleet(ray_cluster, actors=2, in_flight=2) as pool:

    def submit_all():
      for i in range(10):
        future = pool.submit(_sleeper(i, 0.5))
        returned.append(time.monotonic())
        future.add_done_callback(lambda _: finished.append(time.monotonic()))

    thread = threading.Thread(target=submit_all)
    thread.start()
    thread.join(timeout=120)
    while len(finished) < 10:
      time.sleep(0.05)
    stats = pool.stats
  assert stats["max_in_flight"] == 4  # 2 actors x 2, never more
  # The fifth submit waited for a job to finish; every later one too.
  for k in range(4, 10):
    assert returned[k] >= sorted(finished)[k - 4]


def test_close_leaves_no_actor_and_no_runsc(ray_cluster):
  ray = ray_cluster
  pool = _fleet(ray_cluster, base=GVISOR, actors=2)
  assert pool.run(MIXED_JOBS[0]).status == S.OK
  info = pool.actor_info()
  names = pool.actor_names()
  # Sandbox workers stay out of the learner's JAX process group.
  assert [i["jax_loaded"] for i in info] == [False, False]
  pool.close()
  for name in names:
    with pytest.raises(ValueError):
      ray.get_actor(name, namespace=fleet.NAMESPACE)
  assert pool.pool_stats["sandboxes_started"] >= 4
  deadline = time.monotonic() + 30
  left = ["?"]
  while left and time.monotonic() < deadline:
    ps = subprocess.run(
      ["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True
    ).stdout
    left = [
      line
      for line in ps.splitlines()
      for i in info
      if f"codeagent_sandbox.{i['pid']}." in line
      or line.split()[0] == str(i["pid"])
    ]
    time.sleep(0.2)
  assert not left, left
  with pytest.raises(RuntimeError, match="closed"):
    pool.submit(MIXED_JOBS[0])


def test_missing_sandbox_resource_is_a_clear_error(ray_cluster):
  with pytest.raises(fleet.FleetError, match="ray start --resources"):
    _fleet(ray_cluster, ray_resource="no_such_resource")


def test_actor_that_cannot_start_sandboxes_is_a_clear_error(ray_cluster):
  with pytest.raises(fleet.FleetError, match="runsc"):
    _fleet(ray_cluster, base=GVISOR, runsc_path="/nonexistent/runsc")


def test_config_checks_the_ray_settings():
  for field, value in [
    ("ray_actors", 0),
    ("ray_in_flight", 0),
    ("ray_backend", "ray"),
    ("ray_address", ""),
  ]:
    with pytest.raises(ValueError, match=config_lib.FLAG_NAMES[field]):
      dataclasses.replace(GVISOR, backend="ray", **{field: value})
  with pytest.raises(ValueError, match="open_pool"):
    harness.SandboxPool(dataclasses.replace(GVISOR, backend="ray"))


def test_describe_names_actors_for_ray_and_sandboxes_otherwise():
  # The first console lines of the trainer and of grade use it.
  assert GVISOR.describe() == "gvisor x2"
  ray = sandboxes.ray_config(GVISOR, actors=3)
  assert ray.describe() == "ray (3 actors x2 gvisor, local)"


def test_fleet_that_starts_its_own_cluster_prints_no_warning():
  # A fresh process (no session cluster): the fleet starts Ray itself, as
  # `grade --sandbox_backend=ray` and the trainer do. Ray's own start-up
  # chatter below WARNING is hidden by the fleet's logging level; a warning
  # (e.g. about token authentication) would reach the user's console.
  program = (
    "import dataclasses\n"
    "from codeagent_rl.sandbox import jobs, pools\n"
    "from tests.helpers import sandboxes\n"
    "config = sandboxes.ray_config(\n"
    "  sandboxes.short_config('gvisor', 1), actors=1, in_flight=1)\n"
    "config = dataclasses.replace(config, ray_resource='')\n"
    "with pools.open_pool(config) as pool:\n"
    "  print(pool.run(jobs.Job.program('print(6 * 7)')).stdout.strip())\n"
  )
  env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
  proc = subprocess.run(
    [sys.executable, "-c", program],
    capture_output=True,
    text=True,
    timeout=180,
    cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    env=env,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.strip().splitlines()[-1] == "42"
  assert "WARNING" not in proc.stderr and "Warning" not in proc.stderr, (
    proc.stderr[-3000:]
  )
