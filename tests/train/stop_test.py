"""What a user sees when a run is stopped: one line, and a status to act on.

Ctrl-C (SIGINT) is one line naming the checkpoint a resume starts from,
exit status 130; SIGTERM (a scheduler's preemption) finishes the
iteration, saves, prints the summary marked as stopped early, and exits
with 143 so that the scheduler does not read the run as finished.
"""

import pathlib
import signal
import subprocess
import time

import pytest

from codeagent_rl import main as main_lib
from tests.helpers import presets
from tests.helpers import processes

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# The suite's smaller smoke shapes (tests/helpers/presets.py): e2e_test's
# runs compile the same programs.
ARGS = (
  "--config=configs/tiny.py:smoke",
  *presets.cli_flags(presets.SMALL_SMOKE),
  "--config.ppo.iterations=40",
  "--config.ppo.prompts_per_iteration=2",
  "--config.ppo.samples_per_prompt=4",
  "--config.ppo.eval_every=1000",
  "--sandbox_backend=process",
)


def _start(workdir):
  env = {
    **processes.one_device_env(llvm_optimised=True),
    "PYTHONUNBUFFERED": "1",
  }
  return subprocess.Popen(
    processes.python_m_with_ctrl_c(
      "codeagent_rl.main", *ARGS, f"--workdir={workdir}"
    ),
    cwd=REPO_ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
    env=env,
  )


def _until(proc, prefix, timeout_s=400):
  """Reads lines until one starts with `prefix`; returns what was read."""
  seen, deadline = [], time.monotonic() + timeout_s
  for line in proc.stdout:
    seen.append(line)
    if line.startswith(prefix):
      return seen
    if time.monotonic() > deadline:
      break
  proc.kill()
  pytest.fail(f"no line starting {prefix!r}:\n" + "".join(seen[-30:]))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_run_says_what_it_kept(sig, tmp_path):
  workdir = tmp_path / "run"
  proc = _start(workdir)
  # Ctrl-C as soon as SFT is saved; SIGTERM once PPO has saved.
  head = _until(proc, "SFT held-out:" if sig == signal.SIGINT else "it  2/40")
  proc.send_signal(sig)
  rest, _ = proc.communicate(timeout=300)
  out = "".join(head) + rest
  assert "Traceback" not in out, out[-3000:]
  lines = rest.strip().splitlines()
  if sig == signal.SIGINT:
    assert proc.returncode == main_lib.EXIT_INTERRUPTED, out[-2000:]
    assert lines[-1].startswith(
      "interrupted: kept the SFT checkpoint of step 4 in "
    ), lines[-3:]
    assert lines[-1].endswith("; the same command resumes from there.")
  else:
    assert proc.returncode == main_lib.EXIT_STOPPED, out[-2000:]
    assert "stopped early after iteration " in rest
    assert "PPO final" not in rest  # the table says which iteration it is
    assert lines[-1].startswith(
      "stopped early: kept the PPO checkpoint of iteration "
    ), lines[-3:]
  assert "Unable to initialize backend" not in out
