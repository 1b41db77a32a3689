"""The whole job end to end: SFT -> eval -> PPO -> eval -> checkpoint.

All runs happen in one subprocess (this file run as a script), one after
the other, on ONE CPU device with a persistent compilation cache: on the 8
fake devices of the test process every decode step is split eight ways and
an iteration takes ~5x longer, and the cache lets each later run reuse the
first one's compiled steps. The smoke preset, shrunk further by overrides
(2 held-out tasks, greedy evaluation only, one trajectory shape), runs first
from scratch; the other runs copy its workdir (with or without its PPO
iterations) instead of training SFT again; the HumanEval evaluation job
(configs/eval_humaneval.py) runs on two such copies. The tests then read
what the runs left: workdir files, console lines, summaries, errors,
checkpoints (restored here on the 8-device mesh).
"""

import contextlib
import dataclasses
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import traceback

import jax
import numpy as np
import pytest

from codeagent_rl import grade
from codeagent_rl import samples as samples_lib
from codeagent_rl.anticheat import config as anticheat_config
from codeagent_rl.anticheat import monitors
from codeagent_rl.anticheat import pipeline
from codeagent_rl.parallel import checkpoint as ckpt_lib
from codeagent_rl.parallel import state as state_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic
from codeagent_rl.train import eval_job
from codeagent_rl.train import experiment
from codeagent_rl.train import metrics as metrics_lib
from codeagent_rl.train import ppo
from codeagent_rl.train import run
from codeagent_rl.train import workdir as workdir_lib
from configs import eval_humaneval
from configs import tiny
from tests.helpers import presets
from tests.helpers import processes
from tests.helpers import sandboxes

# The module's runs (~6 minutes) are a module fixture, made once per xdist
# worker: on one worker (`--dist loadgroup`, pyproject.toml) they run once.
pytestmark = pytest.mark.xdist_group("e2e_runs")

SANDBOX = sandboxes.short_config("process", 2)
GVISOR = sandboxes.short_config("gvisor", 2, **sandboxes.SMALL_DISK)
ITERATIONS = 4  # ppo.iterations of the test config
HUMANEVAL_TASKS = 2  # humaneval.num_tasks of the test eval config
# The metric names metrics.py promises (its docstring is the contract).
CONTRACT_KEYS = re.findall(
  r"^  ([a-z0-9_]+/[a-z0-9_]+) ", metrics_lib.__doc__, flags=re.M
)
PROGRESS = re.compile(r"^it +(\d+)/(\d+) \| reward ")


def _config(preset="smoke", **overrides):
  """The smoke preset made smaller, plus `section__field` overrides."""
  config = tiny.get_config(preset)
  # The shapes every end-to-end run of the suite shares (tests/helpers).
  config.update_from_flattened_dict(presets.SMALL_SMOKE)
  config.sft.batch_size = 8  # batches split over the 8 test devices
  config.sft.log_every = 2
  config.ppo.iterations = ITERATIONS
  config.ppo.prompts_per_iteration = 2
  config.ppo.samples_per_prompt = 4
  config.ppo.eval_every = 2
  config.checkpoint.save_every = 1
  # Small job limits (the train job applies its config's, whatever the
  # SandboxConfig passed): the tiny model's programs are small.
  config.sandbox.timeout_s = 4.0
  config.sandbox.test_timeout_s = 1.0
  config.sandbox.memory_mb = 256
  config.sandbox.max_output_bytes = 64 << 10
  config.sandbox.scratch_mb = 32
  config.sandbox.max_file_mb = 8
  for key, value in overrides.items():
    section, field = key.split("__")
    node = config
    for part in section.split("."):
      node = node[part]
    node[field] = value
  return config


def _exp(**overrides):
  """The validated experiment of `_config(**overrides)`."""
  return experiment.Experiment.from_config(_config(**overrides))


def _eval_config(train_config="tiny:smoke", **humaneval):
  """The HumanEval job on a smoke run: the first problems, greedy only."""
  config = eval_humaneval.get_config(train_config)
  config.eval.sampled = False
  config.humaneval.num_tasks = HUMANEVAL_TASKS
  for field, value in humaneval.items():
    config.humaneval[field] = value
  return config


class Console:
  """Collects the console lines; optionally asks a `ppo.Stop` to stop."""

  def __init__(self, stop=None):
    self.lines = []
    self.stop = stop

  def __call__(self, text):
    self.lines.extend(str(text).splitlines())
    if self.stop is not None and PROGRESS.match(str(text)):
      self.stop.requested = True

  def progress(self):
    return [int(m.group(1)) for m in map(PROGRESS.match, self.lines) if m]


REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _metrics(workdir):
  return metrics_lib.read_metrics(str(workdir))


def _latest_step(workdir):
  cfg = ckpt_lib.CheckpointConfig(keep=1, save_every=1, async_save=False)
  with ckpt_lib.Checkpointer(
    pathlib.Path(workdir) / workdir_lib.PPO_DIR, cfg, read_only=True
  ) as ckpt:
    return ckpt.latest_step(), ckpt.all_steps()


def _restore(workdir, config, step, with_critic=True):
  """The checkpoint at `step` of a run of `config`, on this process's mesh."""
  exp = experiment.Experiment.from_config(config)
  mesh, rules = exp.make_mesh()
  shapes = jax.eval_shape(
    lambda: state_lib.create_train_states(
      exp.model, exp.optim, mesh, rules, jax.random.key(0)
    )
  )
  shardings = state_lib.train_state_shardings(exp.model, exp.optim, mesh, rules)
  actor, critic = jax.tree.map(
    lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
    shapes,
    shardings,
  )
  cfg = ckpt_lib.CheckpointConfig(keep=1, save_every=1, async_save=False)
  with ckpt_lib.Checkpointer(
    pathlib.Path(workdir) / workdir_lib.PPO_DIR, cfg, read_only=True
  ) as ckpt:
    return ckpt.restore(
      step,
      actor=actor,
      critic=critic if with_critic else None,
      rng=jax.random.key(0),
    )


# --- The runs (in the subprocess) ---------------------------------------------


def _listing(workdir):
  """{path: mtime} of everything under `workdir`."""
  return {
    path.relative_to(workdir): path.stat().st_mtime_ns
    for path in workdir.rglob("*")
  }


def _copy(src, dst):
  shutil.copytree(src, dst)
  return dst


def _strip_ppo(workdir):
  """Leaves SFT, its data cache and its evaluation; removes all of PPO."""
  shutil.rmtree(workdir / workdir_lib.PPO_DIR)
  shutil.rmtree(workdir / workdir_lib.TENSORBOARD)
  for name in (workdir_lib.METRICS, workdir_lib.SUMMARY):
    (workdir / name).unlink()


def _run(name, root, config, sandbox=SANDBOX, stop=None, **kwargs):
  """One `train_and_evaluate` call; what it printed, returned or raised."""
  console = Console(stop)
  record = {"console": console.lines, "summary": None, "error": None}
  try:
    record["summary"] = run.train_and_evaluate(
      experiment.Experiment.from_config(config),
      root / name,
      sandbox,
      stop=stop,
      console=console,
      **kwargs,
    )
  except Exception as e:  # recorded for the test that expects it
    record["error"] = _error(e)
  return record


def _run_job(name, root, config):
  """One `run.run_job` call (as main.py makes it); its stdout lines too."""
  stdout = io.StringIO()
  record = {"console": [], "summary": None, "error": None}
  try:
    with contextlib.redirect_stdout(stdout):
      job = run.job_from_config(config)
      record["summary"] = run.run_job(job, root / name, SANDBOX)
  except Exception as e:  # recorded for the test that expects it
    record["error"] = _error(e)
  record["console"] = stdout.getvalue().splitlines()
  return record


def _error(e):
  return {
    "type": type(e).__name__,
    "message": str(e),
    "traceback": traceback.format_exc(),
  }


def run_all(root: pathlib.Path) -> dict:
  """Every run of this module, in order; returns their records by name."""
  results = {}
  results["smoke"] = _run("smoke", root, _config(), iterations=2)
  _strip_ppo(_copy(root / "smoke", root / "sft_only"))
  # HumanEval on the smoke run (PPO checkpoints 1 and 2), converting the
  # problems; then on a run without PPO, reading the converted ones.
  _copy(root / "smoke", root / "humaneval")
  results["humaneval"] = _run_job("humaneval", root, _eval_config())
  _copy(root / "sft_only", root / "humaneval_sft")
  tasks_file = root / "humaneval" / workdir_lib.HUMANEVAL_TASKS
  results["humaneval_sft"] = _run_job(
    "humaneval_sft", root, _eval_config(tasks_file=str(tasks_file))
  )
  _copy(root / "smoke", root / "again")
  results["again"] = _run("again", root, _config(), iterations=2)
  # Resume equivalence: interrupted after 2 (the smoke run) vs straight.
  _copy(root / "smoke", root / "resumed")
  results["resumed"] = _run("resumed", root, _config())
  _copy(root / "sft_only", root / "straight")
  results["straight"] = _run("straight", root, _config())
  # Rollouts overlapping the previous update (one step stale), twice: the
  # threads must not make it nondeterministic.
  for name in ("overlap", "overlap_again"):
    _copy(root / "sft_only", root / name)
    results[name] = _run(
      name, root, _config(ppo__max_staleness=1), iterations=3
    )
  _copy(root / "sft_only", root / "grpo")
  results["grpo"] = _run("grpo", root, _config("smoke,algo=grpo"), iterations=1)
  _copy(root / "sft_only", root / "gvisor")
  results["gvisor"] = _run("gvisor", root, _config(), GVISOR, iterations=1)
  # A huge learning rate: the first update of iteration 2 blows the params
  # up, so the second epoch's loss is NaN.
  _copy(root / "smoke", root / "nan")
  results["nan"] = _run(
    "nan", root, _config(optim__actor_lr=1e30, ppo__epochs=2)
  )
  # save_every far away: a checkpoint can only come from the stop request.
  _copy(root / "sft_only", root / "stop")
  results["stop"] = _run(
    "stop", root, _config(checkpoint__save_every=100), stop=ppo.Stop()
  )
  return results


def _main(root: str) -> None:
  # The runs share their compilations (the suite's cache when conftest set
  # one, else one of their own).
  if not jax.config.jax_compilation_cache_dir:
    jax.config.update("jax_compilation_cache_dir", os.path.join(root, "jit"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
  results = run_all(pathlib.Path(root))
  with open(os.path.join(root, "results.json"), "w") as f:
    json.dump(results, f, default=str, indent=1)


# --- The tests ----------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Runs `run_all` in a one-device subprocess; (root, records)."""
  root = tmp_path_factory.mktemp("e2e")
  env = processes.one_device_env(llvm_optimised=True)
  proc = subprocess.run(
    [sys.executable, __file__, str(root)],
    cwd=REPO_ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=1500,
  )
  if proc.returncode:
    pytest.fail(f"the e2e runs crashed:\n{proc.stderr[-6000:]}")
  return root, json.loads((root / "results.json").read_text())


def _ok(record):
  assert record["error"] is None, record["error"]["traceback"]
  return record["summary"]


def test_smoke_run_leaves_everything_in_the_workdir(runs):
  root, results = runs
  workdir, record = root / "smoke", results["smoke"]
  summary = _ok(record)
  console = Console()
  console.lines = record["console"]
  config = json.loads((workdir / "config.json").read_text())
  assert config["ppo"]["length_bucket"] == 512
  assert config["rl"]["advantage"]["estimator"] == "gae"
  # The job limits that defined the rewards are saved with the run.
  assert config["sandbox"]["memory_mb"] == 256
  assert config["sandbox"]["timeout_s"] == 4.0
  assert (workdir / workdir_lib.SFT_DIR / "4").is_dir()  # sft.steps
  assert _latest_step(workdir) == (2, [1, 2])
  # metrics.jsonl: one line per iteration, with every promised key.
  records = _metrics(workdir)
  assert [r["iteration"] for r in records] == [0, 1]
  assert len(CONTRACT_KEYS) >= 15, CONTRACT_KEYS
  for metrics in records:
    missing = sorted(set(CONTRACT_KEYS) - set(metrics))
    assert not missing, f"iteration {metrics['iteration']} lacks {missing}"
    assert any(k.startswith("monitor/") for k in metrics)
    assert any(k.startswith("anticheat/") for k in metrics)
  assert "eval/greedy/pass_a" in records[1]
  assert "eval/sampled/pass_a" not in records[1]  # eval.sampled=False
  events = list((workdir / workdir_lib.TENSORBOARD).glob("events.*"))
  assert events and all(e.stat().st_size > 0 for e in events)
  saved = json.loads((workdir / workdir_lib.EVAL_SFT).read_text())
  assert saved["key"]["sft_steps"] == 4  # sft.steps of the test config
  assert 0.0 <= saved["eval"]["eval/greedy/pass_a"] <= 1.0
  # The summary: on disk, returned, and printed.
  on_disk = json.loads((workdir / workdir_lib.SUMMARY).read_text())
  assert on_disk["table"] == summary["table"]
  assert summary["iterations_done"] == 2
  assert not summary["stopped_early"]  # it ran the 2 iterations asked for
  assert summary["final_eval"]["eval/greedy/pass_a"] == pytest.approx(
    records[1]["eval/greedy/pass_a"]
  )
  table = summary["table"].splitlines()
  assert any(line.startswith("SFT (greedy) ") for line in table)
  assert any(line.startswith("PPO final (greedy) ") for line in table)
  assert str(workdir / workdir_lib.PPO_DIR) in summary["table"]
  # Per-task rates of both evaluations, and the paired line (greedy only).
  final = json.loads((workdir / workdir_lib.EVAL_FINAL).read_text())
  assert final["iteration"] == 2
  for per_task in (saved["per_task"], final["per_task"]):
    assert list(per_task) == ["greedy"]
    assert (
      len(per_task["greedy"]["task_id"]) == config["data"]["num_eval_tasks"]
    )
  # The final evaluation's episodes, as a samples file over the held-out
  # tasks: graded offline, they are solved exactly where the trainer said.
  tasks = {
    t.task_id: t for t in schema.read_tasks(workdir / workdir_lib.EVAL_TASKS)
  }
  assert len(tasks) == config["data"]["num_eval_tasks"]
  lines = samples_lib.read_samples(
    workdir / workdir_lib.EVAL_FINAL_SAMPLES, tasks
  )
  assert [s.task_id for s in lines] == final["per_task"]["greedy"]["task_id"]
  anticheat = pipeline.AntiCheat.from_config(
    anticheat_config.AntiCheatConfig.from_config(config["anticheat"])
  )
  with harness.SandboxPool(SANDBOX) as pool:
    graded = grade.grade_samples(
      pool, tasks, lines, io.StringIO(), anticheat=anticheat
    )
  assert [float(grade.solved_ab(g)) for g in graded] == final["per_task"][
    "greedy"
  ]["pass_ab"]
  assert set(summary["paired"]) == {"greedy"}
  mean = np.mean(final["per_task"]["greedy"]["pass_ab"]) - np.mean(
    saved["per_task"]["greedy"]["pass_ab"]
  )
  assert summary["paired"]["greedy"]["mean"] == pytest.approx(mean)
  assert any(
    line.startswith("PPO final - SFT (greedy), pass@1 A&B paired over")
    for line in table
  )
  # The alarms line counts the monitor/* metrics of every iteration.
  assert summary["alarms"] == monitors.alarm_counts(records)
  assert any(line.startswith("monitor alarms: ") for line in table), table
  # The console: one progress line per iteration, then the table.
  assert console.progress() == [1, 2]
  assert console.lines[-len(table) :] == table
  assert any(line.startswith("SFT held-out: greedy") for line in console.lines)
  assert any(
    re.fullmatch(r"SFT: 4 steps, loss \d+\.\d{4} \(\d+ s\)", line)
    for line in console.lines
  ), console.lines


def test_second_call_resumes_without_new_iterations(runs):
  root, results = runs
  summary = _ok(results["again"])
  console = Console()
  console.lines = results["again"]["console"]
  assert console.progress() == []
  assert summary["iterations_done"] == 2
  assert (
    summary["table"].replace("again", "smoke")
    == (results["smoke"]["summary"]["table"])
  )
  assert summary["final_eval"] == results["smoke"]["summary"]["final_eval"]
  assert [r["iteration"] for r in _metrics(root / "again")] == [0, 1]
  assert _latest_step(root / "again") == (2, [1, 2])


def test_resume_equals_a_straight_run(runs):
  root, results = runs
  for name in ("straight", "resumed"):
    out = _ok(results[name])
    assert out["iterations_done"] == ITERATIONS and not out["stopped_early"]
    its = [r["iteration"] for r in _metrics(root / name)]
    assert its == list(range(ITERATIONS)), f"{name}: {its}"
  console = Console()
  console.lines = results["resumed"]["console"]
  assert console.progress() == [3, 4]
  a = _restore(root / "straight", _config(), ITERATIONS)
  b = _restore(root / "resumed", _config(), ITERATIONS)
  assert a.data_position == b.data_position == {"iteration": ITERATIONS}
  for name, x, y in (
    ("actor", a.actor, b.actor),
    ("critic", a.critic, b.critic),
  ):
    for u, v in zip(jax.tree.leaves(x), jax.tree.leaves(y), strict=True):
      np.testing.assert_allclose(
        np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6, err_msg=name
      )
  # PPO moved the actor after the interruption: the comparison is not void.
  start = _restore(root / "resumed", _config(), 2)
  moved = max(
    float(np.abs(np.asarray(u) - np.asarray(v)).max())
    for u, v in zip(
      jax.tree.leaves(start.actor.params),
      jax.tree.leaves(a.actor.params),
      strict=True,
    )
  )
  assert moved > 1e-6
  # The same rollouts and losses, iteration by iteration.
  for r, s in zip(
    _metrics(root / "straight"), _metrics(root / "resumed"), strict=True
  ):
    for key in ("reward/total_mean", "episode/tokens_mean", "loss/critic"):
      assert r[key] == pytest.approx(s[key], rel=1e-4, abs=1e-6), key


def test_overlapped_rollouts_are_one_step_stale_and_deterministic(runs):
  root, results = runs
  for name in ("overlap", "overlap_again"):
    assert _ok(results[name])["iterations_done"] == 3
  got = _metrics(root / "overlap")
  assert [r["perf/staleness"] for r in got] == [0.0, 1.0, 1.0]
  # The first iteration is on policy: the straight run's first iteration.
  first = _metrics(root / "straight")[0]
  for key in ("reward/total_mean", "episode/tokens_mean", "loss/critic"):
    assert got[0][key] == pytest.approx(first[key], rel=1e-5, abs=1e-7), key
  assert "policy/behaviour_weight_mean" not in got[0]
  moved = 0
  for previous, r in zip(got[:-1], got[1:], strict=True):
    assert r["time/rollout_wait_s"] >= 0
    assert r["policy/actor_trained"] == 1.0
    weight = r["policy/behaviour_weight_mean"]
    assert 0.5 < weight < 2.0, weight
    # Where the previous update moved the actor (the smoke model's first
    # rewards are all 0, so its first gradient can be 0), the behaviour
    # policy differs from the proximal one: a weight near 1, not 1.
    if previous["grad_norm/actor"] > 0:
      assert weight != 1.0
      moved += 1
  assert moved, "no update moved the actor: the check above is void"
  again = _metrics(root / "overlap_again")
  keys = (
    "reward/total_mean",
    "episode/tokens_mean",
    "kl/ref_mean",
    "loss/policy",
    "loss/critic",
  )
  for r, s in zip(got, again, strict=True):
    for key in keys:
      assert s[key] == pytest.approx(r[key], rel=1e-6, abs=1e-9), key
    if "policy/behaviour_weight_mean" in r:
      w = r["policy/behaviour_weight_mean"]
      assert s["policy/behaviour_weight_mean"] == pytest.approx(w, rel=1e-6)


def test_critic_free_estimator_saves_no_critic(runs):
  root, results = runs
  out = _ok(results["grpo"])
  assert out["estimator"] == "grpo" and out["iterations_done"] == 1
  config = _config("smoke,algo=grpo")
  restored = _restore(root / "grpo", config, 1, with_critic=False)
  assert restored.critic is None
  with pytest.raises(ValueError, match="critic"):
    _restore(root / "grpo", config, 1, with_critic=True)
  (metrics,) = _metrics(root / "grpo")
  assert "loss/policy" in metrics
  assert "loss/critic" not in metrics


def test_gvisor_backend_runs_one_iteration(runs):
  root, results = runs
  out = _ok(results["gvisor"])
  assert out["iterations_done"] == 1
  lines = results["gvisor"]["console"]
  assert any("sandbox gvisor x2" in line for line in lines)
  (metrics,) = _metrics(root / "gvisor")
  assert metrics["iteration"] == 0
  assert "eval/greedy/pass_a" in metrics
  assert _latest_step(root / "gvisor")[0] == 1


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(runs):
  root, results = runs
  error = results["nan"]["error"]
  assert error is not None, "a NaN loss did not stop the run"
  assert error["type"] == "NonFiniteLossError", error["traceback"]
  assert error["message"].startswith("iteration 2: "), error["message"]
  assert _latest_step(root / "nan") == (2, [1, 2])
  assert [r["iteration"] for r in _metrics(root / "nan")] == [0, 1]


def test_stop_request_saves_and_returns(runs):
  root, results = runs
  out = _ok(results["stop"])
  console = Console()
  console.lines = results["stop"]["console"]
  assert console.progress() == [1]
  assert out["stopped_early"] and out["iterations_done"] == 1
  assert [r["iteration"] for r in _metrics(root / "stop")] == [0]
  assert _latest_step(root / "stop")[0] == 1, (
    "a stop requested after the iteration's save point must still save"
    " (ppo_loop.run_ppo: save again when stop.requested breaks the loop)"
  )


def _humaneval_ok(record, workdir):
  """The job's result; checks that it is the one on disk and printed."""
  result = _ok(record)
  assert (
    json.loads((workdir / workdir_lib.HUMANEVAL_RESULT).read_text()) == result
  )
  assert result["num_tasks"] == HUMANEVAL_TASKS
  pass_a = result["humaneval/greedy/pass_a"]
  pass_ab = result["humaneval/greedy/pass_ab"]
  assert 0.0 <= pass_ab <= pass_a <= 1.0  # A-and-B passes imply A passes
  assert result["humaneval/greedy/turns_mean"] >= 1.0  # the model acted
  assert not [k for k in result if "/sampled/" in k]  # eval.sampled=False
  assert record["console"][-2:] == [
    f"evaluating {result['checkpoint']} on HumanEval",
    f"HumanEval ({HUMANEVAL_TASKS} problems, greedy): pass@1 {pass_a:.3f},"
    f" with held-out suite B {pass_ab:.3f}",
  ]
  return result


def test_humaneval_job_evaluates_the_newest_ppo_checkpoint(runs):
  root, results = runs
  workdir = root / "humaneval"
  result = _humaneval_ok(results["humaneval"], workdir)
  assert _latest_step(workdir) == (2, [1, 2])
  assert (
    result["checkpoint"] == f"PPO iteration 2 ({workdir / workdir_lib.PPO_DIR})"
  )
  # The problems were converted now and cached, only as many as asked.
  lines = (workdir / workdir_lib.HUMANEVAL_TASKS).read_text().splitlines()
  tasks = [json.loads(line) for line in lines]
  assert [t["task_id"] for t in tasks] == [
    f"HumanEval/{i}" for i in range(HUMANEVAL_TASKS)
  ]
  assert all(t["hidden_tests"] and t["heldout_tests"] for t in tasks)


def test_humaneval_job_falls_back_to_the_sft_checkpoint(runs):
  root, results = runs
  workdir = root / "humaneval_sft"
  result = _humaneval_ok(results["humaneval_sft"], workdir)
  assert not (workdir / workdir_lib.PPO_DIR).exists()
  assert result["checkpoint"] == f"SFT step 4 ({workdir / workdir_lib.SFT_DIR})"
  assert not (workdir / workdir_lib.HUMANEVAL_TASKS).exists()  # read tasks_file


@pytest.mark.parametrize(
  "train_config, flag",
  [("tiny:smoke", "configs/tiny.py:smoke"), ("tiny", "configs/tiny.py")],
)
def test_humaneval_job_without_a_checkpoint_says_to_train_first(
  tmp_path, train_config, flag
):
  workdir = tmp_path / "untrained"
  # Both checkpoint folders exist but hold no step (stopped before a save).
  (workdir / workdir_lib.PPO_DIR).mkdir(parents=True)
  (workdir / workdir_lib.SFT_DIR).mkdir()
  config = _eval_config(train_config)
  assert config.humaneval.train_config == train_config
  with pytest.raises(eval_job.CheckpointNotFoundError) as error:
    run.run_job(run.job_from_config(config), workdir, SANDBOX)
  assert isinstance(error.value, FileNotFoundError)
  message = str(error.value)
  assert message.startswith(f"{workdir} has no PPO "), message
  # The command that trains the run this eval config is for.
  assert message.endswith(
    f" train first: python -m codeagent_rl.main --config={flag}"
    f" --workdir={workdir}"
  ), message
  assert not (workdir / workdir_lib.HUMANEVAL_RESULT).exists()


def test_cli_without_a_checkpoint_exits_with_the_message(tmp_path):
  workdir = tmp_path / "untrained"
  proc = _cli(
    "--config=configs/eval_humaneval.py:tiny:smoke", f"--workdir={workdir}"
  )
  line = _last_error_line(proc)
  assert line.startswith(f"{workdir} has no PPO "), proc.stderr
  assert line.endswith(
    f" --config=configs/tiny.py:smoke --workdir={workdir}"
  ), proc.stderr
  assert not workdir.exists()


def _cli(*args, timeout=300):
  """`python -m codeagent_rl.main ARGS` with the process sandbox."""
  return subprocess.run(
    [
      sys.executable,
      "-m",
      "codeagent_rl.main",
      *args,
      "--sandbox_backend=process",
    ],
    cwd=REPO_ROOT,
    env={**os.environ, "JAX_PLATFORMS": "cpu"},
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def _last_error_line(proc):
  assert proc.returncode != 0
  assert "Traceback" not in proc.stderr, proc.stderr
  return [line for line in proc.stderr.splitlines() if line.strip()][-1]


def test_cli_rejects_a_bad_humaneval_value_before_starting(tmp_path):
  workdir = tmp_path / "untrained"
  proc = _cli(
    "--config=configs/eval_humaneval.py:tiny:smoke",
    "--config.humaneval.num_tasks=165",
    f"--workdir={workdir}",
  )
  line = _last_error_line(proc)
  assert line.startswith("error: config.humaneval.num_tasks=165:"), line
  assert "from 0 (all) to 164" in line
  assert not workdir.exists()


def test_cli_sft_past_its_steps_exits_with_the_message(runs, tmp_path):
  root, _ = runs
  workdir = _copy(root / "sft_only", tmp_path / "sft_only")
  before = sorted(p.name for p in (workdir / workdir_lib.SFT_DIR).iterdir())
  overrides = {
    "data.num_train_tasks": 8,
    "data.num_eval_tasks": 2,
    "env.max_tokens_per_turn": 160,
    "env.max_total_tokens": 512,
    "sft.steps": 2,
  }
  proc = _cli(
    "--config=configs/tiny.py:smoke",
    *(f"--config.{k}={v}" for k, v in overrides.items()),
    f"--workdir={workdir}",
  )
  line = _last_error_line(proc)
  assert line.startswith(
    f"error: {workdir / workdir_lib.SFT_DIR} holds an SFT"
  ), line
  assert "--config.sft.steps=4" in line
  assert (
    sorted(p.name for p in (workdir / workdir_lib.SFT_DIR).iterdir()) == before
  )


def test_cli_names_a_bad_preset_or_field_in_one_line(tmp_path):
  workdir = tmp_path / "never"
  preset = _cli("--config=configs/tiny.py:huge", f"--workdir={workdir}")
  field = _cli(
    "--config=configs/tiny.py",
    "--config.sft.stepz=3",
    f"--workdir={workdir}",
  )
  for proc in (preset, field):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
  (line, _) = preset.stderr.strip().splitlines()
  assert line.startswith("error: flag --config=configs/tiny.py:huge: "), line
  assert line.endswith(
    "ValueError: configs/tiny.py: unknown preset 'huge';"
    " expected 'default', 'smoke', 'algo=' one of ('gae', 'grpo',"
    " 'dr_grpo', 'rloo'), or 'seed=N'."
  )
  (line, _) = field.stderr.strip().splitlines()
  assert line == (
    "error: a --config.* override names a field the config lacks: 'stepz';"
    ' Did you mean "steps" instead of "stepz"?'
  )
  assert not workdir.exists()


def test_humaneval_num_tasks_is_bounded_by_humaneval():
  fields = _eval_config().humaneval.to_dict()
  assert eval_job.HumanEvalConfig(**{**fields, "num_tasks": 164})
  for bad in (165, -1, 2.0):
    with pytest.raises(ValueError, match=rf"humaneval\.num_tasks={bad}:"):
      eval_job.HumanEvalConfig(**{**fields, "num_tasks": bad})


def test_humaneval_tasks_file_must_hold_num_tasks_problems(tmp_path):
  tasks, _ = synthetic.generate(
    synthetic.SyntheticConfig(num_tasks=2, families=("affine",))
  )
  path = tmp_path / "tasks.jsonl"
  schema.write_tasks(path, tasks)
  fields = _eval_config(tasks_file=str(path)).humaneval.to_dict()

  def read(**changes):
    cfg = eval_job.HumanEvalConfig(**{**fields, **changes})
    return [t.task_id for t in eval_job._tasks(cfg, tmp_path, pool=None)]

  ids = [t.task_id for t in tasks]
  assert read(num_tasks=0) == ids
  assert read(num_tasks=1) == ids[:1]
  with pytest.raises(experiment.SetupError, match="holds 2 problems") as e:
    read(num_tasks=3)
  assert "num_tasks=3" in str(e.value) and str(path) in str(e.value)
  missing = tmp_path / "missing.jsonl"
  with pytest.raises(experiment.SetupError, match="cannot be read") as e:
    read(tasks_file=str(missing))
  assert f"--out={missing}" in str(e.value)
  path.write_text("{not json\n")
  with pytest.raises(experiment.SetupError, match="cannot be read"):
    read()
  assert not (tmp_path / workdir_lib.HUMANEVAL_TASKS).exists()


def test_saved_sft_eval_is_reused_only_under_the_same_key(tmp_path):
  path = tmp_path / workdir_lib.EVAL_SFT
  exp = experiment.Experiment.from_config(_config())
  key = run._sft_eval_key(exp)
  assert key["sft_steps"] == exp.sft.steps
  assert key["eval"]["samples_per_task"] == exp.eval.samples_per_task
  assert run._saved_sft_eval(path, key) is None  # none saved
  scalars = {"eval/greedy/pass_a": 0.5}
  path.write_text(json.dumps({"key": key, "eval": scalars}))
  assert run._saved_sft_eval(path, key) == scalars
  # Resumed with more SFT steps: the saved one is of another model.
  more_steps = {**key, "sft_steps": key["sft_steps"] + 2}
  assert run._saved_sft_eval(path, more_steps) is None
  # More samples per task: another measurement of the same model.
  more_samples = {**key, "eval": {**key["eval"], "samples_per_task": 4}}
  assert run._saved_sft_eval(path, more_samples) is None
  # Another anti-cheat, other weights or another way of counting solved
  # episodes: rejected episodes count as unsolved, so it measures otherwise.
  other = dataclasses.replace(exp.anticheat, classifier_threshold=0.9)
  assert run._sft_eval_key(dataclasses.replace(exp, anticheat=other)) != key
  # Other held-out tasks: another data seed (a run of another seed, or
  # with config.data.seed set), or another number of them.
  for data in (
    dataclasses.replace(exp.data, seed=exp.seed + 1),
    dataclasses.replace(exp.data, num_eval_tasks=exp.data.num_eval_tasks + 1),
  ):
    assert run._sft_eval_key(dataclasses.replace(exp, data=data)) != key
  assert run._sft_eval_key(dataclasses.replace(exp, seed=exp.seed + 1)) != key
  same_tasks = dataclasses.replace(
    exp, seed=exp.seed + 1, data=dataclasses.replace(exp.data, seed=exp.seed)
  )
  assert run._sft_eval_key(same_tasks) == key
  for field, value in (("weights_sha256", "0" * 64), ("measure", 1)):
    assert run._saved_sft_eval(path, {**key, field: value}) is None
  # Earlier formats (no key): not trusted.
  path.write_text(json.dumps({"sft_steps": exp.sft.steps, "eval": scalars}))
  assert run._saved_sft_eval(path, key) is None
  path.write_text(json.dumps(scalars))
  assert run._saved_sft_eval(path, key) is None
  # Damaged by hand: evaluated again, not a crash.
  for damaged in (b"{not json", b"[1, 2]", b"\xff\xfe"):
    path.write_bytes(damaged)
    assert run._saved_sft_eval(path, key) is None


def test_more_sft_steps_under_ppo_checkpoints_are_refused(runs, tmp_path):
  """SFT would move under PPO checkpoints trained from the shorter SFT."""
  root, _ = runs
  workdir = _copy(root / "smoke", tmp_path / "smoke")
  done, _ = _latest_step(workdir)
  before = _listing(workdir)
  with pytest.raises(experiment.SetupError, match="would train SFT") as e:
    run.train_and_evaluate(_exp(sft__steps=6), workdir, SANDBOX)
  message = str(e.value)
  assert f"{workdir / workdir_lib.PPO_DIR} holds PPO checkpoints" in message
  assert f"to iteration {done})" in message
  assert "config.sft.steps=6" in message
  assert "--config.sft.steps=4 to resume PPO" in message
  assert _listing(workdir) == before  # config.json included


def test_fewer_sft_steps_are_refused_before_anything_is_written(runs, tmp_path):
  """An SFT checkpoint past sft.steps: refused, config.json kept."""
  root, _ = runs
  workdir = _copy(root / "smoke", tmp_path / "smoke")
  before = _listing(workdir)
  with pytest.raises(experiment.SetupError, match="past") as e:
    run.train_and_evaluate(_exp(sft__steps=2), workdir, SANDBOX)
  message = str(e.value)
  assert "SFT checkpoint at step 4, past config.sft.steps=2" in message
  assert "--config.sft.steps=4 to reuse that checkpoint" in message
  assert _listing(workdir) == before  # config.json included


def _cache_ids(workdir):
  tasks = (workdir / workdir_lib.HUMANEVAL_TASKS).read_text().splitlines()
  return [json.loads(line)["task_id"] for line in tasks]


def test_humaneval_task_cache_follows_num_tasks(tmp_path, monkeypatch):
  """A cache made for fewer problems is extended; a bad one is rebuilt."""
  converted = []
  convert = eval_job.humaneval.convert

  def spy(pool, problems):
    converted.append([p["task_id"] for p in problems])
    return convert(pool, problems)

  monkeypatch.setattr(eval_job.humaneval, "convert", spy)
  # "All" problems are 5 here, to keep the conversions few.
  monkeypatch.setattr(eval_job.humaneval, "NUM_PROBLEMS", 5)
  ids = [f"HumanEval/{i}" for i in range(5)]
  cache = tmp_path / workdir_lib.HUMANEVAL_TASKS

  def tasks(num_tasks):
    config = _eval_config(num_tasks=num_tasks).humaneval.to_dict()
    cfg = eval_job.HumanEvalConfig(**config)
    converted.clear()
    got = eval_job._tasks(cfg, tmp_path, pool)
    return [t.task_id for t in got], converted[:]

  with harness.SandboxPool(SANDBOX) as pool:
    assert tasks(2) == (ids[:2], [ids[:2]])
    assert _cache_ids(tmp_path) == ids[:2]
    first_two = cache.read_text().splitlines()
    # More than cached: only the missing problem is converted, then cached.
    assert tasks(3) == (ids[:3], [ids[2:3]])
    assert _cache_ids(tmp_path) == ids[:3]
    assert cache.read_text().splitlines()[:2] == first_two
    # Fewer than cached: read, nothing converted.
    assert tasks(1) == (ids[:1], [])
    # 0 is all of them.
    assert tasks(0) == (ids, [ids[3:]])
    assert _cache_ids(tmp_path) == ids
    # A damaged cache (a write cut short) is converted again, not trusted.
    cache.write_text(cache.read_text()[:-20])
    assert tasks(2) == (ids[:2], [ids[:2]])
    assert _cache_ids(tmp_path) == ids[:2]
    # So is one that holds other problems than the first ones.
    lines = cache.read_text().splitlines()
    cache.write_text(f"{lines[1]}\n{lines[0]}\n")
    assert tasks(2) == (ids[:2], [ids[:2]])
    assert cache.read_text().splitlines() == lines


if __name__ == "__main__":
  _main(sys.argv[1])
