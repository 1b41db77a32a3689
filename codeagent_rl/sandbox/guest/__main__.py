"""Starts the guest forkserver: `python3 -I -S -B <dir>/guest/__main__.py`.

`-I` puts no directory of the sandbox on `sys.path` (and `-m` would need
one), so this file, run by path, loads its own package by path under the
name `_sandbox_guest` and calls `server.main`. Nothing of the sandbox's
files becomes importable by name, here or in job processes.
"""

import importlib
import importlib.util
import os
import sys

_PACKAGE = "_sandbox_guest"


def _load_package():
  """Imports the package in this file's directory as `_PACKAGE`."""
  here = os.path.dirname(os.path.abspath(__file__))
  spec = importlib.util.spec_from_file_location(
    _PACKAGE,
    os.path.join(here, "__init__.py"),
    submodule_search_locations=[here],
  )
  package = importlib.util.module_from_spec(spec)
  # Relative imports of its modules find the package here.
  sys.modules[_PACKAGE] = package
  spec.loader.exec_module(package)
  return package


if __name__ == "__main__":
  _load_package()
  server = importlib.import_module(_PACKAGE + ".server")
  sys.exit(server.main(sys.argv))
