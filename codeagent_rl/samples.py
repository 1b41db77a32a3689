"""Samples files: what an agent produced for a task, one JSON line each.

  samples = samples.read_samples("samples.jsonl", task_ids)
  line = samples.episode_line(state)        # a finished `code_env` episode

A line is `{"task_id": ..., "completion": "<python source>"}`, optionally
with `"trajectory": [actions]` (each the action text, or a `["run" |
"submit", code]` pair) and `"observations": [str | null, ...]` (what the
agent saw after each action: one per trajectory action, null where there was
none), and `"mode"` (a string naming how it was sampled: the main job's
files say "greedy" or "sampled", and `grade` reports pass@k per mode as
well as over all samples). Other keys are ignored. Blank lines are
skipped. `python -m codeagent_rl.grade` grades such files; the
main job writes its final evaluation's episodes as one
(`eval_final_samples.jsonl`), and `anticheat/corpus/train_classifier.py`
learns from a model's solved ones.
"""

from __future__ import annotations

from collections.abc import Iterable
import dataclasses
import json
import os
from typing import Any

from codeagent_rl import jsonl
from codeagent_rl.anticheat import features


class SampleFormatError(ValueError):
  """A samples file is malformed; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class Sample:
  """One completion to grade.

  Attributes:
    index: position among the samples (0-based).
    line: line number in the file (1-based), for messages.
    task_id: the task it answers.
    completion: Python source.
    trajectory: the actions that led to it, if given.
    observations: per trajectory action, what the agent saw after it (None
      where nothing), if given.
    mode: how it was sampled (e.g. "greedy"), if given.
  """

  index: int
  line: int
  task_id: str
  completion: str
  trajectory: tuple | None = None
  observations: tuple[str | None, ...] | None = None
  mode: str | None = None

  def actions_and_observations(self) -> tuple[list, list | None]:
    """(actions, observations) ending with the completion as the submit.

    The observations are None when the sample gives none; an appended
    submit gets a None observation (a submit shows the agent nothing).
    """
    actions = list(self.trajectory or ())
    observations = None
    if self.observations is not None:
      observations = list(self.observations)
    if not actions or features.normalise_action(actions[-1])[0] != "submit":
      actions.append(("submit", self.completion))
      if observations is not None:
        observations.append(None)
    return actions, observations


def read_samples(
  path: str | os.PathLike, task_ids: Iterable[str]
) -> list[Sample]:
  """Reads and validates a samples file.

  Args:
    path: the JSONL file.
    task_ids: the known tasks.

  Returns:
    The samples in file order.

  Raises:
    SampleFormatError: naming the file and line of the first problem.
    OSError: the file cannot be read.
  """
  known = set(task_ids)
  samples = []
  for line in jsonl.read(path, SampleFormatError):
    obj, where = line.value, line.where
    if not isinstance(obj, dict):
      raise SampleFormatError(f"{where}: a sample must be a JSON object.")
    task_id = obj.get("task_id")
    if not isinstance(task_id, str):
      raise SampleFormatError(f"{where}: task_id: missing or not a string.")
    if task_id not in known:
      raise SampleFormatError(
        f"{where}: task_id: {task_id!r} is not in the task file."
      )
    completion = obj.get("completion")
    if not isinstance(completion, str):
      raise SampleFormatError(
        f"{where}: completion: missing or not a string of Python source."
      )
    trajectory = obj.get("trajectory")
    if trajectory is not None and not isinstance(trajectory, list):
      raise SampleFormatError(f"{where}: trajectory: must be a list.")
    for i, action in enumerate(trajectory or ()):
      try:
        features.normalise_action(action)
      except ValueError as e:
        raise SampleFormatError(f"{where}: trajectory[{i}]: {e}") from None
    observations = _observations(obj, len(trajectory or ()), where)
    mode = obj.get("mode")
    if mode is not None and (not isinstance(mode, str) or not mode):
      raise SampleFormatError(
        f'{where}: mode: must be a non-empty string (e.g. "greedy") or'
        " left out."
      )
    samples.append(
      Sample(
        index=len(samples),
        line=line.number,
        task_id=task_id,
        completion=completion,
        trajectory=None if trajectory is None else tuple(trajectory),
        observations=observations,
        mode=mode,
      )
    )
  return samples


def _observations(
  obj: dict, num_actions: int, where: str
) -> tuple[str | None, ...] | None:
  """A sample's validated `observations`, or None when it has none."""
  observations = obj.get("observations")
  if observations is None:
    return None
  if not isinstance(observations, list):
    raise SampleFormatError(
      f"{where}: observations: must be a list of strings or nulls."
    )
  if len(observations) != num_actions:
    raise SampleFormatError(
      f"{where}: observations: {len(observations)} items but the trajectory"
      f" has {num_actions} actions; give one (a string, or null) per action."
    )
  for i, item in enumerate(observations):
    if item is not None and not isinstance(item, str):
      raise SampleFormatError(
        f"{where}: observations[{i}]: must be a string or null, not"
        f" {type(item).__name__}."
      )
  return tuple(observations)


def episode_line(state: Any, **extra: Any) -> dict:
  """The samples line of a finished `code_env.EpisodeState`.

  Args:
    state: the episode: its task, turns (each action exactly as the agent
      wrote it, and the observation it got) and final code ("" when it
      never submitted).
    **extra: more keys for the line (e.g. mode="greedy").

  Returns:
    A JSON-safe dict that `read_samples` reads back.
  """
  return {
    "task_id": state.task.task_id,
    "completion": state.final_code or "",
    "trajectory": [t.action_text for t in state.turns],
    "observations": [
      None if t.observation is None else t.observation.body for t in state.turns
    ],
    **extra,
  }


def write_samples(path: str | os.PathLike, lines: Iterable[dict]) -> None:
  """Writes samples lines as JSONL (whole, or not at all)."""
  tmp = f"{os.fspath(path)}.tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    for line in lines:
      f.write(json.dumps(line) + "\n")
  os.replace(tmp, path)
