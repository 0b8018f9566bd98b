"""Benchmark: Monte Carlo releases at the cost the job needs (issue #44). Prints JSON.

Each case times what a training run does before its first round under an amplifying
participation — σ calibrated for ε = 8 at δ = 1e-5, then verified on a fresh sample of the
size Thm 2.1 requires (δ_verify = δ/2, the training runs') — or, with `--paper`, the
calibration alone at paper 004's StackOverflow schedule (an estimate; its verification would
take one more pass of 7.5M samples):

* `balls_in_bins_8_rounds`: the issue's example, a balls-in-bins StackOverflow job of 8 rounds
  and 5 clients a round of 5,446 users (1,089 bins, 8 of them used), BLT;
* `b_min_sep_quick`: the StackOverflow quick schedule under b-min-sep (n = 100, b = 100, an
  expected 50 of 5,446 a round), BLT;
* `--availability`: the quick schedule with 30 of 5,446 a round under the device-availability
  variant (`--availability=diurnal`, a round an hour: 6 classes of windows, each calibrated
  and verified), BLT;
* `--paper`: n = 2052, b = 342, an expected 1,000 of 342,477 a round, BandMF (exact) and BLT
  (bounded), calibration only.

  .venv/bin/python -m scripts.bench_b_min_sep [--availability] [--paper]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Optional, Sequence

from dp_fl import exits
from dp_fl.accounting import amplification
from dp_fl.accounting import b_min_sep
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import families  # pylint: disable=unused-import  (every mechanism)
from dp_fl.participation import schemes

EPSILON, DELTA = 8.0, 1e-5


def _release(pair: Any) -> dict[str, Any]:
  started = time.perf_counter()
  release = amplification.release_noise_multiplier(
      pair, epsilon=EPSILON, delta=DELTA, seed=0,
      verify_ratio=amplification.TRAINING_VERIFY_RATIO)
  return {"seconds": round(time.perf_counter() - started, 1), "verified": release.verified,
          "noise_multiplier": release.noise_multiplier,
          "noise_multiplier_without_amplification":
              release.noise_multiplier_without_amplification,
          "verification_samples": release.num_samples,
          "calibration_margin": release.calibration_margin}


def cases(paper: bool, availability: bool = False) -> dict[str, Any]:
  out: dict[str, Any] = {}
  blt8 = catalog.build("blt", rounds=8, min_sep=8, max_participations=1).mechanism
  out["balls_in_bins_8_rounds"] = dict(
      bins=5446 // 5, rounds=8,
      **_release(amplification.balls_in_bins_pair(blt8, num_bins=5446 // 5, rounds=8)))
  quick = catalog.build("blt", rounds=100, min_sep=100, max_participations=1).mechanism
  sampling = b_min_sep.BMinSepSampling(
      100, 100, b_min_sep.BMinSepSampling.probability_for_rate(50 / 5446, 100))
  out["b_min_sep_quick"] = dict(rounds=100, min_sep=100,
                                sampling_probability=sampling.sampling_probability,
                                **_release(amplification.b_min_sep_pair(quick, sampling)))
  if availability:
    classes = schemes.b_min_sep_availability("diurnal", 5446, 0, 100, 1.0)
    sampling = b_min_sep.BMinSepSampling(
        100, 100, schemes.b_min_sep_probability(30 / 5446, 100, 100, True, classes),
        availability=classes)
    out["b_min_sep_quick_diurnal"] = dict(
        rounds=100, min_sep=100, sampling_probability=sampling.sampling_probability,
        availability_classes=classes.num_classes,
        **_release(amplification.b_min_sep_pair(quick, sampling)))
  if paper:
    sampling = b_min_sep.BMinSepSampling(
        2052, 342, b_min_sep.BMinSepSampling.probability_for_rate(1000 / 342477, 342))
    for name in ("bandmf", "blt"):
      mechanism = catalog.build(name, rounds=2052, min_sep=342, max_participations=6).mechanism
      pair = amplification.b_min_sep_pair(mechanism, sampling)
      started = time.perf_counter()
      cal = b_min_sep.calibrate_noise_multiplier(
          pair, epsilon=EPSILON, delta=DELTA / 2, num_samples=2 ** 20, seed=0)
      out[f"b_min_sep_paper_{name}"] = {
          "seconds": round(time.perf_counter() - started, 1), "rounds": 2052, "min_sep": 342,
          "sampling_probability": sampling.sampling_probability,
          "noise_multiplier": cal.noise_multiplier,
          "noise_multiplier_standard_error": cal.noise_multiplier_standard_error,
          "noise_multiplier_without_amplification": cal.unamplified_noise_multiplier,
          "samples": cal.num_samples, "exact_likelihood_ratio": pair.exact}
  return out


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--availability", action="store_true",
                      help="also the quick schedule under diurnal device availability (minutes)")
  parser.add_argument("--paper", action="store_true",
                      help="also paper 004's StackOverflow schedule (tens of minutes)")
  exits.add_debug_flag(parser)
  args = parser.parse_args(argv)

  def body() -> int:
    print(json.dumps({"epsilon": EPSILON, "delta": DELTA, **cases(args.paper, args.availability)}, indent=1))
    return exits.COMPLETED

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
