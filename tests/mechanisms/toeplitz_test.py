"""Tests of dp_fl.mechanisms.toeplitz against dense brute force (paper 004, Prop. 3.3)."""

from __future__ import annotations

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from dp_fl.mechanisms import toeplitz
from tests.mechanisms import oracles

_SETTINGS = hypothesis.settings(derandomize=True, deadline=None, max_examples=30)
# Sizes below, at and above the direct/Newton switch (64), odd sizes whose
# halving chain is uneven, and long enough for several FFT doublings.
_SIZES = (1, 2, 3, 7, 63, 64, 65, 66, 127, 129, 200, 1000)


# ---------------------------------------------------------------------------
# Dense references, written independently of the module under test.


def random_blt_coef(rng: np.random.Generator, n: int, buffers: int = 3) -> np.ndarray:
  theta = rng.uniform(0.05, 0.999, size=buffers)
  omega = rng.uniform(0.0, 1.0, size=buffers)
  omega *= rng.uniform(0.2, 0.9) / omega.sum()  # c_1 = sum(omega) < 1 = c_0.
  return oracles.blt_coefficients(theta, omega, n)


def random_decaying_coef(rng: np.random.Generator, n: int) -> np.ndarray:
  """Positive, decaying, with c_0 not 1: well-conditioned LtToep(c)."""
  c = rng.uniform(0.5, 1.5) * np.exp(-rng.uniform(0.001, 0.5) * np.arange(n))
  c[1:] *= rng.uniform(0.3, 0.9) * rng.uniform(0.8, 1.0, size=n - 1)
  return c


def rel_dev(x, ref) -> float:
  """Norm-wise relative deviation max|x - ref| / max|ref|."""
  return float(np.max(np.abs(np.asarray(x) - ref)) / np.max(np.abs(ref)))


# ---------------------------------------------------------------------------
# dense and convolve.


def test_dense_matches_reference():
  c = np.array([2.0, -1.0, 0.5, 0.25])
  np.testing.assert_array_equal(toeplitz.dense(c), oracles.dense_toeplitz(c))
  np.testing.assert_array_equal(toeplitz.dense([3.0]), [[3.0]])


@pytest.mark.parametrize("la,lb", [(1, 1), (5, 3), (40, 50), (300, 700), (2000, 2000)])
def test_convolve_full_product(la, lb):
  rng = np.random.default_rng(la * 1000 + lb)
  a, b = rng.normal(size=la), rng.normal(size=lb)
  ref = np.convolve(a, b)
  out = toeplitz.convolve(a, b)
  assert out.shape == ref.shape
  np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12 * np.max(np.abs(ref)))


@pytest.mark.parametrize("n", [1, 10, 999, 1000, 2500, 4000])
def test_convolve_truncates_and_pads(n):
  rng = np.random.default_rng(n)
  a, b = rng.normal(size=1000), rng.normal(size=1500)
  full = np.concatenate([np.convolve(a, b), np.zeros(2000)])
  out = toeplitz.convolve(a, b, n)
  assert out.shape == (n,)
  np.testing.assert_allclose(out, full[:n], rtol=0, atol=1e-11)


def test_convolve_is_product_of_toeplitz_matrices():
  rng = np.random.default_rng(3)
  a, b = rng.normal(size=50), rng.normal(size=50)
  np.testing.assert_allclose(
      toeplitz.dense(toeplitz.convolve(a, b, 50)),
      oracles.dense_toeplitz(a) @ oracles.dense_toeplitz(b), atol=1e-12)


# ---------------------------------------------------------------------------
# inverse_coef (Prop. 3.3: C^{-1} = LtToep(c_hat)).


@pytest.mark.parametrize("n", _SIZES)
def test_inverse_gives_identity(n):
  rng = np.random.default_rng(n)
  for c in (random_blt_coef(rng, n), random_decaying_coef(rng, n)):
    c_hat = toeplitz.inverse_coef(c)
    eye = np.eye(n)
    assert np.max(np.abs(oracles.dense_toeplitz(c) @ oracles.dense_toeplitz(c_hat) - eye)) <= 1e-12
    assert np.max(np.abs(oracles.dense_toeplitz(c_hat) @ oracles.dense_toeplitz(c) - eye)) <= 1e-12


@pytest.mark.parametrize("n", _SIZES)
def test_inverse_matches_dense_inverse(n):
  rng = np.random.default_rng(100 + n)
  c = random_decaying_coef(rng, n)
  ref = np.linalg.inv(oracles.dense_toeplitz(c))[:, 0]
  assert rel_dev(toeplitz.inverse_coef(c), ref) <= 1e-12
  assert rel_dev(toeplitz.inverse_coef_direct(c), ref) <= 1e-12


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1000, 5000])
def test_inverse_fft_path_matches_recurrence(n):
  rng = np.random.default_rng(200 + n)
  for c in (random_blt_coef(rng, n), random_decaying_coef(rng, n)):
    assert rel_dev(toeplitz.inverse_coef(c), toeplitz.inverse_coef_direct(c)) <= 1e-12


@_SETTINGS
@hypothesis.given(
    n=st.integers(1, 700),
    theta=st.lists(st.floats(0.0, 0.9999), min_size=1, max_size=4),
    scale=st.floats(0.05, 0.95),
    c0=st.sampled_from([1.0, 0.3, -2.0]),
)
def test_inverse_property_blt_like(n, theta, scale, c0):
  omega = np.linspace(1.0, 2.0, len(theta))
  omega *= scale / omega.sum()
  c = c0 * oracles.blt_coefficients(theta, omega, n)
  fast = toeplitz.inverse_coef(c)
  ref = toeplitz.inverse_coef_direct(c)
  assert rel_dev(fast, ref) <= 1e-12
  assert fast[0] == 1.0 / c0


def test_inverse_of_published_blt_with_decay_near_one():
  # Paper 004, App. A (b = 400): theta_1 = 1 - 7.9e-12, the hard case.
  theta = (0.9999999999921251, 0.9944453083640997, 0.8985923474607591,
           0.4912001418098778)
  omega = (0.0070314825502323835, 0.10613806907600574, 0.1898159060327625,
           0.1966594748073734)
  c = oracles.blt_coefficients(theta, omega, 4000)
  fast = toeplitz.inverse_coef(c)
  assert rel_dev(fast, toeplitz.inverse_coef_direct(c)) <= 1e-12
  # Inverse of a BLT with omega > 0: c_hat_0 = 1, c_hat_t < 0 after.
  assert fast[0] == 1.0 and np.all(fast[1:] < 0)


def test_inverse_of_known_series():
  # 1 / (1 - x) = 1 + x + x^2 + ...: inverse of the all-ones column (A).
  n = 5000
  np.testing.assert_allclose(toeplitz.inverse_coef(np.ones(n)),
                             np.r_[1.0, -1.0, np.zeros(n - 2)], atol=1e-13)
  # 1 / (1 - a x) = sum a^t x^t.
  a = 0.7
  c_hat = toeplitz.inverse_coef(np.r_[1.0, -a, np.zeros(n - 2)])
  np.testing.assert_allclose(c_hat, a ** np.arange(n), rtol=0, atol=1e-14)


@pytest.mark.parametrize("n", [1, 65, 1000, 20000])
def test_inverse_of_square_root_of_prefix_sum(n):
  # C = A^{1/2}: c(x) = (1 - x)^{-1/2}, c_hat(x) = (1 - x)^{1/2}, both with
  # positive-factor product forms; C^{-1} C^{-1} = A^{-1} = LtToep(1, -1).
  t = np.arange(1, n, dtype=np.float64)
  c = np.cumprod(np.r_[1.0, (2 * t - 1) / (2 * t)])
  exact = np.cumprod(np.r_[1.0, (2 * t - 3) / (2 * t)])
  c_hat = toeplitz.inverse_coef(c)
  assert rel_dev(c_hat, exact) <= 1e-14
  a_inv = np.zeros(n)
  a_inv[:2] = [1.0, -1.0][:n]
  np.testing.assert_allclose(toeplitz.convolve(c_hat, c_hat, n), a_inv, atol=1e-13)
  # B = A C^{-1} = A^{1/2}, so b = c.
  np.testing.assert_allclose(toeplitz.b_coef(c), c, rtol=1e-12)


# ---------------------------------------------------------------------------
# Decoder B = A C^{-1} and errors.


@pytest.mark.parametrize("n", [1, 2, 5, 64, 65, 300])
def test_decoder_and_errors_match_dense(n):
  rng = np.random.default_rng(300 + n)
  c = random_blt_coef(rng, n)
  a = np.tril(np.ones((n, n)))
  b_dense = a @ np.linalg.inv(oracles.dense_toeplitz(c))
  b = toeplitz.b_coef(c)
  np.testing.assert_allclose(oracles.dense_toeplitz(b), b_dense, rtol=0, atol=1e-12)
  row_sq = np.sum(b_dense ** 2, axis=1)
  np.testing.assert_allclose(toeplitz.per_query_squared_error(c), row_sq,
                             rtol=1e-12)
  # Sec. 3.2 definitions: max row norm and Frobenius norm / sqrt(n).
  assert toeplitz.max_error(c) == pytest.approx(np.sqrt(np.max(row_sq)), rel=1e-12)
  assert toeplitz.rms_error(c) == pytest.approx(
      np.linalg.norm(b_dense) / np.sqrt(n), rel=1e-12)


def test_errors_of_identity_strategy():
  # C = I: B = A, MaxError = sqrt(n), RmsError = sqrt((n + 1) / 2).
  n = 10
  c = np.r_[1.0, np.zeros(n - 1)]
  np.testing.assert_array_equal(toeplitz.b_coef(c), np.ones(n))
  assert toeplitz.max_error(c) == pytest.approx(np.sqrt(n))
  assert toeplitz.rms_error(c) == pytest.approx(np.sqrt((n + 1) / 2))
  np.testing.assert_allclose(toeplitz.per_query_squared_error(c), np.arange(1, n + 1))


# ---------------------------------------------------------------------------
# Validation.


@pytest.mark.parametrize("fn", [toeplitz.inverse_coef, toeplitz.inverse_coef_direct,
                                toeplitz.b_coef, toeplitz.max_error,
                                toeplitz.rms_error, toeplitz.per_query_squared_error])
@pytest.mark.parametrize("coef,match", [
    ([], "at least one"),
    ([[1.0, 0.5]], "1-dimensional"),
    ([1.0, np.nan], "finite"),
    ([1.0, np.inf, 0.5], "finite"),
    ([0.0, 1.0], r"coef\[0\].*non-zero"),
    ("abc", "coef"),
])
def test_bad_coef_is_rejected(fn, coef, match):
  with pytest.raises(ValueError, match=match):
    fn(coef)


def test_bad_convolve_arguments_are_rejected():
  with pytest.raises(ValueError, match="`n`"):
    toeplitz.convolve([1.0], [1.0], 0)
  with pytest.raises(ValueError, match="`a`"):
    toeplitz.convolve([], [1.0])
  with pytest.raises(ValueError, match="`b`"):
    toeplitz.convolve([1.0], [np.nan])
  with pytest.raises(ValueError, match="`coef`"):
    toeplitz.dense([1.0, np.inf])


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
