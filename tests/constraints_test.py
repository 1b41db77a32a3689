"""constraints.txt: the lock that README's install command uses.

The lock pins every package that setup.py's requirements (install_requires
and every extra) pull in, transitively, at the version the README's numbers
were measured with. The checks below are plain functions, fed small made-up
inputs to watch each one fail, then run on the repository.

Regenerate the lock deliberately, after installing the new versions and
running the tests:

    python -m tests.constraints_test --write
"""

from __future__ import annotations

import ast
import importlib.metadata
import pathlib
import sys

from packaging import requirements
from packaging import utils
from packaging import version as version_lib
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
LOCK = REPO_ROOT / "constraints.txt"
SETUP = REPO_ROOT / "setup.py"
HEADER = """\
# Exact versions the README's numbers were measured with (Python 3.11, CPU):
# every package setup.py's requirements and extras pull in. pip reads it with
# -c (README's install command, .ci/run). Regenerate it deliberately, after
# installing and testing new versions:
#   python -m tests.constraints_test --write
# tests/constraints_test.py checks that it agrees with setup.py.
"""


def setup_requirements(text: str) -> dict[str, list[str]]:
  """setup.py's requirement strings by extra ("" for install_requires).

  setup.py is parsed, not run: INSTALL_REQUIRES and EXTRAS_REQUIRE are
  literals.
  """
  values = {}
  for stmt in ast.parse(text).body:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
      name = getattr(stmt.targets[0], "id", None)
      if name in ("INSTALL_REQUIRES", "EXTRAS_REQUIRE"):
        values[name] = ast.literal_eval(stmt.value)
  return {"": values["INSTALL_REQUIRES"], **values["EXTRAS_REQUIRE"]}


def _wanted(req: requirements.Requirement, extras: set[str]) -> bool:
  """Whether `req` applies here when its parent was asked with `extras`."""
  if req.marker is None:
    return True
  return any(req.marker.evaluate({"extra": e}) for e in extras | {""})


def closure(roots: list[str], metadata=importlib.metadata) -> dict[str, str]:
  """{canonical name: installed version} of `roots` and all they require.

  Requirements are followed through the installed packages' metadata, with
  the extras each parent was asked for and this machine's markers. Local
  version labels (torch's "+cpu") are dropped: `==2.13.0` admits them.

  Raises:
    importlib.metadata.PackageNotFoundError: a required package is not
      installed (the lock cannot be made or checked without it).
  """
  found: dict[str, str] = {}
  asked: dict[str, set[str]] = {}
  todo = [requirements.Requirement(r) for r in roots]
  while todo:
    req = todo.pop()
    name = utils.canonicalize_name(req.name)
    extras = set(req.extras)
    if name in found and extras <= asked[name]:
      continue
    asked[name] = asked.get(name, set()) | extras
    dist = metadata.distribution(req.name)
    found[name] = version_lib.Version(dist.version).public
    for line in dist.requires or ():
      child = requirements.Requirement(line)
      if _wanted(child, asked[name]):
        todo.append(child)
  return found


def lock_text(pins: dict[str, str]) -> str:
  """The lock file's text for `pins` (sorted, one `name==version` a line)."""
  lines = [f"{name}=={pins[name]}" for name in sorted(pins)]
  return HEADER + "\n".join(lines) + "\n"


def read_lock(text: str) -> dict[str, str]:
  """{canonical name: version} of a lock's `name==version` lines.

  Raises:
    ValueError: a line that is not an exact pin, or a package pinned twice.
  """
  pins = {}
  for number, raw in enumerate(text.splitlines(), 1):
    line = raw.split("#", 1)[0].strip()
    if not line:
      continue
    req = requirements.Requirement(line)
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or req.marker or req.extras:
      raise ValueError(f"line {number}: {raw!r} is not `name==version`.")
    name = utils.canonicalize_name(req.name)
    if name in pins:
      raise ValueError(f"line {number}: {name} is pinned twice.")
    pins[name] = specs[0].version
  return pins


def mismatches(
  setup_reqs: dict[str, list[str]], pins: dict[str, str]
) -> list[str]:
  """Requirements of setup.py that the lock does not pin inside their range."""
  out = []
  for extra, reqs in setup_reqs.items():
    for line in reqs:
      req = requirements.Requirement(line)
      name = utils.canonicalize_name(req.name)
      where = f"[{extra}]" if extra else "install_requires"
      if name not in pins:
        out.append(f"{where}: {line} has no pin in the lock.")
      elif not req.specifier.contains(pins[name], prereleases=True):
        out.append(f"{where}: {line} excludes the lock's {name}=={pins[name]}.")
  return out


def _roots() -> list[str]:
  return [
    r for reqs in setup_requirements(SETUP.read_text()).values() for r in reqs
  ]


# --- Each check fails on what it must refuse ----------------------------------


class _Dist:
  def __init__(self, version, requires=()):
    self.version = version
    self.requires = list(requires)


class _Metadata:
  """A made-up installed set for `closure`."""

  def __init__(self, dists):
    self.dists = dists

  def distribution(self, name):
    try:
      return self.dists[utils.canonicalize_name(name)]
    except KeyError:
      raise importlib.metadata.PackageNotFoundError(name) from None


def test_closure_follows_extras_and_markers_only_where_asked():
  fake = _Metadata(
    {
      "a": _Dist(
        "1.0", ["b>=1", 'c; extra == "full"', 'd; python_version < "3"']
      ),
      "b": _Dist("2.0+cpu"),
      "c": _Dist("3.0", ["b"]),
      "d": _Dist("4.0"),
    }
  )
  assert closure(["a"], fake) == {"a": "1.0", "b": "2.0"}
  assert closure(["a[full]"], fake) == {"a": "1.0", "b": "2.0", "c": "3.0"}
  # Asked without the extra first, then with it: the extra's deps count.
  assert closure(["a[full]", "a"], fake)["c"] == "3.0"
  with pytest.raises(importlib.metadata.PackageNotFoundError):
    closure(["a", "e"], fake)


def test_mismatches_name_a_missing_or_excluded_pin():
  reqs = {"": ["jax>=0.10,<0.11"], "test": ["Ruff==0.17.6"]}
  assert mismatches(reqs, {"jax": "0.10.2", "ruff": "0.17.6"}) == []
  assert mismatches(reqs, {"jax": "0.11.0", "ruff": "0.17.6"}) == [
    "install_requires: jax>=0.10,<0.11 excludes the lock's jax==0.11.0."
  ]
  assert mismatches(reqs, {"jax": "0.10.2"}) == [
    "[test]: Ruff==0.17.6 has no pin in the lock."
  ]


def test_read_lock_takes_exact_pins_only():
  assert read_lock("# c\nFoo_Bar==1.2  # why\n\njax==0.10.2\n") == {
    "foo-bar": "1.2",
    "jax": "0.10.2",
  }
  for bad in ("jax>=0.10\n", "jax\n", "jax==1\nJAX==2\n"):
    with pytest.raises(ValueError, match="line"):
      read_lock(bad)


def test_lock_text_reads_back():
  pins = {"b": "2", "a": "1.0"}
  text = lock_text(pins)
  assert read_lock(text) == pins
  assert text.splitlines()[-2:] == ["a==1.0", "b==2"]


# --- The repository -----------------------------------------------------------


def test_lock_pins_every_requirement_of_setup_py_inside_its_range():
  pins = read_lock(LOCK.read_text())
  assert mismatches(setup_requirements(SETUP.read_text()), pins) == []


def test_lock_holds_exactly_what_setup_py_pulls_in():
  """The installed requirements' closure, by name (versions may differ).

  Needs every extra installed (README's install command and the [hf],
  [data] and [experiments] extras, which the [test] one covers).
  """
  try:
    needed = closure(_roots())
  except importlib.metadata.PackageNotFoundError as e:
    pytest.skip(f"{e} is not installed: pip install -e '.[test,ray,launch]'")
  pins = read_lock(LOCK.read_text())
  assert sorted(set(needed) - set(pins)) == [], "not pinned by the lock"
  assert sorted(set(pins) - set(needed)) == [], "pinned but not required"


def _write() -> None:
  LOCK.write_text(lock_text(closure(_roots())))
  print(f"wrote {LOCK}")


if __name__ == "__main__":
  if sys.argv[1:] != ["--write"]:
    sys.exit("usage: python -m tests.constraints_test --write")
  _write()
