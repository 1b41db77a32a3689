"""The synthetic function-task families, one module per kind of function.

Each module registers its families with `base.family`; `FAMILIES` holds
them all by name, module by module: numbers (arithmetic, conditionals),
text, lists, algorithms (loops, accumulators). `codeagent_rl.tasks.synthetic`
draws its tasks from them.
"""

from codeagent_rl.tasks.families import algorithms
from codeagent_rl.tasks.families import base
from codeagent_rl.tasks.families import lists
from codeagent_rl.tasks.families import numbers
from codeagent_rl.tasks.families import text

FAMILIES: dict[str, base.Family] = base.registered(
  numbers, text, lists, algorithms
)
