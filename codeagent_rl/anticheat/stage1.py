"""Stage 1 of the anti-cheat: rule flags and a classifier over features.

Pure JAX (arrays in, arrays out; jittable and vmappable). Bind the config
with `functools.partial` before `jax.jit`:

  apply = jax.jit(functools.partial(stage1.stage1, cfg=cfg))
  rewards = apply(rewards, features_bn, params)

- **Rules**: `stage1_flags[b, f]` is feature `names.FLAG_FEATURE[f]`
  > 0.5 (the host computed each flag's feature; see features.py).
- **Classifier**: `stage1_score = sigmoid(((x - mean) / scale) . w + b)`, a
  logistic regression over the standardised features (`Stage1Params`,
  trained by corpus/train_classifier.py; runtime features have weight 0,
  so the score does not change with execution).
- **Reward update**: a trajectory is rejected when an enforced flag is
  raised, or (`cfg.classifier`) its score reaches `cfg.classifier_threshold`;
  its total becomes 0 ("zero") or `cfg.stage1_penalty` ("penalty").

`should_skip` is the same decision before execution, for the environment's
`pre_submit` hook (runtime flags are all 0 then).
"""

from __future__ import annotations

from typing import Any

import chex
from flax import struct
import jax
import jax.numpy as jnp
import numpy as np

from codeagent_rl import types
from codeagent_rl.anticheat import config as config_lib
from codeagent_rl.anticheat import names


@struct.dataclass
class Stage1Params:
  """Logistic-regression parameters over `names.FEATURE_NAMES`.

  Attributes:
    weights: [N] float32 weights of the standardised features.
    bias: [] float32.
    mean: [N] float32 feature means of the training corpus.
    scale: [N] float32 feature scales (std, at least a small floor).
  """

  weights: jax.Array
  bias: jax.Array
  mean: jax.Array
  scale: jax.Array

  @classmethod
  def zeros(cls, num_features: int = names.NUM_FEATURES) -> Stage1Params:
    """Parameters whose score is 0.5 everywhere (host arrays)."""
    return cls(
      weights=np.zeros((num_features,), np.float32),
      bias=np.zeros((), np.float32),
      mean=np.zeros((num_features,), np.float32),
      scale=np.ones((num_features,), np.float32),
    )

  def to_json(self) -> dict:
    """JSON-safe dict keyed by feature name (see `from_json`)."""
    return {
      "bias": float(jax.device_get(self.bias)),
      "features": {
        name: {
          "weight": float(w),
          "mean": float(m),
          "scale": float(s),
        }
        for name, w, m, s in zip(
          names.FEATURE_NAMES,
          *jax.device_get((self.weights, self.mean, self.scale)),
          strict=True,
        )
      },
    }

  @classmethod
  def from_json(cls, data: dict) -> Stage1Params:
    """Inverse of `to_json` (host arrays).

    Raises:
      ValueError: the features differ from `names.FEATURE_NAMES` (the
        weights are stale: retrain with corpus/train_classifier.py) or a
        value is missing or not finite.
    """
    feature_names = names.FEATURE_NAMES
    table = data.get("features") if isinstance(data, dict) else None
    if not isinstance(table, dict) or list(table) != list(feature_names):
      have = list(table) if isinstance(table, dict) else table
      missing = [
        n
        for n in feature_names
        if not isinstance(table, dict) or n not in table
      ]
      raise ValueError(
        "stage-1 weights: features do not match names.FEATURE_NAMES"
        f" (missing {missing}, file has {have!r:.200}); regenerate them with"
        " the command in codeagent_rl/anticheat/corpus/train_classifier.py."
      )
    try:
      columns = {
        key: np.asarray(
          [float(table[n][key]) for n in feature_names], np.float32
        )
        for key in ("weight", "mean", "scale")
      }
      bias = np.float32(float(data["bias"]))
    except (KeyError, TypeError, ValueError) as e:
      raise ValueError(f"stage-1 weights: malformed entry: {e!r}.") from None
    values = [*columns.values(), np.atleast_1d(bias)]
    if not all(np.isfinite(v).all() for v in values):
      raise ValueError("stage-1 weights: a value is not finite.")
    if (columns["scale"] <= 0).any():
      raise ValueError("stage-1 weights: every scale must be > 0.")
    return cls(
      weights=columns["weight"],
      bias=np.asarray(bias),
      mean=columns["mean"],
      scale=columns["scale"],
    )


def score(features_bn: jax.Array, params: Stage1Params) -> jax.Array:
  """Classifier probability of cheating.

  Args:
    features_bn: [..., N] feature vectors.
    params: the classifier.

  Returns:
    [...] float32 probabilities.
  """
  x = (features_bn.astype(jnp.float32) - params.mean) / params.scale
  return jax.nn.sigmoid(
    jnp.einsum("...n,n->...", x, params.weights) + params.bias
  )


def rule_flags(features_bn: jax.Array) -> jax.Array:
  """[..., N] features -> [..., F] bool rule flags (`names.FLAG_NAMES`)."""
  index = jnp.asarray(names.FLAG_FEATURE, jnp.int32)
  return jnp.take(features_bn, index, axis=-1) > 0.5


def rejected(
  flags_bf: jax.Array, score_b: jax.Array, cfg: config_lib.AntiCheatConfig
) -> jax.Array:
  """Whether stage 1 rejects: an enforced flag, or a score over threshold.

  Args:
    flags_bf: [..., F] bool rule flags.
    score_b: [...] classifier scores.
    cfg: the anti-cheat config.

  Returns:
    [...] bool.
  """
  mask = jnp.asarray(cfg.enforced_mask, bool)
  by_rule = jnp.any(flags_bf & mask, axis=-1)
  by_score = (score_b >= cfg.classifier_threshold) & cfg.classifier
  return by_rule | by_score


def stage1(
  rewards: types.Rewards,
  features_bn: jax.Array,
  params: Stage1Params,
  cfg: config_lib.AntiCheatConfig,
) -> types.Rewards:
  """Applies stage 1 to a batch (or, under vmap, one trajectory).

  Args:
    rewards: [B] rewards (stage1_flags [B, F]).
    features_bn: [B, N] feature vectors (`features.extract`).
    params: the classifier.
    cfg: the anti-cheat config (bind it with functools.partial).

  Returns:
    `rewards` with `stage1_flags`, `stage1_score` set and the total of
    rejected trajectories replaced by 0 or `cfg.stage1_penalty`.
  """
  chex.assert_axis_dimension(features_bn, -1, names.NUM_FEATURES)
  flags = rule_flags(features_bn)
  chex.assert_equal_shape([flags, rewards.stage1_flags])
  p = score(features_bn, params)
  reject = rejected(flags, p, cfg)
  value = 0.0 if cfg.stage1_action == "zero" else cfg.stage1_penalty
  total = jnp.where(reject, jnp.float32(value), rewards.total)
  return rewards.replace(
    stage1_flags=flags,
    stage1_score=p.astype(jnp.float32),
    total=total.astype(jnp.float32),
  )


def should_skip(
  features_bn: jax.Array,
  params: Stage1Params,
  cfg: config_lib.AntiCheatConfig,
) -> jax.Array:
  """The pre-execution gate: True where the submission should not run.

  Args:
    features_bn: [..., N] features computed before execution.
    params: the classifier.
    cfg: the anti-cheat config.

  Returns:
    [...] bool; all False unless `cfg.skip_flagged`.
  """
  reject = rejected(rule_flags(features_bn), score(features_bn, params), cfg)
  return reject & cfg.skip_flagged


def summary(
  rewards: types.Rewards, cfg: config_lib.AntiCheatConfig
) -> dict[str, Any]:
  """Batch metrics: share rejected by stage 1, per-flag rates, mean score."""
  flags = rewards.stage1_flags
  reject = rejected(flags, rewards.stage1_score, cfg)
  out = {
    "anticheat/flag_rate": jnp.mean(reject.astype(jnp.float32)),
    "anticheat/score_mean": jnp.mean(rewards.stage1_score),
  }
  for i, name in enumerate(names.FLAG_NAMES):
    out[f"anticheat/flag/{name}"] = jnp.mean(flags[..., i].astype(jnp.float32))
  return out
