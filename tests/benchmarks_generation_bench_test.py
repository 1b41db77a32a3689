"""benchmarks/generation_bench.py: the quick run compares both sides.

Both sides load the same checkpoint, so their greedy tokens must agree;
that is also a check of `hf_import` and the sampler against transformers.
"""

import json

from tests.helpers import processes


def _bench(*args):
  return processes.run_python("-m", "benchmarks.generation_bench", *args)


def test_the_quick_run_times_both_sides_and_their_tokens_agree(tmp_path):
  out = tmp_path / "g.json"
  proc = _bench("--quick", "--repeats=1", "--attention=chunked", f"--out={out}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  data = json.loads(out.read_text())
  assert data["settings"]["attention"] == "chunked"
  rows = data["rows"]
  assert [(r["context"], r["side"]) for r in rows] == [
    (64, "ours"),
    (64, "transformers"),
    (128, "ours"),
    (128, "transformers"),
  ]
  for r in rows:
    assert r["prefill_tokens_per_s"] > 0 and r["decode_tokens_per_s"] > 0
    assert r["tokens_agree"] == 1.0
  assert "tokens agree 1.00" in proc.stdout


def test_bad_arguments_are_refused(tmp_path):
  for arg in ("--contexts=8", "--contexts=x", "--width=30", "--batch=0"):
    proc = _bench(arg, "--new_tokens=16", f"--out={tmp_path / 'x.json'}")
    assert proc.returncode != 0, arg
    assert "Traceback" not in proc.stderr
  assert not (tmp_path / "x.json").exists()
