"""A critic whose trunk comes from another checkpoint (`critic.checkpoint_dir`).

The actor is a tiny random Qwen2 checkpoint saved by `transformers`; the
critic's checkpoint is a smaller one (half the width, one layer) with the
same tokenizer, as Qwen2.5-Coder 0.5B would be for the 7B. The learner runs
on the 8 fake test devices.
"""

import json
import shutil

import jax
import ml_collections
import numpy as np
import pytest

from codeagent_rl import types
from codeagent_rl.models import hf_import
from codeagent_rl.parallel import checkpoint as ckpt_lib
from codeagent_rl.parallel import transfers
from codeagent_rl.train import experiment
from codeagent_rl.train import metrics as metrics_lib
from codeagent_rl.train import ppo as ppo_lib
from configs import hf as hf_config
from configs import tiny
from tests.helpers import hf_checkpoints

BATCH = 8  # 2 prompts x 4 samples: one row per fake device
LENGTH = 32
PROMPT = 8


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
  """(actor checkpoint, smaller critic checkpoint)."""
  root = tmp_path_factory.mktemp("ckpts")
  actor = hf_checkpoints.save_checkpoint(root / "actor")
  critic = hf_checkpoints.save_checkpoint(
    root / "critic", hidden_size=16, num_layers=1, seed=1
  )
  return actor, critic


def _config(actor_dir, critic_dir):
  config = tiny.get_config("smoke")
  config.unlock()
  config.hf_checkpoint_dir = str(actor_dir)
  config.critic = {
    "checkpoint_dir": None if critic_dir is None else str(critic_dir)
  }
  config.model = {
    "dtype": "float32",
    "param_dtype": "float32",
    "remat": "none",
    "logits_chunk": 0,
  }
  config.sft.steps = 0
  config.ppo.minibatches = 1
  config.ppo.micro_batch_size = BATCH
  config.ppo.length_bucket = LENGTH
  config.optim.weight_decay = 0.0
  return config


def test_the_critic_model_comes_from_its_checkpoint(dirs):
  actor_dir, critic_dir = dirs
  exp = experiment.Experiment.from_config(_config(actor_dir, critic_dir))
  assert exp.critic_checkpoint_dir == str(critic_dir)
  assert (exp.model.embed_dim, exp.model.num_layers) == (32, 2)
  assert (exp.critic_model.embed_dim, exp.critic_model.num_layers) == (16, 1)
  # What config.json records gives the same experiment back (export_hf).
  again = experiment.Experiment.from_config(
    ml_collections.ConfigDict({**experiment.to_dict(exp), "job": "train"})
  )
  assert again == exp
  # Without the section, or with it unset, the critic is the actor's model.
  plain = experiment.Experiment.from_config(_config(actor_dir, None))
  assert plain.critic_model == plain.model
  assert plain.critic_checkpoint_dir is None


def test_configs_hf_takes_a_critic_checkpoint(dirs):
  actor_dir, critic_dir = dirs
  config = hf_config.get_config("smoke")
  config.hf_checkpoint_dir = str(actor_dir)
  config.critic.checkpoint_dir = str(critic_dir)
  exp = experiment.Experiment.from_config(config)
  assert exp.critic_model.num_layers == 1


def _other_tokenizer(path):
  hf_checkpoints.chat_tokenizer(vocab_size=300).save_pretrained(path)


def _edit_config(path, **fields):
  hf_json = json.loads((path / "config.json").read_text())
  hf_json.update(fields)
  (path / "config.json").write_text(json.dumps(hf_json))


@pytest.mark.parametrize(
  "edit,config_edit,match",
  [
    (_other_tokenizer, {}, "its tokenizer differs"),
    (
      lambda p: (p / "tokenizer.json").unlink(),
      {},
      r"critic\.checkpoint_dir=.*tokenizer\.json does not exist",
    ),
    (
      lambda p: _edit_config(p, model_type="gemma"),
      {},
      r"critic\.checkpoint_dir=.*model_type='gemma' is not supported",
    ),
    (
      lambda p: _edit_config(p, vocab_size=64),
      {},
      "its embedding has 64 rows, fewer than",
    ),
    (None, {"rl.critic_init": "random"}, "rl.critic_init='random'"),
    (None, {"rl.advantage.estimator": "grpo"}, "trains no critic"),
    (None, {"hf_checkpoint_dir": None}, "needs config.hf_checkpoint_dir"),
    (None, {"critic.depth": 1}, r"config\.critic: unknown fields \['depth'\]"),
  ],
)
def test_a_critic_checkpoint_that_cannot_serve_is_named(
  dirs, tmp_path, edit, config_edit, match
):
  actor_dir, critic_dir = dirs
  if edit is not None:
    bad = tmp_path / "bad"
    shutil.copytree(critic_dir, bad)
    edit(bad)
    critic_dir = bad
  config = _config(actor_dir, critic_dir)
  for key, value in config_edit.items():
    section, _, field = key.rpartition(".")
    target = config
    for part in filter(None, section.split(".")):
      target = target[part]
    target[field] = value
  if "hf_checkpoint_dir" in config_edit:
    config.model = tiny.get_config("smoke").model
  with pytest.raises(ValueError, match=match):
    experiment.Experiment.from_config(config)


def test_a_missing_critic_directory_is_named(dirs, tmp_path):
  with pytest.raises(
    ValueError, match=r"config\.critic\.checkpoint_dir=.*not a"
  ):
    experiment.Experiment.from_config(_config(dirs[0], tmp_path / "absent"))


def _batch():
  rng = np.random.default_rng(0)
  lengths = rng.integers(LENGTH // 2, LENGTH + 1, size=BATCH)
  pos = np.arange(LENGTH)[None, :]
  valid = pos < lengths[:, None]
  batch = types.TrajectoryBatch(
    tokens=np.where(valid, rng.integers(16, 300, (BATCH, LENGTH)), 0).astype(
      np.int32
    ),
    trainable=valid & (pos >= PROMPT),
    valid=valid,
    length=lengths.astype(np.int32),
    truncated=np.zeros((BATCH,), bool),
    group_id=np.repeat(np.arange(BATCH // 4), 4).astype(np.int32),
  )
  batch.check()
  return batch


def test_the_learner_trains_and_checkpoints_the_smaller_critic(dirs, tmp_path):
  actor_dir, critic_dir = dirs
  exp = experiment.Experiment.from_config(_config(actor_dir, critic_dir))
  mesh, rules = exp.make_mesh()
  learner = ppo_lib.Learner(exp, mesh, rules)
  sft = hf_import.load_params(
    actor_dir, exp.model, {"params": learner.shardings[0].params}
  )["params"]
  learner.ref_params = sft
  actor, critic = learner.initial_states(sft, transfers.key(1))

  want = hf_import.critic_from_hf(critic_dir, exp.critic_model)["params"]
  got = jax.device_get(critic.params)
  jax.tree.map(np.testing.assert_array_equal, got, jax.device_get(want))
  assert not np.any(got["value_head"]["kernel"])  # values start at 0
  assert got["value_head"]["kernel"].shape == (16, 1)
  jax.tree.map(
    np.testing.assert_array_equal,
    jax.device_get(actor.params),
    jax.device_get(sft),
  )

  before = jax.device_get(critic.params)
  total = np.asarray([1, 0, 0, 1, 0, 1, 1, 0], np.float32)
  (actor, critic), scalars = learner.update(
    (actor, critic),
    _batch(),
    total,
    0,
    transfers.key(3),
    metrics_lib.PhaseTimer(),
  )
  assert all(np.isfinite(v) for v in scalars.values())
  after = jax.device_get(critic.params)
  moved = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), after, before)
  assert max(jax.tree.leaves(moved)) > 0
  assert after["value_head"]["kernel"].shape == (16, 1)

  # A resumed run restores the critic of its own shapes.
  with ckpt_lib.Checkpointer(tmp_path / "ckpt", exp.checkpoint) as ckpt:
    ckpt.save(
      ckpt_lib.TrainCheckpoint(
        actor=actor,
        critic=critic,
        step=1,
        rng=transfers.key(0),
        data_position={"iteration": 1},
      ),
      force=True,
    )
  fresh = learner.initial_states(sft, transfers.key(1))
  with ckpt_lib.Checkpointer(tmp_path / "ckpt", exp.checkpoint) as ckpt:
    restored = ckpt.restore_latest(
      actor=fresh[0], critic=fresh[1], rng=transfers.key(0)
    )
  jax.tree.map(
    np.testing.assert_array_equal,
    jax.device_get(restored.critic.params),
    after,
  )
