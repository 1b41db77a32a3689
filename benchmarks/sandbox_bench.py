r"""Times sandbox jobs: warm gVisor pools against cold runsc and plain python3.

Run from the repository root (as root, with runsc installed):

  python -m benchmarks.sandbox_bench

  # Smoke check (fewer jobs; writes JSON only when --out is given):
  python -m benchmarks.sandbox_bench --quick

Variants, each on the same two jobs:

  gvisor_warm[N]   a `SandboxPool` of N warm gVisor sandboxes (N in --sizes),
                   driven by N closed-loop clients (each submits its next job
                   when the previous one returns);
  gvisor_paced[1]  a pool of one sandbox and one client that waits --pace_ms
                   between jobs (as a learner does while it generates), so
                   the sandbox's forked spare is ready when a job arrives;
                   the waits are not counted in latency or jobs/s;
  process_warm[N]  the same pool with the `process` backend (no isolation);
  runsc_run_cold   `runsc run` per job of `python3 -c <the job as a script>`
                   in the same bundle as a pool sandbox, then `runsc delete`
                   (one client);
  gvisor_cold      a fresh pool sandbox per job: write the bundle, `runsc
                   run` the forkserver, wait until it is ready, run the job,
                   stop it and `runsc delete` (one client);
  host_python3     `python3 -c <the job as a script>` per job on the host,
                   no sandbox, no limits (one client; same interpreter).

Jobs: "small" calls a two-line function on 10 inputs; "cpu" counts primes
below 30000 by trial division, twice. Variants run interleaved in --rounds
rounds, so that load from other processes on the machine falls on all of
them alike. Latency is submit-to-result on the host; p50/p95 are over all
jobs of a variant; jobs/s is jobs divided by the wall time of the variant's
batches; "sandbox ms" is the p50 of the time the forkserver measured inside
the sandbox. "x host" is p50 divided by host_python3's p50 on the same job
(< 1 is faster than a plain subprocess). Every output is checked; a wrong
one fails the script after the table is printed and the JSON written.

Targets: gvisor_warm[1] p50 within 1.5x of host_python3 on the small job
(isolation should cost a job little more than a plain subprocess), and a
cold `runsc run` per job at least 20x slower than gvisor_warm[1] at p50
(what keeping sandboxes warm saves per job); both cold variants are checked
against it. The same ratios are reported for gvisor_paced[1].

Floor: every job runs in a freshly forked process, and under gVisor's ptrace
platform a fork of the interpreter is expensive. "floor" times, inside one
sandbox like the pool's, `os.fork()` + `os._exit(0)` + `waitpid` of the
sandbox Python with the forkserver's imports. A closed-loop job waits for at
least one such fork (its spare is forked after the previous reply), so that
p50 bounds gvisor_warm[1] from below; fork p50 + paced p50 (a job whose
spare is ready) estimates gvisor_warm[1] when nothing overlaps.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import threading
import time

from absl import app
from absl import flags

from codeagent_rl import types
from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_integer(
    "rounds", 8, "Interleaved rounds; every variant runs once per round."
  )
  flags.DEFINE_integer(
    "jobs_per_round", 12, "Jobs per variant and round (warm and host)."
  )
  flags.DEFINE_integer(
    "cold_per_round", 2, "Jobs per cold variant and round (each ~0.5-1 s)."
  )
  flags.DEFINE_list("sizes", ["1", "2", "4"], "Warm pool sizes.")
  flags.DEFINE_bool(
    "quick", False, "2 rounds of 3 jobs (1 cold): a smoke check."
  )
  flags.DEFINE_string(
    "out",
    "benchmarks/results/sandbox_bench.json",
    "JSON file for the results. With --quick it is written only when this"
    " flag is given explicitly.",
  )
  flags.DEFINE_float(
    "pace_ms", 100.0, "Idle time between the jobs of gvisor_paced[1]."
  )
  flags.DEFINE_string(
    "python", "/usr/bin/python3", "Interpreter of every variant."
  )


SMALL_CODE = "def add(a, b):\n  return a + b\n"
CPU_CODE = """
def count_primes(n):
  return sum(
    1 for k in range(2, n) if all(k % d for d in range(2, int(k ** 0.5) + 1))
  )
"""
JOB_SPECS = {
  "small": (SMALL_CODE, "add", [([i, 2 * i], {}) for i in range(10)]),
  "cpu": (CPU_CODE, "count_primes", [([30000], {})] * 2),
}
EXPECTED = {"small": [3 * i for i in range(10)], "cpu": [3245, 3245]}
HOST_SCRIPT = """
import json
{code}
print(json.dumps([{entry}(*a, **k) for a, k in {inputs!r}]))
"""


def make_job(name: str) -> jobs.Job:
  code, entry, inputs = JOB_SPECS[name]
  return jobs.Job.function(code, entry, inputs, timeout_s=60, test_timeout_s=30)


def check_result(name: str, result: jobs.JobResult) -> bool:
  return (
    result.status == types.JobStatus.OK
    and [t.output for t in result.tests] == EXPECTED[name]
  )


class Variant:
  """A way to run jobs, accumulating measurements over rounds."""

  def __init__(self, name: str, clients: int):
    self.name = name
    self.clients = clients
    self.latencies = {job: [] for job in JOB_SPECS}
    self.sandbox_s = {job: [] for job in JOB_SPECS}
    self.wall = dict.fromkeys(JOB_SPECS, 0.0)
    self.wrong = dict.fromkeys(JOB_SPECS, 0)
    self.pause_s = 0.0  # idle time of a client between its jobs

  def run_one(self, job: str) -> tuple[bool, float | None]:
    """Runs one job: (output right, seconds inside the sandbox or None)."""
    raise NotImplementedError

  def batch(self, job: str, count: int) -> None:
    """Runs `count` jobs with `clients` closed-loop clients."""
    lock = threading.Lock()
    left = [count]
    idle = [0.0]

    def client():
      while True:
        with lock:
          if not left[0]:
            return
          left[0] -= 1
        start = time.perf_counter()
        ok, inside = self.run_one(job)
        elapsed = time.perf_counter() - start
        with lock:
          self.latencies[job].append(elapsed)
          if inside is not None:
            self.sandbox_s[job].append(inside)
          self.wrong[job] += not ok
        if self.pause_s:
          time.sleep(self.pause_s)
          with lock:
            idle[0] += self.pause_s

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(self.clients)]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    self.wall[job] += time.perf_counter() - start - idle[0] / self.clients

  def close(self) -> None:
    """Releases what the variant holds."""


class PoolVariant(Variant):
  """A warm `SandboxPool` (gVisor or process backend)."""

  def __init__(
    self, backend: str, size: int, python: str, pause_s: float = 0.0
  ):
    kind = "paced" if pause_s else "warm"
    super().__init__(f"{backend}_{kind}[{size}]", clients=size)
    self.pause_s = pause_s
    config = config_lib.SandboxConfig(
      backend=backend,
      pool_size=size,
      timeout_s=60,
      test_timeout_s=30,
      python=python,
      recycle_after=100000,
    )
    self.pool = harness.SandboxPool(config)

  def run_one(self, job):  # noqa: D102
    result = self.pool.run(make_job(job))
    return check_result(job, result), result.duration_s

  def close(self):  # noqa: D102
    self.pool.close()


class ColdVariant(Variant):
  """A fresh gVisor sandbox per job, started and deleted around it."""

  def __init__(self, python: str):
    super().__init__("gvisor_cold", clients=1)
    self.config = config_lib.SandboxConfig(
      timeout_s=60, test_timeout_s=30, python=python
    )
    self.launcher = gvisor.GVisorLauncher(self.config)
    self.ids = 0

  def run_one(self, job):  # noqa: D102
    self.ids += 1
    guest = self.launcher.launch()
    try:
      frame = make_job(job).to_frame(self.ids, self.config)
      result = jobs.result_from_reply(guest.run(frame, 60), make_job(job))
    finally:
      guest.close()
    return check_result(job, result), result.duration_s

  def close(self):  # noqa: D102
    self.launcher.close()


class RunscRunVariant(Variant):
  """`runsc run` of `python3 -c <the job as a script>` per job: no forkserver.

  The same bundle as a pool sandbox (binds, tmpfs, no network, empty
  environment), but the job script is the container's only process, run as
  the untrusted uid without capabilities.
  """

  def __init__(self, python: str):
    super().__init__("runsc_run_cold", clients=1)
    self.config = config_lib.SandboxConfig(python=python)
    self.launcher = gvisor.GVisorLauncher(self.config)
    self.ids = 0

  def run_one(self, job):  # noqa: D102
    self.ids += 1
    code, entry, inputs = JOB_SPECS[job]
    script = HOST_SCRIPT.format(code=code, entry=entry, inputs=inputs)
    spec = gvisor.oci_spec(
      self.config, self.launcher.runtime, self.launcher.guest_dir
    )
    spec["process"]["args"] = [self.launcher.runtime.executable, "-c", script]
    spec["process"]["user"] = {"uid": 65534, "gid": 65534}
    spec["process"]["capabilities"] = {}
    spec["process"]["cwd"] = "/tmp"
    container = f"plain-{os.getpid()}-{self.ids}"
    bundle = pathlib.Path(self.launcher.root) / container
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps(spec))
    runsc = [self.launcher.runsc, f"--root={self.launcher.state_root}"]
    try:
      proc = subprocess.run(
        [*runsc, "--network=none", "run", f"--bundle={bundle}", container],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
      )
    finally:
      subprocess.run(
        [*runsc, "delete", "--force", container],
        capture_output=True,
        check=False,
      )
    ok = proc.returncode == 0 and json.loads(proc.stdout) == EXPECTED[job]
    return ok, None

  def close(self):  # noqa: D102
    self.launcher.close()


class HostVariant(Variant):
  """`python3 -c` per job on the host: no sandbox at all."""

  def __init__(self, python: str):
    super().__init__("host_python3", clients=1)
    self.python = python

  def run_one(self, job):  # noqa: D102
    code, entry, inputs = JOB_SPECS[job]
    script = HOST_SCRIPT.format(code=code, entry=entry, inputs=inputs)
    proc = subprocess.run(
      [self.python, "-c", script],
      capture_output=True,
      text=True,
      check=False,
      timeout=60,
    )
    ok = proc.returncode == 0 and json.loads(proc.stdout) == EXPECTED[job]
    return ok, None


FORK_FLOOR_SCRIPT = """
import json, os, time
import importlib.util, io, json, math, random, resource, select, shutil
import signal, socket, traceback
times = []
for _ in range({count}):
  start = time.perf_counter()
  pid = os.fork()
  if pid == 0:
    os._exit(0)
  os.waitpid(pid, 0)
  times.append(time.perf_counter() - start)
print(json.dumps(times))
"""


def fork_floor(launcher: gvisor.GVisorLauncher, count: int) -> list[float]:
  """Seconds of fork + _exit + waitpid of the sandbox Python, in a sandbox.

  The pool's bundle and user (root with the forkserver's capabilities), the
  forkserver's imports; `count` forks in one `runsc run`.
  """
  spec = gvisor.oci_spec(launcher.config, launcher.runtime, launcher.guest_dir)
  script = FORK_FLOOR_SCRIPT.format(count=count)
  spec["process"]["args"] = [launcher.runtime.executable, "-I", "-S", "-c",
                             script]  # fmt: skip
  container = f"floor-{os.getpid()}"
  bundle = pathlib.Path(launcher.root) / container
  (bundle / "rootfs").mkdir(parents=True)
  (bundle / "config.json").write_text(json.dumps(spec))
  runsc = [launcher.runsc, f"--root={launcher.state_root}"]
  try:
    proc = subprocess.run(
      [*runsc, "--network=none", "run", f"--bundle={bundle}", container],
      capture_output=True,
      text=True,
      check=True,
      timeout=120,
    )
  finally:
    subprocess.run(
      [*runsc, "delete", "--force", container],
      capture_output=True,
      check=False,
    )
  return json.loads(proc.stdout)


def percentile(values: list[float], q: float) -> float:
  ordered = sorted(values)
  return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarise(variants: list[Variant]) -> list[dict]:
  rows = []
  for job in JOB_SPECS:
    host = next(v for v in variants if v.name == "host_python3")
    host_p50 = statistics.median(host.latencies[job])
    for v in variants:
      lat = v.latencies[job]
      p50 = statistics.median(lat)
      rows.append(
        {
          "variant": v.name,
          "job": job,
          "clients": v.clients,
          "jobs": len(lat),
          "p50_ms": 1e3 * p50,
          "p95_ms": 1e3 * percentile(lat, 0.95),
          "jobs_per_s": len(lat) / v.wall[job],
          "sandbox_p50_ms": (
            1e3 * statistics.median(v.sandbox_s[job])
            if v.sandbox_s[job]
            else None
          ),
          "x_host_p50": p50 / host_p50,
          "wrong": v.wrong[job],
        }
      )
  return rows


def targets(rows: list[dict]) -> dict:
  def p50(variant: str, job: str = "small") -> float:
    return next(
      r["p50_ms"] for r in rows if r["variant"] == variant and r["job"] == job
    )

  warm = p50("gvisor_warm[1]")
  paced = p50("gvisor_paced[1]")
  host = p50("host_python3")
  runsc = p50("runsc_run_cold")
  warm_vs_host = warm / host
  runsc_vs_warm = runsc / warm
  cold_vs_warm = p50("gvisor_cold") / warm
  return {
    "warm_vs_host_p50_small": warm_vs_host,
    "warm_within_1_5x_host": warm_vs_host <= 1.5,
    "runsc_run_vs_warm_p50_small": runsc_vs_warm,
    "runsc_run_at_least_20x_warm": runsc_vs_warm >= 20.0,
    "cold_forkserver_vs_warm_p50_small": cold_vs_warm,
    "cold_forkserver_at_least_20x_warm": cold_vs_warm >= 20.0,
    "paced_vs_host_p50_small": paced / host,
    "paced_within_1_5x_host": paced / host <= 1.5,
    "runsc_run_vs_paced_p50_small": runsc / paced,
    "runsc_run_at_least_20x_paced": runsc / paced >= 20.0,
  }


def format_table(rows: list[dict]) -> str:
  header = (
    f"{'job':<6} {'variant':<17} {'clients':>7} {'jobs':>5} {'p50 ms':>9}"
    f" {'p95 ms':>9} {'jobs/s':>8} {'sandbox ms':>10} {'x host':>7}"
  )
  lines = [header, "-" * len(header)]
  for r in rows:
    inside = (
      "-" if r["sandbox_p50_ms"] is None else f"{r['sandbox_p50_ms']:.1f}"
    )
    lines.append(
      f"{r['job']:<6} {r['variant']:<17} {r['clients']:>7} {r['jobs']:>5}"
      f" {r['p50_ms']:>9.1f} {r['p95_ms']:>9.1f} {r['jobs_per_s']:>8.1f}"
      f" {inside:>10} {r['x_host_p50']:>7.2f}"
    )
  return "\n".join(lines)


def machine_info(python: str) -> dict:
  runsc = subprocess.run(
    [gvisor.find_runsc("runsc"), "--version"],
    capture_output=True,
    text=True,
    check=False,
  ).stdout.split("\n")[0]
  sandbox_python = subprocess.run(
    [python, "--version"], capture_output=True, text=True, check=False
  ).stdout.strip()
  return {
    "runsc": runsc,
    "platform": "ptrace",
    "sandbox_python": sandbox_python,
    "host_python": platform.python_version(),
    "cpu_count": os.cpu_count(),
    "cpu_affinity": len(os.sched_getaffinity(0)),
    "processor": platform.processor() or platform.machine(),
    "load_average_start": os.getloadavg(),
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
  }


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  rounds, per_round, cold_per_round = (
    (2, 3, 1)
    if flags.FLAGS.quick
    else (
      flags.FLAGS.rounds,
      flags.FLAGS.jobs_per_round,
      flags.FLAGS.cold_per_round,
    )
  )
  python = flags.FLAGS.python
  info = machine_info(python)
  print(
    f"{info['runsc']}, {info['sandbox_python']}, {info['cpu_count']} CPUs,"
    f" load average {info['load_average_start'][0]:.2f};"
    f" {rounds} rounds x {per_round} jobs ({cold_per_round} cold)"
  )
  sizes = [int(s) for s in flags.FLAGS.sizes]
  variants: list[Variant] = [
    HostVariant(python),
    RunscRunVariant(python),
    ColdVariant(python),
  ]
  try:
    for backend in ("gvisor", "process"):
      for size in sizes:
        variants.append(PoolVariant(backend, size, python))
    variants.append(PoolVariant("gvisor", 1, python, flags.FLAGS.pace_ms / 1e3))
    for v in variants:  # one untimed job each: imports, first fork
      for job in JOB_SPECS:
        v.run_one(job)
    for _ in range(rounds):
      for job in JOB_SPECS:
        for v in variants:
          cold = isinstance(v, ColdVariant | RunscRunVariant)
          count = cold_per_round if cold else per_round
          v.batch(job, count * (v.clients if v.clients > 1 else 1))
    forks = fork_floor(variants[1].launcher, 10 if flags.FLAGS.quick else 40)
  finally:
    for v in variants:
      v.close()
  info["load_average_end"] = os.getloadavg()
  rows = summarise(variants)
  print(format_table(rows))
  goals = targets(rows)
  paced = next(
    r["p50_ms"]
    for r in rows
    if r["variant"] == "gvisor_paced[1]" and r["job"] == "small"
  )
  runsc = next(
    r["p50_ms"]
    for r in rows
    if r["variant"] == "runsc_run_cold" and r["job"] == "small"
  )
  floor = {
    "fork_exit_wait_p50_ms": 1e3 * statistics.median(forks),
    "fork_exit_wait_min_ms": 1e3 * min(forks),
    "paced_small_p50_ms": paced,
  }
  floor["closed_loop_estimate_ms"] = floor["fork_exit_wait_p50_ms"] + paced
  floor["runsc_run_p50_over_20_ms"] = runsc / 20
  print(
    f"in-sandbox python fork+_exit+waitpid: p50"
    f" {floor['fork_exit_wait_p50_ms']:.1f} ms (min"
    f" {floor['fork_exit_wait_min_ms']:.1f}); + paced p50 ="
    f" {floor['closed_loop_estimate_ms']:.1f} ms; 20x under cold runsc run"
    f" needs <= {floor['runsc_run_p50_over_20_ms']:.1f} ms"
  )
  print(
    f"warm gVisor p50 / host python3 p50 (small): "
    f"{goals['warm_vs_host_p50_small']:.2f}x (target <= 1.5x:"
    f" {'met' if goals['warm_within_1_5x_host'] else 'NOT met'})"
  )
  for key, what in (
    ("runsc_run", "cold `runsc run python3 -c` p50"),
    ("cold_forkserver", "cold sandbox + forkserver p50"),
  ):
    ratio = goals[f"{key}_vs_warm_p50_small"]
    met = goals[f"{key}_at_least_20x_warm"]
    print(
      f"{what} / warm gVisor p50 (small): {ratio:.1f}x"
      f" (target >= 20x: {'met' if met else 'NOT met'})"
    )
  print(
    f"paced gVisor p50 / host python3 p50 (small):"
    f" {goals['paced_vs_host_p50_small']:.2f}x; cold `runsc run` p50 / paced"
    f" p50: {goals['runsc_run_vs_paced_p50_small']:.1f}x"
  )
  print(f"load average at the end: {info['load_average_end'][0]:.2f}")

  if flags.FLAGS.quick and not flags.FLAGS["out"].present:
    print("--quick: not writing JSON; pass --out to keep the results.")
  else:
    out = pathlib.Path(flags.FLAGS.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
      "machine": info,
      "settings": {
        "rounds": rounds,
        "jobs_per_round": per_round,
        "cold_per_round": cold_per_round,
        "sizes": sizes,
        "pace_ms": flags.FLAGS.pace_ms,
      },
      "rows": rows,
      "targets": goals,
      "floor": floor,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"Wrote {out}")
  wrong = [f"{r['variant']}/{r['job']}" for r in rows if r["wrong"]]
  if wrong:
    sys.exit(f"Wrong outputs from: {', '.join(wrong)}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
