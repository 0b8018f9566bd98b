"""Tests for dp_fl.accounting.dpfedavg: paper 001 Tables 1-2, Lemma 1, RDP/PLD."""

from __future__ import annotations

import math

import dp_accounting
import pytest

from dp_fl.accounting import dpfedavg

# Paper 001, Table 1: (K, C̃, z, printed ε after 10^0..10^6 rounds), δ = 1/K^1.1.
_TABLE1 = [
    (1e5, 1e2, 1.0, [0.97, 0.98, 1.00, 1.07, 1.18, 2.21, 7.50]),
    (1e6, 1e1, 1.0, [0.68, 0.69, 0.69, 0.69, 0.69, 0.72, 0.73]),
    (1e6, 1e3, 1.0, [1.17, 1.17, 1.20, 1.28, 1.39, 2.44, 8.13]),
    (1e6, 1e4, 1.0, [1.73, 1.92, 2.08, 3.06, 8.49, 32.38, 187.01]),
    (1e6, 1e3, 3.0, [0.47, 0.47, 0.48, 0.48, 0.49, 0.67, 1.95]),
    (1e9, 1e3, 1.0, [0.84, 0.84, 0.84, 0.85, 0.88, 0.88, 0.88]),
]

# Paper 001, Table 2 (δ = 1e-9, T = 5000): (σ, S, K, C̃, printed ε). z = σ C̃ / S = 1
# (C̃ = 1667 stands for 5000/3: 0.006 · 5000/3 / 10 = 1).
_TABLE2 = [
    (0.003, 15, 763430, 5000, 4.634),
    (0.006, 10, 763430, 1667, 2.314),
    (0.012, 15, 763430, 1250, 2.038),
    (0.003, 15, 1e8, 5000, 1.152),
    (0.006, 10, 1e8, 1667, 0.991),
    (0.012, 15, 1e8, 1250, 0.987),
]


@pytest.mark.parametrize("population,clients,z,printed", _TABLE1)
def test_table1_moments_accountant(population, clients, z, printed):
  for e, want in enumerate(printed):
    g = dpfedavg.dpfedavg_epsilon(population, clients, z, 10 ** e, population ** -1.1,
                                  method="moments_accountant")
    assert round(g.epsilon, 2) == want, (population, clients, z, 10 ** e, g.epsilon)
    assert 1 <= g.order <= 32


@pytest.mark.parametrize("sigma,clip,population,clients,printed", _TABLE2)
def test_table2_moments_accountant(sigma, clip, population, clients, printed):
  sens = dpfedavg.sensitivity_fixed_denominator(clip, clients / population, population)
  assert sens == pytest.approx(clip / clients)
  z = dpfedavg.noise_multiplier_from_noise_std(sigma, sens)
  assert z == pytest.approx(1.0, abs=3e-4)
  g = dpfedavg.dpfedavg_epsilon(population, clients, round(z, 3), 5000, 1e-9,
                                method="moments_accountant")
  assert round(g.epsilon, 3) == printed, g.epsilon


@pytest.mark.parametrize("population,clients,z,printed", _TABLE1)
def test_table1_rdp_is_at_most_moments_accountant(population, clients, z, printed):
  for e in range(7):
    delta = population ** -1.1
    ma = dpfedavg.dpfedavg_epsilon(population, clients, z, 10 ** e, delta,
                                   "moments_accountant")
    rdp = dpfedavg.dpfedavg_epsilon(population, clients, z, 10 ** e, delta, "rdp")
    assert rdp.epsilon <= ma.epsilon + 1e-9


@pytest.mark.parametrize("population,clients,z,rounds", [
    (1e5, 1e2, 1.0, 1), (1e5, 1e2, 1.0, 1000), (1e6, 1e3, 3.0, 100),
    (1e6, 1e1, 1.0, 1000), (1e6, 1e4, 1.0, 100)])
def test_pld_is_at_most_rdp_and_reports_its_grid(population, clients, z, rounds):
  delta = population ** -1.1
  rdp = dpfedavg.dpfedavg_epsilon(population, clients, z, rounds, delta, "rdp")
  pld = dpfedavg.dpfedavg_epsilon(population, clients, z, rounds, delta, "pld")
  q = clients / population
  assert pld.pld_value_discretization_interval == pytest.approx(min(1e-4, q / 3))
  assert pld.pld_consistent
  assert pld.epsilon <= pld.pld_check_epsilon
  assert pld.epsilon <= rdp.epsilon


def test_pld_grid_shrinks_with_q_and_default_grid_is_not_converged():
  # q = 1e-5: dp_accounting's default 1e-4 grid is far from converged.
  q, z, t, delta = 1e-5, 1.0, 1000, 1e6 ** -1.1
  chosen = dpfedavg.pld_discretization_interval_for(q)
  assert chosen == pytest.approx(q / 3)
  coarse = dpfedavg.pld_epsilon(q, z, t, delta, 1e-4)
  fine = dpfedavg.pld_epsilon(q, z, t, delta, chosen)
  finer = dpfedavg.pld_epsilon(q, z, t, delta, chosen / 3)
  assert coarse > 1.5 * fine
  assert finer <= fine <= finer * 1.1
  assert dpfedavg.pld_discretization_interval_for(0.5) == 1e-4


def test_log_moment_matches_numerical_integration():
  # α(λ) = log E_{o~μ₀}[(μ/μ₀)^{λ+1}] by quadrature.
  from scipy import integrate, stats
  q, z = 0.05, 1.3
  for lam in (1, 4, 9):
    f = lambda o: (stats.norm.pdf(o, 0, z)
                   * ((1 - q) + q * math.exp((2 * o - 1) / (2 * z * z))) ** (lam + 1))
    val, _ = integrate.quad(f, -40, 40, limit=200)
    assert dpfedavg.log_moment(q, z, lam) == pytest.approx(math.log(val), rel=1e-8)
  # q = 1: plain Gaussian, α(λ) = λ(λ+1)/(2z²).
  assert dpfedavg.log_moment(1.0, 2.0, 3) == pytest.approx(12 / 8)


def test_sensitivities_lemma1():
  assert dpfedavg.sensitivity_fixed_denominator(15.0, 0.01, 1000.0) == pytest.approx(1.5)
  assert dpfedavg.sensitivity_clipped_denominator(15.0, 0.01, 500.0) == pytest.approx(6.0)


def test_dp_event_and_to_dict():
  g = dpfedavg.dpfedavg_epsilon(1e6, 1e3, 1.0, 100, 1e-9, "rdp")
  assert g.dp_event == dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(1e-3, dp_accounting.GaussianDpEvent(1.0)), 100)
  d = g.to_dict()
  assert d["method"] == "rdp" and d["sampling_probability"] == pytest.approx(1e-3)
  assert d["dp_event"]["count"] == 100
  assert d["dp_event"]["event"]["event"]["noise_multiplier"] == 1.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"),
    (dict(noise_multiplier=0.0), "noise_multiplier"),
    (dict(noise_multiplier=-2.0), "noise_multiplier"),
    (dict(expected_clients_per_round=2e6), "expected_clients_per_round"),
    (dict(rounds=0), "rounds"), (dict(method="advanced"), "method"),
])
def test_bad_input(kwargs, match):
  args = dict(population=1e6, expected_clients_per_round=1e3, noise_multiplier=1.0,
              rounds=10, delta=1e-9, method="rdp")
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    dpfedavg.dpfedavg_epsilon(**args)


@pytest.mark.parametrize("q", [0.0, 1.5, -0.1])
def test_bad_sampling_probability(q):
  with pytest.raises(ValueError, match="sampling_probability"):
    dpfedavg.moments_accountant_epsilon(q, 1.0, 10, 1e-5)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))


@pytest.mark.parametrize("target", [0.5, 2.0, 8.0])
def test_noise_multiplier_for_epsilon_is_the_smallest_that_meets_the_target(target):
  args = (1000, 20.0, 50)
  z = dpfedavg.noise_multiplier_for_epsilon(*args, target, 1e-5)
  at = lambda z_: dpfedavg.dpfedavg_epsilon(*args[:2], z_, args[2], 1e-5,
                                             method=dpfedavg.RDP).epsilon
  assert at(z) <= target
  assert at(z * (1 - 1e-9)) > target * (1 - 1e-6)  # Not much larger than needed.
  with pytest.raises(ValueError, match="target_epsilon"):
    dpfedavg.noise_multiplier_for_epsilon(*args, -1.0, 1e-5)
