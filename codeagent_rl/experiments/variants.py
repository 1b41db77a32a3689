"""Named training recipes the estimator comparison runs side by side.

A variant is an advantage estimator and the config fields that make up the
rest of its recipe (`VARIANTS`). `apply` puts one on a copy of an
experiment config; `experiments.compare` runs each variant from the same
SFT model, so a variant may change RL only: fields of the sections that
decide the SFT model, the tasks or the held-out measurement
(`SHARED_SECTIONS`) are refused.

The plain estimator names ("gae", "grpo", "rloo") are variants without
overrides: the config's own recipe with that estimator.
"""

from __future__ import annotations

from collections.abc import Mapping
import copy
import dataclasses
import types
from typing import Any

import ml_collections

from codeagent_rl.rl import advantages

# Top-level config entries every variant of a comparison shares: the seed
# and the sections that make the SFT model, the tasks, the episodes' rules
# and the held-out evaluation. A variant that changed one would no longer
# start from the SFT model it is copied, or be measured as the others are.
SHARED_SECTIONS = (
  "seed",
  "data",
  "sft",
  "model",
  "env",
  "eval",
  "sampling",
  "anticheat",
)


@dataclasses.dataclass(frozen=True)
class FromConfig:
  """An override value read from the config being run.

  Attributes:
    field: dotted path of the field whose value is taken, e.g.
      "env.max_total_tokens"; read before any override applies.
  """

  field: str


@dataclasses.dataclass(frozen=True)
class Variant:
  """One recipe of the comparison.

  Attributes:
    estimator: `rl.advantage.estimator` (a key of
      `rl.advantages.ADVANTAGE_ESTIMATORS`).
    overrides: dotted config field -> value (or `FromConfig`), set on a copy
      of the config; empty: the config's own recipe.
    description: one line for the tables and `--helpfull`.
  """

  estimator: str
  overrides: Mapping[str, Any] = dataclasses.field(
    default_factory=lambda: types.MappingProxyType({})
  )
  description: str = ""

  def __post_init__(self):
    if self.estimator not in advantages.ADVANTAGE_ESTIMATORS:
      raise ValueError(
        f"Variant.estimator={self.estimator!r}: expected one of"
        f" {tuple(advantages.ADVANTAGE_ESTIMATORS)}."
      )
    for path in self.overrides:
      top = path.split(".", 1)[0]
      if path == "rl.advantage.estimator":
        raise ValueError(
          "Variant.overrides: rl.advantage.estimator is the variant's"
          " `estimator`; set it there."
        )
      if top in SHARED_SECTIONS:
        raise ValueError(
          f"Variant.overrides: {path} is in config.{top}, which every"
          " variant of a comparison shares (SHARED_SECTIONS)."
        )
    # Read-only, so a registry entry cannot be changed by a caller.
    object.__setattr__(
      self, "overrides", types.MappingProxyType(dict(self.overrides))
    )


def _vapo(**more: Any) -> dict[str, Any]:
  """VAPO's settings (arXiv 2504.05118), with `more` changed or added."""
  settings = {
    # Length-adaptive actor lambda, 1 - 1 / (0.05 n).
    "rl.advantage.lam_length_alpha": 0.05,
    # Value-based PPO's decoupled GAE: Monte-Carlo targets for the critic.
    "rl.advantage.lam_critic": 1.0,
    # Value pre-training on the SFT policy's returns before PPO, in place
    # of warm-up iterations that only train the critic.
    "ppo.value_pretrain_iterations": 20,
    "ppo.critic_warmup_iterations": 0,
    # Clip-higher, as DAPO.
    "rl.loss.eps_high": 0.28,
    # NLL on the tokens of solved episodes, weight 0.1.
    "rl.loss.positive_nll_coef": 0.1,
    # VAPO's lambdas as they are: no fall-back to 1 while the critic
    # explains little (this repository's rl.advantage.critic_trust).
    "rl.advantage.critic_trust": "none",
  }
  settings.update(more)
  return settings


VARIANTS: dict[str, Variant] = {
  # The config's own recipe, one per estimator (the comparison's original
  # flag values): rl/advantages.py.
  "gae": Variant("gae", description="PPO with a critic: the config's recipe"),
  "grpo": Variant("grpo", description="GRPO (DeepSeekMath): group z-score"),
  "rloo": Variant(
    "rloo", description="RLOO (Ahmadian 2024): leave-one-out baseline"
  ),
  # Dr. GRPO (arXiv 2503.20783): no std division in the advantage (the
  # estimator) and a loss summed over tokens and divided by one constant,
  # the longest response (the config's token budget), not by each row's
  # length.
  "dr_grpo": Variant(
    "dr_grpo",
    {
      "rl.loss.agg_mode": "seq_mean_token_sum_norm",
      "rl.loss.norm_length": FromConfig("env.max_total_tokens"),
    },
    "Dr. GRPO: no std division, constant length normaliser",
  ),
  # This repository's PPO before the critic recipe (configs/common.py
  # before rl.advantage.lam_critic existed; configs/long_horizon.py's
  # warm-up): GAE lambda 0.95 for the critic's targets too, per-token
  # credit, one warm-up iteration that trains only the critic, no value
  # pre-training.
  "ppo": Variant(
    "gae",
    {
      "rl.advantage.lam_critic": 0.95,
      "rl.advantage.lam_length_alpha": 0.0,
      "rl.advantage.credit": "token",
      "rl.advantage.critic_trust": "none",
      "ppo.value_pretrain_iterations": 0,
      "ppo.critic_warmup_iterations": 1,
    },
    "vanilla PPO: lambda 0.95 for actor and critic, 1 warm-up iteration",
  ),
  "vapo": Variant(
    "gae",
    _vapo(),
    "VAPO: value pre-training, decoupled and length-adaptive GAE",
  ),
  # VAPO with turn-level credit (codeagent_rl/rl/gae.py compute_turn_gae):
  # an MDP step is a turn, so the length-adaptive lambda (made for token
  # steps) is off and the actor's lambda is the usual 0.95 per turn; the
  # actor's lambda falls back towards 1 while the critic explains little
  # (rl.advantage.critic_trust, the repository's guard against the
  # long-horizon collapse).
  "ppo_turn": Variant(
    "gae",
    _vapo(
      **{
        "rl.advantage.credit": "turn",
        "rl.advantage.lam_length_alpha": 0.0,
        "rl.advantage.lam": 0.95,
        "rl.advantage.critic_trust": "explained_variance",
      }
    ),
    "VAPO with turn-level credit and the critic-trust lambda",
  ),
  # VAPO with an asymmetric critic that reads the task's hidden tests
  # (SWEET-RL's privileged critic; train/critic_inputs.py), and the
  # critic-trust lambda.
  "ppo_tests": Variant(
    "gae",
    _vapo(
      **{
        "critic.privileged": "tests",
        "rl.advantage.critic_trust": "explained_variance",
      }
    ),
    "VAPO with a test-aware critic and the critic-trust lambda",
  ),
  # VAPO's settings with the critic-trust lambda: the actor's lambda moves
  # towards 1 by how little of the returns the critic explains.
  "vapo_trust": Variant(
    "gae",
    _vapo(**{"rl.advantage.critic_trust": "explained_variance"}),
    "VAPO with the critic-trust lambda",
  ),
  # GRPO with DAPO's settings (arXiv 2503.14476): dynamic sampling (flat
  # groups dropped, more prompts drawn), clip-higher 0.28, no KL term,
  # token-level loss aggregation.
  "grpo_dapo": Variant(
    "grpo",
    {
      "ppo.dynamic_sampling": True,
      "rl.loss.eps_high": 0.28,
      "rl.kl.coef": 0.0,
      "rl.loss.agg_mode": "token_mean",
    },
    "GRPO with DAPO's dynamic sampling, clip-higher, no KL, token mean",
  ),
}


def check_names(names: list[str], flag: str = "--variants") -> None:
  """Raises ValueError unless `names` are distinct known variants."""
  bad = [n for n in names if n not in VARIANTS]
  if not names or bad or len(set(names)) != len(names):
    what = f"unknown {bad}" if bad else "give distinct names"
    raise ValueError(
      f"{flag}={','.join(names)}: {what}; the known variants are"
      f" {', '.join(VARIANTS)}."
    )


def _section_of(
  config: ml_collections.ConfigDict, path: str, variant: str
) -> tuple[ml_collections.ConfigDict, str]:
  """The section holding the last part of `path`, and that part's name."""
  *parents, leaf = path.split(".")
  section = config
  for i, part in enumerate(parents):
    if not isinstance(section, ml_collections.ConfigDict) or (
      part not in section
    ):
      raise ValueError(
        f"variant {variant!r}: config field {path}: the config has no"
        f" {'.'.join(parents[: i + 1])}."
      )
    section = section[part]
  if not isinstance(section, ml_collections.ConfigDict) or leaf not in section:
    raise ValueError(
      f"variant {variant!r}: config field {path}: the config has no such field."
    )
  return section, leaf


def resolve(
  config: ml_collections.ConfigDict, name: str, variant: Variant | None = None
) -> dict[str, Any]:
  """The overrides of variant `name` with their `FromConfig` values read.

  Args:
    config: the config the variant will be applied to.
    name: the variant's name (looked up in `VARIANTS` unless `variant` is
      given); error messages name it.
    variant: the variant itself, for one outside the registry.

  Raises:
    ValueError: a field the config lacks (the message names the variant and
      the field).
  """
  variant = VARIANTS[name] if variant is None else variant
  out = {}
  for path, value in variant.overrides.items():
    _section_of(config, path, name)
    if isinstance(value, FromConfig):
      section, leaf = _section_of(config, value.field, name)
      value = section[leaf]
    out[path] = value
  return out


def apply(
  config: ml_collections.ConfigDict, name: str, variant: Variant | None = None
) -> ml_collections.ConfigDict:
  """A copy of `config` with variant `name`'s estimator and overrides set.

  Only fields the config has are set (a locked config stays locked); the
  values are checked by the config's types here and by the experiment's
  validation (`train.run.job_from_config`) when the run is built.

  Raises:
    ValueError: a field the config lacks, or a value of the wrong type; the
      message names the variant and the field.
  """
  variant = VARIANTS[name] if variant is None else variant
  values = resolve(config, name, variant)
  config = copy.deepcopy(config)
  for path, value in {
    "rl.advantage.estimator": variant.estimator,
    **values,
  }.items():
    section, leaf = _section_of(config, path, name)
    try:
      setattr(section, leaf, value)
    except (TypeError, ValueError, AttributeError) as e:
      raise ValueError(
        f"variant {name!r}: config field {path}={value!r}: {e}"
      ) from None
  return config
