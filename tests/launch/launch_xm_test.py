"""launch/launch_xm.py against XManager's mock experiment: what it starts."""

import pytest
from xmanager import xm
from xmanager import xm_local
from xmanager import xm_mock

from launch import launch_xm
from launch import sweep_lib

SWEEPS = sweep_lib.REPO_ROOT / "launch" / "sweeps"


@pytest.fixture
def experiments(monkeypatch):
  """Patches XManager to hand out mock experiments; the list of them."""
  made = []

  def create_experiment(experiment_title):
    experiment = xm_mock.MockExperiment()
    experiment.title = experiment_title
    made.append(experiment)
    return experiment

  monkeypatch.setattr(xm_local, "create_experiment", create_experiment)
  return made


def _flags(args):
  """--name=value arguments as a dict (the unit's args are a list)."""
  return dict(a[2:].split("=", 1) for a in args)


def test_seeds_x_estimators_on_vertex(experiments):
  experiment = launch_xm.launch(
    "configs/long_horizon.py",
    str(SWEEPS / "seeds_estimators.py"),
    "vertex",
    "gs://bucket/runs",
    accelerator="H100",
    accelerator_count=8,
    extra_args=["--sandbox_backend=ray", "--ray_address=10.0.0.2:6379"],
  )
  assert experiments == [experiment]
  jobs = experiment.launched_jobs
  assert len(jobs) == 9
  seen = set()
  for job in jobs:
    assert isinstance(job.executor, xm_local.Vertex)
    assert job.executor.requirements.accelerator.name == "H100"
    assert (
      job.executor.requirements.task_requirements[xm.ResourceType.H100] == 8
    )
    args = _flags(list(job.args.to_list(str)))
    assert args["config"] == "configs/long_horizon.py"
    assert args["sandbox_backend"] == "ray"
    assert args["ray_address"] == "10.0.0.2:6379"
    pair = (args["config.seed"], args["config.rl.advantage.estimator"])
    assert args["workdir"].startswith("gs://bucket/runs/1/")
    seen.add((pair, args["workdir"]))
  pairs = {p for p, _ in seen}
  assert pairs == {(s, e) for s in "012" for e in ("gae", "grpo", "rloo")}
  assert len({w for _, w in seen}) == 9  # one workdir per unit


@pytest.mark.parametrize(
  ("kind", "cls"),
  [("local", xm_local.Local), ("kubernetes", xm_local.Kubernetes)],
)
def test_learning_rates_on_each_executor(experiments, kind, cls):
  experiment = launch_xm.launch(
    "configs/tiny.py",
    str(SWEEPS / "learning_rates.py"),
    kind,
    "/tmp/runs",
    cpu=4,
    memory_gb=16,
  )
  jobs = experiment.launched_jobs
  assert len(jobs) == 6
  assert all(isinstance(j.executor, cls) for j in jobs)
  reqs = jobs[0].executor.requirements
  assert reqs.accelerator is None
  assert reqs.task_requirements[xm.ResourceType.CPU] == 4
  assert reqs.task_requirements[xm.ResourceType.MEMORY] == 16 * 2**30
  rates = sorted(
    {_flags(list(j.args.to_list(str)))["config.optim.actor_lr"] for j in jobs}
  )
  assert rates == ["0.0001", "0.0003", "3e-05"]


def test_a_field_the_config_lacks_stops_the_launch(experiments, tmp_path):
  sweep = tmp_path / "bad.py"
  sweep.write_text("def sweep():\n  yield {'ppo.no_such_field': 1}\n")
  with pytest.raises(
    sweep_lib.SweepError, match="no field 'ppo.no_such_field'"
  ):
    launch_xm.launch("configs/tiny.py", str(sweep), "local", "/tmp/r")
  sweep.write_text("def sweep():\n  yield {'ppo.iterations': 'many'}\n")
  with pytest.raises(sweep_lib.SweepError, match="ppo.iterations='many'"):
    launch_xm.launch("configs/tiny.py", str(sweep), "local", "/tmp/r")
  assert experiments == []  # nothing was created, let alone launched


@pytest.mark.parametrize(
  ("body", "message"),
  [
    ("x = 1\n", "defines no sweep"),
    ("def sweep():\n  yield [1]\n", "not a dict"),
    ("def sweep():\n  return iter(())\n", "yielded nothing"),
    ("def sweep():\n  yield {'Bad Key': 1}\n", "not a dotted config field"),
  ],
)
def test_malformed_sweeps_are_named(tmp_path, body, message):
  sweep = tmp_path / "s.py"
  sweep.write_text(body)
  with pytest.raises(sweep_lib.SweepError, match=message):
    sweep_lib.load_sweep(sweep)
  with pytest.raises(sweep_lib.SweepError, match="no such file"):
    sweep_lib.load_sweep(tmp_path / "missing.py")


def test_an_unknown_accelerator_stops_the_launch(experiments):
  with pytest.raises(sweep_lib.SweepError, match="--accelerator=H1000"):
    launch_xm.launch(
      "configs/tiny.py",
      str(SWEEPS / "learning_rates.py"),
      "vertex",
      "/tmp/r",
      accelerator="H1000",
    )
  with pytest.raises(sweep_lib.SweepError, match="--accelerator_count=0"):
    launch_xm.launch(
      "configs/tiny.py",
      str(SWEEPS / "learning_rates.py"),
      "vertex",
      "/tmp/r",
      accelerator="h100",
      accelerator_count=0,
    )
  assert experiments == []


def test_without_xmanager_the_launch_says_what_to_install(monkeypatch):
  import builtins  # noqa: PLC0415

  real = builtins.__import__

  def no_xmanager(name, *args, **kwargs):
    if name.startswith("xmanager"):
      raise ImportError(f"No module named {name!r}")
    return real(name, *args, **kwargs)

  monkeypatch.setattr(builtins, "__import__", no_xmanager)
  with pytest.raises(
    sweep_lib.SweepError, match=r"pip install -e '\.\[launch\]'"
  ):
    launch_xm.launch(
      "configs/tiny.py", str(SWEEPS / "learning_rates.py"), "local", "/tmp/r"
    )
