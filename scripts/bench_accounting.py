"""Benchmark: ε of a 4000-round BLT schedule (paper 004, Sec. 3.1); prints JSON.

Goal (issue "Privacy accounting"): ≤ 0.1 s for sensitivity (Thm 3.1) + ρ + exact (ε, δ)
of a 4000-round schedule. Run: ``.venv/bin/python -m scripts.bench_accounting``.
"""

from __future__ import annotations

import json
import os
import platform
import time

from dp_fl.accounting import zcdp
from dp_fl.mechanisms import blt
from dp_fl.mechanisms import catalog

GOAL_SECONDS = 0.1


def main() -> int:
  mechanism = catalog.BltMechanism(blt.PUBLISHED_BLTS[400])
  times, result = [], None
  for _ in range(6):
    start = time.perf_counter()
    sens = mechanism.sensitivity(4000, 400, 10)
    result = zcdp.matrix_mechanism_guarantee(sens.value, 7.379, 1e-10)
    times.append(time.perf_counter() - start)
  best = min(times[1:])
  print(json.dumps({
      "schedule": {"rounds": 4000, "min_sep": 400, "max_participations": 10,
                   "mechanism": "App. A BLT (b = 400)", "noise_multiplier": 7.379,
                   "delta": 1e-10},
      "rho": result.rho, "epsilon": result.epsilon, "first_call_seconds": times[0],
      "best_seconds": best, "goal_seconds": GOAL_SECONDS, "meets_goal": best <= GOAL_SECONDS,
      "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                  "load_average": list(os.getloadavg())}}, indent=1))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
