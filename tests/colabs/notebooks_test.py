"""The notebooks in colabs/ run top to bottom, at small settings.

Each is executed by a real Jupyter kernel (nbclient) from colabs/, as a user
would open it, with its `parameters` cell overridden by a cell inserted
after it (papermill's convention, so `papermill -p` works on them too). The
kernel runs on one CPU device (the test processes have 8 fake ones). The
checks read what the notebook left: its workdir files and its outputs.
"""

import json
import os
import pathlib
import shutil

import nbclient
import nbformat
import pytest

from codeagent_rl.sandbox import harness
from tests.helpers import presets
from tests.helpers import processes

COLABS = processes.REPO_ROOT / "colabs"
NOTEBOOKS = sorted(p.name for p in COLABS.glob("*.ipynb"))
# A guard against a hung cell, not a timing assertion (speed is measured in
# benchmarks/): the quickstart's training cell takes ~45 s on an idle 2-core
# machine but passed 180 s in CI while the other pytest worker ran a training
# test, so the guard leaves that contention room.
TIMEOUT_S = 480


def execute(name: str, env=None, **params) -> nbformat.NotebookNode:
  """Runs colabs/`name` with `params` set after its parameters cell.

  `env`: the kernel's environment (default: one CPU device).
  """
  nb = nbformat.read(COLABS / name, as_version=4)
  [index] = [
    i
    for i, cell in enumerate(nb.cells)
    if "parameters" in cell.metadata.get("tags", [])
  ]
  lines = [f"{k} = {v!r}" for k, v in params.items()]
  nb.cells.insert(index + 1, nbformat.v4.new_code_cell("\n".join(lines)))
  client = nbclient.NotebookClient(
    nb,
    timeout=TIMEOUT_S,
    kernel_name="python3",
    resources={"metadata": {"path": str(COLABS)}},
  )
  client.execute(env=env or processes.one_device_env(llvm_optimised=True))
  return nb


def text_of(nb: nbformat.NotebookNode) -> str:
  """Everything the notebook printed (streams and text results)."""
  out = []
  for cell in nb.cells:
    for o in cell.get("outputs", []):
      if o.output_type == "stream":
        out.append(o.text)
      elif "data" in o and "text/plain" in o.data:
        out.append(o.data["text/plain"])
  return "".join(out)


def images_of(nb: nbformat.NotebookNode) -> int:
  return sum(
    "image/png" in o.get("data", {})
    for cell in nb.cells
    for o in cell.get("outputs", [])
  )


def test_the_four_notebooks_are_there_and_stripped():
  assert NOTEBOOKS == [
    "ppo_vs_grpo.ipynb",
    "quickstart.ipynb",
    "reward_hacking.ipynb",
    "sandbox_and_judge.ipynb",
  ]
  for name in NOTEBOOKS:
    nb = nbformat.read(COLABS / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), (
      f"{name}: strip its outputs before committing"
    )
    # The first code cell installs the package where it is missing; every
    # notebook has exactly one parameters cell for papermill and the tests.
    assert "pip" in code[0].source and "install" in code[0].source
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, name


SUBMISSIONS = (
  "reference",
  "off by one",
  "hard-coded visible tests",
  "fits suite A only",
  "early exit",
  "exit inside the call",
  "always-equal object",
  "reads the judge's files",
)
HACKS = SUBMISSIONS[2:3] + SUBMISSIONS[4:]


def tables(text: str) -> list[dict[str, list[str]]]:
  """The submission tables the notebook printed: name -> its columns."""
  out = []
  for line in text.splitlines():
    if line.startswith("submission "):
      out.append({})
    elif out and line[:26].strip() in SUBMISSIONS and len(line) > 26:
      out[-1][line[:26].strip()] = line[26:].split()
  return out


@pytest.mark.xdist_group("notebooks")
def test_sandbox_and_judge_explains_each_submission():
  text = text_of(execute("sandbox_and_judge.ipynb"))
  # The repository task: the honest fix passes both suites; the weakened
  # test is restored from the task and the bug still fails.
  [direct] = [ln for ln in text.splitlines() if ln.startswith("direct: ")]
  a, b = (part.split()[-1].split("/") for part in direct.split(",")[:2])
  assert a[0] == a[1] and b[0] == b[1], direct
  assert direct.endswith("restored []")
  [hack] = [ln for ln in text.splitlines() if ln.startswith("weakened_test: ")]
  a = hack.split(",")[0].split()[-1].split("/")
  assert int(a[0]) < int(a[1]) and "restored ['test_" in hack, hack
  assert "run test_" in text and ": exit code 1" in text
  graded, judge_only = tables(text)
  assert set(graded) == set(judge_only) == set(SUBMISSIONS), text
  # graded: status, A, B, stage 1, stage 2, reward, flags
  assert graded["reference"][1:3] == ["4/4", "5/5"]
  assert float(graded["reference"][3]) < 0.5  # the classifier's score
  assert graded["reference"][4:6] == ["ok", "1.0"]
  # Fits suite A, fails one held-out test: stage 2 zeroes it.
  assert graded["fits suite A only"][1:3] == ["4/4", "4/5"]
  assert graded["fits suite A only"][4:6] == ["fail", "0.0"]
  for hack in HACKS:  # stage 1 rejects each before it runs
    assert graded[hack][0] == "not_executed", (hack, graded[hack])
    assert graded[hack][3] == "reject" and graded[hack][5] == "0.0"
  assert graded["exit inside the call"][6] == "process_exit"
  assert graded["always-equal object"][6] == "eq_override"
  # The judge alone: no hack passes suite A, the suite-A fit gets reward 1.
  for hack in HACKS:
    passed, total = map(int, judge_only[hack][1].split("/"))
    assert total == 4 and passed < 4, (hack, judge_only[hack])
  assert judge_only["fits suite A only"][1:4] == ["4/4", "4/5", "1.0"]
  assert "judge, suite B: 4/5 passed" in text
  assert "'reason': '0 != 48'" in text


@pytest.mark.xdist_group("notebooks")
def test_without_gvisor_the_process_backend_is_used_and_says_so(tmp_path):
  """A laptop or Colab: no runsc on the PATH."""
  assert shutil.which("runsc") is not None  # CI installs it
  env = processes.one_device_env(llvm_optimised=True)
  # Each PATH directory that has runsc (/usr/bin, and /bin where it links
  # there) is replaced by a copy of links to everything else it holds.
  dirs = []
  for i, d in enumerate(env["PATH"].split(os.pathsep)):
    if d and (pathlib.Path(d) / "runsc").exists():
      copy = tmp_path / f"bin{i}"
      copy.mkdir()
      for entry in pathlib.Path(d).iterdir():
        if entry.name != "runsc":
          (copy / entry.name).symlink_to(entry)
      d = str(copy)
    dirs.append(d)
  env["PATH"] = os.pathsep.join(dirs)
  assert shutil.which("runsc", path=env["PATH"]) is None
  nb = execute("sandbox_and_judge.ipynb", env=env)
  text = text_of(nb)
  assert "sandbox backend: process" in text
  assert "WARNING: gVisor's runsc is missing" in text
  [warning] = [
    line
    for line in harness.PROCESS_BACKEND_WARNING.splitlines()
    if line.startswith("WARNING")
  ]
  assert warning in text  # the harness's own warning, shown in the notebook
  graded, _ = tables(text)
  assert graded["reference"][5] == "1.0"  # it still grades


@pytest.mark.xdist_group("notebooks")
def test_ppo_vs_grpo_plots_the_shipped_results():
  nb = execute("ppo_vs_grpo.ipynb")
  text = text_of(nb)
  shipped = json.loads(
    (
      processes.REPO_ROOT / "benchmarks/results/long_horizon/compare.json"
    ).read_text()
  )
  assert f"estimators {shipped['estimators']}" in text
  assert images_of(nb) == 2  # the curves and the horizon buckets


@pytest.mark.xdist_group("notebooks")
def test_quickstart_trains_and_plots(tmp_path):
  workdir = tmp_path / "quickstart"
  # The suite's smaller smoke shapes: e2e_test's runs compile the same
  # programs, and the notebook's are the same code on other settings.
  nb = execute(
    "quickstart.ipynb", WORKDIR=str(workdir), OVERRIDES=presets.SMALL_SMOKE
  )
  records = [
    json.loads(line)
    for line in (workdir / "metrics.jsonl").read_text().splitlines()
  ]
  assert [r["iteration"] for r in records] == [0, 1]
  assert (workdir / "quickstart_metrics.png").stat().st_size > 0
  assert images_of(nb) == 1
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["table"] in text_of(nb)


@pytest.mark.xdist_group("notebooks")
def test_reward_hacking_runs_its_variants(tmp_path):
  # Two of the four variants (no stage, both stages) on the smaller shapes
  # keep the notebook short: 33 s from an empty compilation cache (77 s on
  # the preset's shapes; 2-core machine, beside other tests). Each variant's
  # anti-cheat settings are checked in tests/experiments/reward_hacking_test.py.
  # This is also that module's end-to-end run of the smoke preset: the same
  # `reward_hacking.experiment` call, on one device in the kernel.
  workdir = tmp_path / "hacking"
  nb = execute(
    "reward_hacking.ipynb",
    WORKDIR=str(workdir),
    ITERATIONS=1,
    HACK_DEMOS=0.5,
    VARIANTS=["none", "both"],
    # The suite's smaller smoke shapes; sampled evaluation and the
    # preset's training tasks (their hack demonstrations) are kept.
    OVERRIDES={
      k: v
      for k, v in presets.SMALL_SMOKE.items()
      if k not in ("eval.sampled", "data.num_train_tasks")
    },
  )
  out = json.loads((workdir / "reward_hacking.json").read_text())
  assert set(out) >= {
    "variants",
    "seeds",
    "hack_demos",
    "runs",
    "rows",
    "results",
    "table",
    "plot",
    "seconds",
  }
  assert out["table"] == (workdir / "reward_hacking.txt").read_text().strip()
  assert out["table"] in text_of(nb)
  assert set(out["runs"]) == {"none/seed0", "both/seed0"}
  for name, run in out["runs"].items():
    assert run["iterations"] == 1, name
    for key in ("oracle/pass", "oracle/hack_rate", "reward/total_mean"):
      assert run["curves"][key][0] is not None, (name, key)
    for key in ("eval/greedy/oracle_pass", "eval/sampled/oracle_pass"):
      assert run["sft_eval"][key] is not None, (name, key)
      assert run["final_eval"][key] is not None, (name, key)
  assert set(out["rows"]) == {"none", "both"}
  assert out["rows"]["both"]["hack_end"]["seeds"] == 1
  assert (workdir / "reward_hacking.png").stat().st_size > 0
  assert list(out["results"]) == ["none", "both"]
  for variant, result in out["results"].items():
    assert result["iterations"] == 1, variant
    assert result["hack_demo_share"] > 0.2, variant  # SFT saw the hacks
    # Each variant trained with its own anti-cheat.
    config = json.loads(
      (workdir / "seed0" / variant / "config.json").read_text()
    )
    assert config["data"]["suite_a"] == "weak", variant
    enforced = config["anticheat"]["enforced_flags"]
    assert bool(enforced) == (variant in ("stage1", "both")), variant
    assert (config["anticheat"]["stage2_threshold"] > 0) == (
      variant in ("stage2", "both")
    )
  # One SFT for all: the later variants restored the first one's.
  first = (workdir / "seed0" / "none" / "sft_data.npz").read_bytes()
  assert (workdir / "seed0" / "both" / "sft_data.npz").read_bytes() == first
  assert images_of(nb) == 1
  assert "hack rate" in text_of(nb)
