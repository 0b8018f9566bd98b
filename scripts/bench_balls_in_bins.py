"""Benchmark: balls-in-bins Monte Carlo sigma calibration (paper 003, Alg. 2).

Default setting of paper 003 Sec. 5.1: n = 2048 rounds, E = 16 epochs (so
b = 128 bins), m = 2^20 Monte Carlo samples, a 4-buffer BLT C, calibrated to
(eps, 8e-6) as in Sec. 5.2 (the delta_verify for a released delta of 1e-5).
Prints one JSON object: timings, sigma with its Monte Carlo standard error,
the unamplified sigma, and the Estimate-Verify-Release sample size.

  .venv/bin/python -m scripts.bench_balls_in_bins [--epsilons=1,4] [--verify]
"""

from __future__ import annotations

import json
import os
import time
import warnings
from typing import Sequence

from absl import app
from absl import flags
import numpy as np

from dp_fl.accounting import balls_in_bins
from dp_fl.accounting import verification

_ROUNDS = flags.DEFINE_integer("num_rounds", 2048, "n, total rounds.")
_EPOCHS = flags.DEFINE_integer("num_epochs", 16, "E; bins b = n / E.")
_SAMPLES = flags.DEFINE_integer("num_samples", 2**20, "Monte Carlo samples m.")
_EPSILONS = flags.DEFINE_list("epsilons", ["1.0"], "Target epsilons.")
_DELTA = flags.DEFINE_float("delta", 8e-6, "Calibration delta (delta_verify).")
_RELEASE_DELTA = flags.DEFINE_float("release_delta", 1e-5,
                                    "Delta released by Estimate-Verify-Release.")
_THETA = flags.DEFINE_list("theta", ["0.999", "0.99", "0.9", "0.5"],
                           "BLT decays theta_j.")
_OMEGA = flags.DEFINE_list("omega", ["0.01", "0.05", "0.1", "0.2"],
                           "BLT output scales omega_j.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the calibration sample.")
_CHUNK = flags.DEFINE_integer("chunk_size", balls_in_bins.DEFAULT_CHUNK_SIZE,
                              "Rows per chunk (multiple of 1024).")
_VERIFY = flags.DEFINE_bool(
    "verify", False, "Also run Estimate-Verify-Release (Alg. 1) on a fresh "
    "seed with the required sample size (~5e7 samples at delta=1e-5: slow).")


def blt_coefficients(num_rounds: int, theta: np.ndarray,
                     omega: np.ndarray) -> np.ndarray:
  """c_0 = 1, c_t = sum_j omega_j theta_j^(t-1) (BLT Toeplitz coefficients)."""
  t = np.arange(1, num_rounds)[:, None]
  return np.concatenate([[1.0], (omega * theta ** (t - 1)).sum(axis=1)])


def run(num_rounds: int, num_epochs: int, num_samples: int,
        epsilons: Sequence[float], delta: float, release_delta: float,
        theta: np.ndarray, omega: np.ndarray, seed: int, chunk_size: int,
        verify: bool) -> dict[str, object]:
  """Calibrates sigma for each epsilon and returns the JSON report."""
  if num_rounds % num_epochs:
    raise ValueError(f"`num_rounds` must be a multiple of `num_epochs`; got "
                     f"{num_rounds} and {num_epochs}.")
  bins = num_rounds // num_epochs
  coefs = blt_coefficients(num_rounds, theta, omega)
  t0 = time.perf_counter()
  pair = balls_in_bins.dominating_pair(num_bins=bins, num_epochs=num_epochs,
                                       toeplitz_coefs=coefs)
  gram_s = time.perf_counter() - t0
  results = []
  for eps in epsilons:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always", balls_in_bins.InsufficientSamplesWarning)
      t0 = time.perf_counter()
      cal = balls_in_bins.calibrate_noise_multiplier(
          pair, epsilon=eps, delta=delta, num_samples=num_samples, seed=seed,
          chunk_size=chunk_size)
      seconds = time.perf_counter() - t0
    entry = {
        "epsilon": eps,
        "calibration_seconds": round(seconds, 3),
        "noise_multiplier": cal.noise_multiplier,
        "noise_multiplier_standard_error": cal.noise_multiplier_standard_error,
        "delta_hat": cal.delta_hat,
        "delta_standard_error": cal.delta_standard_error,
        "num_tail_samples": cal.num_tail_samples,
        "num_passes": cal.num_passes,
        "unamplified_noise_multiplier": cal.unamplified_noise_multiplier,
        "sigma_reduction_vs_unamplified": 1.0 - cal.noise_multiplier
                                          / cal.unamplified_noise_multiplier,
        "warnings": [str(w.message) for w in caught],
    }
    if verify:
      t0 = time.perf_counter()
      evr = balls_in_bins.estimate_verify_release(
          pair, noise_multiplier=cal.noise_multiplier * 1.05, epsilon=eps,
          delta=release_delta, delta_verify=delta, seed=seed + 1,
          chunk_size=chunk_size)
      entry["verify"] = {
          "noise_multiplier": evr.noise_multiplier,
          "verified": evr.verified, "delta_hat": evr.delta_hat,
          "standard_error": evr.standard_error,
          "num_samples": evr.num_samples,
          "failure_probability": evr.failure_probability,
          "seconds": round(time.perf_counter() - t0, 3)}
    results.append(entry)
  return {
      "benchmark": "balls_in_bins_calibration",
      "paper": "003 Alg. 2, Lemma 3.2",
      "num_rounds": num_rounds, "num_epochs": num_epochs, "num_bins": bins,
      "num_samples": num_samples, "delta": delta,
      "blt_theta": theta.tolist(), "blt_omega": omega.tolist(),
      "chunk_size": chunk_size, "seed": seed,
      "cpu_count": os.cpu_count(),
      "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
      "gram_seconds": round(gram_s, 4),
      "evr_required_num_samples": verification.required_num_samples(
          delta, release_delta),
      "results": results,
  }


def main(argv: Sequence[str]) -> None:
  del argv
  report = run(
      num_rounds=_ROUNDS.value, num_epochs=_EPOCHS.value,
      num_samples=_SAMPLES.value,
      epsilons=[float(e) for e in _EPSILONS.value], delta=_DELTA.value,
      release_delta=_RELEASE_DELTA.value,
      theta=np.array([float(x) for x in _THETA.value]),
      omega=np.array([float(x) for x in _OMEGA.value]), seed=_SEED.value,
      chunk_size=_CHUNK.value, verify=_VERIFY.value)
  print(json.dumps(report, indent=2))


if __name__ == "__main__":
  app.run(main)
