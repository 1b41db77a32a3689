r"""One main job over the hosts of a plain cluster (Slurm or ssh).

  # Slurm: writes (or, with --submit, sbatch-es) a batch script
  python launch/cluster.py --mode=slurm --nodes=4 --gpus_per_node=8 \
    --config=configs/qwen25_coder.py --workdir=/shared/runs/a --dry_run
  # ssh: one process per host, the first host coordinates
  python launch/cluster.py --mode=ssh --hosts=h0,h1 \
    --config=configs/hf.py --workdir=/shared/runs/b --dry_run

Every process runs `python -m codeagent_rl.main` with the same arguments
and the multi-controller environment JAX reads through the main job:

  JAX_COORDINATOR_ADDRESS   host:port of process 0
  JAX_PROCESS_COUNT         processes in the job
  JAX_PROCESS_ID            this process's index, 0 .. count - 1

Under Slurm they come from Slurm's own variables on each node
(`SLURM_PROCID`, `SLURM_NTASKS`, the first host of `SLURM_JOB_NODELIST`);
over ssh the launcher sets them per host. The workdir must be on storage
every host sees. `--dry_run` prints what would run and starts nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
import pathlib
import shlex
import subprocess
import sys
import time

from absl import app
from absl import flags

if __package__ in (None, ""):  # run as a script: the repository is the root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from launch import sweep_lib  # noqa: E402 (after the path fix above)

MODES = ("slurm", "ssh")
# The names of the multi-controller environment (module docstring).
COORDINATOR = "JAX_COORDINATOR_ADDRESS"
COUNT = "JAX_PROCESS_COUNT"
PROCESS_ID = "JAX_PROCESS_ID"


def main_command(
  config: str, workdir: str, extra: Sequence[str] = (), python: str = "python"
) -> list[str]:
  """The main job's command line, the same on every host."""
  return [
    python,
    "-m",
    sweep_lib.ENTRY_MODULE,
    *sweep_lib.main_args(config, {}, workdir),
    *extra,
  ]


def slurm_script(
  command: Sequence[str],
  *,
  nodes: int,
  gpus_per_node: int,
  port: int,
  job_name: str = "codeagent_rl",
  time_limit: str = "24:00:00",
  repo: str = str(sweep_lib.REPO_ROOT),
) -> str:
  """A batch script: one task per node, the environment from Slurm's."""
  if nodes < 1:
    raise ValueError(f"--nodes={nodes}: must be >= 1.")
  task = (
    f"cd {shlex.quote(repo)} && {COUNT}=$SLURM_NTASKS"
    f" {PROCESS_ID}=$SLURM_PROCID exec {shlex.join(command)}"
  )
  lines = [
    "#!/bin/bash",
    f"#SBATCH --job-name={job_name}",
    f"#SBATCH --nodes={nodes}",
    "#SBATCH --ntasks-per-node=1",
    f"#SBATCH --time={time_limit}",
  ]
  if gpus_per_node:
    lines.append(f"#SBATCH --gpus-per-node={gpus_per_node}")
  lines += [
    "set -euo pipefail",
    # The whole list is read (no `| head`: under pipefail, scontrol killed
    # by SIGPIPE would fail the script).
    'nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
    'head="${nodes[0]}"',
    f'export {COORDINATOR}="$head:{port}"',
    # Each task reads its own index at run time: the inner command is
    # quoted whole, so that its variables expand in the task's shell.
    "srun --kill-on-bad-exit=1 bash -c " + shlex.quote(task),
  ]
  return "\n".join(lines) + "\n"


def ssh_commands(
  hosts: Sequence[str],
  command: Sequence[str],
  *,
  port: int,
  ssh: Sequence[str] = ("ssh",),
  repo: str = str(sweep_lib.REPO_ROOT),
) -> list[list[str]]:
  """One command per host: process i on hosts[i], hosts[0] coordinates."""
  if not hosts:
    raise ValueError("--hosts: name at least one host.")
  if len(set(hosts)) != len(hosts):
    raise ValueError(f"--hosts={','.join(hosts)}: a host appears twice.")
  coordinator = f"{hosts[0]}:{port}"
  out = []
  for i, host in enumerate(hosts):
    env = f"{COORDINATOR}={coordinator} {COUNT}={len(hosts)} {PROCESS_ID}={i}"
    remote = f"cd {shlex.quote(repo)} && {env} exec {shlex.join(command)}"
    out.append([*ssh, host, remote])
  return out


def define_flags() -> None:
  """Registers the launcher's flags."""
  flags.DEFINE_enum("mode", "slurm", MODES, "How the hosts are reached.")
  flags.DEFINE_string("config", None, "configs/FILE.py[:presets] to run.")
  flags.DEFINE_string("workdir", None, "The run's workdir (shared storage).")
  flags.DEFINE_list("hosts", [], "--mode=ssh: the hosts, coordinator first.")
  flags.DEFINE_integer("nodes", 1, "--mode=slurm: nodes.")
  flags.DEFINE_integer("gpus_per_node", 0, "--mode=slurm: GPUs per node.")
  flags.DEFINE_integer("port", 8476, "The coordinator's port.")
  flags.DEFINE_string("ssh", "ssh", "--mode=ssh: the ssh command.")
  flags.DEFINE_string("python", "python", "Interpreter on the hosts.")
  flags.DEFINE_list("extra_args", [], "More main-job flags.")
  flags.DEFINE_bool("dry_run", False, "Print what would run; start nothing.")
  flags.DEFINE_bool("submit", False, "--mode=slurm: sbatch the script.")


def main(argv: list[str]) -> None:
  """Entry point of `python launch/cluster.py`."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  f = flags.FLAGS
  command = main_command(f.config, f.workdir, f.extra_args, f.python)
  try:
    sweep_lib.check_config(f.config)
    if f.mode == "slurm":
      script = slurm_script(
        command, nodes=f.nodes, gpus_per_node=f.gpus_per_node, port=f.port
      )
      print(script, end="")
      if f.submit and not f.dry_run:
        subprocess.run(["sbatch"], input=script, text=True, check=True)
      return
    commands = ssh_commands(
      f.hosts, command, port=f.port, ssh=shlex.split(f.ssh)
    )
  except ValueError as e:  # SweepError is one
    sys.exit(f"error: {e}")
  for cmd in commands:
    print(shlex.join(cmd))
  if f.dry_run:
    return
  codes = run_all(commands)
  if any(codes):
    by_host = dict(zip(f.hosts, codes, strict=True))
    sys.exit(f"error: exit codes by host: {by_host}")


def run_all(commands: Sequence[Sequence[str]], poll_s: float = 1.0) -> list:
  """Runs the commands at once; the first to fail stops the others.

  A process of a multi-process JAX job whose peer died waits in a
  collective until the coordinator gives up, so the launcher does not wait
  for them: it terminates the rest as soon as one exits non-zero.

  Returns:
    The exit codes, in the order of `commands` (negative: terminated).
  """
  procs = [subprocess.Popen(list(cmd)) for cmd in commands]
  try:
    while any(p.poll() is None for p in procs):
      if any(p.poll() not in (None, 0) for p in procs):
        break
      time.sleep(poll_s)
  finally:
    for p in procs:
      if p.poll() is None:
        p.terminate()
    for p in procs:
      try:
        p.wait(timeout=30)
      except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
  return [p.returncode for p in procs]


if __name__ == "__main__":
  define_flags()
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main)
