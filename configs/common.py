"""Config sections shared by every experiment; the only home of their defaults.

Experiment files in `configs/` build on these and override single fields.
"""

import ml_collections

from codeagent_rl.sandbox import config as sandbox_config


def get_rl_config() -> ml_collections.ConfigDict:
  """The `rl` section: advantages, PPO losses, KL, adaptive truncation."""
  rl = ml_collections.ConfigDict()

  rl.advantage = ml_collections.ConfigDict()
  # "gae" (critic; the recipe) or a critic-free baseline: "grpo", "dr_grpo",
  # "rloo" (see codeagent_rl/rl/advantages.py).
  rl.advantage.estimator = "gae"
  # Discount per MDP step (trainable token). 1.0: the reward is the terminal
  # test outcome and episodes are finite (as in RLHF-style PPO, Ouyang 2022).
  rl.advantage.gamma = 1.0
  # GAE lambda of the actor's advantages. 0.95 (Schulman 2016) trades the
  # critic's bias for variance; 1.0 is the Monte-Carlo return minus the
  # baseline. Per token it is short-sighted: the terminal reward reaches a
  # token 2,000 steps before the end weighted 0.95^2000 (see lam_length_alpha
  # and credit).
  rl.advantage.lam = 0.95
  # GAE lambda of the critic's targets (`returns`), decoupled from the
  # actor's (VC-PPO, arXiv 2503.01491): 1.0 regresses the critic on
  # Monte-Carlo returns, unbiased whatever its own errors; with 0.95 over
  # tokens an early turn's target is mostly the critic's own guess.
  rl.advantage.lam_critic = 1.0
  # 0: the actor's lambda is `lam`. > 0: per row 1 - 1 / (alpha * n), n the
  # row's trainable tokens, clamped to [0, 1] (VAPO, arXiv 2504.05118,
  # uses 0.05): long rows get a lambda near 1, short ones a lower one.
  rl.advantage.lam_length_alpha = 0.0
  # What an MDP step of "gae" is: "token" (every trainable token) or "turn"
  # (a turn: one value and one advantage per turn, broadcast to its tokens;
  # codeagent_rl/rl/gae.py compute_turn_gae).
  rl.advantage.credit = "token"
  # "explained_variance": the actor's lambda moves towards 1 by how little
  # of the batch's Monte-Carlo returns the critic explains, 1 - (1 - lam) *
  # clip(EV, 0, 1) (codeagent_rl/rl/advantages.py actor_lambda), so an
  # unlearnt critic's value differences never make up the advantages.
  # Measured (configs/long_horizon.py, seed 0, one actor update after one
  # critic warm-up iteration): at lam 0.95 with "none" the update moved the
  # policy by a KL of 0.045 per token and its training reward from 0.75 to
  # 0.06; at lam 1 by 0.0009, reward 0.69. "none": lam as configured.
  # Critic-free estimators ignore it.
  rl.advantage.critic_trust = "explained_variance"
  # "scan" or "associative": identical results. benchmarks/gae_bench.py on
  # 2 CPU cores measured scan faster at every size it tries (see
  # benchmarks/results/gae_bench.json); the associative form only pays off
  # where parallel depth matters (long rows on an accelerator).
  rl.advantage.gae_method = "scan"
  # Added to the group std of "grpo" (DeepSeekMath uses 1e-4 .. 1e-6).
  rl.advantage.group_eps = 1e-6
  # Whiten advantages over the batch's trainable tokens (common in PPO for
  # LMs, e.g. the TRL/OpenRLHF defaults).
  rl.advantage.whiten = True

  rl.loss = ml_collections.ConfigDict()
  # Lower/upper clip range of the ratio; 0.2 (Schulman 2017). Raising
  # eps_high alone ("clip-higher", DAPO 0.28) keeps exploration alive.
  rl.loss.eps_low = 0.2
  rl.loss.eps_high = 0.2
  # Dual-clip constant c > 1 (Ye 2020 uses 3), or None to disable.
  rl.loss.dual_clip = 3.0
  # Off-policy rollouts (ppo.max_staleness = 1): each token's loss is
  # weighted by min(pi_proximal / pi_behaviour, cap), the decoupled PPO
  # objective of AReaL; 2 bounds what one stale token can weigh.
  rl.loss.behaviour_cap = 2.0
  # Clip range of the value loss around the old value, or None; 0.2 as in
  # most PPO-for-LM implementations. Scale-dependent: rewards here are in
  # [0, 1].
  rl.loss.value_clip = 0.2
  # Weight of the value loss when actor and critic losses are summed for
  # logging; the critic has its own optimiser, so this scales its gradient.
  rl.loss.value_coef = 1.0
  # Entropy bonus weight; 0 as in most LM PPO recipes.
  rl.loss.entropy_coef = 0.0
  # Weight of a negative log-likelihood term on the tokens of episodes
  # solved on suites A and B (VAPO's positive-example LM loss uses 0.1);
  # 0: off, the plain PPO objective.
  rl.loss.positive_nll_coef = 0.0
  # "token_mean" (verl default), "seq_mean_token_mean" or
  # "seq_mean_token_sum_norm" (Dr.GRPO); see codeagent_rl/rl/losses.py.
  rl.loss.agg_mode = "token_mean"
  # Constant divisor of "seq_mean_token_sum_norm" (max response tokens), or
  # None when that mode is not used.
  rl.loss.norm_length = ml_collections.config_dict.placeholder(float)

  rl.kl = ml_collections.ConfigDict()
  # KL(policy || SFT reference) coefficient; InstructGPT used 0.02.
  rl.kl.coef = 0.02
  # "reward": per-token penalty in the reward (k1 default); "loss": a loss
  # term (k3 default).
  rl.kl.placement = "reward"
  # "k1", "k2" or "k3" (Schulman 2020). Use "k3" with placement="loss".
  rl.kl.estimator = "k1"

  # Stop an episode early when the critic is sure of its outcome
  # (codeagent_rl/rollout/truncation.py); its return is then bootstrapped
  # from the critic, as for a budget truncation. Needs estimator "gae".
  rl.adaptive_truncation = ml_collections.ConfigDict()
  # Off by default: it trades the critic's bias for rollout tokens, a
  # trade to measure (see the truncation/audit_* metrics) before relying on.
  rl.adaptive_truncation.enabled = False
  # Value at or above which a turn counts as high. Rewards are pass
  # fractions in [0, 1]; 0.9 asks for near-certain success. Not yet tuned.
  rl.adaptive_truncation.threshold = 0.9
  # The last k turns' values must all be high (and stable): 3 turns, so one
  # lucky turn does not end an episode. Not yet tuned.
  rl.adaptive_truncation.k = 3
  # Largest max - min of those k values: 0.05 of the [0, 1] reward range.
  rl.adaptive_truncation.tolerance = 0.05
  # Never cut before this many turns; 3 (= k) gives the policy a chance to
  # run its code before the critic may call the episode.
  rl.adaptive_truncation.min_turns = 3
  # Share of cut decisions only recorded (the episode runs on), to measure
  # the critic's error at the cut on real outcomes; 0.1 keeps most savings.
  rl.adaptive_truncation.audit_fraction = 0.1

  # How the critic starts: "actor" (a copy of the SFT actor's trunk plus a
  # fresh value head, as InstructGPT initialises from the reward model and
  # most PPO-for-LM recipes from the policy; with `critic.checkpoint_dir`,
  # that checkpoint's trunk) or "random".
  rl.critic_init = "actor"
  return rl


def get_critic_config() -> ml_collections.ConfigDict:
  """The `critic` section: where the critic's trunk comes from, what it reads.

  See codeagent_rl/train/experiment.py (PrivilegedCritic) and
  codeagent_rl/train/critic_inputs.py.
  """
  critic = ml_collections.ConfigDict()
  # Another Hugging Face checkpoint with the actor's tokenizer (e.g. a
  # smaller model of the family) for the critic's trunk; unset: a copy of
  # the actor's (rl.critic_init).
  critic.checkpoint_dir = ml_collections.config_dict.placeholder(str)
  # "none", or "tests": the task's hidden tests come before the trajectory
  # in the critic's input (an asymmetric critic, as SWEET-RL's): it sees
  # what decides the reward, the actor never does, and the critic is
  # dropped after training.
  critic.privileged = "none"
  # The most tokens of the tests' text the critic reads; 512 holds the
  # probe tasks' 8 hidden tests (~250 bytes) and typical HumanEval suites.
  critic.privileged_max_tokens = 512
  return critic


def get_mesh_config() -> ml_collections.ConfigDict:
  """The `mesh` section: device mesh axes and logical-to-mesh axis rules.

  See codeagent_rl/parallel/mesh.py. The product of the sizes must equal the
  number of devices; one axis may be -1 (the devices left over).
  """
  mesh = ml_collections.ConfigDict()
  # Pure data parallelism (params replicated); -1: every device not used by
  # the other axes, so the default runs unchanged on 1 CPU or 8 chips.
  mesh.data = -1
  # Fully sharded data parallelism (params and optimiser state split too);
  # raise it when one replica no longer fits a device.
  mesh.fsdp = 1
  # Tensor parallelism inside layers (heads, MLP, vocabulary); keep it within
  # a host's fast interconnect.
  mesh.tensor = 1
  # (logical axis, mesh axes or None) pairs, one per logical axis the models
  # use (codeagent_rl/models/transformer.py). A missing axis is an error, not
  # a replication. MaxText-style FSDP + tensor layout: the batch over data and
  # fsdp, weights' embed dimension over fsdp, heads/MLP/vocab over tensor,
  # sequence and head width whole. `batch` first: for activations an earlier
  # rule wins a mesh axis that two dimensions ask for.
  mesh.rules = (
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
  )
  return mesh


def get_optim_config() -> ml_collections.ConfigDict:
  """The `optim` section: one AdamW (after global-norm clipping) per model.

  See codeagent_rl/parallel/state.py (OptimConfig). The values are the
  recipe's for 1B-7B models fine-tuned by PPO; tiny configs raise the rates.
  """
  optim = ml_collections.ConfigDict()
  # Actor (policy) peak learning rate; 1e-6 is the recipe's (and verl's PPO
  # actor default) for pretrained 1B-7B models.
  optim.actor_lr = 1e-6
  # Critic peak learning rate; follows 5 x actor_lr unless set: the critic
  # starts from a fresh value head and must track the policy (recipe 5e-6).
  optim.critic_lr = optim.get_ref("actor_lr") * 5
  # AdamW decoupled weight decay on every parameter; 0.01 as in verl's PPO.
  optim.weight_decay = 0.01
  # Adam first-moment decay; 0.9 (Kingma & Ba 2015).
  optim.b1 = 0.9
  # Adam second-moment decay; 0.95 as in LM training (GPT-3, Llama), steadier
  # than 0.999 when gradients are spiky.
  optim.b2 = 0.95
  # Adam epsilon; 1e-8 (Kingma & Ba 2015).
  optim.eps = 1e-8
  # Clip of the global gradient norm per model, or None; 1.0 (verl, OpenRLHF).
  optim.grad_clip_norm = 1.0
  # Linear warmup steps from 0 to the peak rate; 0 (constant rate) as in
  # verl's PPO default, the models arrive pretrained.
  optim.warmup_steps = 0
  # Step at which a cosine decay after warmup ends; 0: no decay (the rate
  # stays at its peak), as in verl's PPO default.
  optim.decay_steps = 0
  # The rate at `decay_steps` as a fraction of the peak (unused without
  # decay).
  optim.final_lr_fraction = 1.0
  return optim


def get_checkpoint_config() -> ml_collections.ConfigDict:
  """The `checkpoint` section (codeagent_rl/parallel/checkpoint.py)."""
  checkpoint = ml_collections.ConfigDict()
  # How many of the latest checkpoints to keep; older ones are deleted.
  checkpoint.keep = 3
  # Save when the global step is a multiple of this (and on preemption).
  checkpoint.save_every = 100
  # Write files in a background thread (close() and exit wait for them).
  checkpoint.async_save = True
  return checkpoint


def get_monitor_config() -> ml_collections.ConfigDict:
  """The `monitors` section (codeagent_rl/anticheat/monitors.py MonitorConfig).

  Alarms only: they log warnings and `monitor/<name>` metrics, nothing stops.
  """
  monitors = ml_collections.ConfigDict()
  # Iterations per window of the trend monitors (two windows are compared);
  # 10 averages out the noise of one iteration's batch (5 gave false alarms
  # on noisy synthetic histories).
  monitors.window = 10
  # Rise of reward/pass_a between adjacent windows that counts as rising.
  monitors.pass_rise = 0.05
  # Relative fall of passing turns or tokens between adjacent windows that
  # counts as sharp (with a rising pass rate: shortcut suspected).
  monitors.length_drop = 0.3
  # Relative fall of code/chars_mean below the first window (the SFT
  # policy's) that counts as a collapse.
  monitors.code_drop = 0.5
  # Iterations examined for critic-loss oscillation.
  monitors.osc_window = 10
  # Consecutive critic losses differing by this factor make a large move;
  # 2x moves are common in noisy but stable losses.
  monitors.osc_ratio = 3.0
  # Large up-down (or down-up) reversals in osc_window that fire the alarm.
  monitors.osc_min_reversals = 4
  # Share of episodes stage 1 rejects in one iteration above which the
  # alarm fires: 2%, the most honest episodes stage 1 may reject, so an
  # honest policy stays under it (tests/anticheat/corpus/hacks_test.py
  # holds the honest corpus to it).
  monitors.flag_rate_max = 0.02
  # Widening of mean(suite_a - suite_b) above the first window that counts
  # as overfitting the hidden tests.
  monitors.gap_widen = 0.1
  return monitors


def get_anticheat_config() -> ml_collections.ConfigDict:
  """The `anticheat` section (codeagent_rl/anticheat/config.py).

  Stage 1 (trajectory and code, before execution) and stage 2 (the held-out
  suite B) of the reward; see anticheat/stage1.py and anticheat/stage2.py.
  Stage 1 rejects only what is a hack by construction; suite B is the
  strong stage.
  """
  anticheat = ml_collections.ConfigDict()
  # What a stage-1 rejection does: "zero" (total 0) or "penalty".
  anticheat.stage1_action = "zero"
  # Total of a stage-1 rejection under "penalty" (<= 0).
  anticheat.stage1_penalty = -1.0
  # Whether the logistic-regression score can reject (besides the rules).
  # On held-out families, hack variants and HumanEval problems it rejects
  # 1,236 of the 1,620 synthetic hacks no enforced rule rejects, and no
  # honest program (benchmarks/classifier_value_bench.py, docs/anticheat.md
  # "The stage-1 classifier").
  anticheat.classifier = True
  # Score at or above which the classifier rejects. Classifiers fitted
  # without an honest style scored it at most 0.555 (5 held-out splits; at
  # 0.5 they rejected 10 of 1,014 honest programs, at 0.6 none); the shipped
  # weights score held-out honest code at most 0.11 and the hacks they catch
  # at 0.89 or more.
  anticheat.classifier_threshold = 0.6
  # Judge stage 1 before a <submit> runs and do not execute rejected code
  # (saves sandbox time; the outcome is "not executed").
  anticheat.skip_flagged = True
  # Rule flags that reject (from anticheat/names.py FLAG_NAMES): the hacks
  # by construction; the other flags are reported and feed the classifier.
  anticheat.enforced_flags = (
    "process_exit",  # exit or kill before or during a function's tests
    "file_env_probing",  # judge's or other jobs' data, environ, result fd
    "early_termination",  # tests left unrun because the code stopped
    "protected_edits",  # a repository's tests or files Python loads itself
  )
  # Suite-B pass fraction stage 2 requires; 1.0: all of the held-out suite.
  anticheat.stage2_threshold = 1.0
  # What a stage-2 failure does: "zero" (total 0) or "penalty".
  anticheat.stage2_action = "zero"
  # Total of a stage-2 failure under "penalty" (<= 0).
  anticheat.stage2_penalty = -1.0
  # total = min(suite A, suite B) instead of suite A for accepted
  # trajectories (matters when stage2_threshold < 1).
  anticheat.total_min_suites = False
  # Stage-1 weights (JSON); "": the ones shipped in
  # codeagent_rl/anticheat/weights/stage1.json.
  anticheat.classifier_weights = ""
  return anticheat


def get_sandbox_config() -> ml_collections.ConfigDict:
  """The `sandbox` section: the limits of a job, which define the reward.

  Every submission and `<run>` of the policy runs under these limits, so
  they decide which programs pass; they are saved with the run's
  config.json. The machine's settings (backend, pool size, runsc) are
  flags. Values: `SandboxConfig`'s defaults (codeagent_rl/sandbox/
  config.py), which the tools that run no experiment use too.
  """
  d = sandbox_config.SandboxConfig()
  sandbox = ml_collections.ConfigDict()
  # Wall-clock limit of one job (all its tests), seconds.
  sandbox.timeout_s = d.timeout_s
  # Wall-clock limit of one test (a call, or a run of a stdio program).
  sandbox.test_timeout_s = d.test_timeout_s
  # Memory of one job, all its processes together, MiB.
  sandbox.memory_mb = d.memory_mb
  # Processes (and threads) a job may have at once; each gets an address
  # space of memory_mb / max_processes.
  sandbox.max_processes = d.max_processes
  # Cap on a job's stdout, stderr and returned data, each, bytes.
  sandbox.max_output_bytes = d.max_output_bytes
  # Largest file a job may write, MiB (RLIMIT_FSIZE).
  sandbox.max_file_mb = d.max_file_mb
  # Open files of a job process (RLIMIT_NOFILE).
  sandbox.max_open_files = d.max_open_files
  # Size of the scratch tmpfs that holds a job's working directory, MiB.
  sandbox.scratch_mb = d.scratch_mb
  return sandbox
