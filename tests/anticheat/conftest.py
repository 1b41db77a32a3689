"""Shared fixtures: a process-backend pool, the anti-cheat, a few tasks."""

import dataclasses

import pytest

from codeagent_rl.anticheat import config as config_lib
from codeagent_rl.anticheat import pipeline
from codeagent_rl.anticheat.corpus import hacks
from codeagent_rl.sandbox import harness
from configs import common
from tests.helpers import sandboxes

SANDBOX = sandboxes.short_config("process", 2, **sandboxes.SMALL_DISK)
# Families with different argument and return types: int -> int, str ->
# str, list -> int, (int, int) -> int, int -> str, str -> bool, list ->
# list.
FAMILIES = (
  "affine",
  "caesar",
  "second_largest",
  "gcd",
  "fizzbuzz",
  "palindrome",
  "running",
)


def default_config(**overrides) -> config_lib.AntiCheatConfig:
  cfg = config_lib.AntiCheatConfig.from_config(common.get_anticheat_config())
  return dataclasses.replace(cfg, **overrides)


@pytest.fixture(scope="session")
def process_pool():
  with harness.SandboxPool(SANDBOX) as pool:
    yield pool


@pytest.fixture(scope="session")
def gvisor_pool():
  config = dataclasses.replace(SANDBOX, backend="gvisor", pool_size=1)
  with harness.SandboxPool(config) as pool:
    yield pool


@pytest.fixture(scope="session")
def anticheat():
  return pipeline.AntiCheat.from_config(default_config())


@pytest.fixture(scope="session")
def tasks():
  return hacks.synthetic_tasks(1, seed=3, families=FAMILIES)
