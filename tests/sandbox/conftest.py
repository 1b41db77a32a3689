"""Shared sandbox fixtures: one warm pool per xdist worker and backend.

`attack_pool` is the one-worker gVisor pool, local or behind a Ray actor
(the same settings): attack and judge tests run against both.

Starting a gVisor sandbox takes about a second, so tests share pools; a test
that needs its own sandbox (cleanup, crash detection) starts one itself.
The security pool has one worker, so "the next job" of a test runs on the
sandbox the attack ran in (or on its replacement, when that is the point).
"""

import dataclasses
import os
import secrets

import pytest

from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import pools
from tests.helpers import sandboxes

# Set before any pool starts: a job must never see it (the pool passes an
# empty environment to runsc, and the OCI spec has an empty env).
ENV_CANARY_NAME = "CODEAGENT_SANDBOX_TEST_CANARY"
ENV_CANARY = "env-canary-" + secrets.token_hex(8)
os.environ[ENV_CANARY_NAME] = ENV_CANARY

# Short limits keep attack tests fast (see tests/helpers/sandboxes.py); one
# worker, so that "the next job" runs where the attack ran.
TEST_CONFIG = sandboxes.short_config("gvisor", 1, **sandboxes.SMALL_DISK)


@pytest.fixture(scope="session")
def env_canary():
  """(name, value) of a variable in the host environment of every pool."""
  return ENV_CANARY_NAME, ENV_CANARY


@pytest.fixture(scope="session")
def gvisor_pool():
  with harness.SandboxPool(TEST_CONFIG) as pool:
    yield pool


@pytest.fixture(scope="session")
def process_pool():
  config = dataclasses.replace(TEST_CONFIG, backend="process")
  with harness.SandboxPool(config) as pool:
    yield pool


@pytest.fixture(scope="session")
def ray_gvisor_pool(ray_cluster):
  """TEST_CONFIG's gVisor sandbox behind one Ray actor, one job at a time."""
  del ray_cluster  # started by the fixture; the fleet joins it
  with pools.open_pool(sandboxes.ray_config(TEST_CONFIG)) as pool:
    yield pool


@pytest.fixture(scope="session", params=["local", "ray"])
def attack_pool(request):
  """The one-worker gVisor pool: local, or a Ray actor's."""
  name = "gvisor_pool" if request.param == "local" else "ray_gvisor_pool"
  return request.getfixturevalue(name)
