"""Rényi DP of the distributed discrete Gaussian: the sum of n clients' N_Z(0, σ²) shares.

Kairouz, Liu & Steinke 2021 ("The Distributed Discrete Gaussian Mechanism for Federated
Learning with Secure Aggregation", arXiv:2102.06387), Prop. 14: each of n clients adds
independent discrete Gaussian noise N_Z(0, σ²)^d to its integer vector and only the sum is
released (secure aggregation). Between neighbours whose integer sums differ by Δ₂ in L2 and
Δ₁ in L1 norm, the release is (α, ε(α))-Rényi DP at every order α > 1 with

    ε(α) = min{ α/2 · μ₂² + τ d,  α/2 (μ₂² + 2μ₁τ + τ² d),  α/2 (μ₂ + τ√d)² },
    μ_q = Δ_q/(√n σ),   τ = 10 Σ_{k=1}^{n−1} exp(−2π²σ² k/(k+1)),

τ measuring how far the sum of n discrete Gaussians is from one discrete Gaussian of variance
nσ². It is converted to (ε, δ) by dp_accounting's RDP conversion over `RDP_ORDERS` (integers
2..256 and a few larger, as in the paper's code). For replace-one neighbours Δ_q is twice a
client's norm bound.

Used by `dp_fl.aggregators.distributed_dp` to account TFF 0.87's
`DistributedDpSumFactory` (mechanism 'distributed_dgauss'), which states no guarantee of its
own (its DP event is `UnsupportedDpEvent`). Pure NumPy + dp_accounting.
"""

from __future__ import annotations

import math

from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np

from dp_fl import _checks

# Rényi orders of the conversion (integers, as in the paper's code, and a few larger ones).
RDP_ORDERS = tuple(float(a) for a in range(2, 257)) + (320.0, 384.0, 512.0, 768.0, 1024.0,
                                                       2048.0, 4096.0)


def sum_tau(sampled_stddev: float, num_clients: int) -> float:
  """τ = 10 Σ_{k=1}^{n−1} exp(−2π²σ² k/(k+1)) of Prop. 14 (arXiv:2102.06387)."""
  n = _checks.check_positive_int("num_clients", num_clients)
  sigma = _checks.check_positive("sampled_stddev", sampled_stddev)
  shares = np.arange(1, n, dtype=np.float64)
  return 10.0 * float(np.sum(np.exp(-2.0 * math.pi ** 2 * sigma ** 2 * shares / (shares + 1))))


def _rdp_curve(mu2: float, mu1: float, tau: float, dimension: int) -> np.ndarray:
  """Prop. 14's ε(α) over `RDP_ORDERS` for scaled sensitivities μ₂, μ₁ and inflation τ (each
  of the three terms non-decreasing in μ₂, μ₁ and τ)."""
  alpha = np.asarray(RDP_ORDERS)
  return np.minimum.reduce([
      alpha / 2 * mu2 ** 2 + tau * dimension,
      alpha / 2 * (mu2 ** 2 + 2 * mu1 * tau + tau ** 2 * dimension),
      alpha / 2 * (mu2 + math.sqrt(dimension) * tau) ** 2])


def sum_epsilon(l2_sensitivity: float, l1_sensitivity: float, sampled_stddev: float,
                num_clients: int, dimension: int, delta: float
                ) -> tuple[float, float, float]:
  """(ε, order, τ) of the sum of n shares N_Z(0, σ²)^d at δ (Prop. 14 of arXiv:2102.06387).

  Args:
    l2_sensitivity, l1_sensitivity: Δ₂, Δ₁ of the integer sum between neighbours.
    sampled_stddev: σ of each client's discrete Gaussian share.
    num_clients: n, the number of shares.
    dimension: d (coordinates of the sum; d' after padding for a rotation).
    delta: δ.

  Returns:
    ε at δ (the RDP conversion's, minimized over `RDP_ORDERS`), the order achieving it, τ.
  """
  n = _checks.check_positive_int("num_clients", num_clients)
  return composed_epsilon(l2_sensitivity, l1_sensitivity, sampled_stddev, n, n, dimension, 1,
                          delta)


def composed_epsilon(l2_sensitivity: float, l1_sensitivity: float, sampled_stddev: float,
                     fewest_clients: int, most_clients: int, dimension: int, releases: int,
                     delta: float) -> tuple[float, float, float]:
  """(ε, order, τ) at δ of `releases` sums, each of between `fewest_clients` and
  `most_clients` shares N_Z(0, σ²)^d (realized cohorts vary).

  Fewer shares mean less noise (μ_q = Δ_q/(√n σ) grows) but more shares mean a sum further
  from one discrete Gaussian (τ grows with n), so neither end of the range is the worst case
  in general: every term of Prop. 14 is non-decreasing in μ and τ, so μ at the fewest and τ
  at the most shares bound every n in between; the curves of the releases add (RDP
  composition). With fewest = most = n and one release it is `sum_epsilon`.
  """
  low = _checks.check_positive_int("fewest_clients", fewest_clients)
  high = _checks.check_positive_int("most_clients", most_clients)
  if high < low:
    raise ValueError(f"`most_clients` = {high} is below `fewest_clients` = {low}.")
  k = _checks.check_positive_int("releases", releases)
  sigma = _checks.check_positive("sampled_stddev", sampled_stddev)
  tau = sum_tau(sigma, high)
  mu2 = l2_sensitivity / (math.sqrt(low) * sigma)
  mu1 = l1_sensitivity / (math.sqrt(low) * sigma)
  rdp = k * _rdp_curve(mu2, mu1, tau, dimension)
  epsilon, order = rdp_privacy_accountant.compute_epsilon(np.asarray(RDP_ORDERS), rdp, delta)
  return float(epsilon), float(order), tau
