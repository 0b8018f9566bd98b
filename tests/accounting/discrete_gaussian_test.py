"""Tests for dp_fl/accounting/discrete_gaussian.py (Prop. 14 of arXiv:2102.06387)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dp_fl.accounting import discrete_gaussian
from dp_fl.accounting import zcdp


def test_epsilon_is_the_zcdp_conversion_when_tau_vanishes():
  l2, sigma, n, d, delta = 40.0, 30.0, 100, 1024, 1e-6
  epsilon, order, tau = discrete_gaussian.sum_epsilon(l2, l2 * math.sqrt(d), sigma, n, d,
                                                      delta)
  assert tau < 1e-100 and order >= 2
  rho = l2 ** 2 / (2 * n * sigma ** 2)
  cks = zcdp.epsilon_from_rho_cks(rho, delta)  # The same conversion over real orders.
  assert cks - 1e-9 <= epsilon <= 1.01 * cks
  # A small σ makes τ count: the guarantee can only get worse.
  worse, _, tau_small = discrete_gaussian.sum_epsilon(l2 / 30, l2 * math.sqrt(d) / 30, 1.0, n,
                                                      d, delta)
  assert tau_small > 0 and worse > epsilon


def test_tau_is_prop_14s_sum():
  sigma, n = 0.7, 6
  expected = 10.0 * sum(math.exp(-2.0 * math.pi ** 2 * sigma ** 2 * k / (k + 1))
                        for k in range(1, n))
  assert discrete_gaussian.sum_tau(sigma, n) == pytest.approx(expected, rel=1e-14)
  assert discrete_gaussian.sum_tau(sigma, 1) == 0.0  # One share: a discrete Gaussian itself.


def test_rdp_is_the_minimum_of_the_three_bounds_at_the_best_order():
  """ε from the RDP curve recomputed by hand at the order returned, through dp_accounting's
  conversion at that single order: never below the minimum over all orders."""
  from dp_accounting.rdp import rdp_privacy_accountant  # pylint: disable=g-import-not-at-top
  l2, l1, sigma, n, d, delta = 6.0, 50.0, 1.2, 20, 64, 1e-5
  epsilon, order, tau = discrete_gaussian.sum_epsilon(l2, l1, sigma, n, d, delta)
  mu2, mu1 = l2 / (math.sqrt(n) * sigma), l1 / (math.sqrt(n) * sigma)
  rdp = min(order / 2 * mu2 ** 2 + tau * d, order / 2 * (mu2 ** 2 + 2 * mu1 * tau + tau ** 2 * d),
            order / 2 * (mu2 + math.sqrt(d) * tau) ** 2)
  at_order, _ = rdp_privacy_accountant.compute_epsilon([order], [rdp], delta)
  assert epsilon == pytest.approx(at_order, rel=1e-12)
  assert order in discrete_gaussian.RDP_ORDERS


def test_epsilon_decreases_with_the_noise():
  values = [discrete_gaussian.sum_epsilon(10.0, 100.0, s, 50, 256, 1e-5)[0]
            for s in (0.5, 1.0, 2.0, 4.0, 8.0)]
  assert np.all(np.diff(values) < 0)


def test_a_range_of_cohorts_bounds_every_cohort_in_it_composed():
  """Realized cohorts vary: μ at the fewest and τ at the most shares bound every n between,
  at a σ small enough that τ matters (then the smallest cohort is not the worst case)."""
  from dp_accounting.rdp import rdp_privacy_accountant  # pylint: disable=g-import-not-at-top
  l2, l1, sigma, d, delta, k = 8.0, 40.0, 0.45, 32, 1e-5, 5
  low, high = 3, 40
  bound, _, tau = discrete_gaussian.composed_epsilon(l2, l1, sigma, low, high, d, k, delta)
  assert tau == discrete_gaussian.sum_tau(sigma, high) > 0
  orders = np.asarray(discrete_gaussian.RDP_ORDERS)
  each = []
  for n in range(low, high + 1):
    curve = k * discrete_gaussian._rdp_curve(  # pylint: disable=protected-access
        l2 / (math.sqrt(n) * sigma), l1 / (math.sqrt(n) * sigma),
        discrete_gaussian.sum_tau(sigma, n), d)
    each.append(rdp_privacy_accountant.compute_epsilon(orders, curve, delta)[0])
  assert bound >= max(each) - 1e-12
  assert each[-1] > 2 * each[0]  # Here the LARGEST cohort is the worst: the smallest is not.
  one, _, _ = discrete_gaussian.composed_epsilon(l2, l1, sigma, 10, 10, d, 1, delta)
  assert one == discrete_gaussian.sum_epsilon(l2, l1, sigma, 10, d, delta)[0]
  with pytest.raises(ValueError, match="most_clients"):
    discrete_gaussian.composed_epsilon(l2, l1, sigma, 10, 9, d, 1, delta)


@pytest.mark.parametrize("kwargs, named", [
    (dict(num_clients=0), "num_clients"),
    (dict(sampled_stddev=0.0), "sampled_stddev"),
])
def test_bad_arguments_name_the_parameter(kwargs, named):
  args = dict(l2_sensitivity=1.0, l1_sensitivity=1.0, sampled_stddev=1.0, num_clients=10,
              dimension=4, delta=1e-5)
  with pytest.raises(ValueError, match=named):
    discrete_gaussian.sum_epsilon(**{**args, **kwargs})


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
