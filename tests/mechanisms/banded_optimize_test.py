"""Tests of dp_fl.mechanisms.banded_optimize (BandMF's optimizer, paper 004 ref. [8]): the
reduced end problems against the full objective, optimality against a long plain L-BFGS-B run
and dense references, determinism, warm starts and validation."""
# pylint: disable=protected-access  # The optimizer's reduced problems are tested too.

from __future__ import annotations

import json
import math

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest
import scipy.optimize

from dp_fl.mechanisms import banded
from dp_fl.mechanisms import banded_optimize
from tests.mechanisms import oracles

_SETTINGS = hypothesis.settings(derandomize=True, deadline=None, max_examples=25)


@_SETTINGS
@hypothesis.given(st.integers(4, 30), st.integers(1, 8), st.integers(0, 2**16))
def test_reduced_end_problems_equal_the_full_objective(n, bands, seed):
  """The exact first/last-columns problems used by the optimizer."""
  bands = min(bands, n)
  full = banded.SquaredErrorObjective(n, bands)
  cols = banded.BandedMF(oracles.random_band(n, bands, seed, positive=True)).columns()
  other = banded.BandedMF(oracles.random_band(n, bands, seed + 1, positive=True)).columns()
  size = max(2, n // 3)
  for reduced, rows in (
      (banded_optimize._TailObjective(full, cols, size), slice(n - size, n)),
      (banded_optimize._HeadObjective(full, cols, size), slice(0, size))):
    mixed = np.array(cols)
    width = reduced.mask.shape[1]
    mixed[rows, :width] = other[rows, :width]
    f_full, g_full = full.value_and_grad(mixed)
    f_red, g_red = reduced.value_and_grad(mixed[rows, :width])
    assert f_red == pytest.approx(f_full, rel=1e-11)
    np.testing.assert_allclose(g_red, g_full[rows, :width], rtol=1e-8,
                               atol=1e-10 * np.abs(g_full).max())


def _reference_optimum(n: int, bands: int) -> float:
  """||A C^{-1}||_F^2 minimized by plain scipy L-BFGS from sqrt(A), long run."""
  def fun(x):
    loss, grad = banded.rms_loss_and_grad(x.reshape(n, bands))
    return loss, grad.ravel()
  res = scipy.optimize.minimize(fun, oracles.sqrt_a_band(n, bands).ravel(), jac=True,
                                method="L-BFGS-B",
                                options={"maxiter": 5000, "ftol": 1e-15,
                                         "gtol": 1e-12, "maxcor": 30})
  return res.fun ** 2 * n


@pytest.mark.parametrize("n, bands", [(8, 3), (16, 4), (24, 24), (40, 6)])
def test_optimizer_is_banded_normalized_and_optimal(n, bands):
  mech = banded_optimize.optimize_banded(n, bands, 2, bands=bands)
  c = mech.dense()
  offsets = np.subtract.outer(np.arange(n), np.arange(n))
  assert np.all(c[(offsets < 0) | (offsets >= bands)] == 0)
  np.testing.assert_allclose(np.linalg.norm(c, axis=0), 1.0, rtol=1e-12)
  assert np.all(np.diag(c) > 0)
  assert mech.setting == banded.BandedSetting(n, bands, bands,
                                              min(2, -(-n // bands)))
  total = float(np.sum(mech.per_query_squared_error()))
  assert total == pytest.approx(float(np.sum(oracles.dense_row_errors(c))), rel=1e-10)
  assert total == pytest.approx(_reference_optimum(n, bands), rel=1e-8)
  # Stationary: the gradient of RmsLoss vanishes at the optimum.
  _, grad = banded.rms_loss_and_grad(mech.band)
  assert np.abs(grad).max() < 1e-6


@pytest.mark.parametrize("n, bands", [(12, 3), (50, 8), (200, 16)])
def test_optimizer_beats_identity_and_truncated_sqrt_a(n, bands):
  k = 3
  mech = banded_optimize.optimize_banded(n, bands, k, bands=bands)
  ours = mech.rms_loss(n, bands, k)
  identity = math.sqrt(k) * math.sqrt(np.mean(np.arange(1, n + 1)))  # DP-SGD.
  truncated = oracles.dense_rms_loss(oracles.sqrt_a_band(n, bands), k)
  assert ours < truncated < identity
  assert banded.rms_loss_and_grad(mech.band, k)[0] == pytest.approx(ours, rel=1e-12)


@hypothesis.settings(derandomize=True, deadline=None, max_examples=15)
@hypothesis.given(oracles.band_sizes(max_n=20))
def test_optimizer_property_small_sizes(size):
  n, bands = size
  mech = banded_optimize.optimize_banded(n, bands, 1, bands=bands)
  c = mech.dense()
  offsets = np.subtract.outer(np.arange(n), np.arange(n))
  assert np.all(c[offsets >= bands] == 0)
  np.testing.assert_allclose(mech.column_norms(), 1.0, rtol=1e-12)
  loss, grad = banded.rms_loss_and_grad(mech.band)
  assert np.abs(grad).max() < 1e-6
  assert loss <= oracles.dense_rms_loss(oracles.sqrt_a_band(n, bands), 1) + 1e-12


def test_coarse_to_fine_path_reaches_the_plain_optimum():
  n, bands = 200, 16  # n >= 192: one coarse level (100, 8).
  mech = banded_optimize.optimize_banded(n, bands, 1, bands=bands, max_iterations=200)
  total = float(np.sum(mech.per_query_squared_error()))
  assert total == pytest.approx(_reference_optimum(n, bands), rel=1e-7)


def test_optimizer_is_deterministic_and_independent_of_k_and_min_sep():
  a = banded_optimize.optimize_banded(30, 5, 1, bands=5)
  b = banded_optimize.optimize_banded(30, 7, 4, bands=5)
  c = banded_optimize.optimize_banded(30, 2, 3, bands=5)  # min_sep < bands: still optimized.
  np.testing.assert_array_equal(a.band, b.band)
  np.testing.assert_array_equal(a.band, c.band)
  assert c.setting == banded.BandedSetting(30, 5, 2, 3)


def test_optimizer_reduces_infeasible_participations():
  mech = banded_optimize.optimize_banded(10, 4, 10, bands=2)
  assert mech.setting.max_participations == 3  # ceil(10 / 4).


def test_optimizer_starts_from_initial():
  first = banded_optimize.optimize_banded(20, 4, 1, bands=4, max_iterations=1)
  again = banded_optimize.optimize_banded(20, 4, 1, bands=4, initial=first)
  best = banded_optimize.optimize_banded(20, 4, 1, bands=4)
  assert again.rms_error() <= first.rms_error() + 1e-12
  assert again.rms_error() == pytest.approx(best.rms_error(), rel=1e-9)
  with pytest.raises(ValueError, match="`initial` must have n=21 and bands=4"):
    banded_optimize.optimize_banded(21, 4, 1, bands=4, initial=first)


def test_bands_one_is_the_identity():
  mech = banded_optimize.optimize_banded(6, 1, 6, bands=1)
  np.testing.assert_array_equal(mech.dense(), np.eye(6))


def test_json_round_trip_is_exact_and_keeps_setting():
  mech = banded_optimize.optimize_banded(15, 5, 2, bands=4)
  data = mech.to_dict()
  assert data["mechanism"] == "bandmf" and data["version"] == 1
  assert data["setting"] == {"n": 15, "bands": 4, "min_sep": 5,
                             "max_participations": 2}
  back = banded.BandedMF.from_dict(json.loads(json.dumps(data)))
  assert back == mech
  np.testing.assert_array_equal(back.band, mech.band)
  assert banded.BandedMF.from_json(mech.to_json()) == mech
  plain = banded.BandedMF(oracles.random_band(5, 2, 0))
  assert banded.BandedMF.from_json(plain.to_json()) == plain


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
    banded_optimize.optimize_banded(*args, bands=bands)


@pytest.mark.parametrize("kwargs, match", [
    ({"max_iterations": 0}, "`max_iterations` must be a positive integer"),
    ({"tol": -1.0}, "`tol` must be a finite number >= 0"),
    ({"initial": "x"}, "`initial` must be a BandedMF or None"),
])
def test_optimizer_keyword_validation(kwargs, match):
  with pytest.raises(ValueError, match=match):
    banded_optimize.optimize_banded(5, 2, 1, bands=2, **kwargs)


def test_calls_in_the_former_argument_order_fail_loudly():
  # Formerly optimize_banded(n, bands, min_sep, k): the ints would swap silently, so `bands`
  # is keyword-only.
  with pytest.raises(TypeError):
    banded_optimize.optimize_banded(20, 4, 4, 1)  # pylint: disable=too-many-function-args


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
