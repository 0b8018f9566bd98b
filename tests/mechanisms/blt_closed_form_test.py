"""Tests of dp_fl.mechanisms.blt_closed_form against the materialized BLT losses.

Paper 004: Thm. 3.1 (sensitivity), Prop. 3.3 (MaxError, RmsError), Alg. 4 (the
optimizer's loss and its gradient). The oracles materialize the n coefficients:
`oracles.blt_evaluate_materialized`, `oracles.blt_loss_from_gaps`, direct sums.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from dp_fl.mechanisms import blt
from dp_fl.mechanisms import blt_closed_form as cf
from dp_fl.mechanisms import blt_optimize
from tests.mechanisms import oracles

RTOL = 1e-10  # Closed form vs materialized: values.
FIELDS = ("sensitivity", "max_error", "rms_error", "max_loss", "rms_loss")


def _gaps(smallest: float, d: int, seed: int) -> np.ndarray:
  """Interleaved descending gaps (g_hat_1, g_1, ..., g_hat_d, g_d) from `smallest` up to ~0.8.

  Log-spaced with a deterministic jitter; the smallest gap g_d is `smallest`.
  """
  pts = np.log(np.geomspace(0.8, smallest, 2 * d))
  jitter = np.random.default_rng(seed).uniform(-0.3, 0.3, size=2 * d)
  jitter[0] = min(jitter[0], 0.0)  # g_hat_1 <= 0.8 (theta_hat_1 > 0).
  jitter[-1] = 0.0
  step = (pts[0] - pts[-1]) / max(2 * d - 1, 1)
  return np.exp(pts + jitter * step)


def _near_equal(d: int, seed: int) -> np.ndarray:
  """Gaps where theta_1 and theta_2 (and theta_hat_2 between them) agree to ~1e-9 relative."""
  z = _gaps(1e-6, d, seed)
  z[2] = z[1] * (1.0 - 5e-10)  # g_hat_2
  z[3] = z[1] * (1.0 - 1e-9)   # g_2
  return z


def _blt(z: np.ndarray) -> blt.Blt:
  return blt.Blt.from_decays(1.0 - z[1::2], 1.0 - z[0::2])


def _optimizer_gaps(m: blt.Blt) -> np.ndarray:
  gap_hat, _ = m._inverse_gaps_and_scales()
  gap = m._gaps()
  order = np.argsort(-gap)
  z = np.empty(2 * gap.size)
  z[0::2] = gap_hat[order]
  z[1::2] = gap[order]
  return z


# Hard cases: decays near 1 (gaps 1e-13, 1e-11, 1e-8), near-equal decays, d = 1..5,
# the published App. A BLTs (their last two decays agree to 2e-10 relative).
GAPS = {f"d{d}_gap{smallest:g}": _gaps(smallest, d, 10 * d + i)
        for d in range(1, 6) for i, smallest in enumerate((1e-13, 1e-11, 1e-8, 1e-3))}
GAPS.update({f"near_equal_d{d}": _near_equal(d, d) for d in (2, 3, 4)})
GAPS.update({f"app_a_{b}": _optimizer_gaps(m) for b, m in blt.PUBLISHED_BLTS.items()})

BLTS = {name: _blt(z) for name, z in GAPS.items()}
BLTS.update({f"published_{b}": m for b, m in blt.PUBLISHED_BLTS.items()})
BLTS.update({
    "theta_one": blt.Blt((1.0, 0.7), (0.01, 0.3)),
    "omega_zero": blt.Blt((0.8, 0.4), (0.0, 0.3)),
    "equal_decays": blt.Blt((0.6, 0.6), (0.1, 0.2)),
    "identity": blt.Blt((0.5,), (0.0,)),
    "one_buffer_near_one": blt.Blt((1.0 - 8e-12,), (3e-12,)),
})

# (n, b, k): n from 2 to 1e5, n a multiple of b and not, k = 1, k = ceil(n / b),
# b = 1 (k = n), b >= n.
SETTINGS = [
    (2, 1, 2), (2, 5, 1), (10, 3, 4), (12, 4, 3), (300, 1, 300), (2000, 400, 5),
    (2001, 400, 6), (2052, 342, 6), (4000, 1000, 1), (99999, 7919, 13),
    (100000, 20000, 5), (100000, 100000, 1), (100000, 250000, 1),
]


def _relative(a: float, b: float) -> float:
  return abs(a - b) / abs(b)


@pytest.mark.parametrize("name", sorted(BLTS))
def test_evaluate_matches_materialized(name):
  m = BLTS[name]
  worst = 0.0
  for n, min_sep, k in SETTINGS:
    closed = m.evaluate(n, min_sep, k)
    materialized = oracles.blt_evaluate_materialized(m, n, min_sep, k)
    for field in FIELDS:
      err = _relative(getattr(closed, field), getattr(materialized, field))
      assert err <= RTOL, (name, n, min_sep, k, field, err)
      worst = max(worst, err)
  assert closed.max_participations == materialized.max_participations
  assert worst < RTOL


@pytest.mark.parametrize("name", ["d4_gap1e-13", "near_equal_d3", "published_400", "theta_one"])
def test_public_methods_match_materialized(name):
  m = BLTS[name]
  n, min_sep, k = 5000, 700, 8
  materialized = oracles.blt_evaluate_materialized(m, n, min_sep, k)
  assert m.sensitivity(n, min_sep, k) == pytest.approx(materialized.sensitivity, rel=RTOL)
  assert m.max_error(n) == pytest.approx(materialized.max_error, rel=RTOL)
  assert m.rms_error(n) == pytest.approx(materialized.rms_error, rel=RTOL)
  assert m.max_loss(n, min_sep, k) == pytest.approx(materialized.max_loss, rel=RTOL)
  assert m.rms_loss(n, min_sep, k) == pytest.approx(materialized.rms_loss, rel=RTOL)
  b = m.b_coef(n)
  assert m.max_error(n) == pytest.approx(math.sqrt(math.fsum(b * b)), rel=RTOL)


def test_errors_fall_back_to_materialized_for_a_negative_inverse_decay():
  # theta_hat = 0.5 - 0.9 < 0: b_s alternates, outside the closed form's domain.
  m = blt.Blt((0.5,), (0.9,))
  assert m.inverse_parameters()[0][0] < 0
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    np.testing.assert_equal(m._squared_errors(30), m._squared_errors_materialized(30))


def test_sensitivity_refuses_increasing_coefficients():
  with pytest.raises(ValueError, match="sum\\(omega\\)"):
    blt.Blt((0.5, 0.9), (0.6, 0.6)).sensitivity(10, 2, 2)


# ---------------------------------------------------------------------------
# The moment sums S, U, W.


def _direct_moments(lam: float, n: int) -> tuple[float, float, float]:
  u = np.arange(n, dtype=np.float64)
  terms = np.exp(-lam * u)
  return (math.fsum(terms), math.fsum(u * terms), math.fsum(u * u * terms))


LAMBDAS = [0.0, 1e-282, 1e-13, 1e-11, 3e-9, 1e-5, 1e-3, 0.05, 0.4999, 0.5, 0.5001,
           math.log(2.0) * (1 - 1e-12), math.log(2.0), 0.9, 1.0, 3.0, 30.0, 400.0]
COUNTS = [0, 1, 2, 3, 5, 17, 256, 2000, 100000]


def test_moments_match_direct_sums():
  lam = np.array([x for x in LAMBDAS for _ in COUNTS])
  counts = np.array([float(c) for _ in LAMBDAS for c in COUNTS])
  got = cf._moments(np.maximum(lam, cf._TINY)[None, :], counts, True)[0]
  for i, (x, c) in enumerate(zip(lam, counts)):
    want = _direct_moments(x, int(c))
    for j in range(3):
      if want[j] == 0.0:
        assert got[j, i] == 0.0, (x, c, j)
      else:
        assert got[j, i] == pytest.approx(want[j], rel=5e-13), (x, c, j)


@pytest.mark.parametrize("lam", [1e-4, 0.3, 0.6931, 0.7, 2.0])
@pytest.mark.parametrize("count", [2, 7, 1000])
def test_moments_are_derivatives_of_each_other(lam, count):
  # dS/dlambda = -U and dU/dlambda = -W (central differences).
  h = 1e-4 * lam
  at = lambda x: cf._moments(np.array([[x]]), np.array([float(count)]), True)[0, :, 0]
  s, u, w = at(lam)
  plus, minus = at(lam + h), at(lam - h)
  assert -(plus[0] - minus[0]) / (2 * h) == pytest.approx(u, rel=1e-6)
  assert -(plus[1] - minus[1]) / (2 * h) == pytest.approx(w, rel=1e-6)


def test_moments_keep_precision_where_textbook_forms_cancel():
  # sum_{u<n} (n-1-u) theta^u = (n - S)/g loses ~8 digits at g = 1e-11, n = 2000.
  g, n = 1e-11, 2000
  lam = -math.log1p(-g)
  s, u = cf._moments(np.array([[lam]]), np.array([float(n)]), False)[0, :, 0]
  exact = (n - 1) * n / 2 - g * (n - 2) * (n - 1) * n / 6  # to O(g^2 n^4) = 1e-9 relative
  assert (n - 1) * s - u == pytest.approx(exact, rel=1e-12)


# ---------------------------------------------------------------------------
# The optimizer's objective (Alg. 4) and its gradient.

LOSS_SETTINGS = [(2, 1, 2), (10, 3, 4), (300, 40, 5), (300, 1, 300), (2000, 400, 5),
                 (2001, 400, 6), (2052, 342, 1), (20000, 3000, 7), (100, 250, 1)]


def _materialized(z, n, min_sep, k, loss, penalty):
  parts = oracles.blt_loss_from_gaps(z[1::2], z[0::2], n, min_sep, k, loss, penalty)
  grad = np.empty_like(z)
  grad[0::2] = parts.grad_gap_hat
  grad[1::2] = parts.grad_gap
  return parts, grad


def _near_equal_case(name: str) -> bool:
  return name.startswith(("near_equal", "app_a_100"))


@pytest.mark.parametrize("name", sorted(GAPS))
@pytest.mark.parametrize("loss", ["max", "rms"])
def test_objective_matches_materialized_loss_and_gradient(name, loss):
  z = GAPS[name]
  # d objective / d log z compared on the scale of the objective and the gradient.
  # Near-equal decays (relative distance 1e-9) lose ~9 digits of the gradient in
  # Alg. 5's 1/(z_b - z_a), in both forms (checked with 60-digit arithmetic: each
  # is within ~1e-6 of the exact gradient there).
  grad_tol = 1e-5 if _near_equal_case(name) else 1e-9
  for n, min_sep, k in LOSS_SETTINGS:
    parts, grad_ref = _materialized(z, n, min_sep, k, loss, 1e-7)
    obj, value, sens, err, grad = cf.objective(z, cf.plan(n, min_sep, k), loss, 1e-7)
    assert sens == pytest.approx(parts.sens, rel=RTOL)
    assert err == pytest.approx(parts.error, rel=RTOL)
    assert value == pytest.approx(parts.loss, rel=RTOL)
    assert obj == pytest.approx(parts.objective, rel=RTOL)
    scale = abs(obj) + np.max(np.abs(grad_ref * z))
    np.testing.assert_array_less(np.abs((grad - grad_ref) * z), grad_tol * scale)


def _well_separated(z: np.ndarray) -> bool:
  return bool(np.min(-np.diff(np.log(z))) > 1e-3)


@pytest.mark.parametrize("name", [n for n in sorted(GAPS) if _well_separated(GAPS[n])])
@pytest.mark.parametrize("loss", ["max", "rms"])
def test_gradient_matches_central_differences(name, loss):
  z = GAPS[name]
  for n, min_sep, k in [(10, 3, 4), (2000, 400, 5), (300, 1, 300), (2052, 342, 1)]:
    pl = cf.plan(n, min_sep, k)
    obj, _, _, _, grad = cf.objective(z, pl, loss, 1e-7)
    h = 1e-6  # relative step: central differences in log z.
    fd = np.empty_like(z)
    for i in range(z.size):
      up, down = z.copy(), z.copy()
      up[i] *= math.exp(h)
      down[i] *= math.exp(-h)
      fd[i] = (cf.objective(up, pl, loss, 1e-7, want_grad=False)[0] -
               cf.objective(down, pl, loss, 1e-7, want_grad=False)[0]) / (2 * h)
    scale = abs(obj) + np.max(np.abs(fd))
    np.testing.assert_array_less(np.abs(grad * z - fd), 1e-7 * scale)


@pytest.mark.parametrize("loss", ["max", "rms"])
def test_optimizer_objective_in_logits_matches_materialized(loss):
  for name in ("d3_gap1e-11", "d4_gap1e-08", "app_a_400"):
    z = GAPS[name]
    y = blt_optimize._params_from_gaps(z[1::2].copy(), z[0::2].copy())
    np.testing.assert_allclose(blt_optimize._gaps_from_params(y)[0], z[1::2], rtol=1e-12)
    args = (2052, 342, 6, loss, 1e-7)
    f, grad = oracles.blt_objective_at(y, *args)
    f_ref, grad_ref = oracles.blt_objective_materialized(y, *args)
    assert f == pytest.approx(f_ref, rel=RTOL)
    np.testing.assert_allclose(grad, grad_ref, rtol=1e-7, atol=1e-9 * abs(f_ref))


def test_batched_evaluation_equals_one_at_a_time():
  pl = cf.plan(2000, 400, 5)
  rows = [GAPS[name] for name in ("d4_gap1e-13", "d4_gap1e-08", "app_a_400", "near_equal_d4")]
  logits = np.log1p(-np.stack(rows)) - np.log(np.stack(rows))
  for loss in ("max", "rms"):
    f, g = cf.objective_in_logits(logits, pl, loss, 1e-7)
    for i in range(len(rows)):  # Bitwise: batching never changes an optimizer's run.
      f1, g1 = cf.objective_in_logits(logits[i:i + 1], pl, loss, 1e-7)
      assert f1[0] == f[i]
      np.testing.assert_array_equal(g1[0], g[i])


def test_rows_that_lost_the_interlacing_get_an_infinite_objective():
  pl = cf.plan(100, 10, 5)
  good = np.log1p(-GAPS["d2_gap1e-08"]) - np.log(GAPS["d2_gap1e-08"])
  bad = good.copy()
  bad[2] = bad[1]  # Two equal gaps.
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    f, g = cf.objective_in_logits(np.stack([bad, good]), pl, "max", 1e-7)
  assert f[0] == math.inf and not np.any(g[0])
  assert f[1] == cf.objective_in_logits(good[None], pl, "max", 1e-7)[0][0]


def test_chunks_give_the_same_losses(monkeypatch):
  # b = 1 makes k = n lags; small chunks split them over many evaluations.
  name, n, min_sep, k = "d3_gap1e-11", 400, 1, 400
  z = GAPS[name]
  whole = cf.objective(z, cf.Plan(n, min_sep, k), "rms", 1e-7)
  sens_whole = cf.sensitivity_squared(n, min_sep, k, 1.0 - z[1::2], [0.1, 0.2, 0.3])
  monkeypatch.setattr(cf, "CHUNK_ELEMENTS", 50)
  cf.plan.cache_clear()
  try:
    chunked_plan = cf.Plan(n, min_sep, k)
    assert len(chunked_plan.workspace(3).chunks) > 30
    chunked = cf.objective(z, chunked_plan, "rms", 1e-7)
    sens_chunked = cf.sensitivity_squared(n, min_sep, k, 1.0 - z[1::2], [0.1, 0.2, 0.3])
  finally:
    cf.plan.cache_clear()
  for a, b in zip(whole[:4], chunked[:4]):
    assert a == pytest.approx(b, rel=1e-13)
  np.testing.assert_allclose(chunked[4], whole[4], rtol=1e-11, atol=1e-12 * whole[0])
  assert sens_chunked == pytest.approx(sens_whole, rel=1e-13)
  parts, _ = _materialized(z, n, min_sep, k, "rms", 1e-7)
  assert chunked[2] == pytest.approx(parts.sens, rel=RTOL)


@pytest.mark.parametrize("n,min_sep,k", [(0, 1, 1), (10, 0, 1), (10, 3, 0), (10, 3, 5)])
def test_plan_refuses_infeasible_settings(n, min_sep, k):
  with pytest.raises(ValueError, match="ceil\\(n / min_sep\\)"):
    cf.Plan(n, min_sep, k)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
