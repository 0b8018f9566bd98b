"""Generic writers (dp_fl/writers.py): CSV rows exactly once across resumes, nested metrics
flattened, figures written as PNG without pyplot."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from dp_fl import writers


def test_resume_drops_rows_after_the_checkpoint(tmp_path):
  path = str(tmp_path / "train.csv")
  csv = writers.MetricsCsv(path, resume_round=0)
  for r in range(1, 6):
    csv.append(r, {"loss": 1.0 / r})
  resumed = writers.MetricsCsv(path, resume_round=3)  # Killed after round 5, checkpoint 3.
  for r in range(4, 7):
    resumed.append(r, {"loss": 2.0 / r})
  rows = writers.read_csv(path)
  assert [int(r["round"]) for r in rows] == [1, 2, 3, 4, 5, 6]
  assert float(rows[3]["loss"]) == pytest.approx(0.5)


def test_new_columns_extend_the_header(tmp_path):
  path = str(tmp_path / "m.csv")
  csv = writers.MetricsCsv(path, resume_round=0)
  csv.append(1, {"a": 1})
  csv.append(2, {"a": 2, "b": 3})
  rows = writers.read_csv(path)
  assert rows[0] == {"round": "1", "a": "1", "b": ""}
  assert rows[1] == {"round": "2", "a": "2", "b": "3"}


def test_flatten_metrics():
  nested = collections.OrderedDict(
      client_work=collections.OrderedDict(train=collections.OrderedDict(
          loss=np.float32(0.5), num_examples=np.int64(3))),
      distributor=(), aggregator=collections.OrderedDict(noise=np.array([1.0, 2.0])))
  assert writers.flatten_metrics(nested) == {"client_work/train/loss": 0.5,
                                            "client_work/train/num_examples": 3}


def test_a_figure_is_written_as_png_into_a_new_directory(tmp_path):
  figure, ax = writers.new_figure(3.0, 2.0)
  ax.plot([0, 1], [1, 0])
  path = str(tmp_path / "new" / "line.png")
  assert writers.save_figure(figure, path) == path
  with open(path, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["line.png"]  # No temp file.


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
