"""The process that runs task checkers for the judge (`tasks/checkers.py`).

    python -m codeagent_rl.tasks.checker_child MEMORY_MB

Started by `checkers.CheckerRunner`, never by hand. It reads requests from
its standard input and answers on its standard output, one `wire` frame
each, in order; anything a checker prints goes to /dev/null, so it cannot
corrupt the frames. A request is `{"source", "args", "kwargs", "output"}`
(the values `wire`-encoded), or `{"source", "load_only": true}`, which
only runs the module and checks that it defines `check`; the answer is one
of

  {"verdict": true | false}        the checker returned exactly a bool
  {"returned": "<type name>"}      it returned something else
  {"raised": "<type>", "message": "<text>"}
                                   loading the source or the call raised
                                   (SystemExit and KeyboardInterrupt too)

A checker's module runs once per distinct source (cached by its text);
each call gets freshly decoded arguments, so a checker that mutates them
changes nothing for the next. The process limits its own address space to
MEMORY_MB, so a checker that allocates without bound raises MemoryError
here instead of taking memory from the trainer. Hangs and crashes are the
parent's business: it kills this process and starts another.

Standard library, `wire` and `plain_repr` only: it starts in ~50 ms.
"""

from __future__ import annotations

import os
import resource
import sys
from typing import Any

from codeagent_rl import plain_repr
from codeagent_rl.sandbox import wire

# Cap on an exception message sent back, in characters (the judge cuts
# reasons further).
MESSAGE_MAX_CHARS = 400


def _message(error: BaseException) -> str:
  """The exception's message, bounded (it may embed a huge output)."""
  if type(error).__str__ is BaseException.__str__:
    # What str() would give, without formatting a huge argument in full.
    args = error.args
    if len(args) == 1 and type(args[0]) is str:
      return args[0][:MESSAGE_MAX_CHARS]
    shown = args[0] if len(args) == 1 else args
    return plain_repr.plain_repr(shown, MESSAGE_MAX_CHARS) if args else ""
  try:
    return str(error)[:MESSAGE_MAX_CHARS]
  except Exception:  # noqa: BLE001 - e.g. an int past the digit limit
    return "<message not printable>"


def _load(source: str) -> Any:
  namespace: dict[str, Any] = {"__name__": "checker"}
  exec(compile(source, "<checker>", "exec"), namespace)  # trusted task code
  check = namespace.get("check")
  if not callable(check):
    raise NameError(
      "the checker defines no function check(args, kwargs, output)"
    )
  return check


def answer(cache: dict[str, Any], request: Any) -> dict:
  """The answer to one request (never raises)."""
  try:
    source = request["source"]
    if request.get("load_only"):
      cache[source] = _load(source)
      return {"verdict": True}
    args = wire.decode(request["args"])
    kwargs = wire.decode(request["kwargs"])
    output = wire.decode(request["output"])
    check = cache.get(source)
    if check is None:
      check = cache[source] = _load(source)
    verdict = check(args, kwargs, output)
  except BaseException as e:  # noqa: BLE001 - the checker's exit too
    return {"raised": type(e).__name__, "message": _message(e)}
  if type(verdict) is bool:
    return {"verdict": verdict}
  return {"returned": type(verdict).__name__}


def main(argv: list[str]) -> None:
  """Serves requests until its standard input closes."""
  memory = int(argv[1]) << 20
  if memory > 0:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
  requests, replies = os.dup(0), os.dup(1)
  null = os.open(os.devnull, os.O_RDWR)
  for fd in (0, 1):
    os.dup2(null, fd)
  cache: dict[str, Any] = {}
  while True:
    request = wire.read_frame(requests)
    if request is None:
      return
    wire.write_frame(replies, answer(cache, request))


if __name__ == "__main__":
  main(sys.argv)
