"""Tests of dp_fl.mechanisms.banded (BandMF, paper 004 ref. [8]) against brute force (dense
references: tests/mechanisms/oracles.py; the optimizer: banded_optimize_test.py)."""
# pylint: disable=protected-access  # The block inverse is tested too.

from __future__ import annotations

import math

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from dp_fl.mechanisms import banded
from tests.mechanisms import oracles

_SETTINGS = hypothesis.settings(derandomize=True, deadline=None, max_examples=25)


# ---------------------------------------------------------------------------
# Structure, errors and the streaming inverse.


@_SETTINGS
@hypothesis.given(oracles.band_sizes(), st.integers(0, 2**16))
def test_dense_columns_and_from_dense_match_the_band_layout(size, seed):
  n, bands = size
  band = oracles.random_band(n, bands, seed)
  mech = banded.BandedMF(band)
  c = oracles.dense_from_band(band)
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
@hypothesis.given(oracles.band_sizes(), st.integers(0, 2**16))
def test_per_query_squared_error_matches_dense(size, seed):
  n, bands = size
  band = oracles.random_band(n, bands, seed)
  mech = banded.BandedMF(band)
  c = oracles.dense_from_band(band)
  expected = oracles.dense_row_errors(c)
  np.testing.assert_allclose(mech.per_query_squared_error(), expected, rtol=1e-10)
  assert mech.max_error() == pytest.approx(math.sqrt(expected.max()), rel=1e-10)
  assert mech.rms_error() == pytest.approx(math.sqrt(expected.mean()), rel=1e-10)
  # The first m rounds only involve the leading m x m block.
  m = max(1, n // 2)
  np.testing.assert_allclose(mech.per_query_squared_error(m),
                             oracles.dense_row_errors(c[:m, :m]), rtol=1e-10)


@_SETTINGS
@hypothesis.given(oracles.band_sizes(), st.integers(0, 2**16))
def test_inverse_apply_matches_dense_solve(size, seed):
  n, bands = size
  band = oracles.random_band(n, bands, seed)
  mech = banded.BandedMF(band)
  c = oracles.dense_from_band(band)
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
  band = oracles.random_band(n, bands, seed, positive=True)
  mech = banded.BandedMF(band)
  expected = oracles.max_pattern_norm(oracles.dense_from_band(band), min_sep, k)
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
  mech = banded.square_root_factorization(30, 4)  # Columns of unit norm.
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
  mech = banded.BandedMF(oracles.random_band(10, 4, 0))
  with pytest.raises(ValueError, match=r"`min_sep` must be >= bands=4.*general"):
    mech.sensitivity(10, 3, 2)


# ---------------------------------------------------------------------------
# The objective and its gradient.


@_SETTINGS
@hypothesis.given(oracles.band_sizes(max_n=12), st.integers(1, 4), st.integers(0, 2**16))
def test_rms_loss_and_grad_matches_dense_and_finite_differences(size, k, seed):
  n, bands = size
  band = oracles.random_band(n, bands, seed)
  loss, grad = banded.rms_loss_and_grad(band, k)
  assert loss == pytest.approx(oracles.dense_rms_loss(band, k), rel=1e-10)
  inside = np.arange(n)[:, None] >= np.arange(bands)[None, :]
  assert np.all(grad[~inside] == 0)
  eps = 1e-6
  numeric = np.zeros_like(band)
  for t, j in zip(*np.nonzero(inside)):
    step = np.zeros_like(band)
    step[t, j] = eps
    numeric[t, j] = (oracles.dense_rms_loss(band + step, k) -
                     oracles.dense_rms_loss(band - step, k)) / (2 * eps)
  np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------
# Serialization and use beyond n.


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
  mech = banded.BandedMF(oracles.random_band(6, 2, 0))
  for call in (lambda: mech.per_query_squared_error(7),
               lambda: mech.max_error(7), lambda: mech.rms_error(7),
               lambda: mech.sensitivity(7, 2, 1),
               lambda: mech.evaluate(7, 2, 1),
               lambda: mech.inverse_apply(np.ones(7))):
    with pytest.raises(ValueError, match="not defined beyond the n=6 rounds"):
      call()


# ---------------------------------------------------------------------------
# Input validation.


def test_calls_in_the_former_argument_order_fail_loudly():
  # Formerly sensitivity(min_sep, k, n=None): the ints would swap silently, so `n` is
  # required first (the optimizer's `bands` is keyword-only: banded_optimize_test).
  mech = banded.BandedMF(oracles.random_band(10, 4, 0))
  for method in (mech.sensitivity, mech.evaluate, mech.max_loss, mech.rms_loss):
    with pytest.raises(TypeError):
      method(4, 2)  # pylint: disable=no-value-for-parameter


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
