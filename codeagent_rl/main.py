r"""The main job: SFT, then PPO with a critic, on pure sandbox rewards.

    python -m codeagent_rl.main --config=configs/tiny.py --workdir=/tmp/tiny

`--config` is an ml_collections config file (with an optional preset after
a colon, e.g. `configs/tiny.py:smoke`; a `configs/...` path missing below
the current directory is the installed package's, so the command runs from
anywhere: `codeagent_rl/cli.py`); single fields are overridden with
`--config.ppo.iterations=10`. The limits of a job in the sandbox are the
config's `sandbox` section (`--config.sandbox.timeout_s=20`); the machine's
sandbox settings are the `--sandbox_*` and `--runsc_*` flags
(codeagent_rl/sandbox/harness.py). Running the same command again with the
same `--workdir` resumes. Ctrl-C ends the run with one line saying which
checkpoint a resume starts from (exit status 130); SIGTERM finishes the
iteration, saves, prints the summary of the run so far and exits with 143.

On several hosts a launcher starts one process per host with
JAX_COORDINATOR_ADDRESS, JAX_PROCESS_COUNT and JAX_PROCESS_ID set and one
`--workdir` that all of them see (codeagent_rl/parallel/distributed.py).
"""

from __future__ import annotations

import sys

from absl import app
from absl import flags
from ml_collections import config_flags

from codeagent_rl import cli
from codeagent_rl import logs
from codeagent_rl.parallel import distributed
from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.train import eval_job
from codeagent_rl.train import experiment
from codeagent_rl.train import run

# Exit statuses of a run that did not finish, as a shell reports a process
# ended by SIGINT (Ctrl-C) and by SIGTERM: 128 + the signal's number.
EXIT_INTERRUPTED = 130
EXIT_STOPPED = 143


def define_flags() -> None:
  """Registers the program's flags: --config, --workdir, the sandbox's."""
  config_flags.DEFINE_config_file(
    "config", None, "Experiment config file, e.g. configs/tiny.py."
  )
  flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, metrics and the summary."
  )
  harness.define_flags()
  flags.mark_flags_as_required(["config", "workdir"])


def main(argv: list[str]) -> None:
  """Entry point of `python -m codeagent_rl.main`."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  # Before anything touches a JAX backend (jax logs its probe of each).
  logs.quiet_library_logs()
  cli.redeliver_swallowed_interrupts()
  try:
    distributed.initialize()
  except ValueError as e:
    sys.exit(f"error: {e}")
  try:  # bad values stop here, naming the field, before anything starts
    cli.check_workdir(flags.FLAGS.workdir)
    job = run.job_from_config(flags.FLAGS.config)
    sandbox = harness.config_from_flags(job.exp.sandbox)
  except ValueError as e:
    sys.exit(f"error: {e}")
  workdir = flags.FLAGS.workdir
  try:
    result = run.run_job(job, workdir, sandbox)
  except experiment.SetupError as e:
    sys.exit(f"error: {e}")
  except (gvisor.SetupError, eval_job.CheckpointNotFoundError) as e:
    sys.exit(str(e))  # messages written for users: no traceback
  except KeyboardInterrupt:
    print(
      f"\ninterrupted: kept the {run.saved_state(workdir)}; the same command"
      " resumes from there.",
      file=sys.stderr,
    )
    sys.exit(EXIT_INTERRUPTED)
  if isinstance(result, dict) and result.get("stopped_early"):
    # A scheduler that sent SIGTERM reads the run as not finished.
    print(
      f"stopped early: kept the {run.saved_state(workdir)}; the same command"
      " resumes from there.",
      file=sys.stderr,
    )
    sys.exit(EXIT_STOPPED)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=cli.parse_flags)
