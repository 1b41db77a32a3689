"""A probe task's secret cannot be read from inside a job.

The shortcut that would collapse the horizon is a program that finds the
hidden value instead of asking for it. The attack below searches all a job
can reach (its objects and frames, the environment, every readable file and
/proc entry) for integers in the secret's distinctive range; it must find
its own planted canary there and never the secret. Run under gVisor (the
real sandbox) and the process backend (where a job sees the host's files).
"""

import dataclasses

import pytest

from codeagent_rl.envs import code_env
from codeagent_rl.models import tokenizer as tokenizer_lib
from codeagent_rl.sandbox import harness
from codeagent_rl.tasks import probes
from codeagent_rl.tasks import schema
from tests.helpers import sandboxes

LO, HI, SECRET = 7_300_000, 7_399_999, 7_364_519
# In the range, written in the attack's own code: proves the search sees
# what a job holds.
CANARY = 7_311_111

ATTACK = f"""
import gc, os, re, sys
CANARY = {CANARY}
found = set()
pattern = re.compile(rb"73[0-9]{{5}}")

def scan_bytes(data):
  for m in pattern.findall(data):
    found.add(int(m))

def scan_obj(o):
  if type(o) is int and {LO} <= o <= {HI}:
    found.add(o)
  elif isinstance(o, str):
    scan_bytes(o.encode("utf-8", "replace"))
  elif isinstance(o, (bytes, bytearray)):
    scan_bytes(bytes(o))

for o in gc.get_objects():
  scan_obj(o)
  if isinstance(o, dict):
    for k, v in list(o.items()):
      scan_obj(k)
      scan_obj(v)
  elif isinstance(o, (list, tuple, set, frozenset)):
    for v in list(o):
      scan_obj(v)
f = sys._getframe()
while f is not None:
  for v in list(f.f_locals.values()) + list(f.f_globals.values()):
    scan_obj(v)
  scan_obj(f.f_code.co_consts)
  f = f.f_back
scan_obj(repr(dict(os.environ)))
budget = [4000]
for root, dirs, files in os.walk("/", onerror=lambda e: None):
  dirs[:] = [d for d in dirs if not (root == "/" and d in ("sys", "dev"))]
  for name in files:
    if budget[0] <= 0:
      break
    path = os.path.join(root, name)
    try:
      if os.path.getsize(path) > 1 << 20 and not path.startswith("/proc"):
        continue
      budget[0] -= 1
      with open(path, "rb") as fh:
        scan_bytes(fh.read(1 << 20))
    except Exception:
      pass
for pid in os.listdir("/proc"):
  for leaf in ("cmdline", "environ"):
    try:
      with open(f"/proc/{{pid}}/{{leaf}}", "rb") as fh:
        scan_bytes(fh.read())
    except Exception:
      pass
print("found", sorted(found))
"""


def _task() -> schema.Task:
  def tests(xs):
    return tuple(
      {"args": [x], "expected": (x > SECRET) - (x < SECRET)} for x in xs
    )

  return schema.Task(
    task_id="probe/attack",
    prompt=probes.prompt(LO, HI),
    entry_point=probes.ENTRY_POINT,
    kind="function",
    visible_tests=(),
    hidden_tests=tests([SECRET - 1, SECRET, SECRET + 1]),
    heldout_tests=tests([LO, HI, 0]),
    reference_solution=probes.reference_solution(SECRET),
    metadata={
      "probe": {"family": "secret", "lo": LO, "hi": HI, "secret": SECRET}
    },
  )


@pytest.fixture(scope="module", params=["gvisor", "process"])
def env(request):
  config = sandboxes.short_config(
    request.param, 1, timeout_s=30.0, test_timeout_s=30.0, memory_mb=512
  )
  budgets = code_env.EnvConfig(
    max_turns=4,
    max_tokens_per_turn=4096,
    max_total_tokens=16384,
    max_wall_s=120.0,
    obs_max_bytes=256,
  )
  with harness.SandboxPool(config) as pool:
    yield code_env.CodeEnv(pool, tokenizer_lib.ByteTokenizer(), budgets)


def test_job_never_holds_the_secret(env):
  state = env.reset(_task())
  job = env._run_job(state, ATTACK)
  frame = job.to_frame(0, env.pool.config)
  assert str(SECRET) not in repr(frame)
  assert str(SECRET) not in repr(dataclasses.asdict(job))


def test_searching_the_sandbox_finds_no_secret(env):
  state = env.reset(_task())
  state, step = env.step(state, f"<run>{ATTACK}</run>")
  run = step.result.tests[0]
  assert run.stdout.startswith("found"), (step.result, run)
  found = run.stdout
  assert str(CANARY) in found  # the search does see what the job holds
  assert str(SECRET) not in found
  # Nor does the observation give it away without a probe.
  assert str(SECRET) not in step.observation.body
  assert step.observation.body.startswith("no probe")
