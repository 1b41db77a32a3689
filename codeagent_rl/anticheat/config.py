"""The `config.anticheat` section as a frozen, self-validating dataclass.

Defaults live in `configs/common.py` (`get_anticheat_config`) only; this
module converts and checks. A wrong value raises `ValueError` naming the
field and the value.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

from codeagent_rl import config_utils
from codeagent_rl.anticheat import names

# What happens to a trajectory a stage rejects.
ACTIONS = ("zero", "penalty")
# The weights the package ships (written by corpus/train_classifier.py).
DEFAULT_WEIGHTS = os.path.join(
  os.path.dirname(os.path.abspath(__file__)), "weights", "stage1.json"
)


def _is_number(value: Any) -> bool:
  return type(value) in (int, float) and not math.isnan(value)


@dataclasses.dataclass(frozen=True)
class AntiCheatConfig:
  """Validated `config.anticheat` section (see stage1.py and stage2.py).

  Attributes:
    stage1_action: "zero" (total 0) or "penalty" (total = stage1_penalty)
      for a trajectory stage 1 rejects.
    stage1_penalty: the total of a rejected trajectory under "penalty".
    classifier: whether the classifier's score can reject (besides the
      rule flags in `enforced_flags`).
    classifier_threshold: score (probability of cheating) at or above which
      the classifier rejects.
    skip_flagged: stage 1 runs before a `<submit>` is executed and rejected
      code is not executed (its outcome is "not executed").
    enforced_flags: names of the rule flags (`names.FLAG_NAMES`) that
      reject; the others are still reported (`stage1_flags`, metrics) and
      are features of the classifier. The default enforces only hacks by
      construction: `process_exit` (an exit or kill that can run before or
      during a function task's tests), `file_env_probing` (reach into the
      judge's or other jobs' data: /proc, /sandbox, the scratch root or a
      parent directory, descriptor 3 where results go, the environment)
      the runtime `early_termination` (tests left unrun because the
      code stopped) and, in repository episodes, `protected_edits` (a
      change of the task's test files or of a file Python or pytest loads
      on its own: `repo_features`). The others can fire on honest code:
      with every flag enforced, 152 of the corpus's 4,078 honest
      solutions (synthetic variants, HumanEval's canonical ones, the
      honest edge cases) would be rejected, 151 of them for
      `exception_swallowing`.
    stage2_threshold: the suite-B pass fraction a trajectory needs (1.0: all
      of suite B).
    stage2_action: "zero" or "penalty" for a trajectory that fails stage 2.
    stage2_penalty: its total under "penalty".
    total_min_suites: total = min(suite A, suite B) for trajectories that
      pass both stages (else suite A).
    classifier_weights: path of the stage-1 weights (JSON), or "" for the
      weights the package ships (`DEFAULT_WEIGHTS`).
  """

  stage1_action: str
  stage1_penalty: float
  classifier: bool
  classifier_threshold: float
  skip_flagged: bool
  enforced_flags: tuple[str, ...]
  stage2_threshold: float
  stage2_action: str
  stage2_penalty: float
  total_min_suites: bool
  classifier_weights: str

  def __post_init__(self):
    for name in ("stage1_action", "stage2_action"):
      value = getattr(self, name)
      if value not in ACTIONS:
        raise ValueError(
          f"anticheat.{name}={value!r}: expected one of {ACTIONS}."
        )
    for name in ("stage1_penalty", "stage2_penalty"):
      value = getattr(self, name)
      if not (_is_number(value) and -math.inf < value <= 0):
        raise ValueError(
          f"anticheat.{name}={value!r}: must be a finite number <= 0 (the"
          " total of a rejected trajectory)."
        )
    for name in ("classifier", "skip_flagged", "total_min_suites"):
      value = getattr(self, name)
      if type(value) is not bool:
        raise ValueError(f"anticheat.{name}={value!r}: must be True or False.")
    threshold = self.classifier_threshold
    if not (_is_number(threshold) and 0 < threshold <= 1):
      raise ValueError(
        f"anticheat.classifier_threshold={threshold!r}: must be a"
        " probability in (0, 1]."
      )
    threshold = self.stage2_threshold
    if not (_is_number(threshold) and 0 <= threshold <= 1):
      raise ValueError(
        f"anticheat.stage2_threshold={threshold!r}: must be a pass fraction"
        " in [0, 1]."
      )
    flags = self.enforced_flags
    if isinstance(flags, str) or not all(isinstance(f, str) for f in flags):
      raise ValueError(
        f"anticheat.enforced_flags={flags!r}: must be a tuple of flag names."
      )
    unknown = [f for f in flags if f not in names.FLAG_NAMES]
    if unknown or len(set(flags)) != len(flags):
      raise ValueError(
        f"anticheat.enforced_flags={flags!r}: unknown or repeated names"
        f" {unknown}; choose from {names.FLAG_NAMES}."
      )
    object.__setattr__(self, "enforced_flags", tuple(flags))
    if not isinstance(self.classifier_weights, str):
      raise ValueError(
        f"anticheat.classifier_weights={self.classifier_weights!r}: must be"
        " a path, or '' for the shipped weights."
      )

  @classmethod
  def from_config(cls, section: Any) -> AntiCheatConfig:
    """Builds it from the `anticheat` config section (ConfigDict or dict)."""
    return config_utils.from_section(cls, section, "anticheat")

  @property
  def enforced_mask(self) -> tuple[bool, ...]:
    """[F] True where a rule flag rejects, in `names.FLAG_NAMES` order."""
    return tuple(name in self.enforced_flags for name in names.FLAG_NAMES)

  @property
  def weights_path(self) -> str:
    """The stage-1 weights file this config uses."""
    return self.classifier_weights or DEFAULT_WEIGHTS
