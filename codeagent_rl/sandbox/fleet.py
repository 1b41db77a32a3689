"""`RayFleet`: the sandbox pool's interface, served by Ray actors.

  config = SandboxConfig(backend="ray", ray_address="auto", ray_actors=16)
  with pools.open_pool(config) as pool:      # a RayFleet
    results = pool.map(job_list)

Each actor (`SandboxActor`) is a Ray worker process on a node that offers
the custom resource `config.ray_resource`; it owns a local `SandboxPool` of
`config.pool_size` warm sandboxes of `config.ray_backend`, so `runsc` stays
a child of the actor (and dies with it: PR_SET_PDEATHSIG). The actor
imports no JAX and never joins the learner's `jax.distributed` group.

The fleet is the caller's side: `submit(job) -> Future`, `run`, `map` and
`close` behave as `SandboxPool`'s.

- Back-pressure: at most `ray_in_flight` jobs are sent to one actor; a
  caller's `submit` blocks while every slot of the fleet is taken, so
  nothing queues without bound.
- Faults: Ray never retries a task or restarts an actor
  (`max_restarts=0`, `max_task_retries=0`): a program that kills its actor
  would kill every restart too. When an actor dies (its node gone, killed,
  or past its call deadline), the fleet replaces it and sends each of its
  jobs in flight once more, to another actor where there is one. A job
  whose actor dies twice is not retried again: its result has status
  `sandbox_error` and a reason. Each job's future is set exactly once.
- `close` finishes the jobs submitted, closes every actor's pool (no
  `runsc` is left), kills the actors and, if the fleet started the Ray
  cluster, shuts it down.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import itertools
import logging
import os
import re
import secrets
import sys
import threading
import time
from typing import Any

from codeagent_rl.sandbox import config as config_lib
from codeagent_rl.sandbox import gvisor
from codeagent_rl.sandbox import harness
from codeagent_rl.sandbox import jobs
from codeagent_rl.sandbox import worker

# The logger of Ray's token-authentication set-up.
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def _hide_auth_enabled(record: logging.LogRecord) -> bool:
  """False for Ray's notice that token authentication is on (see _connect)."""
  return not str(record.msg).startswith("Token authentication is enabled")


# Ray's namespace for the fleet's named actors.
NAMESPACE = "codeagent_rl_sandbox"
# Times a job is sent to an actor: once, and once more after its actor
# died; a job that took two actors down is given up on.
MAX_ATTEMPTS = 2
# Beyond a job's own deadline (which the actor's pool enforces), how long
# the fleet waits for its reply before it counts the actor as lost: the
# pool's reply margin, plus a sandbox start after a recycle.
CALL_MARGIN_S = worker.REPLY_MARGIN_S + 30.0
# Ray colours its messages for terminals.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The counters of an actor's `SandboxPool` that `RayFleet.stats` sums.
_POOL_COUNTERS = ("sandboxes_started", "sandbox_errors", "recycled")
# How often the dispatcher looks for finished calls while some are out.
_POLL_S = 0.05
# Actors that died before finishing any job, in a row, before the fleet
# stops replacing them (a node that cannot start sandboxes would otherwise
# be retried forever).
MAX_FAILED_STARTS = 3


class FleetError(gvisor.SetupError):
  """The fleet cannot serve jobs (no Ray, no sandbox node, actors fail)."""


def _import_ray():
  try:
    import ray  # noqa: PLC0415 (an extra: only backend "ray" needs it)
  except ImportError:
    raise FleetError(
      "--sandbox_backend=ray needs Ray: pip install -e '.[ray]'"
    ) from None
  return ray


class ActorStartError(RuntimeError):
  """A sandbox actor could not start its pool (no runsc on its node, ...)."""


class SandboxActor:
  """The body of one Ray sandbox actor: a local `SandboxPool`.

  Ray runs it in a worker process of a sandbox node; its methods are
  called with `.remote`. `ray_backend` of the fleet's config becomes the
  pool's backend. A pool that fails to start does not fail the actor's
  creation (Ray would report it without its message): `info` says why,
  and `run` raises `ActorStartError`, which the fleet counts as a lost
  actor.
  """

  def __init__(self, config: config_lib.SandboxConfig):
    local = dataclasses.replace(config, backend=config.ray_backend)
    self._pool = None
    self._error = ""
    try:
      self._pool = harness.SandboxPool(local)
    except Exception as e:  # noqa: BLE001 (reported by `info` and `run`)
      self._error = f"{type(e).__name__}: {e}"

  def info(self) -> dict[str, Any]:
    """Where the actor runs, and whether it loaded JAX (it must not)."""
    import ray  # noqa: PLC0415 (present: this runs inside a Ray worker)

    return {
      "pid": os.getpid(),
      "node_id": ray.get_runtime_context().get_node_id(),
      "jax_loaded": "jax" in sys.modules,
      "error": self._error,
      "stats": dict(self._pool.stats if self._pool else {}),
    }

  def run(self, job: jobs.Job) -> jobs.JobResult:
    """Runs one job on the actor's pool."""
    if self._pool is None:
      raise ActorStartError(self._error)
    return self._pool.run(job)

  def close(self) -> dict[str, int]:
    """Stops the actor's sandboxes; the pool's counters."""
    if self._pool is None:
      return {}
    self._pool.close()
    return dict(self._pool.stats)


@dataclasses.dataclass(eq=False)
class _Entry:
  """A submitted job and its future, across its attempts."""

  job: jobs.Job
  future: concurrent.futures.Future
  attempts: int = 0
  last_actor: int = -1
  why: str = ""


@dataclasses.dataclass(eq=False)
class _Slot:
  """One place in the fleet and the actor that fills it now."""

  index: int
  handle: Any = None
  name: str = ""
  serial: int = 0
  in_flight: int = 0
  finished: int = 0


@dataclasses.dataclass(eq=False)
class _Call:
  entry: _Entry
  slot: _Slot
  serial: int
  deadline: float


class RayFleet:
  """`config.ray_actors` Ray sandbox actors behind `submit -> Future`.

  Attributes:
    config: the `SandboxConfig` (backend "ray").
    pool_stats: the actors' pools' counters, summed at `close`.
  """

  def __init__(self, config: config_lib.SandboxConfig):
    """Connects to (or starts) Ray and starts every actor.

    Raises:
      FleetError: Ray is not installed, the cluster has no node offering
        `config.ray_resource`, or the actors did not start (the reason,
        e.g. no runsc on the node, is in the message).
    """
    if config.backend != "ray":
      raise ValueError(
        f"RayFleet serves backend 'ray', not {config.backend!r}: use"
        " pools.open_pool(config)."
      )
    self.config = config
    self._ray = _import_ray()
    self._counters = dict.fromkeys(
      ("jobs", "actors_started", "actors_lost", "retried", "gave_up"), 0
    )
    self._counters["max_in_flight"] = 0
    self.pool_stats: dict[str, int] = {}
    self._started_ray = False
    self._connect()
    self._check_resource()
    self._tag = f"{os.getpid()}-{secrets.token_hex(3)}"
    self._serials = itertools.count(1)
    self._lock = threading.Condition()
    self._pending: collections.deque[_Entry] = collections.deque()
    self._calls: dict[Any, _Call] = {}
    self._capacity = threading.BoundedSemaphore(
      config.ray_actors * config.ray_in_flight
    )
    self._closing = False
    self._broken = ""
    self._failed_starts = 0
    self._slots = [_Slot(i) for i in range(config.ray_actors)]
    try:
      for slot in self._slots:
        self._start_actor(slot)
      self._wait_ready()
    except BaseException:
      self._kill_actors()
      self._shutdown_ray()
      raise
    self._thread = threading.Thread(
      target=self._dispatch, name="sandbox-fleet", daemon=True
    )
    self._thread.start()

  # --- Set-up ---------------------------------------------------------------

  def _connect(self) -> None:
    ray = self._ray
    if ray.is_initialized():
      return  # a notebook's or a test session's cluster: used as it is
    kwargs = {"include_dashboard": False, "logging_level": logging.WARNING}
    address = self.config.ray_address
    if address == "local":
      resources = {}
      if self.config.ray_resource:
        resources[self.config.ray_resource] = self.config.ray_actors
      # Ray turns token authentication on for a cluster that ray.init
      # starts and logs a warning that it did (unless RAY_AUTH_MODE is
      # set, which must happen before `import ray`): news about Ray's
      # default, not a fault, so it stays off the console.
      auth_log = logging.getLogger(RAY_AUTH_LOGGER)
      auth_log.addFilter(_hide_auth_enabled)
      try:
        ray.init(address="local", resources=resources, **kwargs)
      finally:
        auth_log.removeFilter(_hide_auth_enabled)
    else:
      try:
        ray.init(address=address, **kwargs)
      except (ConnectionError, RuntimeError) as e:
        raise FleetError(
          f"--ray_address={address}: cannot join the Ray cluster ({e})."
          " Start one with `ray start --head --resources="
          f"'{{\"{self.config.ray_resource or 'sandbox'}\": 8}}'` on a"
          " sandbox node, or pass --ray_address=local to start one here."
        ) from None
    self._started_ray = True

  def _check_resource(self) -> None:
    name = self.config.ray_resource
    if not name:
      return
    offered = self._ray.cluster_resources().get(name, 0)
    if offered < self.config.ray_actors:
      self._shutdown_ray()
      raise FleetError(
        f"--sandbox_ray_actors={self.config.ray_actors} needs"
        f" {self.config.ray_actors} units of the Ray resource {name!r}"
        f" (--sandbox_ray_resource), the cluster offers {offered:g}. Start"
        f" sandbox nodes with `ray start --resources='{{\"{name}\": N}}'`,"
        " or ask for fewer actors."
      )

  def _start_actor(self, slot: _Slot) -> None:
    """Fills `slot` with a new actor (Ray starts it in the background)."""
    options = {
      # The actor's sandboxes are accounted by the custom resource, so a
      # sandbox node's CPUs stay free for the sandboxes themselves.
      "num_cpus": 0,
      "max_restarts": 0,
      "max_task_retries": 0,
      # `info` and `close` may come while every job slot is busy.
      "max_concurrency": self.config.ray_in_flight + 2,
      "name": f"sandbox-{self._tag}-{slot.index}-{next(self._serials)}",
      "namespace": NAMESPACE,
    }
    if self.config.ray_resource:
      options["resources"] = {self.config.ray_resource: 1}
    remote = self._ray.remote(SandboxActor).options(**options)
    slot.handle = remote.remote(self.config)
    slot.name = options["name"]
    slot.serial += 1
    slot.in_flight = 0
    slot.finished = 0
    self._counters["actors_started"] += 1

  def _wait_ready(self) -> None:
    """Waits for every actor's first reply; FleetError with the reason."""
    ray = self._ray
    refs = {slot.handle.info.remote(): slot for slot in self._slots}
    timeout = self.config.startup_timeout_s + 60.0
    ready, not_ready = ray.wait(
      list(refs), num_returns=len(refs), timeout=timeout
    )
    if not_ready:
      raise FleetError(
        f"{len(not_ready)} of {len(refs)} Ray sandbox actors did not start"
        f" within {timeout:g} s: is a node with the resource"
        f" {self.config.ray_resource!r} up and able to start workers?"
      )
    for ref in ready:
      try:
        info = ray.get(ref)
      except ray.exceptions.RayError as e:
        raise FleetError(
          f"a Ray sandbox actor failed to start: {_reason(e)}"
        ) from None
      if info["error"]:
        raise FleetError(
          f"a Ray sandbox actor could not start its sandboxes: {info['error']}"
        )
      if info["jax_loaded"]:  # the actor must stay out of the learner
        raise FleetError("a Ray sandbox actor imported JAX; it must not.")

  # --- The caller's side ---------------------------------------------------

  def submit(self, job: jobs.Job) -> concurrent.futures.Future:
    """Sends a job to an actor; blocks while every actor's slots are full.

    Returns:
      A future of the job's `JobResult`; inputs that cannot be encoded set
      its exception, as `SandboxPool` does.
    """
    if self._closing:
      raise RuntimeError("RayFleet is closed.")
    if self._broken:
      raise FleetError(self._broken)
    future: concurrent.futures.Future = concurrent.futures.Future()
    try:
      job.to_frame(0, self.config)  # what the actor's pool would refuse
    except Exception as e:  # noqa: BLE001 (delivered as SandboxPool does)
      future.set_exception(e)
      return future
    self._capacity.acquire()
    with self._lock:
      self._pending.append(_Entry(job, future))
      self._lock.notify_all()
    return future

  def run(self, job: jobs.Job) -> jobs.JobResult:
    """Runs one job and waits for it."""
    return self.submit(job).result()

  def map(self, job_list) -> list[jobs.JobResult]:
    """Runs jobs in parallel; results in input order."""
    futures = [self.submit(job) for job in job_list]
    return [f.result() for f in futures]

  @property
  def stats(self) -> dict[str, int]:
    """The fleet's counters and its live actors' sandbox counters.

    "jobs" (results delivered), "actors_started", "actors_lost" (died or
    past a deadline), "retried" (jobs sent again after their actor was
    lost), "gave_up" (jobs whose actor was lost twice), "max_in_flight"
    (the most calls out at once); summed over the actors that serve now
    (asked of them): "sandboxes_started", "sandbox_errors", "recycled".
    """
    merged = dict(self._counters)
    for key in _POOL_COUNTERS:
      merged[key] = sum(info["stats"].get(key, 0) for info in self.actor_info())
    return merged

  def actor_info(self) -> list[dict[str, Any]]:
    """`SandboxActor.info` of every actor that answers now.

    An actor that does not answer (lost) is left out.
    """
    ray = self._ray
    with self._lock:
      handles = [s.handle for s in self._slots if s.handle is not None]
    infos = []
    for ref in [h.info.remote() for h in handles]:
      try:
        infos.append(ray.get(ref, timeout=60.0))
      except ray.exceptions.RayError:
        pass  # lost: the dispatcher replaces it
    return infos

  @property
  def parallelism(self) -> int:
    """Jobs that run at once, all actors together."""
    per_actor = min(self.config.pool_size, self.config.ray_in_flight)
    return self.config.ray_actors * per_actor

  def actor_names(self) -> list[str]:
    """The Ray names of the actors that serve now (tests kill them)."""
    with self._lock:
      return [slot.name for slot in self._slots]

  def in_flight(self) -> int:
    """Calls out to actors now."""
    with self._lock:
      return len(self._calls)

  # --- The dispatcher ------------------------------------------------------

  def _send(self, done: list) -> None:
    """Sends pending jobs to actors with a free slot (lock held)."""
    while self._pending:
      if self._broken:
        self._give_up(self._pending.popleft(), self._broken, done)
        continue
      free = [s for s in self._slots if s.in_flight < self.config.ray_in_flight]
      if not free:
        return
      entry = self._pending.popleft()
      if (
        entry.attempts == 0 and not entry.future.set_running_or_notify_cancel()
      ):
        self._capacity.release()  # cancelled before it was sent
        continue
      # A retry goes elsewhere when it can; otherwise the least busy.
      others = [s for s in free if s.index != entry.last_actor] or free
      slot = min(others, key=lambda s: s.in_flight)
      entry.attempts += 1
      entry.last_actor = slot.index
      deadline = time.monotonic() + _deadline_s(entry.job, self.config)
      ref = slot.handle.run.remote(entry.job)
      self._calls[ref] = _Call(entry, slot, slot.serial, deadline)
      slot.in_flight += 1
      self._counters["max_in_flight"] = max(
        self._counters["max_in_flight"], len(self._calls)
      )

  def _lose(self, slot: _Slot, serial: int, why: str) -> None:
    """Replaces the actor of `slot` as of `serial` (lock held).

    Its calls in flight are not touched here: each fails on its own (Ray
    reports the actor's death to every one) and is retried then.
    """
    if slot.serial != serial:
      return  # replaced already
    self._counters["actors_lost"] += 1
    logging.warning("sandbox actor %s lost: %s", slot.name, why)
    self._failed_starts = self._failed_starts + 1 if slot.finished == 0 else 0
    try:
      self._ray.kill(slot.handle, no_restart=True)
    except Exception:  # noqa: BLE001 (its node may be gone with it)
      pass
    if self._failed_starts >= MAX_FAILED_STARTS:
      self._broken = (
        f"{MAX_FAILED_STARTS} Ray sandbox actors in a row died before"
        f" finishing a job (the last: {why}); the fleet stopped replacing"
        " them."
      )
      logging.error("%s", self._broken)
      slot.serial += 1  # its calls still out count as lost
      slot.in_flight = self.config.ray_in_flight  # nothing more goes there
      return
    self._start_actor(slot)

  def _give_up(self, entry: _Entry, why: str, done: list) -> None:
    result = jobs.sandbox_error_result(entry.job, why, 0.0, "")
    self._counters["gave_up"] += 1
    done.append((entry, result, None))

  def _retry(self, entry: _Entry, why: str, done: list) -> None:
    """Sends a job of a lost actor once more, or gives up (lock held)."""
    if entry.attempts >= MAX_ATTEMPTS:
      self._give_up(
        entry,
        f"the Ray sandbox actor running this job was lost {entry.attempts}"
        f" times (first: {entry.why}; last: {why}); not retried again",
        done,
      )
      return
    entry.why = entry.why or why
    self._counters["retried"] += 1
    self._pending.appendleft(entry)

  def _finish(self, ref, outcome: str, value, done: list) -> None:
    """Handles one finished call (lock held)."""
    call = self._calls.pop(ref)
    slot = call.slot
    current = call.serial == slot.serial
    if current:
      slot.in_flight -= 1
    if outcome == "lost":
      self._lose(slot, call.serial, value)
      self._retry(call.entry, value, done)
      return
    if current:
      slot.finished += 1
      self._failed_starts = 0
    if outcome == "ok":
      done.append((call.entry, value, None))
    else:
      done.append((call.entry, None, value))

  def _outcome(self, ref) -> tuple[str, Any]:
    ray = self._ray
    try:
      return "ok", ray.get(ref)
    except ray.exceptions.RayTaskError as e:  # the actor's method raised
      cause = e.cause if isinstance(e.cause, BaseException) else e
      if isinstance(cause, ActorStartError):
        return "lost", f"its sandboxes did not start: {cause}"
      return "error", cause
    except ray.exceptions.RayError as e:  # the actor or its node is gone
      return "lost", _reason(e)

  def _overdue(self, done: list) -> None:
    """Counts actors past a call's deadline as lost (lock held)."""
    now = time.monotonic()
    for ref, call in list(self._calls.items()):
      if now <= call.deadline:
        continue
      why = f"no reply within {_deadline_s(call.entry.job, self.config):g} s"
      if call.serial == call.slot.serial:
        self._lose(call.slot, call.serial, why)
      elif now > call.deadline + CALL_MARGIN_S:
        # Killed, yet Ray never failed the call (its node is unreachable).
        self._finish(ref, "lost", why, done)

  def _dispatch(self) -> None:
    ray = self._ray
    while True:
      done: list = []
      with self._lock:
        self._send(done)
        self._overdue(done)
        refs = list(self._calls)
        if not refs and not done:
          if self._closing and not self._pending:
            self._lock.notify_all()
            return
          self._lock.wait(_POLL_S)
          continue
      if refs:
        ready, _ = ray.wait(refs, num_returns=1, timeout=_POLL_S)
        if ready:
          ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        outcomes = [(ref, *self._outcome(ref)) for ref in ready]
        with self._lock:
          for ref, outcome, value in outcomes:
            self._finish(ref, outcome, value, done)
      # Outside the lock: a future's callbacks may submit again.
      for entry, result, error in done:
        if error is not None:
          entry.future.set_exception(error)
        else:
          self._counters["jobs"] += 1
          entry.future.set_result(result)
        self._capacity.release()

  # --- Shutdown -------------------------------------------------------------

  def _kill_actors(self) -> dict[str, int]:
    """Closes every actor's pool, then kills the actors; pools' counters."""
    ray = self._ray
    handles = [s.handle for s in self._slots if s.handle is not None]
    totals: dict[str, int] = collections.Counter()
    refs = [h.close.remote() for h in handles]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=60.0)
    for ref in ready:
      try:
        totals.update(ray.get(ref))
      except ray.exceptions.RayError:
        pass  # a dead actor took its sandboxes down with it
    for handle in handles:
      try:
        ray.kill(handle, no_restart=True)
      except Exception:  # noqa: BLE001 (gone already)
        pass
    for slot in self._slots:
      slot.handle = None
    return dict(totals)

  def _shutdown_ray(self) -> None:
    if self._started_ray:
      self._started_ray = False
      self._ray.shutdown()

  def close(self) -> None:
    """Finishes the jobs submitted, stops every actor and its sandboxes."""
    with self._lock:
      if self._closing:
        return
      self._closing = True
      self._lock.notify_all()
    self._thread.join()
    try:
      self.pool_stats = self._kill_actors()
    finally:
      self._shutdown_ray()

  def __enter__(self) -> RayFleet:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def _deadline_s(job: jobs.Job, config: config_lib.SandboxConfig) -> float:
  """How long a call may take before its actor counts as lost.

  An actor runs `pool_size` jobs at once and queues the rest of its
  `ray_in_flight`, so a call may wait for that many jobs ahead of it.
  """
  timeout_s = job.timeout_s or config.timeout_s
  rounds = -(-config.ray_in_flight // config.pool_size)
  return timeout_s * rounds + CALL_MARGIN_S


def _reason(error: BaseException) -> str:
  """A short, one-line reason from a Ray error."""
  text = " ".join(_ANSI.sub("", str(error)).split())
  return f"{type(error).__name__}: {text[:300]}"
