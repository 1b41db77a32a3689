"""Demonstration rendering for SFT: what runs in the sandbox, the cache."""

import collections
import dataclasses
import json
import threading

import numpy as np
import pytest

from codeagent_rl.envs import code_env
from codeagent_rl.sandbox import config as sandbox_config
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import isolation
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic
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
  env = code_env.CodeEnv(counting, exp.conversation, exp.env)
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
  fmt = exp.conversation
  for i, kind in enumerate(kinds):
    text = fmt.decode(arrays["tokens"][i][arrays["valid"][i]].tolist())
    assert text.rstrip().endswith("</submit>"), text[-80:]
    if kind == "multi_turn":
      assert "<obs>tests: " in text, text


def test_cache_is_reused_and_rebuilt_when_stale(setup, tmp_path):
  exp, task_sets, pool = setup
  counting = CountingPool(pool)
  env = code_env.CodeEnv(counting, exp.conversation, exp.env)
  first = data_lib.sft_arrays(env, task_sets, tmp_path)
  jobs = sum(counting.kinds.values())
  again = data_lib.sft_arrays(env, task_sets, tmp_path)
  assert sum(counting.kinds.values()) == jobs  # read from the cache
  for key in ("tokens", "valid", "trainable", "kinds"):
    np.testing.assert_array_equal(first[key], again[key])
  # Other budgets: the cache is stale and rendered again.
  other = code_env.CodeEnv(
    counting,
    exp.conversation,
    dataclasses.replace(exp.env, obs_max_bytes=100),
  )
  data_lib.sft_arrays(other, task_sets, tmp_path)
  assert sum(counting.kinds.values()) == 2 * jobs
  # A damaged file is rebuilt, not trusted.
  (tmp_path / workdir_lib.SFT_DATA).write_bytes(b"not an npz")
  rebuilt = data_lib.sft_arrays(env, task_sets, tmp_path)
  np.testing.assert_array_equal(rebuilt["tokens"], first["tokens"])


def _write_split(path, tasks):
  schema.write_tasks(path, tasks)
  return str(path)


def test_splits_come_from_task_files(tmp_path):
  generated = data_lib.make_task_sets(
    exp_lib.Experiment.from_config(tiny.get_config("smoke")).data, 0
  )
  config = tiny.get_config("smoke")
  config.data.train_tasks = _write_split(
    tmp_path / "train.jsonl", generated.train[:5]
  )
  config.data.eval_tasks = _write_split(
    tmp_path / "eval.jsonl", generated.eval[:3]
  )
  config.sft.steps = 0
  exp = exp_lib.Experiment.from_config(config)
  sets = data_lib.make_task_sets(exp.data, exp.seed)
  assert sets.train == generated.train[:5]
  assert sets.eval == generated.eval[:3]
  assert sets.plans == ()  # a file holds tasks, not demonstrations


def test_data_seed_fixes_the_tasks_whatever_the_run_seed():
  def sets(seed, data_seed=None):
    config = tiny.get_config("smoke")
    config.seed = seed
    config.data.seed = data_seed
    exp = exp_lib.Experiment.from_config(config)
    return exp, data_lib.make_task_sets(exp.data, exp.data_seed)

  exp_a, a = sets(1, data_seed=7)
  exp_b, b = sets(2, data_seed=7)
  assert (exp_a.seed, exp_b.seed) == (1, 2)
  assert exp_a.data_seed == exp_b.data_seed == 7
  assert a == b
  _, seven = sets(7)
  assert a == seven
  # Without it the tasks follow the run's seed.
  exp_c, c = sets(1)
  assert exp_c.data_seed == 1
  assert c.train != a.train


def test_one_split_from_a_file_the_other_generated(tmp_path):
  generated = data_lib.make_task_sets(
    exp_lib.Experiment.from_config(tiny.get_config("smoke")).data, 0
  )
  config = tiny.get_config("smoke")
  config.data.eval_tasks = _write_split(
    tmp_path / "eval.jsonl", generated.eval[:2]
  )
  exp = exp_lib.Experiment.from_config(config)
  sets = data_lib.make_task_sets(exp.data, exp.seed)
  assert sets.plans == generated.plans
  assert sets.eval == generated.eval[:2]
  # The train split, generated alone, keeps its suites apart from the
  # visible tests of the file's tasks (and its own); the rest is the same.
  for a, b in zip(sets.train, generated.train, strict=True):
    assert (a.task_id, a.prompt, a.visible_tests) == (
      b.task_id,
      b.prompt,
      b.visible_tests,
    )
  shown = {
    isolation.assertion_text(t.entry_point, v)
    for t in (*sets.train, *sets.eval)
    for v in t.visible_tests
  }
  for t in sets.train:
    for x in (*t.hidden_tests, *t.heldout_tests):
      assert isolation.assertion_text(t.entry_point, x) not in shown


def test_a_missing_task_file_is_named_before_the_run(tmp_path):
  config = tiny.get_config("smoke")
  config.data.train_tasks = str(tmp_path / "nope.jsonl")
  with pytest.raises(ValueError, match=r"config\.data\.train_tasks=.*no such"):
    exp_lib.Experiment.from_config(config)


def test_file_tasks_with_sft_steps_are_refused(tmp_path):
  sets = data_lib.make_task_sets(
    exp_lib.Experiment.from_config(tiny.get_config("smoke")).data, 0
  )
  config = tiny.get_config("smoke")
  config.data.train_tasks = _write_split(tmp_path / "t.jsonl", sets.train[:2])
  with pytest.raises(ValueError, match=r"config\.sft\.steps=.*sft\.steps=0"):
    exp_lib.Experiment.from_config(config)


@pytest.mark.parametrize(
  "content,match",
  [
    ("", "holds no tasks"),
    ('{"task_id": "a"}\n', r"bad\.jsonl:1"),
    ("not json\n", r"bad\.jsonl:1"),
  ],
)
def test_a_bad_task_file_names_the_file_and_line(tmp_path, content, match):
  path = tmp_path / "bad.jsonl"
  path.write_text(content)
  config = tiny.get_config("smoke")
  config.data.eval_tasks = str(path)
  exp = exp_lib.Experiment.from_config(config)
  with pytest.raises(data_lib.TaskFileError, match=match) as info:
    data_lib.make_task_sets(exp.data, exp.seed)
  assert isinstance(info.value, exp_lib.SetupError)  # main: one line
  assert "config.data.eval_tasks" in str(info.value)


def test_a_task_in_both_splits_is_refused(tmp_path):
  sets = data_lib.make_task_sets(
    exp_lib.Experiment.from_config(tiny.get_config("smoke")).data, 0
  )
  config = tiny.get_config("smoke")
  config.sft.steps = 0
  config.data.train_tasks = _write_split(tmp_path / "t.jsonl", sets.train[:3])
  config.data.eval_tasks = _write_split(
    tmp_path / "e.jsonl", [*sets.eval[:2], sets.train[1]]
  )
  exp = exp_lib.Experiment.from_config(config)
  with pytest.raises(data_lib.TaskFileError, match="in both the train"):
    data_lib.make_task_sets(exp.data, exp.seed)


def test_demonstrations_come_from_a_plans_file(tmp_path):
  sets = data_lib.make_task_sets(
    exp_lib.Experiment.from_config(tiny.get_config("smoke")).data, 0
  )
  plans = tmp_path / "plans.jsonl"
  synthetic.write_demo_plans(plans, sets.plans[:3])
  config = tiny.get_config("smoke")
  config.data.train_tasks = _write_split(tmp_path / "t.jsonl", sets.train)
  config.data.demonstrations = str(plans)
  exp = exp_lib.Experiment.from_config(config)  # sft.steps > 0 is fine now
  assert exp.sft.steps > 0
  got = data_lib.make_task_sets(exp.data, exp.seed)
  assert got.plans == sets.plans[:3]


@pytest.mark.parametrize(
  "line,match",
  [
    (
      '{"task_id": "nope", "kind": "single_turn", "actions": [["submit",'
      ' "x = 1\\n"]]}\n',
      "not train tasks",
    ),
    ('{"task_id": "a", "kind": "magic", "actions": []}\n', r"plans\.jsonl:1"),
    ("", "holds none"),
  ],
)
def test_a_bad_plans_file_is_named(tmp_path, line, match):
  plans = tmp_path / "plans.jsonl"
  plans.write_text(line)
  config = tiny.get_config("smoke")
  config.data.demonstrations = str(plans)
  exp = exp_lib.Experiment.from_config(config)
  with pytest.raises(data_lib.TaskFileError, match=match):
    data_lib.make_task_sets(exp.data, exp.seed)


def test_isolation_finds_tests_planted_in_the_demonstrations(setup, tmp_path):
  exp, task_sets, pool = setup
  env = code_env.CodeEnv(pool, exp.conversation, exp.env)
  fmt = exp.conversation
  # The real demonstrations use visible tests only: no leak.
  clean = data_lib.sft_arrays(env, task_sets, tmp_path / "clean")
  report = data_lib.check_isolation(
    "error", clean, fmt, task_sets, tmp_path / "clean"
  )
  assert report.leaks == []
  assert len(report.results) == len(task_sets.train) + len(task_sets.eval)
  saved = json.loads((tmp_path / "clean" / workdir_lib.ISOLATION).read_text())
  assert saved["leaks"] == [] and saved["tasks"] == len(report.results)
  # No hidden or held-out test is another task's visible test: the
  # generator replaced them (37 in the smoke tasks).
  assert saved["public_tests_not_checked"] == 0
  # A demonstration whose `<run>` asserts a hidden test of a held-out task.
  target = task_sets.eval[0]
  hidden = target.hidden_tests[0]
  plan = task_sets.plans[0]
  leaky = dataclasses.replace(
    plan,
    actions=(
      ("run", "assert " + isolation.assertion_text(target.entry_point, hidden)),
      *plan.actions,
    ),
  )
  planted = dataclasses.replace(task_sets, plans=[leaky, *task_sets.plans[1:]])
  arrays = data_lib.sft_arrays(env, planted, tmp_path / "leak")
  with pytest.raises(data_lib.IsolationError, match=target.task_id) as e:
    data_lib.check_isolation("error", arrays, fmt, planted, tmp_path / "leak")
  assert isinstance(e.value, exp_lib.SetupError)  # main prints one line
  assert "--config.data.isolation=warn" in str(e.value)
  report = data_lib.check_isolation(
    "warn", arrays, fmt, planted, tmp_path / "leak"
  )
  [leak] = report.leaks
  assert leak.task_id == target.task_id
  assert leak.suites["hidden_tests"].found == (0,)
  saved = json.loads((tmp_path / "leak" / workdir_lib.ISOLATION).read_text())
  assert saved["leaks"] == [target.task_id]
  assert data_lib.check_isolation("off", arrays, fmt, planted, tmp_path) is None


def test_tests_shown_by_another_prompt_are_public(setup, tmp_path):
  """Every hidden test of a task is another task's visible test: no leak."""
  exp, task_sets, pool = setup
  env = code_env.CodeEnv(pool, exp.conversation, exp.env)
  target = task_sets.eval[0]
  shows = dataclasses.replace(
    target,
    task_id="shows-them",
    visible_tests=target.hidden_tests + target.heldout_tests,
  )
  sets = dataclasses.replace(task_sets, eval=(*task_sets.eval, shows))
  arrays = data_lib.sft_arrays(env, sets, tmp_path)
  report = data_lib.check_isolation(
    "error", arrays, exp.conversation, sets, tmp_path
  )
  result = next(r for r in report.results if r.task_id == target.task_id)
  suites = result.suites
  assert suites["hidden_tests"].skipped == len(target.hidden_tests)
  assert suites["heldout_tests"].skipped == len(target.heldout_tests)
  saved = json.loads((tmp_path / workdir_lib.ISOLATION).read_text())
  assert saved["public_tests_not_checked"] >= 2 * (
    len(target.hidden_tests) + len(target.heldout_tests)
  )


def test_a_generator_that_cannot_make_the_tasks_is_one_message(monkeypatch):
  exp = exp_lib.Experiment.from_config(tiny.get_config("smoke"))

  def dry(*args, **kwargs):
    raise synthetic.GenerationError(
      "t1 (sign level 1): heldout_tests has 2 tests (fewer than 3)."
    )

  monkeypatch.setattr(synthetic, "generate_sets", dry)
  with pytest.raises(data_lib.TaskFileError) as info:
    data_lib.make_task_sets(exp.data, exp.seed)
  message = str(info.value)
  assert message.startswith(
    "config.data: the synthetic generator could not make the train and test"
    " tasks: t1 (sign level 1): heldout_tests has 2 tests"
  )
  assert "num_train_tasks" in message
  assert isinstance(info.value, exp_lib.SetupError)  # main: one line
