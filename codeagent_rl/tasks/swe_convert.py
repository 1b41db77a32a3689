r"""SWE-bench-style records -> `repo` tasks whose hidden tests are calls.

  python -m codeagent_rl.tasks.swe_convert --input=IN.jsonl --out=OUT.jsonl \
      [--limit=K] [--backend=gvisor|process] [--norun_checks]

A record is one JSON object a line (other fields are ignored):
`instance_id`, `problem_statement`, `files` (path -> text: the repository
at the base commit), `patch` (the gold change) and `test_patch` (git
diffs), `FAIL_TO_PASS` and `PASS_TO_PASS` (pytest node ids `path::name`,
a list or a JSON string of one), optional `entry_point` (a .py file of
`files`, or null).

The task. Each patch is applied by `git apply` to `files` written into a
fresh temporary folder (no repository around it is used, no git config
read); a patch that does not apply, or leaves a symlink, a special or a
non-UTF-8 file, skips the record. Task `swe/<instance_id>` (prompt: the
problem statement) starts from `files` without the test patch, so its
hidden tests stay hidden; `test_paths` are the files named `test_*.py`,
`*_test.py` or under a `tests/` folder, its own visible tests
(`visible_tests` is empty). The reference change is what the gold patch
does to the other files (graded runs use the task's test and hook files).

Which tests convert: `swe_tests` (a module-level `def test_x():` whose
body is `assert f(literals) == literal` statements, `f` a workspace
function; each assert is one call test).

Suites. A record converts only when all its FAIL_TO_PASS tests (at least
one) do; PASS_TO_PASS tests that do not are dropped, counted by reason in
`metadata["tests"]`. The asserts, FAIL_TO_PASS ones first (node-id order,
then source order), then PASS_TO_PASS ones, are dealt alternately to
suite A (`hidden_tests`) and suite B (`heldout_tests`), starting with A.
A lone FAIL_TO_PASS assert goes to both suites, so that suite B repeats
A's failing test (`metadata["fail_to_pass_in_both"]`), and the
PASS_TO_PASS ones are dealt from A. `metadata["suites"]` counts each
suite's tests by source. The judge compares by the expected value's type:
unlike `==`, floats match within a tolerance and a bool never matches an
int; as with `==`, a float equal to an expected int passes
(`metadata["judge"]`).

Checks. With a sandbox pool (the CLI's default; `--norun_checks` runs
nothing) the reference must pass every test and the start fail at least
one FAIL_TO_PASS test (`repo_judge.PendingTests`, judged by
`judge.judge_test`), else the record is skipped. A job the sandbox itself
failed is resubmitted once; if it fails again the record is skipped under
its own reason, never as code that fails its tests.

Why not the pytest tests themselves: pytest runs them in the interpreter
of the code under test, which can forge the outcome (`sys.settrace`
jumping over asserts, patching `_pytest` or `builtins`, objects whose
`__eq__` is always true, `os._exit(0)` from a conftest.py or
sitecustomize.py). A call test returns plain data across the sandbox's
process boundary, and the host compares it with an expected value that
never enters the sandbox.

Skipped records are named "<file>:<line>: <field>: why" (the first
`convert.MAX_PRINTED_PROBLEMS` on stderr, all in `Report.problems`); the
report (records read, tasks written, records skipped and tests dropped by
reason, checks) goes to stdout, its JSON last. Tasks are written through
`convert.write_tasks_atomically`. The CLI exits 1 with one line when the
input cannot be read or no task is written.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import os
import stat
import subprocess
import sys
import tempfile
from typing import Any

from absl import app
from absl import flags

from codeagent_rl import status as status_lib
from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import pools
from codeagent_rl.tasks import convert as convert_lib
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import repo_judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import swe_tests
from codeagent_rl.tasks import workspace as workspace_lib
from codeagent_rl.tasks.formats import records

NotConverted = swe_tests.NotConverted
is_test_path = swe_tests.is_test_path
F2P, P2P = "FAIL_TO_PASS", "PASS_TO_PASS"
TEXT_FIELDS = ("instance_id", "problem_statement", "patch", "test_patch")
REQUIRED = (*TEXT_FIELDS, "files", F2P, P2P)
GIT_TIMEOUT_S = 60
# Resubmissions of a check job the sandbox failed (as the environment's).
SANDBOX_RETRIES = 1
ConvertError = records.ConvertError


# --- Patches ------------------------------------------------------------------


def _read_tree(root: str, field: str) -> dict[str, str]:
  """The files under `root` (path -> text); raises unless all are text."""
  out = {}
  for folder, dirs, names in os.walk(root):
    for name in dirs + names:
      full = os.path.join(folder, name)
      rel = os.path.relpath(full, root).replace(os.sep, "/")
      mode = os.lstat(full).st_mode
      if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise NotConverted(f"{field}: makes a symlink or special file", rel)
      if stat.S_ISREG(mode):
        with open(full, "rb") as f:
          data = f.read()
        try:
          out[rel] = data.decode("utf-8")
        except UnicodeDecodeError:
          raise NotConverted(f"{field}: makes a binary file", rel) from None
  return out


def apply_patch(files: dict[str, str], patch: str, field: str) -> dict:
  """`files` with `patch` (a git diff) applied by `git apply`.

  Args:
    files: path -> text, valid workspace paths without a `.git` segment.
    patch: the diff.
    field: the record's field of `patch`, for messages.

  Raises:
    NotConverted: it does not apply, or leaves a file that is not text.
    ConvertError: git is not installed.
  """
  with tempfile.TemporaryDirectory(prefix="swe_convert_") as tmp:
    root = os.path.join(tmp, "repo")
    os.mkdir(root)
    # The diff goes beside the tree, so that it is not read back as a file.
    for path, text in [*files.items(), ("../change.diff", patch)]:
      full = os.path.normpath(os.path.join(root, path))
      os.makedirs(os.path.dirname(full), exist_ok=True)
      with open(full, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    # No repository above the folder is found, and no git config is read.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CEILING_DIRECTORIES=tmp, GIT_CONFIG_NOSYSTEM="1")
    env.update(GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
    command = ["git", "apply", "--whitespace=nowarn", "../change.diff"]
    try:
      proc = subprocess.run(
        command, cwd=root, env=env, capture_output=True, encoding="utf-8",
        errors="replace", timeout=GIT_TIMEOUT_S, check=False,
      )  # fmt: skip
    except FileNotFoundError:
      raise ConvertError("git apply is needed; git is not installed.") from None
    except subprocess.TimeoutExpired:
      proc = subprocess.CompletedProcess(command, 1, "", "git apply timed out")
    if proc.returncode != 0:
      why = " / ".join(proc.stderr.strip().splitlines()[:3])[:300]
      raise NotConverted(f"{field}: does not apply", why)
    return _read_tree(root, field)


# --- Records ------------------------------------------------------------------


def _node_ids(record: dict, field: str) -> list[str]:
  """The node ids of `field` (a list, or a JSON string of one), deduped."""
  value = record[field]
  if isinstance(value, str):
    try:
      value = json.loads(value)
    except ValueError:
      pass
  if not isinstance(value, list) or not all(
    isinstance(v, str) and v for v in value
  ):
    raise NotConverted(
      f"{field}: not a list of node ids", "nor a JSON string of one"
    )
  return list(dict.fromkeys(value))


def _check_fields(record: Any) -> None:
  """Raises NotConverted naming the first malformed field of `record`."""
  if not isinstance(record, dict):
    raise NotConverted("not a JSON object")
  for field in REQUIRED:
    if field not in record:
      raise NotConverted(f"{field}: missing")
  for field in TEXT_FIELDS:
    if not isinstance(record[field], str):
      raise NotConverted(f"{field}: not text")
    try:
      record[field].encode("utf-8")  # what git and the task file take
    except UnicodeEncodeError:
      raise NotConverted(f"{field}: not text", "a lone surrogate") from None
  for field in ("instance_id", "patch"):
    if not record[field].strip():
      raise NotConverted(f"{field}: empty")
  try:
    files = workspace_lib.Workspace(record["files"])
  except workspace_lib.WorkspaceError as e:
    raise NotConverted("files: not a valid workspace", str(e)) from None
  for path in files:
    # git would take a .git folder of the snapshot for a repository.
    if ".git" in path.lower().split("/"):
      raise NotConverted("files: not a valid workspace", f"{path} (.git)")
  entry = record.get("entry_point")
  if entry is not None and not (
    isinstance(entry, str) and entry.endswith(".py") and entry in files
  ):
    raise NotConverted("entry_point: not a .py file of files", f"{entry!r:.80}")


def _deal(f2p: list[dict], p2p: list[dict]) -> tuple[list, list, list]:
  """(suite A, suite B, their counts by source): see the module docstring."""
  suites, sources = ([], []), (collections.Counter(), collections.Counter())
  rest = [(F2P, t) for t in f2p] + [(P2P, t) for t in p2p]
  if len(f2p) == 1:
    for k in (0, 1):
      suites[k].append(f2p[0])
      sources[k][F2P] += 1
    rest = rest[1:]
  for k, (source, test) in enumerate(rest):
    suites[k % 2].append(test)
    sources[k % 2][source] += 1
  return suites[0], suites[1], [dict(sorted(c.items())) for c in sources]


def draft_task(record: Any) -> tuple[schema.Task, tuple[dict, ...]]:
  """(the task of one record, its FAIL_TO_PASS tests); runs no sandbox.

  Raises:
    NotConverted: the record is malformed, a patch does not apply, or a
      FAIL_TO_PASS test does not convert; `reason` names the field.
  """
  _check_fields(record)
  files = dict(record["files"])
  node_ids = {F2P: _node_ids(record, F2P), P2P: _node_ids(record, P2P)}
  if not node_ids[F2P]:
    raise NotConverted(f"{F2P}: empty")
  node_ids[P2P] = [n for n in node_ids[P2P] if n not in node_ids[F2P]]
  gold = apply_patch(files, record["patch"], "patch")
  tested = files
  if record["test_patch"].strip():
    tested = apply_patch(files, record["test_patch"], "test_patch")
  change = {p: t for p, t in gold.items() if files.get(p) != t}
  change.update({p: None for p in files if p not in gold})
  # Graded runs use the task's own test and hook files whatever changed.
  left_out = sorted(
    p for p in change if is_test_path(p) or workspace_lib.is_hook_file(p)
  )
  for path in left_out:
    del change[path]
  if not change:
    raise NotConverted("patch: changes only tests", ", ".join(left_out))
  reference = {p: t for p, t in {**files, **change}.items() if t is not None}
  calls = {F2P: [], P2P: []}
  dropped = collections.Counter()
  for source in (F2P, P2P):
    for node_id in node_ids[source]:
      try:
        calls[source].append(swe_tests.convert_test(node_id, tested, reference))
      except NotConverted as e:
        if source == F2P:
          raise NotConverted(f"{F2P}: {e.reason}", e.detail) from None
        dropped[e.reason] += 1
  f2p = [test for tests in calls[F2P] for test in tests]
  p2p = [test for tests in calls[P2P] for test in tests]
  suite_a, suite_b, sources = _deal(f2p, p2p)
  counts = {F2P: {}, P2P: {"dropped": dict(sorted(dropped.items()))}}
  for source, tests in ((F2P, f2p), (P2P, p2p)):
    counts[source].update(converted=len(calls[source]), asserts=len(tests))
  metadata = {
    "source": "swe",
    "instance_id": record["instance_id"],
    "tests": counts,
    "suites": {"hidden_tests": sources[0], "heldout_tests": sources[1]},
    "fail_to_pass_in_both": len(f2p) == 1,
    "reference_left_out": left_out,
    "judge": {"int_accepts_float": True},
    "checks": "not_run",
  }
  test_paths = sorted(p for p in files if is_test_path(p))
  try:
    task = schema.Task(
      task_id=f"swe/{record['instance_id']}",
      prompt=record["problem_statement"],
      entry_point=record.get("entry_point"),
      kind="repo",
      visible_tests=(),
      hidden_tests=tuple(suite_a),
      heldout_tests=tuple(suite_b),
      reference_solution="",
      metadata=metadata,
      workspace={"files": files, "test_paths": test_paths, "reference": change},
    )
  except schema.TaskFormatError as e:
    raise NotConverted("task: not valid", str(e)) from None
  return task, tuple(f2p)


def check_task(
  pool: Any, task: schema.Task, f2p: tuple, retries: int = SANDBOX_RETRIES
) -> schema.Task:
  """`task` once its reference passes and its start fails in `pool`.

  A job the sandbox failed (not the code) is resubmitted up to `retries`
  times; one that still fails is a skip of its own, never a verdict on the
  record's code.

  Raises:
    NotConverted: the reference fails a test, the start passes every
      FAIL_TO_PASS test (`f2p`), or the sandbox kept failing.
  """
  config = judge.task_config(task, judge.JudgeConfig())

  def verdicts(tests, workspace):
    pending = repo_judge.PendingTests(pool, task, tests, workspace)
    result = pending.result(retries)
    if result.status == status_lib.JobStatus.SANDBOX_ERROR:
      raise NotConverted(
        "check: the sandbox failed (convert the record again)", result.reason
      )
    return [
      judge.judge_test(task.kind, test, run, config)
      for test, run in zip(tests, result.tests, strict=True)
    ]

  tests = judge.graded_tests(task)
  checked = zip(tests, verdicts(tests, task.repo.reference), strict=True)
  for test, verdict in checked:
    if not verdict.passed:
      detail = f"{test['call']}: {verdict.reason}"
      raise NotConverted("check: the reference fails a test", detail)
  if all(v.passed for v in verdicts(f2p, task.repo.start)):
    raise NotConverted("check: the start passes FAIL_TO_PASS")
  metadata = {**task.metadata, "checks": "passed"}
  return dataclasses.replace(task, metadata=metadata)


# --- Converting ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Report(convert_lib.CountsReport):
  """What a conversion did.

  Attributes:
    read: records read (malformed or not).
    written: tasks written (the others were skipped).
    skip_reasons: skipped records per reason ("<field>: <why>").
    dropped_tests: PASS_TO_PASS tests of written tasks left out, per reason.
    checks: written tasks per sandbox check ("passed" or "not_run").
    problems: one message per skipped record, naming file, line and field.
  """

  read: int
  written: int
  skip_reasons: dict[str, int]
  dropped_tests: dict[str, int]
  checks: dict[str, int]
  problems: tuple[str, ...]

  TOOL = "swe_convert"
  SECTIONS = (
    ("skipped", "skip_reasons"),
    ("tests dropped", "dropped_tests"),
    ("checks", "checks"),
  )


def convert(
  input_path: str, out_path: str, *, pool: Any = None, limit: int | None = None
) -> Report:
  """Converts a file of records into a task file (see the module docstring).

  Args:
    input_path: JSONL records (or one JSON list of them, maybe gzipped).
    out_path: the task JSONL to write (atomically).
    pool: a sandbox pool for the checks (None: no checks).
    limit: convert the first `limit` records only (None: all).

  Raises:
    ConvertError: the input is unreadable or not JSON, git is missing, or
      the output cannot be written.
  """
  read, unparsed, problems = 0, 0, []
  reasons = collections.Counter()
  drafts, first_of = [], {}

  def skip(where: str, error: NotConverted) -> None:
    reasons[error.reason] += 1
    problems.append(f"{where}: {error}")

  for record in records.read_records(input_path):
    if limit is not None and read >= limit:
      break
    read += 1
    if isinstance(record.value, records.Unparsed):
      unparsed += 1
      skip(record.where, NotConverted("not JSON", record.value.error))
      continue
    try:
      task, f2p = draft_task(record.value)
    except NotConverted as e:
      skip(record.where, e)
      continue
    if task.task_id in first_of:
      again = NotConverted("instance_id: duplicate", first_of[task.task_id])
      skip(record.where, again)
      continue
    first_of[task.task_id] = record.where
    drafts.append((record.where, task, f2p))
  if read and unparsed == read:
    raise ConvertError(f"not JSONL: {problems[0]}")
  tasks = []
  workers = 2 * pool.parallelism if pool is not None else 1
  with concurrent.futures.ThreadPoolExecutor(workers) as executor:
    futures = [
      executor.submit(check_task, pool, task, f2p) if pool else None
      for _, task, f2p in drafts
    ]
    for (where, task, _), future in zip(drafts, futures, strict=True):
      try:
        tasks.append(task if future is None else future.result())
      except NotConverted as e:
        skip(where, e)
  dropped = collections.Counter()
  for task in tasks:
    dropped.update(task.metadata["tests"][P2P]["dropped"])
  try:
    convert_lib.write_tasks_atomically(out_path, tasks)
  except OSError as e:
    raise ConvertError(f"{out_path}: cannot write: {e}") from None
  return Report(
    read=read,
    written=len(tasks),
    skip_reasons=dict(sorted(reasons.items())),
    dropped_tests=dict(sorted(dropped.items())),
    checks=dict(collections.Counter(t.metadata["checks"] for t in tasks)),
    problems=tuple(problems),
  )


# --- Command line -------------------------------------------------------------


def define_flags() -> None:
  """Registers the program's flags, the sandbox's included."""
  flags.DEFINE_string("input", None, "JSONL of SWE-style records.")
  flags.DEFINE_string("out", None, "Where to write the tasks (JSONL).")
  flags.DEFINE_integer("limit", None, "Convert the first K records only.")
  flags.DEFINE_bool(
    "run_checks",
    True,
    "Check in the sandbox that each reference passes its tests and each"
    " start fails a FAIL_TO_PASS test; --norun_checks starts no sandbox.",
  )
  harness.define_backend_flag()
  harness.define_flags(limits=True)
  flags.mark_flags_as_required(["input", "out"])


def main(argv: list[str]) -> None:
  """Converts `--input` into `--out` and prints the report."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  values = flags.FLAGS
  if values.limit is not None and values.limit < 1:
    raise app.UsageError(f"--limit={values.limit}: must be >= 1.")
  try:
    if not values.run_checks:
      report = convert(values.input, values.out, limit=values.limit)
    else:
      try:
        sandbox = harness.config_from_cli_flags(values.backend)
      except ValueError as e:
        raise app.UsageError(str(e)) from None
      with pools.open_pool(sandbox) as pool:
        report = convert(
          values.input, values.out, pool=pool, limit=values.limit
        )
  except (ConvertError, gvisor.SetupError) as e:
    sys.exit(f"swe_convert: {e}")
  for problem in report.problems[: convert_lib.MAX_PRINTED_PROBLEMS]:
    print(f"swe_convert: skipped {problem}", file=sys.stderr)
  print("\n".join(report.lines()))
  print(json.dumps(report.to_json()), flush=True)
  if not report.written:
    sys.exit(f"swe_convert: no task written from {values.input} (see above).")


if __name__ == "__main__":
  define_flags()
  app.run(main)
