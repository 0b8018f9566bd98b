"""Writes a StackOverflow database of paper 004's size (or a scaled copy) in TFF's format.

  .venv/bin/python -m scripts.make_paper_database --scale 0.01 --out_dir /tmp/so_1pct
  ./bazelw run //scripts:make_paper_database -- --scale 1.0 --out_dir /data/so_full

TFF's split sizes times `--scale` (1.0: 342,477 train clients and ≈ 136M train sentences),
per-client sizes log-normal with the real means (tasks/stackoverflow/paper_database.py says
what is real and what is assumed), written in chunks of clients so memory stays flat. The
result is a `--data_dir` for the StackOverflow binary (`--preset=paper_table3
--data_dir=DIR`): sizes, read costs and memory at paper scale, without the download.
`--without_index` writes the file as TFF's own `save_to_sql_client_data` does, without the
(client_id, split_name) index that per-client reads need (to test that check).

Before writing it estimates the file's size and refuses an `--out_dir` whose disk cannot
hold it; while writing it prints progress with an ETA; at the end it prints what it wrote
and the size and time extrapolated to scale 1.0 (a table, or JSON with `--format json`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from typing import Any, Optional, Sequence

from dp_fl import exits
from dp_fl import resources
from tasks.stackoverflow import paper_database
from tasks.stackoverflow import synthetic

# Room kept free beyond the estimate (SQLite's temporary index build, the estimate's error).
DISK_MARGIN = 1.25


def _check_disk(out_dir: str, needed: int, scale: float) -> None:
  probe = out_dir
  while not os.path.exists(probe):
    probe = os.path.dirname(probe) or "."
  free = shutil.disk_usage(probe).free
  if needed * DISK_MARGIN > free:
    raise ValueError(
        f"--out_dir={out_dir!r}: the database at --scale={scale:g} needs about "
        f"{resources.format_bytes(needed)} (+{DISK_MARGIN - 1:.0%} while its index is built), "
        f"but {probe!r} has {resources.format_bytes(free)} free. Fix: a smaller --scale or "
        "an --out_dir on a larger disk.")


def build(scale: float, out_dir: str, sigma: float, seed: int, index: bool,
          stream: Any = None) -> dict[str, Any]:
  """Writes the database; returns what was written, measured and extrapolated."""
  config = paper_database.config_for_scale(scale, sigma, seed)
  planned = paper_database.estimate(config)
  _check_disk(out_dir, planned.bytes, scale)
  resources.ensure_writable_dir("--out_dir", out_dir)
  total_clients = sum(planned.clients.values())
  progress = resources.Progress(f"writing the StackOverflow database at scale {scale:g}",
                                total_clients, stream=stream)
  offsets = {"train": 0, "heldout": planned.clients["train"],
             "test": planned.clients["train"] + planned.clients["heldout"]}

  def on_chunk(split: str, done: int, _total: int) -> None:
    progress.update(offsets[split] + done)

  start = time.monotonic()
  path = synthetic.generate(config, out_dir, progress=on_chunk, index=index)
  seconds = time.monotonic() - start
  progress.finish()
  with open(os.path.join(out_dir, synthetic.CONFIG_FILENAME), encoding="utf-8") as f:
    summary = json.load(f)
  size = os.path.getsize(path)
  sentences = sum(summary["num_examples"].values())
  full = paper_database.estimate(paper_database.config_for_scale(1.0, sigma, seed))
  full_sentences = sum(full.sentences.values())
  return {
      "path": path, "scale": scale, "sigma": sigma, "seed": seed, "index": index,
      "clients": summary["num_clients"], "sentences": summary["num_examples"],
      "bytes": size, "seconds": round(seconds, 1),
      "sentences_per_second": round(sentences / max(seconds, 1e-9)),
      "bytes_per_sentence": round(size / max(sentences, 1), 1),
      "estimated_bytes": planned.bytes,
      "full_scale": {
          "sentences": full_sentences,
          "bytes": round(size / max(sentences, 1) * full_sentences),
          "seconds": round(seconds / max(sentences, 1) * full_sentences)},
  }


def format_table(report: dict[str, Any]) -> str:
  splits = ("train", "heldout", "test")
  full = report["full_scale"]
  rows = [("database", report["path"] + ("" if report["index"] else " (no index)")),
          ("scale", f"{report['scale']:g} (sizes log-normal, sigma {report['sigma']:g})"),
          ("clients train/heldout/test", "/".join(str(report["clients"][s]) for s in splits)),
          ("sentences train/heldout/test",
           "/".join(str(report["sentences"][s]) for s in splits)),
          ("size", f"{resources.format_bytes(report['bytes'])} "
                   f"({report['bytes_per_sentence']:g} bytes per sentence)"),
          ("time", f"{resources.format_seconds(report['seconds'])} "
                   f"({report['sentences_per_second']} sentences/s)"),
          ("at scale 1.0 (extrapolated)",
           f"{full['sentences']} sentences, {resources.format_bytes(full['bytes'])}, "
           f"{resources.format_seconds(full['seconds'])} on this machine")]
  width = max(len(k) for k, _ in rows)
  return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--scale", type=float, required=True,
                      help="fraction of TFF's StackOverflow clients (1.0: 342,477 train "
                           "clients, ≈ 136M train sentences, ≈ 50 GB)")
  parser.add_argument("--out_dir", required=True,
                      help="directory to write stackoverflow.sqlite into (a --data_dir)")
  parser.add_argument("--sigma", type=float, default=paper_database.DEFAULT_SIZE_SIGMA,
                      help="log-normal spread of sentences per client (an assumption: TFF "
                           "publishes only the means)")
  parser.add_argument("--seed", type=int, default=0, help="seed of the generated text")
  parser.add_argument("--without_index", action="store_true",
                      help="leave out the (client_id, split_name) index, as TFF's own "
                           "writer does")
  exits.add_report_flags(parser)
  return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)

  def report() -> dict[str, Any]:
    if args.seed < 0:
      raise ValueError(f"--seed={args.seed} must be >= 0.")
    try:
      paper_database.config_for_scale(args.scale, args.sigma, args.seed)
    except ValueError as e:
      raise ValueError(str(e).replace("`scale`", "--scale").replace("`sigma`", "--sigma")
                       ) from None
    return build(args.scale, args.out_dir, args.sigma, args.seed, not args.without_index)

  return exits.report_main(args, report, format_table)


if __name__ == "__main__":
  sys.exit(main())
