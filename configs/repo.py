r"""Repository tasks: the tiny model fixes bugs in small generated packages.

    python -m codeagent_rl.main --config=configs/repo.py --workdir=DIR

Each task (tasks/repo_gen.py) is a package of a few modules calling each
other down a chain, with one bug injected by program mutation somewhere on
the chain; the visible test fails at the top. The agent works on the
workspace with file tools (view, list_files, search, edit, create, delete,
run, submit: envs/repo_env.py): every `run` ships the workspace into a
fresh sandbox job, and a submission is graded on clean copies of the
task's tests. A bug one call below the test takes a handful of turns; one
several calls down takes dozens (the probing demonstrations): the
heavy-tailed horizons the critic is for.

Presets (the part after the colon), combinable with commas:
  default          the experiment's size
  smoke            the smallest settings, used by tests
  algo=grpo        another estimator: gae (default), grpo, dr_grpo, rloo
  seed=N           another seed

Everything not set here is configs/tiny.py's. The default preset's sizes
are a first guess, not yet measured (the repository environment is new).
"""

import ml_collections

from configs import tiny

ESTIMATORS = tiny.ESTIMATORS


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Returns the repository config; `arg` selects presets (docstring)."""
  preset, algo, seed = tiny._parse(arg)  # noqa: SLF001 (same preset grammar)
  smoke = preset == "smoke"
  config = tiny.get_config(arg)
  config.unlock()
  config.preset = f"repo:{arg or 'default'}"
  del algo, seed  # applied by tiny.get_config
  # Rows of up to thousands of tokens attend in chunks of 512 (models/
  # attention.py): memory linear in T, and on this 2-core CPU the tiny
  # model's train step ran 2.8x faster at 2k tokens and 4.6x at 8k
  # (benchmarks/attention_bench.py); rows of 512 or fewer attend plainly.
  config.model.attention = "auto"
  data = config.data
  data.generator = "repo"
  # Smoke: the smallest packages (3 modules: a bug at most 3 calls down)
  # and no probing demonstrations, so every one fits the smoke budgets.
  # Default: up to 6 modules (a bug up to 5 calls down); probing
  # demonstrations take ~4 turns per level, so the deepest reach ~30 turns.
  data.repo_min_modules = 3
  data.repo_max_modules = 3 if smoke else 6
  data.repo_direct = 0.4 if smoke else 0.55
  data.repo_probing = 0.0 if smoke else 0.35
  data.repo_give_up = 0.1 if smoke else 0.05
  data.repo_weakened_test = 0.1 if smoke else 0.05
  data.num_train_tasks = 8 if smoke else 240
  data.num_eval_tasks = 4 if smoke else 48
  env = config.env
  # A direct fix at depth d takes d + 4 turns, a probing one ~4 per level
  # more (rollout/repo_demos.py).
  env.max_turns = 8 if smoke else 40
  # The longest action is an edit with its search/replace block or a
  # created probe script (~100-250 bytes).
  env.max_tokens_per_turn = 320
  # A view of a generated module is ~80-300 bytes, a failing run's
  # traceback ~250-500.
  env.obs_max_bytes = 512 if smoke else 384
  # Episodes of up to 4,096 tokens: p50 1,563 (direct), max 4,028.
  env.max_total_tokens = 3072 if smoke else 4096
  sft = config.sft
  sft.length_bucket = 256
  # Batches of 4: with plain attention, 8 rows of 4096 tokens took 17.7 GB
  # (killed for memory on a 24 GB machine); chunked attention (above) plans
  # far less, but 8 rows were not measured again.
  sft.steps = 4 if smoke else 1600
  sft.batch_size = 2 if smoke else 4
  ppo = config.ppo
  ppo.iterations = 1 if smoke else 8
  ppo.prompts_per_iteration = 2 if smoke else 4
  ppo.samples_per_prompt = 2 if smoke else 4
  ppo.micro_batch_size = 2
  ppo.logprob_micro_batch_size = 4
  ppo.length_bucket = 256
  ppo.eval_every = ppo.iterations
  config.eval.samples_per_task = 1
  config.lock()
  return config
