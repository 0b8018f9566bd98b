"""Tests of dp_fl.mechanisms.optimize, the optimizer the mechanism families share: the batched
L-BFGS-B runs against scipy's one at a time (bitwise), restarts, screening and polishing of
many starts, and the preconditioned L-BFGS on problems with a known minimum."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize

from dp_fl import resources
from dp_fl.mechanisms import optimize

_OPTIONS = optimize.LbfgsbOptions(max_iterations=200, ftol=1e-13, gtol=1e-10, maxcor=7)


def _rosenbrock_rows(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Rosenbrock's function and gradient for every row of `points` (B, p), rows independent."""
  x, y = points[:, :-1], points[:, 1:]
  values = np.sum(100.0 * (y - x * x) ** 2 + (1.0 - x) ** 2, axis=1)
  grads = np.zeros_like(points)
  grads[:, :-1] = -400.0 * x * (y - x * x) - 2.0 * (1.0 - x)
  grads[:, 1:] += 200.0 * (y - x * x)
  return values, grads


def _rosenbrock(point: np.ndarray) -> tuple[float, np.ndarray]:
  values, grads = _rosenbrock_rows(point[None, :])
  return float(values[0]), grads[0]


_STARTS = [np.array([-1.2, 1.0, 0.5]), np.array([0.3, -0.4, 2.0]), np.array([1.9, 1.9, -1.9])]
_LOWER, _UPPER = np.full(3, -2.0), np.full(3, 1.5)


def test_minimize_lbfgsb_is_scipys_l_bfgs_b():
  for bounds in (None, list(zip(_LOWER, _UPPER))):
    x, f = optimize.minimize_lbfgsb(_rosenbrock, _STARTS[0], _OPTIONS, bounds=bounds)
    want = scipy.optimize.minimize(_rosenbrock, _STARTS[0], jac=True, method="L-BFGS-B",
                                   bounds=bounds, options=_OPTIONS.scipy_options())
    np.testing.assert_array_equal(x, want.x)
    assert f == want.fun
  assert f == pytest.approx(0.0, abs=1e-12)


def test_runs_advanced_together_equal_scipy_one_at_a_time(monkeypatch):
  together = optimize.minimize_together(_STARTS, _LOWER, _UPPER, _rosenbrock_rows, _OPTIONS,
                                        restarts=2)
  if optimize._SETULB is None:  # pylint: disable=protected-access
    pytest.skip("scipy's setulb has another signature: minimize_together uses scipy alone")
  monkeypatch.setattr(optimize, "_SETULB", None)
  alone = optimize.minimize_together(_STARTS, _LOWER, _UPPER, _rosenbrock_rows, _OPTIONS,
                                     restarts=2)
  for (x1, f1), (x2, f2) in zip(together, alone):  # Bitwise the same runs.
    assert f1 == f2
    np.testing.assert_array_equal(x1, x2)
  assert all(np.all((_LOWER <= x) & (x <= _UPPER)) for x, _ in together)


def test_run_together_evaluates_the_waiting_runs_in_one_call():
  calls = []

  def evaluate(points):
    calls.append(points.shape[0])
    return _rosenbrock_rows(points)

  def run(start, steps):  # A run that asks for `steps` points, then returns the last.
    point = start
    for _ in range(steps):
      f, g = yield point
      point = point - 1e-3 * g
    return point, f

  results = optimize.run_together([run(_STARTS[0], 3), run(_STARTS[1], 1)], evaluate)
  assert calls == [2, 1, 1]
  assert len(results) == 2 and all(np.isfinite(f) for _, f in results)


def test_restarted_stops_without_improvement_and_reports_inf_when_nothing_is_finite():
  improvements = iter([(np.array([1.0]), 5.0), (np.array([2.0]), 4.0), (np.array([3.0]), 4.0)])

  def run(_):
    return next(improvements)
    yield  # pylint: disable=unreachable

  results = optimize.run_together([optimize.restarted(np.array([0.0]), 10, run)],
                                  _rosenbrock_rows)
  assert results[0][1] == 4.0 and results[0][0][0] == 2.0  # The third run did not improve.

  def never_finite(_):
    return np.array([9.0]), np.inf
    yield  # pylint: disable=unreachable

  results = optimize.run_together([optimize.restarted(np.array([0.0]), 3, never_finite)],
                                  _rosenbrock_rows)
  assert results[0][1] == np.inf and results[0][0][0] == 0.0


def test_best_of_starts_screens_all_and_polishes_the_best():
  calls = []

  def minimize(starts, iterations, restarts):
    calls.append((len(starts), iterations, restarts))
    return [(y, float(np.sum(y ** 2)) if np.all(np.isfinite(y)) else np.inf) for y in starts]

  starts = [np.array([3.0]), np.array([np.nan]), np.array([-1.0]), np.array([2.0])]
  progress = resources.Progress("test", 10)
  f, y = optimize.best_of_starts(starts, minimize, screen_iterations=5, max_iterations=50,
                                 num_polished=2, progress=progress)
  assert (f, y[0]) == (1.0, -1.0)
  assert calls == [(4, 5, 1), (2, 50, optimize.DEFAULT_RESTARTS)]
  assert progress.done == 6
  assert optimize.best_of_starts([np.array([np.nan])], minimize, screen_iterations=1,
                                 max_iterations=1, num_polished=1) is None


def test_scaled_lbfgs_finds_the_minimum_of_an_ill_conditioned_quadratic_on_its_mask():
  rng = np.random.default_rng(0)
  mask = rng.uniform(size=(30, 4)) < 0.7
  weights = np.exp(rng.uniform(-4.0, 4.0, size=(30, 4)))  # Curvatures over 8 decades.
  target = rng.normal(size=(30, 4))

  def fun(x):
    r = (x - target) * mask
    return float(np.sum(weights * r * r)), 2.0 * weights * r

  scale = np.sqrt(weights)  # The exact diagonal preconditioner.
  x = optimize.minimize_scaled_lbfgs(fun, np.zeros((30, 4)), mask, scale, 2.0, 100, 1e-15,
                                     memory=5)
  np.testing.assert_allclose(x[mask], target[mask], rtol=1e-8, atol=1e-8)
  assert np.all(x[~mask] == 0.0)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
