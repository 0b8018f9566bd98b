"""Optimizing a BLT for multi-participation DP-FTRL (paper 004, Sec. 3.3).

Minimizes Alg. 4's err * sens + log-barrier (strength `penalty_strength`, 1e-7 in the
paper) over the pair (theta, theta_hat) with L-BFGS-B and analytic gradients in float64;
omega then follows from Alg. 5 (`blt.output_scales_from_gaps`). The loss and its gradient
are evaluated in closed form (`blt_closed_form`, cost independent of n).

Parameterization. Inside the optimizer the interlaced decays

    0 < theta_hat_1 < theta_1 < theta_hat_2 < theta_2 < ... < theta_hat_d < theta_d < 1

are ordered logits: an unconstrained first logit plus non-negative increments,
box-bounded in L-BFGS-B, which is exactly the set of (theta, theta_hat) with
omega > 0 and theta_hat > 0; the latter gives sum(omega) = c_1 < 1 = c_0, so
the Toeplitz coefficients are positive and non-increasing and Thm. 3.1 applies.
The decays are handled as gaps 1 - theta (see `blt`).

Search. The landscape has several local optima (the paper's d >= 3 rows of Table 3
are one), so for every d' = 1..buffers the candidates are fresh starts (log-spaced, then
jittered interlaced decays) and warm starts that insert a new, nearly cancelling buffer
into the best (d'-1)-buffer solution; `optimize.best_of_starts` screens them all and
polishes the best, their L-BFGS-B runs advanced together on batched evaluations
(`optimize.minimize_together`): ~0.05 s for d = 4, whether n = 2000 or 10^6
(scripts/bench_blt.py).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings

import numpy as np
import scipy.special

from dp_fl import _checks
from dp_fl import resources
from dp_fl.mechanisms import blt
from dp_fl.mechanisms import blt_closed_form
from dp_fl.mechanisms import optimize

DEFAULT_PENALTY_STRENGTH = 1e-7  # Paper 004, Sec. 3.3 ("log-barrier ... 1e-7").
# Bounds of the ordered logits used by the optimizer: the first logit (the
# smallest decay, theta_hat_1) and each increment between consecutive decays.
# Bounds keep every decay's gap above ~1e-280 (no underflow), so the objective
# is finite on the whole box and L-BFGS-B's line search stays well-defined.
_LOGIT_RANGE = 30.0  # Smallest decay >= 1e-13 (expit(-30)), so 1 - gap > 0.
_TOTAL_LOGIT = 650.0
_MIN_INCREMENT = 1e-9
# L-BFGS-B's projected-gradient tolerance and memory for every run.
_GTOL = 1e-12
_MAXCOR = 20


# ---------------------------------------------------------------------------
# The parameterization and the objective.


def _gaps_from_params(y: np.ndarray):
  """Ordered logits -> (gap, gap_hat, dgap/dlogit, dgap_hat/dlogit)."""
  logits = y[0] + np.concatenate([[0.0], np.cumsum(y[1:])])
  gaps = scipy.special.expit(-logits)  # 1 - sigmoid(l), accurate for large l.
  dgaps = -gaps * scipy.special.expit(logits)
  return gaps[1::2], gaps[0::2], dgaps[1::2], dgaps[0::2]


def _params_from_gaps(gap: np.ndarray, gap_hat: np.ndarray) -> np.ndarray:
  """Inverse of `_gaps_from_params` (buffers ordered by increasing decay)."""
  gaps = np.empty(2 * gap.size)
  gaps[0::2] = gap_hat
  gaps[1::2] = gap
  with np.errstate(divide="ignore"):
    logits = np.log1p(-gaps) - np.log(gaps)
  first = np.clip(logits[0], -_LOGIT_RANGE, _LOGIT_RANGE)
  return np.concatenate([[first], np.maximum(np.diff(logits), _MIN_INCREMENT)])


def _logit_bounds(size: int) -> tuple[np.ndarray, np.ndarray]:
  """(lower, upper) box of the ordered logits of 2d = `size` decays."""
  max_increment = min(_LOGIT_RANGE, (_TOTAL_LOGIT - _LOGIT_RANGE) / (size - 1))
  lower = np.full(size, _MIN_INCREMENT)
  upper = np.full(size, max_increment)
  lower[0], upper[0] = -_LOGIT_RANGE, _LOGIT_RANGE
  return lower, upper


def _objectives(ys, n, min_sep, k, loss, penalty_strength):
  """Alg. 4's objective and gradient for every row of ordered logits `ys` (B, 2d).

  Closed form (`blt_closed_form`), cost independent of n and nearly
  independent of B (one batched evaluation). The logits are
  logit_i = y_0 + sum_{m<=i} y_m = cumsum(y)_i, so dL/dy_m = sum_{i>=m} dL/dlogit_i.
  Returns (objectives (B,), C-contiguous gradients (B, 2d)).
  """
  obj, d_logits = blt_closed_form.objective_in_logits(
      np.cumsum(ys, axis=1), blt_closed_form.plan(n, min_sep, k), loss, penalty_strength)
  return obj, np.ascontiguousarray(np.cumsum(d_logits[:, ::-1], axis=1)[:, ::-1])


def _minimize_all(y0s, n, min_sep, k, loss, penalty_strength, max_iterations, tol,
                  restarts=optimize.DEFAULT_RESTARTS):
  """[(y, f)] of `optimize.minimize_together` from each start in `y0s` (all with the same d),
  within the box of the ordered logits."""
  if not y0s:
    return []
  lower, upper = _logit_bounds(y0s[0].size)
  options = optimize.LbfgsbOptions(max_iterations, tol, gtol=_GTOL, maxcor=_MAXCOR)
  args = (n, min_sep, k, loss, penalty_strength)
  return optimize.minimize_together(y0s, lower, upper, lambda ys: _objectives(ys, *args),
                                    options, restarts)


# ---------------------------------------------------------------------------
# Candidates.


@dataclasses.dataclass(frozen=True)
class BltOptimizationResult:
  """Best BLT found by `optimize_blt` and how it was found.

  `max_participations` is the effective k (capped at ceil(n / b) by
  `sensitivity.feasible_participations`), `requested_max_participations` what
  the caller asked for and `message` the reduction notice (None when k was
  feasible).
  """
  blt: blt.Blt
  loss: str
  loss_value: float
  evaluation: blt.BltEvaluation
  max_participations: int
  requested_max_participations: int
  message: str | None
  starts: int
  seconds: float
  # (buffers, best objective incl. the log-barrier) for each d' = 1..d.
  history: tuple[tuple[int, float], ...]


def _initial_gaps(d: int, n: int, rng: np.random.Generator, jitter: bool):
  """Interlaced gaps: log-spaced between ~1/(4n) and ~0.7, optionally jittered."""
  lo, hi = math.log(0.25 / n), math.log(0.7)
  if jitter:
    pts = np.sort(rng.uniform(lo, hi, size=2 * d))
  else:
    pts = np.linspace(lo, hi, 2 * d)
  gaps = np.exp(pts)  # ascending: g_d < g_hat_d < g_{d-1} < ... < g_hat_1.
  gaps = gaps[::-1]   # descending, i.e. ascending decays: g_hat_1, g_1, ...
  return gaps[1::2].copy(), gaps[0::2].copy()


def _insert_buffer(gap: np.ndarray, gap_hat: np.ndarray, where: float,
                   split: float = 1e-3):
  """Adds a buffer with gap `where` and an inverse gap just above it.

  The new pair nearly cancels in p(x)/q(x), so the (d+1)-buffer BLT starts
  close to the d-buffer one. Returns None if `where` collides with the
  interlacing.
  """
  new_g, new_gh = where, where * (1.0 + split)
  allg = np.concatenate([gap, gap_hat, [new_g, new_gh]])
  labels = np.concatenate([np.ones(gap.size), np.zeros(gap_hat.size), [1, 0]])
  order = np.argsort(-allg)  # descending gaps = ascending decays.
  labels = labels[order]
  if not (np.all(labels[0::2] == 0) and np.all(labels[1::2] == 1)):
    return None
  allg = allg[order]
  if np.any(np.diff(allg) >= 0):
    return None
  return allg[1::2].copy(), allg[0::2].copy()


def _warm_starts(gap: np.ndarray, gap_hat: np.ndarray) -> list:
  """`_insert_buffer` below, between and above the existing decays (in gaps)."""
  edges = np.sort(np.concatenate([gap, gap_hat]))
  points = np.concatenate([[edges[0] * 0.1],
                           np.sqrt(edges[1:] * edges[:-1]),
                           [min(edges[-1] * 3.0, 0.9)]])
  candidates = []
  for where in points:
    cand = _insert_buffer(gap, gap_hat, where)
    if cand is not None:
      candidates.append(cand)
  return candidates


def _candidates(d, n, rng, num_starts, initial_gaps, previous_best):
  """(gap, gap_hat) starts for d buffers: fresh ones (one buffer has two parameters and is
  cheap: always a few), `initial_gaps` (or None), warm ones from `previous_best` (or None)."""
  candidates = [_initial_gaps(d, n, rng, jitter=s > 0)
                for s in range(num_starts if d > 1 else max(num_starts, 3))]
  if initial_gaps is not None:
    candidates.append(initial_gaps)
  if previous_best is not None:
    candidates.extend(_warm_starts(*previous_best))
  return candidates


def _runs_per_buffer_count(buffers, num_starts, warm_start, initial) -> list[int]:
  """Screened starts for d' = 1..buffers (fresh, warm at the 2d'-1 insertion points, the
  initial BLT): what `optimize_blt`'s progress counts."""
  return [(max(num_starts, 3) if d == 1 else num_starts + (2 * d - 1 if warm_start else 0))
          + (1 if initial is not None and initial.buffers == d else 0)
          for d in range(1, buffers + 1)]


def _optimizer_gaps(initial: blt.Blt) -> tuple[np.ndarray, np.ndarray]:
  """(gap, gap_hat) of `initial` in the optimizer's order, or ValueError."""
  if not isinstance(initial, blt.Blt):
    raise ValueError(f"`initial` must be a Blt or None; got {initial!r}.")
  theta_hat, _ = initial.inverse_parameters()
  theta = initial.theta_array
  if not (np.all(initial.omega_array > 0) and np.all(theta < 1) and
          np.all(theta_hat > 0) and np.unique(theta).size == theta.size):
    raise ValueError(
        f"`initial` must have omega > 0, distinct theta < 1 and inverse decays "
        f"> 0 to start the optimizer from it; got theta={list(initial.theta)}, "
        f"omega={list(initial.omega)}, theta_hat={theta_hat.tolist()}.")
  order = np.argsort(theta)
  return 1.0 - theta[order], 1.0 - theta_hat[order]


def _evaluated(gap: np.ndarray, gap_hat: np.ndarray, setting: blt.BltSetting
               ) -> tuple[blt.Blt, blt.BltEvaluation]:
  """The BLT of the optimizer's (gap, gap_hat) (omega by Alg. 5) and its evaluation."""
  omega = blt.output_scales_from_gaps(gap, gap_hat)
  params = blt.Blt(tuple(1.0 - gap), tuple(omega), setting)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", blt.ParticipationReducedWarning)
    return params, params.evaluate(setting.n, setting.min_sep, setting.max_participations)


# ---------------------------------------------------------------------------
# The optimizer.


def optimize_blt(n: int, min_sep: int, max_participations: int, buffers: int,
                 loss: str = "max", *, num_starts: int = 1, seed: int = 0,
                 warm_start: bool = True,
                 penalty_strength: float = DEFAULT_PENALTY_STRENGTH,
                 max_iterations: int = 1000, tol: float = 1e-12,
                 screen_iterations: int = 25, num_polished: int = 2,
                 initial: blt.Blt | None = None,
                 ) -> BltOptimizationResult:
  """Optimizes BLT(theta, omega) for MaxLoss or RmsLoss under Pi(b, k) (Sec. 3.3).

  The method is the module docstring's: for every d' = 1..buffers, `num_starts` fresh
  starts (at least 3 for d' = 1), the `initial` BLT where d' is its buffer count and, if
  `warm_start`, one start per insertion point of a new buffer into the best (d'-1)-buffer
  solution, each screened with `screen_iterations` L-BFGS-B iterations, the `num_polished`
  best run to convergence (with fresh-memory restarts while they still improve). The best
  d-buffer BLT is returned.

  Args:
    n: number of rounds (>= 2).
    min_sep: minimum separation b between two participations.
    max_participations: at most k participations; reduced to ceil(n / b)
      with a ParticipationReducedWarning if larger (see the result's
      `max_participations` and `message`).
    buffers: d, the number of buffers.
    loss: 'max' (MaxLoss, Eq. 9) or 'rms' (RmsLoss, Eq. 10).
    num_starts: fresh starts per buffer count (>= 1).
    seed: seed of the jittered starts.
    warm_start: also start from the (d-1)-buffer optimum.
    penalty_strength: log-barrier strength lambda (>= 0).
    max_iterations: L-BFGS-B iteration cap per polishing run.
    tol: L-BFGS-B relative function tolerance (ftol).
    screen_iterations: iterations of the screening run of every candidate.
    num_polished: candidates per buffer count run to convergence.
    initial: optional BLT (e.g. a published one) added as a candidate for the
      buffer count equal to its own; it needs omega > 0, theta < 1 and
      positive inverse decays (the optimizer's domain).

  Returns:
    A BltOptimizationResult; its `blt.setting` records (n, min_sep, effective
    k, buffers, loss).
  """
  start_time = time.perf_counter()
  n = _checks.check_positive_int("n", n)
  min_sep = _checks.check_positive_int("min_sep", min_sep)
  requested = _checks.check_positive_int("max_participations", max_participations)
  buffers = _checks.check_positive_int("buffers", buffers)
  loss = blt.check_loss(loss)
  num_starts = _checks.check_positive_int("num_starts", num_starts)
  seed = _checks.check_nonnegative_int("seed", seed)
  penalty_strength = _checks.check_nonnegative("penalty_strength", penalty_strength)
  max_iterations = _checks.check_positive_int("max_iterations", max_iterations)
  screen_iterations = _checks.check_positive_int("screen_iterations",
                                                 screen_iterations)
  num_polished = _checks.check_positive_int("num_polished", num_polished)
  tol = _checks.check_positive("tol", tol)
  if n < 2:
    raise ValueError(f"`n` must be >= 2 to optimize a BLT (C is [[1]] for n=1); "
                     f"got {n}.")
  initial_gaps = None if initial is None else _optimizer_gaps(initial)
  k, message = blt.reduce_participations(n, min_sep, requested)
  rng = np.random.default_rng(seed)
  runs = _runs_per_buffer_count(buffers, num_starts, warm_start, initial)
  progress = resources.Progress(f"optimizing a {buffers}-buffer BLT for n={n}",
                                sum(r + min(r, num_polished) for r in runs))
  minimize = lambda starts, iterations, restarts: _minimize_all(
      starts, n, min_sep, k, loss, penalty_strength, iterations, tol, restarts)
  history, starts, best = [], 0, None
  for d in range(1, buffers + 1):
    candidates = _candidates(
        d, n, rng, num_starts, initial_gaps if initial is not None and initial.buffers == d
        else None, best if warm_start else None)
    starts += len(candidates)
    stage_best = optimize.best_of_starts(
        [_params_from_gaps(gap0, gap_hat0) for gap0, gap_hat0 in candidates], minimize,
        screen_iterations=screen_iterations, max_iterations=max_iterations,
        num_polished=num_polished, progress=progress)
    if stage_best is None:
      raise RuntimeError(f"BLT optimization found no finite loss for d={d}.")
    best = _gaps_from_params(stage_best[1])[:2]
    history.append((d, stage_best[0]))
  progress.finish()
  params, evaluation = _evaluated(*best, blt.BltSetting(n, min_sep, k, buffers, loss))
  return BltOptimizationResult(
      blt=params, loss=loss, loss_value=evaluation.max_loss if loss == "max" else
      evaluation.rms_loss, evaluation=evaluation, max_participations=k,
      requested_max_participations=requested, message=message, starts=starts,
      seconds=time.perf_counter() - start_time, history=tuple(history))
