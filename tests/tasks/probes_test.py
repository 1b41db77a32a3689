"""Probe tasks: generation, host-side answers, demonstrations, horizons."""

import dataclasses

import numpy as np
import pytest

from codeagent_rl.envs import code_env
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.rollout import demos
from codeagent_rl.tasks import probes
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic

CONFIG = probes.ProbeConfig(num_tasks=200, seed=3)


@pytest.fixture(scope="module")
def generated():
  return probes.generate(CONFIG)


@pytest.fixture(scope="module")
def env(pool):
  budgets = code_env.EnvConfig(
    max_turns=64,
    max_tokens_per_turn=96,
    max_total_tokens=4096,
    max_wall_s=120.0,
    obs_max_bytes=96,
  )
  return code_env.CodeEnv(pool, tokenizer_lib.ByteTokenizer(), budgets)


def test_generation_is_deterministic_and_valid(generated):
  tasks, plans = generated
  again_tasks, again_plans = probes.generate(CONFIG)
  assert tasks == again_tasks and plans == again_plans
  for task in tasks:
    schema.validate(task, task.task_id)
    spec = probes.spec_of(task)
    assert spec.lo <= spec.secret <= spec.hi
    # The prompt is made from the range alone, never the secret.
    assert task.prompt == probes.prompt(spec.lo, spec.hi)
    assert not task.visible_tests
    a = {t["args"][0] for t in task.hidden_tests}
    b = {t["args"][0] for t in task.heldout_tests}
    assert not a & b
    for suite in (task.hidden_tests, task.heldout_tests):
      assert len({t["expected"] for t in suite}) >= 2  # no constant passes


def test_splits_are_disjoint():
  train, _ = probes.generate(dataclasses.replace(CONFIG, split="train"))
  test, _ = probes.generate(dataclasses.replace(CONFIG, split="test"))

  def triples(tasks):
    return {tuple(vars(probes.spec_of(t)).values()) for t in tasks}

  assert not triples(train) & triples(test)


def test_range_sizes_are_heavy_tailed(generated):
  tasks, plans = generated
  sizes = np.asarray(
    [probes.spec_of(t).hi - probes.spec_of(t).lo + 1 for t in tasks]
  )
  assert np.median(sizes) <= 20
  assert sizes.max() >= 100
  lengths = np.asarray([len(p.actions) for p in plans])
  assert lengths.max() >= 5 * max(np.median(lengths), 1)
  kinds = {p.kind for p in plans}
  assert kinds == set(probes.PROBE_DEMO_KINDS)


def test_queries_accept_only_whole_probe_lines():
  out = (
    "probe(5)\n  probe(-7)  \nprobe(x)\nprobe(1.5)\nsay probe(3)\n"
    "probe(12345678901234)\n"
  )
  assert probes.queries(out) == [5, -7]


def test_answers_narrow_the_range():
  spec = probes.Spec("secret", 10, 20, 14)
  assert probes.answer_line(spec, [], 12) == "probe(12): higher, in 13..20"
  assert probes.answer_line(spec, [12], 17) == "probe(17): lower, in 13..16"
  assert probes.answer_line(spec, [12, 17], 14) == "probe(14): found, s = 14"
  assert probes.interval(spec, [12, 17, 14]) == (14, 14)
  assert probes.interval(spec, [100, -5]) == (10, 20)


@pytest.mark.parametrize(
  "bad",
  [
    {"family": "secret", "lo": 5, "hi": 3, "secret": 4},
    {"family": "other", "lo": 0, "hi": 3, "secret": 1},
    {"family": "secret", "lo": 0, "hi": 3},
    {"family": "secret", "lo": 0, "hi": 3.0, "secret": 1},
    {"family": "secret", "lo": 0, "hi": 10**13, "secret": 1},
  ],
)
def test_malformed_probe_metadata_is_refused(generated, bad):
  task = generated[0][0]
  with pytest.raises(schema.TaskFormatError, match="metadata.probe"):
    task = dataclasses.replace(task, metadata={**task.metadata, "probe": bad})
    schema.validate(task, "line 3")


def test_probe_task_with_visible_tests_is_refused(generated):
  task = generated[0][0]
  with pytest.raises(schema.TaskFormatError, match="without visible tests"):
    task = dataclasses.replace(task, visible_tests=task.hidden_tests[:1])
    schema.validate(task, "t")


def test_plans_play_out_as_designed(env, generated):
  tasks, plans = generated
  by_id = {t.task_id: t for t in tasks}
  chosen = {}
  for plan in plans:
    chosen.setdefault(plan.kind, plan)
  chosen = list(chosen.values())
  rollout = demos.render(
    env, [by_id[p.task_id] for p in chosen], [p.actions for p in chosen]
  )
  for plan, episode in zip(chosen, rollout.episodes, strict=True):
    assert episode.stop_reason == code_env.STOP_SUBMIT, plan.kind
    assert len(episode.turns) == len(plan.actions)
    spec = probes.spec_of(episode.task)
    runs = episode.turns[:-1]
    assert all(t.probe is not None for t in runs)
    solved = plan.kind in probes.CORRECT_KINDS
    assert (episode.outcome.suite_a == 1.0) == solved, plan.kind
    if plan.kind in ("bisect", "scan", "off_by_one"):
      # Probed until found: the submission copies the secret from there.
      asked = [t.probe for t in runs]
      assert asked[-1] == spec.secret
      s = spec.secret
      assert runs[-1].observation.body == f"probe({s}): found, s = {s}\n"
      assert f"s = {s}" in episode.turns[-1].action_text
    for turn in runs:
      assert str(turn.probe) in turn.observation.body


def test_runs_see_the_range_the_answers_left(env, generated):
  task = generated[0][0]
  spec = probes.spec_of(task)
  state = env.reset(task)
  seen = []
  for _ in range(3):
    state, step = env.step(state, "<run>print(lo, hi)\nprobe(lo)</run>")
    seen.append(step.result.tests[0].stdout.splitlines()[0])
    if state.turns[-1].probe == spec.secret:
      break
  asked = [t.probe for t in state.turns]
  expected = [
    "{} {}".format(*probes.interval(spec, asked[:k])) for k in range(len(seen))
  ]
  assert seen == expected
  assert asked == list(range(spec.lo, spec.lo + len(asked)))


def test_one_probe_is_answered_a_run(env, generated):
  task = generated[0][0]
  spec = probes.spec_of(task)
  state = env.reset(task)
  code = f"for x in range({spec.lo}, {spec.hi} + 1):\n  probe(x)\n"
  state, step = env.step(state, f"<run>{code}</run>")
  body = step.observation.body
  n = spec.hi - spec.lo + 1
  assert body.splitlines()[0].startswith(f"probe({spec.lo}): ")
  assert f"{n - 1} more probes ignored" in body
  assert state.turns[-1].probe == spec.lo


def test_a_run_without_a_probe_and_a_crash_say_so(env, generated):
  task = generated[0][1]
  state = env.reset(task)
  state, step = env.step(state, "<run>print('hello')</run>")
  assert step.observation.body == "no probe: call probe(x)\n"
  state, step = env.step(state, "<run>probe('7')</run>")
  assert "status: crash" in step.observation.body
  assert "probe(x) takes an int" in step.observation.body
  assert [t.probe for t in state.turns] == [None, None]


def test_probe_kinds_are_plan_kinds():
  assert set(probes.PROBE_DEMO_KINDS) <= set(synthetic.PLAN_KINDS)
  plan = synthetic.DemoPlan("t", "bisect", (("submit", "x = 1"),))
  assert plan.kind == "bisect"
