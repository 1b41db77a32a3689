"""What single HumanEval problems need beyond "the output equals the reference".

`humaneval.py` converts every problem the same way; the exceptions live here,
as tables keyed by task id (`humaneval.py` re-exports them):

- `CHECKERS`: problems whose `check` asserts a property of the output (a
  tolerance, any zero of a polynomial); their suite-A tests are checkers.
- `CONTRACTS` (and `precondition`): input contracts from the prompts that
  suite B's generated and mutated inputs must keep.
- HumanEval/32 (`find_zero`): `real_zeros` decides by Sturm's theorem where
  the zero is unique (`PROPERTY_ONLY`), `ANSWER_CHECKS` shows the canonical
  zero is within tolerance, `EXTRA_INPUTS` draws polynomials with one zero.

Pure functions and data: no sandbox, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import fractions
import math
import random
import re
from typing import Any

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
