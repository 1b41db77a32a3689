"""benchmarks/attention_bench.py: the quick run writes what it promises.

The equality of the two attentions and their memory scaling are tested in
tests/models/attention_test.py; here the script's plumbing: every row,
the line extension to the model's depth (unrolled, no remat), the
compilation at full depth (scanned, remat), both models on one device,
and refused arguments.
"""

import json

from tests.helpers import processes


def _bench(*args):
  return processes.run_python("-m", "benchmarks.attention_bench", *args)


def test_the_quick_run_writes_every_row(tmp_path):
  out = tmp_path / "a.json"
  proc = _bench(
    "--quick",
    "--repeats=1",
    "--layers=4",
    "--passes=actor_step,critic_step",
    # Chunked only: plain's memory against chunked's is tested in
    # tests/models/attention_test.py.
    "--attentions=chunked",
    f"--out={out}",
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  data = json.loads(out.read_text())
  memory = data["memory"]
  passes = ("actor_step", "critic_step")
  assert [(r["attention"], r["remat"], r["pass"]) for r in memory] == [
    ("chunked", m, p) for m in ("none", "full") for p in passes
  ]
  for r in memory:
    assert r["length"] == 256 and r["layers"] == 4
    assert 0 < r["argument_bytes"] < r["bytes"]
    if r["remat"] == "none":
      assert 0 < r["bytes_1_layer"] < r["bytes_2_layers"]
      assert r["bytes"] == r["bytes_1_layer"] + 3 * (
        r["bytes_2_layers"] - r["bytes_1_layer"]
      )
      assert r["method"] == "extended from 1 and 2 layers"
    else:
      assert r["method"] == "compiled at 4 layers"
  by = {(r["attention"], r["remat"], r["pass"]): r for r in memory}
  # At 4 layers the recomputed (scanned) step plans less than the unrolled.
  full = by["chunked", "full", "actor_step"]["bytes"]
  assert full < by["chunked", "none", "actor_step"]["bytes"]
  # Both models on one device: each step plus the other's resident state.
  both = {(r["attention"], r["remat"]): r for r in data["actor_and_critic"]}
  assert set(both) == {("chunked", "none"), ("chunked", "full")}
  for (a, m), r in both.items():
    actor, critic = by[a, m, "actor_step"], by[a, m, "critic_step"]
    assert r["bytes"] == max(
      actor["bytes"] + critic["argument_bytes"],
      critic["bytes"] + actor["argument_bytes"],
    )
  assert "actor+critic" in proc.stdout
  speed = data["speed"]
  assert [(r["length"], r["attention"]) for r in speed] == [
    (128, "plain"),
    (128, "chunked"),
  ]
  assert all(r["tokens_per_s"] > 0 for r in speed)
  assert speed[1]["chunked_over_plain"] > 0
  assert "chunked/plain" in proc.stdout


def test_bad_arguments_are_refused(tmp_path):
  for arg in (
    "--lengths=x",
    "--repeats=0",
    "--passes=backward",
    "--attentions=flash",
    "--remats=some",
  ):
    proc = _bench("--part=speed", arg, f"--out={tmp_path / 'x.json'}")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
  assert not (tmp_path / "x.json").exists()
