"""The seccomp filter of job processes; standard library only.

The guest (`guest/`) loads this file by path (like `wire.py`) and calls
`install()` in every job process before the untrusted code runs. The
filter keeps a job from leaving kernel state behind for the next job of the
same sandbox, and from holding memory that its address-space limit does not
count. Denied calls fail with EPERM:

- System V IPC (shared memory, message queues, semaphores) and POSIX
  message queues: their objects belong to the sandbox's IPC namespace, not
  to a process, so they outlive the job that made them (measured: a later
  job of the same sandbox found them by key), and a shared-memory segment
  holds memory while no address space maps it;
- keyrings (`add_key`, `request_key`, `keyctl`): state the kernel keeps per
  user, beyond any process;
- `memfd_create` and `memfd_secret`: files in memory, up to RLIMIT_FSIZE
  each, that RLIMIT_AS does not count;
- raising a pipe's or a socket's buffer (`fcntl(F_SETPIPE_SZ)`,
  `setsockopt` of SO_SNDBUF / SO_RCVBUF and their FORCE forms): kernel
  memory outside RLIMIT_AS (measured under gVisor: 8 MiB per socket and
  1 MiB per pipe when raised, 208 KiB and 64 KiB by default).

A system call of another ABI (32-bit compatibility mode, or x86-64's x32)
kills the process: the tables below are the native ABI's only. `install`
sets PR_SET_NO_NEW_PRIVS first, which an unprivileged process needs to
install a filter (the gVisor sandbox sets it already). A filter cannot be
removed, and it is inherited by every child and thread of the job.
"""

import ctypes
import errno
import os
import struct

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
_NR = 0
_ARCH = 4
_ARG_LOW = (16, 24, 32, 40, 48, 56)  # low 32 bits (little-endian machines)
# BPF opcodes: ld word abs; jeq/jge immediate; ret immediate.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_X32_BIT = 0x40000000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_F_SETPIPE_SZ = 1031
_SOL_SOCKET = 1
# SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE (same on both ABIs).
_BUFFER_OPTIONS = (7, 8, 32, 33)

# Per machine: (AUDIT_ARCH_*, whether x32 numbers exist, {name: number}).
# The numbers are each ABI's own tables (x86-64: syscall_64.tbl; arm64:
# the generic unistd.h).
_DENIED = (
  "shmget",
  "shmat",
  "shmctl",
  "shmdt",
  "msgget",
  "msgsnd",
  "msgrcv",
  "msgctl",
  "semget",
  "semop",
  "semtimedop",
  "semctl",
  "mq_open",
  "mq_unlink",
  "mq_timedsend",
  "mq_timedreceive",
  "mq_notify",
  "mq_getsetattr",
  "add_key",
  "request_key",
  "keyctl",
  "memfd_create",
  "memfd_secret",
)
_TABLES = {
  "x86_64": (
    0xC000003E,
    True,
    {
      "setsockopt": 54,
      "fcntl": 72,
      "shmget": 29,
      "shmat": 30,
      "shmctl": 31,
      "semget": 64,
      "semop": 65,
      "semctl": 66,
      "shmdt": 67,
      "msgget": 68,
      "msgsnd": 69,
      "msgrcv": 70,
      "msgctl": 71,
      "semtimedop": 220,
      "mq_open": 240,
      "mq_unlink": 241,
      "mq_timedsend": 242,
      "mq_timedreceive": 243,
      "mq_notify": 244,
      "mq_getsetattr": 245,
      "add_key": 248,
      "request_key": 249,
      "keyctl": 250,
      "memfd_create": 319,
      "memfd_secret": 447,
    },
  ),
  "aarch64": (
    0xC00000B7,
    False,
    {
      "fcntl": 25,
      "mq_open": 180,
      "mq_unlink": 181,
      "mq_timedsend": 182,
      "mq_timedreceive": 183,
      "mq_notify": 184,
      "mq_getsetattr": 185,
      "msgget": 186,
      "msgctl": 187,
      "msgrcv": 188,
      "msgsnd": 189,
      "semget": 190,
      "semctl": 191,
      "semtimedop": 192,
      "semop": 193,
      "shmget": 194,
      "shmctl": 195,
      "shmat": 196,
      "shmdt": 197,
      "setsockopt": 208,
      "add_key": 217,
      "request_key": 218,
      "keyctl": 219,
      "memfd_create": 279,
      "memfd_secret": 447,
    },
  ),
}


class FilterError(OSError):
  """The filter cannot be installed here (machine, kernel or platform)."""


def syscall_numbers(machine: str | None = None) -> dict:
  """{name: number} of this machine's native ABI (FilterError if unknown)."""
  machine = machine or os.uname().machine
  if machine not in _TABLES:
    raise FilterError(
      errno.ENOSYS, f"no system call table for machine {machine!r}"
    )
  return dict(_TABLES[machine][2])


def program(machine: str | None = None) -> bytes:
  """The BPF program (packed `struct sock_filter`s) for `machine`."""
  machine = machine or os.uname().machine
  numbers = syscall_numbers(machine)
  arch, has_x32 = _TABLES[machine][:2]
  # (label, opcode, k, true target, false target); a target is None (the
  # next instruction) or the label of a later one: BPF jumps forward only.
  code = [
    ("", _LD_W_ABS, _ARCH, None, None),
    ("", _JEQ_K, arch, None, "kill"),
    ("", _LD_W_ABS, _NR, None, None),
  ]
  if has_x32:
    code.append(("", _JGE_K, _X32_BIT, "deny", None))
  for name in _DENIED:
    code.append(("", _JEQ_K, numbers[name], "deny", None))
  code += [
    ("", _JEQ_K, numbers["fcntl"], "fcntl", None),
    ("", _JEQ_K, numbers["setsockopt"], "sockopt", None),
    ("", _RET_K, _RET_ALLOW, None, None),
    ("fcntl", _LD_W_ABS, _ARG_LOW[1], None, None),
    ("", _JEQ_K, _F_SETPIPE_SZ, "deny", None),
    ("", _RET_K, _RET_ALLOW, None, None),
    ("sockopt", _LD_W_ABS, _ARG_LOW[1], None, None),
    ("", _JEQ_K, _SOL_SOCKET, None, "allow"),
    ("", _LD_W_ABS, _ARG_LOW[2], None, None),
  ]
  for option in _BUFFER_OPTIONS:
    code.append(("", _JEQ_K, option, "deny", None))
  code += [
    ("allow", _RET_K, _RET_ALLOW, None, None),
    ("deny", _RET_K, _RET_ERRNO | errno.EPERM, None, None),
    ("kill", _RET_K, _RET_KILL_PROCESS, None, None),
  ]
  where = {label: i for i, (label, *_) in enumerate(code) if label}
  packed = []
  for i, (_, op, k, true, false) in enumerate(code):
    jt = 0 if true is None else where[true] - i - 1
    jf = 0 if false is None else where[false] - i - 1
    if not (0 <= jt < 256 and 0 <= jf < 256):
      raise FilterError(errno.EINVAL, "a BPF jump is out of range")
    packed.append(struct.pack("=HBBI", op, jt, jf, k))
  return b"".join(packed)


class _SockFprog(ctypes.Structure):
  _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(machine: str | None = None) -> None:
  """Installs the filter on this process (and so on all it starts).

  Raises:
    FilterError: the machine has no table here, or the kernel refused.
  """
  code = program(machine)
  try:
    libc = ctypes.CDLL(None, use_errno=True)
  except OSError as e:
    raise FilterError(errno.ENOSYS, f"no C library: {e}") from None
  ulong = ctypes.c_ulong
  if libc.prctl(_PR_SET_NO_NEW_PRIVS, ulong(1), ulong(0), ulong(0), ulong(0)):
    err = ctypes.get_errno()
    raise FilterError(err, f"PR_SET_NO_NEW_PRIVS: {os.strerror(err)}")
  buffer = ctypes.create_string_buffer(code, len(code))
  fprog = _SockFprog(len(code) // 8, ctypes.addressof(buffer))
  if libc.prctl(
    _PR_SET_SECCOMP,
    ulong(_SECCOMP_MODE_FILTER),
    ctypes.byref(fprog),
    ulong(0),
    ulong(0),
  ):
    err = ctypes.get_errno()
    raise FilterError(err, f"PR_SET_SECCOMP: {os.strerror(err)}")
