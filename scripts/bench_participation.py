"""Benchmark of the participation schedulers at production scale; prints JSON.

Production setting of paper 004 Sec. 5: populations of millions of devices,
report goal 6.5K, ~2000 rounds. Scenarios:

* ``always_available``: every device always available, fixed 1 h rounds and a
  timer of ``floor(N / m)`` hours, i.e. the optimistic min-sep
  ``floor(population / report_goal)`` of paper 004 Sec. 5 ("Extrapolation");
  the realized min-sep should equal it.
* ``diurnal``: nightly 8 h windows in local time, offsets in +-3 h, daily
  probability 0.5, a 3-day timer (paper 004 Sec. 1's example) and rounds of
  0.5-1.5 h; shows how availability moves realized (b, k) and shortfalls.
* Sampling schemes (Poisson q = m/N, balls-in-bins NB = floor(N/m) padded to
  m, uniform) for per-round cost.

Targets (issue "Participation"): <= 50 ms per round and <= 200 MB of state.

Run: ``python -m scripts.bench_participation`` (flags: --population,
--report_goal, --rounds, --sampling_rounds, --seed).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from dp_fl.participation import availability
from dp_fl.participation import base
from dp_fl.participation import device_timer
from dp_fl.participation import extrapolation
from dp_fl.participation import sampling

_MS_PER_ROUND_TARGET = 50.0
_STATE_MB_TARGET = 200.0


def _time_rounds(scheduler: base.Scheduler, rounds: int) -> dict:
  times = np.empty(rounds)
  for i in range(rounds):
    t0 = time.perf_counter()
    scheduler.next_round()
    times[i] = time.perf_counter() - t0
  ms = times * 1e3
  return {"rounds": rounds, "ms_per_round_mean": float(ms.mean()),
          "ms_per_round_p50": float(np.median(ms)),
          "ms_per_round_p95": float(np.percentile(ms, 95)),
          "ms_per_round_max": float(ms.max())}


def _state_report(scheduler: base.Scheduler) -> dict:
  t0 = time.perf_counter()
  blob = scheduler.to_bytes()
  t_save = time.perf_counter() - t0
  t0 = time.perf_counter()
  type(scheduler).from_bytes(blob)
  t_load = time.perf_counter() - t0
  return {"state_mb": len(blob) / 1e6, "save_s": t_save, "restore_s": t_load}


def _realized(scheduler: base.Scheduler) -> dict:
  r = scheduler.realized()
  return {"realized_min_separation": r.min_separation,
          "realized_max_participations": r.max_participations,
          "participation_histogram": list(r.participation_histogram),
          "total_participations": r.total_participations}


def _device_timer_case(name: str, population: int, report_goal: int, rounds: int, seed: int,
                       **kwargs) -> dict:
  t0 = time.perf_counter()
  scheduler = device_timer.DeviceTimerScheduler(population, report_goal, rounds, seed, **kwargs)
  build_s = time.perf_counter() - t0
  out = {"scenario": name, "build_s": build_s}
  out.update(_time_rounds(scheduler, rounds))
  out.update(_state_report(scheduler))
  out.update(_realized(scheduler))
  log = scheduler.shortfall_log()
  out.update({
      "enforced_min_separation": scheduler.enforced_min_separation,
      "optimistic_min_separation": extrapolation.optimistic_min_separation(population,
                                                                           report_goal),
      "population_over_report_goal": population / report_goal,
      "rounds_short": len(log), "total_shortfall": int(sum(s for _, s in log)),
      "simulated_hours": scheduler.clock_hours,
      "meets_ms_target": out["ms_per_round_mean"] <= _MS_PER_ROUND_TARGET,
      "meets_state_target": out["state_mb"] <= _STATE_MB_TARGET,
  })
  return out


def _sampling_case(name: str, scheduler: base.Scheduler, rounds: int) -> dict:
  out = {"scenario": name}
  out.update(_time_rounds(scheduler, rounds))
  out.update(_state_report(scheduler))
  r = scheduler.realized()
  out.update({"realized_min_separation": r.min_separation,
              "realized_max_participations": r.max_participations,
              "mean_cohort": r.total_participations / rounds,
              "meets_ms_target": out["ms_per_round_mean"] <= _MS_PER_ROUND_TARGET,
              "meets_state_target": out["state_mb"] <= _STATE_MB_TARGET})
  return out


def run(population: int, report_goal: int, rounds: int, sampling_rounds: int, seed: int) -> dict:
  """Runs all scenarios and returns the JSON-able report."""
  b = extrapolation.optimistic_min_separation(population, report_goal)
  results = [
      _device_timer_case("always_available", population, report_goal, rounds, seed,
                         min_separation_hours=float(b), round_duration_hours=1.0),
      _device_timer_case(
          "diurnal", population, report_goal, rounds, seed, min_separation_hours=72.0,
          round_duration_hours=(0.5, 1.5),
          availability=availability.DiurnalAvailability.random_timezones(
              population, seed, offset_range_hours=(-3.0, 3.0), window_start_hour=22.0,
              window_hours=8.0, daily_probability=0.5)),
      _sampling_case("poisson", sampling.PoissonScheduler(population, report_goal / population,
                                                          seed), sampling_rounds),
      _sampling_case("balls_in_bins_fixed_size",
                     sampling.BallsInBinsScheduler(population, b, seed, fixed_size=report_goal),
                     sampling_rounds),
      _sampling_case("uniform", sampling.UniformScheduler(population, report_goal, seed),
                     sampling_rounds),
  ]
  always = results[0]
  return {
      "benchmark": "participation",
      "population": population, "report_goal": report_goal, "rounds": rounds,
      "machine": platform.platform(), "python": platform.python_version(),
      "numpy": np.__version__,
      "targets": {"ms_per_round": _MS_PER_ROUND_TARGET, "state_mb": _STATE_MB_TARGET},
      "min_sep_vs_population_over_report_goal": {
          "realized": always["realized_min_separation"],
          "population_over_report_goal": population / report_goal,
          "floor": b},
      "all_targets_met": all(r["meets_ms_target"] and r["meets_state_target"] for r in results),
      "results": results,
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--population", type=int, default=1_000_000)
  parser.add_argument("--report_goal", type=int, default=6500)
  parser.add_argument("--rounds", type=int, default=2000)
  parser.add_argument("--sampling_rounds", type=int, default=300)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  print(json.dumps(run(args.population, args.report_goal, args.rounds, args.sampling_rounds,
                       args.seed), indent=2))


if __name__ == "__main__":
  main()
