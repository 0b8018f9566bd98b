"""Tests of dp_fl.mechanisms.banded (BandMF, paper 004 ref. [8]) against brute force."""
# pylint: disable=protected-access  # The optimizer's reduced problems are tested too.

from __future__ import annotations

import itertools
import json
import math

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest
import scipy.optimize

from dp_fl.mechanisms import banded

_SETTINGS = hypothesis.settings(derandomize=True, deadline=None, max_examples=25)


# ---------------------------------------------------------------------------
# Dense references, written independently of the module under test.


def dense_from_band(band: np.ndarray) -> np.ndarray:
  """C[t, t - j] = band[t, j], literally."""
  n, bands = band.shape
  c = np.zeros((n, n))
  for t in range(n):
    for j in range(bands):
      if t - j >= 0:
        c[t, t - j] = band[t, j]
  return c


def prefix_workload(n: int) -> np.ndarray:
  return np.tril(np.ones((n, n)))


def dense_row_errors(c: np.ndarray) -> np.ndarray:
  """Squared row norms of A C^{-1}."""
  b = prefix_workload(c.shape[0]) @ np.linalg.inv(c)
  return np.sum(b * b, axis=1)


def normalize_dense_columns(c: np.ndarray) -> np.ndarray:
  return c / np.linalg.norm(c, axis=0)[None, :]


def dense_rms_loss(band: np.ndarray, k: int) -> float:
  """Eq. 10 with sens = sqrt(k) for the column-normalized C of `band`."""
  c = normalize_dense_columns(dense_from_band(band))
  return math.sqrt(k) * math.sqrt(np.mean(dense_row_errors(c)))


def random_band(n: int, bands: int, seed: int, positive: bool = False) -> np.ndarray:
  rng = np.random.default_rng(seed)
  band = rng.uniform(0.0 if positive else -0.5, 1.0, size=(n, bands))
  band[:, 0] = rng.uniform(1.0, 2.0, size=n)  # Well-conditioned diagonal.
  band[np.arange(n)[:, None] < np.arange(bands)[None, :]] = 0.0
  return band


def sqrt_a_band(n: int, bands: int) -> np.ndarray:
  """Truncated LtToep(c), c_j = binom(2j, j) / 4^j (the square root of A)."""
  coef = np.array([math.comb(2 * j, j) / 4.0**j for j in range(bands)])
  band = np.tile(coef, (n, 1))
  band[np.arange(n)[:, None] < np.arange(bands)[None, :]] = 0.0
  return band


def brute_force_sensitivity(c: np.ndarray, min_sep: int, k: int) -> float:
  """max over all patterns of Pi(b, k) of ||C u(pi)|| (Eq. 6, C >= 0)."""
  n = c.shape[0]
  best = 0.0
  for size in range(1, k + 1):
    for pattern in itertools.combinations(range(n), size):
      if any(q - p < min_sep for p, q in zip(pattern, pattern[1:])):
        continue
      best = max(best, float(np.linalg.norm(c[:, list(pattern)].sum(axis=1))))
  return best


@st.composite
def sizes(draw, max_n: int = 24):
  n = draw(st.integers(1, max_n))
  bands = draw(st.integers(1, n))
  return n, bands


# ---------------------------------------------------------------------------
# Structure, errors and the streaming inverse.


@_SETTINGS
@hypothesis.given(sizes(), st.integers(0, 2**16))
def test_dense_columns_and_from_dense_match_the_band_layout(size, seed):
  n, bands = size
  band = random_band(n, bands, seed)
  mech = banded.BandedMF(band)
  c = dense_from_band(band)
  np.testing.assert_array_equal(mech.dense(), c)
  cols = mech.columns()
  for j in range(n):
    for r in range(bands):
      assert cols[j, r] == (c[j + r, j] if j + r < n else 0.0)
  np.testing.assert_allclose(mech.column_norms(), np.linalg.norm(c, axis=0),
                             rtol=1e-14)
  assert banded.BandedMF.from_dense(c, bands) == mech
  assert (mech.n, mech.bands) == (n, bands)


@_SETTINGS
@hypothesis.given(sizes(), st.integers(0, 2**16))
def test_per_query_squared_error_matches_dense(size, seed):
  n, bands = size
  band = random_band(n, bands, seed)
  mech = banded.BandedMF(band)
  c = dense_from_band(band)
  expected = dense_row_errors(c)
  np.testing.assert_allclose(mech.per_query_squared_error(), expected, rtol=1e-10)
  assert mech.max_error() == pytest.approx(math.sqrt(expected.max()), rel=1e-10)
  assert mech.rms_error() == pytest.approx(math.sqrt(expected.mean()), rel=1e-10)
  # The first m rounds only involve the leading m x m block.
  m = max(1, n // 2)
  np.testing.assert_allclose(mech.per_query_squared_error(m),
                             dense_row_errors(c[:m, :m]), rtol=1e-10)


@_SETTINGS
@hypothesis.given(sizes(), st.integers(0, 2**16))
def test_inverse_apply_matches_dense_solve(size, seed):
  n, bands = size
  band = random_band(n, bands, seed)
  mech = banded.BandedMF(band)
  c = dense_from_band(band)
  z = np.random.default_rng(seed).standard_normal((n, 3, 2))
  expected = np.linalg.solve(c, z.reshape(n, -1)).reshape(z.shape)
  np.testing.assert_allclose(mech.inverse_apply(z), expected, rtol=1e-9, atol=1e-12)
  m = max(1, n - 2)
  np.testing.assert_allclose(mech.inverse_apply(z[:m, 0, 0]),
                             np.linalg.solve(c[:m, :m], z[:m, 0, 0]),
                             rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------
# Sensitivity (Eq. 5 / Eq. 6 with b >= bands).


@_SETTINGS
@hypothesis.given(st.integers(1, 9), st.integers(1, 4), st.integers(0, 3),
                  st.integers(1, 4), st.integers(0, 2**16))
def test_sensitivity_matches_enumeration(n, bands, extra_sep, k, seed):
  bands = min(bands, n)
  min_sep = bands + extra_sep
  band = random_band(n, bands, seed, positive=True)
  mech = banded.BandedMF(band)
  expected = brute_force_sensitivity(dense_from_band(band), min_sep, k)
  assert mech.sensitivity(n, min_sep, k) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n, width", [(300, 5), (300, 120), (451, 150)])
def test_block_inverse_of_banded_lower_matrix(n, width):
  rng = np.random.default_rng(width)
  offsets = np.subtract.outer(np.arange(n), np.arange(n))
  lower = np.where((offsets >= 0) & (offsets <= width),
                   rng.uniform(-0.1, 0.1, size=(n, n)), 0.0)
  lower[np.diag_indices(n)] = rng.uniform(1.0, 2.0, size=n)
  inverse = banded._banded_lower_inverse(np.asfortranarray(lower), width)
  np.testing.assert_allclose(inverse @ lower, np.eye(n), atol=1e-12)


def test_sensitivity_of_a_column_normalized_c_is_sqrt_k():
  mech = banded.optimize_banded(30, 4, 3, bands=4)
  assert mech.sensitivity(30, 4, 3) == pytest.approx(math.sqrt(3), rel=1e-12)
  assert mech.sensitivity(30, 10, 100) == pytest.approx(math.sqrt(3), rel=1e-12)
  assert mech.sensitivity(None, 4, 3) == mech.sensitivity(30, 4, 3)  # None: its own n.
  assert mech.sensitivity(30, 4, None) == pytest.approx(math.sqrt(8), rel=1e-12)  # ceil(30/4).
  ev = mech.evaluate(30, 5, 2)
  assert ev.message is None
  assert "feasible maximum" in mech.evaluate(30, 10, 100).message
  assert ev.rms_loss == pytest.approx(math.sqrt(2) * mech.rms_error(), rel=1e-12)
  assert ev.max_loss == pytest.approx(math.sqrt(2) * mech.max_error(), rel=1e-12)


def test_sensitivity_refuses_min_sep_below_bands():
  mech = banded.BandedMF(random_band(10, 4, 0))
  with pytest.raises(ValueError, match=r"`min_sep` must be >= bands=4.*general"):
    mech.sensitivity(10, 3, 2)


# ---------------------------------------------------------------------------
# The objective and its gradient.


@_SETTINGS
@hypothesis.given(sizes(max_n=12), st.integers(1, 4), st.integers(0, 2**16))
def test_rms_loss_and_grad_matches_dense_and_finite_differences(size, k, seed):
  n, bands = size
  band = random_band(n, bands, seed)
  loss, grad = banded.rms_loss_and_grad(band, k)
  assert loss == pytest.approx(dense_rms_loss(band, k), rel=1e-10)
  inside = np.arange(n)[:, None] >= np.arange(bands)[None, :]
  assert np.all(grad[~inside] == 0)
  eps = 1e-6
  numeric = np.zeros_like(band)
  for t, j in zip(*np.nonzero(inside)):
    step = np.zeros_like(band)
    step[t, j] = eps
    numeric[t, j] = (dense_rms_loss(band + step, k) -
                     dense_rms_loss(band - step, k)) / (2 * eps)
  np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)


@_SETTINGS
@hypothesis.given(st.integers(4, 30), st.integers(1, 8), st.integers(0, 2**16))
def test_reduced_end_problems_equal_the_full_objective(n, bands, seed):
  """The exact first/last-columns problems used by the optimizer."""
  bands = min(bands, n)
  full = banded._Objective(n, bands)
  cols = banded.BandedMF(random_band(n, bands, seed, positive=True)).columns()
  other = banded.BandedMF(random_band(n, bands, seed + 1, positive=True)).columns()
  size = max(2, n // 3)
  for reduced, rows in (
      (banded._TailObjective(full, cols, size), slice(n - size, n)),
      (banded._HeadObjective(full, cols, size), slice(0, size))):
    mixed = np.array(cols)
    width = reduced.mask.shape[1]
    mixed[rows, :width] = other[rows, :width]
    f_full, g_full = full.value_and_grad(mixed)
    f_red, g_red = reduced.value_and_grad(mixed[rows, :width])
    assert f_red == pytest.approx(f_full, rel=1e-11)
    np.testing.assert_allclose(g_red, g_full[rows, :width], rtol=1e-8,
                               atol=1e-10 * np.abs(g_full).max())


# ---------------------------------------------------------------------------
# The optimizer.


def _reference_optimum(n: int, bands: int) -> float:
  """||A C^{-1}||_F^2 minimized by plain scipy L-BFGS from sqrt(A), long run."""
  def fun(x):
    loss, grad = banded.rms_loss_and_grad(x.reshape(n, bands))
    return loss, grad.ravel()
  res = scipy.optimize.minimize(fun, sqrt_a_band(n, bands).ravel(), jac=True, method="L-BFGS-B",
                                options={"maxiter": 5000, "ftol": 1e-15,
                                         "gtol": 1e-12, "maxcor": 30})
  return res.fun ** 2 * n


@pytest.mark.parametrize("n, bands", [(8, 3), (16, 4), (24, 24), (40, 6)])
def test_optimizer_is_banded_normalized_and_optimal(n, bands):
  mech = banded.optimize_banded(n, bands, 2, bands=bands)
  c = mech.dense()
  offsets = np.subtract.outer(np.arange(n), np.arange(n))
  assert np.all(c[(offsets < 0) | (offsets >= bands)] == 0)
  np.testing.assert_allclose(np.linalg.norm(c, axis=0), 1.0, rtol=1e-12)
  assert np.all(np.diag(c) > 0)
  assert mech.setting == banded.BandedSetting(n, bands, bands,
                                              min(2, -(-n // bands)))
  total = float(np.sum(mech.per_query_squared_error()))
  assert total == pytest.approx(float(np.sum(dense_row_errors(c))), rel=1e-10)
  assert total == pytest.approx(_reference_optimum(n, bands), rel=1e-8)
  # Stationary: the gradient of RmsLoss vanishes at the optimum.
  _, grad = banded.rms_loss_and_grad(mech.band)
  assert np.abs(grad).max() < 1e-6


@pytest.mark.parametrize("n, bands", [(12, 3), (50, 8), (200, 16)])
def test_optimizer_beats_identity_and_truncated_sqrt_a(n, bands):
  k = 3
  mech = banded.optimize_banded(n, bands, k, bands=bands)
  ours = mech.rms_loss(n, bands, k)
  identity = math.sqrt(k) * math.sqrt(np.mean(np.arange(1, n + 1)))  # DP-SGD.
  truncated = dense_rms_loss(sqrt_a_band(n, bands), k)
  assert ours < truncated < identity
  assert banded.rms_loss_and_grad(mech.band, k)[0] == pytest.approx(ours, rel=1e-12)


@hypothesis.settings(derandomize=True, deadline=None, max_examples=15)
@hypothesis.given(sizes(max_n=20))
def test_optimizer_property_small_sizes(size):
  n, bands = size
  mech = banded.optimize_banded(n, bands, 1, bands=bands)
  c = mech.dense()
  offsets = np.subtract.outer(np.arange(n), np.arange(n))
  assert np.all(c[offsets >= bands] == 0)
  np.testing.assert_allclose(mech.column_norms(), 1.0, rtol=1e-12)
  loss, grad = banded.rms_loss_and_grad(mech.band)
  assert np.abs(grad).max() < 1e-6
  assert loss <= dense_rms_loss(sqrt_a_band(n, bands), 1) + 1e-12


def test_coarse_to_fine_path_reaches_the_plain_optimum():
  n, bands = 200, 16  # n >= 192: one coarse level (100, 8).
  mech = banded.optimize_banded(n, bands, 1, bands=bands, max_iterations=200)
  total = float(np.sum(mech.per_query_squared_error()))
  assert total == pytest.approx(_reference_optimum(n, bands), rel=1e-7)


def test_optimizer_is_deterministic_and_independent_of_k_and_min_sep():
  a = banded.optimize_banded(30, 5, 1, bands=5)
  b = banded.optimize_banded(30, 7, 4, bands=5)
  c = banded.optimize_banded(30, 2, 3, bands=5)  # min_sep < bands: still optimized.
  np.testing.assert_array_equal(a.band, b.band)
  np.testing.assert_array_equal(a.band, c.band)
  assert c.setting == banded.BandedSetting(30, 5, 2, 3)


def test_optimizer_reduces_infeasible_participations():
  mech = banded.optimize_banded(10, 4, 10, bands=2)
  assert mech.setting.max_participations == 3  # ceil(10 / 4).


def test_optimizer_starts_from_initial():
  first = banded.optimize_banded(20, 4, 1, bands=4, max_iterations=1)
  again = banded.optimize_banded(20, 4, 1, bands=4, initial=first)
  best = banded.optimize_banded(20, 4, 1, bands=4)
  assert again.rms_error() <= first.rms_error() + 1e-12
  assert again.rms_error() == pytest.approx(best.rms_error(), rel=1e-9)
  with pytest.raises(ValueError, match="`initial` must have n=21 and bands=4"):
    banded.optimize_banded(21, 4, 1, bands=4, initial=first)


def test_bands_one_is_the_identity():
  mech = banded.optimize_banded(6, 1, 6, bands=1)
  np.testing.assert_array_equal(mech.dense(), np.eye(6))


# ---------------------------------------------------------------------------
# Serialization and use beyond n.


def test_json_round_trip_is_exact_and_keeps_setting():
  mech = banded.optimize_banded(15, 5, 2, bands=4)
  data = mech.to_dict()
  assert data["mechanism"] == "bandmf" and data["version"] == 1
  assert data["setting"] == {"n": 15, "bands": 4, "min_sep": 5,
                             "max_participations": 2}
  back = banded.BandedMF.from_dict(json.loads(json.dumps(data)))
  assert back == mech
  np.testing.assert_array_equal(back.band, mech.band)
  assert banded.BandedMF.from_json(mech.to_json()) == mech
  plain = banded.BandedMF(random_band(5, 2, 0))
  assert banded.BandedMF.from_json(plain.to_json()) == plain


@pytest.mark.parametrize("payload, match", [
    ({"mechanism": "blt", "version": 1, "theta": [0.5], "omega": [0.1]},
     r"must be 'bandmf'.*got 'blt'"),
    ({"version": 1, "band": [[1.0]]}, r"got None"),
    ({"mechanism": "bandmf", "version": 2, "band": [[1.0]]}, "version"),
    ({"mechanism": "bandmf", "version": 1}, "lack the field 'band'"),
    ({"mechanism": "bandmf", "version": 1, "band": [[1.0, 0.0], [1.0]]},
     "rectangular"),
    ({"mechanism": "bandmf", "version": 1, "band": [[1.0]],
      "setting": {"n": 1}}, "exactly the keys"),
    ({"mechanism": "bandmf", "version": 1, "band": [[1.0]],
      "setting": {"n": 2, "bands": 1, "min_sep": 1, "max_participations": 1}},
     "must match the shape"),
    ([1, 2], "JSON object"),
])
def test_from_dict_refuses_other_or_broken_parameters(payload, match):
  with pytest.raises(ValueError, match=match):
    banded.BandedMF.from_dict(payload)


def test_from_json_refuses_non_json():
  with pytest.raises(ValueError, match="not valid JSON"):
    banded.BandedMF.from_json("{nope")


def test_use_beyond_n_is_refused():
  mech = banded.BandedMF(random_band(6, 2, 0))
  for call in (lambda: mech.per_query_squared_error(7),
               lambda: mech.max_error(7), lambda: mech.rms_error(7),
               lambda: mech.sensitivity(7, 2, 1),
               lambda: mech.evaluate(7, 2, 1),
               lambda: mech.inverse_apply(np.ones(7))):
    with pytest.raises(ValueError, match="not defined beyond the n=6 rounds"):
      call()


# ---------------------------------------------------------------------------
# Input validation.


@pytest.mark.parametrize("args, bands, match", [
    ((0, 1, 1), 1, r"`n` must be a positive integer.*got 0"),
    ((5, 1, 1), 0, r"`bands` must be a positive integer.*got 0"),
    ((5, 6, 1), 6, r"`bands` must be <= n=5.*got 6"),
    ((5, 0, 1), 2, r"`min_sep` must be a positive integer.*got 0"),
    ((5, 2, 0), 2, r"`max_participations` must be a positive integer"),
    ((5.0, 2, 1), 2, r"`n` must be a positive integer.*got 5.0"),
])
def test_optimizer_validation(args, bands, match):
  with pytest.raises(ValueError, match=match):
    banded.optimize_banded(*args, bands=bands)


def test_calls_in_the_former_argument_order_fail_loudly():
  # Formerly optimize_banded(n, bands, min_sep, k) and sensitivity(min_sep, k, n=None): the
  # ints would swap silently, so `bands` is keyword-only and `n` is required first.
  with pytest.raises(TypeError):
    banded.optimize_banded(20, 4, 4, 1)  # pylint: disable=too-many-function-args
  mech = banded.BandedMF(random_band(10, 4, 0))
  for method in (mech.sensitivity, mech.evaluate, mech.max_loss, mech.rms_loss):
    with pytest.raises(TypeError):
      method(4, 2)  # pylint: disable=no-value-for-parameter


@pytest.mark.parametrize("kwargs, match", [
    ({"max_iterations": 0}, "`max_iterations` must be a positive integer"),
    ({"tol": -1.0}, "`tol` must be a finite number >= 0"),
    ({"initial": "x"}, "`initial` must be a BandedMF or None"),
])
def test_optimizer_keyword_validation(kwargs, match):
  with pytest.raises(ValueError, match=match):
    banded.optimize_banded(5, 2, 1, bands=2, **kwargs)


@pytest.mark.parametrize("band, match", [
    (np.array([[1.0, 0.0], [np.nan, 1.0]]), r"`band` must be an array of finite"),
    (np.array([[1.0, 0.0], [np.inf, 1.0]]), r"`band` must be an array of finite"),
    (np.array([1.0, 2.0]), r"`band` must be a 2-dimensional array"),
    (np.ones((2, 3)), r"1 <= bands <= n; got shape \(2, 3\)"),
    (np.array([[1.0, 0.5], [1.0, 1.0]]), r"must be 0 for t < j.*\[0.5\]"),
    (np.array([[1.0, 0.0], [-1.0, 1.0]]), r"band\[:, 0\].*positive.*band\[1, 0\]=-1.0"),
    (np.array([[1.0, 0.0], [0.0, 1.0]]), r"band\[1, 0\]=0.0"),
])
def test_banded_mf_validation(band, match):
  with pytest.raises(ValueError, match=match):
    banded.BandedMF(band)


def test_setting_validation():
  with pytest.raises(ValueError, match=r"`bands` must be <= n=3"):
    banded.BandedSetting(3, 4, 4, 1)
  with pytest.raises(ValueError, match=r"effective k <= ceil\(n / min_sep\)=2"):
    banded.BandedSetting(4, 2, 2, 3)
  with pytest.raises(ValueError, match="must match the shape"):
    banded.BandedMF(np.ones((3, 1)), banded.BandedSetting(4, 1, 1, 1))
  with pytest.raises(ValueError, match="`setting` must be a BandedSetting"):
    banded.BandedMF(np.ones((3, 1)), {"n": 3})


def test_from_dense_validation():
  with pytest.raises(ValueError, match="lower-triangular"):
    banded.BandedMF.from_dense(np.ones((3, 3)))
  with pytest.raises(ValueError, match="needs bands >= 3; got bands=2"):
    banded.BandedMF.from_dense(np.tril(np.ones((3, 3))), 2)
  with pytest.raises(ValueError, match="square"):
    banded.BandedMF.from_dense(np.ones((2, 3)))


def test_rms_loss_and_grad_validation():
  with pytest.raises(ValueError, match="`band` must be an array of finite"):
    banded.rms_loss_and_grad([[np.nan]])
  with pytest.raises(ValueError, match=r"`bands` must be <= n=1"):
    banded.rms_loss_and_grad(np.ones((1, 2)))
  with pytest.raises(ValueError, match="must be non-zero"):
    banded.rms_loss_and_grad(np.zeros((2, 1)))


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
