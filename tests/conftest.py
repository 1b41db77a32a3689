"""Test-wide setup: 8 fake CPU devices, so sharding tests see a mesh.

The flag must be set before jax initialises its backends, hence here.
"""

import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " " + _FLAG
os.environ.setdefault("JAX_PLATFORMS", "cpu")
