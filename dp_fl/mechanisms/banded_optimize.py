"""Optimizing a BandMF: the column-normalized banded C minimizing RmsLoss (paper 004, ref. [8]).

The objective f(C) = ||A C^{-1}||_F^2 and its gradient are `banded.SquaredErrorObjective`'s
(see `banded`). The parameters are the unnormalized columns (the
normalization is part of the objective), minimized with L-BFGS in a
Gauss-Newton diagonal scaling. What makes it converge in few evaluations:

* a coarse-to-fine start: the optimum for (ceil(n/2), ceil(bands/2)) is
  interpolated, as a ratio to the square-root-of-A coefficients, onto the fine
  grid (recursively while n >= 192); the coarsest level starts from the
  optimal Toeplitz coefficients of the square root of A, c_j = binom(2j, j) /
  4^j (Fichtenberger et al.), truncated to `bands` and column-normalized;
* exact reduced problems for the two ends of the matrix, where L-BFGS on all
  columns converges slowly (sharp features at column/row ~ bands; short,
  low-curvature last columns that decide MaxError). With the other columns
  fixed, f of the last K columns depends on the K x K block C_TT only,

      f = const - 2 * 1^T Q w + tr(Q R Q^T),   Q = A_K C_TT^{-1},

  (w, R from the fixed columns), and f of the first K columns depends on
  C_HH and the b - 1 rows below it only (`_HeadObjective`), so both ends are
  polished at O(K^2 (K + bands)) per evaluation.

For n=2052, bands=342 (Table 3) this takes ~30 full evaluations, 10-15 s on
two CPU cores, and lands ~1e-6 (relative) above the converged optimum
(RmsLoss 8.5952, MaxLoss 10.2086); see scripts/bench_banded.py.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.ndimage
from scipy.linalg import lapack

from dp_fl import _checks
from dp_fl import resources
from dp_fl.mechanisms import banded
from dp_fl.mechanisms import optimize
from dp_fl.mechanisms import sensitivity

# Coarse-to-fine start: levels (ceil(n/2), ceil(bands/2)) while n >= _COARSEN_MIN_N;
# bands are halved only while >= _COARSEN_MIN_BANDS. The coarsest level starts
# from sqrt(A) and runs up to _COARSEST_ITERATIONS L-BFGS iterations, the
# intermediate ones up to _COARSE_ITERATIONS (measured for n=2052, bands=342:
# more iterations there do not make the finest level converge faster).
_COARSEN_MIN_N = 192
_COARSEN_MIN_BANDS = 8
_COARSE_ITERATIONS = 20
_COARSEST_ITERATIONS = 500
DEFAULT_MAX_ITERATIONS = 20
DEFAULT_TOL = 1e-10
# Reduced end problems: at most this many L-BFGS iterations; the head has
# ceil(_HEAD_FACTOR bands) columns. L-BFGS keeps _LBFGS_MEMORY pairs.
_POLISH_ITERATIONS = 50
_HEAD_FACTOR = 1.25
_LBFGS_MEMORY = 10


# ---------------------------------------------------------------------------
# Scaling and the reduced problems for the two ends.


def _gauss_newton_scale(objective: banded.SquaredErrorObjective, cols: np.ndarray
                        ) -> tuple[np.ndarray, float]:
  """(scale, median): sqrt of the Gauss-Newton diagonal over its median.

  d^2 f / dC[i, j]^2 ~ 2 ||B[:, i]||^2 ||C^{-1}[j, :]||^2, from
  f = ||A C^{-1}||_F^2 and d(A C^{-1}) = -B dC C^{-1}; in the scaled
  variables the curvature is then ~ median everywhere.
  """
  n, bands = objective.n, objective.bands
  b = objective.inverse_of_l(banded.normalize_columns(cols * objective.mask)[0])
  col_sq = np.einsum("ij,ij->j", b, b)
  z = np.array(b)
  z[1:] -= b[:-1]  # C^{-1} = A^{-1} B.
  row_sq = np.einsum("ij,ij->i", z, z)
  rows = np.minimum(np.arange(n)[:, None] + np.arange(bands)[None, :], n - 1)
  h = np.where(objective.mask, 2.0 * col_sq[rows] * row_sq[:, None], np.nan)
  median = float(np.nanmedian(h))
  scale = np.sqrt(h / median)
  return np.clip(np.nan_to_num(scale, nan=1.0), 1e-3, 1e3), median


class _TailObjective:
  """f as a function of the last K columns only (module docstring).

  Splitting rows/columns into head H = [0, n - K) and tail T = [n - K, n),
  the tail columns only enter C_TT, and with Z = C^{-1}, W = C_TH Z_HH and
  s = sum of the rows of Z_HH (the last head row of B):

      f = f_H + K ||s||^2 - 2 1^T Q W s + tr(Q (W W^T + I) Q^T),
      Q = A_K C_TT^{-1}.

  The gradient in C_TT is 2 (Q^T 1)(Y w)^T - 2 Q^T Q R Y^T with Y = C_TT^{-1},
  w = W s and R = W W^T + I.
  """

  def __init__(self, full: banded.SquaredErrorObjective, cols: np.ndarray, tail: int):
    n, bands = full.n, full.bands
    self.n, self.bands, self.tail = n, bands, tail
    h = n - tail
    cols_n = banded.normalize_columns(cols * full.mask)[0]
    b = full.inverse_of_l(cols_n)
    s = np.array(b[h - 1, :h])
    # C_TH is non-zero only in the columns h0..h-1 with h0 = h - bands + 1.
    h0 = max(0, h - bands + 1)
    z_rows = np.array(b[h0:h, :h])  # Rows h0..h-1 of Z_HH = A^{-1} B.
    z_rows[1:] -= b[h0:h - 1, :h]
    if 0 < h0 < h:
      z_rows[0] -= b[h0 - 1, :h]
    c_th = np.zeros((tail, h - h0))
    for j in range(h0, h):
      r0 = h - j  # first r with j + r in the tail; j + r < n = h + tail.
      seg = cols_n[j, r0:min(bands, r0 + tail)]
      c_th[:seg.size, j - h0] = seg
    w_mat = c_th @ z_rows
    self.w = w_mat @ s
    self.r = w_mat @ w_mat.T
    self.r[np.diag_indices(tail)] += 1.0
    self.const = float(np.einsum("ij,ij->", b[:h, :h], b[:h, :h]) +
                       tail * (s @ s))
    self.sub = banded.SquaredErrorObjective(tail, min(bands, tail))
    self.mask = self.sub.mask

  def value_and_grad(self, tail_cols: np.ndarray) -> tuple[float, np.ndarray]:
    sub = self.sub
    cols_n, norms = banded.normalize_columns(tail_cols * self.mask)
    q = sub.inverse_of_l(cols_n)
    y = np.array(q)
    y[1:] -= q[:-1]
    qsum = q.sum(axis=0)
    qr = q @ self.r
    f = self.const + float(-2.0 * qsum @ self.w + np.einsum("ij,ij->", qr, q))
    qtq, _ = lapack.dlauum(q, lower=1, overwrite_c=0)
    qtq = np.tril(qtq) + np.tril(qtq, -1).T
    grad = 2.0 * np.outer(qsum, y @ self.w) - 2.0 * qtq @ (self.r @ y.T)
    gc = np.zeros_like(cols_n)
    k = self.tail
    for r in range(sub.bands):
      gc[:k - r, r] = np.diagonal(grad, -r)
    gc -= cols_n * np.einsum("ij,ij->i", cols_n, gc)[:, None]
    gc /= norms[:, None]
    return f, gc


class _HeadObjective:
  """f as a function of the first K columns only (module docstring).

  With head H = [0, K), tail T = [K, n) and T' the first b' = min(bands - 1,
  n - K) rows of T (where head columns still have entries), the tail block of
  B = A C^{-1} is fixed and E = B[T, T'] = A_TT C_TT^{-1}[:, T'], so

      f = ||A_HH Z||^2 + tr(S^T G S) + ||B_TT||^2,   Z = C_HH^{-1},
      S = M Z,  M = [1^T; C_T'H],  G = F^T F,  F = [1, -E].

  Gradients: df/dC_HH = -2 (Q^T Q + S^T G S) Z^T with Q = A_HH Z, and
  df/dC_T'H = 2 (G S Z^T)[1:].
  """

  def __init__(self, full: banded.SquaredErrorObjective, cols: np.ndarray, head: int):
    n, bands = full.n, full.bands
    self.n, self.bands, self.head = n, bands, head
    self.extra = min(bands - 1, n - head)  # b' = |T'|.
    cols_n = banded.normalize_columns(cols * full.mask)[0]
    b = full.inverse_of_l(cols_n)
    e = np.array(b[head:, head:head + self.extra])
    g = np.empty((self.extra + 1, self.extra + 1))
    g[0, 0] = n - head
    g[0, 1:] = g[1:, 0] = -e.sum(axis=0)
    g[1:, 1:] = e.T @ e
    self.g = g
    self.const = float(np.einsum("ij,ij->", b[head:, head:], b[head:, head:]))
    rows = head + self.extra
    self.mask = full.mask[:head]
    j, r = np.nonzero(self.mask)
    self._index = (j + r) + j * rows
    self._rows = rows
    # Only the last bands - 1 head columns reach into T'.
    self._first = max(0, head - bands + 1)

  def value_and_grad(self, head_cols: np.ndarray) -> tuple[float, np.ndarray]:
    k, rows, first = self.head, self._rows, self._first
    cols_n, norms = banded.normalize_columns(head_cols * self.mask)
    tall = np.zeros((rows, k), order="F")
    tall.reshape(-1, order="F")[self._index] = cols_n[self.mask]
    z, info = lapack.dtrtri(tall[:k], lower=1)
    if info != 0:
      raise np.linalg.LinAlgError(f"C is singular (dtrtri info={info}).")
    q = np.cumsum(z, axis=0)
    s = np.empty((self.extra + 1, k))
    s[0] = z.sum(axis=0)
    s[1:] = tall[k:, first:] @ z[first:]
    gs = self.g @ s
    f = self.const + float(np.einsum("ij,ij->", q, q) +
                           np.einsum("ij,ij->", s, gs))
    qtq, _ = lapack.dlauum(q, lower=1, overwrite_c=0)
    qtq = np.tril(qtq) + np.tril(qtq, -1).T
    grad = np.empty((rows, k), order="F")
    grad[:k] = -2.0 * (qtq + s.T @ gs) @ z.T
    grad[k:] = 2.0 * (gs[1:] @ z.T)
    gc = np.zeros_like(cols_n)
    gc[self.mask] = grad.reshape(-1, order="F")[self._index]
    gc -= cols_n * np.einsum("ij,ij->i", cols_n, gc)[:, None]
    gc /= norms[:, None]
    return f, gc


def _polish_tail(objective: banded.SquaredErrorObjective, cols: np.ndarray,
                 scale: np.ndarray, curvature: float, tol: float) -> np.ndarray:
  """Optimizes the last min(bands, n // 2) columns, all others fixed."""
  n, bands = objective.n, objective.bands
  tail = min(bands, n // 2)
  if tail < 2:
    return cols
  problem = _TailObjective(objective, cols, tail)
  width = problem.sub.bands
  best = optimize.minimize_scaled_lbfgs(
      problem.value_and_grad, cols[n - tail:, :width], problem.mask, scale[n - tail:, :width],
      curvature, _POLISH_ITERATIONS, tol, _LBFGS_MEMORY)
  out = np.array(cols)
  out[n - tail:, :width] = best * problem.mask
  return out


def _polish_head(objective: banded.SquaredErrorObjective, cols: np.ndarray,
                 scale: np.ndarray, curvature: float, tol: float) -> np.ndarray:
  """Optimizes the first min(ceil(_HEAD_FACTOR bands), n // 2) columns only."""
  n, bands = objective.n, objective.bands
  head = min(math.ceil(_HEAD_FACTOR * bands), n // 2)
  if head < 2:
    return cols
  problem = _HeadObjective(objective, cols, head)
  best = optimize.minimize_scaled_lbfgs(problem.value_and_grad, cols[:head], problem.mask,
                                        scale[:head], curvature, _POLISH_ITERATIONS, tol,
                                        _LBFGS_MEMORY)
  out = np.array(cols)
  out[:head] = best * problem.mask
  return out


# ---------------------------------------------------------------------------
# Coarse-to-fine levels and the optimizer.


def _interpolate_columns(coarse: np.ndarray, n: int, bands: int) -> np.ndarray:
  """Coarse optimum -> fine start, as a ratio to the sqrt(A) coefficients.

  Fine column j / entry r sits at coarse coordinates scaled by nc / n and
  bc / bands (cell centred); entries outside the coarse triangle repeat the
  last valid entry of their column so the bilinear interpolation is defined.
  """
  nc, bc = coarse.shape
  ratio = banded.normalize_columns(coarse * banded.column_mask(nc, bc))[0]
  ratio /= banded.sqrt_a_coefficients(bc)[None, :]
  for j in range(max(0, nc - bc + 1), nc):
    ratio[j, nc - j:] = ratio[j, nc - j - 1]
  jj = np.clip((np.arange(n) + 0.5) * nc / n - 0.5, 0, nc - 1)
  rr = np.clip((np.arange(bands) + 0.5) * bc / bands - 0.5, 0, bc - 1)
  grid_j, grid_r = np.meshgrid(jj, rr, indexing="ij")
  fine = scipy.ndimage.map_coordinates(ratio, [grid_j, grid_r], order=1,
                                       mode="nearest")
  fine *= banded.sqrt_a_coefficients(bands)[None, :]
  fine *= banded.column_mask(n, bands)
  fine[:, 0] = np.maximum(fine[:, 0], 1e-3)
  return banded.normalize_columns(fine)[0]


def _level_sizes(n: int) -> list[int]:
  """n of every level `_solve` runs from a cold start, finest first."""
  sizes = [n]
  while sizes[-1] >= _COARSEN_MIN_N:
    sizes.append(-(-sizes[-1] // 2))
  return sizes


def _solve(n: int, bands: int, start: np.ndarray | None, max_iterations: int,
           tol: float, progress: resources.Progress | None = None) -> np.ndarray:
  """Column layout of the optimized column-normalized C (recursive levels).

  Each level: polish the last and the first columns exactly (reduced
  problems), run L-BFGS on all columns, polish both ends again. `progress`
  advances by n³ (the level's cost) when a level is done.
  """
  if start is None:
    if n >= _COARSEN_MIN_N:
      coarse_bands = -(-bands // 2) if bands >= _COARSEN_MIN_BANDS else bands
      coarse = _solve(-(-n // 2), coarse_bands, None,
                      min(max_iterations, _COARSE_ITERATIONS), tol, progress)
      start = _interpolate_columns(coarse, n, bands)
    else:
      start = banded.sqrt_a_start(n, bands)
      max_iterations = max(max_iterations, _COARSEST_ITERATIONS)
  objective = banded.SquaredErrorObjective(n, bands)
  if bands == 1:
    return objective.mask.astype(float)  # C = I is the only choice.
  scale, curvature = _gauss_newton_scale(objective, start)
  cols = _polish_tail(objective, start, scale, curvature, tol)
  cols = _polish_head(objective, cols, scale, curvature, tol)
  cols = optimize.minimize_scaled_lbfgs(objective.value_and_grad, cols, objective.mask,
                                        scale, curvature, max_iterations, tol, _LBFGS_MEMORY)
  cols = _polish_tail(objective, cols, scale, curvature, tol)
  cols = _polish_head(objective, cols, scale, curvature, tol)
  if progress is not None:
    progress.advance(float(n) ** 3)
  return banded.normalize_columns(cols * objective.mask)[0]


def optimize_banded(n: int, min_sep: int, max_participations: int, *, bands: int,
                    max_iterations: int = DEFAULT_MAX_ITERATIONS,
                    tol: float = DEFAULT_TOL,
                    initial: banded.BandedMF | None = None) -> banded.BandedMF:
  """BandMF: the column-normalized C with `bands` bands minimizing RmsLoss.

  Paper 004 ref. [8] as used in paper 004 (Table 1: BandMF optimizes RmsLoss;
  Table 3: BandMF(band=342) for n=2052, k=6, b=342 has MaxLoss 10.21 and
  RmsLoss 8.60). For min_sep >= bands, sens = sqrt(k) for every
  column-normalized C, so RmsLoss = sqrt(k / n) ||A C^{-1}||_F and the optimum
  does not depend on k (Fig. 2 caption); `min_sep` and `max_participations`
  are only recorded in the result's `setting` (k reduced to ceil(n / b)). With
  min_sep < bands the same C is returned, but its sensitivity under
  Pi(min_sep, k) then needs the general bound of dp_fl.mechanisms.sensitivity.

  The method (module docstring): float64 L-BFGS with the analytic gradient of
  ||A C^{-1}||_F^2 in a Gauss-Newton diagonal scaling, started coarse-to-fine,
  with exact reduced problems for the first and last columns. One evaluation
  costs O(n^3) flops and O(n^2) memory.

  Args:
    n: number of rounds (>= 1).
    min_sep: minimum separation b of Pi(b, k) (>= 1); bands <= min_sep is
      the setting BandMF is made for.
    max_participations: k (>= 1), recorded (reduced to ceil(n / b)).
    bands: number of bands (1 <= bands <= n); keyword-only, so that no call
      in the former order (n, bands, min_sep, k) is silently misread.
    max_iterations: L-BFGS iterations over all columns at the finest level
      (coarser levels use at most 20; the coarsest, n < 192, up to 500).
      The default 20 leaves ||A C^{-1}||_F^2 ~1e-6 (bands ~ n / 6) to ~3e-5
      (bands ~ n / 40) above the optimum; raise it for a tighter optimum.
    tol: stop a run when an iteration decreases ||A C^{-1}||_F^2 by less
      than tol times its value twice in a row.
    initial: optional BandMF with the same (n, bands) to start from (its
      columns are normalized); skips the coarse-to-fine start.

  Returns:
    A BandedMF whose `setting` records (n, bands, min_sep, effective k).
  """
  n, bands = banded.check_sizes(n, bands)
  min_sep = _checks.check_positive_int("min_sep", min_sep)
  k, _ = sensitivity.feasible_participations(n, min_sep, max_participations)
  max_iterations = _checks.check_positive_int("max_iterations", max_iterations)
  tol = _checks.check_nonnegative("tol", tol)
  start = None
  if initial is not None:
    if not isinstance(initial, banded.BandedMF):
      raise ValueError(f"`initial` must be a BandedMF or None; got {initial!r}.")
    if (initial.n, initial.bands) != (n, bands):
      raise ValueError(
          f"`initial` must have n={n} and bands={bands}; got n={initial.n}, "
          f"bands={initial.bands}.")
    start = banded.normalize_columns(initial.columns())[0]
  levels = [n] if start is not None else _level_sizes(n)
  progress = resources.Progress(f"optimizing BandMF for n={n}",
                                sum(float(m) ** 3 for m in levels))
  cols = _solve(n, bands, start, max_iterations, tol, progress)
  progress.finish()
  if not np.all(cols[:, 0] > 0):
    raise RuntimeError("BandMF optimization left a non-positive diagonal.")
  return banded.BandedMF(banded.columns_to_rows(cols),
                         banded.BandedSetting(n, bands, min_sep, k))
