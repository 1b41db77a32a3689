"""Descriptor numbers, text cutting and prctl, shared by the guest's processes.

Standard library only (see the package docstring).
"""

_TRUNCATED = "\n[... truncated]"
# Where a job process writes its result frames (the server reads them).
RESULT_FD = 3
# A spare's job pipe, until the job is read.
JOB_FD = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1


def text(data: bytes, limit: int) -> str:
  """Decodes captured bytes, marking a cut at `limit`."""
  decoded = bytes(data[:limit]).decode("utf-8", "replace")
  return decoded + _TRUNCATED if len(data) > limit else decoded


def short(message: str, limit: int = 2000) -> str:
  """`message`, cut to `limit` characters with a mark where it was cut."""
  if len(message) <= limit:
    return message
  return message[:limit] + _TRUNCATED


def prctl(option: int, value: int) -> bool:
  """Calls the prctl system call through ctypes; False where unavailable."""
  try:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, value, 0, 0, 0) == 0
  except (OSError, AttributeError):
    return False
