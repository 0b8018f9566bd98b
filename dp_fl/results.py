"""One results pattern for every study that writes JSON + Markdown + PNG: compute → JSON → draw.

    output = study.compute(...)                          # a JSON-ready dict: the numbers
    paths = results.write(out_dir, output, "table.json",
                          markdown={"table.md": markdown},   # data -> str
                          figures={"table.png": figure})     # data -> matplotlib Figure
    results.draw(out_dir, results.read(json_path), ...)  # --replot: the JSON alone

`write` stores the numbers first, as JSON (atomically, `indent=1` unless told otherwise),
reads the file back and makes every Markdown file and PNG from what it read, so a table or a
figure never shows more than the JSON beside it; `draw` does the second half alone, which is
how a study redraws its outputs from a committed JSON without computing anything. Every file
is written atomically (`dp_fl.files`, `dp_fl.writers.save_figure`).

The one way a study writes JSON + Markdown + PNG: scripts/paper004_figures (one JSON + PNG
per figure of `dp_fl.paper_figures`), scripts/plan (plan.json, epsilon_vs_rounds.png drawn from
it), scripts/amplification_table, scripts/cpsgd_dme, tasks/digits/results.py,
dp_fl.training.compare (comparison.json/.md/.png) and dp_fl.decentralized.comparison (its Markdown from the JSON; its Figure 2 from the runs'
histories, which the comparison JSON does not hold). Ground floor: imports only `dp_fl.files`
and `dp_fl.writers`.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping, Optional

from dp_fl import files
from dp_fl import writers

Markdown = Callable[[Any], str]  # the JSON read back -> the Markdown text
Drawing = Callable[[Any], Any]  # the JSON read back -> a matplotlib Figure


def read(path: str) -> Any:
  """The JSON at `path`, as `write` reads it back before drawing."""
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def write_json(path: str, data: Any, **dump_kwargs: Any) -> Any:
  """Writes `data` as JSON at `path` (atomically); returns the JSON read back.

  Draw from the value returned, not from `data`: it is exactly what a reader of the file gets
  (tuples are lists, dictionary keys strings, `default=` conversions applied).
  """
  dump_kwargs.setdefault("indent", 1)
  files.atomic_write_json(path, data, **dump_kwargs)
  return read(path)


def draw(out_dir: str, data: Any, *, markdown: Optional[Mapping[str, Markdown]] = None,
         figures: Optional[Mapping[str, Drawing]] = None) -> dict[str, str]:
  """Writes each Markdown file and each PNG of `data` into `out_dir`; {file name: path}.

  `markdown` and `figures` map a file name to the function making its content from `data`
  (a JSON read back: `read` or `write_json`), in the order given.
  """
  os.makedirs(out_dir, exist_ok=True)
  paths = {}
  for name, render in (markdown or {}).items():
    paths[name] = os.path.join(out_dir, name)
    files.atomic_write_text(paths[name], render(data))
  for name, make_figure in (figures or {}).items():
    paths[name] = writers.save_figure(make_figure(data), os.path.join(out_dir, name))
  return paths


def write(out_dir: str, data: Any, json_name: str, *,
          markdown: Optional[Mapping[str, Markdown]] = None,
          figures: Optional[Mapping[str, Drawing]] = None,
          **dump_kwargs: Any) -> dict[str, str]:
  """compute → JSON → draw: `data` as `out_dir/json_name`, then `draw` from the file.

  Returns {file name: path} of every file written, the JSON first. `dump_kwargs` go to
  `json.dumps` (`indent=1` unless given).
  """
  os.makedirs(out_dir, exist_ok=True)
  json_path = os.path.join(out_dir, json_name)
  written = write_json(json_path, data, **dump_kwargs)
  return {json_name: json_path,
          **draw(out_dir, written, markdown=markdown, figures=figures)}
