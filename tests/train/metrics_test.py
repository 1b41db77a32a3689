"""Tests of codeagent_rl/train/metrics.py."""

import glob
import importlib.util
import json
import math
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tensorboardX import record_writer
from tensorboardX.proto import event_pb2

from codeagent_rl.train import metrics
from codeagent_rl.train import workdir as workdir_lib
from tests.helpers import processes

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _read_lines(workdir):
  with open(os.path.join(workdir, workdir_lib.METRICS)) as f:
    return f.read().splitlines()


def _read_events(workdir):
  """Every Event in the TensorBoard files, checking the record CRCs."""
  paths = sorted(
    glob.glob(os.path.join(workdir, workdir_lib.TENSORBOARD, "*tfevents*"))
  )
  assert paths
  events = []
  for path in paths:
    with open(path, "rb") as f:
      data = f.read()
    pos = 0
    while pos < len(data):
      header = data[pos : pos + 8]
      (length,) = struct.unpack("<Q", header)
      (header_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
      assert header_crc == record_writer.masked_crc32c(header)
      body = data[pos + 12 : pos + 12 + length]
      (body_crc,) = struct.unpack(
        "<I", data[pos + 12 + length : pos + 16 + length]
      )
      assert body_crc == record_writer.masked_crc32c(body)
      events.append(event_pb2.Event.FromString(body))
      pos += 16 + length
  return events


def _scalar_events(events):
  """(tag, step) -> simple_value of every scalar summary."""
  out = {}
  for event in events:
    for value in event.summary.value:
      if value.HasField("simple_value"):
        out[(value.tag, event.step)] = value.simple_value
  return out


def test_one_line_per_iteration_with_every_scalar(tmp_path):
  workdir = str(tmp_path)
  with metrics.MetricsWriter(workdir) as writer:
    for it in range(3):
      writer.write_scalars(it, {"loss/critic": 0.5 / (it + 1)})
      writer.write_scalars(it, {"reward/pass_a": np.float32(0.25 * it)})
      writer.flush()
  lines = _read_lines(workdir)
  assert len(lines) == 3
  first = json.loads(lines[0])
  assert list(first) == ["iteration", "loss/critic", "reward/pass_a"]
  records = metrics.read_metrics(workdir)
  assert [r["iteration"] for r in records] == [0, 1, 2]
  assert records[2]["loss/critic"] == pytest.approx(0.5 / 3)
  assert records[2]["reward/pass_a"] == 0.5


def test_a_later_iteration_commits_the_pending_record(tmp_path):
  workdir = str(tmp_path)
  writer = metrics.MetricsWriter(workdir, tensorboard=False)
  writer.write_scalars(0, {"a": 1.0})
  assert _read_lines(workdir) == []
  writer.write_scalars(1, {"a": 2.0})
  assert [json.loads(x)["a"] for x in _read_lines(workdir)] == [1.0]
  writer.close()
  writer.close()  # idempotent
  assert [json.loads(x)["a"] for x in _read_lines(workdir)] == [1.0, 2.0]
  with pytest.raises(ValueError, match="closed"):
    writer.write_scalars(2, {"a": 3.0})


def test_non_finite_values_are_null(tmp_path):
  workdir = str(tmp_path)
  with metrics.MetricsWriter(workdir, tensorboard=False) as writer:
    writer.write_scalars(
      0, {"a": math.nan, "b": math.inf, "c": np.float64(-np.inf), "d": 1}
    )
  (line,) = _read_lines(workdir)
  assert json.loads(line) == {
    "iteration": 0,
    "a": None,
    "b": None,
    "c": None,
    "d": 1.0,
  }
  (record,) = metrics.read_metrics(workdir)
  assert math.isnan(record["a"]) and record["d"] == 1.0


@pytest.mark.parametrize(
  "value, match",
  [
    ("0.5", "expected a number"),
    (None, "expected a number"),
    (np.ones(2), "one real number"),
    (np.array("x"), "one real number"),
    ({"x": 1}, "one real number"),
  ],
)
def test_non_numeric_values_are_rejected(tmp_path, value, match):
  workdir = str(tmp_path)
  with metrics.MetricsWriter(workdir, tensorboard=False) as writer:
    with pytest.raises(ValueError, match=match) as info:
      writer.write_scalars(0, {"ok": 1.0, "bad/key": value})
    assert "bad/key" in str(info.value)
    writer.write_scalars(0, {"other": 2.0})
  # The rejected call wrote nothing, not even its valid scalar.
  assert metrics.read_metrics(workdir) == [{"iteration": 0, "other": 2.0}]


def test_iterations_must_not_go_back_or_repeat_names(tmp_path):
  with metrics.MetricsWriter(str(tmp_path), tensorboard=False) as writer:
    writer.write_scalars(3, {"a": 1.0})
    with pytest.raises(ValueError, match="'a' written twice"):
      writer.write_scalars(3, {"a": 2.0})
    writer.flush()
    with pytest.raises(ValueError, match="iteration=3"):
      writer.write_scalars(3, {"b": 1.0})
    with pytest.raises(ValueError, match="iteration=-1"):
      writer.write_scalars(-1, {"b": 1.0})
    with pytest.raises(ValueError, match="iteration=True"):
      writer.write_scalars(True, {"b": 1.0})
    with pytest.raises(ValueError, match="'iteration' written twice"):
      writer.write_scalars(4, {"iteration": 1.0})
  assert metrics.read_metrics(str(tmp_path)) == [{"iteration": 3, "a": 1.0}]


def test_histograms_add_summary_stats(tmp_path):
  workdir = str(tmp_path)
  tokens = np.array([[10, 20], [30, 40], [50, 1000]])
  with metrics.MetricsWriter(workdir) as writer:
    writer.write_histograms(
      0,
      {
        "length/passing_tokens": tokens,
        "length/failing_tokens": np.array([np.nan, 7.0]),
        "length/empty": np.array([]),
      },
    )
    with pytest.raises(ValueError, match="real numbers"):
      writer.write_histograms(0, {"bad": np.array(["a"])})
  (record,) = metrics.read_metrics(workdir)
  flat = tokens.ravel()
  assert record["length/passing_tokens/mean"] == pytest.approx(flat.mean())
  assert record["length/passing_tokens/p50"] == pytest.approx(35.0)
  assert record["length/passing_tokens/p90"] == pytest.approx(
    np.percentile(flat, 90)
  )
  assert record["length/passing_tokens/max"] == 1000.0
  assert record["length/passing_tokens/count"] == 6
  assert record["length/failing_tokens/mean"] == 7.0
  assert record["length/failing_tokens/count"] == 1
  assert record["length/empty/count"] == 0
  assert math.isnan(record["length/empty/max"])
  histos = {
    v.tag: v.histo
    for e in _read_events(workdir)
    for v in e.summary.value
    if v.HasField("histo")
  }
  assert set(histos) == {"length/passing_tokens", "length/failing_tokens"}
  assert histos["length/passing_tokens"].num == 6
  assert histos["length/passing_tokens"].max == 1000.0
  assert histos["length/passing_tokens"].sum == flat.sum()
  assert histos["length/failing_tokens"].num == 1


def test_tensorboard_scalars_read_back(tmp_path):
  workdir = str(tmp_path)
  with metrics.MetricsWriter(workdir) as writer:
    for it in range(4):
      writer.write_scalars(it, {"reward/total_mean": it / 4})
      writer.flush()
  scalars = _scalar_events(_read_events(workdir))
  assert scalars == {("reward/total_mean", it): it / 4 for it in range(4)}


def test_tensorboard_leaves_out_metrics_without_a_value(tmp_path):
  workdir = str(tmp_path)
  with metrics.MetricsWriter(workdir) as writer:
    writer.write_scalars(0, {"a": float("nan"), "b": 1.0, "c": float("inf")})
    writer.flush()
  assert _scalar_events(_read_events(workdir)) == {("b", 0): 1.0}
  record = json.loads(open(os.path.join(workdir, "metrics.jsonl")).read())
  assert (record["a"], record["b"], record["c"]) == (None, 1.0, None)


def test_writing_tensorboard_leaves_torch_unimported_and_importable(tmp_path):
  # Only where torch is installed (the test extra installs it) does this
  # check anything: tensorboardX would import it.
  assert importlib.util.find_spec("torch") is not None
  script = textwrap.dedent(
    f"""
    import sys
    from codeagent_rl.train import metrics
    with metrics.MetricsWriter({str(tmp_path)!r}) as writer:
      writer.write_scalars(0, {{"x": 1.0}})
    print("torch" in sys.modules)
    import torch
    print(torch.ones(2).sum().item())
    """
  )
  proc = processes.run_python("-c", script)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.split() == ["False", "2.0"]
  assert _scalar_events(_read_events(str(tmp_path))) == {("x", 0): 1.0}


def test_resume_drops_lines_of_the_crashed_run(tmp_path):
  workdir = str(tmp_path)
  with metrics.MetricsWriter(workdir) as writer:
    for it in range(6):
      writer.write_scalars(it, {"run": 1.0, "it": float(it)})
  # The crashed run's checkpoint was at iteration 3: resume there.
  with metrics.MetricsWriter(workdir, start_iteration=3) as writer:
    assert [r["iteration"] for r in metrics.read_metrics(workdir)] == [0, 1, 2]
    with pytest.raises(ValueError, match="iteration=2"):
      writer.write_scalars(2, {"run": 2.0})
    for it in range(3, 5):
      writer.write_scalars(it, {"run": 2.0, "it": float(it)})
  records = metrics.read_metrics(workdir)
  assert [r["iteration"] for r in records] == [0, 1, 2, 3, 4]
  assert [r["run"] for r in records] == [1.0, 1.0, 1.0, 2.0, 2.0]
  # The atomic rewrite left no temporary file behind.
  assert sorted(os.listdir(workdir)) == [
    workdir_lib.METRICS,
    workdir_lib.TENSORBOARD,
  ]
  # TensorBoard: both runs' files survive, and the resumed one tells
  # TensorBoard to hide the first run's events from step 3 on.
  events = _read_events(workdir)
  starts = [e.step for e in events if e.HasField("session_log")]
  assert starts == [3]
  scalars = _scalar_events(events)
  assert scalars[("run", 5)] == 1.0 and scalars[("run", 4)] == 2.0


def test_fresh_start_replaces_an_old_file(tmp_path):
  workdir = str(tmp_path)
  with metrics.MetricsWriter(workdir, tensorboard=False) as writer:
    writer.write_scalars(0, {"a": 1.0})
  with metrics.MetricsWriter(workdir, tensorboard=False) as writer:
    writer.write_scalars(0, {"a": 2.0})
  assert metrics.read_metrics(workdir) == [{"iteration": 0, "a": 2.0}]


def test_partial_last_line_is_skipped_and_dropped_on_resume(tmp_path):
  workdir = str(tmp_path)
  path = os.path.join(workdir, workdir_lib.METRICS)
  with open(path, "w") as f:
    f.write('{"iteration":0,"a":1}\n{"iteration":1,"a":2}\n{"iteration":2,"a')
  assert [r["iteration"] for r in metrics.read_metrics(workdir)] == [0, 1]
  with metrics.MetricsWriter(
    workdir, start_iteration=2, tensorboard=False
  ) as writer:
    writer.write_scalars(2, {"a": 3.0})
  assert _read_lines(workdir) == [
    '{"iteration":0,"a":1}',
    '{"iteration":1,"a":2}',
    '{"iteration":2,"a":3.0}',
  ]


def test_malformed_line_is_named(tmp_path):
  workdir = str(tmp_path)
  path = os.path.join(workdir, workdir_lib.METRICS)
  with open(path, "w") as f:
    f.write('{"iteration":0}\nnot json\n{"iteration":2}\n')
  with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a JSON line"):
    metrics.read_metrics(workdir)
  with pytest.raises(ValueError, match=r"metrics.jsonl:2"):
    metrics.MetricsWriter(workdir, start_iteration=1, tensorboard=False)
  with open(path, "w") as f:
    f.write('{"iteration":0}\n{"step":1}\n')
  with pytest.raises(ValueError, match=r":2: expected an object with an int"):
    metrics.read_metrics(workdir)


def test_killed_writer_leaves_every_committed_line(tmp_path):
  workdir = str(tmp_path)
  script = textwrap.dedent(
    f"""
    import os, signal
    from codeagent_rl.train import metrics
    writer = metrics.MetricsWriter({workdir!r})
    for it in range(50):
      writer.write_scalars(it, {{"x": float(it), "y": it * 0.5}})
      writer.write_histograms(it, {{"h": list(range(it + 1))}})
      writer.flush()
    writer.write_scalars(50, {{"x": 50.0}})  # pending: never committed
    os.kill(os.getpid(), signal.SIGKILL)
    """
  )
  proc = subprocess.run(
    [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True
  )
  assert proc.returncode == -9, proc.stderr.decode()
  records = metrics.read_metrics(workdir)
  assert [r["iteration"] for r in records] == list(range(50))
  assert all(r["x"] == r["iteration"] for r in records)
  assert records[49]["h/max"] == 49.0


def test_read_metrics_without_file_raises(tmp_path):
  with pytest.raises(FileNotFoundError):
    metrics.read_metrics(str(tmp_path))


class FakeClock:
  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_phase_timer_accumulates_and_shares():
  clock = FakeClock()
  timer = metrics.PhaseTimer(clock=clock)
  with timer.phase("generation"):
    clock.now += 3.0
    with timer.phase("sandbox_wait"):
      clock.now += 1.0
  with timer.phase("generation"):
    clock.now += 2.0
  timer.add("sandbox_wait", 1.0)
  clock.now += 4.0  # time outside any phase
  assert timer.scalars() == {
    "time/iteration_s": 10.0,
    "time/generation_s": 6.0,
    "time/generation_share": 0.6,
    "time/sandbox_wait_s": 2.0,
    "time/sandbox_wait_share": 0.2,
  }
  timer.reset()
  clock.now += 1.0
  assert timer.scalars() == {"time/iteration_s": 1.0}


def test_phase_timer_counts_a_phase_that_raises():
  clock = FakeClock()
  timer = metrics.PhaseTimer(clock=clock)
  with pytest.raises(RuntimeError), timer.phase("update"):
    clock.now += 2.5
    raise RuntimeError("boom")
  assert timer.scalars()["time/update_s"] == 2.5


def test_phase_timer_rejects_bad_use():
  timer = metrics.PhaseTimer()
  with pytest.raises(ValueError, match="phase name 'Gen eration'"):
    with timer.phase("Gen eration"):
      pass
  with pytest.raises(ValueError, match="already running"):
    with timer.phase("a"), timer.phase("a"):
      pass
  with pytest.raises(ValueError, match="seconds=-1"):
    timer.add("a", -1)
  with pytest.raises(ValueError, match="reset"), timer.phase("b"):
    timer.reset()
