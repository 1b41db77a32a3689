"""What the anti-cheat's modules import: pure stages, corpus off the runtime."""

import pathlib
import subprocess
import sys

import pytest

from codeagent_rl.anticheat import features
from codeagent_rl.anticheat import names

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _loaded_after(module: str) -> set[str]:
  """The codeagent_rl modules a fresh interpreter holds after one import."""
  code = (
    f"import sys, {module}\n"
    "print('\\n'.join(m for m in sys.modules if m.startswith('codeagent_rl')))"
  )
  proc = subprocess.run(
    [sys.executable, "-c", code],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    check=True,
    timeout=120,
  )
  return set(proc.stdout.split())


@pytest.mark.parametrize(
  "module",
  [
    "codeagent_rl.anticheat.names",
    "codeagent_rl.anticheat.config",
    "codeagent_rl.anticheat.stage1",
    "codeagent_rl.anticheat.stage2",
  ],
)
def test_pure_stages_import_no_host_side_module(module):
  loaded = _loaded_after(module)
  host_side = {
    "codeagent_rl.anticheat.features",
    "codeagent_rl.anticheat.code_features",
    "codeagent_rl.anticheat.code_scan",
    "codeagent_rl.anticheat.code_resolve",
    "codeagent_rl.anticheat.code_rules",
    "codeagent_rl.anticheat.pipeline",
  }
  assert not loaded & host_side
  packages = {m.split(".")[1] for m in loaded if "." in m}
  assert not packages & {"envs", "sandbox", "tasks", "rollout", "train"}


def test_runtime_modules_never_import_the_corpus():
  loaded = _loaded_after(
    "codeagent_rl.anticheat.pipeline, codeagent_rl.anticheat.monitors"
  )
  assert "codeagent_rl.anticheat.stage2" in loaded
  assert not any(m.startswith("codeagent_rl.anticheat.corpus") for m in loaded)


def test_flags_are_the_leading_features_of_each_group():
  groups = (
    (names.CODE_FLAGS, names.CODE_FEATURES),
    (names.TRAJECTORY_FLAGS, names.TRAJECTORY_FEATURES),
    (names.RUNTIME_FLAGS, names.RUNTIME_FEATURES),
  )
  for flags, group in groups:
    assert group[: len(flags)] == flags
  assert names.FLAG_NAMES == sum((flags for flags, _ in groups), ())
  assert len(set(names.FEATURE_NAMES)) == names.NUM_FEATURES
  assert [names.FEATURE_NAMES[i] for i in names.FLAG_FEATURE] == list(
    names.FLAG_NAMES
  )
  assert features.FLAG_NAMES is names.FLAG_NAMES
