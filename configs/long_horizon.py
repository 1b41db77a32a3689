r"""Long-horizon episodes: the tiny model on interactive probe tasks.

    python -m codeagent_rl.main --config=configs/long_horizon.py --workdir=DIR
    python -m codeagent_rl.experiments.compare \
      --config=configs/long_horizon.py --estimators=gae,grpo,rloo \
      --seeds=0,1,2 --workdir=DIR

The tasks (tasks/probes.py) hide an integer in a range whose size is
heavy-tailed; the only way to learn it is a `probe(x)` query per `<run>`,
answered on the host. An episode takes from 2 turns (a small range, or an
early give-up) to the 64-turn budget (a scan of a wide range), so rollouts
of one prompt differ in length by far more than GRPO's in-group
normalisation assumes: the regime the critic is for.

Presets (the part after the colon), combinable with commas:
  default          the experiment's size (one run of the comparison)
  smoke            the smallest settings, used by tests
  algo=grpo        another estimator: gae (default), grpo, dr_grpo, rloo
  seed=N           another seed

Everything not set here is configs/tiny.py's.
"""

import ml_collections

from configs import tiny

ESTIMATORS = tiny.ESTIMATORS


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Returns the long-horizon config; `arg` selects presets (docstring)."""
  preset, algo, seed = tiny._parse(arg)  # noqa: SLF001 (same preset grammar)
  smoke = preset == "smoke"
  config = tiny.get_config(arg)
  config.unlock()
  config.preset = f"long_horizon:{arg or 'default'}"
  del algo, seed  # applied by tiny.get_config
  # Rows of up to thousands of tokens attend in chunks of 512 (models/
  # attention.py): memory linear in T, and on this 2-core CPU the tiny
  # model's train step ran 2.8x faster at 2k tokens and 4.6x at 8k
  # (benchmarks/attention_bench.py); rows of 512 or fewer attend plainly.
  config.model.attention = "auto"
  env = config.env
  # A probe and its answer are ~45 byte tokens; 64 turns is room for the
  # longest demonstrated scan (60 probes) and a submit. Smoke: room for a
  # bisection of the widest range (8 probes) only, so an untrained model's
  # episodes end soon.
  env.max_turns = 10 if smoke else 64
  # The longest action is the submission, `def compare(x): ...` (~50 bytes).
  env.max_tokens_per_turn = 80
  # 64 turns of ~45 tokens and a ~190-token prompt.
  env.max_total_tokens = 768 if smoke else 3072
  # An answer line and, after a crash, a status and a stderr line.
  env.obs_max_bytes = 128
  data = config.data
  data.generator = "probes"
  # Probe tasks share one prompt shape; a few hundred ranges and secrets
  # are plenty for SFT (each has 1-4 demonstrations).
  data.num_train_tasks = 24 if smoke else 400
  data.num_eval_tasks = 8 if smoke else 48
  # Every task whose secret is within 60 probes of lo also gets a scan (a
  # bisection always): the long tail of the horizon. Measured on seed 0's
  # SFT model (benchmarks/horizon_bench.py, 128 train episodes, T=1): with
  # scans on half the tasks and 500 SFT steps, turns p95 10.6, max 29 and
  # pass A 0.05 (long scans broke off: garbled actions, early submits);
  # with scans on all and 800 steps, p95 34, max 50, pass A 0.59.
  data.probe_scan = 1.0
  if smoke:  # no long scans: they would not fit the smoke budgets
    data.probe_scan = 0.0
  sft = config.sft
  # Demonstrations are 300-3000 tokens, most under 500.
  sft.length_bucket = 256
  # Seed 0 (scans on all tasks): loss 0.085 at 150 steps, 0.051 at 350,
  # 0.025 at 800 (token accuracy 0.99); held-out pass@1 after 800 steps:
  # greedy 0.52, sampled 0.43. Copying the secret into the submission is
  # learnt last; at 500 steps (scans on half the tasks) seeds 1 and 2 had
  # not learnt it (held-out greedy 0.02 and 0.10, seed 0 0.75).
  sft.steps = 10 if smoke else 800
  sft.batch_size = 4 if smoke else 8
  # The rate the figures above (and the comparison's) were measured at;
  # configs/tiny.py's default preset moved to 1.5e-3 for its own data.
  sft.learning_rate = 3e-3
  ppo = config.ppo
  ppo.iterations = 2 if smoke else 6
  ppo.prompts_per_iteration = 2 if smoke else 4
  # Long rows: a sample of 4 per prompt, as the group of GRPO / RLOO.
  ppo.samples_per_prompt = 4
  ppo.micro_batch_size = 2 if smoke else 4
  ppo.logprob_micro_batch_size = 8
  ppo.length_bucket = 256
  # Rows from 300 to 3000 tokens: packing them saves most of the padding.
  ppo.packing = not smoke
  # Rows refilled as episodes end: 8 rows for 16 episodes. Measured
  # (benchmarks/rollout_refill_bench.py, CPU, 2-50 turns): 2.1x lockstep's
  # speed at 8 rows of 16, 3.3x at 4. Smoke keeps lockstep.
  ppo.rollout_slots = 0 if smoke else 8
  ppo.eval_every = ppo.iterations
  # The critic is pre-trained on the SFT policy's Monte-Carlo returns
  # (value pre-training, VAPO) until its explained variance stops rising,
  # instead of warm-up iterations: those trained it on lambda-0.95 targets
  # that the terminal reward barely reached (docs/critic_recipe.md). At
  # most 20 rounds of 16 episodes; measured on seed 0's SFT model the
  # explained variance stayed near 0 for 30 rounds (critic rate 5e-4), so
  # the patience rule usually ends it after 4-6 rounds, and the actor's
  # lambda then follows the critic's fit (rl.advantage.critic_trust).
  ppo.critic_warmup_iterations = 0
  ppo.value_pretrain_iterations = 0 if smoke else 20
  config.eval.samples_per_task = 1 if smoke else 2
  config.lock()
  return config
