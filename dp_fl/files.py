"""Atomic file writes: a reader never sees a partial file, a crash leaves the old one.

    files.atomic_write_text(path, text)
    with files.atomic_output(path) as f: ...   # any binary writer (PNG, gzip)
    files.atomic_write_json(path, value, indent=1)
    files.build_once(path, build)          # generated caches: built once, under a lock

The text goes to a temporary file in the same directory, then `os.replace` renames it into
place (atomic on POSIX); the temporary file is removed if anything fails. Used for every small
file dp_fl writes next to a run or a data set (configs, mechanisms, reports, summaries, data
metadata).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from typing import Any, BinaryIO, Callable, Iterator


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[BinaryIO]:
  """A binary file that becomes `path` atomically when the block ends without an error.

  It is a temporary file in the same directory, renamed into place (mode 0644); if the block
  raises, it is removed and `path` is untouched.
  """
  path = os.fspath(path)
  directory = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                             dir=directory)
  try:
    with os.fdopen(fd, "wb") as f:
      yield f
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise


def atomic_write_text(path: str, text: str) -> None:
  """Writes `text` to `path` as UTF-8, atomically (temp file in the same directory + rename)."""
  if not isinstance(text, str):
    raise TypeError(f"`text` must be a str; got {type(text).__name__}.")
  with atomic_output(path) as f:
    f.write(text.encode("utf-8"))


def atomic_write_json(path: str, value: Any, **dump_kwargs: Any) -> None:
  """`json.dumps(value, **dump_kwargs)` written with `atomic_write_text`."""
  atomic_write_text(path, json.dumps(value, **dump_kwargs))


def make_cache_dir(directory: str, what: str = "the cache directory",
                   fix: str = "choose a writable location") -> str:
  """Creates `directory` for a cache, or raises a ValueError naming `what` it is, where it
  is (with $HOME when it lies under it: an unusable HOME is the usual cause), and `fix`."""
  try:
    os.makedirs(directory, exist_ok=True)
    if not os.access(directory, os.W_OK | os.X_OK):
      raise PermissionError(13, "Permission denied", directory)
  except OSError as e:
    home = os.path.expanduser("~")
    under_home = (f" (under HOME={home})" if os.path.abspath(directory).startswith(
        os.path.abspath(home) + os.sep) else "")
    raise ValueError(f"{what} {directory!r}{under_home} cannot be created or written "
                     f"({e.strerror or e}): {fix}.") from e
  return directory


def build_once(path: str, build: Callable[[str], Any], what: str = "the cache directory",
               fix: str = "choose a writable location") -> str:
  """`path`, calling `build(path)` first if it does not exist yet; returns `path`.

  For generated caches (corpora, conversions): concurrent callers wait on an exclusive lock
  on `<dirname(path)>/.lock` instead of building twice; `build` must write `path`
  atomically (a killed build then leaves no partial file and the next call builds again).
  A directory that cannot be created is a ValueError naming `what` it is and `fix`
  (`make_cache_dir`).
  """
  path = os.fspath(path)
  if os.path.exists(path):
    return path
  directory = make_cache_dir(os.path.dirname(os.path.abspath(path)), what, fix)
  with open(os.path.join(directory, ".lock"), "w") as lock:
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
    if not os.path.exists(path):
      build(path)
  return path


def workspace_path(path: str) -> str:
  """`path` made absolute against the repository a binary was started for.

  `bazel run` starts binaries in their runfiles tree and names the user's checkout in
  BUILD_WORKSPACE_DIRECTORY; `python -m` runs from the checkout itself. Absolute paths are
  returned unchanged.
  """
  if os.path.isabs(path):
    return path
  return os.path.join(os.environ.get("BUILD_WORKSPACE_DIRECTORY", os.getcwd()), path)
