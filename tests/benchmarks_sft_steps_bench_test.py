"""benchmarks/sft_steps_bench.py: its staged SFT is the straight one.

The benchmark's premise is that the SFT model it evaluates after a stage
of N steps (resumed from the previous stage) is the model a run with
`sft.steps=N` trains. That is checked on a small smoke config: the staged
model's parameters equal a straight run's bit for bit, and each stage's
row is what the main job's evaluation reports for that model. Bad
arguments are refused by the script in one line.
"""

import dataclasses

import jax
import numpy as np
import pytest

from benchmarks import sft_steps_bench
from codeagent_rl.sandbox import pools
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import fingerprint
from codeagent_rl.train import keys
from codeagent_rl.train import run as run_lib
from codeagent_rl.train import sft as sft_lib
from configs import tiny
from tests.helpers import processes
from tests.helpers import sandboxes

SANDBOX = sandboxes.short_config("process", 2)


def _config():
  config = tiny.get_config("smoke")
  config.data.num_train_tasks = 8
  config.data.num_eval_tasks = 2
  config.sft.batch_size = 8
  config.env.max_tokens_per_turn = 160
  config.env.max_total_tokens = 512
  return config


def _straight(config, seed, steps, workdir):
  """SFT of `steps` in one go, and the main job's evaluation of it."""
  config = config.copy_and_resolve_references()
  config.seed = seed
  exp = run_lib.job_from_config(config).exp
  exp = dataclasses.replace(exp, sft=dataclasses.replace(exp.sft, steps=steps))
  mesh, rules = exp.make_mesh()
  task_sets = data_lib.make_task_sets(exp.data, exp.data_seed)
  with pools.open_pool(exp.sandbox.apply(SANDBOX)) as pool:
    env = data_lib.make_env(pool, exp.conversation, exp.env, exp.data.generator)
    arrays = data_lib.sft_arrays(
      env,
      task_sets,
      workdir,
      format_key=fingerprint.tokenizer_digest(exp),
    )
    params, _ = sft_lib.run_sft(exp, arrays, workdir, mesh, rules)
    evaluator = eval_lib.Evaluator.of_run(exp, env, task_sets.eval)
    scalars = evaluator(params, keys.sft_eval(exp.seed))
  return exp, mesh, rules, params, scalars


def test_a_staged_sft_is_the_straight_one(tmp_path):
  config = _config()
  lines = []
  rows = sft_steps_bench.seed_rows(
    config,
    1,
    [3, 6],
    tmp_path / "staged",
    lambda limits: SANDBOX,
    console=lines.append,
  )
  assert [(r["seed"], r["steps"]) for r in rows] == [(1, 3), (1, 6)]
  assert len(lines) == 2 and lines[1].startswith("seed 1 steps     6 |")
  exp, mesh, rules, straight, scalars = _straight(
    config, 1, 6, tmp_path / "straight"
  )
  # The staged run's finished checkpoint, restored as the main job would.
  staged, _ = sft_lib.run_sft(exp, None, tmp_path / "staged", mesh, rules)
  flat_staged = jax.tree.leaves(jax.device_get(staged))
  flat_straight = jax.tree.leaves(jax.device_get(straight))
  assert len(flat_staged) == len(flat_straight) > 0
  for a, b in zip(flat_staged, flat_straight, strict=True):
    np.testing.assert_array_equal(a, b)
  # A stage's row is the main job's evaluation of that model.
  assert rows[1]["greedy_pass_ab"] == scalars["eval/greedy/pass_ab"]
  assert rows[1]["sampled_pass_ab"] == scalars["eval/sampled/pass_ab"]
  # And not a constant: the 3-step model is another model.
  assert rows[0]["loss"] != rows[1]["loss"]


def test_table_has_a_row_per_steps_and_a_column_per_seed():
  rows = [
    {
      "seed": s,
      "steps": n,
      "loss": 0.1 / n,
      "greedy_pass_ab": 0.5,
      "sampled_pass_ab": s / 10,
    }
    for s in (0, 2)
    for n in (10, 20)
  ]
  lines = sft_steps_bench.table(rows, [10, 20, 30])
  assert lines[0] == "| SFT steps | seed 0 | seed 2 |"
  assert lines[2] == "| 10 | 0.500 / 0.000 (0.010) | 0.500 / 0.200 (0.010) |"
  assert lines[4] == "| 30 | - | - |"


@pytest.mark.parametrize(
  "args, message",
  [
    (["--steps=20,10"], "--steps=20,10: expected distinct"),
    (["--seeds=a"], "--seeds=a: expected integers"),
    (
      [
        "--steps=10,20",
        "--config.sft.final_lr_fraction=0.5",
      ],
      "not 1.0",
    ),
  ],
)
def test_bad_arguments_are_named(tmp_path, args, message):
  proc = processes.run_python(
    "-m",
    "benchmarks.sft_steps_bench",
    "--config=configs/tiny.py:smoke",
    f"--workdir={tmp_path / 'w'}",
    *args,
    timeout=120,
  )
  assert proc.returncode != 0
  assert message in proc.stderr.strip().splitlines()[-1]
  assert not (tmp_path / "w").exists()
