"""The peak memory of a training round does not grow with the cohort on the default runtime
(issue #43), while TFF's C++ worker — the runtime the default leaves at large cohorts — does.

Each run is a fresh process (`cohort_memory_probe`): the toy task's 4.2M-parameter network
(updates of 16.9 MB, about the paper's LSTM), one batch per client, DP-SGD, one round. The
whole job's peak is this process's plus its children's (TFF's worker_binary): an upper bound
of what ran at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SMALL, LARGE = 20, 80
CONTROL_LARGE = 50  # The worker's control: 30 clients more, ≈ 1.8 GB on the worker.
# What the default runtime may add from 20 to 80 clients: a few model-sized arrays and the
# larger cohort's datasets and ledger (TFF's worker: 3.4 model-sized arrays a client more,
# ≈ 3.4 GB here).
MARGIN_MB = 400.0


def _peak(tmp_path, clients, runtime=None):
  root = tmp_path / f"run_{clients}_{runtime or 'default'}"
  command = [sys.executable, "-m", "tests.runtime.cohort_memory_probe", str(root), str(clients)]
  if runtime is not None:
    command += ["--runtime", runtime]
  done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
                        cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                            os.path.abspath(__file__)))))
  assert done.returncode == 0, done.stderr[-3000:]
  report = json.loads(done.stdout.strip().splitlines()[-1])
  assert report["rounds_completed"] == 1
  return report


def test_default_runtime_peak_is_flat_in_the_cohort(tmp_path):
  small = _peak(tmp_path, SMALL)
  large = _peak(tmp_path, LARGE)
  assert small["runtime"] == large["runtime"] == "xla"  # Moved off the worker.
  total = lambda r: r["peak_self_mb"] + r["peak_children_mb"]
  assert total(large) - total(small) <= MARGIN_MB, (small, large)


def test_the_worker_would_grow_and_an_explicit_choice_is_kept(tmp_path):
  """The control: cohorts of 20 and 50 clients on TFF's worker (given explicitly, so kept)
  grow by more than the margin — the measurement can see what the default avoids."""
  small = _peak(tmp_path, SMALL, runtime="tff_worker")
  large = _peak(tmp_path, CONTROL_LARGE, runtime="tff_worker")
  assert small["runtime"] == large["runtime"] == "tff_worker"
  total = lambda r: r["peak_self_mb"] + r["peak_children_mb"]
  assert total(large) - total(small) > 2 * MARGIN_MB, (small, large)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
