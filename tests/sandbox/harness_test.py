"""The pool, both backends, the config, and that nothing outlives a sandbox."""

import concurrent.futures
import dataclasses
import math
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

from absl import app
from absl import flags
from absl.testing import flagsaver
import pytest

from codeagent_rl import types
from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import worker

OK = types.JobStatus.OK
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(params=["gvisor", "process"])
def pool(request):
  return request.getfixturevalue(f"{request.param}_pool")


# --- config and flags --------------------------------------------------------


@pytest.mark.parametrize(
  "field,value,fragment",
  [
    ("backend", "docker", "--sandbox_backend='docker'"),
    ("pool_size", 0, "--sandbox_pool_size=0"),
    ("timeout_s", -1.0, "config.sandbox.timeout_s=-1.0"),
    ("test_timeout_s", 0, "config.sandbox.test_timeout_s=0"),
    ("memory_mb", 16, "config.sandbox.memory_mb=16"),
    ("max_output_bytes", 10, "config.sandbox.max_output_bytes=10"),
    ("recycle_after", 0, "--sandbox_recycle_after=0"),
    ("runsc_path", "", "--runsc_path=''"),
    ("runsc_platform", "xen", "--runsc_platform='xen'"),
    ("python", "python3", "--sandbox_python='python3'"),
    ("max_processes", 0, "config.sandbox.max_processes=0"),
    (
      "memory_mb",
      255,
      "config.sandbox.memory_mb=255: must be an integer >= 256",
    ),
    ("max_file_mb", 0, "config.sandbox.max_file_mb=0"),
    ("pool_size", 1.5, "--sandbox_pool_size=1.5"),
  ],
)
def test_config_names_flag_or_config_field_and_value(field, value, fragment):
  """Machine settings are flags; a job's limits are `config.sandbox`."""
  with pytest.raises(ValueError) as e:
    config_lib.SandboxConfig(**{field: value})
  assert str(e.value).startswith(fragment), str(e.value)


def test_job_memory_is_shared_by_its_processes():
  config = config_lib.SandboxConfig(max_processes=8, memory_mb=1024)
  assert config.process_memory_mb == 128
  # Every process of a job at its address-space limit fits the job's memory.
  assert config.max_processes * config.process_memory_mb <= config.memory_mb
  with pytest.raises(ValueError, match="each of the job's"):
    config_lib.SandboxConfig(max_processes=8, memory_mb=511)


def test_oci_backstops_exceed_what_one_job_may_use():
  config = config_lib.SandboxConfig(max_processes=16, memory_mb=2048)
  # A job at its limit, plus the one before it whose pages the sandbox may
  # not have returned yet, and a descriptor's worth of kernel memory each.
  kernel = config.max_processes * config.max_open_files << 20
  assert config.oci_memory_bytes > 2 * ((2048 << 20) + kernel)
  assert config.oci_pids_limit >= 16 * 16


@pytest.mark.parametrize("pool_size,fits", [(1, True), (4, False)])
def test_pool_backstops_must_fit_in_the_host(pool_size, fits):
  config = config_lib.SandboxConfig(pool_size=pool_size)
  available = 3 * config.oci_memory_bytes
  if fits:
    gvisor.check_host_memory(config, available)
    gvisor.check_host_memory(config, None)  # unknown: not checked
    return
  with pytest.raises(gvisor.HostMemoryError) as e:
    gvisor.check_host_memory(config, available)
  message = str(e.value)
  assert "--sandbox_pool_size" in message
  assert "--config.sandbox.memory_mb" in message
  assert f"{available >> 20} MiB available" in message


def test_pool_refuses_more_memory_than_the_host_has():
  huge = config_lib.SandboxConfig(memory_mb=1 << 30, pool_size=1)
  with pytest.raises(gvisor.HostMemoryError, match="Lower"):
    harness.SandboxPool(huge)


def test_config_from_flags():
  harness.define_flags(limits=True)
  with flagsaver.flagsaver():
    flags.FLAGS(
      [
        "prog",
        "--sandbox_backend=process",
        "--sandbox_pool_size=3",
        "--sandbox_timeout_s=7.5",
        "--sandbox_memory_mb=300",
        "--sandbox_max_processes=2",
        "--runsc_platform=kvm",
      ]
    )
    config = harness.config_from_flags(recycle_after=9)
  assert config == config_lib.SandboxConfig(
    backend="process",
    pool_size=3,
    timeout_s=7.5,
    memory_mb=300,
    max_processes=2,
    runsc_platform="kvm",
    recycle_after=9,
  )
  with flagsaver.flagsaver():
    flags.FLAGS(["prog", "--sandbox_pool_size=0"])
    with pytest.raises(ValueError, match="--sandbox_pool_size=0"):
      harness.config_from_flags()
  # A bad limit flag is named as the flag the user gave.
  with flagsaver.flagsaver():
    flags.FLAGS(["prog", "--sandbox_memory_mb=16"])
    with pytest.raises(ValueError, match="^--sandbox_memory_mb=16: "):
      harness.config_from_flags()


def test_an_experiments_limits_replace_the_limit_flags():
  harness.define_flags(limits=True)
  limits = config_lib.SandboxLimits.of(
    config_lib.SandboxConfig(timeout_s=3.0, memory_mb=512)
  )
  with flagsaver.flagsaver():
    flags.FLAGS(["prog", "--sandbox_timeout_s=7.5", "--sandbox_pool_size=3"])
    config = harness.config_from_flags(limits)
  assert (config.timeout_s, config.memory_mb, config.pool_size) == (
    3.0,
    512,
    3,
  )


def test_flags_are_defined_by_define_flags_only():
  fresh = flags.FlagValues()
  with pytest.raises(RuntimeError, match="harness.define_flags"):
    harness.config_from_flags(flag_values=fresh)
  harness.define_flags(flag_values=fresh)
  harness.define_flags(flag_values=fresh)  # again: harmless
  assert "sandbox_backend" in fresh and "sandbox_timeout_s" not in fresh
  harness.define_flags(limits=True, flag_values=fresh)
  assert "sandbox_timeout_s" in fresh
  fresh(["prog", "--sandbox_timeout_s=5"])
  assert harness.config_from_flags(flag_values=fresh).timeout_s == 5.0


def test_limits_of_a_config_section_name_the_field():
  section = dataclasses.asdict(
    config_lib.SandboxLimits.of(config_lib.SandboxConfig())
  )
  with pytest.raises(ValueError, match="^config.sandbox.timeout_s=0: "):
    config_lib.SandboxLimits.from_config({**section, "timeout_s": 0})
  with pytest.raises(ValueError, match="missing fields"):
    config_lib.SandboxLimits.from_config({"timeout_s": 1.0})


def test_config_from_cli_flags_applies_the_short_backend_flag():
  harness.define_flags()
  with flagsaver.flagsaver():
    flags.FLAGS(["prog", "--sandbox_pool_size=3"])
    assert harness.config_from_cli_flags(None).backend == "gvisor"
    config = harness.config_from_cli_flags("process", pool_size=1)
  assert (config.backend, config.pool_size) == ("process", 1)
  with flagsaver.flagsaver():
    flags.FLAGS(["prog", "--sandbox_backend=process"])
    assert harness.config_from_cli_flags("process").backend == "process"
    with pytest.raises(app.UsageError, match="--backend=gvisor contradicts"):
      harness.config_from_cli_flags("gvisor")


def test_missing_runsc_says_what_to_do():
  config = config_lib.SandboxConfig(runsc_path="/nonexistent/runsc")
  with pytest.raises(gvisor.RunscNotFoundError) as e:
    harness.SandboxPool(config)
  message = str(e.value)
  assert "apt-get install -y runsc" in message
  assert "--sandbox_backend=process" in message
  assert "/nonexistent/runsc" in message


def test_process_backend_warns_loudly(capfd):
  config = config_lib.SandboxConfig(backend="process", pool_size=1)
  with harness.SandboxPool(config) as pool:
    assert pool.run(jobs.Job.program("print(2)")).stdout == "2\n"
  err = capfd.readouterr().err
  assert "WARNING: --sandbox_backend=process" in err
  # The banner once, whether or not absl's log reaches stderr too.
  assert err.count("NO isolation") == 1


# --- jobs on both backends ---------------------------------------------------


def test_function_outputs_keep_their_types(pool):
  code = textwrap.dedent("""
    import math
    def f(kind):
      return {
        "tuple": (1, (2, "x")),
        "set": {1, 2},
        "frozenset": frozenset({"a"}),
        "nan": math.nan,
        "inf": -math.inf,
        "big": 3 ** 10000,
        "dict": {(1, 2): [None, True], "$k": 1.5},
        "neg_zero": -0.0,
      }[kind]
  """)
  kinds = ["tuple", "set", "frozenset", "nan", "inf", "big", "dict", "neg_zero"]
  result = pool.run(jobs.Job.function(code, "f", [([k], {}) for k in kinds]))
  assert result.status == OK, result
  outputs = {k: t.output for k, t in zip(kinds, result.tests, strict=True)}
  assert outputs["tuple"] == (1, (2, "x"))
  assert type(outputs["set"]) is set and outputs["set"] == {1, 2}
  assert type(outputs["frozenset"]) is frozenset
  assert math.isnan(outputs["nan"])
  assert outputs["inf"] == -math.inf
  assert outputs["big"] == 3**10000
  assert outputs["dict"] == {(1, 2): [None, True], "$k": 1.5}
  assert math.copysign(1, outputs["neg_zero"]) == -1


def test_kwargs_and_fresh_inputs_per_test(pool):
  code = textwrap.dedent("""
    SEEN = []
    def f(items, extra=0):
      items.append(extra)
      SEEN.append(len(SEEN))
      return (items, SEEN[-1])
  """)
  shared = [1, 2]
  inputs = [([shared], {"extra": i}) for i in range(6)]
  result = pool.run(jobs.Job.function(code, "f", inputs))
  assert result.status == OK, result
  # Every call got its own copy of the inputs...
  assert [t.output[0] for t in result.tests] == [[1, 2, i] for i in range(6)]
  # ...and all calls ran in one process, in some order.
  assert sorted(t.output[1] for t in result.tests) == list(range(6))


def test_tests_run_in_shuffled_order(pool):
  code = "N = []\ndef f(i):\n  N.append(i)\n  return len(N) - 1\n"
  inputs = [([i], {}) for i in range(8)]
  orders = set()
  for _ in range(3):
    result = pool.run(jobs.Job.function(code, "f", inputs))
    orders.add(tuple(t.output for t in result.tests))
  # Identity order three times running has probability (1/8!)^3.
  assert orders != {tuple(range(8))}


@pytest.mark.parametrize(
  "code,fragment",
  [
    ("def f(:\n", "SyntaxError"),
    ("raise ValueError('at import')\n", "ValueError: at import"),
    ("g = 1\n", "no callable named 'f'"),
  ],
)
def test_load_errors_fail_every_test(pool, code, fragment):
  result = pool.run(jobs.Job.function(code, "f", [([], {}), ([], {})]))
  assert result.status == OK, result
  assert [t.status for t in result.tests] == ["error", "error"]
  assert fragment in result.tests[0].error


def test_unserialisable_outputs_are_bad_output(pool):
  code = textwrap.dedent("""
    def f(kind):
      if kind == 0:
        return b"bytes"
      if kind == 1:
        return (x for x in [])
      if kind == 2:
        return [1, object()]
      return 3
  """)
  result = pool.run(jobs.Job.function(code, "f", [([i], {}) for i in range(4)]))
  assert [t.status for t in result.tests] == ["bad_output"] * 3 + ["ok"]
  assert "bytes" in result.tests[0].error
  assert "generator" in result.tests[1].error
  assert result.tests[3].output == 3


def test_exceptions_fail_only_their_test(pool):
  code = "def f(x):\n  return 10 // x\n"
  result = pool.run(jobs.Job.function(code, "f", [([0], {}), ([5], {})]))
  assert result.status == OK
  assert result.tests[0].status == "error"
  assert "ZeroDivisionError" in result.tests[0].error
  assert result.tests[1].output == 2


def test_stdio_runs_once_per_stdin(pool):
  code = textwrap.dedent("""
    import sys
    data = sys.stdin.read().split()
    print(sum(int(x) for x in data))
    print("note", file=sys.stderr)
    if not data:
      sys.exit(3)
  """)
  result = pool.run(jobs.Job.program(code, ["1 2 3\n", "", "10\n"]))
  assert [t.stdout for t in result.tests] == ["6\n", "0\n", "10\n"]
  assert [t.exit_code for t in result.tests] == [0, 3, 0]
  assert [t.status for t in result.tests] == ["ok", "error", "ok"]
  assert result.status == types.JobStatus.CRASH
  assert result.exit_code == 3
  assert result.stdout == "6\n0\n10\n"
  assert result.stderr == "note\n" * 3


def test_stdio_input_and_unicode(pool):
  code = "name = input()\nprint(f'héllo {name[::-1]} ✓')\n"
  result = pool.run(jobs.Job.program(code, ["dlrow ✓\n"]))
  assert result.status == OK, result
  assert result.stdout == "héllo ✓ world ✓\n"


def test_uncaught_exception_in_program_is_crash(pool):
  result = pool.run(jobs.Job.program("import sys\nprint('a')\n1/0\n"))
  assert result.status == types.JobStatus.CRASH
  assert result.exit_code == 1
  assert result.stdout == "a\n"
  assert "ZeroDivisionError" in result.stderr


def test_result_json_uses_status_names(pool):
  result = pool.run(jobs.Job.program("while True:\n  pass\n", timeout_s=0.5))
  out = result.to_json()
  assert out["status"] == "timeout"
  assert set(out) >= {"status", "exit_code", "stdout", "stderr", "duration_s"}


# --- the pool ---------------------------------------------------------------


def test_pool_serves_from_every_sandbox_and_is_thread_safe():
  config = dataclasses.replace(config_lib.SandboxConfig(), pool_size=2)
  code = "import time\ndef f(x):\n  time.sleep(0.1)\n  return x * x\n"
  job_list = [jobs.Job.function(code, "f", [([i], {})]) for i in range(8)]
  with harness.SandboxPool(config) as pool:
    with concurrent.futures.ThreadPoolExecutor(4) as submitters:
      futures = list(submitters.map(pool.submit, job_list))
    results = [f.result() for f in futures]
    assert [r.tests[0].output for r in pool.map(job_list[:3])] == [0, 1, 4]
    stats = dict(pool.stats)
  assert [r.tests[0].output for r in results] == [i * i for i in range(8)]
  assert all(r.status == OK for r in results)
  # Both warm sandboxes took jobs (one worker would leave the other idle).
  assert len({r.sandbox for r in results}) == 2
  assert stats == {
    "jobs": 11,
    "sandboxes_started": 2,
    "sandbox_errors": 0,
    "recycled": 0,
  }
  with pytest.raises(RuntimeError, match="closed"):
    pool.submit(job_list[0])


def test_pool_recycles_after_n_jobs():
  # The process backend: recycling is the pool's logic, whatever the backend,
  # and a gVisor restart costs a second.
  config = dataclasses.replace(
    config_lib.SandboxConfig(), backend="process", pool_size=1, recycle_after=2
  )
  with harness.SandboxPool(config) as pool:
    names = [pool.run(jobs.Job.program("print(1)")).sandbox for _ in range(5)]
    stats = dict(pool.stats)
  assert names[0] == names[1] != names[2] == names[3] != names[4]
  assert stats["recycled"] == 2
  assert stats["sandboxes_started"] == 3


def _processes_mentioning(text: str) -> list[str]:
  found = []
  for pid in os.listdir("/proc"):
    if not pid.isdigit():
      continue
    try:
      cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
      continue
    if text.encode() in cmdline:
      found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
  return found


def _wait_until_gone(text: str, timeout_s: float = 10.0) -> list[str]:
  deadline = time.monotonic() + timeout_s
  while (left := _processes_mentioning(text)) and time.monotonic() < deadline:
    time.sleep(0.1)
  return left


def test_dead_sandbox_is_reported_and_replaced():
  config = dataclasses.replace(config_lib.SandboxConfig(), pool_size=1)
  with harness.SandboxPool(config) as pool:
    root = pool._launcher.root
    future = pool.submit(
      jobs.Job.program("import time\ntime.sleep(30)\n", timeout_s=20)
    )
    time.sleep(1.0)
    # Kill the sandbox from outside, as an OCI limit or a sentry panic would.
    killed = 0
    for pid in os.listdir("/proc"):
      try:
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
      except OSError:
        continue
      if b"runsc-sandbox" in cmdline and root.encode() in cmdline:
        os.kill(int(pid), signal.SIGKILL)
        killed += 1
    assert killed == 1
    result = future.result(timeout=30)
    assert result.status == types.JobStatus.SANDBOX_ERROR, result
    assert [t.status for t in result.tests] == ["not_run"]
    assert "sandbox" in result.reason
    after = pool.run(jobs.Job.program("print('alive')"))
    assert after.status == OK and after.stdout == "alive\n"
    assert pool.stats["sandbox_errors"] == 1
    assert pool.stats["sandboxes_started"] == 2
  assert _wait_until_gone(root) == []
  assert not os.path.exists(root)


def test_close_leaves_nothing_behind():
  config = dataclasses.replace(config_lib.SandboxConfig(), pool_size=2)
  pool = harness.SandboxPool(config)
  root = pool._launcher.root
  assert len(_processes_mentioning(root)) >= 2
  pool.run(
    jobs.Job.program(
      "import os\nif os.fork() == 0:\n  import time\n  time.sleep(60)\n"
    )
  )
  pool.close()
  assert _wait_until_gone(root) == []
  assert not os.path.exists(root)
  state = subprocess.run(
    ["runsc", f"--root={root}/state", "list", "--quiet"],
    capture_output=True,
    text=True,
    check=False,
  )
  assert state.stdout.strip() == ""


LAUNCH_SCRIPT = """
import json, sys, time
from codeagent_rl.sandbox import config, gvisor, worker
if sys.argv[2] == "gvisor":
  launcher = gvisor.GVisorLauncher(config.SandboxConfig())
  guest = launcher.launch()
  print(launcher.root, flush=True)
else:
  launcher = worker.ProcessLauncher(config.SandboxConfig(backend="process"))
  guest = launcher.launch()
  print(json.loads(guest.proc.args[-1])["scratch_root"], flush=True)
if sys.argv[1] == "exit":
  # Wait until the test has seen the sandbox running, then exit normally
  # (without closing the launcher).
  sys.stdin.readline()
if sys.argv[1] == "hang":
  # Keep the forkserver busy with a job, so that it would not notice the end
  # of its input: only PR_SET_PDEATHSIG can take the sandbox down in time.
  import threading
  job = {"id": 1, "kind": "stdio", "code": "import time; time.sleep(90)",
         "entry_point": None, "tests": [{"stdin": ""}], "timeout_s": 100,
         "test_timeout_s": 100, "memory_mb": 256, "max_output_bytes": 4096,
         "max_processes": 4, "max_file_mb": 1, "max_open_files": 32}
  threading.Thread(target=guest.run, args=(job, 100), daemon=True).start()
  time.sleep(120)
"""


def _start_host(
  mode: str, tmp_dir, backend: str = "gvisor"
) -> tuple[subprocess.Popen, str]:
  # A private TMPDIR: launchers of other test processes sweep the default
  # one, and must not race this test for the stale root.
  proc = subprocess.Popen(
    [sys.executable, "-c", LAUNCH_SCRIPT, mode, backend],
    cwd=REPO_ROOT,
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    text=True,
    env={**os.environ, "TMPDIR": str(tmp_dir)},
  )
  root = proc.stdout.readline().strip()
  assert root.startswith("/") and os.path.isdir(root), root
  assert _processes_mentioning(root)
  return proc, root


def test_host_exit_without_close_cleans_up(tmp_path):
  proc, root = _start_host("exit", tmp_path)
  proc.stdin.write("exit\n")
  proc.stdin.close()
  assert proc.wait(timeout=30) == 0
  assert _wait_until_gone(root) == []
  assert not os.path.exists(root)


def test_host_crash_leaves_no_sandbox_and_state_is_swept(tmp_path):
  proc, root = _start_host("hang", tmp_path)
  proc.kill()  # SIGKILL: no atexit, no cleanup of any kind
  proc.wait(timeout=10)
  # PR_SET_PDEATHSIG takes `runsc run` down, and the sandbox with it.
  assert _wait_until_gone(root) == []
  assert os.path.isdir(root)  # the state is left...
  removed = gvisor.sweep_stale_roots(gvisor.find_runsc("runsc"), str(tmp_path))
  assert root in removed  # ...until the next launcher sweeps it
  assert not os.path.exists(root)


def test_process_backend_dies_with_its_host_and_its_scratch_is_swept(
  tmp_path,
):
  live, live_scratch = _start_host("hang", tmp_path, backend="process")
  proc, scratch = _start_host("hang", tmp_path, backend="process")
  assert len(_processes_mentioning(scratch)) >= 2  # server, zygote, spare
  assert pathlib.Path(scratch).name.startswith(
    f"{worker.SCRATCH_PREFIX}{proc.pid}."
  )
  proc.kill()  # SIGKILL: no atexit, no clean-up of any kind
  proc.wait(timeout=10)
  assert _wait_until_gone(scratch) == []
  assert os.path.isdir(scratch)  # left behind...
  try:
    # ...until a launcher starts: only the dead host's directory goes.
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    started = subprocess.run(
      [
        sys.executable,
        "-c",
        "from codeagent_rl.sandbox import config, worker;"
        " worker.ProcessLauncher(config.SandboxConfig(backend='process'))",
      ],
      cwd=REPO_ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=60,
    )
    assert started.returncode == 0, started.stderr[-2000:]
    assert not os.path.exists(scratch)
    assert os.path.isdir(live_scratch)
    # A directory whose name holds no pid is not the sweep's.
    other = tmp_path / f"{worker.SCRATCH_PREFIX}notapid"
    other.mkdir()
    assert worker.sweep_stale_scratch(str(tmp_path)) == []
    assert other.is_dir() and os.path.isdir(live_scratch)
  finally:
    live.kill()
    live.wait(timeout=10)
  assert worker.sweep_stale_scratch(str(tmp_path)) == [live_scratch]


def test_failed_cleanup_refuses_next_job_which_runs_on_a_replacement():
  # The process backend as root: jobs run as the untrusted uid, and the
  # server empties the scratch area as that uid, so a root-owned directory
  # with a file in it cannot be removed: the clean-up after a job fails.
  assert os.geteuid() == 0, "sandbox tests run as root (gVisor needs it)"
  config = config_lib.SandboxConfig(
    backend="process", pool_size=1, timeout_s=4.0, test_timeout_s=1.0
  )
  with harness.SandboxPool(config) as pool:
    where = pool.run(
      jobs.Job.program("import os\nprint(os.path.dirname(os.getcwd()))")
    )
    stuck = pathlib.Path(where.stdout.strip()) / "stuck"
    stuck.mkdir()
    (stuck / "file").write_text("root's")
    before = dict(pool.stats)
    job = jobs.Job.function("def f(x):\n  return -x\n", "f", [([4], {})])
    results = [pool.run(job) for _ in range(3)]
    assert [r.status for r in results] == [OK] * 3, results
    assert [r.tests[0].output for r in results] == [-4] * 3
    # One job was refused by the unclean sandbox and ran on a replacement.
    assert pool.stats["recycled"] == before["recycled"] + 1, pool.stats
    assert pool.stats["sandboxes_started"] == before["sandboxes_started"] + 1
    assert pool.stats["sandbox_errors"] == before["sandbox_errors"]
    assert pool.stats["jobs"] == before["jobs"] + 3
