"""One PPO update of a Qwen-shaped tiny model: 8 devices agree with one.

The model has what Qwen2.5 has and the tiny configs mostly lack: qkv
biases, tied embeddings, fewer key/value than query heads, and a
vocabulary padded past the tokenizer's (512 > 272; the learner masks the
padding). `ppo.Learner.update` runs on a (data=2, fsdp=2, tensor=2) mesh of
the 8 fake CPU devices and on a 1-device mesh, from the same params, on the
same hand-made rollouts; the losses, KL, gradient norms and the updated
params must agree to float32 rounding. Two micro-batches per minibatch, so
gradient accumulation over sharded rows is part of what is compared.
"""

import functools

import jax
import numpy as np

from codeagent_rl.models import transformer
from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import sharding
from codeagent_rl.train import experiment
from codeagent_rl.train import metrics as metrics_lib
from codeagent_rl.train import ppo as ppo_lib
from configs import tiny
from tests.helpers import policies

BATCH = 8  # 2 prompts x 4 samples
LENGTH = 32
PROMPT = 8  # leading tokens that are not trainable
P = jax.sharding.PartitionSpec
QWEN_SHAPED = {
  "vocab_size": 512,
  "num_layers": 2,
  "embed_dim": 64,
  "num_heads": 4,
  "num_kv_heads": 2,
  "head_dim": 16,
  "mlp_dim": 128,
  "qkv_bias": True,
  "tie_embeddings": True,
  # Log-probs from hidden states 16 positions at a time, as the Qwen
  # configs do (512 there).
  "logits_chunk": 16,
}
# float32 sums in another order (sharded matmuls, all-reduces) differ by a
# few ulps; a wrong sharded update differs by ~lr = 1e-4 per param. Scalars
# are O(0.1-1); the absolute part covers those that are 0 up to rounding.
SCALAR_RTOL = 1e-4
SCALAR_ATOL = 1e-6
PARAM_ATOL = 1e-5


def make_experiment():
  config = tiny.get_config("smoke")
  for name, value in QWEN_SHAPED.items():
    config.model[name] = value
  # Raw advantages: whitened ones average to 0, and so would the first
  # policy loss (ratio 1), leaving nothing but rounding to compare.
  config.rl.advantage.whiten = False
  # A second epoch: ratios, clipping and approx. KL away from their start.
  config.ppo.epochs = 2
  config.ppo.minibatches = 1
  config.ppo.micro_batch_size = BATCH // 2
  config.ppo.length_bucket = LENGTH
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 2, 2, 2
  exp = experiment.Experiment.from_config(config)
  assert exp.ppo.rollouts_per_iteration == BATCH
  assert exp.ppo.critic_warmup_iterations == 0
  assert exp.model.vocab_size > exp.conversation.vocab_size
  return exp


@functools.cache
def learners():
  """{"8": learner on the config's 8-device mesh, "1": on one device}."""
  exp = make_experiment()
  mesh8, rules = exp.make_mesh()
  assert dict(mesh8.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
  one = mesh_lib.MeshConfig(data=1, fsdp=1, tensor=1, rules=rules)
  mesh1 = mesh_lib.make_mesh(one, devices=jax.devices()[:1])
  return {
    "8": ppo_lib.Learner(exp, mesh8, rules),
    "1": ppo_lib.Learner(exp, mesh1, rules),
  }


@functools.cache
def host_params():
  """(SFT params, KL reference params) on the host, made once.

  Drawn with NumPy into the actor's abstract params (no init to compile):
  norm scales near 1, every other leaf near 0 at the config's init_std.
  The reference is the SFT params plus noise, so the KL is not zero.
  """
  model_cfg = make_experiment().model
  actor = transformer.Actor(model_cfg)
  ones = jax.ShapeDtypeStruct((1, 1), np.int32)
  abstract = jax.eval_shape(
    lambda t: actor.init(jax.random.key(0), t, t, t > 0), ones
  )
  rng = np.random.default_rng(0)

  def draw(path, x):
    noise = model_cfg.init_std * rng.standard_normal(x.shape)
    is_scale = sharding.path_str(path).endswith("scale")
    return (noise + is_scale).astype(np.float32)

  sft = jax.tree_util.tree_map_with_path(
    draw, sharding.unbox(abstract["params"])
  )
  ref = jax.tree.map(
    lambda x: x + 0.05 * rng.standard_normal(x.shape).astype(np.float32), sft
  )
  return sft, ref


def rollout():
  """A hand-made batch of 8 rollouts of ragged lengths, and their rewards."""
  batch = policies.ragged_rollout(BATCH, LENGTH, PROMPT)
  total = np.asarray([0, 1, 0, 0, 1, 1, 0, 1], np.float32)
  return batch, total


@functools.cache
def update(where):
  """(actor params, critic params, metrics) after one update, on the host."""
  learner = learners()[where]
  sft, ref = host_params()
  actor_sh = learner.shardings[0].params
  states = learner.initial_states(
    jax.device_put(sft, actor_sh), jax.random.key(1)
  )
  learner.ref_params = jax.device_put(ref, actor_sh)
  batch, total = rollout()
  (actor, critic), metrics = learner.update(
    states, batch, total, 0, jax.random.key(3), metrics_lib.PhaseTimer()
  )
  return jax.device_get((actor.params, critic.params)) + (metrics,)


def _check_metrics_agree():
  *_, want = update("1")
  *_, got = update("8")
  assert got.keys() == want.keys()
  for name in ("loss/policy", "loss/critic", "grad_norm/actor"):
    assert name in want, sorted(want)
  assert any(name.startswith("kl") for name in want), sorted(want)
  assert want["policy/actor_trained"] == 1.0
  # The 8-device learner does split its params (here the vocabulary).
  shardings = learners()["8"].shardings[0].params
  assert shardings["trunk"]["embed"]["embedding"].spec == P("tensor", "fsdp")
  for name, value in want.items():
    np.testing.assert_allclose(
      got[name], value, rtol=SCALAR_RTOL, atol=SCALAR_ATOL, err_msg=name
    )


def _check_updated_params_agree(model):
  index = ("actor", "critic").index(model)
  want, got = update("1")[index], update("8")[index]
  for (path, w), g in zip(
    jax.tree_util.tree_leaves_with_path(want),
    jax.tree.leaves(got),
    strict=True,
  ):
    np.testing.assert_allclose(
      g, w, rtol=0, atol=PARAM_ATOL, err_msg=sharding.path_str(path)
    )
  # Both trunks started at the SFT actor's (critic_init "actor"), and moved
  # by far more than the tolerance.
  sft, _ = host_params()
  moved = max(
    float(np.abs(w - s).max())
    for w, s in zip(
      jax.tree.leaves(want["trunk"]), jax.tree.leaves(sft["trunk"]), strict=True
    )
  )
  assert moved > 10 * PARAM_ATOL, moved


def test_an_update_on_8_devices_equals_one_on_one_device():
  # One test, not three: the two updates (a minute of compiling) are cached
  # per process, and pytest-xdist would run them again in each worker.
  _check_metrics_agree()
  for model in ("actor", "critic"):
    _check_updated_params_agree(model)
