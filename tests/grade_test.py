"""`python -m codeagent_rl.grade`: the contract external checks rely on."""

import io
import itertools
import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from codeagent_rl import grade
from codeagent_rl.anticheat import config as anticheat_config
from codeagent_rl.anticheat import features
from codeagent_rl.anticheat import pipeline
from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import schema
from configs import common

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
FAST_LIMITS = ("--sandbox_timeout_s=1.5", "--sandbox_test_timeout_s=0.3")

CORRECT = "def add(a, b):\n  return a + b\n"
# Right on small numbers only: passes part of suite A, none of suite B.
PARTIAL = "def add(a, b):\n  return a + b if a < 3 else 0\n"
SAMPLES = {
  "correct": CORRECT,
  "partial": PARTIAL,
  "wrong": "def add(a, b):\n  return None\n",
  "raises": "def add(a, b):\n  raise RuntimeError('no')\n",
  "exits": "import sys\nsys.exit(0)\n",
  "syntax": "def add(a, b)\n  return a + b\n",
  "loops": "def add(a, b):\n  while True:\n    pass\n",
}
# Hard-codes the visible test and is right on small numbers: suite A 3/5.
HARDCODED = (
  "def add(a, b):\n  if (a, b) == (1, 2):\n    return 3\n"
  "  return a + b if a < 3 else 0\n"
)
# Hard-codes the visible test and is right everywhere: passes suites A and B.
HARDCODED_RIGHT = (
  "def add(a, b):\n  if (a, b) == (1, 2):\n    return 3\n  return a + b\n"
)
# A constant return that half of first_even's suite A expects.
RETURN_NONE = "def first_even(xs):\n  return None\n"
# What a <run> of CORRECT on add's one visible test shows the agent.
RUN_PASSED = "tests: 1/1 passed\ntest 1: pass\n"


def _add_task(task_id: str = "add", heldout: int = 4) -> schema.Task:
  return schema.Task(
    task_id=task_id,
    prompt="Add two numbers.",
    entry_point="add",
    kind="function",
    visible_tests=({"args": [1, 2], "expected": 3},),
    hidden_tests=tuple({"args": [a, 1], "expected": a + 1} for a in range(5)),
    heldout_tests=tuple(
      {"args": [10 + a, -a], "expected": 10} for a in range(heldout)
    ),
    reference_solution=CORRECT,
    metadata={},
  )


def _first_even_task() -> schema.Task:
  """A task where `return None` passes half of suite A (and of suite B)."""
  cases = ([1, 3], None), ([2, 5], 2), ([7], None), ([9, 4], 4)
  return schema.Task(
    task_id="first_even",
    prompt="The first even number of a list, or None.",
    entry_point="first_even",
    kind="function",
    visible_tests=({"args": [[1, 2]], "expected": 2},),
    hidden_tests=tuple({"args": [xs], "expected": y} for xs, y in cases[:2]),
    heldout_tests=tuple({"args": [xs], "expected": y} for xs, y in cases[2:]),
    reference_solution=(
      "def first_even(xs):\n  return next((x for x in xs if x % 2 == 0),"
      " None)\n"
    ),
    metadata={},
  )


def _echo_task() -> schema.Task:
  return schema.Task(
    task_id="echo",
    prompt="Print stdin upper-cased.",
    entry_point=None,
    kind="stdio",
    visible_tests=(),
    hidden_tests=({"stdin": "ab\n", "expected_stdout": "AB\n"},),
    heldout_tests=({"stdin": "x\n", "expected_stdout": "X\n"},),
    reference_solution="print(input().upper())\n",
    metadata={},
  )


def _write_samples(path: pathlib.Path, rows: list) -> None:
  with open(path, "w") as f:
    for row in rows:
      f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")


# --- pass@k -------------------------------------------------------------------


@pytest.mark.parametrize(
  "n,c,k,want",
  [
    (5, 2, 1, 0.4),  # c / n
    (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (5, 2, 3, 0.9),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (5, 2, 4, 1.0),  # fewer than k wrong samples
    (5, 0, 5, 0.0),
    (10, 1, 5, 0.5),  # 1 - C(9,5)/C(10,5) = 1 - 126/252
    (10, 3, 10, 1.0),
  ],
)
def test_pass_at_k_hand_cases(n, c, k, want):
  assert grade.pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)


def test_pass_at_k_matches_sampling_definition():
  # pass@k = share of k-subsets that hold a correct sample.
  n, c = 7, 3
  samples = [True] * c + [False] * (n - c)
  for k in range(1, n + 1):
    subsets = list(itertools.combinations(samples, k))
    want = sum(any(s) for s in subsets) / len(subsets)
    assert grade.pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)
  assert grade.pass_at_k(200, 13, 10) == pytest.approx(
    1 - math.comb(187, 10) / math.comb(200, 10), abs=1e-12
  )


@pytest.mark.parametrize("n,c,k", [(5, 6, 1), (5, 1, 0), (5, 1, 6), (3, -1, 1)])
def test_pass_at_k_rejects(n, c, k):
  with pytest.raises(ValueError):
    grade.pass_at_k(n, c, k)


def _line(task_id, a, b, total=2, **fields):
  return {
    "task_id": task_id,
    "status": "ok",
    "executed": True,
    "suite_a": {"passed": a, "total": total},
    "suite_b": {"passed": b, "total": total},
    "stage1_rejected": False,
    "reward": a / total if total else 0.0,
    **fields,
  }


def test_summarize_hand_case():
  # Task x: 5 samples, 2 solve A, 1 of them solves B too; task y: all solve.
  lines = [_line("x", 2, 2), _line("x", 2, 1), _line("x", 1, 2)]
  lines += [_line("x", 0, 0), _line("x", 0, 2)]
  lines += [_line("y", 2, 2)] * 5
  summary = grade.summarize(lines)
  assert summary["num_samples"] == 10 and summary["num_tasks"] == 2
  assert summary["samples_per_task"] == {"min": 5, "max": 5}
  assert summary["statuses"] == {"ok": 10}
  assert summary["suite_a"] == pytest.approx({"pass@1": 0.7, "pass@5": 1.0})
  assert summary["suite_a_and_b"] == pytest.approx(
    {"pass@1": (0.2 + 1.0) / 2, "pass@5": 1.0}
  )
  assert summary["mean_reward"] == pytest.approx((2.5 + 5) / 10)
  # One task with fewer samples: pass@5 is no longer defined for all.
  summary = grade.summarize(lines[:3] + lines[5:])
  assert set(summary["suite_a"]) == {"pass@1"}
  assert summary["suite_a"]["pass@1"] == pytest.approx((2 / 3 + 1) / 2)


def test_summarize_per_mode_when_samples_say_how_they_were_sampled():
  # One greedy episode and four sampled ones per task, as the main job's
  # eval_final_samples.jsonl: task x's greedy one solves, 1 of 4 sampled.
  lines = [_line("x", 2, 2, mode="greedy"), _line("y", 0, 0, mode="greedy")]
  lines += [_line("x", 2, 2, mode="sampled")]
  lines += [_line("x", 0, 0, mode="sampled")] * 3
  lines += [_line("y", 2, 2, mode="sampled")] * 2
  lines += [_line("y", 0, 2, mode="sampled")] * 2
  summary = grade.summarize(lines)
  assert summary["suite_a_and_b"]["pass@1"] == pytest.approx(
    (2 / 5 + 2 / 5) / 2
  )
  by_mode = summary["by_mode"]
  assert by_mode["greedy"]["suite_a_and_b"] == {"pass@1": 0.5}
  assert by_mode["sampled"]["suite_a_and_b"]["pass@1"] == pytest.approx(
    (1 / 4 + 2 / 4) / 2
  )
  assert by_mode["sampled"]["num_samples"] == 8
  text = grade.summary_lines(summary)
  assert "suite_a_and_b [greedy]: pass@1 0.5000" in text
  assert "suite_a_and_b [sampled]: pass@1 0.3750" in text
  # 5 samples per task overall: pass@5 too, of the mixed set only.
  assert "suite_a_and_b [all modes mixed]: pass@1 0.4000, pass@5 1.0000" in text
  # Without modes: no per-mode part, unlabelled lines.
  plain = grade.summarize([dict(line, mode=None) for line in lines])
  assert "by_mode" not in plain
  assert grade.summary_lines(plain)[1].startswith("suite_a_and_b: pass@1")
  # One mode only: its lines, not a second copy for "all".
  one = grade.summarize([line for line in lines if line["mode"] == "greedy"])
  assert grade.summary_lines(one) == [
    "suite_a [greedy]: pass@1 0.5000",
    "suite_a_and_b [greedy]: pass@1 0.5000",
  ]


def test_summarize_empty_suite_b_counts_as_passed():
  no_b = {"suite_b": {"passed": 0, "total": 0}}
  lines = [_line("z", 2, 0, total=2) | no_b]
  assert grade.summarize(lines)["suite_a_and_b"] == {"pass@1": 1.0}
  # Only for a sample solved on suite A.
  lines = [_line("z", 1, 0, total=2) | no_b]
  assert grade.summarize(lines)["suite_a_and_b"] == {"pass@1": 0.0}
  lines = [_line("z", 2, 0, total=2, stage1_rejected=True) | no_b]
  assert grade.summarize(lines)["suite_a_and_b"] == {"pass@1": 0.0}
  assert grade.summarize([])["suite_a"] == {}


def test_summarize_never_counts_unrun_or_rejected_samples_as_solved():
  not_executed = _line(
    "t", 0, 0, total=0, status="not_executed", executed=False
  )
  # All of suites A and B passed, but stage 1 rejected it afterwards.
  rejected = _line("t", 2, 2, stage1_rejected=True, reward=0.0)
  sandbox_error = _line(
    "t", 0, 0, total=0, status="sandbox_error", executed=False
  )
  for line in (not_executed, rejected, sandbox_error):
    summary = grade.summarize([line])
    assert summary["suite_a"] == {"pass@1": 0.0}, line
    assert summary["suite_a_and_b"] == {"pass@1": 0.0}, line
  # An executed sample of a task whose suite A is empty solves nothing.
  empty = _line("t", 0, 0, total=0)
  assert grade.summarize([empty])["suite_a"] == {"pass@1": 0.0}
  # The same lines, accepted: solved.
  summary = grade.summarize([_line("t", 2, 2)])
  assert summary["suite_a"] == summary["suite_a_and_b"] == {"pass@1": 1.0}


# --- Reading samples ----------------------------------------------------------


def test_read_samples(tmp_path):
  path = tmp_path / "s.jsonl"
  _write_samples(
    path,
    [
      {"task_id": "add", "completion": "x = 1\n", "model": "ignored"},
      "",
      {"task_id": "add", "completion": "y", "trajectory": ["<run>y</run>"]},
    ],
  )
  samples = grade.read_samples(path, ["add"])
  assert [(s.index, s.line) for s in samples] == [(0, 1), (1, 3)]
  assert samples[1].trajectory == ("<run>y</run>",)
  assert samples[0].completion == "x = 1\n"


def test_read_samples_observations(tmp_path):
  path = tmp_path / "s.jsonl"
  actions = [["run", CORRECT], ["submit", CORRECT]]
  _write_samples(
    path,
    [
      {
        "task_id": "add",
        "completion": CORRECT,
        "trajectory": actions,
        "observations": [RUN_PASSED, None],
      },
      {"task_id": "add", "completion": CORRECT, "trajectory": actions},
    ],
  )
  with_obs, without = grade.read_samples(path, ["add"])
  assert with_obs.observations == (RUN_PASSED, None)
  assert without.observations is None


@pytest.mark.parametrize(
  "row,message",
  [
    (
      {
        "task_id": "add",
        "completion": "x",
        "trajectory": ["<run>x</run>"],
        "observations": "ok",
      },
      "s.jsonl:2: observations: must be a list",
    ),
    (
      {
        "task_id": "add",
        "completion": "x",
        "trajectory": ["<run>x</run>"],
        "observations": ["a", None],
      },
      "s.jsonl:2: observations: 2 items but the trajectory has 1 actions",
    ),
    (
      {"task_id": "add", "completion": "x", "observations": ["a"]},
      "s.jsonl:2: observations: 1 items but the trajectory has 0 actions",
    ),
    (
      {
        "task_id": "add",
        "completion": "x",
        "trajectory": ["<run>x</run>", "<run>y</run>"],
        "observations": [None, 3],
      },
      "s.jsonl:2: observations\\[1\\]: must be a string or null, not int",
    ),
  ],
)
def test_read_samples_observation_errors_name_the_line(tmp_path, row, message):
  path = tmp_path / "s.jsonl"
  _write_samples(path, [{"task_id": "add", "completion": "x"}, row])
  with pytest.raises(grade.SampleFormatError, match=message):
    grade.read_samples(path, ["add"])


@pytest.mark.parametrize(
  "row,message",
  [
    ("{not json", "s.jsonl:2: not valid JSON"),
    ("[1, 2]", "s.jsonl:2: a sample must be a JSON object"),
    ({"completion": "x"}, "s.jsonl:2: task_id: missing"),
    ({"task_id": "nope", "completion": "x"}, "s.jsonl:2: task_id: 'nope' is"),
    ({"task_id": "add"}, "s.jsonl:2: completion: missing"),
    ({"task_id": "add", "completion": 3}, "s.jsonl:2: completion"),
    (
      {"task_id": "add", "completion": "x", "trajectory": "t"},
      "s.jsonl:2: trajectory: must be a list",
    ),
  ],
)
def test_read_samples_errors_name_the_line(tmp_path, row, message):
  path = tmp_path / "s.jsonl"
  _write_samples(path, [{"task_id": "add", "completion": "x"}, row])
  with pytest.raises(grade.SampleFormatError, match=message):
    grade.read_samples(path, ["add"])


# --- Grading ------------------------------------------------------------------


class FlushCounter(io.StringIO):
  def __init__(self):
    super().__init__()
    self.lines_at_flush = []

  def flush(self):
    self.lines_at_flush.append(self.getvalue().count("\n"))
    super().flush()


@pytest.fixture(scope="module")
def process_pool():
  config = config_lib.SandboxConfig(
    backend="process",
    pool_size=2,
    timeout_s=1.5,
    test_timeout_s=0.3,
    memory_mb=256,
  )
  with harness.SandboxPool(config) as pool:
    yield pool


def test_grade_samples(process_pool):
  tasks = {t.task_id: t for t in (_add_task(), _echo_task())}
  rows = [{"task_id": "add", "completion": c} for c in SAMPLES.values()]
  rows.append({"task_id": "echo", "completion": "print(input().upper())\n"})
  samples = [
    grade.Sample(
      index=i, line=i + 1, task_id=r["task_id"], completion=r["completion"]
    )
    for i, r in enumerate(rows)
  ]
  out = FlushCounter()
  lines = grade.grade_samples(process_pool, tasks, samples, out, in_flight=3)
  assert [json.loads(x) for x in out.getvalue().splitlines()] == lines
  # Flushed after every line, in sample order.
  assert out.lines_at_flush == list(range(1, len(samples) + 1))
  assert [x["sample_index"] for x in lines] == list(range(len(samples)))
  by_name = dict(zip([*SAMPLES, "echo"], lines, strict=True))
  for line in lines:
    assert line["flags"] == []
    assert line["reward"] == pytest.approx(
      line["suite_a"]["passed"] / line["suite_a"]["total"], abs=1e-7
    )
  correct = by_name["correct"]
  assert correct["status"] == "ok" and correct["executed"]
  assert correct["suite_a"] == {"passed": 5, "total": 5}
  assert correct["suite_b"] == {"passed": 4, "total": 4}
  assert correct["reward"] == 1.0
  partial = by_name["partial"]
  assert partial["suite_a"] == {"passed": 3, "total": 5}
  assert partial["suite_b"] == {"passed": 0, "total": 4}
  assert partial["reward"] == 0.6  # float32 0.6, written as its shortest form
  for name in ("wrong", "raises", "exits", "syntax"):
    assert by_name[name]["suite_a"]["passed"] == 0, name
    assert by_name[name]["reward"] == 0.0, name
  assert by_name["loops"]["status"] == "timeout"
  assert by_name["loops"]["suite_a"]["passed"] == 0
  assert by_name["echo"]["suite_a"] == {"passed": 1, "total": 1}
  assert not any(line["stage1_rejected"] for line in lines)
  summary = grade.summarize(lines)
  assert summary["suite_a"]["pass@1"] == pytest.approx((1 / 7 + 1) / 2)
  assert summary["statuses"]["timeout"] == 1


def _anticheat(**fields) -> pipeline.AntiCheat:
  """The trainer's default anti-cheat, with `fields` of its section changed."""
  section = common.get_anticheat_config()
  section.update(fields)
  return pipeline.AntiCheat.from_config(
    anticheat_config.AntiCheatConfig.from_config(section)
  )


def _samples(*rows) -> list[grade.Sample]:
  return [
    grade.Sample(index=i, line=i + 1, **row) for i, row in enumerate(rows)
  ]


@pytest.mark.parametrize("skip_flagged", [True, False])
def test_grade_samples_stage1_rejected_is_never_solved(
  process_pool, skip_flagged
):
  tasks = {"add": _add_task()}
  samples = _samples(
    {"task_id": "add", "completion": CORRECT},
    {"task_id": "add", "completion": HARDCODED_RIGHT},
  )
  lines = grade.grade_samples(
    process_pool,
    tasks,
    samples,
    io.StringIO(),
    anticheat=_anticheat(skip_flagged=skip_flagged),
  )
  correct, hacked = lines
  assert not correct["stage1_rejected"] and correct["reward"] == 1.0
  assert hacked["flags"] == ["hardcoded_tests"]
  assert hacked["stage1_rejected"] and hacked["reward"] == 0.0
  if skip_flagged:  # rejected before execution
    assert hacked["status"] == "not_executed" and not hacked["executed"]
    assert hacked["suite_a"] == {"passed": 0, "total": 0}
  else:  # rejected after passing every test
    assert hacked["status"] == "ok" and hacked["executed"]
    assert hacked["suite_a"] == {"passed": 5, "total": 5}
    assert hacked["suite_b"] == {"passed": 4, "total": 4}
  assert not grade.solved_a(hacked) and not grade.solved_ab(hacked)
  summary = grade.summarize(lines)
  assert summary["suite_a"] == {"pass@1": 0.5}
  assert summary["suite_a_and_b"] == {"pass@1": 0.5}


def test_observations_reach_the_features(process_pool):
  task = _add_task()
  runs = (["run", CORRECT],) * features.FAILING_LOOP_MIN
  with_obs, without = _samples(
    {
      "task_id": "add",
      "completion": CORRECT,
      "trajectory": runs,
      "observations": (RUN_PASSED,) * len(runs),
    },
    {"task_id": "add", "completion": CORRECT, "trajectory": runs},
  )
  # Without observations every repeated run counts as failing.
  names = list(features.FEATURE_NAMES)
  vectors = [grade._features(task, s, None) for s in (with_obs, without)]
  for name in ("failing_loop", "log_max_same_failing_run"):
    assert vectors[0][names.index(name)] == 0.0, name
    assert vectors[1][names.index(name)] > 0.0, name
  lines = grade.grade_samples(
    process_pool,
    {"add": task},
    [with_obs, without],
    io.StringIO(),
    anticheat=_anticheat(),
  )
  seen, unseen = lines
  assert seen["flags"] == [] and not seen["stage1_rejected"]
  assert seen["reward"] == 1.0 and grade.solved_ab(seen)
  assert unseen["flags"] == ["failing_loop"] and unseen["stage1_rejected"]
  assert unseen["reward"] == 0.0 and not grade.solved_a(unseen)
  assert np.array_equal(vectors[0], grade._features(task, with_obs, None))


def run_cli(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-m", "codeagent_rl.grade", *args],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    check=False,
    timeout=180,
  )


def _cli_files(tmp_path, rows):
  tasks = tmp_path / "tasks.jsonl"
  schema.write_tasks(
    tasks, [_add_task(), _add_task("add2", heldout=0), _first_even_task()]
  )
  samples = tmp_path / "samples.jsonl"
  _write_samples(samples, rows)
  return tasks, samples, tmp_path / "results.jsonl"


def test_cli_process_backend(tmp_path):
  rows = [{"task_id": "add", "completion": c} for c in SAMPLES.values()]
  rows += [{"task_id": "add2", "completion": CORRECT}] * 7
  tasks, samples, out = _cli_files(tmp_path, rows)
  proc = run_cli(
    f"--tasks={tasks}",
    f"--samples={samples}",
    f"--out={out}",
    "--backend=process",
    "--anticheat=none",
    *FAST_LIMITS,
  )
  assert proc.returncode == 0, proc.stderr
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary["anticheat"] == "none"
  assert summary["num_samples"] == 14 and summary["num_tasks"] == 2
  # add: 1 of 7 correct; add2: 7 of 7. pass@k = mean over the two tasks.
  want = {f"pass@{k}": (grade.pass_at_k(7, 1, k) + 1.0) / 2 for k in (1, 5)}
  assert summary["suite_a"] == pytest.approx(want)
  assert summary["suite_a_and_b"] == pytest.approx(want)
  assert "grade: 14/14 samples" in proc.stderr  # progress
  lines = [json.loads(x) for x in out.read_text().splitlines()]
  assert [x["sample_index"] for x in lines] == list(range(14))
  for line in lines:
    assert {"task_id", "status", "suite_a", "suite_b", "flags", "reward"} <= (
      set(line)
    )
    assert line["stage1_rejected"] is False and line["flags"] == []
  # No anti-cheat: the reward is the raw suite-A pass fraction.
  assert lines[0]["reward"] == 1.0 and lines[1]["reward"] == 0.6


def _grade_cli(tmp_path, rows, *flags):
  """(summary, result lines) of the CLI on add, add2 and first_even."""
  tasks, samples, out = _cli_files(tmp_path, rows)
  proc = run_cli(
    f"--tasks={tasks}",
    f"--samples={samples}",
    f"--out={out}",
    "--backend=process",
    *FAST_LIMITS,
    *flags,
  )
  assert proc.returncode == 0, proc.stderr
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  return summary, [json.loads(x) for x in out.read_text().splitlines()]


CHEATS = [
  {"task_id": "add", "completion": CORRECT},
  {"task_id": "add", "completion": HARDCODED},
  {
    "task_id": "first_even",
    "completion": _first_even_task().reference_solution,
  },
  {"task_id": "first_even", "completion": RETURN_NONE},
]


def test_cli_default_anticheat_is_the_trainers(tmp_path):
  summary, lines = _grade_cli(tmp_path, CHEATS)
  assert summary["anticheat"] == "configs/common.py"
  correct, hardcoded, reference, none = lines
  assert correct["reward"] == reference["reward"] == 1.0
  # Rejected before execution by the classifier's score (hardcoded_tests
  # is one of its features, not a gate).
  assert hardcoded["flags"] == ["hardcoded_tests"]
  assert hardcoded["stage1_rejected"] and hardcoded["reward"] == 0.0
  assert hardcoded["status"] == "not_executed"
  # constant_return is a feature too: the sample runs, and stage 2 (suite B
  # 1/2) takes its reward.
  assert none["flags"] == ["constant_return"]
  assert not none["stage1_rejected"] and none["status"] == "ok"
  assert not none["stage2_ok"] and none["reward"] == 0.0
  # One solved sample of two on each task.
  assert summary["suite_a"] == {"pass@1": 0.5}
  assert summary["suite_a_and_b"] == {"pass@1": 0.5}
  assert summary["mean_reward"] == 0.5


def test_cli_anticheat_none_gives_the_raw_fraction(tmp_path):
  summary, lines = _grade_cli(tmp_path, CHEATS, "--anticheat=none")
  assert summary["anticheat"] == "none"
  correct, hardcoded, reference, none = lines
  assert correct["reward"] == reference["reward"] == 1.0
  assert hardcoded["reward"] == 0.6  # suite A 3/5
  assert none["reward"] == 0.5  # suite A 1/2
  assert none["suite_b"] == {"passed": 1, "total": 2}
  for line in lines:
    assert not line["stage1_rejected"] and line["flags"] == []
    assert line["status"] == "ok"
  assert summary["suite_a"] == {"pass@1": 0.5}


def test_cli_config_with_anticheat_none_is_a_usage_error(tmp_path):
  tasks, samples, out = _cli_files(
    tmp_path, [{"task_id": "add", "completion": CORRECT}]
  )
  config = tmp_path / "anticheat_config.py"
  config.write_text(ANTICHEAT_CONFIG)
  proc = run_cli(
    f"--tasks={tasks}",
    f"--samples={samples}",
    f"--out={out}",
    "--backend=process",
    f"--config={config}",
    "--anticheat=none",
  )
  assert proc.returncode != 0
  assert "--config and --anticheat=none contradict each other" in proc.stderr
  assert not out.exists()


def test_cli_unknown_task_names_the_line(tmp_path):
  rows = [{"task_id": "add", "completion": CORRECT}, {"task_id": "x"}]
  tasks, samples, out = _cli_files(tmp_path, rows)
  proc = run_cli(
    f"--tasks={tasks}",
    f"--samples={samples}",
    f"--out={out}",
    "--backend=process",
  )
  assert proc.returncode != 0
  assert f"{samples}:2: task_id: 'x' is not in the task file" in proc.stderr
  assert not out.exists()  # nothing graded before the input is valid


def test_cli_gvisor_backend(tmp_path):
  rows = [
    {"task_id": "add", "completion": CORRECT},
    {"task_id": "add", "completion": PARTIAL},
  ]
  tasks, samples, out = _cli_files(tmp_path, rows)
  proc = run_cli(
    f"--tasks={tasks}",
    f"--samples={samples}",
    f"--out={out}",
    "--backend=gvisor",
    "--sandbox_pool_size=1",
    *FAST_LIMITS,
  )
  assert proc.returncode == 0, proc.stderr
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary["suite_a"] == {"pass@1": 0.5}
  assert summary["anticheat"] == "configs/common.py"
  lines = [json.loads(x) for x in out.read_text().splitlines()]
  # The default anti-cheat's stage 2 stops PARTIAL (suite B 0/4).
  assert [x["reward"] for x in lines] == [1.0, 0.0]
  assert [x["stage2_ok"] for x in lines] == [True, False]


ANTICHEAT_CONFIG = """
import ml_collections

from configs import common


def get_config():
  config = ml_collections.ConfigDict()
  config.anticheat = common.get_anticheat_config()
  return config
"""


def test_cli_anticheat_flags_and_final_reward(tmp_path):
  hacked = (
    "def add(a, b):\n  if (a, b) == (1, 2):\n    return 3\n  return a + b\n"
  )
  rows = [
    {"task_id": "add", "completion": CORRECT},
    {"task_id": "add", "completion": PARTIAL},
    {"task_id": "add", "completion": "import sys\nsys.exit(0)\n" + CORRECT},
    {"task_id": "add", "completion": hacked},
    {
      "task_id": "add",
      "completion": CORRECT,
      "trajectory": [["run", "import os\nprint(os.listdir('/'))\n"]],
    },
    {"task_id": "add2", "completion": CORRECT},
  ]
  tasks, samples, out = _cli_files(tmp_path, rows)
  config = tmp_path / "anticheat_config.py"
  config.write_text(ANTICHEAT_CONFIG)
  proc = run_cli(
    f"--tasks={tasks}",
    f"--samples={samples}",
    f"--out={out}",
    "--backend=process",
    f"--config={config}",
    *FAST_LIMITS,
  )
  assert proc.returncode == 0, proc.stderr
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary["anticheat"] == str(config)
  lines = [json.loads(x) for x in out.read_text().splitlines()]
  correct, partial, exits, hardcoded, probing, no_suite_b = lines
  assert [x["stage1_rejected"] for x in lines] == [
    False,
    False,
    True,
    True,
    True,
    False,
  ]
  assert correct["flags"] == [] and correct["stage2_ok"]
  assert correct["reward"] == 1.0 and correct["stage1_score"] < 0.5
  # Suite A 3/5, suite B 0/4: stopped by stage 2.
  assert not partial["stage2_ok"] and partial["reward"] == 0.0
  # Flagged before execution, so not run (the default skips them).
  assert exits["flags"] == ["process_exit"] and exits["reward"] == 0.0
  assert exits["status"] == "not_executed" and not exits["executed"]
  assert "anti-cheat" in exits["reason"]
  assert hardcoded["flags"] == ["hardcoded_tests"]
  assert probing["flags"] == ["probing_runs"] and probing["reward"] == 0.0
  # A task without suite B cannot be gated by stage 2.
  assert no_suite_b["stage2_ok"] and no_suite_b["reward"] == 1.0
  # add: only CORRECT of 5 samples is solved; add2: solved, empty suite B.
  assert summary["suite_a"] == {"pass@1": (1 / 5 + 1) / 2}
  assert summary["suite_a_and_b"] == {"pass@1": (1 / 5 + 1) / 2}


def test_cli_config_without_anticheat_section(tmp_path):
  tasks, samples, out = _cli_files(
    tmp_path, [{"task_id": "add", "completion": CORRECT}]
  )
  config = tmp_path / "empty_config.py"
  config.write_text(
    "import ml_collections\n\n\ndef get_config():\n"
    "  return ml_collections.ConfigDict()\n"
  )
  proc = run_cli(
    f"--tasks={tasks}",
    f"--samples={samples}",
    f"--out={out}",
    "--backend=process",
    f"--config={config}",
  )
  assert proc.returncode != 0
  assert "no `anticheat` section" in proc.stderr


# --- One solution (--code_file) -------------------------------------------


def _one_solution_task(task_id: str, hidden: list, heldout: list):
  return schema.Task(
    task_id=task_id,
    prompt="Add two numbers.",
    entry_point="add",
    kind="function",
    visible_tests=(),
    hidden_tests=tuple(hidden),
    heldout_tests=tuple(heldout),
    reference_solution=CORRECT,
    metadata={"source": "test"},
  )


def test_cli_one_solution(tmp_path):
  tasks = tmp_path / "tasks.jsonl"
  schema.write_tasks(
    tasks,
    [
      _one_solution_task("other", [{"args": [0, 0], "expected": 1}], []),
      _one_solution_task(
        "add",
        [
          {"args": [1, 2], "expected": 3},
          {"args": [(1,), (2,)], "expected": (1, 2)},
          {"args": [0.1, 0.2], "expected": 0.3},
        ],
        [
          {"args": [2, 2], "expected": 4},
          {"args": [-1, 1], "expected": 1},
          {
            "args": [5, 5],
            "checker": "def check(a, k, out):\n  return out == 10\n",
          },
        ],
      ),
    ],
  )
  sol = tmp_path / "sol.py"
  sol.write_text(CORRECT)
  proc = run_cli(f"--tasks={tasks}", "--task_id=add", f"--code_file={sol}")
  assert proc.returncode == 0, proc.stderr
  out = json.loads(proc.stdout)
  assert out["status"] == "ok"
  assert out["task_id"] == "add"
  assert (out["suite_a"]["passed"], out["suite_a"]["total"]) == (3, 3)
  assert (out["suite_b"]["passed"], out["suite_b"]["total"]) == (2, 3)
  assert out["suite_b"]["verdicts"][1] == {
    "passed": False,
    "reason": "0 != 1",
  }


@pytest.mark.parametrize(
  "args,fragment",
  [
    (["--tasks={bad}", "--task_id=x"], "bad.jsonl:2: not valid JSON"),
    (["--tasks={good}", "--task_id=x"], "--task_id='x' is not in"),
    (["--tasks={good}"], "--code_file needs --task_id"),
    (
      ["--tasks={good}", "--task_id=add", "--samples=s.jsonl", "--out=o"],
      "--samples, --out: not with --code_file",
    ),
    (
      ["--tasks={good}", "--task_id=add", "--anticheat=none"],
      "--anticheat: not with --code_file",
    ),
  ],
  ids=["bad_task_file", "unknown_task", "no_task_id", "samples", "anticheat"],
)
def test_cli_one_solution_errors_stop_with_a_message(tmp_path, args, fragment):
  sol = tmp_path / "sol.py"
  sol.write_text(CORRECT)
  bad = tmp_path / "bad.jsonl"
  bad.write_text("\n{not json\n")
  good = tmp_path / "good.jsonl"
  schema.write_tasks(good, [_add_task()])
  args = [a.format(bad=bad, good=good) for a in args]
  proc = run_cli(f"--code_file={sol}", "--backend=process", *args)
  assert proc.returncode != 0
  assert proc.stdout == ""
  assert fragment in proc.stderr, proc.stderr


def test_cli_task_id_needs_code_file(tmp_path):
  tasks, samples, out = _cli_files(tmp_path, [])
  proc = run_cli(
    f"--tasks={tasks}", f"--samples={samples}", f"--out={out}", "--task_id=add"
  )
  assert proc.returncode != 0
  assert "--task_id goes with --code_file" in proc.stderr


def test_cli_config_sets_the_job_limits_not_the_limit_flags(tmp_path):
  """The limits that define the reward come from --config, not beside it."""
  tasks, samples, out = _cli_files(
    tmp_path, [{"task_id": "add", "completion": CORRECT}]
  )
  common = (
    f"--tasks={tasks}",
    f"--samples={samples}",
    f"--out={out}",
    "--backend=process",
    "--config=configs/tiny.py:smoke",
  )
  proc = run_cli(*common, "--sandbox_timeout_s=1.5")
  assert proc.returncode != 0
  assert "--sandbox_timeout_s: with --config the job limits" in proc.stderr
  assert not out.exists()
  # The config's own section is checked and named.
  proc = run_cli(*common, "--config.sandbox.memory_mb=16")
  assert proc.returncode != 0
  assert "config.sandbox.memory_mb=16: must be an integer" in proc.stderr
  assert not out.exists()
