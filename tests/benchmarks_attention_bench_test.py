"""benchmarks/attention_bench.py: the quick run writes what it promises.

The equality of the two attentions and their memory scaling are tested in
tests/models/attention_test.py; here the script's plumbing: every row,
the line extension to the model's depth, and refused arguments.
"""

import json

from benchmarks import attention_bench
from tests.helpers import processes


def _bench(*args):
  return processes.run_python("-m", "benchmarks.attention_bench", *args)


def test_the_quick_run_writes_every_row(tmp_path):
  out = tmp_path / "a.json"
  proc = _bench(
    "--quick",
    "--repeats=1",
    "--layers=24",
    "--passes=actor_step",
    f"--out={out}",
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  data = json.loads(out.read_text())
  memory = data["memory"]
  assert [(r["attention"], r["pass"]) for r in memory] == [
    (a, p) for a in attention_bench.ATTENTIONS for p in ("actor_step",)
  ]
  for r in memory:
    assert r["length"] == 256 and r["remat"] == "none"
    assert 0 < r["bytes_1_layer"] < r["bytes_2_layers"]
    assert r["bytes_extrapolated"] == r["bytes_1_layer"] + 23 * (
      r["bytes_2_layers"] - r["bytes_1_layer"]
    )
  by = {(r["attention"], r["pass"]): r for r in memory}
  # Even at 4 chunks a row the chunked step plans less per layer.
  plain, chunked = by["plain", "actor_step"], by["chunked", "actor_step"]
  assert chunked["bytes_per_layer"] < plain["bytes_per_layer"]
  speed = data["speed"]
  assert [(r["length"], r["attention"]) for r in speed] == [
    (128, "plain"),
    (128, "chunked"),
  ]
  assert all(r["tokens_per_s"] > 0 for r in speed)
  assert speed[1]["chunked_over_plain"] > 0
  assert "chunked/plain" in proc.stdout


def test_bad_arguments_are_refused(tmp_path):
  for arg in ("--lengths=x", "--repeats=0", "--passes=backward"):
    proc = _bench("--part=speed", arg, f"--out={tmp_path / 'x.json'}")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
  assert not (tmp_path / "x.json").exists()
