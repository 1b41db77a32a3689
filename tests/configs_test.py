"""Every file in configs/ loads, and each of its sections validates."""

import copy
import importlib
import pathlib

import ml_collections
import pytest

from codeagent_rl.models import tokenizer
from codeagent_rl.models import transformer
from codeagent_rl.parallel import checkpoint
from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import state
from codeagent_rl.rl import config as rl_config
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.train import experiment

CONFIG_DIR = pathlib.Path(__file__).resolve().parents[1] / "configs"
EXPERIMENTS = sorted(
  p.stem for p in CONFIG_DIR.glob("*.py") if "def get_config" in p.read_text()
)
PRESETS = {"tiny": [None, "smoke"], "hf": [None, "smoke"]}
# Optional sections and the frozen dataclass that validates each.
SECTIONS = {
  "model": transformer.TransformerConfig,
  "mesh": mesh_lib.MeshConfig,
  "optim": state.OptimConfig,
  "checkpoint": checkpoint.CheckpointConfig,
  "sandbox": sandbox_config.SandboxLimits,
}


def test_there_are_experiment_configs():
  assert "tiny" in EXPERIMENTS


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_has_the_training_sections(name):
  config = importlib.import_module(f"configs.{name}").get_config()
  for section in ("rl", "model", "mesh", "optim", "checkpoint", "sandbox"):
    assert section in config, f"configs/{name}.py has no {section!r}"


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_config_loads_and_validates(name):
  module = importlib.import_module(f"configs.{name}")
  for arg in PRESETS.get(name, [None]):
    config = module.get_config(arg)
    rl = rl_config.RLConfig.from_config(config.rl)
    assert rl.advantage.estimator in ("gae", "grpo", "dr_grpo", "rloo")
    for section, cls in SECTIONS.items():
      if section == "model" and set(config.model) <= set(
        experiment.HF_FREE_MODEL_FIELDS + experiment.HF_OPTIONAL_MODEL_FIELDS
      ):
        continue  # the architecture comes from the checkpoint's config.json
      if section in config:
        assert isinstance(cls.from_config(config[section]), cls)
    with pytest.raises(AttributeError):
      config.not_a_field = 1  # configs are locked


# Presets of configs/tiny.py, alone and combined (module docstring there).
TINY_PRESETS = [
  None,
  "smoke",
  "algo=grpo",
  "algo=rloo",
  "algo=dr_grpo",
  "smoke,algo=grpo",
  "seed=1",
  "smoke,seed=2,algo=rloo",
]


@pytest.mark.parametrize("arg", TINY_PRESETS)
def test_tiny_validates_as_a_training_experiment(arg):
  from configs import tiny

  exp = experiment.Experiment.from_config(tiny.get_config(arg))
  parts = dict(p.split("=") for p in (arg or "").split(",") if "=" in p)
  assert exp.rl.advantage.estimator == parts.get("algo", "gae")
  assert exp.uses_critic == (exp.rl.advantage.estimator == "gae")
  assert exp.seed == int(parts.get("seed", 0))
  assert exp.preset == (arg or "default")
  smoke = "smoke" in (arg or "")
  assert (exp.ppo.iterations < 10) == smoke
  # Every trajectory shape fits the model's context budget.
  assert exp.ppo.length_bucket <= exp.env.max_total_tokens


def test_unknown_preset_is_rejected():
  from configs import tiny

  with pytest.raises(ValueError, match="unknown preset 'huge'"):
    tiny.get_config("huge")


@pytest.mark.parametrize(
  "section,field,value,match",
  [
    ("loss", "eps_low", 1.5, "rl.loss.eps_low=1.5"),
    ("loss", "agg_mode", "mean", "rl.loss.agg_mode='mean'"),
    ("loss", "dual_clip", 0.5, "rl.loss.dual_clip=0.5"),
    ("kl", "placement", "logits", "rl.kl.placement='logits'"),
    ("kl", "estimator", "k9", "rl.kl.estimator='k9'"),
    ("kl", "coef", -1.0, "rl.kl.coef=-1.0"),
    ("advantage", "estimator", "ppo", "advantage.estimator='ppo'"),
  ],
)
def test_bad_values_name_the_field(section, field, value, match):
  from configs import common

  rl = common.get_rl_config()
  rl[section][field] = value
  with pytest.raises(ValueError, match=match):
    rl_config.RLConfig.from_config(rl)


def test_critic_init_is_validated():
  from configs import common

  rl = common.get_rl_config()
  rl.critic_init = "copy"
  with pytest.raises(ValueError, match="rl.critic_init='copy'"):
    rl_config.RLConfig.from_config(rl)
  section = common.get_rl_config().to_dict()
  del section["critic_init"]
  with pytest.raises(ValueError, match="no field 'critic_init'"):
    rl_config.RLConfig.from_config(section)


def test_sum_norm_mode_needs_length():
  from configs import common

  rl = common.get_rl_config()
  rl.loss.agg_mode = "seq_mean_token_sum_norm"
  with pytest.raises(ValueError, match="rl.loss.norm_length=None"):
    rl_config.RLConfig.from_config(rl)
  rl.loss.norm_length = 512.0
  assert rl_config.RLConfig.from_config(rl).loss.norm_length == 512.0


def test_stray_and_missing_fields_are_named():
  from configs import common

  rl = common.get_rl_config().to_dict()
  rl["kl"]["coeff"] = 0.1
  del rl["kl"]["coef"]
  with pytest.raises(
    ValueError, match=r"unknown fields \['coeff'\].*\['coef'\]"
  ):
    rl_config.RLConfig.from_config(rl)


@pytest.mark.parametrize("arg", PRESETS["tiny"])
def test_tiny_model_covers_the_byte_tokenizer(arg):
  from configs import tiny

  model = transformer.TransformerConfig.from_config(tiny.get_config(arg).model)
  assert model.vocab_size >= tokenizer.ByteTokenizer().vocab_size
  assert model.vocab_size % 128 == 0
  # 0.3-3M parameters: the default is 0.39M (configs/tiny.py says why).
  assert 300_000 <= model.num_params() <= 3_000_000 or arg == "smoke"


def test_critic_lr_follows_actor_lr_until_set():
  from configs import common

  optim = common.get_optim_config()
  optim.actor_lr = 2e-6
  assert optim.critic_lr == pytest.approx(1e-5)
  optim.critic_lr = 3e-6
  optim.actor_lr = 1e-6
  assert optim.critic_lr == 3e-6


@pytest.mark.parametrize(
  "section,field,value,match",
  [
    ("mesh", "fsdp", 0, "mesh.fsdp=0"),
    ("mesh", "tensor", -1, r"at most one axis .*\['data', 'tensor'\]"),
    ("mesh", "rules", (("embed", "model"),), "unknown mesh axis 'model'"),
    ("mesh", "rules", (("a", None), ("a", "data")), "'a' has more than one"),
    ("optim", "b2", 1.0, "optim.b2=1.0"),
    ("optim", "grad_clip_norm", 0.0, "optim.grad_clip_norm=0.0"),
    ("optim", "warmup_steps", -1, "optim.warmup_steps=-1"),
    ("optim", "critic_lr", 0.0, "optim.critic_lr=0.0"),
  ],
)
def test_bad_mesh_and_optim_values_name_the_field(section, field, value, match):
  from configs import common

  cfg = {"mesh": common.get_mesh_config, "optim": common.get_optim_config}
  values = cfg[section]().to_dict()
  values[field] = value
  with pytest.raises(ValueError, match=match):
    SECTIONS[section].from_config(values)


@pytest.mark.parametrize("section", ["mesh", "optim"])
def test_stray_mesh_and_optim_fields_are_named(section):
  from configs import common

  cfg = {"mesh": common.get_mesh_config, "optim": common.get_optim_config}
  values = cfg[section]().to_dict()
  values["extra"] = 1
  with pytest.raises(ValueError, match=rf"config.{section}: unknown .*extra"):
    SECTIONS[section].from_config(values)


def _untyped_nones(config, prefix=""):
  """Dotted names of the None fields that have no type.

  The command line cannot set them: ml_collections refuses to override a
  field whose type is NoneType.
  """
  out = []
  for key in config.keys():
    value = config[key]
    if isinstance(value, ml_collections.ConfigDict):
      out += _untyped_nones(value, f"{prefix}{key}.")
    elif value is None:
      ref = config._fields[key]  # noqa: SLF001 (the field's declared type)
      if not isinstance(ref, ml_collections.FieldReference) or (
        ref.get_type() is None
      ):
        out.append(prefix + key)
  return out


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_unset_field_can_be_set_from_the_command_line(name):
  """An unset (None) field is a typed placeholder, as --config.x=V needs."""
  module = importlib.import_module(f"configs.{name}")
  for preset in PRESETS.get(name, [None]):
    config = module.get_config(preset)
    assert _untyped_nones(config) == [], f"configs/{name}.py:{preset}"


def _leaves(config, prefix=""):
  """{dotted name: (its ConfigDict, key)} for every non-section field."""
  out = {}
  for key in config.keys():
    value = config[key]
    if isinstance(value, ml_collections.ConfigDict):
      out.update(_leaves(value, f"{prefix}{key}."))
    else:
      out[prefix + key] = (config, key)
  return out


def _pointees(ref):
  """What a FieldReference reads: the value it points at and its ops' args."""
  ops = ref._ops  # noqa: SLF001 (how the reference computes its value)
  return [ref._value] + [a for op in ops for a in op.args]  # noqa: SLF001


def _computed_from(field, source):
  """Whether FieldReference `field` computes its value from `source`."""
  if not isinstance(field, ml_collections.FieldReference):
    return False
  stack = _pointees(field)
  while stack:
    ref = stack.pop()
    if ref is source:
      return True
    if isinstance(ref, ml_collections.FieldReference):
      stack += _pointees(ref)
  return False


def _other_value(value):
  if isinstance(value, bool):
    return not value
  if isinstance(value, int):
    return value + 3
  return value * 1.7 + 0.1


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_overriding_a_field_changes_only_it_and_what_is_computed_from_it(name):
  """--config.a=V must not move field b unless b is derived from a.

  Two fields that hold one FieldReference are aliases: setting either sets
  both, so overriding a field that merely defaults to another's value
  silently overrode the other as well.
  """
  module = importlib.import_module(f"configs.{name}")
  for preset in PRESETS.get(name, [None]):
    base = module.get_config(preset)
    before = {p: c[k] for p, (c, k) in _leaves(base).items()}
    for path, value in before.items():
      if not isinstance(value, (bool, int, float)):
        continue
      config = copy.deepcopy(base)
      leaves = _leaves(config)
      parent, key = leaves[path]
      source = parent._fields[key]  # noqa: SLF001
      setattr(parent, key, _other_value(value))
      for other, (c, k) in leaves.items():
        if other == path or c[k] == before[other]:
          continue
        field = c._fields[k]  # noqa: SLF001
        assert field is not source and _computed_from(field, source), (
          f"configs/{name}.py:{preset}: setting {path} changed {other}"
        )
