"""Rényi DP of the distributed Skellam mechanism: the sum of n clients' Skellam shares.

Agarwal, Kairouz & Liu 2021 ("The Skellam Mechanism for Differentially Private Federated
Learning", arXiv:2110.04995), Thm. 3.5: each of n clients adds independent noise
Sk(σ²/2, σ²/2)^d (the difference of two Poisson(σ²/2), variance σ²) to its integer vector, and
only the sum is released (secure aggregation); a sum of Skellam shares is Skellam with
variance μ = n σ². Between neighbours whose integer sums differ by Δ₂ in L2 and Δ₁ in L1 norm
the release is (α, ε(α))-Rényi DP at every integer order α > 1 with

    ε(α) = α Δ₂² / (2μ) + min{ ((2α − 1) Δ₂² + 6 Δ₁) / (4μ²),  3 Δ₁ / (2μ) }

— the Gaussian mechanism's α Δ₂²/(2μ) plus a term that vanishes as μ grows. Composed over
releases by adding the curves; converted to (ε, δ) by dp_accounting's RDP conversion over
`discrete_gaussian.RDP_ORDERS` (the theorem is stated for integer orders; every order used is
one, checked). Tested against the exact Rényi divergence of shifted Skellam distributions
(tests/accounting/skellam_test.py). Pure NumPy + dp_accounting.
"""

from __future__ import annotations

from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np

from dp_fl import _checks
from dp_fl.accounting import discrete_gaussian


def rdp(orders, l2_sensitivity: float, l1_sensitivity: float, variance: float) -> np.ndarray:
  """ε(α) of Thm. 3.5 (arXiv:2110.04995) at each integer order α > 1, one release.

  Args:
    orders: integer Rényi orders > 1 (the theorem's range; others are refused).
    l2_sensitivity, l1_sensitivity: Δ₂, Δ₁ of the integer sum between neighbours (Δ₁ >= Δ₂).
    variance: μ, the variance of each coordinate of the summed Skellam noise (n σ²).
  """
  alpha = np.asarray(orders, dtype=np.float64)
  if alpha.ndim != 1 or alpha.size == 0 or np.any(alpha <= 1) or np.any(alpha != np.round(alpha)):
    raise ValueError(f"`orders` must be integers > 1 (Thm. 3.5 of arXiv:2110.04995 holds for "
                     f"integer orders only); got {np.asarray(orders)!r}.")
  l2 = _checks.check_positive("l2_sensitivity", l2_sensitivity)
  l1 = _checks.check_positive("l1_sensitivity", l1_sensitivity)
  if l1 < l2 * (1.0 - 1e-12):
    raise ValueError(f"`l1_sensitivity` = {l1!r} is below `l2_sensitivity` = {l2!r}; an L1 "
                     "norm is never smaller than the L2 norm of the same vector.")
  mu = _checks.check_positive("variance", variance)
  return (alpha * l2 ** 2 / (2.0 * mu)
          + np.minimum(((2.0 * alpha - 1.0) * l2 ** 2 + 6.0 * l1) / (4.0 * mu ** 2),
                       3.0 * l1 / (2.0 * mu)))


def composed_epsilon(l2_sensitivity: float, l1_sensitivity: float, variance: float,
                     releases: int, delta: float) -> tuple[float, float]:
  """(ε, order) at δ of `releases` compositions of one Skellam release (RDP curves added)."""
  k = _checks.check_positive_int("releases", releases)
  d = _checks.check_open_unit("delta", delta)
  orders = np.asarray(discrete_gaussian.RDP_ORDERS)
  curve = k * rdp(orders, l2_sensitivity, l1_sensitivity, variance)
  epsilon, order = rdp_privacy_accountant.compute_epsilon(orders, curve, d)
  return float(epsilon), float(order)
