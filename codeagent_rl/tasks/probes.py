r"""Interactive tasks whose information arrives only through probes.

    python -m codeagent_rl.tasks.probes --split=train --num_tasks=500 \
      --seed=0 --out=/tmp/train.jsonl --demos_out=/tmp/train_demos.jsonl

Family "secret": a secret integer s lies in a range lo..hi that the prompt
gives. Inside a `<run>` the program may call `probe(x)` and read `lo, hi`,
the range still possible after the answers so far (`helper`: code the job
runs before the policy's); the helper only prints `probe(x)`, and the
environment, on the host, answers the first query a run printed:
"higher" (s > x), "lower" (s < x) or "found", with the range still possible
(`envs.code_env`). One query is answered per run, so each piece of
information costs a turn. The range is public (the prompt and the answers
state it); handing it to the job lets a byte-level model bisect
(`probe((lo+hi)//2)`) or scan (`probe(lo)`) without copying numbers, so
what it must learn is the strategy, and the secret's digits only once, from
the answer `found, s = 66` into its submission. The submission is
`compare(x)`, returning -1, 0 or 1 as x is below, at or above s, judged on
suites A and B like any function task. The secret lives in the task's
`metadata["probe"]` and its tests' expected values, both on the host only:
no job ever holds it, so a program can only learn it by asking.

How many turns a task needs depends on its range (bisection takes about
log2(hi - lo + 1) probes, a scan up to hi - lo + 1) and the range sizes are
heavy-tailed (`SIZE_TIERS`): most ranges take 2-4 bisection probes, a few
up to 8; scanning a wide range runs into the turn budget.

Demonstration plans (`synthetic.DemoPlan`, kinds `PROBE_DEMO_KINDS`):
`bisect` (probe midpoints, submit the secret), `scan` (probe lo, lo + 1,
... until found; a long success, only where it fits `MAX_SCAN_PROBES`),
`give_up` (one or two probes, then submit the middle of what is left: an
early give-up, usually wrong) and `off_by_one` (bisect, then submit
`s = <secret> + 1`). Bisection probes until found, also when one value is
left, so that every success copies the secret from a `found, s = ...`.
Task i depends only on the seed, split and the tasks before it.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import hashlib
import random
import re

from absl import app
from absl import flags

from codeagent_rl.tasks import schema
from codeagent_rl.tasks import synthetic

ENTRY_POINT = "compare"
# (smallest, largest range size, weight): the horizon's heavy tail.
SIZE_TIERS = ((4, 16, 0.55), (17, 64, 0.3), (65, 250, 0.15))
LOWEST = (0, 99)
# Longest scan a demonstration makes (the turn budget of configs/
# long_horizon.py is 64 turns).
MAX_SCAN_PROBES = 60
TEST_FRACTION = 0.25
NUM_HIDDEN = 8
NUM_HELDOUT = 20
PROBE_DEMO_KINDS = synthetic.PROBE_DEMO_KINDS
CORRECT_KINDS = ("bisect", "scan")
# Defined in front of the policy's code in every `<run>` of a probe task,
# after the range (`helper`).
HELPER = (
  "def probe(x):\n"
  "    if type(x) is not int:\n"
  '        raise TypeError("probe(x) takes an int")\n'
  '    print(f"probe({x})", flush=True)\n'
  "\n"
)
# A query: a whole stdout line `probe(<int>)`; printing one is the same as
# calling the helper.
_QUERY = re.compile(r"probe\((-?\d{1,13})\)")
HIGHER, LOWER, FOUND = "higher", "lower", "found"


@dataclasses.dataclass(frozen=True)
class Spec:
  """A task's hidden probe (`metadata["probe"]`, validated by the schema)."""

  family: str
  lo: int
  hi: int
  secret: int


def spec_of(task: schema.Task) -> Spec | None:
  """The task's probe, or None for an ordinary task."""
  raw = task.metadata.get(schema.PROBE_METADATA_KEY)
  return None if raw is None else Spec(**raw)


def queries(stdout: str) -> list[int]:
  """The probe queries a run printed, in order (malformed lines are not)."""
  out = []
  for line in stdout.splitlines():
    match = _QUERY.fullmatch(line.strip())
    if match and abs(int(match.group(1))) <= schema.PROBE_MAX_ABS:
      out.append(int(match.group(1)))
  return out


def interval(spec: Spec, asked: Sequence[int]) -> tuple[int, int]:
  """The range still possible after the answered queries `asked`."""
  lo, hi = spec.lo, spec.hi
  for x in asked:
    if x < spec.secret:
      lo = max(lo, x + 1)
    elif x > spec.secret:
      hi = min(hi, x - 1)
    else:
      lo = hi = x
  return lo, hi


def answer(spec: Spec, x: int) -> str:
  """`HIGHER` (the secret is above x), `LOWER` or `FOUND`."""
  if spec.secret > x:
    return HIGHER
  return LOWER if spec.secret < x else FOUND


def answer_line(spec: Spec, asked: Sequence[int], x: int) -> str:
  """The observation's line for query x after `asked` (x not among them)."""
  verdict = answer(spec, x)
  if verdict == FOUND:
    return f"probe({x}): found, s = {x}"
  lo, hi = interval(spec, [*asked, x])
  return f"probe({x}): {verdict}, in {lo}..{hi}"


def helper(spec: Spec, asked: Sequence[int]) -> str:
  """The code a run executes before the policy's: `lo, hi` and `probe`.

  `lo, hi` is the range still possible after the answered queries `asked`
  (public: the prompt and the observations already said it).
  """
  lo, hi = interval(spec, asked)
  return f"lo, hi = {lo}, {hi}\n" + HELPER


# Horizon buckets of `horizon_bucket`, shortest first: the size tiers.
HORIZON_BUCKETS = ("short", "medium", "long")


def horizon_bucket(task: schema.Task) -> str | None:
  """The task's horizon bucket (`HORIZON_BUCKETS`): its range's size tier.

  Bisection needs about log2(size) probes, a scan up to size; None for a
  task without a probe.
  """
  spec = spec_of(task)
  if spec is None:
    return None
  size = spec.hi - spec.lo + 1
  for name, (_, largest, _) in zip(HORIZON_BUCKETS, SIZE_TIERS, strict=True):
    if size <= largest:
      return name
  return HORIZON_BUCKETS[-1]


def reference_solution(secret: int | str) -> str:
  """`compare(x)` for `secret` (an int, or an expression of one)."""
  return f"def compare(x):\n    s = {secret}\n    return (x > s) - (x < s)\n"


def prompt(lo: int, hi: int) -> str:
  """The task statement (the secret is not in it)."""
  return (
    f"A secret integer s is in {lo}..{hi}. In a run, lo, hi is the range"
    " still possible and probe(x) tells if s is higher or lower than x, or"
    " found (one probe a run).\n"
    "Write compare(x: int) -> int: -1 if x < s, 0 if x == s, 1 if x > s."
  )


# --- Generation --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProbeConfig:
  """What to generate.

  Attributes:
    num_tasks: number of tasks.
    seed: the only source of randomness.
    split: "train" or "test" (disjoint (lo, hi, secret) triples).
    bisect: probability that a task gets a `bisect` plan.
    scan: probability of a `scan` plan (where it fits).
    give_up: probability of a `give_up` plan.
    off_by_one: probability of an `off_by_one` plan.
  """

  num_tasks: int = 100
  seed: int = 0
  split: str = "train"
  bisect: float = 1.0
  scan: float = 0.3
  give_up: float = 0.15
  off_by_one: float = 0.1

  def __post_init__(self):
    for name in ("num_tasks", "seed"):
      value = getattr(self, name)
      low = 1 if name == "num_tasks" else 0
      if type(value) is not int or value < low:
        raise ValueError(
          f"ProbeConfig.{name}={value!r}: must be an int >= {low}."
        )
    if self.split not in synthetic.SPLITS:
      raise ValueError(
        f"ProbeConfig.split={self.split!r}: must be one of {synthetic.SPLITS}."
      )
    for kind in PROBE_DEMO_KINDS:
      value = getattr(self, kind)
      if type(value) not in (int, float) or not 0 <= value <= 1:
        raise ValueError(
          f"ProbeConfig.{kind}={value!r}: must be a probability in [0, 1]."
        )


def split_of(lo: int, hi: int, secret: int) -> str:
  """The split of a triple: about `TEST_FRACTION` (by digest) are test."""
  digest = hashlib.sha256(f"secret:{lo}:{hi}:{secret}".encode()).digest()
  share = int.from_bytes(digest[:8], "big") / 2**64
  return "test" if share < TEST_FRACTION else "train"


def _draw(rng: random.Random, split: str) -> tuple[int, int, int]:
  """A (lo, hi, secret) of `split`; range sizes from `SIZE_TIERS`."""
  while True:
    small, large, _ = rng.choices(SIZE_TIERS, [w for *_, w in SIZE_TIERS])[0]
    lo = rng.randint(*LOWEST)
    hi = lo + rng.randint(small, large) - 1
    secret = rng.randint(lo, hi)
    if split_of(lo, hi, secret) == split:
      return lo, hi, secret


def _suites(rng, lo, hi, secret) -> tuple[list[int], list[int]]:
  """Inputs of suite A (around the secret) and suite B (edges), disjoint."""
  near = [x for x in range(secret - 2, secret + 3)]
  hidden = list(dict.fromkeys(near + [rng.randint(lo, hi) for _ in range(8)]))
  hidden = hidden[:NUM_HIDDEN]
  edges = [lo, hi, lo - 1, hi + 1, 0, -(10**9), 10**9, secret - 3, secret + 3]
  heldout = [x for x in dict.fromkeys(edges) if x not in hidden]
  pool = [x for x in range(lo - 20, hi + 21) if x not in hidden]
  rng.shuffle(pool)
  for x in pool:
    if len(heldout) >= NUM_HELDOUT:
      break
    if x not in heldout:
      heldout.append(x)
  return hidden, heldout


def _task(config: ProbeConfig, index: int, rng: random.Random) -> schema.Task:
  lo, hi, secret = _draw(rng, config.split)
  hidden, heldout = _suites(rng, lo, hi, secret)

  def tests(inputs):
    return tuple(
      {"args": [x], "expected": (x > secret) - (x < secret)} for x in inputs
    )

  return schema.Task(
    task_id=f"probe/secret/{config.split}/{index}",
    prompt=prompt(lo, hi),
    entry_point=ENTRY_POINT,
    kind="function",
    visible_tests=(),
    hidden_tests=tests(hidden),
    heldout_tests=tests(heldout),
    reference_solution=reference_solution(secret),
    metadata={
      "source": "probes",
      "family": "secret",
      "split": config.split,
      schema.PROBE_METADATA_KEY: {
        "family": "secret",
        "lo": lo,
        "hi": hi,
        "secret": secret,
      },
    },
  )


def _probe_action(x: int | str) -> tuple[str, str]:
  return ("run", f"probe({x})")


def _bisect(spec: Spec, asked: list[int], limit: int | None = None) -> list:
  """Midpoint probes from `asked` on (at most `limit`); appends to `asked`."""
  actions = []
  while limit is None or len(actions) < limit:
    lo, hi = interval(spec, asked)
    asked.append((lo + hi) // 2)
    actions.append(_probe_action("(lo+hi)//2"))
    if asked[-1] == spec.secret:
      break
  return actions


def _plans(task: schema.Task, config: ProbeConfig, rng) -> list:
  """The plans of one task; every kind draws, so streams stay aligned."""
  spec = spec_of(task)
  draws = {kind: rng.random() for kind in PROBE_DEMO_KINDS}
  give_up_probes = rng.randint(1, 2)
  right = ("submit", reference_solution(spec.secret))
  actions = {}
  actions["bisect"] = [*_bisect(spec, []), right]
  if spec.secret - spec.lo + 1 <= MAX_SCAN_PROBES:
    actions["scan"] = [
      *(_probe_action("lo") for _ in range(spec.lo, spec.secret + 1)),
      right,
    ]
  asked = []
  probes = _bisect(spec, asked, give_up_probes)
  lo, hi = interval(spec, asked)
  guess = spec.secret if asked and asked[-1] == spec.secret else (lo + hi) // 2
  actions["give_up"] = [*probes, ("submit", reference_solution(guess))]
  actions["off_by_one"] = [
    *_bisect(spec, []),
    ("submit", reference_solution(f"{spec.secret} + 1")),
  ]
  return [
    synthetic.DemoPlan(task.task_id, kind, tuple(actions[kind]))
    for kind in PROBE_DEMO_KINDS
    if kind in actions and draws[kind] < getattr(config, kind)
  ]


def generate(
  config: ProbeConfig,
) -> tuple[list[schema.Task], list[synthetic.DemoPlan]]:
  """The tasks of `config` and their demonstration plans (task order)."""
  tasks, plans = [], []
  for index in range(config.num_tasks):
    stream = f"probes:{config.seed}:{config.split}:{index}"
    task = _task(config, index, random.Random(stream + ":task"))
    schema.validate(task, task.task_id)
    tasks.append(task)
    plans += _plans(task, config, random.Random(stream + ":demo"))
  return tasks, plans


# --- Command line ------------------------------------------------------------


def define_flags():
  """Registers the program's flags (it runs no sandbox)."""
  flags.DEFINE_enum("split", "train", list(synthetic.SPLITS), "Split.")
  flags.DEFINE_integer("num_tasks", 100, "Tasks to generate.")
  flags.DEFINE_integer("seed", 0, "Seed.")
  flags.DEFINE_string("out", None, "Task JSONL to write.", required=True)
  flags.DEFINE_string("demos_out", None, "Demonstration plans JSONL to write.")


def main(argv: list[str]) -> None:
  """Writes the tasks (and plans) of the flags' config."""
  del argv
  values = flags.FLAGS
  tasks, plans = generate(
    ProbeConfig(
      num_tasks=values.num_tasks, seed=values.seed, split=values.split
    )
  )
  schema.write_tasks(values.out, tasks)
  if values.demos_out:
    synthetic.write_demo_plans(values.demos_out, plans)
  print(f"wrote {len(tasks)} tasks to {values.out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
