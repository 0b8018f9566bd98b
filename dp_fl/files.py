"""Atomic file writes: a reader never sees a partial file, a crash leaves the old one.

    files.atomic_write_text(path, text)
    files.atomic_write_json(path, value, indent=1)

The text goes to a temporary file in the same directory, then `os.replace` renames it into
place (atomic on POSIX); the temporary file is removed if anything fails. Used for every small
file dp_fl writes next to a run or a data set (configs, mechanisms, reports, summaries, data
metadata).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any


def atomic_write_text(path: str, text: str) -> None:
  """Writes `text` to `path` as UTF-8, atomically (temp file in the same directory + rename)."""
  path = os.fspath(path)
  directory = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                             dir=directory)
  try:
    with os.fdopen(fd, "w", encoding="utf-8") as f:
      f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise


def atomic_write_json(path: str, value: Any, **dump_kwargs: Any) -> None:
  """`json.dumps(value, **dump_kwargs)` written with `atomic_write_text`."""
  atomic_write_text(path, json.dumps(value, **dump_kwargs))
