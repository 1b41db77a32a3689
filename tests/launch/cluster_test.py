"""launch/cluster.py: the multi-host environment reaches the main job.

Nothing is launched on a cluster: the Slurm script runs under stand-ins
for `scontrol` and `srun` that act as two tasks on this machine, and the
ssh commands run through a stand-in for `ssh` that runs the remote command
locally. The command each process runs is the trainer's own parser of the
environment (`distributed.from_environ`), so the test fails if the
launcher and the trainer disagree on the contract.
"""

import os
import pathlib
import shlex
import stat
import subprocess
import sys

import pytest

from launch import cluster
from launch import sweep_lib

REPO = sweep_lib.REPO_ROOT
# Prints what the trainer would join: (address, count, id) or None.
PROBE = [
  sys.executable,
  "-c",
  "from codeagent_rl.parallel import distributed;"
  " g = distributed.from_environ();"
  " print('GROUP', g.coordinator_address, g.process_count, g.process_id)",
]


def _script(path: pathlib.Path, body: str) -> pathlib.Path:
  path.write_text("#!/bin/bash\n" + body)
  path.chmod(path.stat().st_mode | stat.S_IEXEC)
  return path


def _clean_env(bin_dir: pathlib.Path | None = None) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
  env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
  if bin_dir is not None:
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
  env["PYTHONPATH"] = str(REPO)
  env["JAX_PLATFORMS"] = "cpu"
  return env


def _groups(text: str) -> list[tuple[str, int, int]]:
  out = []
  for line in text.splitlines():
    if line.startswith("GROUP "):
      _, address, count, index = line.split()
      out.append((address, int(count), int(index)))
  return sorted(out, key=lambda g: g[2])


def test_slurm_script_gives_each_task_its_process_id(tmp_path):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  # scontrol expands the node list (long: a script that stops reading it
  # early kills scontrol with SIGPIPE, fatal under pipefail); srun starts
  # one task per node.
  _script(
    bin_dir / "scontrol",
    'test "$1 $2" = "show hostnames" || exit 1\n'
    'printf "node-a\\nnode-b\\n"; seq -f "node-%g" 3 20000\n',
  )
  _script(
    bin_dir / "srun",
    "shift  # --kill-on-bad-exit=1\n"
    'for i in 0 1; do SLURM_NTASKS=2 SLURM_PROCID=$i "$@" || exit 1; done\n',
  )
  script = cluster.slurm_script(PROBE, nodes=2, gpus_per_node=8, port=9999)
  assert "#SBATCH --nodes=2" in script
  assert "#SBATCH --gpus-per-node=8" in script
  path = tmp_path / "job.sh"
  path.write_text(script)
  env = _clean_env(bin_dir)
  env["SLURM_JOB_NODELIST"] = "node-[a-b]"
  out = subprocess.run(
    ["bash", str(path)], env=env, capture_output=True, text=True, check=True
  )
  assert _groups(out.stdout) == [("node-a:9999", 2, 0), ("node-a:9999", 2, 1)]


def test_ssh_commands_set_the_group_per_host(tmp_path):
  log = tmp_path / "hosts.log"
  # "ssh HOST CMD": record the host, run the remote command here.
  ssh = _script(tmp_path / "ssh", f'echo "$1" >> {log}\nexec bash -c "$2"\n')
  commands = cluster.ssh_commands(
    ["h0", "h1", "h2"], PROBE, port=1234, ssh=[str(ssh)], repo=str(REPO)
  )
  outputs = [
    subprocess.run(
      c, env=_clean_env(), capture_output=True, text=True, check=True
    ).stdout
    for c in commands
  ]
  assert _groups("".join(outputs)) == [("h0:1234", 3, i) for i in range(3)]
  assert log.read_text().split() == ["h0", "h1", "h2"]


def test_a_failing_host_stops_the_others(tmp_path):
  marker = tmp_path / "finished"
  slow = ["bash", "-c", f"sleep 60; touch {marker}"]
  codes = cluster.run_all([slow, ["bash", "-c", "exit 3"]], poll_s=0.1)
  assert codes[1] == 3
  assert codes[0] != 0  # terminated, not left waiting
  assert not marker.exists()


def _cli(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, str(REPO / "launch" / "cluster.py"), *args],
    env=_clean_env(),
    capture_output=True,
    text=True,
    timeout=120,
  )


def test_dry_run_prints_and_starts_nothing(tmp_path):
  out = _cli(
    "--mode=ssh",
    "--hosts=h0,h1",
    "--ssh=/nonexistent/ssh",  # would fail if anything were started
    "--config=configs/tiny.py:smoke",
    f"--workdir={tmp_path}/run",
    "--dry_run",
  )
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  assert len(lines) == 2
  for i, line in enumerate(lines):
    argv = shlex.split(line)
    assert argv[:2] == ["/nonexistent/ssh", f"h{i}"]
    assert f"JAX_PROCESS_ID={i}" in argv[2]
    assert "JAX_COORDINATOR_ADDRESS=h0:8476" in argv[2]
    assert "--config=configs/tiny.py:smoke" in argv[2]
  assert not (tmp_path / "run").exists()
  slurm = _cli(
    "--mode=slurm",
    "--nodes=3",
    "--config=configs/tiny.py",
    f"--workdir={tmp_path}/run",
    "--dry_run",
  )
  assert slurm.returncode == 0, slurm.stderr
  assert "#SBATCH --nodes=3" in slurm.stdout


@pytest.mark.parametrize(
  ("args", "message"),
  [
    (("--mode=ssh", "--hosts=h0,h0"), "a host appears twice"),
    (("--mode=ssh",), "name at least one host"),
    (("--mode=slurm", "--nodes=0"), "--nodes=0"),
  ],
)
def test_bad_cluster_flags_are_named(tmp_path, args, message):
  out = _cli(*args, "--config=configs/tiny.py", f"--workdir={tmp_path}")
  assert out.returncode != 0
  assert message in out.stderr


def test_a_broken_config_stops_the_launch(tmp_path):
  out = _cli(
    "--mode=ssh",
    "--hosts=h0",
    "--config=configs/no_such.py",
    f"--workdir={tmp_path}",
    "--dry_run",
  )
  assert out.returncode != 0
  assert "configs/no_such.py" in out.stderr
  assert out.stdout == ""
