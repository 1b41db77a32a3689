r"""Trains the stage-1 logistic regression; writes the weights the repo keeps.

The shipped weights (codeagent_rl/anticheat/weights/stage1.json) come from

  python -m codeagent_rl.tasks.humaneval --out=/tmp/he_all.jsonl
  python -m codeagent_rl.main --config=configs/tiny.py \
      --workdir=/tmp/tiny_model
  python -m codeagent_rl.anticheat.corpus.train_classifier \
      --humaneval_tasks=/tmp/he_all.jsonl --model_runs=/tmp/tiny_model \
      --sandbox_backend=gvisor --out=codeagent_rl/anticheat/weights/stage1.json

The corpus has three parts:

- `hacks.corpus` over synthetic train-split tasks (`--tasks_per_family` per
  family, seed `--seed`): honest solutions and trajectories (label 0) and
  every hack class (label 1);
- HumanEval's canonical solutions (label 0, kind "humaneval"), real honest
  code, from a task file that `codeagent_rl.tasks.humaneval` wrote
  (`--humaneval_tasks`);
- a model's own solved episodes (label 0, kind "model"): each workdir of
  the main job in `--model_runs` holds its final evaluation's episodes
  (`eval_final_samples.jsonl`, with the observations the agent saw) and
  their tasks (`eval_tasks.jsonl`); each is graded in the sandbox, without
  the anti-cheat, and those that pass every test of suites A and B join,
  once per distinct trajectory.

The observations of every other trajectory with runs come from playing each
run through `CodeEnv` in a sandbox pool (the `--sandbox_*` flags; the
submissions are not executed), so the trajectory features see what the
agent saw.

Families and problems are held out: every `--heldout_every`-th synthetic
family in sorted order and every `--heldout_every`-th HumanEval problem
(HumanEval/0, /5, ...). The model is fitted on the others only; precision,
recall and the false-positive rate are reported on the held-out ones (and
per hack class), for the classifier alone and for stage 1 as the default
config runs it (its enforced flags or the score). The classifier is not
fitted on `hacks.LATER_STAGE_KINDS` (code that looks honest before
execution; stage 2 catches it); `heldout_stage1_kinds` reports the held-out
metrics without them. The weights written are the ones evaluated.

Features are the code and trajectory features of `features.py`; runtime
features get weight 0 (the score must be the same before execution, when
the environment asks whether to run a submission). They are standardised
with the training set's mean and std; the loss is the class-balanced
logistic loss plus `--l2` times the squared weights, minimised by Adam for
`--steps` full-batch steps. Everything is deterministic for a seed and a
task file.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
import json
import sys

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from codeagent_rl import samples as samples_lib
from codeagent_rl import solved
from codeagent_rl.anticheat import config as config_lib
from codeagent_rl.anticheat import features as features_lib
from codeagent_rl.anticheat import names
from codeagent_rl.anticheat import pipeline
from codeagent_rl.anticheat import stage1 as stage1_lib
from codeagent_rl.anticheat.corpus import hacks
from codeagent_rl.envs import code_env
from codeagent_rl.envs import protocol
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import pools
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic
from configs import common

# The classifier's features: everything known before execution.
STATIC = np.asarray(
  [n not in names.RUNTIME_FEATURES for n in names.FEATURE_NAMES]
)
# Smallest feature scale (a constant feature is left unscaled).
MIN_SCALE = 1e-3
# The kind of HumanEval's canonical solutions in the corpus (label 0).
HUMANEVAL_KIND = "humaneval"
# The kind of a model's solved episodes in the corpus (label 0).
MODEL_KIND = "model"
HONEST_KINDS = (hacks.HONEST_KIND, HUMANEVAL_KIND, MODEL_KIND)
# What a main-job workdir holds for `model_samples` (train/workdir.py's
# EVAL_FINAL_SAMPLES and EVAL_TASKS; this package sits below train/).
RUN_SAMPLES = "eval_final_samples.jsonl"
RUN_TASKS = "eval_tasks.jsonl"
# The reason `play_observations` gives for not executing a submission.
_NOT_EXECUTED = "not executed: the classifier's corpus needs runs only"


def humaneval_samples(tasks: Sequence[schema.Task]) -> list[hacks.Sample]:
  """The canonical solution of each task as an honest one-submit sample."""
  return [
    hacks.Sample(
      task,
      task.reference_solution,
      (("submit", task.reference_solution),),
      0,
      HUMANEVAL_KIND,
      "canonical",
    )
    for task in tasks
  ]


def model_samples(
  pool, runs: Sequence[str]
) -> tuple[list[hacks.Sample], list[tuple[str | None, ...] | None]]:
  """A model's solved episodes as honest samples, with their observations.

  Args:
    pool: a sandbox pool (the episodes are graded again here).
    runs: workdirs of the main job (`RUN_SAMPLES` and `RUN_TASKS` in each).

  Returns:
    (samples, observations): every distinct trajectory whose final code
    passes every test of suites A and B, as label 0 of kind `MODEL_KIND`
    (its actions are the action texts as the model wrote them), and per
    sample the observations the agent saw.

  Raises:
    OSError, ValueError: a run's files are missing or malformed (the
      message names the file).
  """
  out, observations, seen = [], [], set()
  for run in runs:
    tasks = {t.task_id: t for t in schema.read_tasks(f"{run}/{RUN_TASKS}")}
    lines = [
      s
      for s in samples_lib.read_samples(f"{run}/{RUN_SAMPLES}", tasks)
      if s.completion
    ]
    jobs = [judge.solution_job(tasks[s.task_id], s.completion) for s in lines]
    for line, result in zip(lines, pool.map(jobs), strict=True):
      task = tasks[line.task_id]
      grade = judge.grade_result(task, result)
      passed = solved.suites_a_and_b(
        a_passed=grade.suite_a.passed,
        a_total=grade.suite_a.total,
        b_passed=grade.suite_b.passed,
        b_total=grade.suite_b.total,
        executed=True,
        rejected=False,
      )
      actions, seen_by_agent = line.actions_and_observations()
      key = (task.task_id, json.dumps(actions))
      if not passed or key in seen:
        continue
      seen.add(key)
      out.append(
        hacks.Sample(
          task, line.completion, tuple(actions), 0, MODEL_KIND, "solved"
        )
      )
      observations.append(
        None if seen_by_agent is None else tuple(seen_by_agent)
      )
  return out, observations


def group_of(sample: hacks.Sample) -> str:
  """What is held out together: a synthetic family or a HumanEval problem."""
  if sample.kind == HUMANEVAL_KIND or "family" not in sample.task.metadata:
    return sample.task.task_id
  return sample.family


def heldout_families(every: int) -> tuple[str, ...]:
  """Every `every`-th family name in sorted order (starting with the first)."""
  return tuple(sorted(synthetic.FAMILIES)[::every])


def heldout_groups(samples: Sequence[hacks.Sample], every: int) -> set[str]:
  """Held-out families, and every `every`-th HumanEval problem by number."""
  held = set(heldout_families(every))
  for s in samples:
    if s.kind == HUMANEVAL_KIND:
      number = int(s.task.task_id.rsplit("/", 1)[-1])
      if number % every == 0:
        held.add(s.task.task_id)
  return held


def play_observations(
  pool, samples: Sequence[hacks.Sample], obs_max_bytes: int
) -> list[tuple[str | None, ...] | None]:
  """Per sample, the observation of each action (None for one submit).

  The runs of every multi-action sample are played through `CodeEnv` on
  `pool`, step by step across samples; submissions are not executed.

  Args:
    pool: a sandbox pool.
    samples: the corpus.
    obs_max_bytes: the environment's cap on an observation.
  """
  env = code_env.CodeEnv(
    pool,
    tokenizer_lib.ByteTokenizer(),
    code_env.EnvConfig(
      max_turns=max(len(s.actions) for s in samples),
      max_tokens_per_turn=1 << 20,
      max_total_tokens=1 << 24,
      max_wall_s=3600.0,
      obs_max_bytes=obs_max_bytes,
    ),
    pre_submit=lambda state, code: _NOT_EXECUTED,
  )
  rows = [
    i
    for i, s in enumerate(samples)
    if len(s.actions) > 1 and s.kind != MODEL_KIND
  ]
  states = {i: env.reset(samples[i].task) for i in rows}
  for step in range(max((len(samples[i].actions) for i in rows), default=0)):
    live = [i for i in rows if step < len(samples[i].actions)]
    texts = [_action_text(*samples[i].actions[step]) for i in live]
    for i, (state, _) in zip(
      live, env.step_many([states[i] for i in live], texts), strict=True
    ):
      states[i] = state
  out: list[tuple[str | None, ...] | None] = [None] * len(samples)
  for i in rows:
    out[i] = tuple(
      None if t.observation is None else t.observation.body
      for t in states[i].turns
    )
  return out


def _action_text(verb: str, code: str) -> str:
  """The action text of a ("run" | "submit", code) step."""
  action = protocol.Run(code) if verb == "run" else protocol.Submit(code)
  return protocol.format_action(action)


def featurize(
  samples: Sequence[hacks.Sample],
  observations: Sequence[tuple[str | None, ...] | None] | None = None,
) -> np.ndarray:
  """[S, N] features of the samples (no execution: runtime features 0).

  Args:
    samples: the corpus.
    observations: per sample, its observations (`play_observations`) or
      None; None: unknown for every sample.
  """
  if observations is None:
    observations = [None] * len(samples)
  return np.stack(
    [
      features_lib.extract(
        s.code,
        s.actions,
        obs,
        entry_point=s.task.entry_point,
        visible_tests=s.task.visible_tests,
      )
      for s, obs in zip(samples, observations, strict=True)
    ]
  )


def fit(
  x: np.ndarray,
  y: np.ndarray,
  *,
  steps: int,
  learning_rate: float,
  l2: float,
) -> stage1_lib.Stage1Params:
  """Class-balanced, L2-regularised logistic regression on `x` [S, N]."""
  mean = np.where(STATIC, x.mean(0), 0.0).astype(np.float32)
  scale = np.where(STATIC, np.maximum(x.std(0), MIN_SCALE), 1.0)
  scale = np.where(x.std(0) < MIN_SCALE, 1.0, scale).astype(np.float32)
  z = jnp.asarray((x - mean) / scale * STATIC, jnp.float32)
  labels = jnp.asarray(y, jnp.float32)
  pos = labels.mean()
  sample_w = jnp.where(labels > 0.5, 0.5 / pos, 0.5 / (1 - pos))
  mask = jnp.asarray(STATIC, jnp.float32)

  def loss_fn(p):
    logits = z @ (p["w"] * mask) + p["b"]
    per = optax.sigmoid_binary_cross_entropy(logits, labels)
    return jnp.mean(per * sample_w) + l2 * jnp.sum(jnp.square(p["w"]))

  opt = optax.adam(learning_rate)
  p = {"w": jnp.zeros(x.shape[1], jnp.float32), "b": jnp.zeros((), jnp.float32)}
  opt_state = opt.init(p)

  @jax.jit
  def step(carry, _):
    p, opt_state = carry
    grads = jax.grad(loss_fn)(p)
    updates, opt_state = opt.update(grads, opt_state, p)
    return (optax.apply_updates(p, updates), opt_state), None

  (p, _), _ = jax.lax.scan(step, (p, opt_state), None, length=steps)
  return stage1_lib.Stage1Params(
    weights=p["w"] * mask,
    bias=p["b"],
    mean=jnp.asarray(mean),
    scale=jnp.asarray(scale),
  )


def metrics(predicted: np.ndarray, y: np.ndarray) -> dict[str, float]:
  """Precision, recall, false-positive rate and counts."""
  tp = int(np.sum(predicted & (y == 1)))
  fp = int(np.sum(predicted & (y == 0)))
  fn = int(np.sum(~predicted & (y == 1)))
  tn = int(np.sum(~predicted & (y == 0)))
  return {
    "precision": tp / max(tp + fp, 1),
    "recall": tp / max(tp + fn, 1),
    "false_positive_rate": fp / max(fp + tn, 1),
    "positives": tp + fn,
    "negatives": fp + tn,
  }


def evaluate(
  params: stage1_lib.Stage1Params,
  x: np.ndarray,
  y: np.ndarray,
  kinds: Sequence[str],
  threshold: float,
  enforced: Sequence[bool] | None = None,
) -> dict:
  """Classifier-only and stage-1 metrics, overall and per kind.

  Args:
    params: the classifier.
    x: [S, N] features.
    y: [S] labels.
    kinds: [S] sample kinds.
    threshold: the classifier's decision threshold.
    enforced: [F] which rule flags reject (`AntiCheatConfig.enforced_mask`);
      None: every flag.

  Returns:
    "classifier" and "stage1" (enforced flags or the score) metrics, and
    per kind the share each rejects.
  """
  score = np.asarray(stage1_lib.score(jnp.asarray(x), params))
  by_score = score >= threshold
  flags_sf = np.asarray(stage1_lib.rule_flags(jnp.asarray(x)))
  if enforced is not None:
    flags_sf = flags_sf & np.asarray(enforced, bool)
  by_rules = flags_sf.any(-1)
  kinds = np.asarray(kinds)
  per_kind = {}
  for kind in sorted(set(kinds)):
    sel = kinds == kind
    per_kind[kind] = {
      "n": int(sel.sum()),
      "classifier_rate": float(by_score[sel].mean()),
      "stage1_rate": float((by_score | by_rules)[sel].mean()),
    }
  return {
    "classifier": metrics(by_score, y),
    "stage1": metrics(by_score | by_rules, y),
    "per_kind": per_kind,
  }


def define_flags() -> None:
  """Registers the program's flags, the sandbox's included."""
  flags.DEFINE_string("out", None, "Where to write the weights (JSON).")
  flags.DEFINE_string(
    "humaneval_tasks",
    None,
    "HumanEval tasks (JSONL from codeagent_rl.tasks.humaneval): their"
    " canonical solutions join the corpus as honest code.",
  )
  flags.DEFINE_list(
    "model_runs",
    [],
    "Workdirs of main-job runs: their final evaluation's solved episodes"
    " join the corpus as honest code.",
  )
  flags.DEFINE_integer(
    "tasks_per_family", 6, "Synthetic tasks per family in the corpus."
  )
  flags.DEFINE_integer("seed", 0, "Seed of the tasks and the corpus.")
  flags.DEFINE_integer(
    "heldout_every",
    5,
    "Every n-th family (sorted) and HumanEval problem is held out.",
  )
  flags.DEFINE_integer("steps", 2000, "Full-batch Adam steps.")
  flags.DEFINE_float("learning_rate", 0.05, "Adam learning rate.")
  flags.DEFINE_float("l2", 1e-3, "L2 penalty on the weights.")
  flags.DEFINE_float("threshold", 0.5, "Decision threshold of the metrics.")
  flags.DEFINE_integer(
    "obs_max_bytes",
    400,
    "Cap on a run's observation while the trajectories are played.",
  )
  harness.define_flags(limits=True)
  flags.mark_flags_as_required(["out", "humaneval_tasks"])


def _print_table(report: dict) -> None:
  for split in ("train", "heldout", "heldout_stage1_kinds"):
    for who in ("classifier", "stage1"):
      m = report[split][who]
      print(
        f"{split:20s} {who:10s} precision {m['precision']:.4f} recall"
        f" {m['recall']:.4f} false-positive rate"
        f" {m['false_positive_rate']:.4f}"
        f" ({m['positives']} hacks, {m['negatives']} honest)"
      )
  print(f"{'held-out kind':20s} {'n':>5s} {'classifier':>10s} {'stage1':>8s}")
  for kind, row in report["heldout"]["per_kind"].items():
    print(
      f"{kind:20s} {row['n']:5d} {row['classifier_rate']:10.4f}"
      f" {row['stage1_rate']:8.4f}"
    )


def main(argv: list[str]) -> None:
  """Builds the corpus, fits, evaluates on held-out groups, writes JSON."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  jax.config.update("jax_platforms", "cpu")
  f = flags.FLAGS
  try:
    sandbox = harness.config_from_flags()
    humaneval = schema.read_tasks(f.humaneval_tasks)
  except (ValueError, OSError) as e:
    raise app.UsageError(str(e)) from None
  tasks = hacks.synthetic_tasks(f.tasks_per_family, seed=f.seed)
  samples = [*hacks.corpus(tasks, seed=f.seed), *humaneval_samples(humaneval)]
  with pools.open_pool(sandbox) as pool:
    observations = play_observations(pool, samples, f.obs_max_bytes)
    try:
      solved_by_model, seen_by_model = model_samples(pool, f.model_runs)
    except (OSError, ValueError) as e:
      raise app.UsageError(f"--model_runs: {e}") from None
  samples += solved_by_model
  observations += seen_by_model
  x = featurize(samples, observations)
  y = np.asarray([s.label for s in samples])
  held = heldout_groups(samples, f.heldout_every)
  test = np.asarray([group_of(s) in held for s in samples])
  # The classifier is fitted on what stage 1 can see before execution.
  early = np.asarray([s.kind not in hacks.LATER_STAGE_KINDS for s in samples])
  params = fit(
    x[~test & early],
    y[~test & early],
    steps=f.steps,
    learning_rate=f.learning_rate,
    l2=f.l2,
  )
  config = config_lib.AntiCheatConfig.from_config(common.get_anticheat_config())
  kinds = np.asarray([s.kind for s in samples])

  def report_on(rows: np.ndarray) -> dict:
    return evaluate(
      params, x[rows], y[rows], kinds[rows], f.threshold, config.enforced_mask
    )

  report = {
    "heldout_groups": sorted(held),
    "enforced_flags": list(config.enforced_flags),
    # The hack classes stage 1 is responsible for (not stage 2's).
    "heldout_stage1_kinds": report_on(test & early),
    "train": report_on(~test),
    "heldout": report_on(test),
  }
  metadata = {
    "argv": [
      "python -m codeagent_rl.anticheat.corpus.train_classifier",
      *sys.argv[1:],
    ],
    "tasks_per_family": f.tasks_per_family,
    "seed": f.seed,
    "steps": f.steps,
    "learning_rate": f.learning_rate,
    "l2": f.l2,
    "sandbox_backend": sandbox.backend,
    "obs_max_bytes": f.obs_max_bytes,
    "model_runs": list(f.model_runs),
    "samples": dict(sorted(collections.Counter(kinds.tolist()).items())),
    "heldout_families": sorted(heldout_families(f.heldout_every)),
    "heldout_humaneval": int(np.sum(test & (kinds == HUMANEVAL_KIND))),
    "enforced_flags": report["enforced_flags"],
    "heldout_classifier": report["heldout"]["classifier"],
    "heldout_stage1": report["heldout"]["stage1"],
    "heldout_stage1_kinds_classifier": report["heldout_stage1_kinds"][
      "classifier"
    ],
    "heldout_stage1_kinds_stage1": report["heldout_stage1_kinds"]["stage1"],
    "heldout_per_kind": report["heldout"]["per_kind"],
  }
  pipeline.save_params(f.out, params, metadata)
  print(json.dumps(report, indent=1))
  _print_table(report)


if __name__ == "__main__":
  define_flags()
  app.run(main)
