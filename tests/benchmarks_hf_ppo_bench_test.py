"""benchmarks/hf_ppo_bench.py --quick runs and writes the JSON it promises.

One run of the script (1 layer, 4,096 ids, 2 x 64; about a minute) in a
subprocess on one CPU device, as the benchmark is run by hand (the test
process forces 8 fake devices). The tests check the rows' keys, that every
variant and the generation row are there, and the FLOPs against the
docstring's formula, worked out here from the config. Timings are not
asserted: they belong to the benchmark.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from configs import qwen25_coder_0p5b

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "benchmarks" / "hf_ppo_bench.py"
ROW_KEYS = {"variant", "batch", "length", "tokens_per_s", "peak_memory_bytes"}
VARIANTS = {"chunked", "unchunked"}
VOCAB, LAYERS, CHUNK = 4096, 1, 16


@pytest.fixture(scope="module")
def result(tmp_path_factory):
  out = tmp_path_factory.mktemp("hf_ppo_bench") / "result.json"
  xla_flags = " ".join(
    f
    for f in os.environ.get("XLA_FLAGS", "").split()
    if not f.startswith("--xla_force_host_platform_device_count")
  )
  env = {
    **{k: v for k, v in os.environ.items() if k != "XLA_FLAGS"},
    "JAX_PLATFORMS": "cpu",
    "PYTHONPATH": os.pathsep.join(
      [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    ),
  }
  if xla_flags:
    env["XLA_FLAGS"] = xla_flags
  # A logits chunk shorter than the rows, so the chunked path really scans.
  proc = subprocess.run(
    [sys.executable, SCRIPT, "--quick", f"--logits_chunk={CHUNK}"]
    + [f"--out={out}"],
    cwd=REPO_ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  if proc.returncode:
    pytest.fail(f"the benchmark failed:\n{(proc.stdout + proc.stderr)[-6000:]}")
  return json.loads(out.read_text()), proc.stdout


def test_rows_have_the_promised_keys_and_every_variant(result):
  data, _ = result
  rows = data["rows"]
  assert {r["variant"] for r in rows} == VARIANTS
  assert set(data["settings"]["variants"]) == VARIANTS
  for row in rows:
    assert ROW_KEYS <= set(row), row.keys()
    assert row["status"] == "ok", row
    assert (row["batch"], row["length"]) == (2, 64)
    assert row["tokens_per_s"] > 0
    assert row["peak_memory_bytes"] > 0
    # CPUs have no memory_stats(): the compiled analysis is the source.
    assert row["memory_source"] == "compiled_analysis"
    assert set(row["phases"]) == {"log_probs", "values", "train_step"}
  by_variant = {r["variant"]: r for r in rows}
  assert by_variant["chunked"]["logits_chunk"] == CHUNK
  assert by_variant["unchunked"]["logits_chunk"] == 0
  # Every variant trains on the same rows.
  assert len({tuple(r["row_lengths"]) for r in rows}) == 1


def test_generation_row(result):
  data, _ = result
  (gen,) = data["generation"]
  assert gen["status"] == "ok"
  assert gen["prompt_len"] + gen["decode_steps"] == gen["length"] == 64
  assert gen["prefill_tokens_per_s"] > 0
  assert gen["decode_tokens_per_s"] > 0
  assert gen["peak_memory_bytes"] > 0
  # The output projection once a row: XLA computes only the last logits.
  d = qwen25_coder_0p5b.get_config().model.embed_dim
  want = 2 * (_forward([gen["prompt_len"]], 0) + 2 * d * VOCAB)
  assert gen["phases"]["prefill"]["flops"] == pytest.approx(want)


def test_machine_block_and_peak(result):
  data, _ = result
  assert data["machine"]["backend"] == "cpu"
  # On CPU the MFU peak is the jnp.dot measured in the same run.
  assert data["peak_flops_per_s"] == data["measured_dot_flops_per_s"] > 0
  assert "jnp.dot" in data["peak_source"]


def _forward(lengths, head_out):
  """The module docstring's forward(n), summed, for the quick model."""
  m = qwen25_coder_0p5b.get_config().model
  d, h, k, hd, f = (
    m.embed_dim,
    m.num_heads,
    m.num_kv_heads,
    m.head_dim,
    m.mlp_dim,
  )
  n_matmul = LAYERS * (2 * d * h * hd + 2 * d * k * hd + 3 * d * f)
  n_matmul += d * head_out
  return sum(2 * n * n_matmul + 4 * LAYERS * h * hd * n * n for n in lengths)


def test_flops_follow_the_printed_formula(result):
  data, stdout = result
  assert data["flops_formula"] in stdout
  for row in data["rows"]:
    lengths = row["row_lengths"]
    assert lengths[0] == 64 and all(4 <= n <= 64 for n in lengths)
    assert row["valid_tokens"] == sum(lengths)
    phases = row["phases"]
    actor, critic = _forward(lengths, VOCAB), _forward(lengths, 1)
    assert phases["log_probs"]["flops"] == pytest.approx(actor)
    assert phases["values"]["flops"] == pytest.approx(critic)
    assert phases["train_step"]["flops"] == pytest.approx(3 * (actor + critic))
    train = phases["train_step"]
    assert row["mfu"] == pytest.approx(
      train["flops"] / train["median_s"] / data["peak_flops_per_s"]
    )
