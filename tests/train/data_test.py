"""Demonstration rendering for SFT: what runs in the sandbox, the cache."""

import collections
import dataclasses
import threading

import numpy as np
import pytest

from codeagent_rl.envs import code_env
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.sandbox import harness
from codeagent_rl.train import data as data_lib
from codeagent_rl.train import experiment as exp_lib
from codeagent_rl.train import workdir as workdir_lib
from configs import tiny

SANDBOX = sandbox_config.SandboxConfig(
  backend="process", pool_size=2, timeout_s=4.0, test_timeout_s=1.0
)


class CountingPool:
  """A real pool that counts the jobs it was given, by kind."""

  def __init__(self, pool):
    self.pool = pool
    self.config = pool.config
    self.kinds = collections.Counter()
    self._lock = threading.Lock()

  def submit(self, job):
    with self._lock:
      self.kinds[job.kind] += 1
    return self.pool.submit(job)


@pytest.fixture(scope="module")
def setup():
  config = tiny.get_config("smoke")
  config.data.multi_turn = 1.0  # every task also gets a run-then-submit demo
  exp = exp_lib.Experiment.from_config(config)
  task_sets = data_lib.make_task_sets(exp.data, exp.seed)
  with harness.SandboxPool(SANDBOX) as pool:
    yield exp, task_sets, pool


def test_runs_execute_submissions_do_not(setup, tmp_path):
  exp, task_sets, pool = setup
  counting = CountingPool(pool)
  env = code_env.CodeEnv(counting, exp.tokenizer(), exp.env)
  arrays = data_lib.sft_arrays(env, task_sets, tmp_path)
  kinds = list(arrays["kinds"])
  runs = sum(
    1
    for plan in task_sets.plans
    for action, _ in plan.actions
    if action == "run"
  )
  assert runs >= kinds.count("multi_turn") > 0
  # Only the `<run>` actions reached the sandbox: one job each.
  assert sum(counting.kinds.values()) == runs
  # Every kept demonstration ends with its submission, and an observation
  # of the sandbox follows each run.
  tok = exp.tokenizer()
  for i, kind in enumerate(kinds):
    text = tok.decode(arrays["tokens"][i][arrays["valid"][i]].tolist())
    assert text.rstrip().endswith("</submit>"), text[-80:]
    if kind == "multi_turn":
      assert "<obs>tests: " in text, text


def test_cache_is_reused_and_rebuilt_when_stale(setup, tmp_path):
  exp, task_sets, pool = setup
  counting = CountingPool(pool)
  env = code_env.CodeEnv(counting, exp.tokenizer(), exp.env)
  first = data_lib.sft_arrays(env, task_sets, tmp_path)
  jobs = sum(counting.kinds.values())
  again = data_lib.sft_arrays(env, task_sets, tmp_path)
  assert sum(counting.kinds.values()) == jobs  # read from the cache
  for key in ("tokens", "valid", "trainable", "kinds"):
    np.testing.assert_array_equal(first[key], again[key])
  # Other budgets: the cache is stale and rendered again.
  other = code_env.CodeEnv(
    counting,
    exp.tokenizer(),
    dataclasses.replace(exp.env, obs_max_bytes=100),
  )
  data_lib.sft_arrays(other, task_sets, tmp_path)
  assert sum(counting.kinds.values()) == 2 * jobs
  # A damaged file is rebuilt, not trusted.
  (tmp_path / workdir_lib.SFT_DATA).write_bytes(b"not an npz")
  rebuilt = data_lib.sft_arrays(env, task_sets, tmp_path)
  np.testing.assert_array_equal(rebuilt["tokens"], first["tokens"])
