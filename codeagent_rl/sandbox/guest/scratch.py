"""The scratch area: one fresh directory per job process, emptied after it.

Standard library only (see the package docstring).
"""

import os
import shutil


class _EffectiveIds:
  """Temporarily sets the effective uid/gid (no-op when `uid` is None)."""

  def __init__(self, uid, gid):
    self.uid, self.gid = uid, gid

  def __enter__(self):
    if self.uid is not None:
      os.setegid(self.gid)
      os.seteuid(self.uid)

  def __exit__(self, *exc):
    if self.uid is not None:
      os.seteuid(0)
      os.setegid(0)


def _make_writable_and_retry(func, path, exc_info):
  """Error hook of rmtree: a job may have made its directories unwritable."""
  del exc_info
  parent = os.path.dirname(path)
  try:
    os.chmod(parent, 0o700)
    if os.path.isdir(path) and not os.path.islink(path):
      os.chmod(path, 0o700)
  except OSError:
    return
  try:
    if func is os.rmdir or func is os.unlink:
      func(path)
    elif os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, onerror=_ignore)
  except OSError:
    pass


def _empty_directory(root: str) -> bool:
  """Deletes what `root` holds (links are not followed); True if empty."""
  for name in os.listdir(root):
    path = os.path.join(root, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, onerror=_make_writable_and_retry)
    else:
      try:
        os.unlink(path)
      except FileNotFoundError:
        pass
  return not os.listdir(root)


def _ignore(func, path, exc_info):
  del func, path, exc_info


class ScratchArea:
  """The directories of `config["scratch_root"]`, one per job process.

  Attributes:
    next_path: made after a job, for the next one (None when not made).
    used: the scratch directory of the last job process.
  """

  def __init__(self, config: dict):
    self.config = config
    self.next_path = None
    self.used = None

  def _as_job_user(self):
    """Context in which files are made and removed as the untrusted uid.

    The scratch root belongs to that uid, and the forkserver has no
    CAP_CHOWN or CAP_DAC_OVERRIDE: it switches its effective ids instead
    (CAP_SETUID/CAP_SETGID), so a job can neither see nor keep files that
    the next job's scratch directory could meet.
    """
    return _EffectiveIds(self.config["uid"], self.config["gid"])

  def take(self) -> str:
    """The next scratch directory (made by `renew`, or now), as `used`."""
    path, self.next_path = self.next_path, None
    if path is None:
      root = self.config["scratch_root"]
      path = os.path.join(root, os.urandom(8).hex())
      with self._as_job_user():
        os.chmod(root, 0o700)  # a job owns the root and may have changed it
        os.mkdir(path, 0o700)
    self.used = path
    return path

  def renew(self, used: str | None) -> bool:
    """Empties the scratch root and makes the next job's directory in it.

    Runs when no job process is left. The directory `used` (the last job's)
    usually is empty: removing it and finding the root empty is the fast
    path. Returns False (and makes nothing) if the root cannot be emptied.
    """
    root = self.config["scratch_root"]
    with self._as_job_user():
      os.chmod(root, 0o700)  # a job owns the root and may have changed it
      if used is not None:
        try:
          os.rmdir(used)
        except OSError:
          pass
      if os.listdir(root) and not _empty_directory(root):
        return False
      path = os.path.join(root, os.urandom(8).hex())
      os.mkdir(path, 0o700)
      self.next_path = path
    return True
