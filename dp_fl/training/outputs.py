"""What a run writes: metrics (CSV + TensorBoard), privacy reports and a progress line.

The CSV and TensorBoard writers themselves are generic (`dp_fl.writers`); this module says
which files a training run writes, and where.

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

import math
import os
import sys
import time
from typing import Any, Mapping, Optional, TextIO

from dp_fl import files
from dp_fl import writers
from dp_fl.training import canaries


class RunOutputs:
  """The metrics files, TensorBoard events and privacy reports of one run directory."""

  def __init__(self, root_dir: str, resume_round: int,
               progress_stream: Optional[TextIO] = None):
    self.root_dir = root_dir
    metrics_dir = os.path.join(root_dir, "metrics")
    os.makedirs(metrics_dir, exist_ok=True)
    self._train = writers.MetricsCsv(os.path.join(metrics_dir, "train.csv"), resume_round)
    self._eval = writers.MetricsCsv(os.path.join(metrics_dir, "eval.csv"), resume_round)
    self._privacy = writers.MetricsCsv(os.path.join(metrics_dir, "privacy.csv"), resume_round)
    self._tensorboard = writers.TensorBoardWriter(os.path.join(root_dir, "tensorboard"))
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

  def empirical(self, report: Optional[Any], section: Mapping[str, Any]) -> None:
    """Writes privacy_report.json and .md as `report` with the audit's "empirical" section
    (the section alone for a non-private run, which has no report)."""
    values = {} if report is None else report.to_dict()
    values["empirical"] = dict(section)
    files.atomic_write_json(os.path.join(self.root_dir, "privacy_report.json"), values,
                            indent=2)
    text = "" if report is None else report.to_markdown()
    files.atomic_write_text(os.path.join(self.root_dir, "privacy_report.md"),
                            text + canaries.markdown(section))

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
