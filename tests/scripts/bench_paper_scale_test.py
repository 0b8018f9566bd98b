"""scripts/bench_paper_scale: its run command, its memory sampling of a process tree, its table
and the refusal of bad flags (the measured runs themselves are docs/BENCHMARKS.md's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scripts import bench_paper_scale


def test_the_command_fits_the_cyclic_scheme_to_the_database():
  command = bench_paper_scale.command("/data", "/run", clients=100, rounds=3, population=1027,
                                     eval_clients=50, extra=["--workers", "h:1"])
  flags = dict(zip(command[3::2], command[4::2]))
  assert command[:3] == [sys.executable, "-m", "tasks.stackoverflow.train"]
  assert flags["--preset"] == "paper_table3" and flags["--clients_per_round"] == "100"
  # 1027 // 100 = 10 groups: min-sep 10, one participation in 3 rounds.
  assert flags["--min_sep"] == "10" and flags["--max_participations"] == "1"
  assert flags["--eval_every"] == flags["--checkpoint_every"] == "3"
  assert flags["--noise_multiplier"] == "1" and command[-2:] == ["--workers", "h:1"]


def test_peak_memory_sees_a_childs_allocation():
  child = subprocess.Popen([sys.executable, "-c", (
      "import subprocess, sys, time\n"
      "grandchild = subprocess.Popen([sys.executable, '-c', "
      "'import time; b = bytearray(300 * 2**20); b[::4096] = b\"x\" * len(b[::4096]); "
      "time.sleep(2)'])\n"
      "grandchild.wait()")])
  peak = bench_paper_scale.PeakMemory(child.pid)
  child.wait()
  assert peak.stop() > 300 * 2 ** 20  # The grandchild's 300 MiB, summed over the tree.


def test_the_table_shows_shares_and_the_extrapolation():
  result = {
      "clients": 100, "rounds": 2,
      "seconds_per_round": {"data": 1.0, "training": 98.0, "accounting": 1.0,
                            "checkpoint": 2.0, "total": 100.0},
      "share_of_round": {"data": 0.01, "training": 0.98, "accounting": 0.01},
      "training_seconds_per_client": 0.98, "checkpoint_bytes": 130e6,
      "peak_rss_bytes_all_processes": 5.5e9,
      "paper_2052_rounds_seconds": {"1": 2 * 86400.0, "4": 0.5 * 86400.0}}
  text = bench_paper_scale.table([result])
  assert "| 100 | 100.00 | 1.00 s (1.0 %) | 98.00 s (98.0 %) |" in text
  assert "2.00 s, 130 MB | 5.50 GB | 1: 2.00 d; 4: 0.50 d |" in text


@pytest.mark.parametrize("argv,match", [
    (["--data_dir", "{missing}"], "--data_dir='{missing}' is not a directory"),
    (["--data_dir", "{empty}"], "stackoverflow.sqlite does not exist.*--data_dir"),
    (["--data_dir", ".", "--clients", "10,x"], "--clients must be comma-separated"),
    (["--data_dir", ".", "--hosts", "0"], "--hosts must be comma-separated"),
    (["--data_dir", ".", "--rounds", "0"], "--rounds must be a positive integer"),
])
def test_bad_flags_are_named(tmp_path, argv, match):
  (tmp_path / "empty").mkdir()
  paths = {"missing": str(tmp_path / "missing"), "empty": str(tmp_path / "empty")}
  with pytest.raises(SystemExit, match=match.format(**paths)):
    bench_paper_scale.main([a.format(**paths) for a in argv])


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
