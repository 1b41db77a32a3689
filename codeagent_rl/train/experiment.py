"""One validated experiment: every config section, the tokenizer and the mesh.

`Experiment.from_config(config)` is where a ConfigDict becomes frozen
dataclasses; every later module reads fields of those, never the dict. A bad
value stops here with a message naming `config.<section>.<field>`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

import jax
import ml_collections

from codeagent_rl.anticheat import config as anticheat_config
from codeagent_rl.anticheat import monitors
from codeagent_rl.envs import code_env
from codeagent_rl.models import chat
from codeagent_rl.models import chat_template
from codeagent_rl.models import hf_import
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.models import transformer
from codeagent_rl.parallel import checkpoint
from codeagent_rl.parallel import mesh as mesh_lib
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.rl import config as rl_config
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.train import config as train_config
from codeagent_rl.train import keys

# Sections of a trainer config and the dataclass that validates each.
_SECTIONS = {
  "model": transformer.TransformerConfig,
  "mesh": mesh_lib.MeshConfig,
  "optim": state_lib.OptimConfig,
  "checkpoint": checkpoint.CheckpointConfig,
  "env": code_env.EnvConfig,
  "data": train_config.DataConfig,
  "sampling": train_config.SamplingConfig,
  "sft": train_config.SFTConfig,
  "ppo": train_config.PPOConfig,
  "eval": train_config.EvalConfig,
  "anticheat": anticheat_config.AntiCheatConfig,
  "monitors": monitors.MonitorConfig,
  "sandbox": sandbox_config.SandboxLimits,
}


# Top-level fields a trainer config may leave out (hf_model_id: the hub
# name of the checkpoint, for the record; critic: `critic.checkpoint_dir`).
_OPTIONAL = ("hf_checkpoint_dir", "hf_model_id", "critic")
# Fields of the optional config.critic section.
_CRITIC_FIELDS = ("checkpoint_dir", "privileged", "privileged_max_tokens")
# What the critic sees besides the trajectory (`critic.privileged`): nothing,
# or the task's hidden tests in front of it (train/critic_inputs.py).
PRIVILEGED = ("none", "tests")
# Fields of config.model that a Hugging Face checkpoint does not fix.
HF_FREE_MODEL_FIELDS = ("dtype", "param_dtype", "remat", "logits_chunk")
# Fields a checkpoint does not fix either, with defaults when left out.
HF_OPTIONAL_MODEL_FIELDS = ("attention", "attention_chunk")


def _hf_checkpoint_dir(config: ml_collections.ConfigDict) -> str | None:
  """`config.hf_checkpoint_dir`, checked to be a directory (or None)."""
  path = config.get("hf_checkpoint_dir")
  if path is None:
    return None
  if not isinstance(path, str) or not os.path.isdir(path):
    raise ValueError(
      f"config.hf_checkpoint_dir={path!r}: not a directory; pass the local"
      " directory of a Hugging Face checkpoint (config.json, *.safetensors,"
      " tokenizer files). Nothing is downloaded."
    )
  return path


def _model(
  section: ml_collections.ConfigDict, hf_dir: str | None
) -> transformer.TransformerConfig:
  """`config.model`, its architecture from the checkpoint when there is one.

  With a checkpoint, the section holds `HF_FREE_MODEL_FIELDS` and may hold
  `HF_OPTIONAL_MODEL_FIELDS`; any other field it names must equal what the
  checkpoint's config.json says.
  """
  fields = dict(section)
  if hf_dir is None:
    if set(fields) <= set(HF_FREE_MODEL_FIELDS + HF_OPTIONAL_MODEL_FIELDS):
      raise ValueError(
        "config.hf_checkpoint_dir is not set; this config takes the model"
        " from a checkpoint: pass --config.hf_checkpoint_dir=DIR (the local"
        " directory of a Hugging Face checkpoint)."
      )
    return transformer.TransformerConfig.from_config(section)
  missing = [f for f in HF_FREE_MODEL_FIELDS if f not in fields]
  if missing:
    raise ValueError(
      f"config.model: missing fields {missing} (the rest comes from"
      f" {hf_dir}/config.json)."
    )
  known = {f.name for f in dataclasses.fields(transformer.TransformerConfig)}
  unknown = sorted(set(fields) - known)
  if unknown:
    raise ValueError(f"config.model: unknown fields {unknown}.")
  try:
    free = HF_FREE_MODEL_FIELDS + HF_OPTIONAL_MODEL_FIELDS
    model = hf_import.config_from_hf(
      hf_import.read_hf_config(hf_dir),
      **{f: fields[f] for f in free if f in fields},
    )
  except (OSError, ValueError) as e:
    raise ValueError(f"config.hf_checkpoint_dir={hf_dir!r}: {e}") from None
  for name, value in fields.items():
    if name not in free and value != getattr(model, name):
      raise ValueError(
        f"config.model.{name}={value!r} but {hf_dir}/config.json gives"
        f" {getattr(model, name)!r}; the checkpoint decides it (drop the"
        " field or fix the checkpoint path)."
      )
  return model


@dataclasses.dataclass(frozen=True)
class PrivilegedCritic:
  """What the critic reads that the actor never does (`config.critic`).

  Attributes:
    mode: "none", or "tests": the task's hidden tests, rendered as text,
      come before the trajectory in the critic's input only (the critic is
      discarded after training; nothing of it reaches the policy).
    max_tokens: the most tokens of that text the critic reads (longer text
      is cut at the end).
  """

  mode: str = "none"
  max_tokens: int = 0

  def __post_init__(self):
    if self.mode not in PRIVILEGED:
      raise ValueError(
        f"config.critic.privileged={self.mode!r}: expected one of {PRIVILEGED}."
      )
    if self.mode != "none" and (
      type(self.max_tokens) is not int or self.max_tokens < 1
    ):
      raise ValueError(
        f"config.critic.privileged_max_tokens={self.max_tokens!r}: must be"
        " an integer >= 1 with critic.privileged="
        f"{self.mode!r}."
      )

  @property
  def enabled(self) -> bool:
    """Whether the critic reads anything besides the trajectory."""
    return self.mode != "none"


def _privileged(
  config: ml_collections.ConfigDict, rl: rl_config.RLConfig
) -> PrivilegedCritic:
  """`config.critic.privileged` (and its token cap), checked with the run."""
  section = config.get("critic")
  if section is None or section.get("privileged") in (None, "none"):
    return PrivilegedCritic()
  out = PrivilegedCritic(
    mode=section.get("privileged"),
    max_tokens=section.get("privileged_max_tokens"),
  )
  if rl.advantage.estimator != "gae":
    raise ValueError(
      f"config.critic.privileged={out.mode!r}: rl.advantage.estimator="
      f"{rl.advantage.estimator!r} trains no critic; use 'gae' or set"
      " critic.privileged='none'."
    )
  if rl.adaptive_truncation.enabled:
    # The stopper reads the critic on rollout prefixes, which carry no
    # privileged text.
    raise ValueError(
      f"config.critic.privileged={out.mode!r} with"
      " rl.adaptive_truncation.enabled: the truncation's critic reads"
      " rollout prefixes only; use one or the other."
    )
  return out


def _critic_checkpoint(
  config: ml_collections.ConfigDict,
  hf_dir: str | None,
  model: transformer.TransformerConfig,
  rl: rl_config.RLConfig,
) -> tuple[str | None, transformer.TransformerConfig | None]:
  """`config.critic.checkpoint_dir` and the critic's model read from it.

  (None, None) when the critic is built like the actor. The critic's
  checkpoint must read the actor's token ids: the same vocabulary in its
  tokenizer.json, and an embedding with a row for each id.
  """
  section = config.get("critic")
  if section is None:
    return None, None
  unknown = sorted(set(section) - set(_CRITIC_FIELDS))
  if unknown:
    raise ValueError(
      f"config.critic: unknown fields {unknown}; expected {_CRITIC_FIELDS}."
    )
  path = section.get("checkpoint_dir")
  if path is None:
    return None, None
  if not isinstance(path, str) or not os.path.isdir(path):
    raise ValueError(
      f"config.critic.checkpoint_dir={path!r}: not a directory; pass the"
      " local directory of a Hugging Face checkpoint (config.json,"
      " *.safetensors, tokenizer.json). Nothing is downloaded."
    )
  if hf_dir is None:
    raise ValueError(
      f"config.critic.checkpoint_dir={path!r} needs config.hf_checkpoint_dir:"
      " the critic reads the actor's token ids, so both come from checkpoints"
      " with the same tokenizer."
    )
  if rl.advantage.estimator != "gae":
    raise ValueError(
      f"config.critic.checkpoint_dir={path!r}: rl.advantage.estimator="
      f"{rl.advantage.estimator!r} trains no critic; unset it or use 'gae'."
    )
  if rl.critic_init != "actor":
    raise ValueError(
      f"config.critic.checkpoint_dir={path!r} starts the critic's trunk from"
      f" that checkpoint, but rl.critic_init={rl.critic_init!r} asks for a"
      " random one; set --config.rl.critic_init=actor (a pretrained trunk)"
      " or unset config.critic.checkpoint_dir."
    )
  try:
    critic = hf_import.config_from_hf(
      hf_import.read_hf_config(path),
      **{
        f: getattr(model, f)
        for f in HF_FREE_MODEL_FIELDS + HF_OPTIONAL_MODEL_FIELDS
      },
    )
    theirs = chat_template.vocabulary(path)
    ours = chat_template.vocabulary(hf_dir)
  except (OSError, ValueError) as e:
    raise ValueError(f"config.critic.checkpoint_dir={path!r}: {e}") from None
  if theirs != ours:
    differ = sorted(
      set(theirs.items()).symmetric_difference(ours.items()),
      key=lambda item: item[1],
    )[:3]
    raise ValueError(
      f"config.critic.checkpoint_dir={path!r}: its tokenizer differs from"
      f" {hf_dir}'s ({len(theirs)} vs {len(ours)} tokens; e.g. {differ});"
      " the critic must read the actor's token ids: pick a checkpoint of the"
      " same model family."
    )
  ids = max(ours.values(), default=-1) + 1
  if critic.vocab_size < ids:
    raise ValueError(
      f"config.critic.checkpoint_dir={path!r}: its embedding has"
      f" {critic.vocab_size} rows, fewer than the tokenizer's {ids} ids."
    )
  return path, critic


class SetupError(ValueError):
  """A run cannot start as configured (settings or the workdir's contents).

  Raised before any work; the message names what is wrong and what to do,
  so `python -m codeagent_rl.main` prints it without a traceback.
  """


@dataclasses.dataclass(frozen=True)
class Experiment:
  """Validated sections of a trainer config (see `configs/tiny.py`)."""

  preset: str
  seed: int
  rl: rl_config.RLConfig
  model: transformer.TransformerConfig
  mesh: mesh_lib.MeshConfig
  optim: state_lib.OptimConfig
  checkpoint: checkpoint.CheckpointConfig
  env: code_env.EnvConfig
  data: train_config.DataConfig
  sampling: train_config.SamplingConfig
  sft: train_config.SFTConfig
  ppo: train_config.PPOConfig
  eval: train_config.EvalConfig
  anticheat: anticheat_config.AntiCheatConfig
  monitors: monitors.MonitorConfig
  sandbox: sandbox_config.SandboxLimits
  # The Hugging Face checkpoint the actor, the KL reference and (with
  # rl.critic_init "actor") the critic's trunk start from; None: the model
  # is initialised at random and trained by SFT first.
  hf_checkpoint_dir: str | None = None
  # `config.critic.checkpoint_dir`: the critic's trunk comes from this
  # checkpoint (another model with the same tokenizer, e.g. a smaller one)
  # and `critic_checkpoint_model` is its architecture; None: the critic is
  # built like the actor.
  critic_checkpoint_dir: str | None = None
  critic_checkpoint_model: transformer.TransformerConfig | None = None
  # What only the critic reads (`config.critic.privileged`).
  privileged: PrivilegedCritic = PrivilegedCritic()

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> Experiment:
    """Validates every section; raises ValueError naming the bad field."""
    expected = set(_SECTIONS) | {"job", "preset", "seed", "rl"}
    unknown = sorted(set(config) - expected - set(_OPTIONAL))
    missing = sorted(expected - set(config))
    if unknown or missing:
      raise ValueError(
        f"config: unknown sections {unknown}, missing sections {missing}."
      )
    if config.job != "train":
      raise ValueError(
        f"config.job={config.job!r}: a training experiment has job 'train'."
      )
    seed = config.seed
    if type(seed) is not int or not 0 <= seed <= keys.MAX_SEED:
      raise ValueError(
        f"config.seed={seed!r}: must be an integer in [0, {keys.MAX_SEED}]."
      )
    hf_dir = _hf_checkpoint_dir(config)
    sections = {
      name: cls_.from_config(config[name])
      if hasattr(cls_, "from_config")
      else train_config.section(cls_, config, name)
      for name, cls_ in _SECTIONS.items()
      if name != "model"
    }
    rl = rl_config.RLConfig.from_config(config.rl)
    model = _model(config.model, hf_dir)
    critic_dir, critic_model = _critic_checkpoint(config, hf_dir, model, rl)
    privileged = _privileged(config, rl)
    exp = cls(
      preset=str(config.preset),
      seed=seed,
      rl=rl,
      model=model,
      hf_checkpoint_dir=hf_dir,
      critic_checkpoint_dir=critic_dir,
      critic_checkpoint_model=critic_model,
      privileged=privileged,
      **sections,
    )
    exp.check()
    return exp

  def check(self) -> None:
    """Cross-section checks (each section is valid on its own)."""
    vocab = self.conversation.vocab_size
    if self.model.vocab_size < vocab:
      raise ValueError(
        f"config.model.vocab_size={self.model.vocab_size}: the tokenizer"
        f" has {vocab} ids."
      )
    cut = self.rl.adaptive_truncation
    first_cut = max(cut.k, cut.min_turns)
    if cut.enabled and first_cut >= self.env.max_turns:
      # The cut is decided after a turn, before the next: after max_turns
      # the episode has ended on its own.
      raise ValueError(
        f"config.rl.adaptive_truncation: k={cut.k} and min_turns="
        f"{cut.min_turns} leave no turn to cut before config.env.max_turns="
        f"{self.env.max_turns} ends the episode; lower them below"
        " max_turns, or raise max_turns."
      )
    if cut.enabled and self.ppo.max_staleness:
      # The stopper reads the critic after every turn; overlapped rollouts
      # run while the update changes (and donates) the critic.
      raise ValueError(
        "config.rl.adaptive_truncation.enabled with config.ppo.max_staleness"
        f"={self.ppo.max_staleness}: the critic that decides the cuts is"
        " being updated while overlapped rollouts run; use one or the"
        " other."
      )
    if self.ppo.dynamic_sampling and (self.ppo.max_staleness or cut.enabled):
      # Extra rounds of rollouts would run while the update changes the
      # actor (overlap), or under a stopper whose records cover one round.
      raise ValueError(
        "config.ppo.dynamic_sampling needs ppo.max_staleness=0 and"
        " rl.adaptive_truncation.enabled=False; turn one of them off."
      )
    data = self.data
    if data.train_tasks is not None and data.demonstrations is None:
      if self.sft.steps:
        raise ValueError(
          f"config.sft.steps={self.sft.steps}: the train tasks come from"
          f" config.data.train_tasks={data.train_tasks!r}, which has no"
          " demonstrations to train on; set --config.sft.steps=0, or name"
          " a plans file in --config.data.demonstrations."
        )

  def check_process_count(self, count: int) -> None:
    """Checks that the run can be split over `count` processes (hosts).

    Each process rolls out an equal share of an iteration's episodes and
    feeds an equal share of every SFT batch (`parallel/distributed.py`).

    Raises:
      SetupError: naming the field that does not split, or a feature that
        needs one process.
    """
    if count == 1:
      return
    rows = self.ppo.rollouts_per_iteration
    if rows % count:
      raise SetupError(
        f"config.ppo.prompts_per_iteration x samples_per_prompt = {rows}"
        f" rollouts per iteration do not split over {count} processes;"
        f" make it a multiple of {count}."
      )
    if self.sft.steps and self.sft.batch_size % count:
      raise SetupError(
        f"config.sft.batch_size={self.sft.batch_size} does not split over"
        f" {count} processes; make it a multiple of {count}."
      )
    if self.rl.adaptive_truncation.enabled:
      # Its stopper reads the critic, on the mesh of all processes, in the
      # middle of each process's own rollouts.
      raise SetupError(
        "config.rl.adaptive_truncation.enabled runs on one process only;"
        f" this run has {count}. Disable it, or run one process."
      )

  @functools.cached_property
  def conversation(self) -> chat.ConversationFormat:
    """How episodes become token ids.

    The checkpoint's tokenizer and chat template when the run starts from
    one (`hf_checkpoint_dir`), else the byte-level protocol of the tiny
    configs.

    Raises:
      SetupError: the checkpoint's tokenizer files or chat template cannot
        be used (the message names the file and the problem).
    """
    if self.hf_checkpoint_dir is None:
      return chat.ByteProtocolFormat(tokenizer_lib.ByteTokenizer())
    try:
      return chat.ChatTemplateFormat.from_checkpoint(self.hf_checkpoint_dir)
    except (OSError, ValueError) as e:
      raise SetupError(f"config.hf_checkpoint_dir: {e}") from None

  @property
  def critic_model(self) -> transformer.TransformerConfig:
    """The critic's architecture: its own checkpoint's, else the actor's."""
    if self.critic_checkpoint_model is not None:
      return self.critic_checkpoint_model
    return self.model

  @property
  def data_seed(self) -> int:
    """The seed of the generated tasks: `data.seed`, else `seed`."""
    return self.seed if self.data.seed is None else self.data.seed

  @property
  def uses_critic(self) -> bool:
    """Whether the estimator needs a critic ("gae")."""
    return self.rl.advantage.estimator == "gae"

  def make_mesh(self) -> tuple[jax.sharding.Mesh, mesh_lib.Rules]:
    """The device mesh and its validated logical-axis rules."""
    return mesh_lib.make_mesh(self.mesh), self.mesh.rules


def to_dict(exp: Experiment) -> dict[str, Any]:
  """A JSON-able view (for the run's `config.json`).

  `Experiment.from_config` of it (with `job` added) gives `exp` again: the
  critic's checkpoint is written as the `critic` section it came from.
  """
  view = dataclasses.asdict(exp)
  del view["critic_checkpoint_model"]
  privileged = view.pop("privileged")
  view["critic"] = {
    "checkpoint_dir": view.pop("critic_checkpoint_dir"),
    "privileged": privileged["mode"],
    "privileged_max_tokens": privileged["max_tokens"],
  }
  return view
