r"""The main job: SFT, then PPO with a critic, on pure sandbox rewards.

    python -m codeagent_rl.main --config=configs/tiny.py --workdir=/tmp/tiny

`--config` is an ml_collections config file (with an optional preset after
a colon, e.g. `configs/tiny.py:smoke`); single fields are overridden with
`--config.ppo.iterations=10`. The sandbox is configured by the `--sandbox_*`
and `--runsc_*` flags (codeagent_rl/sandbox/harness.py). Running the same
command again with the same `--workdir` resumes.
"""

from __future__ import annotations

import sys

from absl import app
from absl import flags
from ml_collections import config_flags

from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.train import eval_job
from codeagent_rl.train import experiment
from codeagent_rl.train import run

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Experiment config file, e.g. configs/tiny.py."
)
_WORKDIR = flags.DEFINE_string(
  "workdir", None, "Directory for checkpoints, metrics and the summary."
)


def main(argv: list[str]) -> None:
  """Entry point of `python -m codeagent_rl.main`."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  config = _CONFIG.value
  try:  # bad values stop here, naming the field, before anything starts
    job = config.job if "job" in config else None
    if job == "train":
      experiment.Experiment.from_config(config)
    elif job == "evaluate":
      eval_job.validate_config(config)
    sandbox = harness.config_from_flags()
  except ValueError as e:
    sys.exit(f"error: {e}")
  try:
    run.run_job(config, _WORKDIR.value, sandbox)
  except experiment.SetupError as e:
    sys.exit(f"error: {e}")
  except (gvisor.RunscNotFoundError, eval_job.CheckpointNotFoundError) as e:
    sys.exit(str(e))  # messages written for users: no traceback


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main)
