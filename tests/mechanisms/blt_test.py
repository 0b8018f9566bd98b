"""Tests of dp_fl.mechanisms.blt against dense brute force (paper 004, Sec. 2.4-3.3)."""

from __future__ import annotations

import itertools
import json
import warnings

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from dp_fl.mechanisms import blt
from dp_fl.mechanisms import sensitivity
from dp_fl.mechanisms import toeplitz
from scripts import bench_blt

_SETTINGS = hypothesis.settings(derandomize=True, deadline=None, max_examples=25)


# ---------------------------------------------------------------------------
# Dense references, written independently of the module under test.


def dense_toeplitz(coef: np.ndarray) -> np.ndarray:
  n = coef.size
  out = np.zeros((n, n))
  for i in range(n):
    out[i:, i] = coef[:n - i]
  return out


def eq2_coef(theta, omega, n):
  """Eq. 2 literally: c_0 = 1, c_i = sum_j omega_j theta_j^(i-1)."""
  c = np.zeros(n)
  c[0] = 1.0
  for i in range(1, n):
    c[i] = sum(w * t ** (i - 1) for t, w in zip(theta, omega))
  return c


def alg5_output_scale(theta, theta_hat):
  """Alg. 5 literally, with numpy polynomials (coefficients low -> high)."""
  poly = np.polynomial.polynomial
  p = np.array([1.0])
  q = np.array([1.0])
  for th in theta_hat:
    p = poly.polymul(p, [1.0, -th])
  for th in theta:
    q = poly.polymul(q, [1.0, -th])
  diff = poly.polysub(p, q)
  f = diff[1:]  # (p - q) / x; the constant terms cancel.
  z = np.prod(-np.asarray(theta))
  omega = []
  for i, ti in enumerate(theta):
    w = 1.0 / np.prod([1.0 / ti - 1.0 / tj for j, tj in enumerate(theta) if j != i])
    omega.append(poly.polyval(1.0 / ti, f) * (-ti * w) / z)
  return np.array(omega)


def alg3_inverse_stream(theta, omega, z):
  """Alg. 3: rows of C^{-1} Z for C = BLT(theta, omega)."""
  theta = np.asarray(theta)
  omega = np.asarray(omega)
  state = np.zeros((theta.size,) + z.shape[1:])
  out = np.zeros_like(z)
  for t in range(z.shape[0]):
    out[t] = z[t] - np.tensordot(omega, state, axes=1)
    state = theta.reshape((-1,) + (1,) * (z.ndim - 1)) * state + out[t]
  return out


def brute_force_sensitivity(c_dense, min_sep, k):
  """max over all patterns of Pi(b, k) of ||C u(pi)|| (Eq. 6, C >= 0)."""
  n = c_dense.shape[0]
  best = 0.0
  for size in range(1, k + 1):
    for pattern in itertools.combinations(range(n), size):
      if any(b - a < min_sep for a, b in zip(pattern, pattern[1:])):
        continue
      u = np.zeros(n)
      u[list(pattern)] = 1.0
      best = max(best, float(np.linalg.norm(c_dense @ u)))
  return best


def dense_losses(theta, omega, n, min_sep, k):
  c = dense_toeplitz(eq2_coef(theta, omega, n))
  b_mat = np.tril(np.ones((n, n))) @ np.linalg.inv(c)
  sq = np.sum(b_mat ** 2, axis=1)
  u = np.zeros(n)
  u[np.arange(k) * min_sep] = 1.0
  sens = np.linalg.norm(c @ u)
  return sens, np.sqrt(sq.max()), np.sqrt(sq.mean()), sq


# Hard cases: decays near 1 (the optimal BLTs have them), near-equal decays,
# theta = 1 exactly, omega = 0 entries, and the published BLTs.
HARD_CASES = [
    ((0.9,), (0.3,)),
    ((0.5, 0.95), (0.2, 0.1)),
    ((1.0, 0.7), (0.01, 0.3)),
    ((1.0 - 1e-11, 0.99, 0.6), (0.007, 0.1, 0.2)),
    ((0.3, 0.3 + 1e-10, 0.9), (0.05, 0.05, 0.2)),
    ((0.8, 0.4), (0.0, 0.3)),
    ((0.6, 0.6), (0.1, 0.2)),  # Equal decays act as one buffer.
    ((0.5,), (0.0,)),  # C = I.
] + [(p.theta, p.omega) for p in blt.PUBLISHED_BLTS.values()]


@pytest.mark.parametrize("theta,omega", HARD_CASES)
def test_coef_matches_eq2(theta, omega):
  m = blt.Blt(theta, omega)
  np.testing.assert_allclose(m.coef(40), eq2_coef(theta, omega, 40), rtol=1e-12,
                             atol=0)


@pytest.mark.parametrize("theta,omega", HARD_CASES)
def test_inverse_coef_inverts_dense_matrix(theta, omega):
  m = blt.Blt(theta, omega)
  n = 120
  c = dense_toeplitz(m.coef(n))
  c_inv = dense_toeplitz(m.inverse_coef(n))
  np.testing.assert_allclose(c @ c_inv, np.eye(n), atol=1e-11)


@pytest.mark.parametrize("theta,omega", HARD_CASES)
def test_inverse_coef_matches_alg3_with_identity(theta, omega):
  # App. A, Fig. 10: C^{-1}'s coefficients are Alg. 3 applied to Z = I.
  n = 60
  stream = alg3_inverse_stream(theta, omega, np.eye(n))
  np.testing.assert_allclose(blt.Blt(theta, omega).inverse_coef(n), stream[:, 0],
                             atol=1e-12)


@pytest.mark.parametrize("theta,omega", HARD_CASES)
def test_inverse_decays_are_eigenvalues_of_alg3_transition(theta, omega):
  theta_hat = blt.inverse_decays(theta, omega)
  transition = np.diag(theta) - np.outer(np.ones(len(theta)), omega)
  np.testing.assert_allclose(np.sort(theta_hat),
                             np.sort(np.linalg.eigvals(transition).real),
                             atol=1e-9)


def test_inverse_decays_keep_relative_precision_near_one():
  # theta = 1 - 8e-12 with a tiny output scale: gap of theta_hat must be exact
  # to many digits, which plain eigenvalues cannot deliver.
  theta = (1.0 - 8e-12,)
  omega = (3e-12,)
  (theta_hat,) = blt.inverse_decays(theta, omega)
  assert (1.0 - theta_hat) == pytest.approx(1.1e-11, rel=1e-4)


@_SETTINGS
@hypothesis.given(st.integers(1, 4), st.integers(0, 2 ** 31 - 1))
def test_alg5_matches_literal_polynomial_version(d, seed):
  rng = np.random.default_rng(seed)
  pts = np.sort(rng.uniform(0.05, 0.95, size=2 * d))
  hypothesis.assume(np.min(np.diff(pts)) > 1e-3)
  theta_hat, theta = pts[0::2], pts[1::2]
  np.testing.assert_allclose(blt.calc_output_scale(theta, theta_hat),
                             alg5_output_scale(theta, theta_hat), rtol=1e-8,
                             atol=1e-12)


@_SETTINGS
@hypothesis.given(st.integers(1, 4), st.integers(0, 2 ** 31 - 1))
def test_from_decays_round_trips_through_the_inverse(d, seed):
  rng = np.random.default_rng(seed)
  gaps = np.sort(np.exp(rng.uniform(np.log(1e-11), np.log(0.9), size=2 * d)))
  hypothesis.assume(np.min(np.diff(np.log(gaps))) > 1e-3)
  theta = 1.0 - gaps[0::2]
  theta_hat = 1.0 - gaps[1::2]
  m = blt.Blt.from_decays(theta, theta_hat)
  assert all(w > 0 for w in m.omega)
  assert sum(m.omega) < 1.0  # theta_hat > 0 keeps c non-increasing.
  got_hat, omega_hat = m.inverse_parameters()
  # theta is stored as a float, so its gap carries up to ~1e-16 of rounding.
  np.testing.assert_allclose(np.sort(1.0 - got_hat), np.sort(gaps[1::2]),
                             rtol=1e-6, atol=1e-15)
  np.testing.assert_allclose(omega_hat,
                             blt.calc_output_scale(got_hat, m.theta_array),
                             rtol=1e-9, atol=1e-15)
  n = 50
  c = dense_toeplitz(m.coef(n))
  np.testing.assert_allclose(c @ dense_toeplitz(m.inverse_coef(n)), np.eye(n),
                             atol=1e-9)


def test_from_decays_refuses_non_interlaced_decays():
  with pytest.raises(ValueError, match="interlace"):
    blt.Blt.from_decays([0.5, 0.9], [0.95, 0.97])


@pytest.mark.parametrize("n,min_sep,k", [(10, 3, 3), (12, 4, 2), (9, 2, 4),
                                         (8, 1, 3)])
@pytest.mark.parametrize("theta,omega", HARD_CASES[:4])
def test_sensitivity_thm31_matches_enumeration(theta, omega, n, min_sep, k):
  m = blt.Blt(theta, omega)
  brute = brute_force_sensitivity(dense_toeplitz(eq2_coef(theta, omega, n)),
                                  min_sep, k)
  assert m.sensitivity(n, min_sep, k) == pytest.approx(brute, rel=1e-12)


@pytest.mark.parametrize("theta,omega", HARD_CASES)
def test_errors_and_losses_match_dense(theta, omega):
  n, min_sep, k = 90, 20, 4
  m = blt.Blt(theta, omega)
  sens, max_err, rms_err, sq = dense_losses(theta, omega, n, min_sep, k)
  ev = m.evaluate(n, min_sep, k)
  np.testing.assert_allclose(m.per_query_squared_error(n), sq, rtol=1e-9)
  assert ev.sensitivity == pytest.approx(sens, rel=1e-12)
  assert ev.max_error == pytest.approx(max_err, rel=1e-9)
  assert ev.rms_error == pytest.approx(rms_err, rel=1e-9)
  assert ev.max_loss == pytest.approx(sens * max_err, rel=1e-9)
  assert ev.rms_loss == pytest.approx(sens * rms_err, rel=1e-9)
  assert m.max_loss(n, min_sep, k) == ev.max_loss
  assert m.rms_loss(n, min_sep, k) == ev.rms_loss


def test_sensitivity_refuses_increasing_coefficients():
  m = blt.Blt((0.5, 0.9), (0.6, 0.6))  # c_1 = 1.2 > c_0 = 1.
  with pytest.raises(ValueError, match="sum\\(omega\\)"):
    m.sensitivity(10, 2, 2)


# ---------------------------------------------------------------------------
# Private vectorized loss (Alg. 4) and its gradient.


def _interlaced_gaps(d, rng, smallest=1e-11):
  gaps = np.sort(np.exp(rng.uniform(np.log(smallest), np.log(0.8), size=2 * d)))
  return gaps[0::2], gaps[1::2]  # gap < gap_hat pairwise.


@pytest.mark.parametrize("loss", ["max", "rms"])
@pytest.mark.parametrize("d", [1, 3])
def test_private_loss_matches_dense(loss, d):
  rng = np.random.default_rng(d)
  gap, gap_hat = _interlaced_gaps(d, rng, smallest=1e-3)
  n, min_sep, k = 70, 15, 3
  parts = blt._loss_from_gaps(gap, gap_hat, n, min_sep, k, loss, 0.0)
  omega = blt.calc_output_scale(1.0 - gap, 1.0 - gap_hat)
  sens, max_err, rms_err, _ = dense_losses(1.0 - gap, omega, n, min_sep, k)
  assert parts.sens == pytest.approx(sens, rel=1e-10)
  assert parts.error == pytest.approx(max_err if loss == "max" else rms_err,
                                      rel=1e-8)
  assert parts.objective == parts.loss


@pytest.mark.parametrize("loss", ["max", "rms"])
@pytest.mark.parametrize("d,smallest", [(1, 1e-3), (2, 1e-11), (4, 1e-6)])
def test_private_loss_gradient_matches_finite_differences(loss, d, smallest):
  rng = np.random.default_rng(10 * d)
  gap, gap_hat = _interlaced_gaps(d, rng, smallest)
  args = (300, 40, 5, loss, 1e-7)
  parts = blt._loss_from_gaps(gap, gap_hat, *args)
  # Central differences relative to each coordinate's size (gaps span 1e-11..1).
  for vec, grad, which in ((gap, parts.grad_gap, 0), (gap_hat, parts.grad_gap_hat, 1)):
    for j in range(d):
      h = 1e-6 * vec[j]
      plus, minus = vec.copy(), vec.copy()
      plus[j] += h
      minus[j] -= h
      if which == 0:
        fp = blt._loss_from_gaps(plus, gap_hat, *args, with_grad=False).objective
        fm = blt._loss_from_gaps(minus, gap_hat, *args, with_grad=False).objective
      else:
        fp = blt._loss_from_gaps(gap, plus, *args, with_grad=False).objective
        fm = blt._loss_from_gaps(gap, minus, *args, with_grad=False).objective
      fd = (fp - fm) / (2 * h)
      assert grad[j] * vec[j] == pytest.approx(fd * vec[j], rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("loss", ["max", "rms"])
def test_objective_gradient_in_optimizer_parameters(loss):
  rng = np.random.default_rng(3)
  gap, gap_hat = _interlaced_gaps(3, rng)
  # The optimizer orders buffers by increasing decay, i.e. decreasing gap.
  gap, gap_hat = gap[::-1].copy(), gap_hat[::-1].copy()
  y = blt._params_from_gaps(gap, gap_hat)
  got_gap, got_gap_hat, _, _ = blt._gaps_from_params(y)
  np.testing.assert_allclose(got_gap, gap, rtol=1e-9)
  np.testing.assert_allclose(got_gap_hat, gap_hat, rtol=1e-9)
  args = (200, 30, 4, loss, 1e-7)
  _, grad = blt._objective(y, *args)
  for i in range(y.size):
    e = np.zeros(y.size)
    e[i] = 1e-6
    fd = (blt._objective(y + e, *args)[0] - blt._objective(y - e, *args)[0]) / 2e-6
    assert grad[i] == pytest.approx(fd, rel=1e-5, abs=1e-7)


# ---------------------------------------------------------------------------
# Optimizer.


def test_optimizer_small_problem_beats_fewer_buffers_and_is_consistent():
  one = blt.optimize_blt(64, 8, 4, 1)
  two = blt.optimize_blt(64, 8, 4, 2)
  assert two.loss_value < one.loss_value
  assert [d for d, _ in two.history] == [1, 2]
  m = two.blt
  assert m.setting == blt.BltSetting(64, 8, 4, 2, "max")
  assert all(0 < t < 1 for t in m.theta) and all(w > 0 for w in m.omega)
  sens, max_err, _, _ = dense_losses(m.theta, m.omega, 64, 8, 4)
  assert two.loss_value == pytest.approx(sens * max_err, rel=1e-8)
  assert two.evaluation.max_loss == two.loss_value


def test_optimizer_rms_loss_prefers_rms():
  by_rms = blt.optimize_blt(64, 8, 4, 2, loss="rms")
  by_max = blt.optimize_blt(64, 8, 4, 2, loss="max")
  assert by_rms.evaluation.rms_loss <= by_max.evaluation.rms_loss * (1 + 1e-9)
  assert by_max.evaluation.max_loss <= by_rms.evaluation.max_loss * (1 + 1e-9)
  assert by_rms.blt.setting.loss == "rms"


def test_optimizer_reduces_infeasible_participations_with_warning():
  with pytest.warns(blt.ParticipationReducedWarning, match="ceil"):
    res = blt.optimize_blt(20, 8, 9, 1)
  assert res.max_participations == 3
  assert res.requested_max_participations == 9
  assert "feasible maximum" in res.message
  assert res.blt.setting.max_participations == 3
  with pytest.warns(blt.ParticipationReducedWarning):
    ev = res.blt.evaluate(20, 8, 9)
  assert ev.max_participations == 3
  assert ev.message is not None


def test_optimizer_starts_from_a_blt_with_a_decay_within_1e11_of_one():
  published = blt.PUBLISHED_BLTS[400]  # theta_1 = 1 - 7.9e-12.
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # No overflow / invalid-value warnings.
    res = blt.optimize_blt(300, 60, 5, 4, initial=published, num_starts=1,
                           warm_start=False)
  assert np.isfinite(res.loss_value)
  assert res.loss_value <= published.max_loss(300, 60, 5)
  assert res.blt.buffers == 4


def test_optimizer_refuses_initial_outside_its_domain():
  with pytest.raises(ValueError, match="`initial`"):
    blt.optimize_blt(50, 5, 2, 2, initial=blt.Blt((1.0, 0.5), (0.1, 0.2)))
  with pytest.raises(ValueError, match="`initial`"):
    blt.optimize_blt(50, 5, 2, 1, initial="blt")


def test_table3_two_buffer_rows():
  # Paper 004, Table 3 (n=2052, k=6, b=342), loss columns MaxLoss / RmsLoss.
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    single = blt.optimize_blt(2052, 342, 1, 2).blt.evaluate(2052, 342, 6)
    multi = blt.optimize_blt(2052, 342, 6, 2).evaluation
  assert round(single.max_loss, 2) == 11.80
  assert round(single.rms_loss, 2) == 11.15
  assert round(multi.max_loss, 2) == 10.81
  assert round(multi.rms_loss, 2) == 9.34


# The optimizer's losses before they were in closed form (scripts/bench_blt.py keeps them).
REFERENCE_LOSSES = bench_blt.REFERENCE_LOSSES
REFERENCE_TABLE3 = bench_blt.REFERENCE_TABLE3


@pytest.mark.parametrize("setting", sorted(REFERENCE_LOSSES))
def test_optimizer_reproduces_reference_losses(setting):
  res = blt.optimize_blt(*setting)
  assert res.loss_value == pytest.approx(REFERENCE_LOSSES[setting], rel=1e-6)
  ev = res.blt._evaluate_materialized(*setting[:3]) if setting[0] <= 4000 else None
  if ev is not None:  # The closed-form evaluation agrees with the materialized one.
    value = ev.max_loss if setting[4] == "max" else ev.rms_loss
    assert res.loss_value == pytest.approx(value, rel=1e-10)


@pytest.mark.parametrize("row", sorted(REFERENCE_TABLE3))
def test_optimizer_reproduces_reference_table3_rows(row):
  buffers, k = row
  ev = blt.optimize_blt(2052, 342, k, buffers).blt.evaluate(2052, 342, 6)
  want_max, want_rms = REFERENCE_TABLE3[row]
  assert ev.max_loss == pytest.approx(want_max, rel=1e-6)
  assert ev.rms_loss == pytest.approx(want_rms, rel=1e-6)


@pytest.mark.parametrize("loss", ["max", "rms"])
def test_runs_advanced_together_match_scipy_minimize_one_at_a_time(loss, monkeypatch):
  rng = np.random.default_rng(5)
  starts = [blt._params_from_gaps(*blt._initial_gaps(3, 500, rng, jitter=s > 0))
            for s in range(4)]
  args = (500, 50, 6, loss, blt.DEFAULT_PENALTY_STRENGTH, 25, 1e-12)
  together = blt._minimize_all(starts, *args)
  if blt._SETULB is None:
    pytest.skip("scipy's setulb has another signature: _minimize_all uses scipy.optimize")
  monkeypatch.setattr(blt, "_SETULB", None)
  alone = blt._minimize_all(starts, *args)
  for (y1, f1), (y2, f2) in zip(together, alone):  # Bitwise the same runs.
    assert f1 == f2
    np.testing.assert_array_equal(y1, y2)


def test_published_blts_are_valid_and_optimized_settings_hold():
  for min_sep, m in blt.PUBLISHED_BLTS.items():
    s = m.setting
    assert s.min_sep == min_sep and s.buffers == 4 == m.buffers
    ev = m.evaluate(s.n, s.min_sep, s.max_participations)
    assert ev.max_participations == s.max_participations  # feasible as stated.
    norm = np.linalg.norm(m.coef(s.n))  # One participation; k of them add up.
    assert norm < ev.sensitivity <= s.max_participations * norm
    assert ev.rms_loss < ev.max_loss


# ---------------------------------------------------------------------------
# Serialization and validation.


def test_json_round_trip_is_exact_and_keeps_setting():
  res = blt.optimize_blt(40, 5, 3, 2, loss="rms")
  text = res.blt.to_json()
  data = json.loads(text)
  assert data["mechanism"] == "blt"
  assert data["setting"] == {"n": 40, "min_sep": 5, "max_participations": 3,
                             "buffers": 2, "loss": "rms"}
  back = blt.Blt.from_json(text)
  assert back == res.blt
  plain = blt.Blt((0.5,), (0.25,))
  assert blt.Blt.from_json(plain.to_json()) == plain


@pytest.mark.parametrize("payload,match", [
    ({"mechanism": "banded", "version": 1, "bands": [[1.0]]}, "'banded'"),
    ({"version": 1, "theta": [0.5], "omega": [0.1]}, "None"),
    ({"mechanism": "blt", "version": 7, "theta": [0.5], "omega": [0.1]},
     "version"),
    ({"mechanism": "blt", "version": 1, "theta": [0.5]}, "omega"),
    ({"mechanism": "blt", "version": 1, "theta": [1.5], "omega": [0.1]},
     "theta\\[0\\]"),
    ({"mechanism": "blt", "version": 1, "theta": [0.5], "omega": [0.1],
      "setting": {"n": 10}}, "setting"),
])
def test_from_json_refuses_other_or_broken_json(payload, match):
  with pytest.raises(ValueError, match=match):
    blt.Blt.from_json(json.dumps(payload))


def test_from_json_refuses_non_json():
  with pytest.raises(ValueError, match="not valid JSON"):
    blt.Blt.from_json("{theta")
  with pytest.raises(ValueError, match="`text`"):
    blt.Blt.from_json(None)


def test_setting_must_match_buffers():
  setting = blt.BltSetting(10, 2, 3, 2, "max")
  with pytest.raises(ValueError, match="setting.buffers"):
    blt.Blt((0.5,), (0.2,), setting)
  with pytest.raises(ValueError, match="`loss`"):
    blt.BltSetting(10, 2, 3, 1, "mean")


@pytest.mark.parametrize("theta,omega,match", [
    ((0.0,), (0.1,), r"theta\[0\].*\(0, 1\].*0\.0"),
    ((1.2,), (0.1,), r"theta\[0\].*1\.2"),
    ((0.5, -0.1), (0.1, 0.1), r"theta\[1\]"),
    ((0.5,), (-0.1,), r"omega\[0\].*>= 0"),
    ((float("nan"),), (0.1,), "finite"),
    ((0.5,), (float("inf"),), "finite"),
    ((0.5, 0.6), (0.1,), "same length"),
    ((), (), "at least one"),
])
def test_invalid_parameters(theta, omega, match):
  with pytest.raises(ValueError, match=match):
    blt.Blt(theta, omega)


@pytest.mark.parametrize("kwargs,match", [
    (dict(n=0, min_sep=1, max_participations=1, buffers=1), "`n`.*0"),
    (dict(n=10, min_sep=0, max_participations=1, buffers=1), "`min_sep`"),
    (dict(n=10, min_sep=2, max_participations=0, buffers=1),
     "`max_participations`"),
    (dict(n=10, min_sep=2, max_participations=1, buffers=0), "`buffers`"),
    (dict(n=10, min_sep=2, max_participations=1, buffers=1, loss="mean"),
     "`loss`.*'mean'"),
    (dict(n=1, min_sep=1, max_participations=1, buffers=1), "`n`.*>= 2"),
    (dict(n=10, min_sep=2.5, max_participations=1, buffers=1), "`min_sep`"),
])
def test_optimizer_validation(kwargs, match):
  with pytest.raises(ValueError, match=match):
    blt.optimize_blt(**kwargs)


def test_evaluation_validation():
  m = blt.Blt((0.5,), (0.2,))
  with pytest.raises(ValueError, match="`n`"):
    m.evaluate(0, 1, 1)
  with pytest.raises(ValueError, match="`min_sep`"):
    m.sensitivity(10, -1, 1)
  with pytest.raises(ValueError, match="`max_participations`"):
    m.max_loss(10, 1, 0)


def test_cross_check_with_shared_toeplitz_and_sensitivity_modules():
  m = blt.PUBLISHED_BLTS[400]
  n, min_sep, k = 500, 100, 5
  c = m.coef(n)
  np.testing.assert_allclose(toeplitz.inverse_coef(c), m.inverse_coef(n),
                             atol=1e-10)
  assert toeplitz.max_error(c) == pytest.approx(m.max_error(n), rel=1e-8)
  assert toeplitz.rms_error(c) == pytest.approx(m.rms_error(n), rel=1e-8)
  assert sensitivity.toeplitz_sensitivity(c, min_sep, k) == pytest.approx(
      m.sensitivity(n, min_sep, k), rel=1e-12)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
