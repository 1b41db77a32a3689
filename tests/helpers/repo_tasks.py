"""A small hand-written repository task that tests of repo tasks share.

An `inventory` package whose `restock` subtracts where it should add;
`report.summary` reaches it through a call, `cli.py` through the package,
and `test_stock.py` is the task's visible test (a test path).
"""

from codeagent_rl.tasks import schema

STOCK_BUGGY = '''def restock(levels, item, amount):
  """A copy of levels with amount added to item (new items start at 0)."""
  levels = dict(levels)
  levels[item] = levels.get(item, 0) - amount
  return levels


def total(levels):
  return sum(levels.values())
'''
STOCK_FIXED = STOCK_BUGGY.replace("0) - amount", "0) + amount")
REPORT = """from inventory import stock


def summary(levels, deliveries):
  for item, amount in deliveries:
    levels = stock.restock(levels, item, amount)
  return f"{len(levels)} items, {stock.total(levels)} units"
"""
CLI = """import sys

from inventory import report

deliveries = []
for line in sys.stdin:
  if line.strip():
    name, amount = line.split()
    deliveries.append((name, int(amount)))
print(report.summary({}, deliveries))
"""
VISIBLE_TEST = """from inventory import stock


def test_restock():
  assert stock.restock({"a": 1}, "a", 2) == {"a": 3}


if __name__ == "__main__":
  test_restock()
  print("1 passed")
"""
FILES = {
  "inventory/__init__.py": "",
  "inventory/stock.py": STOCK_BUGGY,
  "inventory/report.py": REPORT,
  "cli.py": CLI,
  "test_stock.py": VISIBLE_TEST,
}
HIDDEN = [
  {
    "call": "inventory.stock.restock",
    "args": [{"a": 1}, "a", 4],
    "expected": {"a": 5},
  },
  {
    "call": "inventory.stock.restock",
    "args": [{}, "b", 2],
    "expected": {"b": 2},
  },
  {"call": "inventory.stock.total", "args": [{"a": 1, "b": 2}], "expected": 3},
  {
    "call": "inventory.report.summary",
    "args": [{"a": 1}, [["a", 1], ["c", 5]]],
    "expected": "2 items, 7 units",
  },
  {"stdin": "a 2\nb 3\n", "expected_stdout": "2 items, 5 units\n"},
]
HELDOUT = [
  {
    "call": "inventory.stock.restock",
    "args": [{"x": 0}, "x", 9],
    "expected": {"x": 9},
  },
  {
    "call": "inventory.report.summary",
    "args": [{}, []],
    "checker": "def check(args, kwargs, output):\n"
    "  return output == '0 items, 0 units'\n",
  },
  {"stdin": "q 1\nq 1\n", "expected_stdout": "1 items, 2 units\n"},
]


def line(**overrides) -> dict:
  """The task's JSON line, with `overrides` applied."""
  obj = {
    "task_id": "inventory-restock",
    "prompt": "restock() lowers the stock instead of raising it.",
    "entry_point": "cli.py",
    "kind": "repo",
    "visible_tests": [],
    "hidden_tests": HIDDEN,
    "heldout_tests": HELDOUT,
    "reference_solution": "",
    "metadata": {},
    "workspace": {
      "files": dict(FILES),
      "test_paths": ["test_stock.py"],
      "reference": {"inventory/stock.py": STOCK_FIXED},
    },
  }
  obj.update(overrides)
  return obj


def task(**overrides) -> schema.Task:
  """The task, with `overrides` applied to its JSON line."""
  return schema.task_from_json(line(**overrides))
