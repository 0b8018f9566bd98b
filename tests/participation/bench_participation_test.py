"""Smoke test of scripts/bench_participation.py at small scale (the full run is the benchmark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_small_benchmark_json():
  out = subprocess.run(
      [sys.executable, "-m", "scripts.bench_participation", "--population", "20000",
       "--report_goal", "130", "--rounds", "400", "--sampling_rounds", "20"],
      cwd=_ROOT, check=True, capture_output=True, text=True, timeout=120).stdout
  report = json.loads(out)
  assert report["population"] == 20000 and report["rounds"] == 400
  names = [r["scenario"] for r in report["results"]]
  assert names == ["always_available", "diurnal", "poisson", "balls_in_bins_fixed_size",
                   "uniform"]
  always = report["results"][0]
  # Timer of floor(N/m) one-hour rounds, always available: realized b = floor(N/m) = 153.
  assert always["realized_min_separation"] == 153 == always["optimistic_min_separation"]
  assert always["realized_max_participations"] == 3  # ceil(400 / 153)
  assert always["total_shortfall"] == 0
  assert sum(always["participation_histogram"]) == 20000
  for r in report["results"]:
    assert r["ms_per_round_mean"] > 0 and r["state_mb"] > 0


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
