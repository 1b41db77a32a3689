"""Tests of `codeagent_rl.tasks.convert`: each public format, by hand.

Every format gets a small file in its public shape (with malformed records)
written here; the converted tasks are checked field by field, and their
reference solutions (or, for LiveCodeBench, which ships none, a solution
written here) are graded by the real judge in the process sandbox.
"""

import base64
import gzip
import json
import os
import pathlib
import pickle
import subprocess
import sys
import zlib

import pytest

from codeagent_rl.tasks import convert
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks.formats import livecodebench
from codeagent_rl.tasks.formats import mbpp
from codeagent_rl.tasks.suite_b import augment

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# Few candidates: suite B stays small and the tests fast.
SMALL_AUGMENT = augment.AugmentConfig(
  candidates_per_kind=8, rounds=1, candidates_per_round=8
)
CONFIG = convert.ConvertConfig(max_tests=4, augment=SMALL_AUGMENT)


def _write(path, records, extra_lines=()) -> str:
  with open(path, "w", encoding="utf-8") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")
    for line in extra_lines:
      f.write(line + "\n")
  return str(path)


def _tasks(path) -> dict[str, schema.Task]:
  return {t.task_id: t for t in schema.read_tasks(path)}


def _convert(fmt, records, tmp_path, pool=None, extra_lines=()):
  src = _write(tmp_path / f"{fmt}.jsonl", records, extra_lines)
  out = tmp_path / f"{fmt}.tasks.jsonl"
  report = convert.convert(fmt, src, str(out), pool=pool, config=CONFIG)
  return report, _tasks(out), src


def _passes_all(pool, task, code) -> judge.Grade:
  graded = judge.grade(pool, task, code)
  assert graded.suite_a.passed == graded.suite_a.total > 0, graded.to_json()
  assert graded.suite_b.passed == graded.suite_b.total, graded.to_json()
  return graded


def _stdins(tests):
  return [t["stdin"] for t in tests]


# --- APPS --------------------------------------------------------------------

# Sums the integers of a line; stdin inputs of six lengths, out of order.
_SUM_INPUTS = [
  "1 2\n",
  "1 2 3 4 5 6\n",
  "1\n",
  "1 2 3 4\n",
  ["1 2 3"],
  "1 2 3 4 5\n",
]
APPS_STDIO = {
  "problem_id": 10,
  "question": "Print the sum of the integers on the line.",
  "input_output": json.dumps(
    {
      "inputs": _SUM_INPUTS,
      "outputs": ["3\n", "21\n", "1\n", "10\n", "6\n", "15\n"],
    }
  ),
  # The first solution is Python 2: the converter takes the second.
  "solutions": json.dumps(
    [
      "print sum(map(int, raw_input().split()))",
      "print(sum(map(int, input().split())))",
    ]
  ),
}
# LeetCode style (TACO): a class method; outputs wrapped in one-item lists.
APPS_FUNCTION = {
  "id": "fn-1",
  "question": "Add k to every element of nums.",
  "starter_code": "class Solution:\n    def addK(self, nums, k):\n        ",
  "input_output": {
    "fn_name": "addK",
    "inputs": [[[1, 2], 3], [[5], 0], [[], 7], "not an argument list"],
    "outputs": [[[4, 5]], [[5]], [[]], [0]],
  },
  "solutions": [
    "class Solution:\n    def addK(self, nums, k):\n"
    "        return [x + k for x in nums]\n"
  ],
}
APPS_BAD = [
  {"problem_id": 11, "question": "q", "input_output": "{not json"},
  {"problem_id": 12, "input_output": {"inputs": ["1\n"], "outputs": ["1\n"]}},
  {
    "problem_id": 13,
    "question": "q",
    "input_output": {"inputs": [], "outputs": []},
  },
  {**APPS_STDIO, "question": "the same id again"},
]


def test_apps_without_a_sandbox(tmp_path):
  report, tasks, src = _convert(
    "apps",
    [APPS_STDIO, APPS_FUNCTION, *APPS_BAD],
    tmp_path,
    extra_lines=["{this line is not JSON"],
  )
  assert (report.read, report.written, report.skipped) == (7, 2, 5)
  assert report.skip_reasons == {
    "input_output: not valid JSON": 1,
    "no usable tests": 1,
    "not JSON": 1,
    "question: missing": 1,
    "task_id: duplicate": 1,
  }
  assert report.dropped_tests == {
    "input_output: a functional input is not an argument list": 1
  }
  assert report.references == {"not_run": 2}
  assert report.problems[0].startswith(f"{src}:3: input_output: not valid JSON")
  assert f"{src}:4: question: missing" in report.problems
  assert any(p.startswith(f"{src}:7: not valid JSON") for p in report.problems)

  stdio = tasks["apps/10"]
  assert (stdio.kind, stdio.entry_point) == ("stdio", None)
  # The cap keeps the 4 longest inputs, longest first; the 2 left out are
  # suite B ("overflow"), longest first too.
  assert _stdins(stdio.hidden_tests) == [
    "1 2 3 4 5 6\n",
    "1 2 3 4 5\n",
    "1 2 3 4\n",
    "1 2 3\n",
  ]
  assert _stdins(stdio.heldout_tests) == ["1 2\n", "1\n"]
  assert stdio.metadata["suite_b"] == "overflow"
  # Visible: the first tests of suite A in source order.
  assert _stdins(stdio.visible_tests) == ["1 2\n", "1 2 3 4 5 6\n"]
  assert stdio.reference_solution.startswith("print(sum(")
  assert stdio.metadata["reference_from"] == "solutions[1]"

  fn = tasks["apps/fn-1"]
  assert (fn.kind, fn.entry_point) == ("function", "addK")
  assert fn.hidden_tests == (
    {"args": [[1, 2], 3], "expected": [4, 5]},
    {"args": [[5], 0], "expected": [5]},
    {"args": [[], 7], "expected": []},
  )
  assert fn.heldout_tests == ()
  assert fn.metadata["outputs_unwrapped"] is True
  assert fn.metadata["judge"] == {"int_accepts_float": True}
  assert "`addK`" in fn.prompt and "class Solution" in fn.prompt


def test_apps_graded_in_the_sandbox(tmp_path, module_pool):
  report, tasks, _ = _convert(
    "apps", [APPS_STDIO, APPS_FUNCTION], tmp_path, pool=module_pool
  )
  assert report.references == {"passed": 2}
  assert report.suite_b == {"augmented": 1, "overflow": 1}
  fn = tasks["apps/fn-1"]
  assert fn.metadata["suite_b"] == "augmented"
  assert 0 < len(fn.heldout_tests) <= CONFIG.max_tests
  seen = {json.dumps(t["args"]) for t in fn.hidden_tests}
  assert not seen & {json.dumps(t["args"]) for t in fn.heldout_tests}
  for task in tasks.values():
    _passes_all(module_pool, task, task.reference_solution)
  # A policy's answer: a top-level function, no class.
  _passes_all(
    module_pool, fn, "def addK(nums, k):\n  return [x + k for x in nums]\n"
  )
  wrong = judge.grade(module_pool, fn, "def addK(nums, k):\n  return nums\n")
  assert wrong.suite_a.passed < wrong.suite_a.total


def test_json_list_input_names_the_index(tmp_path):
  src = tmp_path / "apps.json"
  src.write_text(json.dumps([APPS_STDIO, {"problem_id": 1}]))
  out = tmp_path / "out.jsonl"
  report = convert.convert("apps", str(src), str(out), config=CONFIG)
  assert (report.read, report.written) == (2, 1)
  assert report.problems == (f"{src}[1]: question: missing",)


# --- CodeContests ------------------------------------------------------------

CC_SUM = {
  "name": "1A. Sum",
  "description": "Print a + b.",
  "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
  "private_tests": {
    "input": ["5 5\n", "100 200\n", "1 2\n"],
    "output": ["10\n", "300\n", "3\n"],
  },
  # "5 5\n" is in suite A already: suite B leaves it out.
  "generated_tests": {
    "input": ["5 5\n", "0 0\n", "123456 654321\n"],
    "output": ["10\n", "0\n", "777777\n"],
  },
  "solutions": {
    "language": [2, 1, 3],
    "solution": [
      "int main() { return 0; }",
      "print 1",
      "a, b = map(int, input().split())\nprint(a + b)\n",
    ],
  },
  "difficulty": 7,
}
# A wrong expected output in the source: the reference check reports it.
CC_MUL = {
  "name": "1B. Product",
  "description": "Print a * b.",
  "public_tests": {"input": ["2 3\n"], "output": ["6\n"]},
  "private_tests": {"input": ["4 5\n", "7 7\n"], "output": ["20\n", "50\n"]},
  "solutions": {
    "language": ["PYTHON3"],
    "solution": ["a, b = map(int, input().split())\nprint(a * b)\n"],
  },
}
CC_BAD = [
  {
    **CC_SUM,
    "name": "1C",
    "private_tests": {"input": ["1\n", "2\n"], "output": ["1\n"]},
  },
  {"name": "1D", "public_tests": CC_SUM["public_tests"]},
]


def test_codecontests(tmp_path, module_pool):
  report, tasks, src = _convert(
    "codecontests", [CC_SUM, CC_MUL, *CC_BAD], tmp_path, pool=module_pool
  )
  assert (report.read, report.written, report.skipped) == (4, 2, 2)
  assert report.skip_reasons == {
    "description: missing": 1,
    "private_tests: inputs and outputs differ in length": 1,
  }
  assert report.problems[0].startswith(f"{src}:3: private_tests: inputs and")
  assert report.dropped_tests == {
    "suite B: input also in suite A or visible": 1
  }
  assert report.suite_b == {"generated_tests": 1, "none": 1}
  assert report.references == {"failed": 1, "passed": 1}

  task = tasks["codecontests/1A. Sum"]
  assert (task.kind, task.entry_point) == ("stdio", None)
  assert _stdins(task.visible_tests) == ["1 2\n"]
  # Private -> A (longest first; equal lengths keep the source order).
  assert _stdins(task.hidden_tests) == ["100 200\n", "5 5\n", "1 2\n"]
  assert _stdins(task.heldout_tests) == ["123456 654321\n", "0 0\n"]
  assert task.metadata["reference_from"] == "solutions[2]"
  assert task.metadata["difficulty"] == 7
  assert task.metadata["reference_check"] == {
    "suite_a": [3, 3],
    "suite_b": [2, 2],
  }
  _passes_all(module_pool, task, task.reference_solution)
  mul = tasks["codecontests/1B. Product"]
  assert mul.metadata["reference_check"]["suite_a"] == [1, 2]


# --- LiveCodeBench -----------------------------------------------------------


def _compressed(value) -> str:
  """LiveCodeBench's encoding: base64(zlib(pickle(value)))."""
  return base64.b64encode(zlib.compress(pickle.dumps(value))).decode()


class _Attack:
  """Unpickling this would run a shell command."""

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return (os.system, (f"touch {self.marker}",))


LCB_PUBLIC = [
  {"input": "[1, 2, 3]\n2", "output": "[3, 4, 5]", "testtype": "functional"}
]
LCB_PRIVATE = [
  {"input": "[]\n5", "output": "[]", "testtype": "functional"},
  {"input": "[10, -1]\n0", "output": "[10, -1]", "testtype": "functional"},
  {"input": "[1]\n1", "output": "[2]", "testtype": "functional"},
  {"input": "not json", "output": "1", "testtype": "functional"},
  {"input": "1\n", "output": "1\n", "testtype": "stdin"},
]
LCB_FUNCTION = {
  "question_id": "3000",
  "question_title": "Add k",
  "question_content": "Add k to every element of nums.",
  "platform": "leetcode",
  "difficulty": "easy",
  "starter_code": (
    "class Solution:\n"
    "    def addK(self, nums: List[int], k: int) -> List[int]:\n        "
  ),
  "public_test_cases": json.dumps(LCB_PUBLIC),
  "private_test_cases": _compressed(json.dumps(LCB_PRIVATE)),
  "metadata": json.dumps({"func_name": "addK"}),
}
LCB_STDIN = {
  "question_id": "abc001_a",
  "question_content": "Print 1 + 2 + ... + n.",
  "platform": "atcoder",
  "public_test_cases": json.dumps(
    [{"input": "3\n", "output": "6\n", "testtype": "stdin"}]
  ),
  "private_test_cases": json.dumps(
    [
      {"input": "1\n", "output": "1\n", "testtype": "stdin"},
      {"input": "100\n", "output": "5050\n", "testtype": "stdin"},
    ]
  ),
  "metadata": "{}",
}
LCB_SUM = "print(sum(range(int(input()) + 1)))\n"
LCB_ADD_K = (
  "class Solution:\n  def addK(self, nums, k):\n"
  "    return [x + k for x in nums]\n"
  "\n\ndef addK(nums, k):\n  return Solution().addK(nums, k)\n"
)


def test_livecodebench(tmp_path, module_pool):
  marker = tmp_path / "pwned"
  attack = {
    **LCB_FUNCTION,
    "question_id": "evil",
    "private_test_cases": _compressed(_Attack(marker)),
  }
  no_func = {**LCB_FUNCTION, "question_id": "nofunc", "metadata": "{}"}
  garbage = {**LCB_STDIN, "question_id": "x", "private_test_cases": "%%%"}
  report, tasks, src = _convert(
    "livecodebench",
    [LCB_FUNCTION, attack, LCB_STDIN, no_func, garbage],
    tmp_path,
    pool=module_pool,
  )
  assert not marker.exists()
  assert (report.read, report.written, report.skipped) == (5, 2, 3)
  assert report.skip_reasons == {
    "metadata.func_name: missing (functional)": 1,
    "private_test_cases: neither JSON nor base64": 1,
    "private_test_cases: pickle refused: it is not plain data": 1,
  }
  refused = next(p for p in report.problems if "pickle refused" in p)
  assert refused.startswith(f"{src}:2: private_test_cases:")
  assert "system" in refused
  assert report.dropped_tests == {
    "private_test_cases: a case of another testtype": 1,
    "private_test_cases: a functional input or output is not JSON": 1,
  }
  assert report.references == {"none": 2}

  fn = tasks["livecodebench/3000"]
  assert (fn.kind, fn.entry_point) == ("function", "addK")
  assert fn.visible_tests == ({"args": [[1, 2, 3], 2], "expected": [3, 4, 5]},)
  assert fn.hidden_tests == (
    {"args": [[10, -1], 0], "expected": [10, -1]},
    {"args": [[1], 1], "expected": [2]},
    {"args": [[], 5], "expected": []},
  )
  assert fn.reference_solution == ""
  assert fn.metadata["platform"] == "leetcode"
  stdin = tasks["livecodebench/abc001_a"]
  assert (stdin.kind, stdin.entry_point) == ("stdio", None)
  assert _stdins(stdin.visible_tests) == ["3\n"]
  assert _stdins(stdin.hidden_tests) == ["100\n", "1\n"]
  _passes_all(module_pool, fn, LCB_ADD_K)
  _passes_all(module_pool, stdin, LCB_SUM)
  wrong = judge.grade(module_pool, stdin, "print(int(input()))\n")
  assert wrong.suite_a.passed == 1


def test_restricted_unpickler_loads_plain_data_only():
  data = {"a": [1, 2.5, None, True], "b": ("x", b"y"), "c": {3}}
  assert livecodebench.unpickle_plain(pickle.dumps(data), "f") == data
  for refused in (os.system, pathlib.Path("x"), Exception("x")):
    with pytest.raises(livecodebench.common.RecordError, match="refused"):
      livecodebench.unpickle_plain(pickle.dumps(refused), "f")


# --- MBPP --------------------------------------------------------------------

MBPP_SIMILAR = {
  "task_id": 2,
  "text": "Write a function to find the shared elements of two tuples.",
  "code": (
    "def similar_elements(a, b):\r\n  return tuple(sorted(set(a) & set(b)))"
  ),
  "test_list": [
    "assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)",
    "assert (3, 4) == similar_elements(a=(1, 2, 3, 4), b=(5, 4, 3))",
    "assert set(similar_elements((1,), (1,))) == {1}",
  ],
  "test_setup_code": "",
  "challenge_test_list": [],
}
MBPP_PRIME = {
  "task_id": 3,
  "text": "Write a python function to identify non-prime numbers.",
  "code": (
    "def is_not_prime(n):\n"
    "  return n < 2 or any(n % d == 0 for d in range(2, int(n ** 0.5) + 1))\n"
  ),
  "test_list": [
    "assert is_not_prime(2) == False",
    "assert is_not_prime(10) == True",
    "assert is_not_prime(35) == True",
  ],
  "test_setup_code": "",
  "challenge_test_list": [
    "assert is_not_prime(97) == False",
    "assert is_not_prime(2) == False",
    "assert other(1) == 2",
  ],
}
MBPP_BAD = [
  {
    "task_id": 4,
    "text": "t",
    "code": "def f(x): return x",
    "test_list": ["assert math.isclose(f(4), 2.0)"],
  },
  {**MBPP_PRIME, "task_id": 5, "test_setup_code": "import math"},
  {
    "task_id": 6,
    "text": "t",
    "code": "def g(x): return x",
    "test_list": ["assert f(1) == 1"],
  },
]


def test_parse_assert():
  assert mbpp.parse_assert("assert f(1, 'a', k=[2]) == {'x': (1,)}") == (
    "f",
    [1, "a"],
    {"k": [2]},
    {"x": (1,)},
  )
  assert mbpp.parse_assert("assert -1.5 == g()") == ("g", [], {}, -1.5)
  assert mbpp.parse_assert("assert f(x) == 1") == mbpp.NOT_LITERAL
  assert mbpp.parse_assert("assert f(*[1]) == 1") == mbpp.NOT_LITERAL
  assert mbpp.parse_assert("assert f(1)") == mbpp.NOT_EQUALITY
  assert mbpp.parse_assert("assert set(f([1])) == {1}") == mbpp.NOT_EQUALITY
  assert mbpp.parse_assert("assert f(1) != 2") == mbpp.NOT_EQUALITY
  assert mbpp.parse_assert("assert f(1) ==") == mbpp.NOT_PYTHON


def test_mbpp(tmp_path, module_pool):
  report, tasks, src = _convert(
    "mbpp",
    [MBPP_SIMILAR, MBPP_PRIME, *MBPP_BAD],
    tmp_path,
    pool=module_pool,
    extra_lines=['["not", "an object"]'],
  )
  assert (report.read, report.written, report.skipped) == (6, 2, 4)
  assert report.skip_reasons == {
    "code: does not define the tested function": 1,
    "not a JSON object": 1,
    "test_list: no usable tests": 1,
    "test_setup_code: not supported": 1,
  }
  assert f"{src}:5: code: does not define the tested function (f)" in (
    report.problems
  )
  assert report.dropped_tests == {
    "challenge_test_list: calls another function than the entry point": 1,
    "suite B: input also in suite A or visible": 1,
    "test_list: not `assert f(...) == value`": 1,
  }
  assert report.suite_b == {"augmented": 1, "challenge_test_list": 1}
  assert report.references == {"passed": 2}

  similar = tasks["mbpp/2"]
  assert (similar.kind, similar.entry_point) == ("function", "similar_elements")
  assert similar.hidden_tests == (
    {
      "args": [],
      "kwargs": {"a": (1, 2, 3, 4), "b": (5, 4, 3)},
      "expected": (3, 4),
    },
    {"args": [(3, 4, 5, 6), (5, 7, 4, 10)], "expected": (4, 5)},
  )
  assert "\r" not in similar.reference_solution
  assert similar.metadata["suite_b"] == "augmented"
  prime = tasks["mbpp/3"]
  assert prime.heldout_tests == ({"args": [97], "expected": False},)
  assert prime.visible_tests == prime.hidden_tests[:0] + (
    {"args": [2], "expected": False},
    {"args": [10], "expected": True},
  )
  for task in tasks.values():
    _passes_all(module_pool, task, task.reference_solution)


# --- HumanEval ---------------------------------------------------------------

HUMANEVAL_INC = {
  "task_id": "Toy/0",
  "prompt": 'def inc(x):\n    """Add one to x."""\n',
  "entry_point": "inc",
  "canonical_solution": "    return x + 1\n",
  "test": (
    "def check(candidate):\n    assert candidate(1) == 2\n"
    "    assert candidate(-5) == -4\n    assert candidate(10) == 11\n"
  ),
}


def test_humaneval_delegates(tmp_path, module_pool):
  broken = {
    **HUMANEVAL_INC,
    "task_id": "Toy/1",
    "canonical_solution": "    return x\n",
  }
  src = tmp_path / "HumanEval.jsonl.gz"
  with gzip.open(src, "wt", encoding="utf-8") as f:
    for record in (HUMANEVAL_INC, {"task_id": "Toy/2", "prompt": "x"}, broken):
      f.write(json.dumps(record) + "\n")
  out = tmp_path / "out.jsonl"
  with pytest.raises(convert.ConvertError, match="needs a pool"):
    convert.convert("humaneval", str(src), str(out))
  report = convert.convert(
    "humaneval", str(src), str(out), pool=module_pool, config=CONFIG
  )
  assert (report.read, report.written) == (3, 1)
  assert report.skip_reasons == {
    "entry_point: missing": 1,
    "humaneval: conversion failed": 1,
  }
  assert f"{src}:2: entry_point: missing" in report.problems
  (task,) = schema.read_tasks(out)
  assert task.hidden_tests == (
    {"args": [1], "kwargs": {}, "expected": 2},
    {"args": [-5], "kwargs": {}, "expected": -4},
    {"args": [10], "kwargs": {}, "expected": 11},
  )
  assert task.visible_tests == task.hidden_tests[:2]
  assert 0 < len(task.heldout_tests) <= CONFIG.max_tests
  assert task.metadata["oracle"] == "reference"
  _passes_all(module_pool, task, task.reference_solution)


# --- Files, caps, the command line -------------------------------------------


def test_cap_keeps_the_longest_inputs_first():
  tests = [
    {"args": [x], "expected": 0} for x in ("bb", "a", "dddd", "ccc", "ee")
  ]
  kept, left = convert.cap(tests, 3)
  assert [t["args"][0] for t in kept] == ["dddd", "ccc", "bb"]
  assert [t["args"][0] for t in left] == ["ee", "a"]


def test_unreadable_files(tmp_path):
  text = tmp_path / "notes.txt"
  text.write_text("hello\nworld\n")
  with pytest.raises(convert.ConvertError, match="not JSON or JSONL"):
    convert.convert("apps", str(text), str(tmp_path / "o.jsonl"))
  binary = tmp_path / "blob.bin"
  binary.write_bytes(b"\xff\xfe\x00garbage")
  with pytest.raises(convert.ConvertError, match="not UTF-8"):
    convert.convert("apps", str(binary), str(tmp_path / "o.jsonl"))
  assert not (tmp_path / "o.jsonl").exists()
  src = _write(tmp_path / "ok.jsonl", [APPS_STDIO])
  with pytest.raises(convert.ConvertError, match="cannot write"):
    convert.convert("apps", src, str(tmp_path / "missing" / "o.jsonl"))
  assert sorted(os.listdir(tmp_path)) == ["blob.bin", "notes.txt", "ok.jsonl"]


def test_limit_and_config_validation(tmp_path):
  src = _write(tmp_path / "mbpp.jsonl", [MBPP_SIMILAR, MBPP_PRIME])
  report = convert.convert("mbpp", src, str(tmp_path / "o.jsonl"), limit=1)
  assert (report.read, report.written) == (1, 1)
  with pytest.raises(ValueError, match="max_tests"):
    convert.ConvertConfig(max_tests=0)


def _cli(*args) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-m", "codeagent_rl.tasks.convert", *args],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=120,
    check=False,
  )


def test_cli(tmp_path):
  src = _write(tmp_path / "mbpp.jsonl", [MBPP_SIMILAR, MBPP_PRIME, MBPP_BAD[0]])
  out = tmp_path / "out.jsonl"
  proc = _cli(
    "--format=mbpp",
    f"--input={src}",
    f"--out={out}",
    "--max_tests=2",
    "--backend=process",
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert (summary["read"], summary["written"], summary["skipped"]) == (3, 2, 1)
  assert summary["references"] == {"passed": 2}
  assert "convert: read 3 records, wrote 2 tasks, skipped 1" in proc.stdout
  assert f"{src}:3: test_list: no usable tests" in proc.stderr
  tasks = _tasks(out)
  assert all(len(t.heldout_tests) <= 2 for t in tasks.values())

  bad = tmp_path / "bad.jsonl"
  bad.write_text("this is not json\nnor this\n")
  proc = _cli(
    "--format=apps", f"--input={bad}", f"--out={tmp_path / 'x.jsonl'}"
  )
  assert proc.returncode == 1
  assert (
    proc.stderr.strip()
    .splitlines()[-1]
    .startswith(f"convert: not JSON or JSONL: {bad}:1")
  )
  assert not (tmp_path / "x.jsonl").exists()
