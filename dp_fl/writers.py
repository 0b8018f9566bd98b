"""Generic writers every tier shares: PNG figures, metrics CSV files, TensorBoard scalars.

| writer              | what it writes                                                       |
|---------------------|----------------------------------------------------------------------|
| `new_figure`        | a matplotlib `Figure` and its axes, without pyplot (no global state; |
|                     | safe in any thread)                                                  |
| `save_figure`       | a figure as PNG, atomically (`dp_fl.files.atomic_output`)            |
| `MetricsCsv`        | a CSV keyed by `round`, one row per round across resumes             |
| `read_csv`          | a CSV file as rows of strings                                        |
| `TensorBoardWriter` | scalars as TensorBoard event files (`tf.summary`)                    |
| `flatten_metrics`   | nested TFF metrics -> {"a/b/c": Python scalar}, for the two above    |

Ground floor: imports only `dp_fl.files` (TensorFlow and matplotlib lazily, when a writer is
made), so planning, decentralized and the paper figures write their results without reaching
into `dp_fl.training`. What a training run writes, and where, is `dp_fl.training.outputs`.
"""

from __future__ import annotations

import csv
import os
from typing import Any, Mapping, Optional

from dp_fl import files


def new_figure(width: float = 6.4, height: float = 4.0) -> tuple[Any, Any]:
  """(Figure, Axes) without pyplot."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  figure = Figure(figsize=(width, height))
  return figure, figure.subplots()


def save_figure(figure: Any, path: str) -> str:
  """Writes a matplotlib Figure as PNG to `path` atomically; returns `path`."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with files.atomic_output(path) as f:
    figure.savefig(f, format="png", dpi=110, bbox_inches="tight")
  return path


class MetricsCsv:
  """A CSV keyed by `round`, truncated to `resume_round` when opened.

  Rows are appended; a row for a round already in the file replaces it (a rerun of a
  finished run evaluates its last round again: one row per round, never two).
  """

  def __init__(self, path: str, resume_round: int):
    self._path = path
    self._fieldnames: Optional[list[str]] = None
    self._rounds: set[str] = set()
    rows: list[dict[str, str]] = []
    if os.path.exists(path):
      with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        self._fieldnames = list(reader.fieldnames or [])
        rows = [r for r in reader if r.get("round") and int(r["round"]) <= resume_round]
      self._rewrite(rows)
      self._rounds = {r["round"] for r in rows}

  def _rewrite(self, rows: list[dict[str, str]]) -> None:
    tmp = self._path + ".tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as f:
      if self._fieldnames:
        writer = csv.DictWriter(f, fieldnames=self._fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, self._path)

  def append(self, round_number: int, values: Mapping[str, Any], merge: bool = False) -> None:
    """Writes the row of `round_number`; `merge` keeps the other columns of a row already
    written for that round (else the row is replaced)."""
    row = {"round": round_number, **values}
    replaces = str(round_number) in self._rounds
    if self._fieldnames is None or set(row) - set(self._fieldnames) or replaces:
      # New columns (rewrite with the union of the columns) or a round written again.
      old = []
      if self._fieldnames and os.path.exists(self._path):
        with open(self._path, newline="", encoding="utf-8") as f:
          old = list(csv.DictReader(f))
        if merge:
          for previous in old:
            if previous.get("round") == str(round_number):
              row = {**{k: v for k, v in previous.items() if v != ""}, **row}
        old = [r for r in old if r.get("round") != str(round_number)]
      self._fieldnames = list(self._fieldnames or []) + [
          k for k in row if k not in (self._fieldnames or [])]
      self._rewrite(old)
    self._rounds.add(str(round_number))
    with open(self._path, "a", newline="", encoding="utf-8") as f:
      csv.DictWriter(f, fieldnames=self._fieldnames, restval="").writerow(row)


def read_csv(path: str) -> list[dict[str, str]]:
  with open(path, newline="", encoding="utf-8") as f:
    return list(csv.DictReader(f))


class TensorBoardWriter:
  """Scalars to TensorBoard event files (tf.summary), flushed after every write."""

  def __init__(self, directory: str):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    self._tf = tf
    self._writer = tf.summary.create_file_writer(directory)

  def scalars(self, prefix: str, step: int, values: Mapping[str, Any]) -> None:
    with self._writer.as_default():
      for name, value in values.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
          self._tf.summary.scalar(f"{prefix}/{name}", float(value), step=step)
    self._writer.flush()

  def close(self) -> None:
    self._writer.close()


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
  if isinstance(value, Mapping):
    for k, v in value.items():
      _flatten(f"{prefix}/{k}" if prefix else str(k), v, out)
  else:
    try:
      out[prefix] = value.item() if hasattr(value, "item") else value
    except (ValueError, AttributeError):
      out[prefix] = value


def flatten_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
  """Nested TFF metrics (OrderedDicts of numpy scalars) -> {"a/b/c": python scalar}."""
  out: dict[str, Any] = {}
  _flatten("", metrics, out)
  return {k: v for k, v in out.items() if isinstance(v, (int, float, bool, str))}
