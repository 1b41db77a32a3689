"""Samples files: an episode written as a line reads back as it was."""

import json

import pytest

from codeagent_rl import samples
from codeagent_rl.envs import code_env
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.sandbox import harness
from tests.helpers import envs

TASK = envs.add_task(hidden=[(2, 2)], heldout=[(5, 7)])


def test_episode_lines_read_back(tmp_path):
  wrong = "def add(a, b):\n  return a - b\n"
  budgets = envs.budgets(max_turns=3)
  config = sandbox_config.SandboxConfig(backend="process", pool_size=1)
  with harness.SandboxPool(config) as pool:
    env = code_env.CodeEnv(pool, tokenizer_lib.ByteTokenizer(), budgets)
    state = env.reset(TASK)
    for text in (
      f"<run>{wrong}</run>",
      "no action here",
      f"<submit>{TASK.reference_solution}</submit>",
    ):
      state, _ = env.step(state, text)
    unfinished = env.step(env.reset(TASK), f"<run>{wrong}</run>")[0]
  path = tmp_path / "samples.jsonl"
  samples.write_samples(
    path,
    [
      samples.episode_line(state, mode="greedy"),
      samples.episode_line(unfinished),
    ],
  )
  assert not list(tmp_path.glob("*.tmp"))
  assert json.loads(path.read_text().splitlines()[0])["mode"] == "greedy"
  done, open_ = samples.read_samples(path, ["add"])
  assert (done.mode, open_.mode) == ("greedy", None)
  assert done.completion == TASK.reference_solution
  assert done.trajectory == tuple(t.action_text for t in state.turns)
  body = state.turns[0].observation.body
  assert body.startswith("tests: 0/1 passed"), body
  assert done.observations[0] == body and done.observations[2] is None
  actions, observations = done.actions_and_observations()
  assert actions == list(done.trajectory)  # it ends with its submit
  assert observations == list(done.observations)
  # An episode that never submitted: its (empty) completion is the submit.
  assert open_.completion == ""
  actions, observations = open_.actions_and_observations()
  assert actions[-1] == ("submit", "") and observations[-1] is None
  with pytest.raises(samples.SampleFormatError, match="not in the task file"):
    samples.read_samples(path, ["other"])
  for bad in (3, "", ["greedy"]):
    path.write_text(
      json.dumps({"task_id": "add", "completion": "", "mode": bad})
    )
    with pytest.raises(samples.SampleFormatError, match=r":1: mode: must be"):
      samples.read_samples(path, ["add"])
