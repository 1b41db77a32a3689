"""`open_pool`: the sandbox pool of a config's backend.

  with pools.open_pool(config) as pool:
    result = pool.submit(job).result()

Backend "gvisor" or "process" gives a local `harness.SandboxPool`; backend
"ray" gives a `fleet.RayFleet` with the same interface. It lives apart from
both so that neither has to import the other's caller.
"""

from __future__ import annotations

from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import harness


def open_pool(config: config_lib.SandboxConfig):
  """The pool of `config.backend`: `SandboxPool`, or `fleet.RayFleet`.

  Both have `submit(job) -> Future`, `run`, `map`, `close`, `stats` and are
  context managers.

  Raises:
    gvisor.SetupError: the backend cannot start (no runsc, no Ray, no
      sandbox node); the message says what to do.
  """
  if config.backend == "ray":
    from codeagent_rl.sandbox import fleet  # noqa: PLC0415 (imports Ray lazily)

    return fleet.RayFleet(config)
  return harness.SandboxPool(config)
