"""cpSGD's privacy (paper 000, Thm. 1, 3, 4, Eq. 10) and its composition over rounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dp_fl.accounting import binomial
from dp_fl.accounting import cpsgd
from dp_fl.mechanisms import cpsgd as protocol_lib


def test_eq10_sensitivities_bound_the_coupled_quantization_difference():
  # The module's proof: with a shared dither the level difference of two inputs 2D apart
  # exceeds Δ₁ (L1) or Δ₂ (L2) with probability <= δ. Check it empirically on the worst
  # inputs (the difference spread over all coordinates) at δ = 0.05: exceedances must be
  # rare (<= 2δ over 2000 draws fails with probability < 1e-9 if the bound holds).
  rng = np.random.default_rng(0)
  d, k, x_max, clip, delta = 256, 5, 0.3, 1.0, 0.05
  l1, l2, linf = cpsgd.sensitivities(k, x_max, clip, d, delta)
  x = np.full(d, clip / math.sqrt(d))
  scale = (k - 1) / (2 * x_max)
  pos, pos2 = (x + x_max) * scale, (-x + x_max) * scale
  exceed = 0
  for _ in range(2000):
    v = rng.random(d)
    diff = np.floor(pos + v) - np.floor(pos2 + v)
    exceed += (np.abs(diff).sum() > l1) or (np.linalg.norm(diff) > l2) or (
        np.abs(diff).max() > linf)
  assert exceed <= 2 * delta * 2000
  # And not vacuous: the L2 bound is within a small factor of what is realized.
  assert l2 < 3 * np.linalg.norm(diff)


def test_single_round_is_theorem_1_at_n_times_m():
  g = cpsgd.composed_epsilon(16, 100, 0.5, 0.05, 1.0, 1024, 200, 1, 1e-5)
  l1, l2, linf = cpsgd.sensitivities(16, 0.05, 1.0, 1024, 1e-5 / 3)
  direct = binomial.binomial_mechanism_epsilon(200 * 100, 0.5, 1.0, l1, l2, linf, 1024,
                                               1e-5 / 3)
  assert g.composition == "basic" and g.epsilon == pytest.approx(direct.epsilon)
  assert g.round_delta == pytest.approx(1e-5)


def test_composition_takes_the_better_of_basic_and_advanced():
  args = (16, 10 ** 7, 0.5, 0.05, 1.0, 1024, 200)
  one = cpsgd.composed_epsilon(*args, 1, 1e-5)
  many = cpsgd.composed_epsilon(*args, 100, 1e-5)
  assert many.composition == "advanced" and many.epsilon < 100 * one.epsilon
  # Advanced composition's formula at δ₀ = δ/(6k), δ' = δ/2.
  e0 = many.round_guarantee.epsilon
  assert many.epsilon == pytest.approx(
      math.sqrt(2 * 100 * math.log(2 / 1e-5)) * e0 + 100 * e0 * math.expm1(e0))
  few = cpsgd.composed_epsilon(*args, 2, 1e-5)
  assert few.composition == "basic"


def test_epsilon_decreases_with_trials_and_cohort_and_is_inf_below_theorem_1():
  eps = [cpsgd.composed_epsilon(16, m, 0.5, 0.05, 1.0, 1024, 100, 3, 1e-5).epsilon
         for m in (1, 10, 100, 1000, 100000)]
  assert eps[0] == math.inf and all(a >= b for a, b in zip(eps, eps[1:])) and eps[-1] < 10
  small = cpsgd.composed_epsilon(16, 1000, 0.5, 0.05, 1.0, 1024, 10, 3, 1e-5).epsilon
  assert small > eps[3]  # Fewer clients, less noise.
  assert cpsgd.composed_epsilon(16, 0, 0.5, 0.05, 1.0, 1024, 100, 3, 1e-5).epsilon == math.inf


@pytest.mark.parametrize("target,k", [(1.0, 1), (4.0, 1), (8.0, 5)])
def test_trials_for_epsilon_is_the_smallest_m(target, k):
  args = (16, 0.5, 0.05, 1.0, 4096, 500, k)
  m = cpsgd.trials_for_epsilon(*args, target, 1e-5)
  assert cpsgd.composed_epsilon(16, m, *args[1:], 1e-5).epsilon <= target
  assert cpsgd.composed_epsilon(16, m - 1, *args[1:], 1e-5).epsilon > target


def test_gaussian_equivalence_as_levels_grow():
  # Paper 000 after Thm. 1: with the noise std fixed, finer scales approach the Gaussian.
  n, d, delta = 1000, 2 ** 10, 1e-5
  ratios = []
  for k in (4, 64, 1024):
    x_max = protocol_lib.rotated_x_max(1.0, n, d, delta)
    m = cpsgd.trials_for_epsilon(k, 0.5, x_max, 1.0, d, n, 1, 2.0, delta)
    protocol = protocol_lib.Protocol(k, m, 0.5, x_max, 1.0)
    ratios.append(protocol.mse_bound(n, d) / protocol_lib.gaussian_mse(1.0, n, d, 2.0, delta))
  assert ratios[0] > ratios[1] > ratios[2] and ratios[2] < 1.5


def test_huge_per_round_epsilon_composes_without_overflow():
  # ε₀ ≈ 1000 per round: e^ε₀ overflows a float; basic composition is the answer.
  x_max = protocol_lib.rotated_x_max(1.0, 100, 11830, 1e-9)
  g = cpsgd.composed_epsilon(256, 64, 0.5, x_max, 1.0, 16384, 100, 3, 1e-9)
  assert g.composition == "basic" and math.isfinite(g.epsilon) and g.epsilon > 700
  m = cpsgd.trials_for_epsilon(256, 0.5, x_max, 1.0, 16384, 100, 3, 8.0, 1e-9)
  assert cpsgd.composed_epsilon(256, m, 0.5, x_max, 1.0, 16384, 100, 3, 1e-9).epsilon <= 8.0


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
