"""Tests for dp_fl.accounting.amplification: balls-in-bins releases and cyclic Poisson.

Monte Carlo comparisons use fixed seeds and 4 standard errors (deterministic runs).
"""

from __future__ import annotations

import dataclasses
import json
import math

import dp_accounting
from dp_accounting.pld import privacy_loss_distribution
import numpy as np
import pytest

from dp_fl.accounting import amplification
from dp_fl.accounting import balls_in_bins
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import catalog


def _blt_coefs(n, theta=(0.99, 0.9), omega=(0.1, 0.2)):
  t = np.arange(1, n)[:, None]
  return np.concatenate([[1.0], (np.asarray(omega) * np.asarray(theta) ** (t - 1)).sum(1)])


# ------------------------------------------------------------------ balls-in-bins


@pytest.mark.parametrize("rounds, sigma, delta", [(1, 1.0, 1e-4), (16, 3.0, 1e-4),
                                                  (100, 6.0, 1e-5)])
def test_one_bin_with_c_identity_is_dp_accountings_gaussian_composition(rounds, sigma, delta):
  """One bin used every round (b = 1, E = n) and C = I: no amplification, the privacy loss is
  that of n composed Gaussians; the Monte Carlo δ̂ at dp_accounting's ε is δ within 4
  standard errors, and the released ε is that ε up to the calibration margin."""
  accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-5)
  accountant.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.GaussianDpEvent(sigma), rounds))
  epsilon = accountant.get_epsilon(delta)
  pair = balls_in_bins.dominating_pair(num_bins=1, num_epochs=rounds,
                                       matrix=np.eye(rounds))
  estimate = balls_in_bins.estimate_delta(pair, noise_multiplier=sigma, epsilon=epsilon,
                                          num_samples=2 ** 22, seed=1)
  assert abs(estimate.delta_hat - delta) <= 4 * estimate.standard_error
  assert estimate.standard_error < 0.2 * delta  # The comparison has power.
  release = amplification.release_epsilon(pair, noise_multiplier=sigma, delta=delta, seed=2,
                                          verify_ratio=0.5)
  assert release.verified
  assert epsilon * 0.99 <= release.epsilon <= epsilon * 1.12
  # Without amplification the bound is the exact Gaussian of sensitivity sqrt(n).
  assert release.epsilon_without_amplification == pytest.approx(
      zcdp.matrix_mechanism_guarantee(math.sqrt(rounds), sigma, delta).epsilon)


@pytest.mark.parametrize("bins, epochs, rounds, coefs", [
    (8, 2, 16, [1.0]),                       # DP-SGD
    (12, 3, 30, _blt_coefs(36)),             # BLT, short last epoch
    (20, 1, 20, _blt_coefs(20)),             # one epoch
])
def test_amplified_epsilon_is_below_the_unamplified_one(bins, epochs, rounds, coefs):
  pair = balls_in_bins.dominating_pair(num_bins=bins, num_epochs=epochs, rounds=rounds,
                                       toeplitz_coefs=coefs)
  release = amplification.release_epsilon(pair, noise_multiplier=2.0, delta=1e-4, seed=3,
                                          verify_ratio=0.5)
  assert release.verified
  assert release.epsilon < release.epsilon_without_amplification
  # And the σ released for that ε needs less noise than fixed bins would.
  sigma = amplification.release_noise_multiplier(pair, epsilon=release.epsilon, delta=1e-4,
                                                 seed=4, verify_ratio=0.5)
  assert sigma.verified
  assert sigma.noise_multiplier < sigma.noise_multiplier_without_amplification


def test_release_records_round_trip_and_seeds_are_reproducible_or_fresh():
  pair = balls_in_bins.dominating_pair(num_bins=4, num_epochs=2, toeplitz_coefs=[1.0])
  a = amplification.release_noise_multiplier(pair, epsilon=2.0, delta=1e-3, seed=5)
  b = amplification.release_noise_multiplier(pair, epsilon=2.0, delta=1e-3, seed=5)
  assert a == b
  assert amplification.MonteCarloRelease.from_dict(json.loads(json.dumps(a.to_dict()))) == a
  fresh = amplification.release_noise_multiplier(pair, epsilon=2.0, delta=1e-3)
  assert fresh.calibration_seed not in (a.calibration_seed, a.verification_seed)
  assert fresh.calibration_seed != fresh.verification_seed
  # The σ printed is the σ verified (rounded up to 6 digits).
  assert a.noise_multiplier >= a.calibration_value
  assert float(f"{a.noise_multiplier:.6g}") == a.noise_multiplier
  assert "Thm 2.1" in a.guarantee()
  with pytest.raises(ValueError, match="lacks"):
    amplification.MonteCarloRelease.from_dict({"epsilon": 1.0})


def test_a_release_that_fails_verification_says_so():
  pair = balls_in_bins.dominating_pair(num_bins=4, num_epochs=2, toeplitz_coefs=[1.0])
  good = amplification.release_noise_multiplier(pair, epsilon=2.0, delta=1e-3, seed=6)
  # Verify a σ 20% below the calibrated one: the fresh sample must reject it.
  ver = balls_in_bins.estimate_verify_release(
      pair, noise_multiplier=0.8 * good.noise_multiplier, epsilon=2.0, delta=1e-3,
      seed=good.verification_seed)
  assert not ver.verified
  bad = dataclasses.replace(good, verified=False)
  assert "returned ⊥" in bad.guarantee()


@pytest.mark.parametrize("kwargs, message", [
    (dict(delta=0.0), "delta"),
    (dict(delta_verify=2e-3), "delta_verify"),
    (dict(calibration_margin=-1.0), "calibration_margin"),
    (dict(num_samples=10), "num_samples"),
])
def test_bad_release_arguments_are_refused(kwargs, message):
  pair = balls_in_bins.dominating_pair(num_bins=2, num_epochs=1, toeplitz_coefs=[1.0])
  args = dict(epsilon=1.0, delta=1e-3, seed=0)
  args.update(kwargs)
  with pytest.raises(ValueError, match=message):
    amplification.release_noise_multiplier(pair, **args)


# ------------------------------------------------------------------ cyclic Poisson

# jax_privacy (commit 8967688c, 2026-08-20) `accounting.amplified_bandmf_event(z, n,
# num_bands, sampling_prob)` composed by dp_accounting 0.4.3's PLDAccountant (default grid
# 1e-4) and RdpAccountant, computed offline (jax_privacy needs a newer jax than ours).
JAX_PRIVACY_REFERENCE = [
    # (z, iterations, num_bands, sampling_prob, delta, epsilon_pld, epsilon_rdp)
    (1.0, 2052, 16, 0.05, 1e-5, 3.9059989983742884, 4.461388939559397),
    (0.8, 1000, 4, 0.02, 1e-6, 4.217438900679456, 4.908093106709217),
    (2.0, 100, 10, 0.1, 1e-5, 0.798467509232331, 0.9355049858535109),
    (1.5, 2048, 1, 0.01, 1e-5, 1.3396762692514044, 1.4709281990589549),
]


@pytest.mark.parametrize("z, n, bands, q, delta, eps_pld, eps_rdp", JAX_PRIVACY_REFERENCE)
def test_cyclic_poisson_matches_jax_privacy(z, n, bands, q, delta, eps_pld, eps_rdp):
  for column_norm in (1.0, 2.5):  # σ is relative to C's largest column norm.
    g = amplification.cyclic_poisson_epsilon(
        z * column_norm, column_norm=column_norm, sampling_probability=q, num_groups=bands,
        rounds=n, delta=delta)
    assert g.compositions == math.ceil(n / bands)
    assert g.epsilon_rdp == pytest.approx(eps_rdp, rel=1e-9)
    assert g.epsilon <= eps_pld * (1 + 1e-9)  # The tighter of two PLD grids and RDP.
    assert g.epsilon == pytest.approx(eps_pld, rel=2e-3)


@pytest.mark.parametrize("z, n, groups, q, delta", [(1.3, 300, 7, 0.03, 1e-5),
                                                     (0.9, 64, 64, 0.5, 1e-6)])
def test_cyclic_poisson_matches_an_independent_dp_accounting_computation(z, n, groups, q,
                                                                        delta):
  """Against dp_accounting's PLD built here from scratch: pessimistic (an upper bound, which
  ours may not exceed by more than grid effects) and optimistic (a lower bound on the truth,
  which ours must never be below)."""
  g = amplification.cyclic_poisson_epsilon(z, column_norm=1.0, sampling_probability=q,
                                           num_groups=groups, rounds=n, delta=delta)
  compositions = -(-n // groups)

  def pld(pessimistic):
    one = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=z, sampling_prob=q, pessimistic_estimate=pessimistic,
        value_discretization_interval=1e-4)
    return one.self_compose(compositions).get_epsilon_for_delta(delta)

  assert pld(False) * (1 - 1e-9) <= g.epsilon <= pld(True) * (1 + 1e-3)


def test_cyclic_poisson_noise_multiplier_is_the_smallest_reaching_the_target():
  args = dict(column_norm=1.0, sampling_probability=0.05, num_groups=16, rounds=320,
              delta=1e-5)
  for accountant in ("rdp", "pld"):
    sigma = amplification.cyclic_poisson_noise_multiplier(4.0, accountant=accountant, **args)
    g = amplification.cyclic_poisson_epsilon(sigma, **args)
    assert g.epsilon <= 4.0
    below = amplification.cyclic_poisson_epsilon(sigma * 0.999, **args)
    assert (below.epsilon if accountant == "pld" else below.epsilon_rdp) > 4.0
  with pytest.raises(ValueError, match="sampling_probability"):
    amplification.cyclic_poisson_epsilon(1.0, **dict(args, sampling_probability=1.5))


def test_bandmf_column_norm_is_one_and_dpsgd_cyclic_poisson_is_dpfedavg():
  """BandMF's C is column-normalized; with one group cyclic Poisson is the Poisson-sampled
  Gaussian that DP-FedAvg's accountant composes over every round."""
  from dp_fl.accounting import dpfedavg  # pylint: disable=g-import-not-at-top
  mechanism = catalog.build("bandmf", rounds=40, min_sep=8, max_participations=5).mechanism
  assert mechanism.sensitivity(40, 40, 1).guaranteed == pytest.approx(1.0)
  g = amplification.cyclic_poisson_epsilon(1.2, column_norm=1.0, sampling_probability=0.1,
                                           num_groups=1, rounds=50, delta=1e-5)
  reference = dpfedavg.dpfedavg_epsilon(1000, 100, 1.2, 50, 1e-5, method=dpfedavg.PLD)
  assert g.epsilon == pytest.approx(reference.epsilon, rel=1e-9)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
