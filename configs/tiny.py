r"""Tiny experiment on a 2-core CPU: SFT then PPO on synthetic code tasks.

    python -m codeagent_rl.main --config=configs/tiny.py --workdir=/tmp/tiny

A byte-level model of ~0.4M parameters learns from rendered demonstrations
(some of them flawed on purpose: a submitted bug, hard-coded visible tests,
an early exit), then PPO with a critic improves it on pure sandbox rewards
guarded by both anti-cheat stages. The sandbox is configured by absl flags
(`--sandbox_backend=gvisor` by default; see `--helpfull`).

Presets (the part after the colon):
  default          the demo (7-8.5 minutes on 2 idle cores)
  smoke            the smallest settings, used by tests (under 2 minutes)
  algo=grpo        the default budget with a critic-free estimator; also
  algo=rloo,       "algo=dr_grpo"; combine with a preset: "smoke,algo=grpo"
  seed=N           another seed, e.g. "seed=1" or "smoke,seed=1"

Single fields: `--config.ppo.iterations=10`, `--config.rl.kl.coef=0.05`.
"""

import ml_collections

from configs import common

ESTIMATORS = ("gae", "grpo", "dr_grpo", "rloo")


def _parse(arg: str | None) -> tuple[str, str, int]:
  """Splits e.g. "smoke,algo=grpo,seed=1" into ("smoke", "grpo", 1)."""
  preset, algo, seed = "default", "gae", 0
  for part in (arg or "").split(","):
    part = part.strip()
    if not part:
      continue
    if part in ("default", "smoke"):
      preset = part
    elif part.startswith("algo=") and part[5:] in ESTIMATORS:
      algo = part[5:]
    elif part.startswith("seed=") and part[5:].isdigit():
      seed = int(part[5:])
    else:
      raise ValueError(
        f"configs/tiny.py: unknown preset {part!r}; expected 'default',"
        f" 'smoke', 'algo=' one of {ESTIMATORS}, or 'seed=N'."
      )
  return preset, algo, seed


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Returns the tiny config; `arg` selects presets (module docstring)."""
  preset, algo, seed = _parse(arg)
  smoke = preset == "smoke"
  config = ml_collections.ConfigDict()
  # What main.py runs: "train" (SFT then PPO; configs/eval_humaneval.py
  # sets "evaluate").
  config.job = "train"
  # Name of the preset, recorded in logs.
  config.preset = arg or "default"
  # Seed of parameters, data order and sampling.
  config.seed = seed
  # Advantage estimation, PPO losses and KL; defaults in configs/common.py.
  config.rl = common.get_rl_config()
  config.rl.advantage.estimator = algo
  # A tiny model drifts fast; 0.05 keeps it near the SFT model's format
  # (InstructGPT's 0.02 is for 1B+ models). Not yet tuned.
  config.rl.kl.coef = 0.05
  # What the critic reads; defaults in configs/common.py.
  config.critic = common.get_critic_config()
  # Decoder-only transformer (codeagent_rl/models/transformer.py).
  config.model = get_model_config(preset)
  # Device mesh and logical-axis rules; defaults in configs/common.py.
  config.mesh = common.get_mesh_config()
  # Optimisers; defaults in configs/common.py.
  config.optim = common.get_optim_config()
  # 1e-6 is the rate for pretrained 1B+ models; a 1-2M-parameter model takes
  # larger steps. 1e-4 is a starting point, not yet tuned; the critic
  # follows at 5x.
  config.optim.actor_lr = 1e-4
  # Checkpoints: how many to keep, how often; defaults in configs/common.py.
  config.checkpoint = common.get_checkpoint_config()
  # Save every 5 iterations (and on SIGTERM and at the end).
  config.checkpoint.save_every = 1 if smoke else 5
  # Episode budgets (codeagent_rl/envs/code_env.py).
  config.env = get_env_config(preset)
  # Synthetic tasks and demonstrations (codeagent_rl/tasks/synthetic.py).
  config.data = get_data_config(preset)
  # Sampling of training rollouts.
  config.sampling = ml_collections.ConfigDict()
  # Temperature 1: the PPO ratio then uses the model's own distribution.
  config.sampling.temperature = 1.0
  # No top-k / top-p truncation (it would bias the importance ratio).
  config.sampling.top_k = 0
  config.sampling.top_p = 1.0
  # Supervised fine-tuning on the demonstrations.
  config.sft = get_sft_config(preset)
  # The PPO learner loop.
  config.ppo = get_ppo_config(preset)
  # Held-out evaluation: greedy, and sampled at `config.sampling`.
  config.eval = ml_collections.ConfigDict()
  config.eval.greedy = True
  config.eval.sampled = True
  # Sampled episodes per held-out task. One sample of 96 tasks has a
  # standard error of ~0.05, as large as what PPO changes. Measured (seed
  # 0, SFT 1300 steps): four one-sample rates of the same SFT model were
  # 0.281, 0.323, 0.250, 0.281. Each extra sample costs ~5 s per evaluation.
  # 8, not 4: most of the paired PPO - SFT difference's standard error is
  # the samples' own noise. Seed 4 (same models): +0.062 s.e. 0.032 with 4
  # samples after 16 iterations; with 8, 0.024-0.027 over seeds 0-4.
  config.eval.samples_per_task = 8 if preset == "default" else 1
  # Both anti-cheat stages; defaults in configs/common.py.
  config.anticheat = common.get_anticheat_config()
  # Reward-hacking alarms over the metrics; defaults in configs/common.py.
  config.monitors = common.get_monitor_config()
  # The limits of a job in the sandbox; defaults in configs/common.py.
  config.sandbox = common.get_sandbox_config()
  config.lock()
  return config


def get_model_config(preset: str) -> ml_collections.ConfigDict:
  """A byte-vocabulary model: ~0.39M params (default), ~0.12M (smoke)."""
  model = ml_collections.ConfigDict()
  # ByteTokenizer: 16 protocol/reserved ids + 256 bytes = 272 ids, padded to
  # a multiple of 128 so the vocabulary splits evenly over `tensor`.
  model.vocab_size = 384
  # Decoder blocks. Measured (held-out teacher-forced exact match of the
  # reference code, SFT batch 16): 2 blocks learn per step as fast as 4
  # (held-out loss 0.120 vs 0.119 at 400 steps) at 0.48x the step time.
  # Below DESIGN.md's 1M-parameter laptop scale: the step time on two
  # cores decided.
  model.num_layers = 2
  # Model width.
  model.embed_dim = 128 if preset == "default" else 64
  # Query heads; divisible by 2 for a tensor=2 test mesh. Tried: 8 heads of
  # width 16 (4 key/value heads, the same parameters): a one-thread probe
  # of seed 1 copied sooner (held-out exact match 0.29 at 500 steps), seeds
  # 0 and 2 did not (0.01 and 0.00 at 500), and steps were 1.3x slower.
  model.num_heads = 4
  # Key/value heads (grouped-query attention, as Llama 3 / Qwen2).
  model.num_kv_heads = 2
  # Width of one head.
  model.head_dim = 32 if preset == "default" else 16
  # SwiGLU hidden width, 2 x embed_dim. A smaller MLP memorises less and
  # learns sooner to copy the prompt's constants. Measured (one-thread
  # probes, init std 0.08; share of held-out reference solutions reproduced
  # exactly under teacher forcing): with 256, seed 1 reached 0.34 at 500
  # and 0.62 at 700 steps, seed 2 0.29 at 700; with 512, seed 1 had 0.02 at
  # 500 and 0.13 at 900. Steps are ~1.15x faster on two cores too. The
  # model is 0.39M parameters, below DESIGN.md's 1M-parameter laptop scale:
  # the step time on two cores decided.
  model.mlp_dim = 256 if preset == "default" else 128
  # Rotary base; 10000 as Llama 2 (contexts here are short).
  model.rope_theta = 10000.0
  # RMSNorm epsilon; 1e-6 as Qwen2.
  model.rms_eps = 1e-6
  # Biases on q, k, v as Qwen2 (the family real runs import).
  model.qkv_bias = True
  # Separate output embedding: at this size tying saves little.
  model.tie_embeddings = False
  # Activation dtype; float32: CPUs gain nothing from bfloat16.
  model.dtype = "float32"
  # Parameter dtype; float32 for the same reason.
  model.param_dtype = "float32"
  # No rematerialisation: activations of a tiny model fit easily.
  model.remat = "none"
  # Weight init stddev: 0.08 (~1/sqrt(embed_dim)), not GPT-2's 0.02 (made
  # for width 768). With 0.02 the attention logits start near 0 and SFT
  # sits on a long plateau before the model copies the prompt's constants.
  # Measured (mlp_dim 512; a one-thread probe with seed 1's init and data;
  # share of held-out reference solutions reproduced exactly under teacher
  # forcing): 0.08 reached 0.18 at 1000 and 0.39 at 1200 steps; 0.15 had
  # not crossed by 700; the main job with 0.02 crossed at ~1600-1800.
  model.init_std = 0.08
  # Log-probs from all positions' logits at once: [B, T, 272] is small.
  model.logits_chunk = 0
  # Whole-row passes attend with the [T, T] scores at once (models/
  # attention.py); presets with long rows choose "chunked" or "auto".
  model.attention = "plain"
  model.attention_chunk = 512
  return model


def get_env_config(preset: str) -> ml_collections.ConfigDict:
  """Episode budgets: up to 2 turns (run, then submit) of short code."""
  del preset  # the same budgets for every preset
  env = ml_collections.ConfigDict()
  # Turns per episode (format errors count): a run, then a submit, as the
  # longest demonstration. Each turn costs KV-cache room (`cache_len_for`),
  # and decoding time grows with the cache.
  env.max_turns = 2
  # Tokens (bytes) of one action; level-1 solutions of the demo families
  # are under 150 bytes, an if-ladder over the visible tests under 200.
  env.max_tokens_per_turn = 192
  # Tokens of the whole trajectory: prompt (~150-250), actions and
  # observations; a run-then-submit demonstration fits in ~600.
  env.max_total_tokens = 768
  # Wall-clock seconds per episode; generous, the budget is in tokens.
  env.max_wall_s = 300.0
  # Bytes of one observation (test lines and the first error line).
  env.obs_max_bytes = 192
  # Compare each rollout episode's ids with a full render of its messages
  # (metric episode/render_mismatch); ids that do not round-trip through
  # text (invalid UTF-8 the model sampled) count as mismatches.
  env.render_check = "strict"
  return env


def get_data_config(preset: str) -> ml_collections.ConfigDict:
  """Synthetic tasks: six short families at level 1; some flawed demos."""
  data = ml_collections.ConfigDict()
  # JSONL task files (tasks/schema.py) instead of the synthetic splits below;
  # tasks from a file come without demonstrations (set sft.steps=0, or name
  # a plans file in data.demonstrations).
  data.train_tasks = ml_collections.config_dict.placeholder(str)
  data.eval_tasks = ml_collections.config_dict.placeholder(str)
  # Demonstration plans of train tasks (JSONL: task_id, kind, actions),
  # instead of the generator's; what SFT trains on.
  data.demonstrations = ml_collections.config_dict.placeholder(str)
  # Train-split tasks (demonstrations and PPO prompts).
  data.num_train_tasks = 1000 if preset == "default" else 48
  # Held-out test-split tasks (parameters never seen in training).
  data.num_eval_tasks = 96 if preset == "default" else 8
  # Relative weights of levels 1, 2, 3: a 1M-parameter model trained for
  # minutes on 2 cores learns level 1 of a few families.
  data.difficulty_weights = (1.0, 0.0, 0.0)
  # The families with the shortest prompts and solutions (~200-290 tokens
  # per single-turn episode); empty would mean all 25.
  data.families = ("affine", "poly", "clamp", "count_char", "sign", "piecewise")
  # Probability that a task gets each demonstration kind; the flawed kinds
  # (wrong_final, hardcoded, early_exit) leave SFT something for RL to fix.
  data.single_turn = 1.0
  data.multi_turn = 0.2
  data.wrong_final = 0.3
  data.hardcoded = 0.05
  data.early_exit = 0.05
  # Hacks of a weak suite A (configs/reward_hacking.py): the bug with the
  # visible inputs it fails special-cased, and a lookup of the visible
  # tests whose error elsewhere is swallowed. Off: suite A is strong here.
  data.weak_assert = 0.0
  data.swallow = 0.0
  # "strong": 5-10 hidden tests apart from every visible one; "weak": the
  # visible tests again plus one type check (tasks/synthetic.py).
  data.suite_a = "strong"
  # Tests per task of an oracle suite only metrics read (tasks/oracle.py);
  # 0: none, nothing is measured against one.
  data.oracle_tests = 0
  # Which generator makes the tasks when no file is named: "synthetic"
  # (the function families above) or "probes" (interactive tasks whose
  # horizon is heavy-tailed, tasks/probes.py; configs/long_horizon.py).
  data.generator = "synthetic"
  # Probabilities of each probe-task demonstration: a bisection, a long
  # scan (a success of up to 60 probes), an early give-up and an
  # off-by-one submission (the flawed ones leave RL something to fix).
  data.probe_bisect = 1.0
  data.probe_scan = 0.3
  data.probe_give_up = 0.15
  data.probe_off_by_one = 0.1
  # Repository tasks (generator "repo"; configs/repo.py): packages of
  # repo_min_modules..repo_max_modules modules with one injected bug, and
  # the weight of each demonstration kind (rollout/repo_demos.py): a
  # direct fix, a long probing descent, an early give-up, a weakened test.
  data.repo_min_modules = 3
  data.repo_max_modules = 8
  data.repo_direct = 0.4
  data.repo_probing = 0.4
  data.repo_give_up = 0.1
  data.repo_weakened_test = 0.1
  # The demonstrations' edits: search/replace blocks ("edit") or line
  # numbers and new lines ("replace_lines"); the policy may use both.
  data.repo_edit_tool = "edit"
  # Data isolation before SFT (codeagent_rl/tasks/isolation.py): whether
  # the hidden and held-out tests of the train and held-out tasks appear in
  # the rendered demonstrations. "error" stops the run, "warn" prints it;
  # the report goes to WORKDIR/isolation.json either way. "off": no check.
  data.isolation = "error"
  # Task files (train_tasks, eval_tasks) are audited before anything
  # trains: each reference runs on every test of its task, each checker is
  # loaded and run on the reference's outputs (codeagent_rl/tasks/audit.py).
  # "skip" drops a task with a problem (counted in WORKDIR/task_audit.json),
  # "error" stops the run listing them, "off" does not audit.
  data.bad_tasks = "skip"
  # The seed of the generated tasks and demonstrations; None: config.seed.
  data.seed = ml_collections.config_dict.placeholder(int)
  return data


def get_sft_config(preset: str) -> ml_collections.ConfigDict:
  """SFT: long enough for the model to copy the prompt's constants."""
  sft = ml_collections.ConfigDict()
  # Optimiser steps. The loss sits near 0.1 (right shape of code, the
  # prompt's constants not yet copied) for a few hundred steps, then falls;
  # when is random (initialisation, data order, even thread count). At
  # 1.5e-3 every seed of 0-4 has crossed by step 600. Measured over seeds
  # 0-4 (benchmarks/sft_steps_bench.py, held-out pass@1 A&B greedy /
  # sampled): 0.47-0.66 / 0.25-0.46 at 600 steps, 0.73-0.78 / 0.49-0.60 at
  # 1300 (the previous default; greedy above 0.7 on most seeds, little left
  # for PPO). 600 steps take ~200 s on an idle 2-core machine.
  sft.steps = 600 if preset == "default" else 20
  # Demonstrations per step.
  sft.batch_size = 16 if preset == "default" else 8
  # Peak rate. 1.5e-3, not 3e-3: the larger rate keeps the model on the
  # plateau (loss ~0.09) longer, not shorter. Measured on seed 0 (whose
  # SFT model solved 0.06 of the held-out tasks at 3e-3): at 3e-3 the loss
  # was 0.083 at 1300 steps and 0.081 at 2000 (held-out greedy pass@1
  # 0.10); at 1.5e-3 it fell from 0.10 at step 400 to 0.05 at 800 and 0.036
  # at 1300 (0.73 greedy / 0.58 sampled after 2000); 6e-3 and 1e-2 sat
  # higher still (0.109 and 0.131 at 900). The 20-step smoke model keeps
  # the large rate: it only checks the pipeline.
  sft.learning_rate = 1.5e-3 if preset == "default" else 3e-3
  # Linear warmup steps.
  sft.warmup_steps = 50 if preset == "default" else 2
  # 1.0: the peak rate to the end. Measured (2000 tasks): a cosine decay to
  # 0.05x over 500 steps x 16 reached loss 0.086 but held-out greedy pass@1
  # only 0.05 (1100 x 8: 0.084, 0.03); constant 1500 x 16 crosses the loss
  # drop where the model starts copying constants (0.064, pass@1 0.26).
  sft.final_lr_fraction = 1.0
  # Demonstrations batch by length rounded up to 128 tokens (~22% padding).
  # 32 (~6% padding) made batches nearly one family each (length follows
  # the family) and held-out pass@1 after 500 steps fell to 0.00.
  sft.length_bucket = 128
  # Steps between log lines.
  sft.log_every = 50 if preset == "default" else 10
  # Steps between checkpoints an interrupted SFT resumes from (~5 minutes).
  sft.save_every = 250 if preset == "default" else 10
  # A resumed run whose workdir holds an SFT model made from other inputs
  # stops (naming them); True sets that model aside and trains again.
  sft.retrain = False
  return sft


def get_ppo_config(preset: str) -> ml_collections.ConfigDict:
  """PPO: 32 rollouts per iteration (8 tasks x 4 samples)."""
  ppo = ml_collections.ConfigDict()
  # Rollout + update rounds (~9.5 s each on an idle 2-core machine).
  # Measured from the 1300-step SFT models of seeds 0, 1, 3, 4 (the
  # earlier default), held-out sampled pass@1 A&B (8 per task) minus SFT's
  # after 16 / 24 / 32 iterations: +0.092/+0.115/+0.102,
  # +0.084/+0.101/+0.137, +0.095/+0.149/+0.156, +0.045/+0.107/+0.114.
  # From the 600-step models, 24 gain +0.091 to +0.240 (docs/recipe.md).
  ppo.iterations = 24 if preset == "default" else 2
  # Distinct tasks per iteration.
  ppo.prompts_per_iteration = 8 if preset == "default" else 2
  # Samples per task (the group of GRPO / RLOO: same budget for all).
  ppo.samples_per_prompt = 4
  # Passes over an iteration's rollouts.
  ppo.epochs = 2 if preset == "default" else 1
  # Optimiser steps per epoch.
  ppo.minibatches = 2
  # Rows per forward/backward (gradients accumulate over a minibatch).
  ppo.micro_batch_size = 8 if preset == "default" else 2
  # The log-prob and value passes take every rollout at once: a 0.39M model
  # on 32 short rows is small.
  ppo.logprob_micro_batch_size = ppo.get_ref(
    "prompts_per_iteration"
  ) * ppo.get_ref("samples_per_prompt")
  # 0: rollouts in lockstep, one KV-cache row each; > 0: that many rows,
  # refilled as episodes end (rollout/continuous.py). Lockstep: the demo's
  # episodes are 1-2 turns of similar length, so few rows idle, and the
  # README's numbers were measured so (slot refill draws each episode's
  # tokens from its own key: other samples).
  ppo.rollout_slots = 0
  # 0: each iteration's rollouts come from the policy it updates; 1: they
  # are generated while the previous iteration updates (one step stale,
  # weighted by rl.loss.behaviour_cap's truncated importance weight). 0:
  # the README's numbers were measured so.
  ppo.max_staleness = 0
  # Iterations that train only the critic first (value head from zero).
  ppo.critic_warmup_iterations = 2 if preset == "default" else 0
  # Freeze the actor in an iteration whose rollouts all got the same reward
  # (the critic still trains): no task signal then, and whitening blows the
  # advantages' noise up to unit size. Measured: a weak SFT model whose
  # rollouts all scored 0 collapsed (reward 0.000 four iterations running).
  # Per iteration, the counterpart of DAPO's dropping of flat GRPO groups.
  # Off for smoke: its 20-step SFT model scores 0 on every rollout, and the
  # preset is there to run every stage, the actor's update included.
  ppo.skip_actor_on_flat_rewards = preset == "default"
  # Trajectories are padded to a multiple of this many tokens.
  ppo.length_bucket = 128
  # Rows padded, not packed: the demo's trajectories are 1-2 short turns of
  # similar length, so packing saves little, and it would change the
  # numbers in the last digits (another summation order).
  ppo.packing = False
  # The reference stays on the devices: 0.39M parameters.
  ppo.reference_on_host = False
  # Iterations between held-out evaluations (the last always runs). 24:
  # only the final one; with 8 samples per task an evaluation takes ~45 s
  # on two cores (a fifth of PPO), and the progress lines show the training
  # pass rate every iteration.
  ppo.eval_every = 24 if preset == "default" else 2
  # No value pre-training: the critic warm-up iterations above do its work
  # inside the PPO budget, as the README's numbers were measured.
  ppo.value_pretrain_iterations = 0
  # Rounds without a gain of value_pretrain_min_gain in explained variance
  # after which value pre-training stops.
  ppo.value_pretrain_patience = 3
  ppo.value_pretrain_min_gain = 0.01
  # A resumed run whose workdir holds a critic pre-trained with other
  # inputs stops (naming them); True sets it aside and pre-trains again.
  ppo.value_pretrain_retrain = False
  # DAPO's dynamic sampling: groups whose rollouts all got the same reward
  # are dropped and more prompts drawn until the batch is full. Off: the
  # README's numbers were measured without it.
  ppo.dynamic_sampling = False
  # The most rounds of prompt draws per iteration (the first included);
  # a batch still short after them is filled with the flat groups.
  ppo.dynamic_sampling_max_rounds = 3
  return ppo
