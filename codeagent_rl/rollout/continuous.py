"""Rollouts by slot refill (continuous batching): no wait for the longest.

`agent_loop.collect` runs all B episodes in lockstep: an episode that ended
keeps its row, idle (budget 0), until the longest episode of the batch is
done. With agent episodes of 3 to 200 turns most rows idle most of the
time. Here the policy holds `slots` rows; an episode that ends (by
`<submit>`, a budget, or the stopper's cut) hands its row to the next task
that has not started, at once: the row's old conversation is dropped and
the new prompt prefilled into that row alone (`Policy.restart`), while the
other rows keep their KV cache and go on. Tasks start in order; the last
rows go empty when no task is left.

The output is that of `agent_loop.collect`: a `Rollout` whose row i is the
episode of `tasks[i]`, built from the same pieces (rows, batch, render
check, background grading of submissions, `timings["generate_s"]` and
`["env_s"]`, `["stop_s"]` with a stopper). An episode's wall-clock budget
starts when it gets a row, not when the rollout starts.

Randomness: episode i's turn k samples with `fold_in(fold_in(rng, i), k)`,
one key per row (`Sampler` draws each row from its own key), so what an
episode samples does not depend on the row it ran in, nor on its
neighbours, up to float rounding (its logits are computed in another batch
layout). Runs are deterministic on one machine. They differ from
lockstep's, whose turn k shares one key across the batch; a policy that
ignores the keys (scripted, greedy) gives lockstep's episodes.

The KV cache: `agent_loop.cache_len_for` (one episode's worst case) still
suffices. The cache's write index is shared by all rows and grows with
every call, whichever episodes are in them; `SamplerPolicy` compacts the
cache when a call would not fit, leaving each row only its own episode's
tokens, and a restart prefills its prompt at the row's first slots (free,
as the whole row is).
"""

from __future__ import annotations

from collections.abc import Sequence
import concurrent.futures
import time

import jax
import numpy as np

from codeagent_rl.envs import code_env
from codeagent_rl.envs import protocol
from codeagent_rl.rollout import agent_loop
from codeagent_rl.tasks import schema


def _episode_keys(
  rng: jax.Array, episodes: jax.Array, turns: jax.Array
) -> jax.Array:
  """[S] keys: `fold_in(fold_in(rng, episodes[s]), turns[s])` per row."""

  def one(episode, turn):
    return jax.random.fold_in(jax.random.fold_in(rng, episode), turn)

  return jax.vmap(one)(episodes, turns)


_episode_keys_jit = jax.jit(_episode_keys)


def row_keys(
  rng: jax.Array, episodes: Sequence[int], turns: Sequence[int]
) -> jax.Array:
  """One key per row: episode `episodes[s]`'s turn `turns[s]` (1-based).

  The indices are placed where `rng` is (an explicit transfer), so the
  folds run there.
  """
  where = rng.sharding
  return _episode_keys_jit(
    rng,
    jax.device_put(np.asarray(episodes, np.uint32), where),
    jax.device_put(np.asarray(turns, np.uint32), where),
  )


def check_slots(slots: int, num_tasks: int) -> None:
  """Raises a clear `ValueError` unless 1 <= slots <= num_tasks."""
  if type(slots) is not int or slots < 1:
    raise ValueError(f"slots={slots!r}: must be an integer >= 1.")
  if slots > num_tasks:
    raise ValueError(
      f"slots={slots} but only {num_tasks} tasks: a slot would never be"
      " used; pass at most as many slots as tasks."
    )


def collect(
  env: code_env.CodeEnv,
  policy: agent_loop.Policy,
  tasks: Sequence[schema.Task],
  group_ids: Sequence[int],
  rng: jax.Array,
  *,
  slots: int,
  stopper: agent_loop.StopHook | None = None,
  first_episode: int = 0,
) -> agent_loop.Rollout:
  """Runs one episode per task, at most `slots` at a time, refilling rows.

  Args:
    env: the environment (its budgets bound every episode).
    policy: generates the turns; needs `restart` (see `agent_loop.Policy`).
      Its batch is `slots` rows: row s holds whichever episode runs there.
    tasks: one task per episode (repeat a task for a group of samples).
    group_ids: [B] prompt id of each episode, for group baselines.
    rng: PRNG key; episode i's turn k (1-based) is sampled with
      `fold_in(fold_in(rng, i), k)`, passed as one key per row.
    slots: rows of the policy's batch, 1 <= slots <= len(tasks).
    stopper: asked after each turn about the episodes still open (their
      observation appended); those it answers True for are cut (stop
      reason `code_env.STOP_ADAPTIVE`) and free their row. Its time goes to
      `timings["stop_s"]`.
    first_episode: `tasks` are the episodes from this index on of a larger
      set (one process's share): episode i draws as episode
      `first_episode + i` of the whole set.

  Returns:
    The `Rollout`, row i the episode of `tasks[i]`; rows are padded to
    `env.config.max_total_tokens`.

  Raises:
    ValueError: the lengths differ, `slots` is out of range, a prompt does
      not fit `max_total_tokens`, or the stopper answers a wrong number of
      verdicts.
  """
  if len(tasks) != len(group_ids):
    raise ValueError(f"{len(tasks)} tasks but {len(group_ids)} group ids.")
  check_slots(slots, len(tasks))
  cfg = env.config
  fmt = env.format
  # Every prompt is checked before anything runs; an episode that starts
  # later is reset again then (`reset` starts its wall-clock budget).
  states = [env.reset(task) for task in tasks]
  longest = max(len(s.prompt_ids) for s in states)
  if longest >= cfg.max_total_tokens:
    raise ValueError(
      f"a prompt has {longest} tokens, env.max_total_tokens is"
      f" {cfg.max_total_tokens}: raise the budget or shorten the prompts."
    )
  rows = [
    agent_loop._Row(list(s.prompt_ids), [False] * len(s.prompt_ids))
    for s in states
  ]
  timings = {"generate_s": 0.0, "env_s": 0.0}
  if stopper is not None:
    stopper.reset()
    timings["stop_s"] = 0.0
  # The episode in each row (None: the row is empty), and the next task.
  in_row: list[int | None] = list(range(slots))
  next_task = slots
  turns = [0] * len(tasks)
  start = time.perf_counter()
  policy.begin([states[e].prompt_ids for e in range(slots)])
  timings["generate_s"] += time.perf_counter() - start
  # Episodes whose `<submit>` is being graded in the background.
  grading: dict[int, concurrent.futures.Future] = {}
  with concurrent.futures.ThreadPoolExecutor(1) as grader:
    while any(e is not None for e in in_row):
      live = [s for s, e in enumerate(in_row) if e is not None]
      budgets = [0] * slots
      for s in live:
        e = in_row[s]
        budgets[s] = min(
          cfg.max_tokens_per_turn, cfg.max_total_tokens - states[e].num_tokens
        )
        turns[e] += 1
      keys = row_keys(
        rng,
        [0 if e is None else first_episode + e for e in in_row],
        [0 if e is None else turns[e] for e in in_row],
      )
      start = time.perf_counter()
      generated = policy.generate(budgets, keys)
      timings["generate_s"] += time.perf_counter() - start
      texts, ended = {}, {}
      for s in live:
        ids, _ = generated[s]
        row = rows[in_row[s]]
        row.tokens += ids
        row.trainable += [True] * len(ids)
        texts[s] = fmt.action_text(ids)
        ended[s] = fmt.action_ended(ids)
      freed, stepping = [], []
      for s in live:
        if isinstance(protocol.parse_action(texts[s]), protocol.Submit):
          e = in_row[s]
          grading[e] = grader.submit(
            env.step, states[e], texts[s], len(generated[s][0])
          )
          freed.append(s)
        else:
          stepping.append(s)
      start = time.perf_counter()
      stepped = env.step_many(
        [states[in_row[s]] for s in stepping],
        [texts[s] for s in stepping],
        [len(generated[s][0]) for s in stepping],
        [ended[s] for s in stepping],
      )
      timings["env_s"] += time.perf_counter() - start
      observations = [[] for _ in range(slots)]
      for s, (new_state, result) in zip(stepping, stepped, strict=True):
        e = in_row[s]
        states[e] = new_state
        if result.done:
          freed.append(s)
          continue
        obs = list(result.observation_ids)
        observations[s] = obs
        rows[e].tokens += obs
        rows[e].trainable += [False] * len(obs)
      if stopper is not None:
        start = time.perf_counter()
        open_rows = [s for s in stepping if not states[in_row[s]].done]
        agent_loop._apply_stopper(
          env, stopper, states, rows, [in_row[s] for s in open_rows]
        )
        for s in open_rows:
          if states[in_row[s]].done:  # cut: its observation is not fed
            freed.append(s)
            observations[s] = []
        timings["stop_s"] += time.perf_counter() - start
      # Freed rows take the next tasks, in row order; the rest go empty.
      prompts = []
      for s in sorted(freed):
        if next_task < len(tasks):
          e, next_task = next_task, next_task + 1
          states[e] = env.reset(tasks[e])  # its wall clock starts now
          in_row[s] = e
          prompts.append(states[e].prompt_ids)
        else:
          in_row[s] = None
          prompts.append(())
      start = time.perf_counter()
      if freed:
        policy.restart(sorted(freed), prompts)
      policy.observe(observations)
      timings["generate_s"] += time.perf_counter() - start
    start = time.perf_counter()
    policy.end()
    for e, future in grading.items():
      states[e], result = future.result()
      if not result.done:  # a submit always ends its episode
        raise AssertionError(f"row {e}: a <submit> left the episode open")
    timings["env_s"] += time.perf_counter() - start
  batch = agent_loop._to_batch(rows, states, group_ids, cfg, fmt.pad_id)
  render_ok = None
  if cfg.render_check != "off":
    render_ok = np.asarray(
      [
        agent_loop.render_matches(fmt, s, row.tokens, cfg.render_check)
        for s, row in zip(states, rows, strict=True)
      ],
      bool,
    )
  return agent_loop.Rollout(batch, states, timings, render_ok)
