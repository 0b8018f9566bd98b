"""Adds the per-client index to a StackOverflow database (TFF's download has none).

  .venv/bin/python -m scripts.index_database --data_dir ~/data/stackoverflow
  .venv/bin/python -m scripts.index_database --data_dir /readonly/so --out_dir ~/so_indexed

TFF's `SqlClientData` reads a client with `SELECT ... FROM examples WHERE client_id = ...`;
without an index on `examples(client_id, ...)` each read scans the whole table, and the
StackOverflow binary refuses such a file at start (`tasks/sql_client_data.py`). This adds
the index `examples_client_split` on (client_id, split_name), in place (the file grows by
about 8 %), or into a copy of the directory's files with `--out_dir` when the original is
read-only. A file that already has a client index is left as it is. Prints progress with an
ETA while it works, and what it did (a table, or JSON with `--format json`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import time
import urllib.parse
from typing import Any, Optional, Sequence

from dp_fl import exits
from dp_fl import resources
from tasks import sql_client_data
from tasks.stackoverflow import database

# Indexing speed on the 2-core development machine (docs/BENCHMARKS.md, "Paper scale"):
# records per second with the file in the page cache, and the file read rate otherwise.
RECORDS_PER_SECOND = 400_000
READ_BYTES_PER_SECOND = 150e6
INDEX_FRACTION = 0.08  # The index's size as a fraction of the file's.
_COPY_CHUNK = 64 << 20


def _copy_with_progress(source: str, target: str, progress: resources.Progress) -> None:
  with open(source, "rb") as src, open(target + ".tmp", "wb") as dst:
    while True:
      chunk = src.read(_COPY_CHUNK)
      if not chunk:
        break
      dst.write(chunk)
      progress.advance(len(chunk))
    dst.flush()
    os.fsync(dst.fileno())
  os.replace(target + ".tmp", target)


def _free_bytes(directory: str) -> int:
  probe = directory
  while not os.path.exists(probe):
    probe = os.path.dirname(probe) or "."
  return shutil.disk_usage(probe).free


def index(data_dir: str, out_dir: Optional[str], stream: Any = None) -> dict[str, Any]:
  """Indexes `<data_dir>/stackoverflow.sqlite` (or a copy in `out_dir`)."""
  source = database.database_path(data_dir)
  size = os.path.getsize(source)
  with sqlite3.connect(f"file:{urllib.parse.quote(source)}?mode=ro", uri=True) as connection:
    existing = sql_client_data.client_index(connection)
    records = connection.execute(
        "SELECT COALESCE(SUM(num_examples), 0) FROM client_metadata;").fetchone()[0]
  connection.close()
  target_dir = os.path.dirname(source)
  copied = []
  start = time.monotonic()
  if out_dir is not None:
    out_dir = os.path.abspath(os.path.expanduser(out_dir))
    if os.path.realpath(out_dir) == os.path.realpath(target_dir):
      raise ValueError(f"--out_dir={out_dir!r} is --data_dir itself; leave --out_dir out to "
                       "index in place, or name another directory.")
    names = [n for n in sorted(os.listdir(target_dir))
             if os.path.isfile(os.path.join(target_dir, n)) and not n.startswith(".")]
    total = sum(os.path.getsize(os.path.join(target_dir, n)) for n in names)
    needed = total + (0 if existing else int(size * INDEX_FRACTION))
    if needed > _free_bytes(out_dir):
      raise ValueError(f"--out_dir={out_dir!r}: the indexed copy needs about "
                       f"{resources.format_bytes(needed)}, more than the "
                       f"{resources.format_bytes(_free_bytes(out_dir))} free there; "
                       "choose a directory on a larger disk.")
    resources.ensure_writable_dir("--out_dir", out_dir)
    progress = resources.Progress(f"copying {target_dir} to {out_dir}", total, stream=stream)
    for name in names:
      _copy_with_progress(os.path.join(target_dir, name), os.path.join(out_dir, name),
                          progress)
      copied.append(name)
    progress.finish()
    target_dir = out_dir
  elif existing is None and not os.access(source, os.W_OK):
    raise ValueError(f"--data_dir={data_dir!r}: {source} is read-only; pass --out_dir=DIR to "
                     "index a copy.")
  target = os.path.join(target_dir, database.DATABASE_FILENAME)
  added = False
  if existing is None:
    expected = max(records / RECORDS_PER_SECOND, size / READ_BYTES_PER_SECOND)
    progress = resources.Progress(f"indexing {records:,} records of {target}", expected,
                                  stream=stream)
    index_start = time.monotonic()
    connection = sqlite3.connect(target)
    try:

      def report_elapsed() -> int:  # Every 10^6 SQLite instructions; 0: go on.
        progress.update(time.monotonic() - index_start)
        return 0

      connection.set_progress_handler(report_elapsed, 1_000_000)
      connection.execute(sql_client_data.CREATE_INDEX)
      connection.commit()
    finally:
      connection.close()
    progress.finish()
    added = True
  return {"database": target, "copied": copied, "index_added": added,
          "existing_index": existing, "records": records,
          "bytes_before": size, "bytes_after": os.path.getsize(target),
          "seconds": round(time.monotonic() - start, 1)}


def format_table(report: dict[str, Any]) -> str:
  what = ("index added" if report["index_added"] else
          f"already indexed ({report['existing_index']}); nothing to do")
  rows = [("database", report["database"]),
          ("copied", ", ".join(report["copied"]) or "—"),
          ("index", what),
          ("records", f"{report['records']:,}"),
          ("size", f"{resources.format_bytes(report['bytes_before'])} → "
                   f"{resources.format_bytes(report['bytes_after'])}"),
          ("time", resources.format_seconds(report["seconds"]))]
  width = max(len(k) for k, _ in rows)
  return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--data_dir", required=True,
                      help="the directory holding stackoverflow.sqlite")
  parser.add_argument("--out_dir", default=None,
                      help="index a copy of --data_dir's files here (default: in place)")
  exits.add_report_flags(parser)
  return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  return exits.report_main(args, lambda: index(args.data_dir, args.out_dir), format_table)


if __name__ == "__main__":
  sys.exit(main())
