"""Tests of dp_fl.mechanisms.blt against dense brute force (paper 004, Sec. 2.4-3.2, App. A;
the Sec. 3.3 optimizer: blt_optimize_test.py)."""

from __future__ import annotations

import json

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from dp_fl.mechanisms import blt
from dp_fl.mechanisms import sensitivity
from dp_fl.mechanisms import toeplitz
from tests.mechanisms import oracles

_SETTINGS = hypothesis.settings(derandomize=True, deadline=None, max_examples=25)


# ---------------------------------------------------------------------------
# Dense references, written independently of the module under test.


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
  np.testing.assert_allclose(m.coef(40), oracles.blt_coefficients(theta, omega, 40), rtol=1e-12,
                             atol=0)


@pytest.mark.parametrize("theta,omega", HARD_CASES)
def test_inverse_coef_inverts_dense_matrix(theta, omega):
  m = blt.Blt(theta, omega)
  n = 120
  c = oracles.dense_toeplitz(m.coef(n))
  c_inv = oracles.dense_toeplitz(m.inverse_coef(n))
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
  c = oracles.dense_toeplitz(m.coef(n))
  np.testing.assert_allclose(c @ oracles.dense_toeplitz(m.inverse_coef(n)), np.eye(n),
                             atol=1e-9)


def test_from_decays_refuses_non_interlaced_decays():
  with pytest.raises(ValueError, match="interlace"):
    blt.Blt.from_decays([0.5, 0.9], [0.95, 0.97])


@pytest.mark.parametrize("n,min_sep,k", [(10, 3, 3), (12, 4, 2), (9, 2, 4),
                                         (8, 1, 3)])
@pytest.mark.parametrize("theta,omega", HARD_CASES[:4])
def test_sensitivity_thm31_matches_enumeration(theta, omega, n, min_sep, k):
  m = blt.Blt(theta, omega)
  dense = oracles.dense_toeplitz(oracles.blt_coefficients(theta, omega, n))
  brute = oracles.max_pattern_norm(dense, min_sep, k)
  assert m.sensitivity(n, min_sep, k) == pytest.approx(brute, rel=1e-12)


@pytest.mark.parametrize("theta,omega", HARD_CASES)
def test_errors_and_losses_match_dense(theta, omega):
  n, min_sep, k = 90, 20, 4
  m = blt.Blt(theta, omega)
  sens, max_err, rms_err, sq = oracles.blt_dense_losses(theta, omega, n, min_sep, k)
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
# The Alg. 4 oracle (`oracles.blt_loss_from_gaps`, which the closed form is tested against)
# against dense matrices and finite differences.


@pytest.mark.parametrize("loss", ["max", "rms"])
@pytest.mark.parametrize("d", [1, 3])
def test_private_loss_matches_dense(loss, d):
  rng = np.random.default_rng(d)
  gap, gap_hat = oracles.interlaced_gaps(d, rng, smallest=1e-3)
  n, min_sep, k = 70, 15, 3
  parts = oracles.blt_loss_from_gaps(gap, gap_hat, n, min_sep, k, loss, 0.0)
  omega = blt.calc_output_scale(1.0 - gap, 1.0 - gap_hat)
  sens, max_err, rms_err, _ = oracles.blt_dense_losses(1.0 - gap, omega, n, min_sep, k)
  assert parts.sens == pytest.approx(sens, rel=1e-10)
  assert parts.error == pytest.approx(max_err if loss == "max" else rms_err,
                                      rel=1e-8)
  assert parts.objective == parts.loss


@pytest.mark.parametrize("loss", ["max", "rms"])
@pytest.mark.parametrize("d,smallest", [(1, 1e-3), (2, 1e-11), (4, 1e-6)])
def test_private_loss_gradient_matches_finite_differences(loss, d, smallest):
  rng = np.random.default_rng(10 * d)
  gap, gap_hat = oracles.interlaced_gaps(d, rng, smallest)
  args = (300, 40, 5, loss, 1e-7)
  parts = oracles.blt_loss_from_gaps(gap, gap_hat, *args)
  # Central differences relative to each coordinate's size (gaps span 1e-11..1).
  for vec, grad, which in ((gap, parts.grad_gap, 0), (gap_hat, parts.grad_gap_hat, 1)):
    for j in range(d):
      h = 1e-6 * vec[j]
      plus, minus = vec.copy(), vec.copy()
      plus[j] += h
      minus[j] -= h
      if which == 0:
        fp = oracles.blt_loss_from_gaps(plus, gap_hat, *args, with_grad=False).objective
        fm = oracles.blt_loss_from_gaps(minus, gap_hat, *args, with_grad=False).objective
      else:
        fp = oracles.blt_loss_from_gaps(gap, plus, *args, with_grad=False).objective
        fm = oracles.blt_loss_from_gaps(gap, minus, *args, with_grad=False).objective
      fd = (fp - fm) / (2 * h)
      assert grad[j] * vec[j] == pytest.approx(fd * vec[j], rel=1e-5, abs=1e-7)


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
