"""`jax.jit` of a function with bound arguments, one per process per binding.

jax keeps a jitted function's traces and compiled programs with the
function object. The learner, the sampler, SFT and the state initialiser
bind their settings (model, optimiser, config) with `functools.partial`:
a fresh partial per instance, so every new learner traced, lowered and
compiled (or loaded from the persistent cache) each of its programs again,
though an earlier one in the same process had the same settings. Equal
bindings here give back the same jitted object, so a later instance calls
programs that are already compiled: runs one after another in a process
(a notebook, a sweep, a test module) share them.

Bindings are compared by value: configs are frozen dataclasses, flax
modules are dataclasses of their config, shardings compare by mesh and
spec, pytrees of them by structure and leaves, and partials by function
and bindings. Optimisers are closures compared by identity; equal
settings give the same object because `state.make_optimizer` is cached
too. A binding that cannot be hashed is jitted afresh, as before.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
import functools
import threading
from typing import Any

import jax

# Jitted functions kept: a process rarely holds more than a few learners'
# worth (about twenty each); the least recently used go first.
MAX_ENTRIES = 256

_entries: collections.OrderedDict[Any, Callable] = collections.OrderedDict()
_lock = threading.Lock()


class _Unhashable(Exception):
  """A binding that cannot be a cache key."""


def _key(x: Any) -> Any:
  """A hashable value equal for equal bindings; raises `_Unhashable`."""
  if isinstance(x, (bool, int, float, complex)):
    # 1 == 1.0 == True, but a bound Python number's type reaches the trace.
    return ("number", type(x), x)
  if isinstance(x, functools.partial):
    return ("partial", x.func, _key(x.args), _key(x.keywords))
  if isinstance(x, dict):
    return ("dict", tuple(sorted((k, _key(v)) for k, v in x.items())))
  if type(x) in (list, tuple):  # not named tuples: those hash as they are
    return (type(x).__name__, tuple(_key(v) for v in x))
  try:
    hash(x)
    return x
  except TypeError:
    pass
  # A pytree of shardings (a `TrainState` of them, a dict of specs).
  leaves, treedef = jax.tree.flatten(x, is_leaf=lambda v: v is None)
  if len(leaves) == 1 and leaves[0] is x:
    raise _Unhashable(type(x).__name__)
  return ("tree", treedef, tuple(_key(v) for v in leaves))


def jit(
  fun: Callable, /, *args: Any, jit_kwargs=None, context=None, **bound: Any
):
  """`jax.jit(functools.partial(fun, *args, **bound), **jit_kwargs)`, shared.

  Args:
    fun: the function (a module-level one: its identity is part of the key).
    *args: leading positional arguments bound to it.
    jit_kwargs: `jax.jit`'s keyword arguments (shardings, donation).
    context: what the trace depends on besides the bindings, part of the key
      only: the logical-axis rules the program is traced under. Flax reads
      them while tracing `nn.with_logical_constraint`, and jax's caches do
      not key on them, so a program shared across rules would keep the
      first rules' activation shardings.
    **bound: keyword arguments bound to it.

  Returns:
    The jitted function made for equal arguments earlier in this process,
    or a new one.
  """
  jit_kwargs = jit_kwargs or {}

  def make():
    return jax.jit(functools.partial(fun, *args, **bound), **jit_kwargs)

  try:
    key = (fun, _key(args), _key(bound), _key(jit_kwargs), _key(context))
    hash(key)
  except (_Unhashable, TypeError):
    return make()
  with _lock:
    jitted = _entries.get(key)
    if jitted is not None:
      _entries.move_to_end(key)
      return jitted
    jitted = _entries[key] = make()
    if len(_entries) > MAX_ENTRIES:
      _entries.popitem(last=False)
    return jitted


def clear() -> None:
  """Forgets every shared jitted function (their programs go with them)."""
  with _lock:
    _entries.clear()
