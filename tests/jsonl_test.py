"""The JSONL reader: parsed lines, blank lines skipped, errors name the line."""

import json

import pytest

from codeagent_rl import jsonl


class _Error(ValueError):
  pass


def test_yields_values_with_file_and_line(tmp_path):
  path = tmp_path / "f.jsonl"
  path.write_text('{"a": 1}\n\n  \n[2, 3]\n"x"')
  lines = list(jsonl.read(path))
  assert [line.value for line in lines] == [{"a": 1}, [2, 3], "x"]
  assert [line.number for line in lines] == [1, 4, 5]
  assert lines[1].where == f"{path}:4"


@pytest.mark.parametrize(
  "text,fragment",
  [
    ('{"a": 1}\n{not json\n', ":2: not valid JSON: "),
    ("[" * 100_000 + "\n", ":1: not valid JSON: "),
  ],
  ids=["syntax", "too_deep"],
)
def test_a_bad_line_raises_the_callers_error(tmp_path, text, fragment):
  path = tmp_path / "f.jsonl"
  path.write_text(text)
  with pytest.raises(_Error, match=f"^{path}{fragment}"):
    list(jsonl.read(path, _Error))


def test_lines_before_a_bad_one_are_yielded(tmp_path):
  path = tmp_path / "f.jsonl"
  path.write_text("1\n2\n{\n")
  lines = jsonl.read(path, _Error)
  assert [next(lines).value, next(lines).value] == [1, 2]
  with pytest.raises(_Error, match=":3: "):
    next(lines)


def test_loads_is_the_callers(tmp_path):
  path = tmp_path / "f.jsonl"
  path.write_text('{"x": NaN}\n')
  assert json.dumps(next(jsonl.read(path)).value) == '{"x": NaN}'

  def finite(text):
    return json.loads(text, parse_constant=lambda c: float("nope " + c))

  with pytest.raises(_Error, match=":1: not valid JSON: could not convert"):
    list(jsonl.read(path, _Error, loads=finite))


def test_missing_file_is_an_os_error(tmp_path):
  with pytest.raises(OSError):
    list(jsonl.read(tmp_path / "missing.jsonl"))
