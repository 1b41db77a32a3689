"""Runs generated workspaces' calls and programs for the repo generator.

    python -I codeagent_rl/tasks/repo_eval_child.py < request.json

Started by `repo_gen.evaluate`, never by hand, on code the generator wrote
(a package and mutants of it), never on a policy's: untrusted code runs in
the sandbox. The request is `{"variants": [{path: text}, ...], "calls":
[[module, function, args], ...], "stdins": [str, ...], "entry": path}`;
the answer, one line of JSON, has per variant `{"calls": [...], "runs":
[...]}`. A call is `["ok", value]`, `["error", "Type: message"]` or
`["limit", why]`: it ran past `CALL_LIMIT_S` or out of memory (a mutant
that appends to the list it iterates, say), or returned what JSON cannot
hold; the variant's later calls and runs are then skipped. A run is
`[exit code, stdout]`, exit code -1 past the limits. Each variant is
written to a directory of its own and imported afresh (its package's
modules are dropped from `sys.modules` first), so variants do not see
each other; the generated functions keep no state, so one import serves
all of a variant's calls.

Standard library only.
"""

import contextlib
import copy
import importlib
import io
import json
import os
import resource
import runpy
import signal
import sys
import tempfile

# Each call and run gets this long; the process this much address space.
CALL_LIMIT_S = 1.0
MEMORY_BYTES = 2 << 30


class _Limit(BaseException):
  """Raised by the alarm: the call ran too long."""


def _on_alarm(signum, frame):
  del signum, frame
  raise _Limit("time")


def _describe(error: BaseException) -> str:
  return f"{type(error).__name__}: {str(error)[:200]}"


def _fresh_imports(top_names) -> None:
  for name in list(sys.modules):
    if name.split(".")[0] in top_names:
      del sys.modules[name]
  importlib.invalidate_caches()


def _run_variant(files: dict, calls: list, stdins: list, entry) -> dict:
  with tempfile.TemporaryDirectory() as root:
    for path, text in files.items():
      full = os.path.join(root, path)
      os.makedirs(os.path.dirname(full), exist_ok=True)
      with open(full, "w", encoding="utf-8") as f:
        f.write(text)
    tops = {p.split("/")[0].removesuffix(".py") for p in files}
    sys.path.insert(0, root)
    try:
      out_calls, stuck = [], False
      _fresh_imports(tops)
      for module, function, args in calls:
        if stuck:  # one call past the limits is enough to know
          out_calls.append(["limit", "skipped"])
          continue
        # The alarm may go off as the timer is cancelled (the call ended
        # at its limit): the inner `finally` then raises `_Limit`, which
        # the outer handlers catch like one from inside the call.
        try:
          try:
            signal.setitimer(signal.ITIMER_REAL, CALL_LIMIT_S)
            target = getattr(importlib.import_module(module), function)
            value = target(*copy.deepcopy(args))
            json.dumps(value)  # a list that holds itself, say, is refused
          finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
          out_calls.append(["ok", value])
        except (_Limit, MemoryError, RecursionError, ValueError) as e:
          out_calls.append(["limit", type(e).__name__])
          stuck = True
        except Exception as e:  # noqa: BLE001 - a mutant may raise anything
          out_calls.append(["error", _describe(e)])
      runs = []
      for stdin in stdins:
        if stuck:
          runs.append([-1, ""])
          continue
        stdout, code = io.StringIO(), 0
        sys.stdin = io.StringIO(stdin)
        try:
          try:
            signal.setitimer(signal.ITIMER_REAL, CALL_LIMIT_S)
            with contextlib.redirect_stdout(stdout):
              runpy.run_path(os.path.join(root, entry), run_name="__main__")
          finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        except SystemExit as e:
          code = e.code if isinstance(e.code, int) else 1
        except (_Limit, MemoryError, RecursionError):
          code, stuck = -1, True
        except Exception:  # noqa: BLE001
          code = 1
        runs.append([code, stdout.getvalue()])
      return {"calls": out_calls, "runs": runs}
    finally:
      sys.path.remove(root)
      _fresh_imports(tops)


def main() -> None:
  """Answers the request on stdin (see the module docstring)."""
  request = json.load(sys.stdin)
  resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
  signal.signal(signal.SIGALRM, _on_alarm)
  answers = [
    _run_variant(files, request["calls"], request["stdins"], request["entry"])
    for files in request["variants"]
  ]
  sys.stdout.write(json.dumps(answers) + "\n")


if __name__ == "__main__":
  main()
