"""Attacks on the gVisor sandbox: each must be contained.

Every test runs a real attack in the shared one-worker gVisor pool (local,
and again behind a Ray sandbox actor: `attack_pool`) and
checks four things: the attack failed (it saw or changed nothing it should
not), the job got the right status, the host is untouched (canaries intact,
nothing written), and the pool still serves the next job correctly.
"""

import json
import os
import pathlib
import secrets
import socket

import pytest

from codeagent_rl import types
from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import worker

OK = types.JobStatus.OK


@pytest.fixture(scope="module")
def host_canary(tmp_path_factory):
  """A host file the sandbox must not read, with unguessable content."""
  path = tmp_path_factory.mktemp("host") / "canary.txt"
  content = "host-canary-" + secrets.token_hex(16)
  path.write_text(content)
  return path, content


@pytest.fixture
def pool(attack_pool, host_canary):
  """The shared pool; after each test, the host and the pool are checked."""
  before = dict(attack_pool.stats)
  yield attack_pool
  path, content = host_canary
  assert path.read_text() == content, "the host canary changed"
  assert sorted(p.name for p in path.parent.iterdir()) == ["canary.txt"]
  assert_next_job_ok(attack_pool)
  # No attack may kill the sandbox unless the test says so (it checks), nor
  # the Ray actor that serves it.
  after = attack_pool.stats
  assert after["sandbox_errors"] == before["sandbox_errors"]
  assert after.get("actors_lost", 0) == before.get("actors_lost", 0)


def assert_next_job_ok(pool) -> None:
  job = jobs.Job.function(
    "def f(x):\n  return [x, x * 2]\n", "f", [([3], {}), ([5], {})]
  )
  result = pool.run(job)
  assert result.status == OK, result
  assert [t.output for t in result.tests] == [[3, 6], [5, 10]]


def run_program(pool, code: str, **limits) -> jobs.JobResult:
  return pool.run(jobs.Job.program(code, **limits))


# Jobs have no /proc, so a job finds the other processes by sending signal 0
# to every pid up to a little past its own: "job" when it may signal it (the
# same uid; a zombie too), "other" when it exists but belongs to another uid.
PROCESS_LIST = """
def processes():
  out = {}
  for pid in range(1, os.getpid() + 256):
    if pid != os.getpid():
      try:
        os.kill(pid, 0)
        out[str(pid)] = "job"
      except PermissionError:
        out[str(pid)] = "other"
      except ProcessLookupError:
        pass
  return out
"""


def run_probe(pool, code: str) -> jobs.JobResult:
  """Runs a program that uses PROCESS_LIST: a signal per pid takes a while."""
  return run_program(pool, code, test_timeout_s=pool.config.timeout_s)


def sandbox_state(pool) -> dict:
  """What a fresh job sees: other processes and the scratch area."""
  code = (
    "import json, os\n"
    + PROCESS_LIST
    + """
print(json.dumps({"others": processes(), "scratch": os.listdir("/tmp"),
                  "mine": os.path.basename(os.getcwd()),
                  "own_files": os.listdir(".")}))
"""
  )
  result = run_probe(pool, code)
  assert result.status == OK, result
  return json.loads(result.stdout)


def assert_clean_sandbox(pool) -> None:
  state = sandbox_state(pool)
  others = state["others"]
  # The server (init), the zygote and at most one spare, all root: no
  # process of an earlier job (uid 65534) is left, not even a zombie.
  assert others.get("1") == "other", state
  assert all(kind == "other" for kind in others.values()), state
  assert 2 <= len(others) <= 3, state
  assert state["scratch"] == [state["mine"]], state
  assert state["own_files"] == [], state


def test_host_file_outside_binds_is_invisible(pool, host_canary):
  path, content = host_canary
  code = f"""
import os
found = {{}}
for p in [{str(path)!r}, "/etc/passwd", "/etc/hostname", "/root",
          "/home", {os.getcwd()!r}, {str(path.parent)!r}]:
  try:
    found[p] = sorted(os.listdir(p)) if os.path.isdir(p) else open(p).read()
  except OSError as e:
    found[p] = type(e).__name__
for root, dirs, files in os.walk("/tmp"):
  found[root] = files
print(found)
print(sorted(os.listdir("/")))
"""
  result = run_program(pool, code)
  assert result.status == OK, result
  assert content not in result.stdout + result.stderr
  lines = result.stdout.splitlines()
  assert f"{str(path)!r}: 'FileNotFoundError'" in lines[0]
  assert "'/etc/passwd': 'FileNotFoundError'" in lines[0]
  # The root holds only the mount points of the binds and the sandbox's own
  # file systems: no /etc, /home, /root or the repository.
  assert set(eval(lines[1])) <= {
    gvisor.SERVER_PROC_PARENT.lstrip("/"),  # root-only: the server's procfs
    "dev",
    "lib",
    "lib64",
    "proc",
    "sandbox",
    "sys",
    "tmp",
    "usr",
  }


def test_host_environment_is_invisible(pool, env_canary):
  name, value = env_canary
  assert os.environ[name] == value  # the host has it
  code = """
import os
print(dict(os.environ))
for p in ["/proc/self/environ", "/proc/1/environ"]:
  try:
    print(open(p, "rb").read())
  except OSError as e:
    print(type(e).__name__)
"""
  result = run_program(pool, code)
  assert result.status == OK, result
  assert value not in result.stdout + result.stderr
  assert name not in result.stdout
  assert result.stdout.splitlines() == ["{}"] + ["FileNotFoundError"] * 2


def test_cannot_reach_host_listener(pool):
  listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  listener.bind(("0.0.0.0", 0))
  listener.listen(8)
  listener.setblocking(False)
  port = listener.getsockname()[1]
  addresses = ["127.0.0.1"]
  try:
    addresses.append(socket.gethostbyname(socket.gethostname()))
  except OSError:
    pass
  code = f"""
import socket
for host in {addresses!r}:
  try:
    socket.create_connection((host, {port}), timeout=1).close()
    print(host, "CONNECTED")
  except OSError as e:
    print(host, type(e).__name__)
"""
  try:
    result = run_program(pool, code)
    with pytest.raises(BlockingIOError):
      listener.accept()  # nobody connected
  finally:
    listener.close()
  assert result.status == OK, result
  assert "CONNECTED" not in result.stdout
  assert len(result.stdout.splitlines()) == len(addresses)


def test_fork_bomb(pool):
  code = """
import os
while True:
  try:
    os.fork()
  except OSError:
    pass
"""
  result = run_program(pool, code, timeout_s=2.0, test_timeout_s=2.0)
  assert result.status == types.JobStatus.TIMEOUT, result
  assert_clean_sandbox(pool)


def test_fork_bomb_hits_process_limit(pool):
  code = """
import os, time
children = 0
try:
  while True:
    if os.fork() == 0:
      time.sleep(30)
    children += 1
except OSError as e:
  print(children, type(e).__name__)
"""
  result = run_program(pool, code)
  assert result.status == OK, result
  children, error = result.stdout.split()
  # RLIMIT_NPROC: Linux counts the job process itself (limit - 1 children);
  # this gVisor allows one more.
  limit = pool.config.max_processes
  assert limit - 1 <= int(children) <= limit
  assert error == "BlockingIOError"
  assert_clean_sandbox(pool)


@pytest.mark.parametrize(
  "code",
  [
    "x = bytearray(4 << 30)\n",
    "chunks = []\nwhile True:\n  chunks.append(bytearray(16 << 20))\n",
  ],
  ids=["one_block", "growing"],
)
def test_memory_bomb(pool, code):
  # Touching 256 MiB takes a while under gVisor on a busy machine.
  result = run_program(pool, code, timeout_s=4.0, test_timeout_s=4.0)
  assert result.status == types.JobStatus.MEMORY, result
  assert result.tests[0].error == "MemoryError"


def test_memory_bomb_in_function(pool):
  job = jobs.Job.function(
    "def f(n):\n  return len(bytearray(n))\n",
    "f",
    [([1 << 40], {}), ([10], {})],
  )
  result = pool.run(job)
  assert result.status == types.JobStatus.MEMORY, result
  assert [t.status for t in result.tests] == ["memory", "ok"]
  assert result.tests[1].output == 10


def test_fill_scratch_disk(pool):
  code = """
import os
written = 0
i = 0
while True:
  with open(f"fill{i}", "wb") as f:
    for _ in range(4):
      f.write(b"x" * (1 << 20))
      written += 1 << 20
  i += 1
"""
  result = run_program(pool, code)
  assert result.status == types.JobStatus.CRASH, result
  assert (
    "No space left on device" in result.stderr
    or "File too large" in result.stderr
  ), result.stderr
  # The next job has the whole scratch area again.
  refill = """
for i in range(3):
  with open(f"big{i}", "wb") as f:
    f.write(b"y" * (6 << 20))
print("wrote 18 MiB")
"""
  result = run_program(pool, refill)
  assert result.status == OK, result
  assert_clean_sandbox(pool)


def test_single_file_is_capped(pool):
  code = 'open("big", "wb").write(b"x" * (32 << 20))\n'
  result = run_program(pool, code)
  assert result.status == types.JobStatus.CRASH, result
  assert "File too large" in result.stderr


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_flood(pool, stream):
  code = f"""
import sys
while True:
  sys.{stream}.write("x" * 4096)
"""
  result = run_program(pool, code)
  assert result.status == types.JobStatus.OUTPUT_LIMIT, result
  # Killed when it crossed the cap, not at the time limit.
  assert result.duration_s < pool.config.timeout_s / 2
  text = result.stdout if stream == "stdout" else result.stderr
  assert pool.config.max_output_bytes <= len(text)
  assert len(text) <= pool.config.max_output_bytes + 100


def test_returned_data_flood(pool):
  job = jobs.Job.function(
    "def f():\n  return 'x' * (10 << 20)\n", "f", [([], {})]
  )
  result = pool.run(job)
  assert result.status == types.JobStatus.OUTPUT_LIMIT, result
  assert result.tests[0].status != "ok"


def test_infinite_loop_function(pool):
  job = jobs.Job.function(
    "def f(x):\n  while x:\n    pass\n  return 7\n",
    "f",
    [([1], {}), ([0], {}), ([1], {})],
  )
  result = pool.run(job)
  assert result.status == types.JobStatus.TIMEOUT, result
  assert [t.status for t in result.tests] == ["timeout", "ok", "timeout"]
  assert result.tests[1].output == 7


def test_infinite_loop_program(pool):
  result = run_program(pool, "while True:\n  pass\n", timeout_s=1.5)
  assert result.status == types.JobStatus.TIMEOUT, result
  assert result.duration_s < 3.0


def test_ignores_sigterm_and_sigalrm(pool):
  code = """
import signal
def f(x):
  for sig in (signal.SIGTERM, signal.SIGALRM, signal.SIGINT, signal.SIGXCPU):
    signal.signal(sig, signal.SIG_IGN)
  while True:
    try:
      while True:
        pass
    except BaseException:
      pass
"""
  job = jobs.Job.function(code, "f", [([1], {}), ([2], {})])
  result = pool.run(job)
  assert result.status == types.JobStatus.TIMEOUT, result
  statuses = sorted(t.status for t in result.tests)
  # The first test (in shuffled order) is killed from outside at its
  # per-test limit; the job stops there.
  assert statuses == ["not_run", "timeout"], result.tests
  limit = pool.config.test_timeout_s
  assert result.duration_s < limit + 1.5
  assert_clean_sandbox(pool)


def test_daemon_cannot_outlive_job_or_touch_next_one(pool):
  marker = "tampered-" + secrets.token_hex(4)
  attack = f"""
import os, sys, time
if os.fork() == 0:
  os.setsid()
  if os.fork() == 0:
    for fd in range(3):
      os.close(fd)
    deadline = time.time() + 20
    while time.time() < deadline:
      for name in os.listdir("/tmp"):
        for target in (f"/tmp/{{name}}/{marker}", f"/tmp/{marker}"):
          try:
            with open(target, "w") as f:
              f.write("{marker}")
          except OSError:
            pass
      time.sleep(0.01)
  os._exit(0)
print("parent done")
"""
  result = run_program(pool, attack)
  assert result.status == OK, result
  assert result.stdout == "parent done\n"
  victim = (
    "import json, os, time\n"
    + PROCESS_LIST
    + """
time.sleep(0.5)
print(json.dumps({"files": os.listdir("."), "tmp": os.listdir("/tmp"),
                  "procs": processes()}))
"""
  )
  result = run_probe(pool, victim)
  assert result.status == OK, result
  state = json.loads(result.stdout)
  assert marker not in result.stdout
  assert state["files"] == []
  assert len(state["tmp"]) == 1
  # Nothing but the server, zygote and spare (root) besides this job.
  assert all(kind == "other" for kind in state["procs"].values()), state
  assert_clean_sandbox(pool)


def test_function_job_daemon_dies_before_next_job(pool):
  # A function job's reply goes out before its processes are killed; a
  # daemon in a session of its own must still be gone when the next job runs.
  code = """
import os, time
if os.fork() == 0:
  os.setsid()
  if os.fork() == 0:
    time.sleep(30)
  os._exit(0)
def f(x):
  return x + 1
"""
  result = pool.run(jobs.Job.function(code, "f", [([1], {}), ([2], {})]))
  assert result.status == OK, result
  assert [t.output for t in result.tests] == [2, 3]
  assert_clean_sandbox(pool)


def test_cannot_kill_forkserver(pool):
  before = dict(pool.stats)
  code = """
import os, signal
for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
  try:
    os.kill(1, sig)
    print("sent", sig.name)
  except OSError as e:
    print(type(e).__name__)
try:
  os.kill(-1, signal.SIGKILL)  # all it may signal: no one but itself
  print("survived kill(-1)")
except OSError as e:
  print(type(e).__name__)
"""
  result = run_program(pool, code)
  lines = result.stdout.splitlines()
  assert lines[:3] == ["PermissionError"] * 3, result
  assert lines[3] in ("survived kill(-1)", "ProcessLookupError"), result
  assert result.status == OK
  assert pool.stats["sandboxes_started"] == before["sandboxes_started"]


def test_cannot_reach_another_jobs_scratch(pool):
  attack = """
import os
mine = os.path.basename(os.getcwd())
planted = []
for name in ["planted", "0123456789abcdef"]:
  os.makedirs(f"/tmp/{name}/sub", exist_ok=True)
  with open(f"/tmp/{name}/sub/note", "w") as f:
    f.write("from another job")
  planted.append(name)
os.symlink("/tmp", "/tmp/loop")
os.chmod("/tmp/planted/sub", 0)
os.chmod("/tmp", 0)
print(mine, planted)
"""
  first = run_program(pool, attack)
  assert first.status == OK, first
  state = sandbox_state(pool)
  assert state["scratch"] == [state["mine"]]
  assert state["mine"] != first.stdout.split()[0]
  assert state["own_files"] == []


def test_forkserver_proc_entries(pool, env_canary, host_canary):
  """No /proc entry of the server, the zygote or a spare is readable.

  This runsc lets any uid read every process's environ, cmdline, maps and
  status, and ignores PR_SET_DUMPABLE and hidepid; so jobs get an empty
  /proc, and the server's procfs sits under a root-only directory.
  """
  code = (
    "import json, os\n"
    + PROCESS_LIST
    + f"""
names = ("environ", "cmdline", "maps", "status", "stat", "mem", "auxv",
         "fd", "cwd", "root", "exe")
others = processes()
out = {{"proc": os.listdir("/proc"), "others": others}}
for base in ("/proc", {gvisor.SERVER_PROC!r}):
  for pid in [*others, "self", str(os.getpid())]:
    for name in names:
      path = f"{{base}}/{{pid}}/{{name}}"
      try:
        with open(path, "rb") as f:
          out[path] = f.read(4096).decode("latin-1")
      except OSError as e:
        out[path] = type(e).__name__
for path in ({gvisor.SERVER_PROC_PARENT!r}, {gvisor.SERVER_PROC!r}):
  try:
    out[path] = os.listdir(path)
  except OSError as e:
    out[path] = type(e).__name__
print(json.dumps(out))
"""
  )
  result = run_probe(pool, code)
  assert result.status == OK, result
  report = json.loads(result.stdout)
  assert report.pop("proc") == [], report
  # The server (pid 1) and the zygote exist; the probe did look at them.
  others = report.pop("others")
  assert others.get("1") == "other" and len(others) >= 2, others
  assert report.pop(gvisor.SERVER_PROC_PARENT) == "PermissionError"
  assert report.pop(gvisor.SERVER_PROC) == "PermissionError"
  assert len(report) == 2 * (len(others) + 2) * 11, sorted(report)
  for path, outcome in report.items():
    expected = (
      "PermissionError"
      if path.startswith(gvisor.SERVER_PROC)
      else "FileNotFoundError"
    )
    assert outcome == expected, (path, outcome)
  text = json.dumps(report)
  assert env_canary[1] not in text
  assert host_canary[1] not in text


def test_symlinks_out_of_scratch(pool, host_canary):
  path, content = host_canary
  code = f"""
import os
targets = {{"canary": {str(path)!r}, "root": "/", "up": "../..",
            "guest": "/sandbox/guest/__main__.py",
            "forkserver_root": {gvisor.SERVER_PROC + "/1/root"!r},
            "python": "/usr/lib"}}
for name, target in targets.items():
  os.symlink(target, name)
out = []
for name in targets:
  try:
    with open(name) as f:
      out.append((name, "read", f.read(30)))
  except OSError as e:
    out.append((name, "read", type(e).__name__))
  try:
    with open(name if os.path.isfile(name) else name + "/x", "w") as f:
      f.write("overwritten")
    out.append((name, "write", "ok"))
  except OSError as e:
    out.append((name, "write", type(e).__name__))
print(out)
"""
  result = run_program(pool, code)
  assert result.status == OK, result
  out = eval(result.stdout)
  writes = {name: what for name, op, what in out if op == "write"}
  assert writes.pop("canary") == "FileNotFoundError", out
  assert writes.pop("forkserver_root") == "PermissionError", out
  # Read-only binds or root-owned directories: refused either way.
  assert set(writes.values()) <= {"PermissionError", "OSError"}, out
  assert len(writes) == 4, out
  assert content not in result.stdout
  # Cleanup did not follow the links: the guest and the runtime are intact.
  check = """
import os
main = "/sandbox/guest/__main__.py"
print(sorted(os.listdir("/sandbox")), os.path.getsize(main))
"""
  result = run_program(pool, check)
  guest = worker.GUEST_DIR / worker.GUEST_MAIN
  shipped = sorted({name.split("/")[0] for name in worker.GUEST_FILES})
  assert result.stdout.split("]")[0] + "]" == str(shipped)
  assert int(result.stdout.split()[-1]) == guest.stat().st_size
  assert_clean_sandbox(pool)


def test_writes_to_host_paths_do_not_reach_host(pool):
  name = "codeagent-pwned-" + secrets.token_hex(6)
  code = f"""
import os
for d in ["/tmp", "/", "/usr", "/usr/lib", "/sandbox", "/dev/shm"]:
  try:
    with open(os.path.join(d, {name!r}), "w") as f:
      f.write("x")
    print(d, "ok")
  except OSError as e:
    print(d, type(e).__name__)
"""
  result = run_program(pool, code)
  assert result.status == OK, result
  wrote = [
    line.split()[0] for line in result.stdout.splitlines() if "ok" in line
  ]
  assert wrote == ["/tmp"], result.stdout  # the sandbox's own tmpfs
  for d in ["/tmp", "/", "/usr", "/usr/lib", str(worker.GUEST_DIR)]:
    assert not (pathlib.Path(d) / name).exists()


def test_job_holds_only_its_own_descriptors(pool):
  # No /proc/self/fd in a job: fstat every descriptor the server could own.
  code = """
import os, stat
fds = {}
for fd in range(4096):
  try:
    mode = os.fstat(fd).st_mode
  except OSError:
    continue
  fds[fd] = ("fifo" if stat.S_ISFIFO(mode) else
             "file" if stat.S_ISREG(mode) else oct(stat.S_IFMT(mode)))
print(fds)
"""
  result = run_program(pool, code)
  assert result.status == OK, result
  fds = eval(result.stdout)
  # stdin (a memfd), stdout, stderr and the result pipe: nothing of the
  # server, the zygote or the host.
  assert fds == {0: "file", 1: "fifo", 2: "fifo", 3: "fifo"}, fds


def test_sandbox_processes_have_no_capabilities(pool):
  code = """
import ctypes, os
class Header(ctypes.Structure):
  _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
  _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
              ("inheritable", ctypes.c_uint32)]
header, data = Header(0x20080522, 0), (Data * 2)()  # capget v3, this process
assert ctypes.CDLL(None).capget(ctypes.byref(header), data) == 0
def caps(field):
  return getattr(data[0], field) | getattr(data[1], field) << 32
print(os.getuid(), os.getgid(), os.getgroups(),
      f"{caps('effective'):016x}", f"{caps('permitted'):016x}")
try:
  os.setuid(0)
except OSError as e:
  print(type(e).__name__)
"""
  result = run_program(pool, code)
  assert result.status == OK, result
  first, second = result.stdout.splitlines()
  assert first == "65534 65534 [] 0000000000000000 0000000000000000"
  assert second == "PermissionError"
