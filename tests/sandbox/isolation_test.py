"""Nothing of one job is there for the next, and a job's memory is bounded.

Each attack runs as one job and looks for its traces in a second job of the
same sandbox (the pools here have one worker). Kernel state that belongs to
no process (System V IPC, POSIX message queues, keyrings) is refused by the
job filter (`sandbox/seccomp.py`); files live in per-job (and, for stdio
jobs, per-run) scratch directories that the forkserver empties.
"""

import json
import os
import secrets

import pytest

from codeagent_rl import types
from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import seccomp
from codeagent_rl.sandbox import worker
from tests.helpers import sandboxes

OK = types.JobStatus.OK
NUMBERS = seccomp.syscall_numbers()
IPC_CREAT = 0o1000


@pytest.fixture(params=["gvisor", "process"])
def pool(request, gvisor_pool, process_pool):
  return gvisor_pool if request.param == "gvisor" else process_pool


def run_json(pool, code: str, stdins=("",)) -> list:
  result = pool.run(jobs.Job.program(code, stdins, test_timeout_s=3.0))
  assert result.status == OK, result
  return [json.loads(t.stdout) for t in result.tests]


# Makes every kind of IPC object it can, through libc and through raw
# system calls (the native numbers and, on x86-64, the x32 ones), with a
# key only this test knows; prints what the kernel answered.
MAKE_IPC = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
KEY, N = {key}, {numbers}
def call(f, *args):
  r = f(*args)
  return [r, ctypes.get_errno() if r == -1 else 0]
out = {{
  "shmget": call(libc.shmget, KEY, 1 << 20, 0o1600),
  "msgget": call(libc.msgget, KEY, 0o1600),
  "semget": call(libc.semget, KEY, 1, 0o1600),
  "mq_open": call(libc.mq_open, b"/{name}", os.O_CREAT | os.O_RDWR, 0o600,
                  None),
  "raw_shmget": call(libc.syscall, N["shmget"], KEY + 1, 4096, 0o1600),
  "raw_msgget": call(libc.syscall, N["msgget"], KEY + 1, 0o1600),
  "raw_semget": call(libc.syscall, N["semget"], KEY + 1, 1, 0o1600),
  "raw_add_key": call(libc.syscall, N["add_key"], b"user", b"{name}",
                      b"secret", 6, -3),
  "raw_memfd": call(libc.syscall, N["memfd_create"], b"m", 0),
}}
if {x32}:
  out["x32_shmget"] = call(libc.syscall, 0x40000000 | N["shmget"], KEY + 2,
                           4096, 0o1600)
print(json.dumps(out))
"""

# Looks the objects up by key and by id (System V ids are small integers
# under gVisor), and the queue by name.
FIND_IPC = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
KEY = {key}
found = []
for key in (KEY, KEY + 1, KEY + 2):
  if libc.shmget(key, 0, 0) != -1: found.append(["shm", key])
  if libc.msgget(key, 0) != -1: found.append(["msg", key])
  if libc.semget(key, 0, 0) != -1: found.append(["sem", key])
buf = ctypes.create_string_buffer(512)
for ident in range(64):
  if libc.shmctl(ident, 2, buf) != -1: found.append(["shm id", ident])
  if libc.msgctl(ident, 2, buf) != -1: found.append(["msg id", ident])
  if libc.semctl(ident, 0, 2, buf) != -1: found.append(["sem id", ident])
if libc.mq_open(b"/{name}", os.O_RDWR) != -1: found.append(["mq", 0])
print(json.dumps(found))
"""


def test_ipc_objects_cannot_be_made_or_found_by_the_next_job(pool):
  key = secrets.randbelow(1 << 30) + 1
  name = "q" + secrets.token_hex(6)
  fields = {
    "key": key,
    "name": name,
    "numbers": NUMBERS,
    "x32": os.uname().machine == "x86_64",
  }
  (made,) = run_json(pool, MAKE_IPC.format(**fields))
  assert made, made
  for call, (ret, err) in made.items():
    # Refused by the filter, not by chance (ENOSYS, EEXIST, ...).
    assert ret == -1 and err == 1, (call, made)  # EPERM
  (found,) = run_json(pool, FIND_IPC.format(**fields))
  assert found == [], found


def test_ipc_through_ordinary_python_fails_cleanly(gvisor_pool):
  # What honest code would reach for: multiprocessing's shared memory and
  # semaphores need /dev/shm (root-owned, read-only to jobs) or POSIX IPC.
  # (The process backend shares the host's /dev/shm: no isolation there.)
  pool = gvisor_pool
  code = """
import json
out = {}
try:
  from multiprocessing import shared_memory
  shared_memory.SharedMemory(create=True, size=4096)
  out["shared_memory"] = "made"
except OSError as e:
  out["shared_memory"] = type(e).__name__
try:
  import os
  os.memfd_create("x")
  out["memfd"] = "made"
except OSError as e:
  out["memfd"] = type(e).__name__
print(json.dumps(out))
"""
  (out,) = run_json(pool, code)
  assert out == {"shared_memory": "PermissionError", "memfd": "PermissionError"}


def test_filter_keeps_ordinary_code_working(pool):
  code = """
import json, os, socket, subprocess, sys, threading, tempfile
out = {}
t = threading.Thread(target=lambda: out.setdefault("thread", "ran"))
t.start(); t.join()
pid = os.fork()
if pid == 0:
  os._exit(7)
out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
a, b = socket.socketpair()
a.sendall(b"hi"); out["socketpair"] = b.recv(2).decode()
r, w = os.pipe(); os.write(w, b"p"); out["pipe"] = os.read(r, 1).decode()
with tempfile.TemporaryFile() as f:
  f.write(b"abc"); f.seek(0); out["tmpfile"] = f.read().decode()
out["python"] = subprocess.run([sys.executable, "-c", "print(6 * 7)"],
                               capture_output=True, text=True).stdout.strip()
print(json.dumps(out))
"""
  (out,) = run_json(pool, code)
  assert out == {
    "thread": "ran",
    "fork": 7,
    "socketpair": "hi",
    "pipe": "p",
    "tmpfile": "abc",
    "python": "42",
  }


def test_buffers_cannot_be_raised_past_their_defaults(pool):
  code = """
import fcntl, json, os, socket
out = {}
r, w = os.pipe()
try:
  fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
  out["pipe"] = "raised"
except OSError as e:
  out["pipe"] = e.errno
a, b = socket.socketpair()
for name in ("SO_SNDBUF", "SO_RCVBUF"):
  try:
    a.setsockopt(socket.SOL_SOCKET, getattr(socket, name), 64 << 20)
    out[name] = "raised"
  except OSError as e:
    out[name] = e.errno
a.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # others still work
print(json.dumps(out))
"""
  (out,) = run_json(pool, code)
  assert out == {"pipe": 1, "SO_SNDBUF": 1, "SO_RCVBUF": 1}


def test_stdio_runs_do_not_see_each_other(pool):
  # Each run leaves its stdin in a file, in its directory and beside it in
  # the scratch root, and reports what it finds of earlier runs.
  code = """
import json, os, sys
data = sys.stdin.read()
root = os.path.dirname(os.getcwd())
seen = {"cwd": os.listdir("."), "root": sorted(os.listdir(root))}
for name in seen["root"]:
  path = os.path.join(root, name)
  if os.path.isdir(path) and path != os.getcwd():
    seen.setdefault("other_dirs", []).append(os.listdir(path))
  elif not os.path.isdir(path):
    seen.setdefault("other_files", []).append(open(path).read())
with open("stdin.txt", "w") as f:
  f.write(data)
with open(os.path.join(root, "left-" + data), "w") as f:
  f.write(data)
print(json.dumps(seen))
"""
  runs = run_json(pool, code, stdins=("first", "second", "third"))
  for seen in runs:
    assert seen["cwd"] == [], runs
    assert len(seen["root"]) == 1, runs  # its own directory only
    assert "other_dirs" not in seen and "other_files" not in seen, runs


@pytest.mark.skipif(
  os.uname().machine != "x86_64", reason="i386 system calls exist on x86-64"
)
def test_system_calls_of_another_abi_do_not_reach_ipc(pool):
  # `int 0x80` from machine code reaches the i386 table, where ipc(SHMGET)
  # makes a segment without any of the native numbers the filter knows.
  # The host kernel kills the process (the filter's foreign-ABI rule);
  # gVisor has no i386 table and answers with an error.
  key = secrets.randbelow(1 << 30) + 1
  code = f"""
import ctypes, mmap, struct
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE
                 | mmap.PROT_EXEC)
page.write(b"\\x53"  # push rbx
           + b"\\xb8" + struct.pack("<I", 117)  # eax: ipc
           + b"\\xbb" + struct.pack("<I", 23)  # ebx: SHMGET
           + b"\\xb9" + struct.pack("<I", {key})  # ecx: key
           + b"\\xba" + struct.pack("<I", 4096)  # edx: size
           + b"\\xbe" + struct.pack("<I", 0o1600)  # esi: IPC_CREAT | 0600
           + b"\\xcd\\x80\\x5b\\xc3")  # int 0x80; pop rbx; ret
address = ctypes.addressof(ctypes.c_char.from_buffer(page))
print(ctypes.CFUNCTYPE(ctypes.c_int)(address)(), flush=True)
"""
  result = pool.run(jobs.Job.program(code))
  if pool.config.backend == "process":
    assert result.status == types.JobStatus.CRASH, result
    assert result.tests[0].error == "killed by SIGSYS", result
  else:
    assert result.status == OK, result
    assert int(result.stdout) < 0, result  # an error, no segment id


def test_files_written_anywhere_are_gone_for_the_next_job(gvisor_pool):
  pool = gvisor_pool
  marker = "marker-" + secrets.token_hex(6)
  code = f"""
import json, os
wrote = []
for top in ("/", "/tmp", "/dev", "/dev/shm", "/var", "/run", os.getcwd(),
            os.path.expanduser("~")):
  for root, dirs, files in os.walk(top):
    if root.startswith(("/proc", "/sys")):
      dirs[:] = []
      continue
    try:
      with open(os.path.join(root, {marker!r}), "w") as f:
        f.write("x")
      wrote.append(root)
    except OSError:
      pass
print(json.dumps(sorted(set(wrote))))
"""
  (wrote,) = run_json(pool, code)
  assert wrote, "the job could not write even its own directory"
  # Only the scratch area is writable in a sandbox.
  assert all(p.startswith("/tmp") for p in wrote), wrote
  find = f"""
import json, os
hits = []
for root in {wrote!r}:
  if os.path.exists(os.path.join(root, {marker!r})):
    hits.append(root)
print(json.dumps(hits))
"""
  (hits,) = run_json(pool, find)
  assert hits == [], hits


def test_all_processes_of_a_job_share_its_memory():
  config = config_lib.SandboxConfig(
    pool_size=1,
    memory_mb=512,
    max_processes=4,
    timeout_s=20.0,
    test_timeout_s=20.0,
  )
  with harness.SandboxPool(config) as pool:
    hog = sandboxes.MEMORY_HOG.format(extra=config.max_processes - 1)
    result = pool.run(jobs.Job.program(hog))
    assert result.status == OK, result
    totals = json.loads(result.stdout)
    assert len(totals) == config.max_processes, totals
    # Each process got real memory, and no more than its share.
    for got in totals:
      assert 0 < got <= config.process_memory_mb, totals
    assert sum(totals) <= config.memory_mb
    # What the host gave the sandbox: the job, a descriptor's worth of
    # kernel memory per process and the sandbox's own processes.
    peak = sandboxes.cgroup_peak_bytes(result.sandbox)
    assert peak is not None, f"no memory cgroup of {result.sandbox} found"
    peak >>= 20
    allowance = (
      config.memory_mb
      + config.max_processes
      * config.max_open_files
      * config_lib.KERNEL_MB_PER_FILE
      + config_lib.SANDBOX_BASE_MB
    )
    assert sum(totals) // 2 < peak <= allowance, (peak, allowance, totals)
    # The sandbox still serves.
    after = pool.run(
      jobs.Job.function("def f():\n  return 1\n", "f", [([], {})])
    )
    assert after.status == OK and after.tests[0].output == 1


def test_sandbox_without_the_job_filter_is_refused(monkeypatch):
  # A host whose sandboxes cannot filter job system calls (another
  # machine, or a kernel that refuses) must not run jobs under gVisor.
  real = worker.GuestProcess.__init__

  def unfiltered(self, *args, **kwargs):
    real(self, *args, **kwargs)
    self.info = dict(self.info, job_filter="off: the probe exited with 6")

  monkeypatch.setattr(worker.GuestProcess, "__init__", unfiltered)
  config = config_lib.SandboxConfig(pool_size=1)
  with pytest.raises(worker.SandboxError, match="seccomp filter"):
    harness.SandboxPool(config)


def test_process_backend_without_the_filter_says_so(monkeypatch, caplog):
  real = worker.GuestProcess.__init__

  def unfiltered(self, *args, **kwargs):
    real(self, *args, **kwargs)
    self.info = dict(self.info, job_filter="off: no system call table")

  monkeypatch.setattr(worker.GuestProcess, "__init__", unfiltered)
  config = config_lib.SandboxConfig(pool_size=1, backend="process")
  with harness.SandboxPool(config) as pool:
    assert pool.run(jobs.Job.program("print(1)")).stdout == "1\n"
  assert "without the seccomp filter" in caplog.text
  assert "no system call table" in caplog.text
