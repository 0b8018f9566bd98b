"""Regenerates paper 004's figures from the library: PNG files next to the JSON they plot.

  ./bazelw run //scripts:paper004_figures                      # all, into docs/figures/
  .venv/bin/python -m scripts.paper004_figures --only=fig02,fig09 --out_dir=/tmp/figs
  .venv/bin/python -m scripts.paper004_figures --replot        # redraw from the JSON only

Each figure is one module of `dp_fl.paper_figures` (`paper004.FIGURES`, in the paper's order):
Figs. 1-6 (mechanism optimization time, RmsLoss vs min-sep, rounds and participations, and
robustness to a min-sep other than the one optimized for) and Figs. 8-10 (ε extrapolated over
population, report goal, min-sep and rounds; the production BLTs of App. A). Each JSON carries
the figure's settings ("caption"), what the paper prints ("paper"), where ours differ
("differences") and the paper's claims checked on our numbers ("checks"). The files are
written by `dp_fl.results` (compute → JSON → draw): the PNG is drawn from the JSON read back,
so it never shows more than the file beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional, Sequence

from dp_fl import exits
from dp_fl import files
from dp_fl import resources
from dp_fl import results
from dp_fl.paper_figures import figure_spec
from dp_fl.paper_figures import paper004

DEFAULT_OUT_DIR = os.path.join("docs", "figures")
FIGURES: tuple[figure_spec.PaperFigure, ...] = paper004.FIGURES


def select(only: Optional[str]) -> tuple[figure_spec.PaperFigure, ...]:
  """The figures named by --only (prefixes such as "fig02" or full names), else all."""
  if only is None:
    return FIGURES
  wanted = [w.strip() for w in only.split(",") if w.strip()]
  chosen = [f for f in FIGURES if any(f.name == w or f.name.startswith(w + "_") for w in wanted)]
  unknown = [w for w in wanted
             if not any(f.name == w or f.name.startswith(w + "_") for f in FIGURES)]
  if unknown or not chosen:
    raise ValueError(f"--only={only!r} names no figure{f' ({unknown})' if unknown else ''}; "
                     "choose from "
                     f"{', '.join(f.name for f in FIGURES)} (or their prefixes, e.g. fig02).")
  return tuple(chosen)


def read_figure(figure: figure_spec.PaperFigure, json_path: str) -> dict:
  """`figure`'s JSON file, checked to be a figure JSON of that figure."""
  try:
    data = results.read(json_path)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"--replot: {json_path!r} is not a readable figure JSON ({e}); run "
                     "without --replot to compute it.") from e
  figure_spec.check_data(figure, data)
  if data.get("figure") != figure.name:
    raise ValueError(f"--replot: {json_path!r} holds figure {data.get('figure')!r}, not "
                     f"{figure.name!r}; run without --replot to compute it.")
  return data


def _stamped_drawing(figure: figure_spec.PaperFigure):
  """`figure.draw`, stamped as not the paper's figure when the data is from quick settings."""

  def draw(data):
    drawn = figure.draw(data)
    if data.get("quick"):
      drawn.text(0.5, 0.002, "QUICK settings (scaled down for tests): not the paper's figure",
                 ha="center", va="bottom", color="tab:red", fontsize=9)
    return drawn

  return draw


def run(chosen: Sequence[figure_spec.PaperFigure], out_dir: str, quick: bool,
        replot: bool) -> list[dict]:
  """Computes (unless `replot`) and draws each figure; one summary row per figure.

  compute → JSON → draw (`dp_fl.results`): the PNG is drawn from the JSON read back; with
  `replot` from the JSON already in `out_dir`.
  """
  rows = []
  for figure in chosen:
    json_path = os.path.join(out_dir, figure.name + ".json")
    png_name = figure.name + ".png"
    start = time.perf_counter()
    if not replot:
      data = dict(figure_spec.check_data(figure, figure.compute(quick)), figure=figure.name,
                  quick=quick)
      results.write_json(json_path, data, indent=1)
    data = read_figure(figure, json_path)
    png = results.draw(out_dir, data, figures={png_name: _stamped_drawing(figure)})[png_name]
    checks = data.get("checks", [])
    rows.append({"figure": figure.name, "title": figure.title, "json": json_path, "png": png,
                 "seconds": time.perf_counter() - start,
                 "claims_hold": sum(bool(c.get("holds")) for c in checks),
                 "claims": len(checks)})
  return rows


def format_table(rows: Sequence[dict]) -> str:
  lines = [f"{'figure':<34} {'seconds':>8} {'claims hold':>12}  png"]
  for r in rows:
    lines.append(f"{r['figure']:<34} {r['seconds']:>8.1f} "
                 f"{str(r['claims_hold']) + '/' + str(r['claims']):>12}  {r['png']}")
  lines.append(f"total {sum(r['seconds'] for r in rows):.1f} s")
  return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out_dir", default=DEFAULT_OUT_DIR,
                      help="where the PNG and JSON files go (relative: against the repository)")
  parser.add_argument("--only", default=None,
                      help="comma-separated figure names or prefixes (e.g. fig02,fig09)")
  parser.add_argument("--quick", action="store_true",
                      help="small settings (seconds; for smoke tests, not the paper's figures)")
  parser.add_argument("--replot", action="store_true",
                      help="redraw the PNGs from the JSON files in --out_dir, computing nothing")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  exits.add_debug_flag(parser)
  return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)

  def body() -> int:
    chosen = select(args.only)
    out_dir = files.workspace_path(args.out_dir)
    if not args.replot:
      resources.ensure_writable_dir("--out_dir", out_dir)
    rows = run(chosen, out_dir, args.quick, args.replot)
    print(json.dumps(rows, indent=1) if args.format == "json" else format_table(rows))
    return exits.COMPLETED

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
