"""Benchmark: rounds of paper 004's Table 3 StackOverflow job at a chosen cohort; prints JSON.

For each `--clients` C, runs the StackOverflow binary with `--preset=paper_table3` (the
4,050,748-parameter LSTM, ≤ 256 sentences a client in batches of 16, BLT d = 4, cyclic
participation) on `--data_dir` (TFF's format: the real file, or
`scripts/make_paper_database --scale S`) for `--rounds` rounds in a fresh process, and
reports, per round, the wall time of each stage of the training loop (summary.json's
`seconds_by_stage`: data, training — client work, aggregation and noise —, accounting,
checkpoint, evaluation), rounds/s, the peak resident memory of the whole job (the training
process and every child, sampled every 0.2 s), and the wall time 2052 rounds would take on
this machine and on H hosts with `--workers` (the clients' work divided by H; data,
accounting and the server step not).

The participation is the preset's cyclic scheme with the min-sep the database allows
(population // C) and σ is fixed (`--noise_multiplier 1`, no calibration): the benchmark
measures cost, not privacy. Evaluation runs once, at the end, on `--eval_clients` held-out
clients, and is reported apart (the preset evaluates every 100 rounds).

  .venv/bin/python -m scripts.make_paper_database --scale 0.003 --out_dir /tmp/paperdb
  .venv/bin/python -m scripts.bench_paper_scale --data_dir /tmp/paperdb --clients 10,100 \
      --rounds 3 [--hosts 1,4,16] [--local_epochs 1] [--format json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Optional, Sequence

PAPER_ROUNDS = 2052
PAPER_EVAL_EVERY = 100
PAPER_CHECKPOINT_EVERY = 50
SAMPLE_SECONDS = 0.2


def _tree_rss(pid: int) -> int:
  """Resident bytes of process `pid` and all its descendants (0 once it is gone)."""
  import psutil  # pylint: disable=g-import-not-at-top
  try:
    root = psutil.Process(pid)
    processes = [root, *root.children(recursive=True)]
  except psutil.Error:
    return 0
  total = 0
  for process in processes:
    try:
      total += process.memory_info().rss
    except psutil.Error:
      pass
  return total


class PeakMemory:
  """Samples the resident memory of a process tree every `SAMPLE_SECONDS` until stopped."""

  def __init__(self, pid: int):
    self.peak = 0
    self._pid = pid
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._sample, daemon=True)
    self._thread.start()

  def _sample(self) -> None:
    while not self._stop.is_set():
      self.peak = max(self.peak, _tree_rss(self._pid))
      self._stop.wait(SAMPLE_SECONDS)

  def stop(self) -> int:
    self._stop.set()
    self._thread.join()
    return self.peak


def command(data_dir: str, root_dir: str, clients: int, rounds: int, population: int,
            eval_clients: int, extra: Sequence[str] = ()) -> list[str]:
  """The StackOverflow binary's command for one measured run."""
  min_sep = max(1, population // clients)
  return [sys.executable, "-m", "tasks.stackoverflow.train", "--preset", "paper_table3",
          "--data_dir", data_dir, "--root_dir", root_dir, "--rounds", str(rounds),
          "--clients_per_round", str(clients), "--min_sep", str(min_sep),
          "--max_participations", str(-(-rounds // min_sep)), "--cooldown_rounds", "0",
          "--eval_every", str(rounds), "--checkpoint_every", str(rounds),
          "--eval_clients", str(eval_clients), "--noise_multiplier", "1",
          "--noise_guard", "off", "--format", "json", *extra]


def measure(data_dir: str, clients: int, rounds: int, population: int, eval_clients: int,
            hosts: Sequence[int], extra: Sequence[str] = ()) -> dict[str, Any]:
  """One run of `rounds` rounds of `clients` clients: per-round stage times, peak memory,
  the extrapolation to the paper's 2052 rounds."""
  with tempfile.TemporaryDirectory() as root:
    run_dir = os.path.join(root, "run")
    started = time.perf_counter()
    process = subprocess.Popen(
        command(data_dir, run_dir, clients, rounds, population, eval_clients, extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    peak = PeakMemory(process.pid)
    out, err = process.communicate()
    peak_bytes = peak.stop()
    wall = time.perf_counter() - started
    if process.returncode != 0:
      raise RuntimeError(f"the run of {clients} clients failed (exit {process.returncode}):\n"
                         + err[-3000:])
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as f:
      summary = json.load(f)
    checkpoint = _checkpoint_bytes(run_dir)
  del out
  done = summary["rounds_completed"]
  stages = summary["seconds_by_stage"]
  per_round = {k: stages[k] / done for k in ("data", "training", "accounting")}
  per_round["checkpoint"] = stages["checkpoint"]  # One checkpoint in the run (at the end).
  round_seconds = per_round["data"] + per_round["training"] + per_round["accounting"]
  evaluation = stages["evaluation"]

  def paper_seconds(h: int) -> float:
    rounds_part = PAPER_ROUNDS * (per_round["data"] + per_round["training"] / h
                                  + per_round["accounting"])
    return (rounds_part + PAPER_ROUNDS / PAPER_CHECKPOINT_EVERY * per_round["checkpoint"]
            + PAPER_ROUNDS / PAPER_EVAL_EVERY * evaluation)

  return {
      "clients": clients, "rounds": done,
      "seconds_per_round": {**per_round, "total": round_seconds},
      "share_of_round": {k: per_round[k] / round_seconds
                         for k in ("data", "training", "accounting")},
      "training_seconds_per_client": per_round["training"] / clients,
      "data_seconds_per_client": per_round["data"] / clients,
      "rounds_per_second": 1.0 / round_seconds,
      "evaluation_seconds": evaluation, "eval_clients": eval_clients,
      "checkpoint_bytes": checkpoint,
      "peak_rss_bytes_all_processes": peak_bytes,
      "wall_seconds": wall, "setup_seconds": summary["seconds_this_call"] - sum(stages.values()),
      "paper_2052_rounds_seconds": {str(h): paper_seconds(h) for h in hosts},
  }


def _checkpoint_bytes(run_dir: str) -> Optional[int]:
  directory = os.path.join(run_dir, "checkpoints")
  if not os.path.isdir(directory):
    return None
  sizes = {}
  for name in os.listdir(directory):
    path = os.path.join(directory, name)
    if os.path.isdir(path):
      sizes[name] = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    else:
      sizes[name] = os.path.getsize(path)
  return max(sizes.values()) if sizes else None


def _population(data_dir: str) -> int:
  from tasks.stackoverflow import database  # pylint: disable=g-import-not-at-top
  return int(database.check_database(data_dir)["train"]["clients"])


def _positive_ints(flag: str, text: str) -> list[int]:
  try:
    values = [int(v) for v in text.split(",") if v.strip()]
  except ValueError:
    values = []
  if not values or min(values) < 1:
    raise SystemExit(f"--{flag} must be comma-separated positive integers, e.g. 10,100; got "
                     f"{text!r}.")
  return values


def table(results: Sequence[dict[str, Any]]) -> str:
  """The human table of `main`."""
  lines = ["| clients | s/round | data | training | accounting | s/client | checkpoint s, MB "
           "| peak RSS, all processes | 2052 rounds (1 host; per host count) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
  for r in results:
    s, share = r["seconds_per_round"], r["share_of_round"]
    paper = r["paper_2052_rounds_seconds"]
    hosts = "; ".join(f"{h}: {v / 86400:.2f} d" for h, v in paper.items())
    size = (r["checkpoint_bytes"] or 0) / 1e6
    lines.append(
        f"| {r['clients']} | {s['total']:.2f} | {s['data']:.2f} s ({100 * share['data']:.1f} %)"
        f" | {s['training']:.2f} s ({100 * share['training']:.1f} %) | {s['accounting']:.3f} s "
        f"({100 * share['accounting']:.2f} %) | {r['training_seconds_per_client']:.3f} | "
        f"{s['checkpoint']:.2f} s, {size:.0f} MB | "
        f"{r['peak_rss_bytes_all_processes'] / 1e9:.2f} GB | {hosts} |")
  return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--data_dir", required=True,
                      help="directory of stackoverflow.sqlite in TFF's format, with the "
                           "per-client index (scripts/make_paper_database)")
  parser.add_argument("--clients", default="100,300,1000",
                      help="comma-separated cohorts, one run each")
  parser.add_argument("--rounds", type=int, default=3, help="measured rounds a cohort")
  parser.add_argument("--hosts", default="1,4,16",
                      help="host counts the 2052-round extrapolation is given for")
  parser.add_argument("--eval_clients", type=int, default=100,
                      help="held-out clients of the one evaluation (the preset's: 10000)")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  args, extra = parser.parse_known_args(argv)
  cohorts = _positive_ints("clients", args.clients)
  hosts = _positive_ints("hosts", args.hosts)
  if args.rounds < 1:
    raise SystemExit(f"--rounds must be a positive integer; got {args.rounds}.")
  if not os.path.isdir(args.data_dir):
    raise SystemExit(f"--data_dir={args.data_dir!r} is not a directory; make one with "
                     "`.venv/bin/python -m scripts.make_paper_database --scale 0.003 "
                     "--out_dir DIR`.")
  try:
    population = _population(args.data_dir)
  except ValueError as e:  # The database check's message names --data_dir and the fix.
    raise SystemExit(str(e)) from None
  too_many = [c for c in cohorts if c > population]
  if too_many:
    raise SystemExit(f"--clients {too_many} exceed the {population} train clients of "
                     f"{args.data_dir}; make a larger database (--scale of "
                     "scripts/make_paper_database) or lower --clients.")
  results = [measure(args.data_dir, c, args.rounds, population, args.eval_clients, hosts,
                     extra) for c in cohorts]
  report = {"results": results, "data_dir": args.data_dir, "population": population,
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                        "load_average": list(os.getloadavg())},
            "extra_flags": list(extra)}
  print(json.dumps(report, indent=1) if args.format == "json" else table(results))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
