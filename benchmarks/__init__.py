"""Benchmarks: `python -m benchmarks.NAME` (one per measured quantity)."""

import pathlib
import sys

# Some benchmarks reuse the test helpers (tests/helpers/), which live beside
# this package in the repository but are not installed: without this,
# `python -m benchmarks.sampler_bench` run outside the repository fails on
# `import tests`. Appended, so nothing installed is shadowed.
_REPO = pathlib.Path(__file__).resolve().parents[1]
if (_REPO / "tests" / "helpers").is_dir() and str(_REPO) not in sys.path:
  sys.path.append(str(_REPO))
