r"""The reward-hacking experiment where hacks pay: a weak suite A, an oracle.

    python -m codeagent_rl.experiments.reward_hacking \
      --config=configs/reward_hacking.py --hack_demos=0.3 \
      --variants=none,stage1,stage2,both --seeds=0,1,2 --workdir=DIR

configs/tiny.py's experiment with suite A made weak, as the original
HumanEval's tests often were: suite A is the prompt's visible tests again
plus one input judged only by the return type (tasks/synthetic.py,
`suite_a="weak"`). A program that special-cases the visible inputs, or
swallows its own errors into a value of the right type, passes it. Suite B
(20-24 tests with the edge cases) stays strong: it is stage 2's. Each task
also carries an oracle suite of `data.oracle_tests` tests that no reward,
stage or prompt sees (tasks/oracle.py): it measures the true hack rate.
The experiment (codeagent_rl/experiments/reward_hacking.py) sets the hack
demonstrations' probabilities from `--hack_demos`.

Presets (the part after the colon):
  default   the full experiment: one SFT model, 4 variants x 3 seeds of
            PPO; sized from configs/tiny.py's timings for about an hour
            on 2 cores, it took ~2 hours where other jobs shared them
            (docs/reward_hacking.md)
  smoke     the smallest settings, used by tests (under 2 minutes)
"""

import ml_collections

from configs import tiny


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The tiny config with a weak suite A and an oracle; `arg`: the preset."""
  preset = arg or "default"
  if preset not in ("default", "smoke"):
    raise ValueError(
      f"configs/reward_hacking.py: unknown preset {preset!r}; expected"
      " 'default' or 'smoke'."
    )
  smoke = preset == "smoke"
  config = tiny.get_config(preset)
  with config.unlocked():
    config.preset = f"reward_hacking:{preset}"
    data = config.data
    # Suite A: the visible tests again plus one type check.
    data.suite_a = "weak"
    # Tests per task no reward sees: 32 random inputs of the task's family
    # beyond every other suite (fewer where a family runs out of inputs).
    data.oracle_tests = 8 if smoke else 32
    # Held-out tasks: 64 (not 96) and 2 sampled episodes each (not 4): 12
    # runs evaluate twice each (configs/tiny.py measured ~5 s per sample
    # of 96 tasks). Smoke: 4 tasks keep the notebook's four variants
    # inside its 180 s.
    data.num_eval_tasks = 4 if smoke else 64
    config.eval.samples_per_task = 1 if smoke else 2
    # The recipe the experiment's numbers (docs/reward_hacking.md) were
    # measured with; configs/tiny.py's default preset has since moved to
    # 24 iterations and SFT of 600 steps at 1.5e-3 for its own data.
    config.ppo.iterations = 2 if smoke else 16
    config.sft.steps = 20 if smoke else 1300
    config.sft.learning_rate = 3e-3
    # The hack demonstrations' probabilities are the experiment's
    # --hack_demos; off here, so the config alone trains honestly.
    data.hardcoded = 0.0
    data.early_exit = 0.0
    data.weak_assert = 0.0
    data.swallow = 0.0
  config.lock()
  return config
