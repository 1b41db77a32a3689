r"""Rollouts in lockstep against slot refill, on heavy-tailed episodes.

Run from the repository root:

  python -m benchmarks.rollout_refill_bench
  python -m benchmarks.rollout_refill_bench --quick  # smoke run
  # long_horizon's budgets; the KV cache by them, then as sized by turns:
  python -m benchmarks.rollout_refill_bench --slots=8 \
    --max_turns=64 --max_total_tokens=3072
  python -m benchmarks.rollout_refill_bench --slots=8 \
    --max_turns=64 --max_total_tokens=3072 --cache_len=15648

The same `--episodes` tasks are rolled out by `agent_loop.collect` (one row
per episode, all in lockstep) and by `continuous.collect` with each of
`--slots` rows (an episode that ends hands its row to the next task).
Episode lengths are drawn heavy-tailed: most episodes take 2-5 turns,
`--tail_share` of them 6 to `--max_turns` (log-uniform), and the longest
exactly `--max_turns`; they are shuffled into the task order.

The policy is the tiny model of configs/tiny.py (smoke preset, random
weights) behind `SamplerPolicy`, wrapped so that episode i takes its drawn
number of turns: each turn the sampler decodes as many tokens as the
scripted action has (real decode work through the KV cache), and the
environment gets the scripted action: `<run>` of a correct solution with
a comment of random length until the last turn, then `<submit>`. The
sandbox is the `process` backend. Since actions are scripted, both modes
must produce the same trajectory batch (checked: `same_trajectories`).
With `--max_total_tokens` the token budget cuts the longest episodes (as
in configs/long_horizon.py); the KV cache has `agent_loop.cache_len_for`
slots a row, or `--cache_len`.

Each variant first runs once on 2-turn episodes (untimed: compiles its
shapes), then once timed. Columns:

  wall s        the rollout's wall time
  gen s         time in the policy (prefill, decode, restarts, compaction)
  env s         time waiting on the environment
  tok/s         generated (trainable) tokens / wall time
  idle rows     share of decode row-steps spent on empty rows (budget 0:
                finished episodes in lockstep, rows with no task left in
                slot refill): decode calls x their steps x idle rows,
                over decode calls x their steps x rows
  ended early   share of decode row-steps after a live row's action was
                complete (the call runs to its longest action)
  not gen       share of wall time outside the policy (env, host work)

Writes benchmarks/results/rollout_refill_bench.json.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from codeagent_rl.envs import code_env
from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.models import transformer as tf
from codeagent_rl.rollout import agent_loop
from codeagent_rl.rollout import continuous
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import schema
from configs import tiny
from tests.helpers import sandboxes

TOK = tokenizer_lib.ByteTokenizer()
SOLUTION = "def add(a, b):\n  return a + b\n"


def define_flags() -> None:
  """Registers the benchmark's flags."""
  flags.DEFINE_string(
    "out",
    str(
      pathlib.Path(__file__).parent / "results" / "rollout_refill_bench.json"
    ),
    "JSON output.",
  )
  flags.DEFINE_bool("quick", False, "Small settings (smoke check).")
  flags.DEFINE_integer("episodes", 16, "Episodes (tasks) per rollout.")
  flags.DEFINE_list("slots", ["4", "8"], "Rows of each slot-refill variant.")
  flags.DEFINE_integer("max_turns", 50, "Longest episode (and env budget).")
  flags.DEFINE_float("tail_share", 0.2, "Share of episodes in the long tail.")
  flags.DEFINE_integer("tokens_per_turn", 80, "env.max_tokens_per_turn.")
  flags.DEFINE_integer(
    "max_total_tokens",
    0,
    "env.max_total_tokens; 0: room for every turn (no token budget cuts).",
  )
  flags.DEFINE_integer(
    "cache_len", 0, "KV-cache slots a row; 0: agent_loop.cache_len_for."
  )
  flags.DEFINE_integer("pool_size", 2, "Sandbox workers.")
  flags.DEFINE_integer("seed", 0, "Seed of weights, lengths and actions.")


def draw_turns(n: int, max_turns: int, tail_share: float, rng) -> list[int]:
  """Heavy-tailed turns per episode: 2-5 mostly, a tail to `max_turns`."""
  turns = rng.integers(2, 6, size=n)
  tail = rng.random(n) < tail_share
  if max_turns > 6:
    logs = rng.uniform(np.log(6), np.log(max_turns), size=n)
    turns = np.where(tail, np.round(np.exp(logs)), turns)
  turns = np.minimum(turns, max_turns).astype(int)
  turns[int(np.argmax(turns))] = max_turns
  return turns.tolist()


def make_tasks(n: int) -> list[schema.Task]:
  """`add(a, b)` tasks whose prompts differ (the policy tells them apart)."""
  tests = lambda pairs: tuple(  # noqa: E731
    {"args": [a, b], "expected": a + b} for a, b in pairs
  )
  return [
    schema.Task(
      task_id=f"add{i}",
      prompt=f"Add two numbers (task {i}).",
      entry_point="add",
      kind="function",
      visible_tests=tests([(1, 2)]),
      hidden_tests=tests([(3, 4), (-1, 1)]),
      heldout_tests=tests([(10, 20)]),
      reference_solution=SOLUTION,
      metadata={},
    )
    for i in range(n)
  ]


def make_scripts(
  turns: list[int], fmt, tokens_per_turn: int, rng
) -> list[list[list[int]]]:
  """Each episode's actions as ids: runs, then a submit.

  The closing tag is one of the format's stop ids: it ends the turn.
  """
  room = tokens_per_turn - len(
    fmt.encode_action(f"<submit>{SOLUTION}# \n</submit>")
  )
  if room < 0:
    raise ValueError(f"--tokens_per_turn={tokens_per_turn}: too few.")
  scripts = []
  for n in turns:
    actions = []
    for k in range(n):
      tag = "submit" if k == n - 1 else "run"
      pad = "x" * int(rng.integers(0, room + 1))
      text = f"<{tag}>{SOLUTION}# {pad}\n</{tag}>"
      actions.append(fmt.encode_action(text))
    scripts.append(actions)
  return scripts


class ForcedTurns:
  """Episode i's scripted actions, decoded for real by the inner policy.

  The inner policy decodes as many tokens as the action has (random
  weights rarely stop early), so the decode work is that of the action;
  the loop gets the scripted ids. Records what each decode call did.
  """

  def __init__(self, inner, env, tasks, scripts):
    self.inner = inner
    self.by_prompt = {
      tuple(env.reset(t).prompt_ids): i for i, t in enumerate(tasks)
    }
    self.scripts = scripts
    self.episode, self.turn = [], {}
    self.calls = []  # (rows, steps, idle rows, live row-steps used)
    self.restarts = 0

  def _start(self, row, prompt):
    e = self.by_prompt[tuple(prompt)] if prompt else None
    self.episode[row] = e
    if e is not None:
      self.turn[e] = 0

  def begin(self, prompts):
    """Starts the first episodes, one a row."""
    self.episode = [None] * len(prompts)
    for row, prompt in enumerate(prompts):
      self._start(row, prompt)
    self.inner.begin(prompts)

  def restart(self, rows, prompts):
    """Starts the next episodes in freed rows."""
    for row, prompt in zip(rows, prompts, strict=True):
      self.restarts += bool(prompt)
      self._start(row, prompt)
    self.inner.restart(rows, prompts)

  def generate(self, budgets, rng):
    """Decodes each action's length; returns the scripted actions."""
    wanted = []
    for row, budget in enumerate(budgets):
      e = self.episode[row]
      if budget == 0 or e is None:
        wanted.append([])
        continue
      wanted.append(self.scripts[e][self.turn[e]][:budget])
      self.turn[e] += 1
    out = self.inner.generate([len(w) for w in wanted], rng)
    lengths = [len(ids) for ids, _ in out]
    steps = max(lengths, default=0)
    idle = sum(not w for w in wanted)
    self.calls.append((len(budgets), steps, idle, sum(lengths)))
    result = []
    for ids, (_, logp) in zip(wanted, out, strict=True):
      result.append((ids, (list(logp) + [0.0] * len(ids))[: len(ids)]))
    return result

  def observe(self, observations):
    """Appends the observations."""
    self.inner.observe(observations)

  def end(self):
    """Drops the cache."""
    self.inner.end()


def _variant(name, slots, run):
  """Runs one variant and returns its result row."""
  start = time.perf_counter()
  out, policy = run()
  wall = time.perf_counter() - start
  row_steps = sum(rows * steps for rows, steps, _, _ in policy.calls)
  idle_steps = sum(idle * steps for _, steps, idle, _ in policy.calls)
  used = sum(u for _, _, _, u in policy.calls)
  generated = int(out.batch.trainable.sum())
  return {
    "variant": name,
    "rows": slots,
    "wall_s": wall,
    "generate_s": out.timings["generate_s"],
    "env_s": out.timings["env_s"],
    "generated_tokens": generated,
    "tokens_per_s": generated / wall,
    "decode_calls": len(policy.calls),
    "decode_steps": sum(steps for _, steps, _, _ in policy.calls),
    "row_steps": row_steps,
    "idle_row_share": idle_steps / max(row_steps, 1),
    "ended_early_share": (row_steps - idle_steps - used) / max(row_steps, 1),
    "not_generating_share": 1.0 - out.timings["generate_s"] / wall,
    "restarts": policy.restarts,
  }, out


def main(argv):
  del argv
  f = flags.FLAGS
  quick = f.quick
  episodes = 6 if quick else f.episodes
  slot_counts = [2] if quick else [int(s) for s in f.slots]
  max_turns = 8 if quick else f.max_turns
  tokens_per_turn = 64 if quick else f.tokens_per_turn
  rng = np.random.default_rng(f.seed)
  turns = draw_turns(episodes, max_turns, f.tail_share, rng)
  if any(not 1 <= s <= episodes for s in slot_counts):
    raise ValueError(f"--slots={slot_counts}: each in [1, {episodes}].")

  model_cfg = tf.TransformerConfig.from_config(tiny.get_config("smoke").model)
  actor = tf.Actor(model_cfg)
  valid = jnp.ones((1, 8), bool)
  params = jax.jit(actor.init)(
    jax.random.PRNGKey(f.seed),
    jnp.zeros((1, 8), jnp.int32),
    tf.positions_from_valid(valid),
    valid,
  )
  sampler = sampler_lib.Sampler(
    actor,
    model_cfg,
    sampler_lib.SamplerConfig(
      temperature=1.0,
      top_k=0,
      top_p=1.0,
      max_new_tokens=tokens_per_turn,
      vocab_limit=TOK.vocab_size,
    ),
    pad_id=TOK.pad_id,
  )
  obs_max_bytes = 128
  # By default room for every turn's action and observation: no token
  # budget cuts.
  max_total_tokens = f.max_total_tokens or 256 + max_turns * (
    tokens_per_turn + obs_max_bytes + 64
  )
  env_cfg = code_env.EnvConfig(
    max_turns=max_turns,
    max_tokens_per_turn=tokens_per_turn,
    max_total_tokens=max_total_tokens,
    max_wall_s=3600.0,
    obs_max_bytes=obs_max_bytes,
    render_check="off",
  )
  tasks = make_tasks(episodes)
  groups = list(range(episodes))
  rows, outs = [], {}
  with harness.SandboxPool(
    sandboxes.short_config("process", f.pool_size)
  ) as pool:
    env = code_env.CodeEnv(pool, TOK, env_cfg)
    fmt = env.format
    scripts = make_scripts(turns, fmt, tokens_per_turn, rng)
    warm = make_scripts([2] * episodes, fmt, tokens_per_turn, rng)
    prompt_len = max(len(env.reset(t).prompt_ids) for t in tasks)
    cache_len = f.cache_len or agent_loop.cache_len_for(
      env_cfg, prompt_len, fmt
    )
    key = jax.random.PRNGKey(f.seed)

    def runner(slots, episode_scripts):
      def run():
        policy = ForcedTurns(
          agent_loop.SamplerPolicy(sampler, params, fmt, cache_len),
          env,
          tasks,
          episode_scripts,
        )
        if slots is None:
          out = agent_loop.collect(env, policy, tasks, groups, key)
        else:
          out = continuous.collect(env, policy, tasks, groups, key, slots=slots)
        return out, policy

      return run

    for slots in [None, *slot_counts]:
      name = "lockstep" if slots is None else "refill"
      rows_of = episodes if slots is None else slots
      print(f"{name} with {rows_of} rows: warm-up, then timed", flush=True)
      runner(slots, warm)()  # compiles this batch size's shapes
      # Compaction may first happen in the timed run: compile it now.
      sampler.compact(sampler.start(rows_of, cache_len))
      row, out = _variant(name, rows_of, runner(slots, scripts))
      rows.append(row)
      outs[(name, rows_of)] = out
  base = outs[("lockstep", episodes)].batch
  same = all(
    np.array_equal(o.batch.tokens, base.tokens)
    and np.array_equal(o.batch.trainable, base.trainable)
    for o in outs.values()
  )
  for row in rows:
    row["speedup_vs_lockstep"] = rows[0]["wall_s"] / row["wall_s"]
  print(
    f"model {model_cfg.num_params() / 1e6:.2f}M params (configs/tiny.py"
    f" smoke, random weights), {episodes} episodes, turns: mean"
    f" {np.mean(turns):.1f}, median {np.median(turns):.0f}, max"
    f" {max(turns)}; KV cache {cache_len} slots a row; jax"
    f" {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} CPUs"
  )
  header = (
    f"{'variant':>9} {'rows':>5} {'wall s':>8} {'gen s':>8} {'env s':>7}"
    f" {'tok/s':>8} {'idle rows':>10} {'ended early':>12} {'not gen':>8}"
    f" {'speed-up':>9}"
  )
  print(header)
  print("-" * len(header))
  for r in rows:
    print(
      f"{r['variant']:>9} {r['rows']:>5} {r['wall_s']:>8.2f}"
      f" {r['generate_s']:>8.2f} {r['env_s']:>7.2f}"
      f" {r['tokens_per_s']:>8.0f} {r['idle_row_share']:>10.1%}"
      f" {r['ended_early_share']:>12.1%}"
      f" {r['not_generating_share']:>8.1%} {r['speedup_vs_lockstep']:>9.2f}"
    )
  print(f"same trajectories in every variant: {same}")
  if not quick or f.out != f["out"].default:
    out = pathlib.Path(f.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
      json.dumps(
        {
          "benchmark": "rollout_refill_bench",
          "date": datetime.datetime.now(datetime.UTC).isoformat(),
          "jax": jax.__version__,
          "backend": jax.default_backend(),
          "device_kind": jax.devices()[0].device_kind,
          "cpu_count": os.cpu_count(),
          "model_params": model_cfg.num_params(),
          "settings": {
            "episodes": episodes,
            "slots": slot_counts,
            "max_turns": max_turns,
            "tail_share": f.tail_share,
            "tokens_per_turn": tokens_per_turn,
            "max_total_tokens": max_total_tokens,
            "pool_size": f.pool_size,
            "seed": f.seed,
            "quick": quick,
            "cache_len": cache_len,
          },
          "turns": turns,
          "same_trajectories": same,
          "rows": rows,
        },
        indent=2,
      )
    )
    print(f"Wrote {out}")
  if not same:
    raise SystemExit("lockstep and slot refill built different trajectories")


if __name__ == "__main__":
  define_flags()
  app.run(main)
