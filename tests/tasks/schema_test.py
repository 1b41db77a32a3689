"""Task JSONL: round trips, tagged values, and errors that say where."""

import json
import math

import pytest

from codeagent_rl.sandbox import wire
from codeagent_rl.tasks import schema


def _task(**changes) -> schema.Task:
  fields = dict(
    task_id="add",
    prompt="Write add(a, b).",
    entry_point="add",
    kind="function",
    visible_tests=({"args": [1, 2], "expected": 3},),
    hidden_tests=(
      {"args": [(1, 2), {3}], "kwargs": {"z": None}, "expected": (1, 2)},
      {"args": [math.inf], "expected": math.nan},
      {
        "args": [1, 2],
        "checker": "def check(args, kwargs, output):\n  return output == 3\n",
      },
    ),
    heldout_tests=({"args": [{1: "a"}], "expected": frozenset({"x"})},),
    reference_solution="def add(a, b):\n  return a + b\n",
    metadata={"source": "unit test", "difficulty": 1},
  )
  fields.update(changes)
  return schema.Task(**fields)


def _stdio_task(**changes) -> schema.Task:
  fields = dict(
    task_id="echo",
    prompt="Echo.",
    entry_point=None,
    kind="stdio",
    visible_tests=(),
    hidden_tests=({"stdin": "a\n", "expected_stdout": "a\n"},),
    heldout_tests=(),
    reference_solution="print(input())",
    metadata={},
  )
  fields.update(changes)
  return schema.Task(**fields)


def test_round_trip_keeps_tagged_values(tmp_path):
  path = tmp_path / "tasks.jsonl"
  tasks = [_task(), _stdio_task()]
  schema.write_tasks(path, tasks)
  lines = path.read_text().splitlines()
  assert len(lines) == 2
  raw = json.loads(lines[0])
  # Without generated tests the optional field is left out.
  optional = schema.OPTIONAL_FIELDS
  assert list(raw) == [f for f in schema.FIELDS if f not in optional]
  assert raw["hidden_tests"][0]["args"] == [
    {"$tuple": [1, 2]},
    {"$set": [3]},
  ]
  assert raw["hidden_tests"][1]["expected"] == {"$float": "nan"}
  back = schema.read_tasks(path)
  assert back[1] == tasks[1]
  got = back[0].hidden_tests
  assert got[0]["args"] == [(1, 2), {3}] and type(got[0]["args"][0]) is tuple
  assert math.isnan(got[1]["expected"]) and got[1]["args"] == [math.inf]
  assert back[0].heldout_tests[0]["args"] == [{1: "a"}]
  assert type(back[0].heldout_tests[0]["expected"]) is frozenset
  assert isinstance(back[0].hidden_tests, tuple)


def test_blank_lines_are_skipped(tmp_path):
  path = tmp_path / "t.jsonl"
  schema.write_tasks(path, [_stdio_task()])
  path.write_text("\n" + path.read_text() + "\n\n")
  assert [t.task_id for t in schema.read_tasks(path)] == ["echo"]


def _write_lines(path, objs) -> None:
  path.write_text("".join(json.dumps(o) + "\n" for o in objs))


def _raw(task: schema.Task) -> dict:
  return schema.task_to_json(task)


@pytest.mark.parametrize(
  "mutate,fragment",
  [
    (lambda t: t.pop("metadata"), ":2: missing field(s) ['metadata']"),
    (lambda t: t.update(extra=1), ":2: unknown field(s) ['extra']"),
    (lambda t: t.update(kind="shell"), "kind: 'shell' is not one of"),
    (lambda t: t.update(entry_point=None), "entry_point: a function task"),
    (lambda t: t.update(entry_point="2bad"), "entry_point: a function task"),
    (lambda t: t.update(task_id=""), "task_id: must be a non-empty string"),
    (lambda t: t.update(hidden_tests=[]), "hidden_tests: needs at least one"),
    (lambda t: t.update(metadata=[]), "metadata: must be an object"),
    (lambda t: t.update(prompt=3), "prompt: must be a string"),
    (
      lambda t: t["hidden_tests"][1].update(expected={"$tuple": 5}),
      "hidden_tests[1]: $tuple needs a JSON array",
    ),
    (
      lambda t: t["hidden_tests"][0].pop("args"),
      "hidden_tests[0].args: missing",
    ),
    (
      lambda t: t["hidden_tests"][0].update(args={"$tuple": [1]}),
      "hidden_tests[0].args: must be a JSON array",
    ),
    (
      lambda t: t["hidden_tests"][0].update(kwargs={"$dict": [[1, 2]]}),
      "hidden_tests[0].kwargs: must be an object of str keys",
    ),
    (
      lambda t: t["heldout_tests"][0].update(checker="def check("),
      "heldout_tests[0]: needs exactly one of 'expected' and 'checker'",
    ),
    (
      lambda t: t["hidden_tests"][2].update(checker="def check(:"),
      "hidden_tests[2].checker: syntax error at line 1",
    ),
    (
      lambda t: t["visible_tests"][0].update(expected_stdout="3"),
      "visible_tests[0]: unknown keys ['expected_stdout'] in a function test",
    ),
    (
      lambda t: t["visible_tests"][0].update(expected={"$bogus": 1}),
      "visible_tests[0]: object with keys ['$bogus'] is not a tag",
    ),
    (
      lambda t: t.update(metadata={"judge": True}),
      "task 'add': metadata.judge: must be an object",
    ),
    (
      lambda t: t.update(metadata={"judge": {"int_accepts_floats": True}}),
      "metadata.judge: unknown key(s) ['int_accepts_floats']",
    ),
    (
      lambda t: t.update(metadata={"judge": {"int_accepts_float": 1}}),
      "metadata.judge.int_accepts_float: must be a bool, got 1",
    ),
    (
      lambda t: t.update(metadata={"judge": {"int_accepts_float": "yes"}}),
      "metadata.judge.int_accepts_float: must be a bool, got 'yes'",
    ),
  ],
)
def test_errors_name_file_line_and_field(tmp_path, mutate, fragment):
  path = tmp_path / "tasks.jsonl"
  good = _raw(_stdio_task())
  bad = _raw(_task())
  mutate(bad)
  _write_lines(path, [good, bad])
  with pytest.raises(schema.TaskFormatError) as e:
    schema.read_tasks(path)
  message = str(e.value)
  assert message.startswith(f"{path}:2: "), message
  assert fragment in message, message


def test_stdio_tests_must_match_kind(tmp_path):
  path = tmp_path / "t.jsonl"
  raw = _raw(_stdio_task())
  raw["hidden_tests"] = [{"args": [1], "expected": 1}]
  _write_lines(path, [raw])
  with pytest.raises(
    schema.TaskFormatError,
    match=r":1: task 'echo': "
    r"hidden_tests\[0\]: a stdio test has exactly the keys",
  ):
    schema.read_tasks(path)
  raw = _raw(_stdio_task(entry_point=None))
  raw["entry_point"] = "main"
  _write_lines(path, [raw])
  with pytest.raises(schema.TaskFormatError, match="must be null for a stdio"):
    schema.read_tasks(path)


def test_duplicate_task_id_names_both_lines(tmp_path):
  path = tmp_path / "t.jsonl"
  _write_lines(path, [_raw(_task()), _raw(_stdio_task()), _raw(_task())])
  with pytest.raises(schema.TaskFormatError) as e:
    schema.read_tasks(path)
  assert str(e.value) == f"{path}:3: task_id: 'add' duplicates line 1."
  with pytest.raises(schema.TaskFormatError, match="duplicate 'add'"):
    schema.write_tasks(tmp_path / "out.jsonl", [_task(), _task()])
  assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize(
  "line,fragment",
  [
    ("{not json}", ":1: not valid JSON"),
    ('{"x": NaN}', ":1: not valid JSON: non-finite JSON number NaN"),
    ("[1, 2]", ":1: a task must be a JSON object"),
  ],
)
def test_bad_json_lines(tmp_path, line, fragment):
  path = tmp_path / "t.jsonl"
  path.write_text(line + "\n")
  with pytest.raises(schema.TaskFormatError) as e:
    schema.read_tasks(path)
  assert fragment in str(e.value)


def test_values_json_cannot_carry_are_refused():
  class Custom:
    pass

  with pytest.raises(
    schema.TaskFormatError, match=r"hidden_tests\[0\].expected"
  ):
    _task(hidden_tests=({"args": [1], "expected": Custom()},))
  with pytest.raises(schema.TaskFormatError, match=r"metadata: not plain JSON"):
    _task(metadata={"x": math.nan})


def test_judge_options_round_trip(tmp_path):
  path = tmp_path / "t.jsonl"
  for options in (
    {},
    {"int_accepts_float": True},
    {"int_accepts_float": False},
  ):
    task = _task(metadata={"source": "x", "judge": options})
    schema.write_tasks(path, [task])
    assert schema.read_tasks(path) == [task]


def test_task_is_frozen():
  task = _task()
  with pytest.raises(AttributeError):
    task.task_id = "other"


GENERATED = (
  {"args": [(5, 6)], "kwargs": {}, "expected": 11},
  {"args": [7, 8], "expected": 15},
)


def test_generated_tests_round_trip(tmp_path):
  path = tmp_path / "tasks.jsonl"
  task = _task(generated_tests=GENERATED)
  schema.write_tasks(path, [task])
  raw = json.loads(path.read_text())
  assert list(raw) == [f for f in schema.FIELDS if f != "workspace"]
  assert raw["generated_tests"][0]["args"] == [{"$tuple": [5, 6]}]
  (back,) = schema.read_tasks(path)
  assert back == task
  assert back.generated_tests[0]["args"] == [(5, 6)]


def test_files_without_generated_tests_stay_valid_and_unchanged(tmp_path):
  path = tmp_path / "old.jsonl"
  old = schema.task_to_json(_task())
  assert "generated_tests" not in old
  path.write_text(wire.dumps(old) + "\n")
  (task,) = schema.read_tasks(path)
  assert task.generated_tests == ()
  again = tmp_path / "again.jsonl"
  schema.write_tasks(again, [task])
  assert again.read_bytes() == path.read_bytes()


@pytest.mark.parametrize(
  "generated, fragment",
  [
    ({"args": [1]}, "generated_tests: must be a list"),
    ([{"args": [1]}], "generated_tests[0]: needs exactly one of"),
    ([{"stdin": "x"}], "generated_tests[0]: unknown keys"),
  ],
)
def test_generated_tests_are_validated(tmp_path, generated, fragment):
  path = tmp_path / "bad.jsonl"
  line = schema.task_to_json(_task())
  line["generated_tests"] = generated
  path.write_text(json.dumps(line) + "\n")
  with pytest.raises(schema.TaskFormatError, match=r"bad\.jsonl:1") as e:
    schema.read_tasks(path)
  assert fragment in str(e.value)
