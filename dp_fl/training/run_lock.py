"""An exclusive lock on a run directory: one training process per `--root_dir` at a time.

Two processes training in one run directory would interleave their metrics rows, duplicate
evaluations and race on checkpoints. `RunDirectoryLock` takes `fcntl.flock` on
`<root_dir>/.lock` for the whole call of `program.run`; the file records the holder's pid,
host and start time, which the refusal names. The kernel releases the lock when the holder
exits however it exits (SIGKILL included), so a lock is never stale; the file itself stays.
(flock is per host: on a network file system shared by several hosts, run one job per
directory yourself.)
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from typing import Optional

from dp_fl import exits

LOCK_FILE = ".lock"


class RunDirectoryLock:
  """`with RunDirectoryLock(root_dir):` holds the run directory or raises `exits.BusyError`."""

  def __init__(self, root_dir: str):
    self.path = os.path.join(root_dir, LOCK_FILE)
    self._fd: Optional[int] = None

  def acquire(self) -> None:
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = _read(fd)
      os.close(fd)
      raise exits.BusyError(
          f"--root_dir {os.path.dirname(self.path)!r} is in use by another training process "
          f"({holder or 'holder unknown'}; lock file {self.path}). Wait for it to finish or "
          "stop it, or train in another --root_dir.") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                 f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode("utf-8"))
    self._fd = fd

  def release(self) -> None:
    if self._fd is not None:
      fcntl.flock(self._fd, fcntl.LOCK_UN)
      os.close(self._fd)
      self._fd = None

  def __enter__(self) -> "RunDirectoryLock":
    self.acquire()
    return self

  def __exit__(self, *exc) -> None:
    self.release()


def _read(fd: int) -> str:
  try:
    return os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
  except OSError:
    return ""
