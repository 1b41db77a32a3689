"""Shared fixture of the task tests: one warm process-backend pool.

The HumanEval tests convert problems through it (many small jobs; two
workers halve the wait); a test that needs other limits starts its own.
"""

import pytest

from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import harness

SANDBOX = config_lib.SandboxConfig(backend="process", pool_size=2)


@pytest.fixture(scope="session")
def pool():
  with harness.SandboxPool(SANDBOX) as pool:
    yield pool
