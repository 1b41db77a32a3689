"""benchmarks/hf_ppo_bench.py --quick runs and writes the JSON it promises.

One run of the script (1 layer, 4,096 ids, 6 x 64 in two micro-batches of
3 rows; about a minute) in a subprocess on one CPU device, as the benchmark
is run by hand (the test process forces 8 fake devices). The tests check
the rows' keys, that every variant and the generation row are there, the
packed rows against a plain first-fit-decreasing reference, and the FLOPs
against the docstring's formula, worked out here from the config. Timings
are not asserted: they belong to the benchmark.
"""

import json
import pathlib
import subprocess
import sys

import pytest

from configs import qwen25_coder_0p5b
from tests.helpers import processes

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "benchmarks" / "hf_ppo_bench.py"
ROW_KEYS = {"variant", "batch", "length", "tokens_per_s", "peak_memory_bytes"}
VARIANTS = {"chunked", "unchunked", "packed"}
VOCAB, LAYERS, CHUNK = 4096, 1, 16
# 6 rows of QUICK's 64 tokens, 3 a micro-batch: the seed's lengths (64, 8,
# 4, 4, 38, 50) pack into 2 rows in each, so `packed` really packs, and its
# plans are stacked over more than one micro-batch.
BATCH, LENGTH, MICRO_ROWS = 6, 64, 3


@pytest.fixture(scope="module")
def result(tmp_path_factory):
  out = tmp_path_factory.mktemp("hf_ppo_bench") / "result.json"
  env = processes.one_device_env()
  # A logits chunk shorter than the rows, so the chunked path really scans.
  proc = subprocess.run(
    [sys.executable, SCRIPT, "--quick", f"--logits_chunk={CHUNK}"]
    + [f"--batch={BATCH}", f"--micro_tokens={MICRO_ROWS * LENGTH}"]
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


def _check_rows_have_the_promised_keys_and_every_variant(result):
  data, _ = result
  rows = data["rows"]
  assert {r["variant"] for r in rows} == VARIANTS
  assert set(data["settings"]["variants"]) == VARIANTS
  for row in rows:
    assert ROW_KEYS <= set(row), row.keys()
    assert row["status"] == "ok", row
    assert (row["batch"], row["length"]) == (BATCH, LENGTH)
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


def _first_fit_decreasing(lengths, capacity):
  """Rows first-fit decreasing fills with `lengths` (a plain reference)."""
  filled = []
  for n in sorted(lengths, reverse=True):
    fit = [i for i, used in enumerate(filled) if used + n <= capacity]
    if fit:
      filled[fit[0]] += n
    else:
      filled.append(n)
  return len(filled)


def _check_packed_runs_fewer_rows(result):
  data, _ = result
  by_variant = {r["variant"]: r for r in data["rows"]}
  for row in by_variant.values():
    assert row["micro_batches"] == BATCH // MICRO_ROWS
    assert row["padded_rows"] == MICRO_ROWS
  assert by_variant["chunked"]["packed_rows"] is None
  assert by_variant["chunked"]["row_density"] == pytest.approx(
    by_variant["chunked"]["valid_tokens"] / (BATCH * LENGTH)
  )
  row = by_variant["packed"]
  lengths = row["row_lengths"]
  # One R for all micro-batches: the most any of them needs.
  want = max(
    _first_fit_decreasing(lengths[i : i + MICRO_ROWS], LENGTH)
    for i in range(0, BATCH, MICRO_ROWS)
  )
  assert row["packed_rows"] == want == 2
  assert row["row_density"] == pytest.approx(
    row["valid_tokens"] / (row["micro_batches"] * want * LENGTH)
  )
  assert row["logits_chunk"] == CHUNK
  # The same rows and steps as `chunked`: the same losses up to bfloat16
  # rounding (coarse: tests/train/packing_test.py checks packed = padded).
  packed_losses = row["phases"]["train_step"]["losses"]
  chunked_losses = by_variant["chunked"]["phases"]["train_step"]["losses"]
  assert packed_losses == pytest.approx(chunked_losses, rel=1e-2)


def _check_generation_row(result):
  data, _ = result
  (gen,) = data["generation"]
  assert gen["status"] == "ok"
  assert gen["prompt_len"] + gen["decode_steps"] == gen["length"] == LENGTH
  assert gen["prefill_tokens_per_s"] > 0
  assert gen["decode_tokens_per_s"] > 0
  assert gen["peak_memory_bytes"] > 0
  # The output projection once a row: XLA computes only the last logits.
  d = qwen25_coder_0p5b.get_config().model.embed_dim
  want = BATCH * (_forward([gen["prompt_len"]], 0) + 2 * d * VOCAB)
  assert gen["phases"]["prefill"]["flops"] == pytest.approx(want)


def _check_machine_block_and_peak(result):
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


def _check_flops_follow_the_printed_formula(result):
  data, stdout = result
  assert data["flops_formula"] in stdout
  for row in data["rows"]:
    lengths = row["row_lengths"]
    assert lengths[0] == LENGTH
    assert all(LENGTH // 16 <= n <= LENGTH for n in lengths)
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


def test_the_quick_run_writes_what_it_promises(result):
  # One test, not one per check: under pytest-xdist every worker that runs a
  # test of this module runs the module's fixture (the minute-long run).
  for check in (
    _check_rows_have_the_promised_keys_and_every_variant,
    _check_packed_runs_fewer_rows,
    _check_generation_row,
    _check_machine_block_and_peak,
    _check_flops_follow_the_printed_formula,
  ):
    check(result)
