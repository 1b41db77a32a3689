"""benchmarks/mesh_memory_bench.py: the quick run writes what it promises.

The script's plumbing on its own 8 fake devices: every row, the line
extension to the model's depth (unrolled, no remat), the compilation at
full depth (scanned, remat), per-device arguments smaller than the whole
(the states and batch are sharded), both models on one device, and
refused arguments.
"""

import json

from tests.helpers import processes

PASSES = ("actor_step", "critic_step")


def _bench(*args):
  return processes.run_python("-m", "benchmarks.mesh_memory_bench", *args)


def test_the_quick_run_writes_every_row(tmp_path):
  out = tmp_path / "m.json"
  proc = _bench("--quick", f"--passes={','.join(PASSES)}", f"--out={out}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  data = json.loads(out.read_text())
  settings = data["settings"]
  assert settings["mesh"] == {"data": 1, "fsdp": 4, "tensor": 2}
  assert settings["devices"] == 8 and settings["batch_rows"] == 4
  layers = settings["layers"]
  memory = data["memory"]
  assert [(r["attention"], r["remat"], r["pass"]) for r in memory] == [
    ("chunked", m, p) for m in ("full", "none") for p in PASSES
  ]
  for r in memory:
    assert r["length"] == 256 and r["layers"] == layers
    assert 0 < r["argument_bytes"] < r["bytes"]
    assert r["temp_bytes"] > 0
    # The state is split 8 ways and the batch 4 ways on each device.
    assert r["argument_bytes"] < r["unsharded_argument_bytes"] / 4
    if r["remat"] == "none":
      assert 0 < r["bytes_1_layer"] < r["bytes_2_layers"]
      assert r["bytes"] == r["bytes_1_layer"] + (layers - 1) * (
        r["bytes_2_layers"] - r["bytes_1_layer"]
      )
      assert r["method"] == "extended from 1 and 2 layers"
    else:
      assert r["method"] == f"compiled at {layers} layers"
  by = {(r["remat"], r["pass"]): r for r in memory}
  both = {r["remat"]: r for r in data["actor_and_critic"]}
  assert set(both) == {"full", "none"}
  for m, r in both.items():
    assert (r["length"], r["attention"]) == (256, "chunked")
    actor, critic = by[m, "actor_step"], by[m, "critic_step"]
    assert r["bytes"] == max(
      actor["bytes"] + critic["argument_bytes"],
      critic["bytes"] + actor["argument_bytes"],
    )
  assert "actor+critic" in proc.stdout


def test_bad_arguments_are_refused(tmp_path):
  out = tmp_path / "x.json"
  for arg in ("--lengths=x", "--remats=everything", "--attentions=flash"):
    proc = _bench("--quick", arg, f"--out={out}")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert arg.split("=")[0] in proc.stderr
  assert not out.exists()
