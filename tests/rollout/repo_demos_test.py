"""Scripted repository demonstrations, played through the real environment."""

import random

import pytest

from codeagent_rl.anticheat import features
from codeagent_rl.envs import code_env
from codeagent_rl.envs import repo_env
from codeagent_rl.envs import repo_tools
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.rollout import repo_demos
from codeagent_rl.tasks import repo_gen
from codeagent_rl.tasks import workspace as ws_lib

BUDGETS = code_env.EnvConfig(
  max_turns=80,
  max_tokens_per_turn=2000,
  max_total_tokens=60000,
  max_wall_s=300.0,
  obs_max_bytes=1500,
)


@pytest.fixture(scope="module")
def tasks():
  # Deep and shallow bugs: probing plans of both lengths.
  return repo_gen.generate(6, seed=11)


def _play(env, task, plan):
  state = env.reset(task)
  for name, args in plan.calls:
    state, step = env.step(
      state, repo_demos.action_text(env.syntax, name, args)
    )
    assert step.observation is None or not step.observation.body.startswith(
      ("format error", "error:")
    ), (name, args, step.observation.body)
    if step.done:
      break
  return state


@pytest.mark.parametrize("edit_tool", repo_demos.EDIT_TOOLS)
def test_honest_plans_fix_the_bug_and_others_do_not(
  module_pool, tasks, edit_tool
):
  env = repo_env.RepoEnv(module_pool, tokenizer_lib.ByteTokenizer(), BUDGETS)
  lengths = {}
  for task in tasks:
    for kind in repo_demos.PLAN_KINDS:
      plan = repo_demos.plan(task, kind, random.Random(0), edit_tool)
      changes = {n for n, _ in plan.calls} & set(repo_demos.EDIT_TOOLS)
      assert changes <= {edit_tool}, (kind, changes)
      state = _play(env, task, plan)
      assert state.stop_reason == code_env.STOP_SUBMIT
      assert len(state.turns) == len(plan.calls)
      solved = state.outcome.suite_a == state.outcome.suite_b == 1.0
      assert solved == (kind in ("direct", "probing")), (kind, task.task_id)
      if kind == "weakened_test":
        assert state.graded.restored == task.repo.test_paths
      # Stage 1: the honest kinds (and giving up) raise no rule flag; the
      # weakened test is a protected edit.
      raised = features.raised_flags(features.from_episode(state))
      want = ["protected_edits"] if kind == "weakened_test" else []
      assert raised == want, (kind, task.task_id)
      lengths.setdefault(kind, []).append(len(plan.calls))
  depths = [t.metadata["depth"] for t in tasks]
  assert lengths["direct"] == [d + 4 for d in depths]
  assert max(lengths["probing"]) >= 3 * max(depths)


def test_a_plan_in_json_tool_calls_parses_to_the_same_calls(tasks):
  plan = repo_demos.plan(tasks[0], "probing", random.Random(1))
  for name, args in plan.calls:
    text = repo_demos.action_text("json", name, args)
    assert repo_tools.parse_json_call(text) == (name, args)


def test_fix_edit_finds_a_unique_context():
  before = "a = 1\nb = 2\na = 1\nc = 3\n"
  after = "a = 1\nb = 2\na = 2\nc = 3\n"
  edit = repo_demos.fix_edit(before, after)
  assert before.count(edit["search"]) == 1
  assert before.replace(edit["search"], edit["replace"]) == after
  with pytest.raises(ValueError, match="2 changed blocks"):
    repo_demos.fix_edit("a\nb\nc\n", "x\nb\ny\n")


def test_fix_lines_covers_every_changed_line():
  before = "a = 1\nb = 2\nc = 3\nd = 4\n"
  cases = [
    "a = 1\nb = 5\nc = 3\nd = 4\n",  # one line
    "x\nb = 2\nc = 3\ny\n",  # two blocks: one range over both
    "a = 1\nb = 2\nnew\nc = 3\nd = 4\n",  # an insertion
    "top\na = 1\nb = 2\nc = 3\nd = 4\n",  # an insertion at the top
    "a = 1\nd = 4\n",  # a deletion
  ]
  ws = ws_lib.Workspace({"m.py": before})
  for after in cases:
    call = repo_demos.fix_lines(before, after)
    assert call["start"] <= call["end"]
    got = ws.replace_lines("m.py", call["start"], call["end"], call["content"])
    assert got["m.py"] == after, (after, call)
  assert repo_demos.fix_lines(before, cases[0]) == {
    "start": 2,
    "end": 2,
    "content": "b = 5\n",
  }
  with pytest.raises(ValueError, match="the same"):
    repo_demos.fix_lines(before, before)
  with pytest.raises(ValueError, match="edit_tool"):
    repo_demos.plan(repo_gen.generate(1, seed=0)[0], "direct",
                    random.Random(0), "sed")  # fmt: skip


def test_plans_are_drawn_deterministically_and_checked(tasks):
  one = repo_demos.plans_for(tasks, seed=0)
  assert one == repo_demos.plans_for(tasks, seed=0)
  assert {p.kind for p in repo_demos.plans_for(tasks * 4, seed=0)} == set(
    repo_demos.PLAN_KINDS
  )
  with pytest.raises(ValueError, match="unknown kinds"):
    repo_demos.plans_for(tasks, 0, {"cheat": 1.0})
  with pytest.raises(ValueError, match="exactly the last call submits"):
    repo_demos.RepoPlan("t", "direct", (("view", {"path": "a.py"}),))
  with pytest.raises(ValueError, match="missing argument"):
    repo_demos.RepoPlan("t", "direct", (("view", {}), ("submit", {})))
