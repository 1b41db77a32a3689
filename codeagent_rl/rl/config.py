"""The `config.rl` section as frozen, self-validating dataclasses.

Defaults live in `configs/common.py` only; this module converts and checks.
A wrong value raises `ValueError` naming the field and the value.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from codeagent_rl import config_utils
from codeagent_rl.rl import advantages
from codeagent_rl.rl import kl
from codeagent_rl.rl import losses

# How the critic's parameters start (see models/transformer.py).
CRITIC_INITS = ("random", "actor")


@dataclasses.dataclass(frozen=True)
class PPOLossConfig:
  """Validated `config.rl.loss` section (see `losses.ppo_policy_loss`)."""

  eps_low: float
  eps_high: float
  dual_clip: float | None
  behaviour_cap: float
  value_clip: float | None
  value_coef: float
  entropy_coef: float
  positive_nll_coef: float
  agg_mode: str
  norm_length: float | None

  def __post_init__(self):
    if not 0.0 < self.eps_low < 1.0:
      raise ValueError(f"rl.loss.eps_low={self.eps_low}: must be in (0, 1).")
    if not self.eps_high > 0.0:
      raise ValueError(f"rl.loss.eps_high={self.eps_high}: must be > 0.")
    if self.dual_clip is not None and self.dual_clip <= 1.0:
      raise ValueError(
        f"rl.loss.dual_clip={self.dual_clip}: must be > 1 or None."
      )
    cap = self.behaviour_cap
    if type(cap) not in (int, float) or not 0.0 < cap < math.inf:
      raise ValueError(
        f"rl.loss.behaviour_cap={cap!r}: must be a finite number > 0."
      )
    if self.value_clip is not None and self.value_clip <= 0.0:
      raise ValueError(
        f"rl.loss.value_clip={self.value_clip}: must be > 0 or None."
      )
    for name in ("value_coef", "entropy_coef", "positive_nll_coef"):
      value = getattr(self, name)
      if type(value) not in (int, float) or not 0.0 <= value < math.inf:
        raise ValueError(
          f"rl.loss.{name}={value!r}: must be a finite number >= 0."
        )
    if self.agg_mode not in losses.AGG_MODES:
      raise ValueError(
        f"rl.loss.agg_mode={self.agg_mode!r}: expected one of"
        f" {losses.AGG_MODES}."
      )
    if self.agg_mode == "seq_mean_token_sum_norm" and (
      self.norm_length is None or self.norm_length <= 0
    ):
      raise ValueError(
        f"rl.loss.norm_length={self.norm_length}: agg_mode"
        " 'seq_mean_token_sum_norm' needs a positive constant (e.g. the"
        " maximum response length)."
      )


@dataclasses.dataclass(frozen=True)
class KLConfig:
  """Validated `config.rl.kl` section (see `kl.py`)."""

  coef: float
  placement: str
  estimator: str

  def __post_init__(self):
    if self.coef < 0.0:
      raise ValueError(f"rl.kl.coef={self.coef}: must be >= 0.")
    if self.placement not in ("reward", "loss"):
      raise ValueError(
        f"rl.kl.placement={self.placement!r}: expected 'reward' or 'loss'."
      )
    if self.estimator not in kl.KL_ESTIMATORS:
      raise ValueError(
        f"rl.kl.estimator={self.estimator!r}: expected one of"
        f" {sorted(kl.KL_ESTIMATORS)}."
      )


def _is_number(value: Any) -> bool:
  """A finite int or float (a bool is not a number here)."""
  return type(value) in (int, float) and math.isfinite(value)


@dataclasses.dataclass(frozen=True)
class AdaptiveTruncationConfig:
  """Validated `config.rl.adaptive_truncation` section.

  See `rollout/truncation.py`: an episode is cut when the critic's values
  after its last `k` turns are all >= `threshold` and within `tolerance` of
  each other, after at least `min_turns` turns; `audit_fraction` of those
  decisions are only recorded, and the episode runs to its end.
  """

  enabled: bool
  threshold: float
  k: int
  tolerance: float
  min_turns: int
  audit_fraction: float

  def __post_init__(self):
    name = "rl.adaptive_truncation"
    if type(self.enabled) is not bool:
      raise ValueError(f"{name}.enabled={self.enabled!r}: must be a bool.")
    if not _is_number(self.threshold):
      raise ValueError(
        f"{name}.threshold={self.threshold!r}: must be a finite number."
      )
    for field in ("k", "min_turns"):
      value = getattr(self, field)
      if type(value) is not int or value < 1:
        raise ValueError(f"{name}.{field}={value!r}: must be an integer >= 1.")
    if not _is_number(self.tolerance) or self.tolerance < 0:
      raise ValueError(
        f"{name}.tolerance={self.tolerance!r}: must be a finite number >= 0."
      )
    audit = self.audit_fraction
    if not _is_number(audit) or not 0 <= audit <= 1:
      raise ValueError(
        f"{name}.audit_fraction={audit!r}: must be a number in [0, 1]."
      )


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """The whole validated `config.rl` section."""

  advantage: advantages.AdvantageConfig
  loss: PPOLossConfig
  kl: KLConfig
  adaptive_truncation: AdaptiveTruncationConfig
  critic_init: str

  def __post_init__(self):
    if self.critic_init not in CRITIC_INITS:
      raise ValueError(
        f"rl.critic_init={self.critic_init!r}: expected one of {CRITIC_INITS}."
      )
    estimator = self.advantage.estimator
    if estimator != "gae" and (
      self.advantage.credit != "token" or self.advantage.lam_length_alpha
    ):
      # Group estimators give one advantage per row: neither a per-turn
      # credit nor a lambda means anything there, and would be ignored.
      raise ValueError(
        f"rl.advantage.credit={self.advantage.credit!r} and"
        f" rl.advantage.lam_length_alpha={self.advantage.lam_length_alpha}"
        f" apply to 'gae' only; rl.advantage.estimator={estimator!r} gives"
        " one advantage per episode: keep credit 'token' and alpha 0."
      )
    if self.adaptive_truncation.enabled and estimator != "gae":
      # A cut episode's return is bootstrapped from the critic's value and
      # the cut itself is the critic's call: both need a critic.
      raise ValueError(
        "rl.adaptive_truncation.enabled=True needs a critic, but"
        f" rl.advantage.estimator={estimator!r} is critic-free; use 'gae'"
        " or set --config.rl.adaptive_truncation.enabled=False."
      )

  @classmethod
  def from_config(cls, section: Any) -> RLConfig:
    """Builds from an `ml_collections.ConfigDict` (or nested dicts).

    Raises:
      ValueError: a field is missing, unknown or has a bad value.
    """
    if "critic_init" not in section:
      raise ValueError("config.rl has no field 'critic_init'.")
    return cls(
      advantage=_build(advantages.AdvantageConfig, section, "advantage"),
      loss=_build(PPOLossConfig, section, "loss"),
      kl=_build(KLConfig, section, "kl"),
      adaptive_truncation=_build(
        AdaptiveTruncationConfig, section, "adaptive_truncation"
      ),
      critic_init=section["critic_init"],
    )


def _build(cls, section: Any, name: str):
  """Instantiates `cls` from `section[name]`, naming stray or missing keys."""
  if name not in section:
    raise ValueError(f"config.rl has no section {name!r}.")
  return config_utils.from_section(cls, section[name], f"rl.{name}")
