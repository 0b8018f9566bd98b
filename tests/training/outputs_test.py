"""Run outputs: each round once across resumes, the progress line (the generic CSV and
TensorBoard writers: tests/writers)."""

from __future__ import annotations

import io
import os

import pytest

from dp_fl import writers
from dp_fl.training import outputs


def test_a_resumed_run_writes_each_round_once(tmp_path):
  root = str(tmp_path / "run")
  out = outputs.RunOutputs(root, 0, progress_stream=io.StringIO())
  for r in (1, 2):
    out.train(r, {"loss": 1.0 / r})
    out.epsilon_so_far(r, 0.5 * r)
  out.close()
  resumed = outputs.RunOutputs(root, 1, progress_stream=io.StringIO())  # Checkpoint 1.
  resumed.train(2, {"loss": 0.25})
  resumed.close()
  metrics = os.path.join(root, "metrics")
  assert [(r["round"], r["loss"]) for r in writers.read_csv(os.path.join(metrics, "train.csv"))
         ] == [("1", "1.0"), ("2", "0.25")]
  assert [r["round"] for r in writers.read_csv(os.path.join(metrics, "privacy.csv"))] == ["1"]
  assert os.listdir(os.path.join(root, "tensorboard"))


def test_progress_line():
  meter = outputs.ProgressMeter(first_round=0, total_rounds=100)
  line = meter.line(10, 1.2345)
  assert line.startswith("round 10/100") and "ε so far 1.234" in line and "ETA" in line
  assert "ε so far inf" in meter.line(10, float("inf"))
  # DP-FedAvg's progress uses the fast RDP bound and its reports the PLD: labelled.
  assert "ε so far 1.234 (RDP)" in meter.line(10, 1.2345, accountant="RDP")


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
