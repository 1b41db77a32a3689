r"""What one job can make the host hold: the sandbox's cgroup peak per job.

Run from the repository root (as root, with runsc installed):

  python -m benchmarks.sandbox_memory_bench

  # Smoke check (two settings; writes JSON only when --out is given):
  python -m benchmarks.sandbox_memory_bench --quick

For each setting of `--sandbox_memory_mb` x `--sandbox_max_processes`, a
fresh one-sandbox gVisor pool runs, one job each:

  idle   a program that prints one line: the sandbox's own footprint;
  hog    a program that forks every process it may have, each filling its
         address space in 8 MiB blocks until MemoryError, all holding it
         until all are done;
  kernel a program that fills what it can outside its address space: pipes,
         socket pairs and loopback TCP connections until it runs out of
         descriptors, and tries memfd and buffer raising (the job filter
         refuses those).

"peak MiB" is the sandbox cgroup's peak (`memory.max_usage_in_bytes`, cgroup
v1, or `memory.peak`, v2) after the job; "touched MiB" what the hog's
processes report they filled. The bound to check: peak <= job memory +
the sandbox's base, well under the OCI backstop (`SandboxConfig.
oci_memory_bytes`), which is what the host may have to give per sandbox.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform

from absl import app
from absl import flags

from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from tests.helpers import sandboxes


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_string(
    "out",
    "benchmarks/results/sandbox_memory_bench.json",
    "Where to write the results (JSON); with --quick only if set explicitly.",
  )
  flags.DEFINE_bool("quick", False, "Two settings only.")


SETTINGS = ((512, 4), (1024, 4), (1024, 8), (2048, 4))
QUICK_SETTINGS = ((512, 4), (1024, 4))

IDLE = "print('idle')\n"

KERNEL = """
import fcntl, json, os, socket
held, out = [], {"pipe": 0, "unix": 0, "tcp": 0}
def fill(sock):
  sock.setblocking(False)
  n = 0
  try:
    while True:
      n += sock.send(b"x" * 65536)
  except OSError:
    pass
  return n
try:
  srv = socket.socket()
  srv.bind(("127.0.0.1", 0))
  srv.listen(64)
  held.append(srv)
  while True:
    r, w = os.pipe()
    held += [r, w]
    os.set_blocking(w, False)
    try:
      while True:
        out["pipe"] += os.write(w, b"x" * 65536)
    except BlockingIOError:
      pass
    a, b = socket.socketpair()
    held += [a, b]
    out["unix"] += fill(a)
    c = socket.create_connection(srv.getsockname())
    held.append(c)
    s, _ = srv.accept()
    held.append(s)
    out["tcp"] += fill(c)
except OSError:
  pass
for name, call in (("memfd", lambda: os.memfd_create("m")),
                   ("setpipe", lambda: fcntl.fcntl(1, 1031, 1 << 20))):
  try:
    call()
    out[name] = "allowed"
  except OSError as e:
    out[name] = e.strerror
print(json.dumps({k: v if isinstance(v, str) else v >> 20
                  for k, v in out.items()}))
"""


def cgroup_peak_mib(container: str) -> int | None:
  """The sandbox cgroup's peak memory in MiB (None if not found)."""
  peak = sandboxes.cgroup_peak_bytes(container)
  return None if peak is None else peak >> 20


def measure(memory_mb: int, max_processes: int) -> list[dict]:
  """One fresh pool per job kind; a row per job."""
  config = config_lib.SandboxConfig(
    pool_size=1,
    memory_mb=memory_mb,
    max_processes=max_processes,
    timeout_s=30.0,
    test_timeout_s=30.0,
  )
  programs = {
    "idle": IDLE,
    "hog": sandboxes.MEMORY_HOG.format(extra=max_processes - 1),
    "kernel": KERNEL,
  }
  rows = []
  for job_name, code in programs.items():
    with harness.SandboxPool(config) as pool:
      result = pool.run(jobs.Job.program(code))
      peak = cgroup_peak_mib(result.sandbox)
    detail = result.stdout.strip()
    rows.append(
      {
        "job": job_name,
        "memory_mb": memory_mb,
        "max_processes": max_processes,
        "process_memory_mb": config.process_memory_mb,
        "status": jobs.status_name(result.status),
        "touched_mb": sum(json.loads(detail)) if job_name == "hog" else None,
        "detail": detail[:200],
        "peak_mb": peak,
        "backstop_mb": config.oci_memory_bytes >> 20,
        "peak_over_job_memory": None if peak is None else peak / memory_mb,
      }
    )
  return rows


def main(argv: list[str]) -> None:
  """Runs every setting, prints the table, writes JSON."""
  del argv
  settings = QUICK_SETTINGS if flags.FLAGS.quick else SETTINGS
  rows = []
  for memory_mb, max_processes in settings:
    rows += measure(memory_mb, max_processes)
  header = (
    f"{'job':<7} {'memory':>6} {'procs':>5} {'AS/proc':>7} {'touched':>7}"
    f" {'peak':>6} {'backstop':>8} {'peak/mem':>8}  detail"
  )
  print(header)
  print("-" * len(header))
  for r in rows:
    ratio = r["peak_over_job_memory"]
    print(
      f"{r['job']:<7} {r['memory_mb']:>6} {r['max_processes']:>5}"
      f" {r['process_memory_mb']:>7} {r['touched_mb'] or '':>7}"
      f" {r['peak_mb']!s:>6} {r['backstop_mb']:>8}"
      f" {'' if ratio is None else f'{ratio:.2f}':>8}  {r['detail'][:60]}"
    )
  out = flags.FLAGS.out
  if flags.FLAGS.quick and not flags.FLAGS["out"].present:
    return
  result = {
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "machine": {
      "platform": platform.platform(),
      "cpus": os.cpu_count(),
      "mem_total_mb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
      >> 20,
    },
    "rows": rows,
  }
  pathlib.Path(out).write_text(json.dumps(result, indent=1) + "\n")
  print(f"wrote {out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
