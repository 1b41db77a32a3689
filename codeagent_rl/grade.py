r"""Offline grading: samples JSONL -> results JSONL, and pass@k.

  python -m codeagent_rl.grade --tasks=TASKS.jsonl --samples=SAMPLES.jsonl \
      --out=RESULTS.jsonl [--backend=gvisor|process] \
      [--config=configs/tiny.py | --anticheat=none]

  # One solution file against one task: suites A and B, no anti-cheat.
  python -m codeagent_rl.grade --tasks=TASKS.jsonl --task_id=ID \
      --code_file=SOL.py [--backend=gvisor|process]

A sample line is `{"task_id": ..., "completion": "<python source>"}`,
optionally with `"trajectory": [actions]` (each the action text, or a
`["run" | "submit", code]` pair) and `"observations": [str | null, ...]`
(what the agent saw after each action: one per trajectory action, null where
there was none; without them every repeated run counts as failing). The
anti-cheat reads both; other keys are ignored. Blank lines are skipped;
`sample_index` is a sample's 0-based position among the non-blank lines.
Each completion runs on its task's suites A and B in the sandbox (inputs
only; the expected values stay here) and is judged here. One result line
per sample, in sample order, written and flushed as soon as it and every
sample before it are graded:

  {"task_id": "add", "sample_index": 0, "status": "ok", "executed": true,
   "suite_a": {"passed": 7, "total": 7}, "suite_b": {"passed": 20,
   "total": 20}, "flags": [], "stage1_score": 0.01, "stage1_rejected":
   false, "stage2_ok": true, "reward": 1.0, "reason": "", "duration_s": 0.01}

The anti-cheat and the reward are the trainer's. By default
(`--anticheat=default`) the `anticheat` section is `--config`'s (an
experiment config, e.g. configs/tiny.py) or, without `--config`, the one
configs/common.py get_anticheat_config() defines (the trainer's
default); then `flags` names the raised stage-1 rule flags,
`stage1_score` is the classifier's probability of cheating,
`stage1_rejected` whether stage 1 rejected the sample (a rule it enforces,
or the score), `stage2_ok` the suite-B gate, and `reward` the final
`types.Rewards.total` after both stages. Code that stage 1 rejects is not
executed when the section says so (status "not_executed", the reason says
why). `--anticheat=none` turns the anti-cheat off: `flags` is empty,
`stage1_score` 0, `stage1_rejected` false, `stage2_ok` true and `reward` the
raw suite-A pass fraction; `--config` with `--anticheat=none` is a usage
error. Progress goes to stderr.

The last line of stdout is the summary, one JSON object: `anticheat` (where
the section came from: "configs/common.py", the `--config` file, or "none"),
pass@1, and pass@5 / pass@10 where every graded task has at least that many
samples (the unbiased estimator 1 - C(n-c, k) / C(n, k), averaged over
tasks), for suite A and for suites A and B, counting the samples that are
solved as `codeagent_rl.solved` defines it (the trainer's definition): it
ran, stage 1 did not reject it, and it passed every test of a non-empty
suite A (and of suite B; an empty suite B counts as passed). Samples with
a `mode` (the main job's `eval_final_samples.jsonl` holds greedy and
sampled episodes) are also summarised per mode, under "by_mode", and the
lines before the JSON say which figure is which: the overall pass@1 of
such a file mixes one greedy episode per task with the sampled ones.
Problems with the inputs stop the run before any grading with a message
that names the file and line.

With `--code_file` (and `--task_id`), the one solution runs on the task's
suites A and B in one sandbox and stdout is one JSON object: status,
suite_a {passed, total, verdicts}, suite_b {...} (the judge's `Grade`),
printed whatever the solution did; no anti-cheat runs, so `--samples`,
`--out`, `--config` and `--anticheat` do not apply.

The sandbox is set by the `--sandbox_*` flags of `sandbox/harness.py`;
`--backend` is a short form of `--sandbox_backend`.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
import json
import math
import sys
import time
from typing import Any, TextIO

from absl import app
from absl import flags
import jax
from ml_collections import config_flags
import numpy as np

from codeagent_rl import samples as samples_lib
from codeagent_rl import solved
from codeagent_rl import types
from codeagent_rl.anticheat import config as anticheat_config
from codeagent_rl.anticheat import features
from codeagent_rl.anticheat import pipeline
from codeagent_rl.envs import code_env
from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import pools
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema

# "default": the anti-cheat section of --config, or of configs/common.py.
ANTICHEAT_DEFAULT = "default"
# "none": no anti-cheat; the reward is the raw suite-A pass fraction.
ANTICHEAT_NONE = "none"
# The summary's `anticheat` without --config: where the section comes from.
COMMON_SOURCE = "configs/common.py"


def define_flags() -> None:
  """Registers the program's flags, the sandbox's included."""
  flags.DEFINE_string("tasks", None, "JSONL task file.")
  flags.DEFINE_string(
    "samples", None, 'JSONL samples: {"task_id", "completion"} per line.'
  )
  flags.DEFINE_string("out", None, "JSONL results, one line per sample.")
  flags.DEFINE_string(
    "code_file",
    None,
    "Grade this one solution (Python source) against --task_id instead of"
    " --samples; prints its grade as one JSON object.",
  )
  flags.DEFINE_string(
    "task_id", None, "With --code_file: the task of --tasks to grade against."
  )
  harness.define_backend_flag()
  config_flags.DEFINE_config_file(
    "config",
    None,
    "Experiment config whose `anticheat` section runs stage 1 and stage 2 on"
    " every sample (default: configs/common.py get_anticheat_config()) and"
    " whose `sandbox` section sets the job limits (default: the"
    " --sandbox_* limit flags).",
  )
  flags.DEFINE_enum(
    "anticheat",
    ANTICHEAT_DEFAULT,
    (ANTICHEAT_DEFAULT, ANTICHEAT_NONE),
    "default: the trainer's anti-cheat and reward (the `anticheat` section of"
    " --config, or of configs/common.py); none: no anti-cheat, the reward is"
    " the suite-A pass fraction (not with --config).",
  )
  flags.DEFINE_float(
    "progress_every_s", 10.0, "Seconds between progress lines on stderr."
  )
  harness.define_flags(limits=True)
  flags.mark_flags_as_required(["tasks"])


# pass@k is reported for these k (where every graded task has n >= k).
PASS_AT_K = (1, 5, 10)


# The samples format (codeagent_rl/samples.py), as grade's own names.
SampleFormatError = samples_lib.SampleFormatError
Sample = samples_lib.Sample
read_samples = samples_lib.read_samples


def pass_at_k(n: int, c: int, k: int) -> float:
  """Unbiased pass@k of one task: 1 - C(n - c, k) / C(n, k).

  Args:
    n: samples of the task.
    c: correct samples among them.
    k: the k of pass@k; needs n >= k.

  Returns:
    The probability that k samples drawn without replacement from the n
    hold a correct one (exact integer binomials, one rounding).
  """
  if not 0 <= c <= n or not 1 <= k <= n:
    raise ValueError(
      f"pass_at_k needs 0 <= c <= n and 1 <= k <= n; got {n=}, {c=}, {k=}."
    )
  return 1.0 - math.comb(n - c, k) / math.comb(n, k)


# Whether a result line's sample is solved on suite A / on A and B.
solved_a = solved.line_a
solved_ab = solved.line_a_and_b


def summarize(results: Iterable[dict], ks: Sequence[int] = PASS_AT_K) -> dict:
  """The summary of result lines (see the module docstring).

  Args:
    results: result lines (`task_id`, `status`, `executed`, `suite_a`,
      `suite_b`, `stage1_rejected`, `reward`).
    ks: candidate k of pass@k.

  Returns:
    A JSON-safe dict; a sample counts as correct when it is solved
    (`solved_a`, `solved_ab`). Where lines carry a `mode`, "by_mode" holds
    each mode's own summary (its samples only): pass@1 over all samples
    of a file with greedy and sampled episodes mixes the two.
  """
  results = list(results)
  summary = _summarize(results, ks)
  modes = sorted({r["mode"] for r in results if r.get("mode") is not None})
  if modes:
    summary["by_mode"] = {
      mode: _summarize([r for r in results if r.get("mode") == mode], ks)
      for mode in modes
    }
  return summary


def summary_lines(summary: dict) -> list[str]:
  """The human-readable lines of `summarize`'s result, per mode if any."""
  by_mode = summary.get("by_mode", {})
  sections = [(f" [{mode}]", part) for mode, part in by_mode.items()]
  if len(by_mode) != 1:  # one mode: the overall line is that mode's
    label = " [all modes mixed]" if by_mode else ""
    sections.append((label, summary))
  lines = []
  for label, part in sections:
    for name in ("suite_a", "suite_a_and_b"):
      scores = ", ".join(f"{k} {v:.4f}" for k, v in part[name].items())
      lines.append(f"{name}{label}: {scores or 'no samples'}")
  return lines


def _summarize(results: list[dict], ks: Sequence[int]) -> dict:
  """`summarize` of one set of lines, without the per-mode part."""
  per_task: dict[str, list[tuple[bool, bool]]] = {}
  statuses: collections.Counter = collections.Counter()
  rewards = []
  for r in results:
    a, ab = solved_a(r), solved_ab(r)
    per_task.setdefault(r["task_id"], []).append((a, ab))
    statuses[r["status"]] += 1
    rewards.append(r["reward"])
  counts = [len(v) for v in per_task.values()]
  usable = [k for k in ks if counts and min(counts) >= k]
  summary: dict[str, Any] = {
    "num_samples": len(rewards),
    "num_tasks": len(per_task),
    "samples_per_task": {
      "min": min(counts, default=0),
      "max": max(counts, default=0),
    },
    "statuses": dict(sorted(statuses.items())),
    "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0,
  }
  for name, column in (("suite_a", 0), ("suite_a_and_b", 1)):
    summary[name] = {
      f"pass@{k}": sum(
        pass_at_k(len(v), sum(x[column] for x in v), k)
        for v in per_task.values()
      )
      / len(per_task)
      for k in usable
    }
  return summary


def _short(value) -> float:
  """The shortest decimal that is this float32 (0.2, not 0.200000003)."""
  return float(str(np.float32(value)))


def result_line(
  sample: Sample,
  outcome: code_env.Outcome,
  rewards: types.Rewards | None = None,
  rejected: bool = False,
) -> dict:
  """The result line of a graded sample.

  Args:
    sample: the sample.
    outcome: what the judge made of it.
    rewards: its [1] rewards after the anti-cheat, or None (no anti-cheat:
      `code_env.rewards([outcome])`).
    rejected: whether anti-cheat stage 1 rejected it.
  """
  grade = outcome.grade
  if rewards is None:
    rewards = code_env.rewards([outcome])
  flag_row = np.asarray(rewards.stage1_flags)[0]
  return {
    "task_id": sample.task_id,
    "sample_index": sample.index,
    "status": jobs.status_name(outcome.status),
    "executed": outcome.executed,
    "suite_a": {
      "passed": outcome.suite_a_passed,
      "total": outcome.suite_a_total,
    },
    "suite_b": {
      "passed": outcome.suite_b_passed,
      "total": outcome.suite_b_total,
    },
    "suite_gen": {
      "passed": outcome.suite_gen_passed,
      "total": outcome.suite_gen_total,
    },
    "flags": [features.FLAG_NAMES[i] for i in np.flatnonzero(flag_row)],
    "stage1_score": _short(np.asarray(rewards.stage1_score)[0]),
    "stage1_rejected": bool(rejected),
    "stage2_ok": bool(np.asarray(rewards.stage2_ok)[0]),
    "reward": _short(np.asarray(rewards.total)[0]),
    "reason": grade.result.reason if grade else outcome.reason,
    "duration_s": grade.result.duration_s if grade else 0.0,
    **({} if sample.mode is None else {"mode": sample.mode}),
  }


def grade_samples(
  pool: Any,
  tasks: dict[str, schema.Task],
  samples: Sequence[Sample],
  out: TextIO,
  *,
  judge_config: judge.JudgeConfig | None = None,
  in_flight: int | None = None,
  sandbox_retries: int = 1,
  progress: Callable[[int, int], None] | None = None,
  anticheat: pipeline.AntiCheat | None = None,
) -> list[dict]:
  """Grades every sample; writes and flushes each result line in order.

  Args:
    pool: runs the jobs (`submit(job) -> Future`).
    tasks: task_id -> task.
    samples: what to grade.
    out: where result lines go (flushed after each).
    judge_config: float tolerance (None: `judge.JudgeConfig()`).
    in_flight: jobs queued at once (default: 4 per pool worker).
    sandbox_retries: resubmissions of a job that hit a sandbox error.
    progress: called as progress(done, total) after each sample.
    anticheat: stage 1 and 2 (and, if its config says so, no execution of
      code stage 1 rejects); None: no anti-cheat.

  Returns:
    The result lines, in sample order.
  """
  judge_config = judge_config or judge.JudgeConfig()
  if in_flight is None:
    in_flight = 4 * pool.parallelism
  queue = collections.deque()
  lines = []
  todo = iter(samples)

  def fill():
    while len(queue) < in_flight:
      sample = next(todo, None)
      if sample is None:
        return
      task = tasks[sample.task_id]
      if anticheat is not None and _skipped(anticheat, task, sample):
        queue.append((sample, None, None))
        continue
      job = judge.solution_job(task, sample.completion)
      queue.append((sample, job, pool.submit(job)))

  fill()
  while queue:
    sample, job, future = queue.popleft()
    task = tasks[sample.task_id]
    if job is None:
      outcome = code_env.Outcome.not_executed(pipeline.SKIP_REASON)
    else:
      result = code_env.await_result(pool, job, future, sandbox_retries)
      grade = judge.grade_result(task, result, judge_config)
      outcome = code_env.Outcome.from_grade(grade)
    fill()
    rewards, rejected = None, False
    if anticheat is not None:
      vector = _features(task, sample, outcome.grade and outcome.grade.result)
      rewards = anticheat.apply(
        pipeline.rewards_from_outcomes([outcome]), vector[None]
      )
      rejected = bool(pipeline.rejected(rewards, anticheat.config)[0])
    line = result_line(sample, outcome, rewards, rejected)
    out.write(json.dumps(line) + "\n")
    out.flush()
    lines.append(line)
    if progress is not None:
      progress(len(lines), len(samples))
  return lines


def _features(task: schema.Task, sample: Sample, result) -> np.ndarray:
  """The sample's stage-1 features (`result`: its sandbox result, or None)."""
  actions, observations = sample.actions_and_observations()
  return features.extract(
    sample.completion,
    actions,
    observations,
    entry_point=task.entry_point if task.kind == jobs.FUNCTION else None,
    visible_tests=task.visible_tests,
    result=result,
  )


def _skipped(
  anticheat: pipeline.AntiCheat, task: schema.Task, sample: Sample
) -> bool:
  """Whether stage 1 keeps the sample from running (pre-execution gate)."""
  if not anticheat.config.skip_flagged:
    return False
  vector = _features(task, sample, None)
  return bool(anticheat.skip(vector[None])[0])


class _Progress:
  """Prints `grade: done/total` to stderr every `every_s` seconds."""

  def __init__(self, every_s: float):
    self._every_s = every_s
    self._start = self._last = time.monotonic()

  def __call__(self, done: int, total: int) -> None:
    now = time.monotonic()
    if now - self._last < self._every_s and done < total:
      return
    self._last = now
    rate = done / max(now - self._start, 1e-9)
    print(
      f"grade: {done}/{total} samples ({100 * done / total:.0f}%),"
      f" {rate:.1f}/s",
      file=sys.stderr,
      flush=True,
    )


def _sandbox_config(**overrides) -> config_lib.SandboxConfig:
  """The sandbox of the flags (`--backend` applied); stops on a bad value.

  The job limits are `--config`'s `sandbox` section when it has one (those
  the trainer's rewards were measured under), else the limit flags.
  """
  config = flags.FLAGS.config
  limits = None
  try:
    if config is not None and "sandbox" in config:
      given = [
        f"--{n}" for n in harness.LIMIT_FLAG_NAMES if flags.FLAGS[n].present
      ]
      if given:
        raise app.UsageError(
          f"{', '.join(given)}: with --config the job limits are its"
          " `sandbox` section; set --config.sandbox.<field> instead."
        )
      limits = config_lib.SandboxLimits.from_config(config.sandbox)
    return harness.config_from_cli_flags(
      flags.FLAGS.backend, limits, **overrides
    )
  except ValueError as e:
    sys.exit(str(e))


def _check_anticheat_flags() -> None:
  """Rejects --config together with --anticheat=none."""
  if flags.FLAGS.config is not None and flags.FLAGS.anticheat == ANTICHEAT_NONE:
    raise app.UsageError(
      "--config and --anticheat=none contradict each other: --config's"
      " `anticheat` section turns the anti-cheat on. Drop --config to grade"
      " without anti-cheat, or drop --anticheat=none."
    )


def _common_section() -> Any:
  """The `anticheat` section of configs/common.py (the trainer's default)."""
  # Imported here: configs/ is importable from the repository root only (as
  # for --config), and --anticheat=none must work from anywhere.
  try:
    from configs import common
  except ModuleNotFoundError as e:
    if e.name not in ("configs", "configs.common"):
      raise
    sys.exit(
      "--anticheat=default: the default anti-cheat section is"
      f" {COMMON_SOURCE} get_anticheat_config(), which is importable from"
      " the repository root only: run grade there (as with --config), or"
      " pass --anticheat=none to grade without anti-cheat."
    )
  return common.get_anticheat_config()


def _anticheat() -> tuple[pipeline.AntiCheat | None, str]:
  """The anti-cheat the flags ask for and where its section came from.

  Returns:
    (anti-cheat, source): `--config`'s `anticheat` section and that file,
    configs/common.py's section and `COMMON_SOURCE`, or (None, "none") for
    `--anticheat=none`.
  """
  if flags.FLAGS.anticheat == ANTICHEAT_NONE:
    return None, ANTICHEAT_NONE
  config = flags.FLAGS.config
  if config is None:
    section, source = _common_section(), COMMON_SOURCE
  elif "anticheat" not in config:
    sys.exit(
      "--config: the config has no `anticheat` section; add one built by"
      " configs/common.py get_anticheat_config(), or drop --config."
    )
  else:
    section = config.anticheat
    source = config_flags.get_config_filename(flags.FLAGS["config"])
  try:
    validated = anticheat_config.AntiCheatConfig.from_config(section)
    return pipeline.AntiCheat.from_config(validated), source
  except (OSError, ValueError) as e:
    where = "--config" if config is not None else COMMON_SOURCE
    sys.exit(f"{where}: {e}")


def _read_tasks() -> dict[str, schema.Task]:
  """task_id -> task of `--tasks`; stops with the file and line of a problem."""
  try:
    return {
      t.task_id: t
      for t in schema.read_tasks(flags.FLAGS.tasks, schema.PROGRAM_KINDS)
    }
  except (OSError, schema.TaskFormatError) as e:
    sys.exit(f"--tasks: {e}")


# Flags of the samples mode that a --code_file run must not be given.
_SAMPLES_MODE_FLAGS = ("samples", "out", "config", "anticheat")


def _grade_one_solution() -> None:
  """The --code_file mode: grades one solution, prints its `judge.Grade`."""
  given = [f"--{n}" for n in _SAMPLES_MODE_FLAGS if flags.FLAGS[n].present]
  if given:
    raise app.UsageError(
      f"{', '.join(given)}: not with --code_file, which grades one solution"
      " without the anti-cheat; drop them, or grade --samples instead."
    )
  if flags.FLAGS.task_id is None:
    raise app.UsageError("--code_file needs --task_id: the task to grade.")
  try:
    with open(flags.FLAGS.code_file, encoding="utf-8") as f:
      code = f.read()
  except OSError as e:
    raise app.UsageError(
      f"--code_file={flags.FLAGS.code_file}: cannot read: {e}"
    ) from None
  tasks = _read_tasks()
  if flags.FLAGS.task_id not in tasks:
    sys.exit(
      f"--task_id={flags.FLAGS.task_id!r} is not in {flags.FLAGS.tasks}."
    )
  config = _sandbox_config(pool_size=1)
  try:
    pool = pools.open_pool(config)
  except gvisor.SetupError as e:
    sys.exit(str(e))
  with pool:
    graded = judge.grade(pool, tasks[flags.FLAGS.task_id], code)
  print(json.dumps(graded.to_json()))


def main(argv: list[str]) -> None:
  """Entry point of `python -m codeagent_rl.grade`."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if flags.FLAGS.code_file is not None:
    _grade_one_solution()
    return
  if flags.FLAGS.task_id is not None:
    raise app.UsageError("--task_id goes with --code_file (one solution).")
  missing = [n for n in ("samples", "out") if flags.FLAGS[n].value is None]
  if missing:
    raise app.UsageError(
      f"--{' and --'.join(missing)} required: grade --samples into --out, or"
      " one --code_file against --task_id."
    )
  _check_anticheat_flags()
  # Rewards are tiny arrays; never claim an accelerator for them.
  jax.config.update("jax_platforms", "cpu")
  config = _sandbox_config()
  tasks = _read_tasks()
  try:
    samples = read_samples(flags.FLAGS.samples, tasks)
  except (OSError, SampleFormatError) as e:
    sys.exit(f"--samples: {e}")
  anticheat, anticheat_source = _anticheat()
  print(
    f"grade: {len(samples)} samples of {len({s.task_id for s in samples})}"
    f" tasks, sandbox {config.describe()},"
    f" anti-cheat {anticheat_source}",
    file=sys.stderr,
    flush=True,
  )
  start = time.monotonic()
  try:
    out = open(flags.FLAGS.out, "w", encoding="utf-8")
  except OSError as e:
    sys.exit(f"--out: {e}")
  try:
    pool = pools.open_pool(config)
  except gvisor.SetupError as e:
    out.close()
    sys.exit(str(e))
  with out, pool:
    lines = grade_samples(
      pool,
      tasks,
      samples,
      out,
      progress=_Progress(flags.FLAGS.progress_every_s),
      anticheat=anticheat,
    )
  summary = summarize(lines)
  summary["anticheat"] = anticheat_source
  summary["elapsed_s"] = round(time.monotonic() - start, 3)
  summary["out"] = flags.FLAGS.out
  for line in summary_lines(summary):
    print(line)
  print(json.dumps(summary))


if __name__ == "__main__":
  define_flags()
  app.run(main)
