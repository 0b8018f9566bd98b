"""Tests for dp_fl.accounting.balls_in_bins (paper 003, Lemma 3.2, Alg. 1-2).

Statistical tests compare Monte Carlo estimates with independent exact values
at 4 standard errors; all seeds are fixed, so every run is deterministic (for a
fresh seed the flake rate of one such comparison would be about 6e-5).
"""

from __future__ import annotations

import math
import warnings

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest
import scipy.linalg
from scipy import integrate, optimize, special

import dp_accounting
from dp_fl.accounting import balls_in_bins as bib
from dp_fl.accounting import monte_carlo
from dp_fl.accounting import verification


def _blt_coefs(n, theta=(0.99, 0.9), omega=(0.1, 0.2)):
  """BLT Toeplitz coefficients: c_0 = 1, c_t = sum_i omega_i theta_i^(t-1)."""
  t = np.arange(1, n)[:, None]
  rest = (np.asarray(omega) * np.asarray(theta) ** (t - 1)).sum(axis=1)
  return np.concatenate([[1.0], rest])


def _dense_toeplitz(coefs, n):
  c = np.zeros(n)
  c[:min(n, len(coefs))] = coefs[:n]
  return np.tril(scipy.linalg.toeplitz(c))


def _explicit_modes(c, b, e):
  """m_i = sum_j C[:, b j + i], by an explicit loop (Lemma 3.2)."""
  n = b * e
  out = np.zeros((n, b))
  for i in range(b):
    for j in range(e):
      out[:, i] += c[:, b * j + i]
  return out


# ---------------------------------------------------------------- Lemma 3.2


def test_identity_modes_are_epoch_indicators():
  m = bib.mode_means(num_bins=2, num_epochs=2, matrix=np.eye(4))
  np.testing.assert_array_equal(m, [[1, 0], [0, 1], [1, 0], [0, 1]])
  pair = bib.dominating_pair(num_bins=2, num_epochs=2, matrix=np.eye(4))
  np.testing.assert_array_equal(pair.gram, 2 * np.eye(2))
  assert pair.num_rounds == 4
  assert pair.sensitivity == pytest.approx(math.sqrt(2))


@hypothesis.settings(derandomize=True, deadline=None, max_examples=40)
@hypothesis.given(
    b=st.integers(1, 9), e=st.integers(1, 6),
    coefs=st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 3.0)), min_size=1,
                   max_size=70))
def test_toeplitz_gram_matches_dense(b, e, coefs):
  n = b * e
  dense = _dense_toeplitz(np.asarray(coefs), n)
  modes = _explicit_modes(dense, b, e)
  hypothesis.assume(np.any(modes != 0))
  np.testing.assert_allclose(
      bib.mode_means(num_bins=b, num_epochs=e, toeplitz_coefs=coefs), modes,
      rtol=1e-12, atol=1e-12)
  from_coefs = bib.dominating_pair(num_bins=b, num_epochs=e,
                                   toeplitz_coefs=coefs)
  from_matrix = bib.dominating_pair(num_bins=b, num_epochs=e, matrix=dense)
  scale = max(1.0, np.abs(modes.T @ modes).max())
  np.testing.assert_allclose(from_coefs.gram, modes.T @ modes, rtol=1e-11,
                             atol=1e-11 * scale)
  np.testing.assert_allclose(from_matrix.gram, modes.T @ modes, rtol=1e-11,
                             atol=1e-11 * scale)


@hypothesis.settings(derandomize=True, deadline=None, max_examples=40)
@hypothesis.given(
    b=st.integers(1, 9), e=st.integers(1, 5), cut=st.integers(0, 8),
    coefs=st.lists(st.floats(1e-3, 3.0), min_size=1, max_size=50))
def test_a_short_last_epoch_is_c_padded_with_zeros(b, e, cut, coefs):
  """n rounds with b * (E - 1) < n < b * E: the pair of the n x n C padded with zero rows and
  columns to b * E (the rounds never run release nothing), from both input forms; in a single
  epoch the bins whose turn never comes (zero modes) are left out of the Gram matrix."""
  n = b * e - cut % b
  full = np.zeros((b * e, b * e))
  full[:n, :n] = _dense_toeplitz(np.asarray(coefs), n)
  modes = _explicit_modes(full, b, e)
  hypothesis.assume(np.any(modes != 0))
  scale = max(1.0, np.abs(modes.T @ modes).max())
  for kwargs in (dict(toeplitz_coefs=coefs), dict(matrix=full[:n, :n])):
    pair = bib.dominating_pair(num_bins=b, num_epochs=e, rounds=n, **kwargs)
    assert pair.num_rounds == n
    active = pair.num_active_bins
    assert active == (min(b, n) if e == 1 else b)
    assert not np.any(modes[:, active:])
    np.testing.assert_allclose(pair.gram, (modes.T @ modes)[:active, :active], rtol=1e-11,
                               atol=1e-11 * scale)
    np.testing.assert_allclose(
        bib.mode_means(num_bins=b, num_epochs=e, rounds=n, **kwargs), modes[:n],
        rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rounds", [0, 8, 13])
def test_rounds_outside_the_last_epoch_are_refused(rounds):
  with pytest.raises(ValueError, match="rounds"):
    bib.dominating_pair(num_bins=4, num_epochs=3, toeplitz_coefs=[1.0], rounds=rounds)
  assert bib.epochs_for(9, 4) == 3 and bib.epochs_for(12, 4) == 3


def test_dense_non_toeplitz_matrix_modes():
  rng = np.random.default_rng(3)
  c = np.tril(rng.uniform(0, 1, (12, 12)))
  np.testing.assert_allclose(
      bib.mode_means(num_bins=4, num_epochs=3, matrix=c),
      _explicit_modes(c, 4, 3), rtol=1e-14)


# ---------------------------------------------------------- privacy loss (Y)


def test_privacy_loss_matches_explicit_density_ratio():
  b, e, sigma = 4, 3, 0.7
  c = _dense_toeplitz(_blt_coefs(12), 12)
  pair = bib.dominating_pair(num_bins=b, num_epochs=e, matrix=c)
  modes = _explicit_modes(c, b, e)
  rng = np.random.default_rng(0)
  k = rng.integers(0, b, size=50)
  z = rng.standard_normal((50, b * e))
  x = modes[:, k].T + sigma * z

  def log_density(mean):  # log N(x; mean, sigma^2 I), row-wise.
    r = (x - mean) / sigma
    return -0.5 * (r * r).sum(axis=1) - x.shape[1] * math.log(
        sigma * math.sqrt(2 * math.pi))

  log_p = special.logsumexp([log_density(modes[:, i]) for i in range(b)],
                            axis=0) - math.log(b)
  log_q = log_density(0.0)
  got = bib.privacy_loss(pair, sigma, k, z @ modes)
  np.testing.assert_allclose(got, log_p - log_q, rtol=1e-10, atol=1e-10)


def test_reduced_sampling_matches_full_dimensional_sampling():
  """(k, W ~ N(0, G)) gives the same delta as x = m_k + sigma Z in R^n."""
  b, e, sigma, eps, m = 4, 3, 1.2, 0.5, 2**16
  c = _dense_toeplitz(_blt_coefs(12), 12)
  pair = bib.dominating_pair(num_bins=b, num_epochs=e, matrix=c)
  modes = _explicit_modes(c, b, e)
  rng = np.random.default_rng(11)
  k = rng.integers(0, b, size=m)
  z = rng.standard_normal((m, b * e))
  f = np.maximum(-np.expm1(eps - bib.privacy_loss(pair, sigma, k, z @ modes)),
                 0.0)
  est = bib.estimate_delta(pair, noise_multiplier=sigma, epsilon=eps,
                           num_samples=m, seed=5)
  se = math.hypot(est.standard_error, f.std(ddof=1) / math.sqrt(m))
  assert abs(est.delta_hat - f.mean()) < 4 * se
  assert est.num_tail_samples > 1000


def test_sample_independent_of_chunk_size_and_prefix_stable():
  pair = bib.dominating_pair(num_bins=8, num_epochs=4,
                             toeplitz_coefs=_blt_coefs(32))
  y_big = bib.sample_privacy_loss(pair, noise_multiplier=0.9,
                                  num_samples=5000, seed=7, chunk_size=4096)
  y_small = bib.sample_privacy_loss(pair, noise_multiplier=0.9,
                                    num_samples=3000, seed=7, chunk_size=1024)
  np.testing.assert_allclose(y_small, y_big[:3000], rtol=1e-12, atol=1e-12)
  other = bib.sample_privacy_loss(pair, noise_multiplier=0.9,
                                  num_samples=3000, seed=8)
  assert not np.allclose(other, y_small)


# ------------------------------------------- exact references for C = I


def _identity_exact_delta(b, e, sigma, eps):
  """H_{e^eps}(P, Q) for C = I, b bins, e epochs, by nested 1-D integration.

  Here G = e I, so under Q the likelihood ratio is S / b with S = sum_i V_i,
  V_i = exp(mu z_i - mu^2/2), mu = sqrt(e)/sigma, z i.i.d. N(0, 1), and
  H = E_Q[(S/b - e^eps)_+] = h(0, b), where h(s, k) = E[((s + V_1 + ... +
  V_k)/b - e^eps)_+] obeys h(s, 1) = closed form (Black-Scholes) and
  h(s, k) = int phi(z) h(s + V(z), k - 1) dz, split where s + V(z) = b e^eps
  (beyond that point the integrand is linear in V: closed form again).
  """
  mu = math.sqrt(e) / sigma
  target = b * math.exp(eps)

  def h(s, k):
    if s >= target:
      return (s + k) / b - math.exp(eps)
    c = target - s
    z_star = (math.log(c) + mu * mu / 2) / mu  # V(z_star) = c.
    if k == 1:
      return (special.ndtr(mu - z_star) - c * special.ndtr(-z_star)) / b
    tail = (((s + k - 1) / b - math.exp(eps)) * special.ndtr(-z_star)
            + special.ndtr(mu - z_star) / b)
    body, _ = integrate.quad(
        lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
        * h(s + math.exp(mu * z - mu * mu / 2), k - 1),
        -14.0, z_star, epsabs=1e-15, epsrel=1e-11, limit=200)
    return body + tail

  return h(0.0, b)


def test_identity_reference_one_bin_is_dp_accounting_gaussian():
  sigma, e, eps = 0.9, 3, 1.0
  gaussian = dp_accounting.pld.privacy_loss_mechanism.GaussianPrivacyLoss(
      standard_deviation=sigma / math.sqrt(e), sensitivity=1.0)
  assert _identity_exact_delta(1, e, sigma, eps) == pytest.approx(
      gaussian.get_delta_for_epsilon(eps), rel=1e-9)


def test_identity_delta_hat_matches_quadrature():
  b, e, sigma, eps, m = 3, 2, 0.8, 1.0, 2**17
  pair = bib.dominating_pair(num_bins=b, num_epochs=e, matrix=np.eye(b * e))
  est = bib.estimate_delta(pair, noise_multiplier=sigma, epsilon=eps,
                           num_samples=m, seed=1)
  exact = _identity_exact_delta(b, e, sigma, eps)
  assert abs(est.delta_hat - exact) < 4 * est.standard_error
  assert est.relative_standard_error < 0.03


def test_identity_calibrated_sigma_matches_quadrature():
  """Alg. 2 for DP-SGD (C = I) with balls-in-bins vs an exact calculation."""
  b, e, eps, delta, m = 2, 2, 1.0, 1e-3, 2**17
  pair = bib.dominating_pair(num_bins=b, num_epochs=e, matrix=np.eye(b * e))
  cal = bib.calibrate_noise_multiplier(pair, epsilon=eps, delta=delta,
                                       num_samples=m, seed=2)
  exact = optimize.brentq(
      lambda s: _identity_exact_delta(b, e, s, eps) - delta, 0.3, 10.0,
      xtol=1e-10)
  assert cal.noise_multiplier_standard_error < 0.02 * exact
  assert abs(cal.noise_multiplier - exact) < 4 * cal.noise_multiplier_standard_error
  assert cal.delta_hat == pytest.approx(delta, rel=1e-4)
  assert cal.noise_multiplier < cal.unamplified_noise_multiplier


def test_one_bin_is_gaussian_mechanism_per_dp_accounting():
  """b = 1: every epoch uses the single bin, P = N(m_0, sigma^2 I)."""
  e, eps, delta, m = 4, 1.0, 1e-3, 2**17
  pair = bib.dominating_pair(num_bins=1, num_epochs=e,
                             toeplitz_coefs=_blt_coefs(e))
  cal = bib.calibrate_noise_multiplier(pair, epsilon=eps, delta=delta,
                                       num_samples=m, seed=4)
  sens = math.sqrt(pair.gram[0, 0])

  def gaussian_delta(sigma):
    gaussian = dp_accounting.pld.privacy_loss_mechanism.GaussianPrivacyLoss(
        standard_deviation=sigma / sens, sensitivity=1.0)
    return gaussian.get_delta_for_epsilon(eps)

  exact = optimize.brentq(lambda s: gaussian_delta(s) - delta, 0.5 * sens,
                          10 * sens, xtol=1e-8)
  assert abs(cal.noise_multiplier - exact) < 4 * cal.noise_multiplier_standard_error
  assert cal.unamplified_noise_multiplier == pytest.approx(exact, rel=1e-8)


# ------------------------------------------------- amplification for BLT


def _unamplified_sigma(c, b, e, eps, delta):
  """Deterministic participation every epoch: Gaussian with the worst bin."""
  sens = max(np.linalg.norm(c[:, i::b].sum(axis=1)) for i in range(b))

  def gauss_delta(mu):
    return (special.ndtr(mu / 2 - eps / mu)
            - math.exp(eps) * special.ndtr(-mu / 2 - eps / mu))

  mu = optimize.brentq(lambda x: gauss_delta(x) - delta, 1e-3, 50.0, xtol=1e-12)
  return sens / mu


def test_blt_amplification_needs_smaller_sigma():
  b, e, eps, delta, m = 16, 4, 2.0, 1e-3, 2**16
  n = b * e
  coefs = _blt_coefs(n)
  pair = bib.dominating_pair(num_bins=b, num_epochs=e, toeplitz_coefs=coefs)
  cal = bib.calibrate_noise_multiplier(pair, epsilon=eps, delta=delta,
                                       num_samples=m, seed=9)
  unamp = _unamplified_sigma(_dense_toeplitz(coefs, n), b, e, eps, delta)
  assert cal.unamplified_noise_multiplier == pytest.approx(unamp, rel=1e-6)
  assert cal.noise_multiplier + 4 * cal.noise_multiplier_standard_error < unamp
  assert cal.noise_multiplier < 0.9 * unamp


# --------------------------------------------------- Alg. 2 internals


def test_calibration_solves_delta_hat_on_its_own_sample():
  pair = bib.dominating_pair(num_bins=8, num_epochs=4,
                             toeplitz_coefs=_blt_coefs(32))
  cal = bib.calibrate_noise_multiplier(pair, epsilon=1.0, delta=1e-3,
                                       num_samples=2**15, seed=13,
                                       chunk_size=1024)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", bib.InsufficientSamplesWarning)
    est = bib.estimate_delta(pair, noise_multiplier=cal.noise_multiplier,
                             epsilon=1.0, num_samples=2**15, seed=13)
  assert est.delta_hat == pytest.approx(1e-3, rel=1e-4)
  assert est.standard_error == pytest.approx(cal.delta_standard_error, rel=1e-3)


def test_streaming_fallback_gives_same_root(monkeypatch):
  pair = bib.dominating_pair(num_bins=8, num_epochs=4,
                             toeplitz_coefs=_blt_coefs(32))
  kw = dict(epsilon=1.0, delta=2e-3, num_samples=2**14, seed=21,
            chunk_size=1024)
  screened = bib.calibrate_noise_multiplier(pair, **kw)
  monkeypatch.setattr(monte_carlo, "MAX_STORED_CHUNKS", 0)
  streamed = bib.calibrate_noise_multiplier(pair, **kw)
  assert streamed.noise_multiplier == pytest.approx(screened.noise_multiplier,
                                                    rel=1e-5)
  assert streamed.num_passes > screened.num_passes


# ---------------------------------------------------------------- Alg. 1


def test_required_num_samples_is_minimal():
  for dv, d in [(8e-6, 1e-5), (0.04, 0.05), (1e-3, 2e-3)]:
    need = verification.required_num_samples(dv, d)
    assert verification.verification_failure_probability(need, dv, d) <= d
    assert verification.verification_failure_probability(need - 1, dv, d) > d
  assert 5e7 < verification.required_num_samples(8e-6, 1e-5) < 6e7


def test_estimate_verify_release_releases_only_when_verified():
  pair = bib.dominating_pair(num_bins=3, num_epochs=2, matrix=np.eye(6))
  calls = []

  def release():
    calls.append(1)
    return "model"

  kw = dict(epsilon=1.0, delta=0.05, delta_verify=0.04, seed=3)
  big = 2.0 * bib.unamplified_noise_multiplier(pair, epsilon=1.0, delta=0.04)
  ok = bib.estimate_verify_release(pair, noise_multiplier=big, release=release,
                                   **kw)
  assert ok.verified and ok.output == "model" and calls == [1]
  assert ok.num_samples == ok.required_num_samples
  assert ok.failure_probability <= 0.05
  small = 0.25 * bib.unamplified_noise_multiplier(pair, epsilon=1.0,
                                                  delta=0.05)
  bad = bib.estimate_verify_release(pair, noise_multiplier=small,
                                    release=release, **kw)
  assert not bad.verified and bad.output is None and calls == [1]
  assert bad.delta_hat > 0.04


def test_estimate_verify_release_rejects_too_few_samples():
  pair = bib.dominating_pair(num_bins=3, num_epochs=2, matrix=np.eye(6))
  need = verification.required_num_samples(0.04, 0.05)
  with pytest.raises(ValueError, match=f"num_samples >= {need}"):
    bib.estimate_verify_release(pair, noise_multiplier=1.0, epsilon=1.0,
                                delta=0.05, delta_verify=0.04,
                                num_samples=need - 1, seed=0)


# ----------------------------------------------------------- bad input


@pytest.fixture(name="pair")
def _pair():
  return bib.dominating_pair(num_bins=2, num_epochs=2, matrix=np.eye(4))


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-5, 1.5, float("nan")])
def test_bad_delta(pair, delta):
  with pytest.raises(ValueError, match="delta"):
    bib.calibrate_noise_multiplier(pair, epsilon=1.0, delta=delta,
                                   num_samples=2**12, seed=0)
  with pytest.raises(ValueError, match="delta"):
    bib.estimate_verify_release(pair, noise_multiplier=1.0, epsilon=1.0,
                                delta=delta, seed=0)


@pytest.mark.parametrize("eps", [0.0, -1.0, float("inf")])
def test_bad_epsilon(pair, eps):
  with pytest.raises(ValueError, match="epsilon"):
    bib.estimate_delta(pair, noise_multiplier=1.0, epsilon=eps,
                       num_samples=100, seed=0)
  with pytest.raises(ValueError, match="epsilon"):
    bib.calibrate_noise_multiplier(pair, epsilon=eps, delta=1e-2,
                                   num_samples=2**12, seed=0)


@pytest.mark.parametrize("sigma", [0.0, -1.0])
def test_bad_noise_multiplier(pair, sigma):
  with pytest.raises(ValueError, match="noise_multiplier"):
    bib.estimate_delta(pair, noise_multiplier=sigma, epsilon=1.0,
                       num_samples=100, seed=0)
  with pytest.raises(ValueError, match="noise_multiplier"):
    bib.estimate_verify_release(pair, noise_multiplier=sigma, epsilon=1.0,
                                delta=0.05, seed=0)


def test_bad_matrices():
  neg = np.eye(4)
  neg[2, 0] = -0.1
  with pytest.raises(ValueError, match="non-negative"):
    bib.dominating_pair(num_bins=2, num_epochs=2, matrix=neg)
  with pytest.raises(ValueError, match="non-negative"):
    bib.dominating_pair(num_bins=2, num_epochs=2, toeplitz_coefs=[1.0, -0.5])
  with pytest.raises(ValueError, match="lower-triangular"):
    bib.dominating_pair(num_bins=2, num_epochs=2, matrix=np.ones((4, 4)))
  with pytest.raises(ValueError, match="n = num_bins"):
    bib.dominating_pair(num_bins=2, num_epochs=3, matrix=np.eye(4))
  with pytest.raises(ValueError, match="exactly one"):
    bib.dominating_pair(num_bins=2, num_epochs=2)
  with pytest.raises(ValueError, match="exactly one"):
    bib.dominating_pair(num_bins=2, num_epochs=2, matrix=np.eye(4),
                        toeplitz_coefs=[1.0])
  with pytest.raises(ValueError, match="non-zero"):
    bib.dominating_pair(num_bins=2, num_epochs=2, toeplitz_coefs=[0.0])
  with pytest.raises(ValueError, match="num_bins"):
    bib.dominating_pair(num_bins=0, num_epochs=2, toeplitz_coefs=[1.0])


def test_bad_chunk_size_and_seed(pair):
  with pytest.raises(ValueError, match="multiple of 1024"):
    bib.estimate_delta(pair, noise_multiplier=1.0, epsilon=1.0,
                       num_samples=100, seed=0, chunk_size=1000)
  with pytest.raises(ValueError, match="seed"):
    bib.estimate_delta(pair, noise_multiplier=1.0, epsilon=1.0,
                       num_samples=100, seed=-1)


def test_too_few_samples_error_and_warning(pair):
  with pytest.raises(ValueError, match="at least 1/delta"):
    bib.calibrate_noise_multiplier(pair, epsilon=1.0, delta=1e-5,
                                   num_samples=2**14, seed=0)
  with pytest.warns(bib.InsufficientSamplesWarning, match="Increase `num_samples`"):
    bib.calibrate_noise_multiplier(pair, epsilon=1.0, delta=1e-3,
                                   num_samples=2**11, seed=0, chunk_size=1024)


def test_delta_verify_must_be_below_delta():
  with pytest.raises(ValueError, match="delta_verify"):
    verification.required_num_samples(1e-5, 1e-5)


def test_generator_seed_is_accepted(pair):
  a = bib.sample_privacy_loss(pair, noise_multiplier=1.0, num_samples=10,
                              seed=np.random.default_rng(0))
  b = bib.sample_privacy_loss(pair, noise_multiplier=1.0, num_samples=10,
                              seed=np.random.default_rng(0))
  np.testing.assert_array_equal(a, b)


def test_bins_whose_turn_never_comes_are_not_sampled():
  # 8 rounds of 1000 bins (the 8-round, 5-client job of a 5000-user population): only
  # 8 bins are active; the rest are the zero mode, the same pair as the full b x b one.
  n, b = 8, 1000
  coefs = _blt_coefs(b)
  pair = bib.dominating_pair(num_bins=b, num_epochs=1, rounds=n, toeplitz_coefs=coefs)
  assert pair.gram.shape == (n, n) and pair.num_active_bins == n
  full = np.zeros((b, b))
  full[:n, :n] = pair.gram
  wide = bib.BallsInBinsPair(num_bins=b, num_epochs=1, gram=full, rounds=n)
  assert wide.num_active_bins == b
  kw = dict(noise_multiplier=0.3, epsilon=1.0, num_samples=2 ** 18)
  compact = bib.estimate_delta(pair, seed=1, **kw)
  reference = bib.estimate_delta(wide, seed=2, **dict(kw, num_samples=2 ** 14))
  assert compact.delta_hat == pytest.approx(
      reference.delta_hat, abs=4 * math.hypot(compact.standard_error, reference.standard_error))
  # Exactly: a user in an inactive bin adds nothing; P = (n/b) mix + (1 - n/b) Q.
  mat = scipy.linalg.toeplitz(coefs[:n], np.zeros(n))
  dense = bib.dominating_pair(num_bins=b, num_epochs=1, rounds=n, matrix=mat)
  np.testing.assert_allclose(dense.gram, pair.gram, rtol=1e-12)
  cal = bib.calibrate_noise_multiplier(pair, epsilon=1.0, delta=1e-4, num_samples=2 ** 17,
                                       seed=3)
  assert cal.noise_multiplier < cal.unamplified_noise_multiplier


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
