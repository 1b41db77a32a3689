"""The forkserver that runs untrusted jobs; standard library only.

It runs as the init process of a gVisor sandbox (or, for the `process`
backend, as a plain subprocess), from a directory that holds this package
(`guest/`) and `wire.py` and `seccomp.py` beside it: exactly the files of
`worker.GUEST_FILES`. Start it as

  python3 -I -S -B <dir>/guest/__main__.py '<config JSON>'

where the config is `{"scratch_root": path, "uid": int | null, "gid": int |
null, "kill_scope": "all" | "descendants", "proc": path}` ("proc" is where
the server finds procfs), plus `"parent_pid"` for the process backend (the
server then dies with that parent). It answers frames (see
`wire.py`) on its stdin/stdout: first a `{"event": "ready"}` frame (its
`"job_filter"` is "on" when a probe showed that job processes get the
seccomp filter, else "off: <why>"), then one reply per job, until end of
file.

A job is `{"id", "kind": "function" | "stdio", "code", "entry_point",
"tests", "timeout_s", "test_timeout_s", "address_space_mb", "max_output_bytes",
"max_processes", "max_file_mb", "max_open_files"}`. Function tests carry
tagged `args` / `kwargs`, stdio tests a `stdin` string: test *inputs* only.
A job may also carry `"files"` (`[path, text]` pairs: a repository's
workspace) and `"main_path"` (the file a program runs as): each job process
writes them into its own scratch directory before the code runs and puts
that directory (a program's: its own) first on `sys.path`.

Three kinds of process take part:

- the *server* (`server.ForkServer`, the sandbox's init) reads jobs,
  supervises job processes (`supervise.py`) and writes replies: every byte
  of every job and output passes through its memory;
- the *zygote* (`zygote.py`), forked from the server before the first job,
  never sees job data: on request it forks a *spare* child and hands the
  spare's pipes to the server (SCM_RIGHTS), so a job process inherits clean
  memory only, never the residue of earlier jobs or their outputs (a forked
  server would leak them); it also reports its children's exits;
- the *job process* (`child.py`): a spare receives its job on a pipe,
  starts a new session, keeps only its pipes, drops to the untrusted uid,
  sets rlimits (its address space is the job's memory divided by its
  process limit, so all its processes together fit the job's memory),
  installs the seccomp filter (`seccomp.py`: no IPC objects, keyrings or
  memory files that could outlive the job or escape its limits) and runs
  the code in a fresh module. A function job calls the entry point once per
  test under a SIGALRM timer and reports each output as tagged plain data
  on descriptor 3 (the code's top level is bounded by the job-level limit
  only). A stdio job runs one job process per test, each in a scratch
  directory of its own.

The job process is the untrusted code's: it can patch any module, builtin
or function of this package there, so nothing that decides what the host
sees is left to it. The server draws each job's test order
(`server.draw_order`): a function job's process gets its tests in that
order without their indices, and reports them by position; a stdio job's
runs start in that order, each seeing only its own stdin. The job process
decodes every test's inputs, and binds everything its test loop calls
(`wire.sealed` copies of the encoder and frame writer), before it imports
the code (`child._runner`). And the server takes nothing on trust on
descriptor 3: frames must come in protocol order (`frames.FunctionResults`:
an `order` frame is malformed), outputs must decode as tagged plain data,
statuses come from a fixed set, messages are cut and made valid UTF-8, and
a test's time is the server's own measurement. Anything else is a
malformed stream: the job is killed and reported as a crash. So whatever
the code does in its process changes at most its own outputs and statuses
(which it could return or cause anyway), or crashes its job. The server
enforces the per-test limit from outside as well, from its own copy of the
job (a child that ignores SIGALRM is killed; only the start frame or a
result frame starts the next test's clock), the job-level limit and the
output caps (returned data summed over tests).

A function job's reply goes out as soon as its last result is in (the job
process flushes its streams before it says "done"). As the reply goes out,
the server asks the zygote for the next job's spare (never while a job runs:
a fork beside a running job slowed it down), so a job that does not follow
another at once finds a forked, warmed-up process waiting. Then, before it
reads the next job, the server kills every remaining process of the job
(`processes.py`; in a sandbox: every process but itself, the zygote and the
spares, which are root and out of the job's reach), empties the scratch area
and makes the next job's directory (`scratch.py`); the next job starts once
the zygote has reaped the last one. If that clean-up fails, the next job is
refused (`"refused": true`, nothing of it ran) and the host replaces the
sandbox.

Nothing here decides whether an output is right: expected values never
reach this process.

Inside the sandbox `-I` keeps every directory off `sys.path`, so nothing
but the standard library is importable by name: `__main__.py` loads this
package by path, its modules import each other relatively, and `wire` and
`seccomp` below are loaded by path from the directory above the package
(here and on the host alike, where that directory is `codeagent_rl/sandbox`).
"""

import importlib.util
import os


def _load_sibling(name: str):
  """Loads `name`.py from the directory that holds this package."""
  here = os.path.dirname(os.path.abspath(__file__))
  path = os.path.join(os.path.dirname(here), name + ".py")
  spec = importlib.util.spec_from_file_location("_sandbox_" + name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


wire = _load_sibling("wire")
# Loaded (with ctypes) once here, so that job processes inherit it.
seccomp = _load_sibling("seccomp")
