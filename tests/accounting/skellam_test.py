"""The Skellam mechanism's Rényi DP bound (arXiv:2110.04995, Thm. 3.5) against the exact
Rényi divergence of shifted Skellam distributions, at small and large orders (large ε too),
and its composition against dp_accounting's conversion."""

import math

from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
import pytest
from scipy import special
from scipy import stats

from dp_fl.accounting import discrete_gaussian
from dp_fl.accounting import skellam


def _exact_rdp(shift: int, variance: float, alpha: int) -> float:
  """D_α(Sk + shift ‖ Sk) for Sk = Poisson(μ/2) − Poisson(μ/2), summed over its support."""
  half = variance / 2.0
  width = int(40 * math.sqrt(variance) + 60 + 3 * abs(shift))
  k = np.arange(-width, width + 1)
  log_q = stats.skellam.logpmf(k, half, half)
  log_p = stats.skellam.logpmf(k - shift, half, half)
  keep = np.isfinite(log_q) & np.isfinite(log_p)  # Far tails underflow (negligible mass).
  assert keep[width] and keep[width + shift]
  return float(special.logsumexp(alpha * log_p[keep] + (1 - alpha) * log_q[keep])
               / (alpha - 1))


@pytest.mark.parametrize("variance", [4.0, 25.0, 400.0, 1e4])
@pytest.mark.parametrize("shift", [1, 3, 10])
def test_the_bound_holds_against_exact_divergences(variance, shift):
  orders = [2, 3, 8, 32, 128]
  bound = skellam.rdp(orders, shift, shift, variance)
  for alpha, b in zip(orders, bound):
    exact = _exact_rdp(shift, variance, alpha)
    assert 0 < exact <= b * (1 + 1e-9), (alpha, exact, b)
  # Not vacuous: at a low order the bound is within 2x of the truth once μ >> Δ.
  if variance >= 100 * shift:
    assert bound[0] <= 2 * _exact_rdp(shift, variance, 2)


def test_a_vector_shift_is_bounded_by_its_norms():
  """Independent coordinates: the exact divergence is the sum over coordinates; the bound
  uses Δ₂ and Δ₁ of the whole vector."""
  rng = np.random.default_rng(0)
  for _ in range(6):
    shift = rng.integers(-4, 5, size=5)
    shift[0] = max(1, abs(shift[0]))
    variance = float(rng.uniform(3.0, 200.0))
    l2, l1 = float(np.linalg.norm(shift)), float(np.abs(shift).sum())
    for alpha in (2, 5, 40):
      exact = sum(_exact_rdp(int(s), variance, alpha) for s in shift if s)
      assert exact <= skellam.rdp([alpha], l2, l1, variance)[0] * (1 + 1e-9)


def test_large_variance_tends_to_the_gaussian_mechanism():
  orders = np.asarray(discrete_gaussian.RDP_ORDERS)
  gaussian = orders * 2.0 ** 2 / (2 * 1e6)
  np.testing.assert_allclose(skellam.rdp(orders, 2.0, 3.0, 1e6), gaussian, rtol=1e-4)


def test_composition_is_the_added_curves_converted():
  orders = np.asarray(discrete_gaussian.RDP_ORDERS)
  for k, mu in [(1, 50.0), (100, 2500.0), (3000, 4e5)]:  # Down to large ε.
    eps, order = skellam.composed_epsilon(4.0, 9.0, mu, k, 1e-5)
    want = rdp_privacy_accountant.compute_epsilon(orders, k * skellam.rdp(orders, 4.0, 9.0, mu),
                                                  1e-5)
    assert (eps, order) == pytest.approx(want)
  small, _ = skellam.composed_epsilon(4.0, 9.0, 2500.0, 100, 1e-5)
  assert small < skellam.composed_epsilon(4.0, 9.0, 2500.0, 400, 1e-5)[0]


@pytest.mark.parametrize("orders", [[1.0, 2.0], [2.5], []])
def test_orders_outside_the_theorem_are_refused(orders):
  with pytest.raises(ValueError, match="integers > 1"):
    skellam.rdp(orders, 1.0, 1.0, 10.0)


def test_an_l1_norm_below_the_l2_norm_is_refused():
  with pytest.raises(ValueError, match="l1_sensitivity"):
    skellam.rdp([2], 3.0, 1.0, 10.0)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
