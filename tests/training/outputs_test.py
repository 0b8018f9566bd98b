"""Run outputs: CSV rows exactly once across resumes, nested metrics flattened."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from dp_fl.training import outputs


def test_resume_drops_rows_after_the_checkpoint(tmp_path):
  path = str(tmp_path / "train.csv")
  csv = outputs.MetricsCsv(path, resume_round=0)
  for r in range(1, 6):
    csv.append(r, {"loss": 1.0 / r})
  resumed = outputs.MetricsCsv(path, resume_round=3)  # Killed after round 5, checkpoint 3.
  for r in range(4, 7):
    resumed.append(r, {"loss": 2.0 / r})
  rows = outputs.read_csv(path)
  assert [int(r["round"]) for r in rows] == [1, 2, 3, 4, 5, 6]
  assert float(rows[3]["loss"]) == pytest.approx(0.5)


def test_new_columns_extend_the_header(tmp_path):
  path = str(tmp_path / "m.csv")
  csv = outputs.MetricsCsv(path, resume_round=0)
  csv.append(1, {"a": 1})
  csv.append(2, {"a": 2, "b": 3})
  rows = outputs.read_csv(path)
  assert rows[0] == {"round": "1", "a": "1", "b": ""}
  assert rows[1] == {"round": "2", "a": "2", "b": "3"}


def test_flatten_metrics():
  nested = collections.OrderedDict(
      client_work=collections.OrderedDict(train=collections.OrderedDict(
          loss=np.float32(0.5), num_examples=np.int64(3))),
      distributor=(), aggregator=collections.OrderedDict(noise=np.array([1.0, 2.0])))
  assert outputs.flatten_metrics(nested) == {"client_work/train/loss": 0.5,
                                            "client_work/train/num_examples": 3}


def test_progress_line():
  meter = outputs.ProgressMeter(first_round=0, total_rounds=100)
  line = meter.line(10, 1.2345)
  assert line.startswith("round 10/100") and "ε so far 1.234" in line and "ETA" in line
  assert "ε so far inf" in meter.line(10, float("inf"))
  # DP-FedAvg's progress uses the fast RDP bound and its reports the PLD: labelled.
  assert "ε so far 1.234 (RDP)" in meter.line(10, 1.2345, accountant="RDP")


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
