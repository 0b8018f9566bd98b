"""The optimizer shared by the mechanism families: L-BFGS(-B) drivers, restarts, many starts.

Every optimized mechanism here minimizes a smooth loss with analytic gradients in float64
(paper 004, Sec. 3.3: "L-BFGS ... with analytic gradients"); what differs between families is
the parameterization and the objective, which stay in the family's module. This module holds
what they share:

* `LbfgsbOptions`: the L-BFGS-B options (iterations, ftol, gtol, memory, line-search steps), the
  same meaning as `scipy.optimize.minimize(method="L-BFGS-B")`'s.
* `minimize_lbfgsb`: one run of scipy's L-BFGS-B (BandInvMF; BLT where `setulb` is missing).
* `lbfgsb_steps`: the same L-BFGS-B as a generator that yields the points it needs evaluated,
  driving scipy's Fortran `setulb` directly, so that `run_together` can advance many runs with
  one batched evaluation per round (BLT: every run sees exactly the values it would see alone).
* `restarted`: fresh-memory restarts of a run while it still improves.
* `minimize_together`: `restarted` runs from many starts, advanced together.
* `best_of_starts`: screen every start briefly, polish the best few to convergence.
* `minimize_scaled_lbfgs`: an unconstrained L-BFGS on a masked, diagonally preconditioned array
  (BandMF, ~10^6 parameters, where L-BFGS-B's bound bookkeeping costs more than the objective).

Nothing here knows a mechanism: objectives come in as callables returning (value, gradient).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Generator, Optional, Sequence

import numpy as np
import scipy.optimize
from scipy.linalg import blas

from dp_fl import resources

# Fresh-memory restarts of a polishing run (`restarted`) while it still improves.
DEFAULT_RESTARTS = 4
# A restart that improves the objective by at most this (relative) ends the restarts.
_RESTART_IMPROVEMENT = 1e-10

Objective = Callable[[np.ndarray], tuple[float, np.ndarray]]
BatchObjective = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
# A run: yields points (p,), is sent (f, grad) there, returns (x, f).
Run = Generator[np.ndarray, tuple[float, np.ndarray], tuple[np.ndarray, float]]


@dataclasses.dataclass(frozen=True)
class LbfgsbOptions:
  """Options of one L-BFGS-B run, as `scipy.optimize.minimize(method="L-BFGS-B")` names them.

  max_iterations: `maxiter`; ftol: relative decrease of f that stops a run; gtol: largest
  projected-gradient entry that stops it; maxcor: pairs kept in the limited memory; maxls:
  line-search steps per iteration. `maxcor` and `maxls` default to scipy's.
  """
  max_iterations: int
  ftol: float
  gtol: float
  maxcor: int = 10
  maxls: int = 20

  def scipy_options(self) -> dict[str, Any]:
    return {"maxiter": self.max_iterations, "ftol": self.ftol, "maxls": self.maxls,
            "gtol": self.gtol, "maxcor": self.maxcor}


def minimize_lbfgsb(objective: Callable[..., tuple[float, np.ndarray]], x0: np.ndarray,
                    options: LbfgsbOptions, *, args: tuple = (),
                    bounds: Optional[Sequence[tuple[float, float]]] = None
                    ) -> tuple[np.ndarray, float]:
  """(x, f): one `scipy.optimize.minimize(method="L-BFGS-B")` run of `objective(x, *args)`,
  which returns (value, gradient), from x0 within `bounds` (None: unbounded)."""
  res = scipy.optimize.minimize(objective, x0, args=args, jac=True, method="L-BFGS-B",
                                bounds=bounds, options=options.scipy_options())
  return res.x, float(res.fun)


# ---------------------------------------------------------------------------
# L-BFGS-B by reverse communication, and many runs advanced together.


def _setulb():
  """scipy's L-BFGS-B routine `setulb` (private module) if its signature is the
  reverse-communication one `lbfgsb_steps` drives, else None."""
  try:
    from scipy.optimize import _lbfgsb  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  routine = getattr(_lbfgsb, "setulb", None)
  doc = getattr(routine, "__doc__", "") or ""
  if not doc.startswith("setulb(m,x,l,u,nbd,f,g,factr,pgtol,wa,iwa,task,iprint,"
                        "csave,lsave,isave,dsave,maxls"):
    return None
  return routine, _lbfgsb.types.intvar.dtype


_SETULB = _setulb()


def lbfgsb_steps(x0: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                 options: LbfgsbOptions) -> Run:
  """L-BFGS-B as a generator: yields each point to evaluate, is sent (f, grad)
  there, and returns (x, f).

  Drives scipy's Fortran `setulb` with the reverse-communication loop of
  `scipy.optimize.minimize(method="L-BFGS-B")` (FG: evaluate, never twice at the
  same point; NEW_X: count an iteration; anything else: stop) and `options`, so the
  iterates are the same as that function's; it skips that function's per-evaluation
  wrappers, and lets `run_together` evaluate the points of several runs in one batched call.
  Needs `_SETULB` (not None).
  """
  setulb, int_type = _SETULB
  size = x0.size
  m = options.maxcor
  x = np.array(np.clip(x0, lower, upper), dtype=np.float64)
  bound_type = np.full(size, 2, dtype=int_type)  # Lower and upper bounds.
  f = np.array(0.0)
  g = np.zeros(size)
  wa = np.zeros(2 * m * size + 5 * size + 11 * m * m + 8 * m)
  iwa = np.zeros(3 * size, int_type)
  task = np.zeros(1, "S60")
  task[:] = "START"
  csave = np.zeros(1, "S60")
  lsave = np.zeros(4, int_type)
  isave = np.zeros(44, int_type)
  dsave = np.zeros(29)
  factr = options.ftol / np.finfo(float).eps
  gtol = options.gtol
  iterations = 0
  last = None
  while True:
    setulb(m, x, lower, upper, bound_type, f, g, factr, gtol, wa, iwa, task, -1,
           csave, lsave, isave, dsave, options.maxls)
    state = task.tobytes()
    if state.startswith(b"FG"):
      if last is None or not np.array_equal(x, last):
        last = x.copy()
        f, g = yield last
        # setulb updates g in place and needs its own contiguous float64 array.
        f, g = float(f), np.array(g, dtype=np.float64)
    elif state.startswith(b"NEW_X"):
      iterations += 1
      if iterations >= options.max_iterations:
        task[:] = "STOP: TOTAL NO. of ITERATIONS REACHED LIMIT"
    else:
      return x, float(f)


def _scipy_lbfgsb_steps(objective: Objective, x0: np.ndarray, lower: np.ndarray,
                        upper: np.ndarray, options: LbfgsbOptions) -> Run:
  """`lbfgsb_steps` by `minimize_lbfgsb` (where `setulb` is not usable): a generator that
  yields nothing, evaluating `objective` itself."""
  return minimize_lbfgsb(objective, x0, options, bounds=list(zip(lower, upper)))
  yield  # pylint: disable=unreachable  (makes this a generator)


def restarted(y0: np.ndarray, restarts: int, run: Callable[[np.ndarray], Run]) -> Run:
  """Generator of L-BFGS-B runs `run(y)` (`lbfgsb_steps`) from `y0`, restarted with
  a fresh memory while a run still improves (by more than 1e-10 relative);
  returns (y, f), f = inf if no run found a finite objective."""
  y = y0
  f = np.inf
  # L-BFGS-B can stop early on landscapes whose curvature changes by orders of
  # magnitude; restarting with a fresh memory continues while it helps.
  for _ in range(restarts):
    y_new, f_new = yield from run(y)
    improved = f - f_new
    if not f_new < f:
      break
    y, f = y_new, f_new
    if improved <= _RESTART_IMPROVEMENT * abs(f):
      break
  return y, f


def run_together(runs: Sequence[Run], evaluate: BatchObjective) -> list[tuple[np.ndarray, float]]:
  """Results of the generators `runs` (`restarted`), advanced together.

  Each round, the points that all unfinished runs ask for are evaluated by one
  call `evaluate(points (B, p)) -> (f (B,), grad (B, p))`; every run sees
  exactly the values it would see alone when the evaluation of a row does not
  depend on the other rows, bitwise.
  """
  results = [None] * len(runs)
  asked = {}
  for i, run in enumerate(runs):
    try:
      asked[i] = next(run)
    except StopIteration as stop:
      results[i] = stop.value
  while asked:
    waiting = list(asked)
    f, g = evaluate(np.stack([asked[i] for i in waiting]))
    for row, i in enumerate(waiting):
      try:
        asked[i] = runs[i].send((f[row], g[row]))
      except StopIteration as stop:
        del asked[i]
        results[i] = stop.value
  return results


def minimize_together(starts: Sequence[np.ndarray], lower: np.ndarray, upper: np.ndarray,
                      evaluate: BatchObjective, options: LbfgsbOptions,
                      restarts: int = DEFAULT_RESTARTS) -> list[tuple[np.ndarray, float]]:
  """[(y, f)] of `restarted` L-BFGS-B runs within [lower, upper] from each of `starts`.

  `evaluate(points (B, p)) -> (f (B,), grad (B, p))` must evaluate each row independently of
  the others. With scipy's `setulb` the runs advance together (`run_together`), so one batched
  evaluation serves every run per round; without it, each run is `minimize_lbfgsb` in turn on
  single rows (the same iterates).
  """
  if _SETULB is not None:
    run = lambda y: lbfgsb_steps(y, lower, upper, options)
  else:
    def objective(y):
      f, g = evaluate(y[None, :])
      return float(f[0]), g[0]
    run = lambda y: _scipy_lbfgsb_steps(objective, y, lower, upper, options)
  return run_together([restarted(np.clip(y0, lower, upper), restarts, run) for y0 in starts],
                      evaluate)


Minimize = Callable[[list, int, int], list]  # (starts, max_iterations, restarts) -> [(y, f)]


def best_of_starts(starts: list[np.ndarray], minimize: Minimize, *, screen_iterations: int,
                   max_iterations: int, num_polished: int,
                   progress: Optional[resources.Progress] = None
                   ) -> Optional[tuple[float, np.ndarray]]:
  """(f, y) of the best start after screening and polishing, or None if none is finite.

  Every start is screened by `minimize(starts, screen_iterations, 1)` (one run each, no
  restart); the `num_polished` with the lowest finite f (first ones on ties) are polished by
  `minimize(..., max_iterations, DEFAULT_RESTARTS)`; the lowest finite polished f wins (the
  first on ties). `progress` advances by one per screened and per polished start.
  """
  screened = [(f, y) for y, f in minimize(starts, screen_iterations, 1) if np.isfinite(f)]
  if progress is not None:
    progress.advance(len(starts))
  screened.sort(key=lambda fy: fy[0])
  polished = minimize([y0 for _, y0 in screened[:num_polished]], max_iterations,
                      DEFAULT_RESTARTS)
  if progress is not None:
    progress.advance(len(polished))
  best = None
  for y, f in polished:
    if np.isfinite(f) and (best is None or f < best[0]):
      best = (f, y)
  return best


# ---------------------------------------------------------------------------
# Unconstrained L-BFGS on a masked, preconditioned array (large problems).


def minimize_scaled_lbfgs(fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
                          x0: np.ndarray, mask: np.ndarray, scale: np.ndarray,
                          curvature: float, max_iterations: int, tol: float,
                          memory: int) -> np.ndarray:
  """Minimizes fun (returning value and gradient) with L-BFGS, from x0.

  Optimizes the entries x0[mask] as u = x * scale (a fixed diagonal
  preconditioner) with the two-loop recursion (Nocedal & Wright, Alg. 7.4),
  the initial inverse Hessian I / curvature for the first step and
  s^T y / y^T y afterwards, and a backtracking Armijo line search with
  quadratic interpolation. Pairs with s^T y <= 0 are skipped; at most `memory` pairs are
  kept. Stops after `max_iterations` iterations or when an iteration decreases f by less than
  tol * max(|f|, 1) twice in a row.

  A hand-written loop with in-place BLAS updates: scipy's L-BFGS-B spends more
  time per iteration on its bound-constraint bookkeeping than f itself costs
  for ~10^6 parameters.
  """
  inv_scale = 1.0 / scale[mask]
  u = x0[mask] * scale[mask]
  layout = np.zeros(x0.shape)

  def scaled(v):
    layout[mask] = v * inv_scale
    f, g = fun(layout)
    return f, g[mask] * inv_scale

  f, g = scaled(u)
  s_hist, y_hist, rho_hist = [], [], []
  gamma = 1.0 / curvature
  small_steps = 0
  for _ in range(max_iterations):
    d = _two_loop_direction(g, s_hist, y_hist, rho_hist, gamma)
    slope = float(g @ d)
    if not slope < 0:  # Not a descent direction: restart from the gradient.
      s_hist, y_hist, rho_hist = [], [], []
      d = -gamma * g
      slope = float(g @ d)
      if not slope < 0:
        break
    step = _armijo_step(scaled, u, f, d, slope)
    if step is None:
      break
    u_new, f_new, g_new = step
    s_vec = u_new - u
    y_vec = g_new - g
    sy = float(s_vec @ y_vec)
    yy = float(y_vec @ y_vec)
    if sy > 1e-12 * yy:
      s_hist.append(s_vec)
      y_hist.append(y_vec)
      rho_hist.append(1.0 / sy)
      gamma = sy / yy
      if len(s_hist) > memory:
        del s_hist[0], y_hist[0], rho_hist[0]
    decrease = f - f_new
    u, f, g = u_new, f_new, g_new
    small_steps = small_steps + 1 if decrease <= tol * max(abs(f), 1.0) else 0
    if small_steps >= 2:
      break
  out = np.zeros(x0.shape)
  out[mask] = u * inv_scale
  return out


def _two_loop_direction(g, s_hist, y_hist, rho_hist, gamma) -> np.ndarray:
  """d = -H g by the L-BFGS two-loop recursion (Nocedal & Wright, Alg. 7.4), H's initial
  scaling `gamma`, updated in place by BLAS daxpy."""
  d = -g
  alphas = []
  for s_vec, y_vec, rho in zip(reversed(s_hist), reversed(y_hist), reversed(rho_hist)):
    a = rho * float(s_vec @ d)
    blas.daxpy(y_vec, d, a=-a)
    alphas.append(a)
  d *= gamma
  for s_vec, y_vec, rho, a in zip(s_hist, y_hist, rho_hist, reversed(alphas)):
    blas.daxpy(s_vec, d, a=a - rho * float(y_vec @ d))
  return d


def _armijo_step(scaled, u, f, d, slope):
  """(u_new, f_new, g_new) of a backtracking Armijo line search along d from step 1
  (quadratic interpolation, safeguarded to [0.1, 0.5] of the last step; a tenth where f is
  not finite or C singular), or None if 30 steps found no sufficient decrease."""
  step = 1.0
  for _ in range(30):
    u_new = u + step * d
    try:
      f_new, g_new = scaled(u_new)
    except np.linalg.LinAlgError:
      f_new, g_new = np.inf, None
    if np.isfinite(f_new) and f_new <= f + 1e-4 * step * slope:
      return u_new, f_new, g_new
    # Minimizer of the quadratic through f, slope and f_new, safeguarded.
    if np.isfinite(f_new):
      trial = -slope * step * step / (2.0 * (f_new - f - slope * step))
      step = min(max(trial, 0.1 * step), 0.5 * step)
    else:
      step *= 0.1
  return None
