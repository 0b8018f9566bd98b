"""What a run writes: metrics (CSV + TensorBoard), privacy reports and a progress line.

Run-directory layout (`--root_dir`):

    config.json                  the run's TrainingConfig (dp_fl.training.config)
    checkpoints/ckpt-<round>/    see dp_fl.training.checkpoints
    metrics/train.csv            one row per completed round (column `round`, 1-based)
    metrics/eval.csv             one row per evaluation
    metrics/privacy.csv          ρ and ε of the report after each evaluation and at the end;
                                 `epsilon_so_far`: the ε of every progress line
    figures/*.png, report.md     the run's figures and Markdown report (dp_fl.training.figures)
    tensorboard/                 the same scalars as TensorBoard event files (train/…, eval/…,
                                 privacy/…)
    privacy_report.json, .md     the latest privacy report (paper 004, App. C)
    summary.json                 the final metrics, privacy and timing of a finished run
    data_quality.json            what the task's loaders skipped or quarantined (if any)
    .lock                        held (flock) by the process training in the directory

On resume from a checkpoint after round r, rows with round > r are dropped from the CSV files
before training continues, so every round appears exactly once. TensorBoard shows the later
event for a step written twice. TFF's CSVFileReleaseManager would also rewrite rows on
release, but it cannot be told to drop the rows of rounds that will not be re-run.
"""

from __future__ import annotations

import csv
import math
import os
import sys
import time
from typing import Any, Mapping, Optional, TextIO

from dp_fl import files


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


class RunOutputs:
  """The metrics files, TensorBoard events and privacy reports of one run directory."""

  def __init__(self, root_dir: str, resume_round: int,
               progress_stream: Optional[TextIO] = None):
    self.root_dir = root_dir
    metrics_dir = os.path.join(root_dir, "metrics")
    os.makedirs(metrics_dir, exist_ok=True)
    self._train = MetricsCsv(os.path.join(metrics_dir, "train.csv"), resume_round)
    self._eval = MetricsCsv(os.path.join(metrics_dir, "eval.csv"), resume_round)
    self._privacy = MetricsCsv(os.path.join(metrics_dir, "privacy.csv"), resume_round)
    self._tensorboard = TensorBoardWriter(os.path.join(root_dir, "tensorboard"))
    self._progress = progress_stream

  def train(self, round_number: int, metrics: Mapping[str, Any]) -> None:
    self._train.append(round_number, metrics)
    self._tensorboard.scalars("train", round_number, metrics)

  def evaluation(self, round_number: int, metrics: Mapping[str, Any]) -> None:
    self._eval.append(round_number, metrics)
    self._tensorboard.scalars("eval", round_number, metrics)

  def privacy(self, round_number: int, report: Any) -> None:
    """Writes the report (JSON + Markdown, atomically) and its ρ, ε to CSV/TensorBoard."""
    values = {"rho": report.rho, "epsilon": report.epsilon, "delta": report.delta}
    self._privacy.append(round_number, values)
    self._tensorboard.scalars("privacy", round_number,
                              {k: v for k, v in values.items() if math.isfinite(v)})
    for name, text in (("privacy_report.json", report.to_json()),
                       ("privacy_report.md", report.to_markdown())):
      files.atomic_write_text(os.path.join(self.root_dir, name), text)

  def epsilon_so_far(self, round_number: int, epsilon: Optional[float]) -> None:
    """Records the ε a progress line shows (metrics/privacy.csv, for the ε-vs-rounds figure)."""
    if epsilon is not None and math.isfinite(epsilon):
      self._privacy.append(round_number, {"epsilon_so_far": epsilon}, merge=True)

  def summary(self, values: Mapping[str, Any]) -> None:
    path = os.path.join(self.root_dir, "summary.json")
    files.atomic_write_json(path, dict(values), indent=1, sort_keys=True, default=str)

  def progress(self, line: str) -> None:
    print(line, file=self._progress or sys.stdout, flush=True)

  def resumed(self, resumed_from: Optional[int], rounds: int, root_dir: str) -> None:
    """Says where a resumed run starts (nothing for a new run)."""
    if resumed_from is None:
      return
    if resumed_from >= rounds:
      self.progress(f"the run in {root_dir} already completed {resumed_from} rounds; showing "
                    "its results (pass another --root_dir, or more --rounds, to train again)")
    else:
      self.progress(f"resumed from the checkpoint after round {resumed_from}")

  def close(self) -> None:
    self._tensorboard.close()


class ProgressMeter:
  """Rounds/s and ETA over the rounds run in this process."""

  def __init__(self, first_round: int, total_rounds: int):
    self._first = first_round
    self._total = total_rounds
    self._start = time.perf_counter()

  def line(self, round_number: int, epsilon: Optional[float], extra: str = "",
           accountant: str = "") -> str:
    """The progress line; `accountant` (e.g. "RDP") names how ε was bounded, if it varies."""
    elapsed = time.perf_counter() - self._start
    done = round_number - self._first
    rate = done / elapsed if elapsed > 0 else float("nan")
    eta = (self._total - round_number) / rate if rate > 0 else float("nan")
    eps = "n/a" if epsilon is None else (
        "inf (not private)" if math.isinf(epsilon) else f"{epsilon:.3f}")
    if accountant and epsilon is not None and math.isfinite(epsilon):
      eps += f" ({accountant})"
    return (f"round {round_number}/{self._total}  {rate:.2f} rounds/s  "
            f"ETA {_duration(eta)}  ε so far {eps}" + (f"  {extra}" if extra else ""))


def _duration(seconds: float) -> str:
  if not math.isfinite(seconds):
    return "?"
  seconds = int(round(seconds))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
