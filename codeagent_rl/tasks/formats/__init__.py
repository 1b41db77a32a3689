"""Public code-problem formats, one parser each: a record -> a `Draft`.

`PARSERS[format](record, index)` returns the record's `common.Draft` or
raises `common.RecordError` naming the field; `index` is the record's
0-based position in its file, the id of records that carry none
("record-<index>").
`codeagent_rl.tasks.convert` drives them.
"""

from codeagent_rl.tasks.formats import apps
from codeagent_rl.tasks.formats import codecontests
from codeagent_rl.tasks.formats import humaneval_problems
from codeagent_rl.tasks.formats import livecodebench
from codeagent_rl.tasks.formats import mbpp

PARSERS = {
  "apps": apps.parse,
  "codecontests": codecontests.parse,
  "livecodebench": livecodebench.parse,
  "mbpp": mbpp.parse,
  "humaneval": humaneval_problems.parse,
}
