"""Converting config sections into frozen, self-validating dataclasses."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

_T = TypeVar("_T")


def from_section(cls: type[_T], section: Any, name: str) -> _T:
  """Builds dataclass `cls` from a ConfigDict or dict section.

  Args:
    cls: a dataclass whose `__post_init__` validates the values.
    section: the config section (`ml_collections.ConfigDict` or mapping).
    name: the section's path for messages, e.g. "optim" or "rl.kl".

  Returns:
    `cls(**section)`.

  Raises:
    ValueError: naming unknown and missing fields (and, from `cls`, any bad
      value).
  """
  fields = dict(section)
  expected = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(fields) - expected)
  missing = sorted(expected - set(fields))
  if unknown or missing:
    raise ValueError(
      f"config.{name}: unknown fields {unknown}, missing fields {missing}."
    )
  return cls(**fields)
