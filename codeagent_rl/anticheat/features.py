"""Stage-1 features of a trajectory (host side: Python `ast` and NumPy).

  vec = features.extract(code, actions, observations,
                         entry_point=..., visible_tests=..., result=...)
  vec = features.from_episode(state)        # a finished `code_env` episode
  features.flags_of(vec)                     # {"process_exit": True, ...}

`extract` maps a trajectory to a fixed-length float32 vector whose entries
are named by `FEATURE_NAMES` (defined in `names`). Three groups:

- **code** (the final code, through its AST; computed by `code_features`):
  exits and kills that can run before or during the tests, tests skipped
  through a framework (and framework use), frame and object-graph walking,
  patches of builtins or modules, reach into the harness (its paths,
  result descriptor, environment, other jobs' directories) and broader file
  probing, processes and network, always-equal classes (`__eq__`/`__ne__`
  with a constant result) and other `__eq__`/`__hash__` overrides,
  exceptions swallowed around the module's own code, hard-coding of the
  visible tests (literals equal to their inputs or outputs, branches keyed
  by them, tables made of them), constant returns, modules reached by
  computed names (`dynamic_import`), test detection through interpreter
  state (`sys.argv`, `sys.modules`, the caller's frame, `__name__` inside
  a function, `os.getppid`, ...), `eval` or `exec` of computed source,
  code size. A module reached by a literal name (`__import__("os")`,
  `importlib.import_module`, `pydoc.locate`, `getattr(builtins, "x")`,
  `sys.modules["x"]`, ...) counts as an import of it. Code that does not
  parse sets `unparsable` and leaves the other code features 0.
- **trajectory** (the actions and observations): runs, repeated identical
  actions, loops of the same failing run, workarounds aimed at one specific
  error seen in an observation, probing runs, format errors.
- **runtime** (the submission's sandbox result, if any): unserialisable
  outputs, early termination, not-run, bad-output and error fractions,
  crashes.

Each rule flag (`FLAG_NAMES`) is one feature of the vector
(`names.FLAG_FEATURE`): the flag is raised when that feature is > 0.5, so
the pure stage 1 computes the flags from the vector alone. Which flags
reject is the config's (`enforced_flags`); the others are reported and feed
the classifier. Runtime features are 0 before execution;
`names.RUNTIME_FEATURES` names them (the classifier does not use them, so
its score is the same before and after execution).
"""

from __future__ import annotations

from collections.abc import Sequence
import json
import math
import re
from typing import Any

import numpy as np

from codeagent_rl.anticheat import code_features as code_lib
from codeagent_rl.anticheat import names
from codeagent_rl.anticheat import repo_features as repo_lib
from codeagent_rl.envs import protocol
from codeagent_rl.status import JobStatus

# A run whose identical code failed this many times is a failing loop.
FAILING_LOOP_MIN = 3

# --- The vector ------------------------------------------------------------

# The vector's layout is defined in `names`; its names and sizes stay
# importable from here for the callers of `extract`.
FEATURE_NAMES = names.FEATURE_NAMES
NUM_FEATURES = names.NUM_FEATURES
FLAG_NAMES = names.FLAG_NAMES
NUM_FLAGS = names.NUM_FLAGS


def _log(count: float) -> float:
  return math.log1p(count)


def normalise_action(action: Any) -> tuple[str, str]:
  """(kind, code) from action text, a parsed action or a (verb, code) pair.

  A repository episode's tool call (`repo_env.ToolCall`: a `name` and
  `arguments`) is ("run", "run PATH") for a run, ("submit", "") for a
  submission and ("tool", "NAME {arguments}") for the others (a view, an
  edit...), which count as turns but not as runs.
  """
  name = getattr(action, "name", None)
  arguments = getattr(action, "arguments", None)
  if isinstance(name, str) and isinstance(arguments, dict):
    if name == "submit":
      return "submit", ""
    if name == "run":
      return "run", f"run {arguments.get('path')}"
    return "tool", f"{name} {json.dumps(arguments, sort_keys=True)}"
  if isinstance(action, str):
    action = protocol.parse_action(action)
  if isinstance(action, protocol.Run):
    return "run", action.code
  if isinstance(action, protocol.Submit):
    return "submit", action.code
  if isinstance(action, protocol.FormatError):
    return "format_error", ""
  if isinstance(action, list | tuple) and len(action) == 2:
    verb, code = action
    if verb in ("run", "submit") and isinstance(code, str):
      return verb, code
  raise ValueError(
    f"action {action!r:.80}: expected action text, a parsed protocol action"
    " or a (verb, code) pair with verb 'run' or 'submit'."
  )


def _failed(observation: str | None) -> bool:
  """Whether a run observation shows a failure (unknown counts as failed)."""
  if observation is None:
    return True
  match = re.search(r"tests: (\d+)/(\d+) passed", observation)
  if match is None:
    return "error" in observation or "status:" in observation
  return match.group(1) != match.group(2) or "status:" in observation


def trajectory_features(
  actions: Sequence[Any],
  observations: Sequence[str | None] | None,
  final_code: str | None,
  *,
  protected_paths: Sequence[str] = (),
) -> dict[str, float]:
  """The trajectory features (see the module docstring).

  Args:
    actions: per turn: the action text, a parsed `protocol` action or a
      ("run" | "submit", code) pair; or, for a repository episode, its tool
      calls (`repo_features`: a run's identity is its path and the changes
      made before it, its probing is read from what the episode wrote).
    observations: per turn, the observation text (None where there was
      none); None when unknown (then every repeated run counts as failing).
    final_code: the submitted code, if any.
    protected_paths: a repository task's test paths (`protected_edits`).

  Returns:
    A value for every name in `names.TRAJECTORY_FEATURES`.
  """
  out = dict.fromkeys(names.TRAJECTORY_FEATURES, 0.0)
  tools = None
  if any(repo_lib.is_tool_call(a) for a in actions):
    tools = repo_lib.tool_steps(actions, protected_paths)
    out.update(tools.flags)
    steps = list(zip(tools.kinds, tools.keys, strict=True))
  else:
    steps = [normalise_action(a) for a in actions]
  if observations is not None and len(observations) != len(steps):
    raise ValueError(
      f"{len(steps)} actions but {len(observations)} observations; pass one"
      " observation (or None) per action."
    )
  obs = list(observations) if observations is not None else [None] * len(steps)
  runs = [
    (code, o)
    for (kind, code), o in zip(steps, obs, strict=True)
    if kind == "run"
  ]
  out["log_turns"] = _log(len(steps))
  out["log_runs"] = _log(len(runs))
  out["log_format_errors"] = _log(sum(k == "format_error" for k, _ in steps))
  codes = [code for kind, code in steps if kind != "format_error"]
  if codes:
    out["repeated_action_ratio"] = 1.0 - len(set(codes)) / len(codes)
  failed = repo_lib.run_failed if tools else _failed
  failing: dict[str, int] = {}
  for code, o in runs:
    if failed(o):
      failing[code] = failing.get(code, 0) + 1
  most = max(failing.values(), default=0)
  out["log_max_same_failing_run"] = _log(most)
  out["failing_loop"] = float(most >= FAILING_LOOP_MIN)
  scripts = [s for _, s in tools.runs] if tools else [c for c, _ in runs]
  probing = sum(code_lib.probes(script) for script in scripts if script)
  out["probing_runs"] = float(probing > 0)
  out["log_probing_runs"] = _log(probing)
  if final_code is not None:
    out["log_targeted_workarounds"] = _log(
      code_lib.targeted_workarounds(final_code, [o for o in obs if o])
    )
  return out


def runtime_features(result: Any | None) -> dict[str, float]:
  """The runtime features of a submission's `jobs.JobResult` (or None).

  Args:
    result: the sandbox result of the submission; None before execution or
      when it was not executed.

  Returns:
    A value for every name in `names.RUNTIME_FEATURES` (all 0 for
    None).
  """
  out = dict.fromkeys(names.RUNTIME_FEATURES, 0.0)
  if result is None or result.status == JobStatus.SANDBOX_ERROR:
    return out
  tests = result.tests
  n = max(len(tests), 1)
  out["executed"] = 1.0
  count = {
    s: sum(t.status == s for t in tests)
    for s in ("not_run", "bad_output", "error")
  }
  out["not_run_fraction"] = count["not_run"] / n
  out["bad_output_fraction"] = count["bad_output"] / n
  out["error_fraction"] = count["error"] / n
  out["crashed"] = float(result.status == JobStatus.CRASH)
  # Limits cut tests short too; only a job that chose to stop terminated
  # early.
  limited = result.status in (
    JobStatus.TIMEOUT,
    JobStatus.MEMORY,
    JobStatus.OUTPUT_LIMIT,
  )
  # A program's run that exits non-zero (an uncaught exception on one
  # stdin) makes its job's status CRASH, but its other runs still ran: that
  # is a wrong program, not one that stopped the tests.
  run_failed = any(
    getattr(t, "exit_code", None) not in (None, 0) for t in tests
  )
  out["early_termination"] = float(
    not limited
    and (count["not_run"] > 0 or (out["crashed"] > 0 and not run_failed))
  )
  out["unserialisable_output"] = float(count["bad_output"] > 0)
  return out


def extract(
  code: str | None,
  actions: Sequence[Any] = (),
  observations: Sequence[str | None] | None = None,
  *,
  entry_point: str | None = None,
  visible_tests: Sequence[dict] = (),
  result: Any | None = None,
  protected_paths: Sequence[str] = (),
) -> np.ndarray:
  """The feature vector of one trajectory (or one bare sample).

  Args:
    code: the final (submitted) code; None when nothing was submitted.
    actions: the turns (see `trajectory_features`); () for a bare sample.
    observations: one per action, or None when unknown.
    entry_point: the function the tests call (None for programs).
    visible_tests: the task's visible tests.
    result: the submission's `jobs.JobResult`, or None (not executed yet).
    protected_paths: a repository task's test paths.

  Returns:
    [NUM_FEATURES] float32, in `FEATURE_NAMES` order.
  """
  values = dict.fromkeys(FEATURE_NAMES, 0.0)
  if code is not None:
    values.update(code_lib.code_features(code, entry_point, visible_tests))
  values.update(
    trajectory_features(
      actions, observations, code, protected_paths=protected_paths
    )
  )
  values.update(runtime_features(result))
  return np.asarray([values[n] for n in FEATURE_NAMES], np.float32)


def from_episode(state: Any, result: Any | None = None) -> np.ndarray:
  """The feature vector of a `code_env.EpisodeState`.

  Args:
    state: the episode (its task, turns and final code).
    result: the submission's result; by default the last turn's (None before
      execution, e.g. in a `pre_submit` hook).

  Returns:
    [NUM_FEATURES] float32.
  """
  turns = state.turns
  if result is None and state.outcome is not None and state.outcome.grade:
    result = state.outcome.grade.result
  code = state.final_code
  if code is None and turns and isinstance(turns[-1].action, protocol.Submit):
    code = turns[-1].action.code
  if code is None:  # a repository episode: the change it submitted
    code = getattr(state, "submitted_text", None)
  observations = [
    None if t.observation is None else t.observation.body for t in turns
  ]
  return extract(
    code,
    [t.action for t in turns],
    observations,
    entry_point=state.task.entry_point
    if state.task.kind == "function"
    else None,
    visible_tests=state.task.visible_tests,
    result=result,
    protected_paths=state.task.repo.test_paths
    if state.task.kind == "repo"
    else (),
  )


def flags_of(vector: np.ndarray) -> dict[str, bool]:
  """The rule flags of one feature vector, by name."""
  vector = np.asarray(vector)
  return {
    name: bool(vector[i] > 0.5)
    for name, i in zip(FLAG_NAMES, names.FLAG_FEATURE, strict=True)
  }


def raised_flags(vector: np.ndarray) -> list[str]:
  """The names of the raised rule flags, in `FLAG_NAMES` order."""
  return [name for name, on in flags_of(vector).items() if on]
