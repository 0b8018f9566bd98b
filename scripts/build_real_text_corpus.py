"""Builds the real-text corpora from the installed Python packages' docstrings and comments.

  ./bazelw run //scripts:build_real_text_corpus
  .venv/bin/python -m scripts.build_real_text_corpus --out_dir=/tmp/corpus --packages=numpy,scipy
  .venv/bin/python -m scripts.build_real_text_corpus --source=manual_pages --sections=2,7 \
      --out_dir=/tmp/man_corpus   # another source: the machine's manual pages

Writes, from one pass over the packages (tasks/real_text.py; about 2-3 minutes for the
pinned `.venv` on 2 cores): `<out_dir>/stackoverflow.sqlite` in TFF's StackOverflow format
(train / heldout / test, one client per module) and `<out_dir>/reddit_comments.jsonl.gz` in
the Reddit monthly JSON-lines format (one author per module, subreddit = its package). By
default `out_dir` is the cache the task binaries read with `--corpus=real_text`, so after
this the training jobs start at once; with another `--out_dir`, pass it as `--data_dir` /
`--data_files`. Prints what it wrote (a table, or JSON with `--format json`).

`--source=manual_pages` reads another kind of prose, the manual pages under `--roots`
(default /usr/share/man; `--sections` picks sections), one author per page
(tasks/manual_pages.py): a corpus the presets were not chosen on, for checking a rule chosen
on the packages' prose (docs/RESULTS.md, the noise guard). It needs `--out_dir`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Optional, Sequence

from dp_fl import exits
from tasks import manual_pages
from tasks import real_text

PYTHON_PACKAGES = "python_packages"
MANUAL_PAGES = "manual_pages"


def build(out_dir: Optional[str], packages: Optional[Sequence[str]],
          roots: Optional[Sequence[str]], source: str = PYTHON_PACKAGES,
          sections: Optional[Sequence[str]] = None) -> dict[str, Any]:
  """Harvests once and writes both formats; returns what was written."""
  start = time.monotonic()
  if source == MANUAL_PAGES:
    authors = manual_pages.harvest_manual_pages(roots, sections)
    if not authors:
      raise ValueError(
          f"No manual page with at least {real_text.MIN_SENTENCES} sentences of prose under "
          f"{list(roots or manual_pages.DEFAULT_ROOTS)} (--sections={sections}); name "
          "sections that exist (ls /usr/share/man), or other --roots.")
    info = {"source": MANUAL_PAGES, "sections": sections}
  else:
    authors = real_text.harvest(roots, packages)
    if not authors:
      raise ValueError(
          f"No module with at least {real_text.MIN_SENTENCES} sentences of prose under "
          f"{list(roots or real_text.default_roots())} (--packages={packages}); name "
          "installed top-level packages, or other --roots.")
    info = {"packages": packages}
  harvest_seconds = time.monotonic() - start
  directory = out_dir or real_text.corpus_directory(None, roots, packages)
  os.makedirs(directory, exist_ok=True)
  database_path, reddit_path = real_text.write_corpora(authors, directory, info)
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
  rows = [("authors", f"{report['authors']} in {report['packages']} packages / sections"),
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
  parser.add_argument("--source", choices=(PYTHON_PACKAGES, MANUAL_PAGES),
                      default=PYTHON_PACKAGES,
                      help="the prose to read: installed Python packages' docstrings and "
                           "comments (one author per module), or manual pages (one per page)")
  parser.add_argument("--packages", default=None,
                      help="comma-separated top-level packages to read (default: all; "
                           f"--source={PYTHON_PACKAGES})")
  parser.add_argument("--sections", default=None,
                      help="comma-separated manual sections to read, e.g. 2,7 (default: all; "
                           f"--source={MANUAL_PAGES})")
  parser.add_argument("--roots", default=None,
                      help="comma-separated directories of Python packages (default: this "
                           "environment's site-packages), or of man<section>/ folders "
                           f"(default: {','.join(manual_pages.DEFAULT_ROOTS)})")
  exits.add_report_flags(parser)
  return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)

  def report() -> dict[str, Any]:
    packages = [p for p in args.packages.split(",") if p] if args.packages else None
    sections = [p for p in args.sections.split(",") if p] if args.sections else None
    roots = [r for r in args.roots.split(",") if r] if args.roots else None
    if args.out_dir and os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
      raise ValueError(f"--out_dir={args.out_dir!r} is a file; give a directory (created if "
                       "missing).")
    if args.source == MANUAL_PAGES:
      if packages:
        raise ValueError(f"--packages={args.packages!r} names Python packages; with "
                         f"--source={MANUAL_PAGES} pick pages with --sections.")
      if not args.out_dir:
        raise ValueError(f"--source={MANUAL_PAGES} needs --out_dir (the default directory "
                         "is the cache of the packages' corpus that --corpus=real_text reads).")
    elif sections:
      raise ValueError(f"--sections={args.sections!r} picks manual pages; pass "
                       f"--source={MANUAL_PAGES}, or --packages for Python packages.")
    return build(args.out_dir, packages, roots, args.source, sections)

  return exits.report_main(args, report, format_table)


if __name__ == "__main__":
  sys.exit(main())
