"""From a `Draft` to a `Task`: caps, suite B, the reference run.

  finished = suites.finish(draft, pool, max_tests=15, num_visible=2,
                           augment_config=augment.AugmentConfig())

The rules (`codeagent_rl.tasks.convert`'s docstring tells them per
format):

- Tests are deduplicated by input (`wire` encoding, so 1, 1.0 and True
  differ); a test that is not plain data is dropped.
- `cap` keeps the `max_tests` tests with the longest inputs (length of
  their repr), longest first; ties keep the source order.
- Visible tests: the draft's public ones, else the first of suite A in
  source order; `num_visible` of them.
- Suite B: the source's second set minus inputs of suite A and the visible
  tests; else, where a pool runs the reference and it passes suite A, the
  augmenter's tests (function tasks); else suite A's overflow; else none.
- With a pool and a reference, the reference is graded by the judge on
  both suites (`metadata["reference_check"]`).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks.formats import common
from codeagent_rl.tasks.suite_b import augment

OVER_CAP = "over --max_tests"


def _input(test: dict) -> Any:
  if "stdin" in test:
    return test["stdin"]
  return [test["args"], test.get("kwargs", {})]


def input_size(test: dict) -> int:
  """What the cap orders tests by: the length of the input's repr."""
  return len(repr(_input(test)))


def cap(tests: list[dict], max_tests: int) -> tuple[list[dict], list[dict]]:
  """(kept, left out): the tests by input size, largest first, split."""
  ordered = sorted(tests, key=input_size, reverse=True)  # stable
  return ordered[:max_tests], ordered[max_tests:]


def _key(test: dict) -> str:
  return wire.dumps(wire.encode(_input(test)))


def clean(
  tests: list[dict],
  suite: str,
  dropped: collections.Counter,
  exclude: frozenset[str] = frozenset(),
) -> list[dict]:
  """Tests of plain data, each input once and none of `exclude`'s keys."""
  kept, seen = [], set(exclude)
  for test in tests:
    try:
      wire.encode(test)
      key = _key(test)
    except (wire.EncodeError, RecursionError):
      dropped[f"{suite}: not plain data"] += 1
      continue
    if key in seen:
      why = (
        "input also in suite A or visible" if key in exclude else "duplicate"
      )
      dropped[f"{suite}: {why}"] += 1
      continue
    seen.add(key)
    kept.append(test)
  return kept


@dataclasses.dataclass(frozen=True)
class Finished:
  """A draft's task, or why it has none.

  Attributes:
    task: the task (None: skipped).
    suite_b: where suite B came from.
    reference: "passed", "failed", "none" (no reference) or "not_run".
    dropped: tests left out, by reason.
    skip: (reason, message) when `task` is None.
  """

  task: schema.Task | None
  suite_b: str = ""
  reference: str = ""
  dropped: collections.Counter = dataclasses.field(
    default_factory=collections.Counter
  )
  skip: tuple[str, str] | None = None


def _add(counter: collections.Counter, key: str, n: int) -> None:
  if n:
    counter[key] += n


def _task(draft: common.Draft, visible, a, b, metadata) -> schema.Task:
  return schema.Task(
    task_id=draft.task_id,
    prompt=draft.prompt,
    entry_point=draft.entry_point,
    kind=draft.kind,
    visible_tests=tuple(visible),
    hidden_tests=tuple(a),
    heldout_tests=tuple(b),
    reference_solution=draft.reference,
    metadata=metadata,
  )


def _score(suite: judge.SuiteScore) -> list[int]:
  return [suite.passed, suite.total]


def _augmented(
  pool: Any, draft: common.Draft, seeds: list[dict], config
) -> list[dict]:
  cases = augment.augment(
    pool,
    draft.reference,
    draft.entry_point,
    [(t["args"], t.get("kwargs", {})) for t in seeds],
    config,
    salt=draft.task_id,
  )
  return cap(augment.expected_tests(cases), config.max_tests)[0]


def finish(
  draft: common.Draft,
  pool: Any,
  *,
  max_tests: int,
  num_visible: int,
  augment_config: augment.AugmentConfig,
) -> Finished:
  """The task of a draft: capped suites, suite B, the reference checked.

  Args:
    draft: from a format's parser.
    pool: runs the reference and the augmenter (None: nothing runs).
    max_tests: cap of suites A and B.
    num_visible: most visible tests.
    augment_config: the augmenter's config (its `max_tests` applies).

  Returns:
    The `Finished` task; a task the schema refuses, or with no test left,
    is a skip (nothing about the record's data raises).
  """
  dropped = collections.Counter()
  a_all = clean(draft.suite_a, "suite A", dropped)
  if not a_all:
    return Finished(None, skip=(common.NO_TESTS, f"{common.NO_TESTS}."))
  a, overflow = cap(a_all, max_tests)
  visible = clean(draft.visible, "visible", dropped) or a_all
  visible = visible[:num_visible]
  exclude = frozenset(_key(t) for t in (*a_all, *visible))
  if draft.suite_b is not None:
    b_all = clean(draft.suite_b, "suite B", dropped, exclude)
    b, left = cap(b_all, max_tests)
    source = draft.suite_b_source
    _add(dropped, f"suite B: {OVER_CAP}", len(left))
  else:
    b, left = overflow[:max_tests], overflow[max_tests:]
    source = "overflow" if b else "none"
    _add(dropped, f"suite A: {OVER_CAP}", len(left))
  metadata = dict(draft.metadata)
  try:
    task = _task(draft, visible, a, b, {**metadata, "suite_b": source})
  except schema.TaskFormatError as e:
    return Finished(None, skip=("schema", str(e)))
  if pool is None or not draft.reference:
    status = "not_run" if draft.reference else "none"
    return Finished(task, source, status, dropped)
  graded = judge.grade(pool, task, draft.reference)
  check = {"suite_a": _score(graded.suite_a), "suite_b": _score(graded.suite_b)}
  passes_a = graded.suite_a.passed == graded.suite_a.total
  if draft.suite_b is None and draft.kind == common.FUNCTION and passes_a:
    augmented = _augmented(pool, draft, [*a_all, *visible], augment_config)
    if augmented:
      # Suite A's overflow gives way to the augmented tests.
      _add(dropped, f"suite A: {OVER_CAP}", len(b))
      b, source = augmented, "augmented"
      check["suite_b"] = [len(b), len(b)]  # the reference's own outputs
  passed = all(p == t for p, t in check.values())
  metadata.update(suite_b=source, reference_check=check)
  try:
    task = _task(draft, visible, a, b, metadata)
  except schema.TaskFormatError as e:
    return Finished(None, skip=("schema", str(e)))
  return Finished(task, source, "passed" if passed else "failed", dropped)
