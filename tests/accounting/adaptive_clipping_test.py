"""The privacy cost of adaptive clipping (issue #42): formulas, composition against
independent dp_accounting computations, and Andrew et al.'s Thm. 1 against a 2-D brute force
of the subsampled pair at small and large ε."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import special

from dp_fl.accounting import adaptive_clipping as ac
from dp_fl.accounting import dpfedavg
from dp_fl.accounting import report as report_lib
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import catalog


def test_count_sensitivity_follows_the_adjacency():
  assert ac.count_noise_multiplier(2.0, ac.ZERO_OUT) == 2.0
  assert ac.count_noise_multiplier(2.0, ac.ADD_REMOVE) == 4.0  # Andrew et al.: z_b = 2σ_b.
  assert ac.estimator_rho(5, 2.0, ac.ZERO_OUT) == pytest.approx(5 / 8)
  with pytest.raises(ValueError, match="adjacency"):
    ac.count_noise_multiplier(1.0, "replace")


@pytest.mark.parametrize("share", [0.01, 0.1, 0.5, 0.9])
def test_the_share_and_the_split_give_what_they_promise(share):
  # C = I, k = 7, σ = 0.8: the updates' ρ is 7 / 2σ²; the count takes `share` of the total.
  stddev = ac.count_stddev_of(ac.count_multiplier_for_share(0.8, share), ac.ZERO_OUT)
  estimator = ac.estimator_rho(7, stddev, ac.ZERO_OUT)
  assert estimator / (estimator + 7 / (2 * 0.8 ** 2)) == pytest.approx(share, rel=1e-12)
  z_update, z_count = ac.split_noise_multiplier(1.3, share)
  assert ac.effective_noise_multiplier(z_update, z_count) == pytest.approx(1.3, rel=1e-12)
  assert (1.3 / z_count) ** 2 == pytest.approx(share, rel=1e-12)


def test_andrew_et_al_numbers():
  # Sec. 3: with σ_b = m/20 at m = 100 the updates' multiplier rises by about 0.5 % for z = 1.
  z_update = (1.0 ** -2 - ac.count_noise_multiplier(100 / 20, ac.ADD_REMOVE) ** -2) ** -0.5
  assert z_update == pytest.approx(1.005, abs=1e-3)
  assert ac.effective_noise_multiplier(z_update, 10.0) == pytest.approx(1.0, rel=1e-12)


@pytest.fixture(scope="module")
def blt():
  return catalog.build("blt", rounds=24, min_sep=6, max_participations=4, buffers=2).mechanism


@pytest.mark.parametrize("sigma, count_stddev", [(2.0, 3.0), (0.6, 0.8), (0.25, 0.4)])
def test_composed_matrix_mechanism_report_against_dp_accounting_pld(blt, sigma, count_stddev):
  participation = report_lib.Participation(24, 6, 4)
  estimator = ac.ClipEstimator(0.5, 0.2, count_stddev, ac.ZERO_OUT)
  alone = report_lib.matrix_mechanism_report(blt, sigma, participation, 1e-6)
  composed = report_lib.matrix_mechanism_report(blt, sigma, participation, 1e-6,
                                                clip_estimator=estimator)
  counts_alone = zcdp.epsilon_from_rho(estimator.rho(4), 1e-6)
  assert composed.epsilon >= alone.epsilon and composed.epsilon >= counts_alone
  assert composed.rho == pytest.approx(alone.rho + 4 / (2 * count_stddev ** 2), rel=1e-12)
  assert composed.adaptive_clipping.share == pytest.approx(
      (4 / (2 * count_stddev ** 2)) / composed.rho, rel=1e-12)
  # Independently: dp_accounting's PLD of the updates' Gaussian (σ / sens) composed with
  # the k count releases (z_b each). ε from 0.07 to about 60 over these settings.
  accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
  accountant.compose(dp_accounting.GaussianDpEvent(sigma / alone.sensitivity))
  accountant.compose(dp_accounting.GaussianDpEvent(count_stddev), 4)
  pld = accountant.get_epsilon(1e-6)
  assert composed.epsilon == pytest.approx(pld, rel=5e-3, abs=5e-3)
  assert "adaptive clipping" in composed.to_markdown()


def test_dpfedavg_report_with_the_estimator_is_the_effective_multiplier():
  estimator = ac.ClipEstimator(0.5, 0.2, 2.0, ac.ADD_REMOVE)
  effective = ac.effective_noise_multiplier(0.9, estimator.noise_multiplier)
  with_counts = report_lib.dpfedavg_report(2000, 50, effective, 30, 1e-6,
                                           clip_estimator=estimator,
                                           update_noise_multiplier=0.9)
  updates_only = report_lib.dpfedavg_report(2000, 50, 0.9, 30, 1e-6)
  assert with_counts.epsilon > updates_only.epsilon
  assert with_counts.adaptive_clipping.share == pytest.approx((effective / 4.0) ** 2)
  assert with_counts.epsilon == pytest.approx(
      dpfedavg.dpfedavg_epsilon(2000, 50, effective, 30, 1e-6, method=dpfedavg.PLD).epsilon)
  with pytest.raises(ValueError, match="effective"):
    report_lib.dpfedavg_report(2000, 50, 0.9, 30, 1e-6, clip_estimator=estimator,
                               update_noise_multiplier=0.9)


def _hockey_stick_2d(q, mu, epsilon, half_width=12.0, points=1601):
  """δ(ε) of P = (1−q) N(0, I) + q N(μ, I) against Q = N(0, I) in 2-D, by a grid (both
  directions of the add/remove pair)."""
  axis = np.linspace(-half_width, half_width, points)
  x, y = np.meshgrid(axis, axis, indexing="ij")
  cell = (axis[1] - axis[0]) ** 2
  log_q = -0.5 * (x ** 2 + y ** 2) - math.log(2 * math.pi)
  log_shift = -0.5 * ((x - mu[0]) ** 2 + (y - mu[1]) ** 2) - math.log(2 * math.pi)
  log_p = np.logaddexp((np.log1p(-q) if q < 1 else -np.inf) + log_q, math.log(q) + log_shift)
  p, qq = np.exp(log_p), np.exp(log_q)
  return max(float(np.sum(np.maximum(p - math.exp(epsilon) * qq, 0.0)) * cell),
             float(np.sum(np.maximum(qq - math.exp(epsilon) * p, 0.0)) * cell))


def _hockey_stick_1d(q, mu, epsilon):
  """The same for the 1-D mixture with shift μ, in closed form (the likelihood ratio is
  monotone in x)."""
  def delta(add):
    # P vs e^ε Q (add) or Q vs e^ε P (remove), integrated over where the first dominates.
    from scipy import optimize  # pylint: disable=g-import-not-at-top
    def gap(x):
      log_stay = np.log1p(-q) if q < 1 else -np.inf
      log_p = np.logaddexp(log_stay - x * x / 2, math.log(q) - (x - mu) ** 2 / 2)
      log_q = -x * x / 2
      return (log_p - log_q - epsilon) if add else (log_q - log_p - epsilon)
    lo, hi = -40.0, 40.0
    if add:
      if gap(hi) <= 0:
        return 0.0
      t = optimize.brentq(gap, lo, hi) if gap(lo) < 0 else lo
      p_tail = (1 - q) * special.ndtr(-t) + q * special.ndtr(mu - t)
      return p_tail - math.exp(epsilon) * special.ndtr(-t)
    if gap(lo) <= 0:
      return 0.0
    t = optimize.brentq(gap, lo, hi) if gap(hi) < 0 else hi
    q_tail = special.ndtr(t)
    p_tail = (1 - q) * special.ndtr(t) + q * special.ndtr(t - mu)
    return q_tail - math.exp(epsilon) * p_tail
  return max(delta(True), delta(False))


@pytest.mark.parametrize("q, z_update, z_count, epsilon", [
    (0.3, 0.8, 1.6, 0.5), (0.5, 0.5, 0.7, 2.0), (1.0, 0.4, 0.5, 6.0), (0.05, 0.3, 0.9, 3.0)])
def test_thm1_the_subsampled_pair_is_one_gaussian_with_the_effective_multiplier(
    q, z_update, z_count, epsilon):
  effective = ac.effective_noise_multiplier(z_update, z_count)
  brute = _hockey_stick_2d(q, (1 / z_update, 1 / z_count), epsilon)
  one_d = _hockey_stick_1d(q, 1 / effective, epsilon)
  assert brute == pytest.approx(one_d, rel=1e-4, abs=1e-9)
  assert brute > 1e-6  # A non-trivial δ at this ε (large ε included).


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
