"""SFT: an interrupted run resumes from its periodic checkpoint."""

import jax
import numpy as np
import pytest

from codeagent_rl.parallel import checkpoint as ckpt_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import sft as sft_lib
from codeagent_rl.train import workdir as workdir_lib
from configs import tiny


class Interrupt(Exception):
  pass


def _experiment(steps: int) -> exp_lib.Experiment:
  config = tiny.get_config("smoke")
  config.sft.steps = steps
  config.sft.save_every = 2
  config.sft.log_every = 1
  return exp_lib.Experiment.from_config(config)


def _arrays(rows: int = 24, width: int = 48) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(0)
  lengths = rng.integers(20, width + 1, rows)
  valid = np.arange(width)[None] < lengths[:, None]
  trainable = valid & (np.arange(width)[None] >= 10)
  tokens = np.where(valid, rng.integers(16, 272, (rows, width)), 0)
  return {
    "tokens": tokens.astype(np.int32),
    "valid": valid,
    "trainable": trainable,
    "kinds": np.asarray(["single_turn"] * rows),
  }


def _leaves(params):
  return [np.asarray(x) for x in jax.tree.leaves(params)]


def _snapshot(directory):
  """{relative path: (size, mtime_ns)} of everything under `directory`."""
  return {
    str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
    for p in directory.rglob("*")
  }


def test_interrupted_sft_resumes_and_equals_a_straight_run(tmp_path):
  exp = _experiment(steps=6)
  mesh, rules = exp.make_mesh()
  arrays = _arrays()
  straight, _ = sft_lib.run_sft(exp, arrays, tmp_path / "straight", mesh, rules)

  def stop_at_5(step, scalars):
    del scalars
    if step == 5:
      raise Interrupt

  workdir = tmp_path / "interrupted"
  with pytest.raises(Interrupt):
    sft_lib.run_sft(exp, arrays, workdir, mesh, rules, log_metrics=stop_at_5)
  config = ckpt_lib.CheckpointConfig(keep=1, save_every=1, async_save=False)
  with ckpt_lib.Checkpointer(workdir / workdir_lib.SFT_DIR, config) as ckpt:
    assert ckpt.latest_step() == 4  # saved every 2 steps; 5 was not done

  seen, lines = [], []
  resumed, _ = sft_lib.run_sft(
    exp,
    arrays,
    workdir,
    mesh,
    rules,
    log_metrics=lambda s, m: seen.append(s),
    console=lines.append,
  )
  assert seen == [5, 6]  # steps 1-4 were not trained again
  # The console's progress lines: one per logged step, the ETA from the
  # steps this process timed (none left after the last).
  assert [line.split(" | ")[0] for line in lines] == ["SFT 5/6", "SFT 6/6"]
  assert lines[-1].endswith("| ETA 0s"), lines
  assert all(" steps/s | elapsed " in line for line in lines), lines
  for a, b in zip(_leaves(straight), _leaves(resumed), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # A finished SFT is restored, not trained.
  seen.clear()
  again, _ = sft_lib.run_sft(
    exp, None, workdir, mesh, rules, log_metrics=lambda s, m: seen.append(s)
  )
  assert not seen
  for a, b in zip(_leaves(resumed), _leaves(again), strict=True):
    np.testing.assert_array_equal(a, b)


def test_a_checkpoint_past_sft_steps_is_an_error_and_is_kept(tmp_path):
  arrays = _arrays()
  exp = _experiment(steps=4)
  mesh, rules = exp.make_mesh()
  sft_lib.run_sft(exp, arrays, tmp_path, mesh, rules)
  sft_dir = tmp_path / workdir_lib.SFT_DIR
  assert sorted(p.name for p in sft_dir.iterdir()) == ["4"]
  before = _snapshot(sft_dir)

  seen = []
  with pytest.raises(exp_lib.SetupError, match="step 4") as raised:
    sft_lib.run_sft(
      _experiment(steps=2),
      arrays,
      tmp_path,
      mesh,
      rules,
      log_metrics=lambda s, m: seen.append(s),
    )
  message = str(raised.value)
  assert str(sft_dir) in message
  assert "config.sft.steps=2" in message
  assert "--config.sft.steps=4" in message
  assert not seen  # nothing was trained
  assert sorted(p.name for p in sft_dir.iterdir()) == ["4"]  # no step 2
  assert _snapshot(sft_dir) == before  # nothing changed or deleted
