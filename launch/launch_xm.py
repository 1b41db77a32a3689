r"""Launches a sweep of the main job with XManager.

  pip install -e '.[launch]'
  python launch/launch_xm.py --config=configs/long_horizon.py \
    --sweep=launch/sweeps/seeds_estimators.py --executor=local \
    --workdir_root=/tmp/runs
  python launch/launch_xm.py --config=configs/qwen25_coder.py \
    --sweep=launch/sweeps/learning_rates.py --executor=vertex \
    --accelerator=H100 --accelerator_count=8 --workdir_root=gs://BUCKET/runs

Each item of the sweep (`launch/sweeps/NAME.py`: `sweep()` yields dicts of
config overrides) becomes one work unit running
`python -m codeagent_rl.main --config=... --config.<field>=<value>
--workdir=<workdir_root>/<experiment id>/<unit name>`, packaged from this
repository as a Python container. Every override is checked against the
config before anything launches (`sweep_lib.check_overrides`).

Executors: `local` (Docker on this machine), `vertex` (Vertex AI custom
jobs) and `kubernetes` (a GKE cluster, `kubectl` configured); resources
come from `--cpu`, `--memory_gb`, `--accelerator` and
`--accelerator_count`.
"""

from __future__ import annotations

from collections.abc import Sequence
import pathlib
import sys

from absl import app
from absl import flags

if __package__ in (None, ""):  # run as a script: the repository is the root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from launch import sweep_lib  # noqa: E402 (after the path fix above)

EXECUTORS = ("local", "vertex", "kubernetes")
# A CUDA image with Python 3.11 for accelerators; a slim one for CPU jobs.
GPU_IMAGE = "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"
CPU_IMAGE = "python:3.11-slim"
# XManager's resource types that are not accelerators.
NOT_ACCELERATORS = frozenset({"CPU", "MEMORY", "RAM", "EPHEMERAL_STORAGE"})


def define_flags() -> None:
  """Registers the launcher's flags."""
  flags.DEFINE_string("config", None, "configs/FILE.py[:presets] to run.")
  flags.DEFINE_string("sweep", None, "launch/sweeps/NAME.py.")
  flags.DEFINE_enum("executor", "local", EXECUTORS, "Where jobs run.")
  flags.DEFINE_string(
    "workdir_root", None, "Each unit's workdir is ROOT/<experiment>/<unit>."
  )
  flags.DEFINE_string("title", None, "Experiment title (default: the sweep).")
  flags.DEFINE_integer("cpu", 8, "vCPUs per job.")
  flags.DEFINE_integer("memory_gb", 32, "Memory per job, GiB.")
  flags.DEFINE_string(
    "accelerator", None, "Accelerator type (e.g. H100, A100, V100), or none."
  )
  flags.DEFINE_integer("accelerator_count", 1, "Accelerators per job.")
  flags.DEFINE_list(
    "extra_args",
    [],
    "More main-job flags for every unit, e.g. --sandbox_backend=ray.",
  )


def requirements(
  xm, cpu: int, memory_gb: int, accelerator: str | None, count: int
):
  """The `xm.JobRequirements` of every unit.

  Raises:
    sweep_lib.SweepError: an accelerator XManager does not know (the
      message lists the known ones), or a count below 1.
  """
  resources = {"cpu": cpu, "memory": memory_gb * 2**30}
  if accelerator:
    name = accelerator.upper()
    known = {t.name for t in xm.ResourceType} - NOT_ACCELERATORS
    if name not in known:
      raise sweep_lib.SweepError(
        f"--accelerator={accelerator}: not an accelerator XManager knows;"
        f" one of {', '.join(sorted(known))}."
      )
    if count < 1:
      raise sweep_lib.SweepError(f"--accelerator_count={count}: must be >= 1.")
    resources[name] = count
  return xm.JobRequirements(**resources)


def _xmanager():
  """XManager's (xm, xm_local) modules.

  Raises:
    sweep_lib.SweepError: XManager is not installed (the `launch` extra).
  """
  try:
    from xmanager import xm  # noqa: PLC0415 (the launch extra)
    from xmanager import xm_local  # noqa: PLC0415
  except ImportError as e:
    raise sweep_lib.SweepError(
      f"XManager is not installed ({e}): pip install -e '.[launch]'."
    ) from None
  return xm, xm_local


def executor_for(kind: str, reqs):
  """(executor, executor spec) of `kind`."""
  _, xm_local = _xmanager()

  if kind == "local":
    return xm_local.Local(requirements=reqs), xm_local.Local.Spec()
  if kind == "vertex":
    return xm_local.Vertex(requirements=reqs), xm_local.Vertex.Spec()
  return xm_local.Kubernetes(requirements=reqs), xm_local.Kubernetes.Spec()


def launch(
  config: str,
  sweep_path: str,
  executor: str,
  workdir_root: str,
  *,
  title: str | None = None,
  cpu: int = 8,
  memory_gb: int = 32,
  accelerator: str | None = None,
  accelerator_count: int = 1,
  extra_args: Sequence[str] = (),
):
  """Packages the repository and adds one work unit per sweep item.

  Returns:
    The experiment (XManager's, or the mock a test patched in).

  Raises:
    sweep_lib.SweepError: a bad sweep or override, before any launch.
  """
  xm, xm_local = _xmanager()
  items = sweep_lib.load_sweep(sweep_path)
  sweep_lib.check_overrides(config, items)
  reqs = requirements(xm, cpu, memory_gb, accelerator, accelerator_count)
  job_executor, spec = executor_for(executor, reqs)
  title = title or f"codeagent_rl {pathlib.Path(sweep_path).stem}"
  with xm_local.create_experiment(experiment_title=title) as experiment:
    [executable] = experiment.package(
      [
        xm.python_container(
          executor_spec=spec,
          path=str(sweep_lib.REPO_ROOT),
          base_image=GPU_IMAGE if accelerator else CPU_IMAGE,
          entrypoint=xm.ModuleName(sweep_lib.ENTRY_MODULE),
          # The extras a cluster job needs: Ray for a sandbox fleet, the
          # HF importers for a checkpoint.
          docker_instructions=[
            "COPY . /workdir",
            "WORKDIR /workdir",
            "RUN pip install -e '.[hf,ray]'",
          ],
        )
      ]
    )
    root = f"{workdir_root.rstrip('/')}/{experiment.experiment_id}"
    for overrides in items:
      workdir = f"{root}/{sweep_lib.unit_name(overrides)}"
      args = sweep_lib.main_args(config, overrides, workdir)
      args += list(extra_args)
      experiment.add(
        xm.Job(executable=executable, executor=job_executor, args=args)
      )
  return experiment


def main(argv: list[str]) -> None:
  """Entry point of `python launch/launch_xm.py`."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  f = flags.FLAGS
  try:
    launch(
      f.config,
      f.sweep,
      f.executor,
      f.workdir_root,
      title=f.title,
      cpu=f.cpu,
      memory_gb=f.memory_gb,
      accelerator=f.accelerator,
      accelerator_count=f.accelerator_count,
      extra_args=f.extra_args,
    )
  except sweep_lib.SweepError as e:
    sys.exit(f"error: {e}")


if __name__ == "__main__":
  define_flags()
  flags.mark_flags_as_required(["config", "sweep", "workdir_root"])
  app.run(main)
