"""Builds the real-text corpora from the installed Python packages' docstrings and comments.

  ./bazelw run //scripts:build_real_text_corpus
  .venv/bin/python -m scripts.build_real_text_corpus --out_dir=/tmp/corpus --packages=numpy,scipy

Writes, from one pass over the packages (tasks/real_text.py; about 2-3 minutes for the
pinned `.venv` on 2 cores): `<out_dir>/stackoverflow.sqlite` in TFF's StackOverflow format
(train / heldout / test, one client per module) and `<out_dir>/reddit_comments.jsonl.gz` in
the Reddit monthly JSON-lines format (one author per module, subreddit = its package). By
default `out_dir` is the cache the task binaries read with `--corpus=real_text`, so after
this the training jobs start at once; with another `--out_dir`, pass it as `--data_dir` /
`--data_files`. Prints what it wrote (a table, or JSON with `--format json`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Optional, Sequence

from dp_fl import exits
from tasks import real_text


def build(out_dir: Optional[str], packages: Optional[Sequence[str]],
          roots: Optional[Sequence[str]]) -> dict[str, Any]:
  """Harvests once and writes both formats; returns what was written."""
  directory = out_dir or real_text.corpus_directory(None, roots, packages)
  os.makedirs(directory, exist_ok=True)
  start = time.monotonic()
  authors = real_text.harvest(roots, packages)
  if not authors:
    raise ValueError(
        f"No module with at least {real_text.MIN_SENTENCES} sentences of prose under "
        f"{list(roots or real_text.default_roots())} (--packages={packages}); name installed "
        "top-level packages, or other --roots.")
  harvest_seconds = time.monotonic() - start
  database_path, reddit_path = real_text.write_corpora(authors, directory,
                                                      {"packages": packages})
  # The counts the database writer recorded beside the database.
  with open(os.path.join(directory, real_text.SUMMARY_FILENAME), encoding="utf-8") as f:
    written = json.load(f)
  return {
      "directory": directory,
      "authors": len(authors),
      "packages": len({a.group for a in authors}),
      "harvest_seconds": round(harvest_seconds, 1),
      "stackoverflow": {
          "path": database_path,
          "clients": written["num_clients"],
          "sentences": written["num_examples"],
          "bytes": os.path.getsize(database_path)},
      "reddit": {
          "path": reddit_path,
          "comments": sum(len(a.paragraphs) for a in authors),
          "bytes": os.path.getsize(reddit_path)},
  }


def format_table(report: dict[str, Any]) -> str:
  so, rd = report["stackoverflow"], report["reddit"]
  rows = [("authors (modules)", f"{report['authors']} in {report['packages']} packages"),
          ("harvest", f"{report['harvest_seconds']} s"),
          ("StackOverflow format", so["path"]),
          ("  clients train/heldout/test",
           "/".join(str(so["clients"][k]) for k in ("train", "heldout", "test"))),
          ("  sentences train/heldout/test",
           "/".join(str(so["sentences"][k]) for k in ("train", "heldout", "test"))),
          ("Reddit format", rd["path"]),
          ("  comments", str(rd["comments"]))]
  width = max(len(k) for k, _ in rows)
  return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out_dir", default=None,
                      help="where to write (default: the cache --corpus=real_text reads, "
                           "~/.cache/dp_fl/real_text/<environment fingerprint>)")
  parser.add_argument("--packages", default=None,
                      help="comma-separated top-level packages to read (default: all)")
  parser.add_argument("--roots", default=None,
                      help="comma-separated directories of Python packages (default: this "
                           "environment's site-packages)")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  exits.add_debug_flag(parser)
  return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)

  def body() -> int:
    packages = [p for p in args.packages.split(",") if p] if args.packages else None
    roots = [r for r in args.roots.split(",") if r] if args.roots else None
    if args.out_dir and os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
      raise ValueError(f"--out_dir={args.out_dir!r} is a file; give a directory (created if "
                       "missing).")
    report = build(args.out_dir, packages, roots)
    print(json.dumps(report, indent=1) if args.format == "json" else format_table(report))
    return exits.COMPLETED

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
