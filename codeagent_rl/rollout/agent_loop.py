"""Batched multi-turn rollouts: policy turns <-> environment steps.

All episodes of a batch take their turns together. Each turn the policy
generates for every live episode at once (one `decode` through the KV cache;
finished episodes get a budget of 0 and cost nothing), the environment sends
the turn's sandbox jobs to the pool concurrently (`CodeEnv.step_many`), and
the observations are appended to the live conversations by incremental
prefill. The result is a `types.TrajectoryBatch`, one row per episode:

  prompt (not trainable) | action 1 (trainable) |
  observation 1 (not trainable) | action 2 (trainable) | ... | padding

The final observation of an episode that ends (by `<submit>` or a budget) is
not appended: no policy token follows it. A `<submit>` always ends its
episode and its grade (suites A and B) is needed only when the batch is
done, so submissions are graded in a background thread while the other
episodes keep generating: the sandbox overlaps with generation. Rows are
padded to a fixed length (`max_total_tokens` of the environment), so the
learner compiles once. `rollout.continuous.collect` builds the same batch
without the lockstep: a row whose episode ended starts the next task.
With `starts`, `collect` continues open episodes from their ids so far
instead of starting them (Monte-Carlo continuations of a restored state,
`benchmarks/advantage_quality.py`).

The policy is anything that implements `Policy`; `SamplerPolicy` runs the
transformer with its KV cache, tests use scripted policies. An optional
`StopHook` (`rollout.truncation.Stopper`) may end open episodes between
turns (`CodeEnv.cut`); such an episode's row keeps its last observation.
"""

from __future__ import annotations

from collections.abc import Sequence
import concurrent.futures
import dataclasses
import time
from typing import Any, Protocol

import jax
import numpy as np

from codeagent_rl import types
from codeagent_rl.envs import code_env
from codeagent_rl.envs import protocol
from codeagent_rl.models import chat
from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.parallel import transfers
from codeagent_rl.tasks import schema


class Policy(Protocol):
  """What the agent loop needs from a policy (batched, stateful per batch)."""

  def begin(self, prompts: Sequence[Sequence[int]]) -> None:
    """Starts one conversation per prompt."""

  def generate(
    self, budgets: Sequence[int], rng: jax.Array
  ) -> list[tuple[list[int], list[float]]]:
    """One turn per row: (tokens, log-probs), at most `budgets[row]` tokens.

    `rng` is one key for the batch (`collect`) or one key per row
    (`continuous.collect`). A row with budget 0 returns ([], []).
    """

  def observe(self, observations: Sequence[Sequence[int]]) -> None:
    """Appends token ids to each row's conversation (empty: unchanged)."""

  def restart(
    self, rows: Sequence[int], prompts: Sequence[Sequence[int]]
  ) -> None:
    """Starts `prompts[k]` as a new conversation in row `rows[k]`.

    The rows' old conversations are dropped; an empty prompt leaves its row
    empty. Other rows are unchanged. Only `continuous.collect` calls it.
    """

  def end(self) -> None:
    """Drops the batch's conversations (e.g. the KV cache)."""


class StopHook(Protocol):
  """What the agent loops ask, after each turn, about the open episodes."""

  def reset(self) -> None:
    """Called once when a rollout starts."""

  def decide(
    self,
    episode_ids: Sequence[int],
    prefixes: Sequence[Sequence[int]],
    turns: Sequence[int],
  ) -> list[bool]:
    """True for each episode to end now (`CodeEnv.cut`).

    Args:
      episode_ids: the open episodes' output rows.
      prefixes: their token ids so far, the turn's observation appended.
      turns: the turns each has taken.
    """


# Prefill chunks are padded to a multiple of this many tokens, so the
# sampler's `extend` compiles for a handful of widths, not one per length.
PREFILL_BUCKET = 32


def _bucket(n: int) -> int:
  return max(1, -(-n // PREFILL_BUCKET)) * PREFILL_BUCKET


def _pad_rows(rows: Sequence[Sequence[int]], pad_id: int):
  """Right-pads token rows into ([B, C] int32, [B, C] bool), C bucketed."""
  width = _bucket(max((len(r) for r in rows), default=0))
  tokens = np.full((len(rows), width), pad_id, np.int32)
  valid = np.zeros((len(rows), width), bool)
  for i, row in enumerate(rows):
    tokens[i, : len(row)] = row
    valid[i, : len(row)] = True
  return tokens, valid


class SamplerPolicy:
  """The transformer actor with its KV cache, behind `Policy`.

  The cache holds `cache_len` slots per row; `cache_len_for` gives a length
  that no episode within the environment budgets can overflow. The write
  index is shared by all rows, so with `restart` (rows that start new
  episodes) it outruns any one episode: when a call would not fit, the
  cache is first compacted (`Sampler.compact`), which leaves each row only
  its own episode's tokens.
  """

  def __init__(
    self,
    sampler: sampler_lib.Sampler,
    params: Any,
    fmt: chat.ConversationFormat,
    cache_len: int,
    part: sampler_lib.BatchPart | None = None,
  ):
    """Binds a sampler to actor params.

    Args:
      sampler: a `Sampler` whose `max_new_tokens` bounds one turn.
      params: actor variables.
      fmt: the conversation format: gives the pad and stop ids.
      cache_len: KV-cache slots per row.
      part: the rows are this part of a larger batch whose turns share one
        key (one process's share of a lockstep rollout); they sample what
        they would in the whole batch (`sampler.BatchPart`). None: the
        batch is whole. Keys per row need no part.
    """
    self._sampler = sampler
    self._params = params
    self._part = part
    self._pad_id = fmt.pad_id
    # Every input of the sampler goes, by `device_put`, to the devices the
    # params are on: the state is made there too, so nothing is copied
    # implicitly (the main job runs under a transfer guard). Per-row inputs
    # go where the state's rows are (split over the mesh when the sampler
    # has rules, see `Sampler.shardings_for`), the rest replicated.
    self._placement = transfers.replicated_like(params)
    self._stop_ids = jax.device_put(
      np.asarray(fmt.stop_ids, np.int32), self._placement
    )
    self._cache_len = cache_len
    self._state = None
    self._rows = None

  def begin(self, prompts):
    """Prefills a fresh cache with the prompts."""
    tokens, valid = _pad_rows(prompts, self._pad_id)
    shardings = self._sampler.shardings_for(self._placement, len(prompts))
    self._rows = shardings.next_pos
    state = self._sampler.start(
      len(prompts), self._cache_len, sharding=shardings
    )
    self._state = self._sampler.extend(
      self._params, state, *jax.device_put((tokens, valid), self._rows)
    )

  def generate(self, budgets, rng):
    """Decodes one turn per row through the cache."""
    budgets = np.asarray(budgets, np.int32)
    self._make_room(
      min(int(budgets.max(initial=0)), self._sampler.cfg.max_new_tokens)
    )
    budgets = jax.device_put(budgets, self._rows)
    row_keys = sampler_lib.is_row_keys(rng)
    rng = jax.device_put(rng, self._rows if row_keys else self._placement)
    self._state, out = self._sampler.decode(
      self._params,
      self._state,
      rng,
      budgets,
      self._stop_ids,
      part=None if row_keys else self._part,
    )
    tokens, logp, lengths = jax.device_get(
      (out.tokens, out.log_probs, out.lengths)
    )
    return [
      (tokens[i, :n].tolist(), logp[i, :n].tolist())
      for i, n in enumerate(lengths.tolist())
    ]

  def observe(self, observations):
    """Appends observations by incremental prefill."""
    if not any(observations):
      return
    tokens, valid = _pad_rows(observations, self._pad_id)
    self._make_room(tokens.shape[1])
    self._state = self._sampler.extend(
      self._params,
      self._state,
      *jax.device_put((tokens, valid), self._rows),
    )

  def restart(self, rows, prompts):
    """Empties `rows`; prefills the non-empty prompts into theirs only."""
    if len(rows) != len(prompts):
      raise ValueError(f"{len(rows)} rows but {len(prompts)} prompts.")
    batch = len(self._state.next_pos)
    if len(set(rows)) != len(rows) or not all(0 <= r < batch for r in rows):
      raise ValueError(
        f"restart rows {list(rows)}: must be distinct rows of the {batch}."
      )
    mask = np.zeros((batch,), bool)
    mask[list(rows)] = True
    chunks = [[] for _ in range(batch)]
    for row, prompt in zip(rows, prompts, strict=True):
      chunks[row] = prompt
    if not any(chunks):
      self._state = self._sampler.reset_rows(
        self._state, jax.device_put(mask, self._rows)
      )
      return
    tokens, valid = _pad_rows(chunks, self._pad_id)
    self._state = self._sampler.restart(
      self._params,
      self._state,
      *jax.device_put((mask, tokens, valid), self._rows),
    )

  def _make_room(self, needed: int) -> None:
    """Compacts the cache if a write of `needed` slots would not fit."""
    if self._sampler.free_slots(self._state) < needed:
      self._state = self._sampler.compact(self._state)

  def end(self):
    """Releases the KV cache: nothing is kept after a rollout."""
    self._state = None
    self._rows = None


def cache_len_for(
  env_config: code_env.EnvConfig,
  max_prompt_tokens: int,
  fmt: chat.ConversationFormat,
) -> int:
  """KV-cache slots that the longest possible rollout fits in.

  The smaller of two bounds, for `SamplerPolicy` in `collect` and in
  `continuous.collect`:

  - Turns: the prompt's chunk plus `max_turns` turns, each at most
    `max_tokens_per_turn` slots for the action and an observation chunk of
    `obs_max_bytes` (a token is at least one byte) plus what the format
    writes around an empty observation after a turn cut by the budget (the
    most it adds), rounded up to the prefill bucket like the prompt.
  - The episode budget: a row never holds more than `max_total_tokens`
    tokens (prompt included; the observation that ends an episode is not
    fed), and `SamplerPolicy` compacts the cache when a call would not
    fit, which leaves each row only its own tokens; one call then writes at
    most an action or an observation chunk. The bound is the budget plus
    one action and one observation chunk, bucketed: after a compaction a
    whole turn (its action, then its observation) fits before the next
    one is needed.

  Args:
    env_config: the environment's budgets.
    max_prompt_tokens: tokens of the longest prompt.
    fmt: the conversation format (its observation chunks).

  Returns:
    Slots per row.
  """
  around = len(fmt.observation_ids("", action_ended=False))
  obs_chunk = _bucket(env_config.obs_max_bytes + around)
  per_turn = env_config.max_tokens_per_turn + obs_chunk
  by_turns = _bucket(max_prompt_tokens) + env_config.max_turns * per_turn
  by_budget = _bucket(
    max(env_config.max_total_tokens, max_prompt_tokens) + per_turn
  )
  return min(by_turns, by_budget)


@dataclasses.dataclass
class _Row:
  """Token streams of one episode as it is built."""

  tokens: list[int]
  trainable: list[bool]


@dataclasses.dataclass(frozen=True)
class Rollout:
  """A batch of finished episodes.

  Attributes:
    batch: the trajectory batch, host arrays.
    episodes: the environment's final state of each episode (turns, stop
      reason, final code, the outcome of its submission).
    timings: seconds spent generating and waiting on the environment.
    render_ok: [B] bool, whether each row's ids equal a full render of the
      episode's messages (`env.render_check`); None when the check is off.
  """

  batch: types.TrajectoryBatch
  episodes: list[code_env.EpisodeState]
  timings: dict[str, float]
  render_ok: np.ndarray | None = None


def collect(
  env: code_env.CodeEnv,
  policy: Policy,
  tasks: Sequence[schema.Task],
  group_ids: Sequence[int],
  rng: jax.Array,
  *,
  stopper: StopHook | None = None,
  starts: Sequence[tuple[code_env.EpisodeState, Sequence[int]]] | None = None,
) -> Rollout:
  """Runs one episode per task to the end, all turns batched.

  Args:
    env: the environment (its budgets bound every episode).
    policy: generates the turns.
    tasks: one task per row (repeat a task for a group of samples).
    group_ids: [B] prompt id of each row, for group baselines.
    rng: PRNG key; turn k uses `fold_in(rng, k)`.
    stopper: asked after each turn about the episodes still open; those it
      answers True for are cut (stop reason `code_env.STOP_ADAPTIVE`). Its
      time goes to `timings["stop_s"]`.
    starts: None (every row starts with `env.reset(task)`), or per row an
      open episode to continue: its state (the task's, with the turns taken
      so far) and the ids of its conversation so far (prompt, actions and
      observations: `state.num_tokens` ids), which start the row, none of
      them trainable, and the policy's conversation. Turns are counted
      from the first one taken here (`fold_in(rng, 1)` for it).

  Returns:
    The `Rollout`; rows are padded to `env.config.max_total_tokens`.
  """
  if len(tasks) != len(group_ids):
    raise ValueError(f"{len(tasks)} tasks but {len(group_ids)} group ids.")
  cfg = env.config
  fmt = env.format
  if starts is None:
    states = [env.reset(task) for task in tasks]
    prefixes = [s.prompt_ids for s in states]
  else:
    states, prefixes = _resumed(tasks, starts)
  rows = [_Row(list(p), [False] * len(p)) for p in prefixes]
  longest = max(len(r.tokens) for r in rows)
  if longest >= cfg.max_total_tokens:
    raise ValueError(
      f"a prompt has {longest} tokens, env.max_total_tokens is"
      f" {cfg.max_total_tokens}: raise the budget or shorten the prompts."
    )
  timings = {"generate_s": 0.0, "env_s": 0.0}
  if stopper is not None:
    stopper.reset()
    timings["stop_s"] = 0.0
  start = time.perf_counter()
  policy.begin(prefixes)
  timings["generate_s"] += time.perf_counter() - start
  turn = 0
  # Rows whose `<submit>` is being graded in the background: row -> future.
  grading: dict[int, concurrent.futures.Future] = {}
  with concurrent.futures.ThreadPoolExecutor(1) as grader:
    while not all(s.done or i in grading for i, s in enumerate(states)):
      turn += 1
      waiting = [s.done or i in grading for i, s in enumerate(states)]
      budgets = [
        0
        if waiting[i]
        else min(cfg.max_tokens_per_turn, cfg.max_total_tokens - s.num_tokens)
        for i, s in enumerate(states)
      ]
      start = time.perf_counter()
      generated = policy.generate(budgets, transfers.fold_in(rng, turn))
      timings["generate_s"] += time.perf_counter() - start
      live = [i for i in range(len(states)) if not waiting[i]]
      texts, ended = {}, {}
      for i in live:
        ids, _ = generated[i]
        row = rows[i]
        row.tokens += ids
        row.trainable += [True] * len(ids)
        texts[i] = fmt.action_text(ids)
        ended[i] = fmt.action_ended(ids)
      submits = [
        i
        for i in live
        if isinstance(protocol.parse_action(texts[i]), protocol.Submit)
      ]
      for i in submits:
        grading[i] = grader.submit(
          env.step, states[i], texts[i], len(generated[i][0])
        )
      stepping = [i for i in live if i not in grading]
      start = time.perf_counter()
      stepped = env.step_many(
        [states[i] for i in stepping],
        [texts[i] for i in stepping],
        [len(generated[i][0]) for i in stepping],
        [ended[i] for i in stepping],
      )
      timings["env_s"] += time.perf_counter() - start
      observations = [[] for _ in states]
      for i, (new_state, result) in zip(stepping, stepped, strict=True):
        states[i] = new_state
        if not result.done:
          obs = list(result.observation_ids)
          observations[i] = obs
          row = rows[i]
          row.tokens += obs
          row.trainable += [False] * len(obs)
      start = time.perf_counter()
      policy.observe(observations)
      timings["generate_s"] += time.perf_counter() - start
      if stopper is not None:
        start = time.perf_counter()
        _apply_stopper(env, stopper, states, rows, stepping)
        timings["stop_s"] += time.perf_counter() - start
    start = time.perf_counter()
    policy.end()
    for i, future in grading.items():
      states[i], result = future.result()
      if not result.done:  # a submit always ends its episode
        raise AssertionError(f"row {i}: a <submit> left the episode open")
    timings["env_s"] += time.perf_counter() - start
  batch = _to_batch(rows, states, group_ids, cfg, fmt.pad_id)
  render_ok = None
  if cfg.render_check != "off":
    render_ok = np.asarray(
      [
        render_matches(fmt, s, row.tokens, cfg.render_check)
        for s, row in zip(states, rows, strict=True)
      ],
      bool,
    )
  return Rollout(batch, states, timings, render_ok)


def _resumed(
  tasks: Sequence[schema.Task],
  starts: Sequence[tuple[code_env.EpisodeState, Sequence[int]]],
) -> tuple[list[code_env.EpisodeState], list[tuple[int, ...]]]:
  """`collect`'s `starts`, checked: (states, their ids so far).

  Raises:
    ValueError: a start is for another task, is done, or its ids are not
      its conversation's (`num_tokens` of them, the prompt first).
  """
  if len(starts) != len(tasks):
    raise ValueError(f"{len(tasks)} tasks but {len(starts)} starts.")
  states, prefixes = [], []
  for i, ((state, ids), task) in enumerate(zip(starts, tasks, strict=True)):
    ids = tuple(ids)
    n = len(state.prompt_ids)
    if state.task.task_id != task.task_id:
      raise ValueError(
        f"start {i} continues task {state.task.task_id!r}, but row {i}'s"
        f" task is {task.task_id!r}."
      )
    if state.done:
      raise ValueError(
        f"start {i} (task {task.task_id!r}) is done ({state.stop_reason})."
      )
    if len(ids) != state.num_tokens or ids[:n] != tuple(state.prompt_ids):
      raise ValueError(
        f"start {i} (task {task.task_id!r}): {len(ids)} ids that must be"
        f" its state's {state.num_tokens}, its prompt first."
      )
    states.append(state)
    prefixes.append(ids)
  return states, prefixes


def concat(parts: Sequence[Rollout]) -> Rollout:
  """One rollout of the parts' episodes, in order (e.g. each process's).

  Rows are padded alike (`max_total_tokens`), so the batches stack. Each
  timing is the largest of the parts': they ran side by side.
  """
  if not parts:
    raise ValueError("concat: no rollouts to join.")
  checks = [p.render_ok for p in parts]
  return Rollout(
    batch=jax.tree.map(
      lambda *xs: np.concatenate(xs), *[p.batch for p in parts]
    ),
    episodes=[e for p in parts for e in p.episodes],
    timings={k: max(p.timings[k] for p in parts) for k in parts[0].timings},
    render_ok=None
    if any(c is None for c in checks)
    else np.concatenate(checks),
  )


def render_matches(
  fmt: chat.ConversationFormat,
  state: code_env.EpisodeState,
  ids: Sequence[int],
  mode: str,
) -> bool:
  """Whether an episode's ids equal the full render of its messages."""
  return chat.check_episode(fmt, episode_messages(fmt, state), ids, mode)


def episode_messages(
  fmt: chat.ConversationFormat, state: code_env.EpisodeState
) -> list[dict[str, str]]:
  """A finished episode's chat messages, as its row's ids hold them.

  The prompt's system and task text, each action's text and the
  observations that were appended: all but a final one, unless the loop
  cut the episode after it (`code_env.STOP_ADAPTIVE`).
  """
  turns = state.turns
  shown = turns if state.stop_reason == code_env.STOP_ADAPTIVE else turns[:-1]
  system, user = state.prompt_parts
  return chat.episode_messages(
    fmt,
    system,
    user,
    [t.action_text for t in turns],
    [t.observation.body for t in shown],
  )


def _apply_stopper(
  env: code_env.CodeEnv,
  stopper: StopHook,
  states: list[code_env.EpisodeState],
  rows: list[_Row],
  stepped: Sequence[int],
) -> None:
  """Asks `stopper` about the rows stepped this turn that are still open.

  Cuts (in `states`) those it answers True for; their rows keep the
  observation just appended and take no more turns.
  """
  open_rows = [i for i in stepped if not states[i].done]
  if not open_rows:
    return
  verdicts = stopper.decide(
    open_rows,
    [rows[i].tokens for i in open_rows],
    [len(states[i].turns) for i in open_rows],
  )
  if len(verdicts) != len(open_rows):
    raise ValueError(
      f"stopper.decide answered {len(verdicts)} verdicts for"
      f" {len(open_rows)} open episodes."
    )
  for i, cut in zip(open_rows, verdicts, strict=True):
    if cut:
      states[i] = env.cut(states[i])


def _to_batch(rows, states, group_ids, cfg, pad_id) -> types.TrajectoryBatch:
  """Pads the rows to [B, max_total_tokens] host arrays."""
  b, t = len(rows), cfg.max_total_tokens
  tokens = np.full((b, t), pad_id, np.int32)
  trainable = np.zeros((b, t), bool)
  valid = np.zeros((b, t), bool)
  for i, row in enumerate(rows):
    n = len(row.tokens)
    if n > t:  # the env's budgets make this impossible; never truncate
      raise AssertionError(f"row {i} has {n} tokens > max_total_tokens {t}")
    tokens[i, :n] = row.tokens
    trainable[i, :n] = row.trainable
    valid[i, :n] = True
  return types.TrajectoryBatch(
    tokens=tokens,
    trainable=trainable,
    valid=valid,
    length=valid.sum(axis=1).astype(np.int32),
    truncated=np.asarray([s.truncated for s in states], bool),
    group_id=np.asarray(group_ids, np.int32),
  )
