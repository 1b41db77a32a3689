r"""PPO with a critic on a Hugging Face code model from local disk.

    python -m codeagent_rl.main --config=configs/hf.py \
      --config.hf_checkpoint_dir=DIR \
      --config.data.train_tasks=TRAIN.jsonl \
      --config.data.eval_tasks=EVAL.jsonl --workdir=W

DIR is a Llama or Qwen2 checkpoint as `save_pretrained` writes it
(config.json, *.safetensors, tokenizer.json, tokenizer_config.json with a
chat template, generation_config.json); nothing is downloaded. The model's
dimensions come from DIR/config.json; the actor and the frozen KL reference
start from its weights, the critic from a copy of its trunk with a zero
value head (`rl.critic_init = "actor"`), or from the trunk of another
checkpoint with the same tokenizer (`--config.critic.checkpoint_dir=DIR2`,
e.g. a smaller model of the family). Episodes are chat conversations in
the checkpoint's own template: the task is the user message, each action an
assistant message, each observation a user message. Task files are JSONL in
the task schema (`python -m codeagent_rl.tasks.convert` writes them from
APPS, CodeContests, LiveCodeBench, MBPP or HumanEval records); without them
the synthetic tasks of configs/tiny.py are used. There is no SFT phase: the
checkpoint is the SFT model (`sft.steps = 0`).

Presets (the part after the colon):
  default   a 0.5B-7B model on accelerators (bfloat16 activations, remat);
            set the mesh (`--config.mesh.fsdp=...`) for the machine
  smoke     a ~1M-parameter checkpoint on a 2-core CPU: 2 PPO iterations
            in a few minutes (the tests use it)
"""

import ml_collections

from configs import common
from configs import tiny

PRESETS = ("default", "smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Returns the config; `arg` is a preset name (module docstring)."""
  preset = arg or "default"
  if preset not in PRESETS:
    raise ValueError(
      f"configs/hf.py: unknown preset {arg!r}; expected one of {PRESETS}."
    )
  smoke = preset == "smoke"
  config = ml_collections.ConfigDict()
  config.job = "train"
  config.preset = preset
  # Seed of the value head's init (none: it is zero), data order, sampling.
  config.seed = 0
  # Local directory of the checkpoint; required.
  config.hf_checkpoint_dir = ml_collections.config_dict.placeholder(str)
  config.rl = common.get_rl_config()
  # The critic's trunk (a copy of the actor's, or another checkpoint with
  # the same tokenizer) and what it reads; defaults in configs/common.py.
  config.critic = common.get_critic_config()
  # The model's architecture comes from the checkpoint's config.json; these
  # are the fields it does not fix.
  config.model = ml_collections.ConfigDict()
  # bfloat16 activations: the checkpoints' own dtype; CPUs gain nothing.
  config.model.dtype = "float32" if smoke else "bfloat16"
  # float32 params: Adam steps of ~1e-6 relative size vanish in bfloat16.
  config.model.param_dtype = "float32"
  # Save the weight matmuls' outputs, recompute attention (the memory of
  # long trajectories); a tiny model needs none.
  config.model.remat = "none" if smoke else "dots_no_batch"
  # Positions per log-prob chunk: only [B, chunk, V] float32 logits exist at
  # a time (a whole 8k-token row at V=151936 is 5 GB, twice that with the
  # backward pass). The smoke preset chunks too, so the tests run that path.
  config.model.logits_chunk = 16 if smoke else 512
  # Whole-row passes attend in chunks once rows are longer than one
  # (models/attention.py: memory linear in T; the plain [T, T] scores of an
  # 8k row are ~3.8 GB per layer in float32). The smoke preset chunks at
  # 16, so the tests run that path.
  config.model.attention = "auto"
  config.model.attention_chunk = 16 if smoke else 512
  config.mesh = common.get_mesh_config()
  # The recipe's 1e-6 actor / 5e-6 critic rates for pretrained models.
  config.optim = common.get_optim_config()
  config.checkpoint = common.get_checkpoint_config()
  config.env = get_env_config(smoke)
  config.data = tiny.get_data_config("smoke" if smoke else "default")
  config.sampling = ml_collections.ConfigDict()
  # Temperature 1 and no truncation: the PPO ratio uses the model's own
  # distribution.
  config.sampling.temperature = 1.0
  config.sampling.top_k = 0
  config.sampling.top_p = 1.0
  config.sft = tiny.get_sft_config("smoke")
  # The checkpoint is the SFT model; with demonstrations, set steps > 0.
  config.sft.steps = 0
  config.sft.learning_rate = 1e-5
  config.ppo = get_ppo_config(smoke)
  config.eval = ml_collections.ConfigDict()
  config.eval.greedy = True
  config.eval.sampled = True
  config.eval.samples_per_task = 1 if smoke else 4
  config.anticheat = common.get_anticheat_config()
  config.monitors = common.get_monitor_config()
  config.sandbox = common.get_sandbox_config()
  config.lock()
  return config


def get_env_config(smoke: bool) -> ml_collections.ConfigDict:
  """Episode budgets in the checkpoint's tokens."""
  env = ml_collections.ConfigDict()
  # Turns per episode: room to run code and read its output a few times.
  env.max_turns = 2 if smoke else 8
  # Tokens of one action (an assistant message).
  env.max_tokens_per_turn = 48 if smoke else 1024
  # Tokens of the whole conversation: the prompt (system + task), actions
  # and observations.
  env.max_total_tokens = 1024 if smoke else 8192
  env.max_wall_s = 300.0 if smoke else 900.0
  # Bytes of one observation's body.
  env.obs_max_bytes = 128 if smoke else 1024
  # Each rollout episode's ids against a full render of its messages in the
  # chat template (metric episode/render_mismatch): sampled ids that BPE
  # would tokenise differently count, as does a template that drifts.
  env.render_check = "strict"
  return env


def get_ppo_config(smoke: bool) -> ml_collections.ConfigDict:
  """PPO: the smoke preset runs every stage once or twice."""
  ppo = ml_collections.ConfigDict()
  ppo.iterations = 2 if smoke else 200
  ppo.prompts_per_iteration = 2 if smoke else 32
  ppo.samples_per_prompt = 2 if smoke else 8
  ppo.epochs = 1
  ppo.minibatches = 1 if smoke else 4
  ppo.micro_batch_size = 2 if smoke else 4
  # Rows per forward of the log-prob and value passes: like the train
  # step's (no backward, so activations are the smaller part). identity()
  # makes a reference that follows micro_batch_size; the bare get_ref would
  # make the two fields one, so overriding this one would set both.
  ppo.logprob_micro_batch_size = ppo.get_ref("micro_batch_size").identity()
  # 0: rollouts in lockstep, one KV-cache row each; > 0: that many rows,
  # refilled as episodes end (rollout/continuous.py). Measured on 2 CPU
  # cores (benchmarks/rollout_refill_bench.py, 16 episodes of 2-50 turns):
  # 4 refilled rows ran 3.3x faster than 16 in lockstep, idle decode rows
  # 18% vs 72%, for 1.29x the decode steps; where a step costs the same at
  # 4 rows as at 16 (an accelerator) the gain is the KV cache's memory,
  # not yet measured there. Off until it is.
  ppo.rollout_slots = 0
  # 1: an iteration's rollouts are generated while the previous one updates
  # (`benchmarks/overlap_bench.py`); 0 until it is measured on a GPU.
  ppo.max_staleness = 0
  # The critic alone first: its value head starts at zero.
  ppo.critic_warmup_iterations = 0 if smoke else 5
  ppo.skip_actor_on_flat_rewards = not smoke
  ppo.length_bucket = 128 if smoke else 512
  # Pack each micro-batch's trajectories into shared rows: agent episodes of
  # one prompt run from a few turns to hundreds, and padding them all to the
  # longest wastes most of a step (benchmarks/hf_ppo_bench.py).
  ppo.packing = True
  # The KL reference on the devices; True moves it to pinned host memory
  # (7B in float32: 28 GB of device memory freed, for a host-to-device copy
  # of it per iteration).
  ppo.reference_on_host = False
  ppo.eval_every = 2 if smoke else 20
  # Value pre-training (VAPO): the critic regressed on Monte-Carlo returns
  # of the SFT policy's rollouts until its explained variance gains less
  # than 0.01 over 3 rounds; a copied trunk with a zero head starts far
  # from the returns, and its early errors would be the actor's advantages.
  ppo.value_pretrain_iterations = 2 if smoke else 50
  ppo.value_pretrain_patience = 3
  ppo.value_pretrain_min_gain = 0.01
  # Stop (False) or pre-train again (True) when the workdir's pre-trained
  # critic was made with other inputs.
  ppo.value_pretrain_retrain = False
  # DAPO's dynamic sampling (drop groups whose rewards are all equal, draw
  # more prompts, at most this many rounds): off until measured here.
  ppo.dynamic_sampling = False
  ppo.dynamic_sampling_max_rounds = 3
  return ppo
