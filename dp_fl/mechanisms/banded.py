"""Banded matrix factorization (BandMF) for multi-participation DP-FTRL.

BandMF is the mechanism of Choquette-Choo et al. 2023, "(Amplified) Banded
Matrix Factorization" (paper 004's ref. [8]), summarized in paper 004, Sec. 2.3
("BandMF") and compared with BLTs in Table 3 and Figs. 2-5.

Notation (paper 004, Sec. 2.3): A is the n x n lower-triangular matrix of ones
(prefix sums), A = B C with a lower-triangular strategy matrix C and B = A C^{-1}.
C has `bands` bands: C[i, j] = 0 whenever i - j >= bands. For bands = 3, n = 5:

    C = [c00                ]      band = [c00   0    0 ]
        [c10 c11            ]             [c11  c10   0 ]
        [c20 c21 c22        ]             [c22  c21  c20]
        [    c31 c32 c33    ]             [c33  c32  c31]
        [        c42 c43 c44]             [c44  c43  c42]

`band[t, j] = C[t, t - j]` (row t, j-th diagonal); entries with t - j < 0 lie
outside the matrix and are 0. Inside the optimizer a *column layout*
`V[j, r] = C[j + r, j]` is used, because the normalization acts on columns.

Sensitivity. Under the min-separation schema Pi(b, k) (paper 004, Sec. 3.1:
at most k participations, any two at least b = `min_sep` rounds apart) and
b >= bands, the columns of C that one user touches have disjoint row supports,
so Eq. 5 gives

    sens(C)^2 = max over patterns pi of sum_{i in pi} ||C[:, i]||^2,

which is k for a column-normalized C (every column of unit L2 norm). The
optimization of a column-normalized C is therefore independent of k (paper 004,
Fig. 2 caption). For b < bands the supports overlap and this formula does not
apply: use the general bound of `dp_fl.mechanisms.sensitivity` for such b.

Errors and losses (paper 004, Sec. 3.2): MaxError(B) is the largest row norm of
B, RmsError(B)^2 = ||B||_F^2 / n, MaxLoss = sens * MaxError (Eq. 9) and
RmsLoss = sens * RmsError (Eq. 10). BandMF minimizes RmsLoss (Table 1).

Optimization (`optimize_banded`). The objective is

    f(C) = ||A C^{-1}||_F^2 = ||L^{-1}||_F^2,    L = C A^{-1},

with A^{-1} the bidiagonal difference matrix, so L is lower-triangular with
bands + 1 bands. With B = L^{-1} and P = B^T B, the gradient is
df/dL = -2 P B^T (needed on the bands of L only) and
df/dC[i, j] = df/dL[i, j] - df/dL[i, j - 1]. One evaluation is a block
inverse of the banded L (n^2 bands / 2 multiply-adds), one `lauum` (n^3 / 6)
and a band-restricted product (~n^2 bands), in float64 LAPACK/BLAS: O(n^3)
time, O(n^2) memory. The parameters are the unnormalized columns (the
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

import dataclasses
import json
import math
from typing import Any, Mapping

import numpy as np
import scipy.ndimage
import scipy.optimize
from scipy.linalg import blas
from scipy.linalg import lapack

from dp_fl import _checks
from dp_fl import resources
from dp_fl.mechanisms import sensitivity
from dp_fl.mechanisms import streaming

MECHANISM_NAME = "bandmf"
_JSON_VERSION = 1

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
# Column block of the band-restricted product (measured: 96-128 is fastest).
_BLOCK = 112
_POLISH_ITERATIONS = 50
_HEAD_FACTOR = 1.25
_LBFGS_MEMORY = 10


# ---------------------------------------------------------------------------
# Settings, validation and layout helpers.


@dataclasses.dataclass(frozen=True)
class BandedSetting:
  """What a BandMF was optimized for: n rounds, `bands` bands, Pi(min_sep, k).

  `max_participations` is the effective k (<= ceil(n / min_sep)).
  """
  n: int
  bands: int
  min_sep: int
  max_participations: int

  def __post_init__(self):
    for name in ("n", "bands", "min_sep", "max_participations"):
      object.__setattr__(self, name,
                         _checks.check_positive_int(name, getattr(self, name)))
    if self.bands > self.n:
      raise ValueError(
          f"`bands` must be <= n={self.n} (C is n x n); got {self.bands}.")
    feasible, _ = sensitivity.feasible_participations(self.n, self.min_sep)
    if self.max_participations > feasible:
      raise ValueError(
          f"`max_participations` must be the effective k <= ceil(n / min_sep)="
          f"{feasible}; got {self.max_participations}.")

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def _check_sizes(n: Any, bands: Any) -> tuple[int, int]:
  n = _checks.check_positive_int("n", n)
  bands = _checks.check_positive_int("bands", bands)
  if bands > n:
    raise ValueError(
        f"`bands` must be <= n={n} (C is n x n; bands=n is a full "
        f"lower-triangular C); got {bands}.")
  return n, bands


def _column_mask(n: int, bands: int) -> np.ndarray:
  """mask[j, r] = (j + r < n): entry r of column j lies inside C."""
  return (np.arange(n)[:, None] + np.arange(bands)[None, :]) < n


def _rows_to_columns(band: np.ndarray) -> np.ndarray:
  """band[t, r] = C[t, t - r]  ->  V[j, r] = C[j + r, j]."""
  n, bands = band.shape
  cols = np.zeros((n, bands))
  for r in range(bands):
    cols[:n - r, r] = band[r:, r]
  return cols


def _columns_to_rows(cols: np.ndarray) -> np.ndarray:
  """V[j, r] = C[j + r, j]  ->  band[t, r] = C[t, t - r]."""
  n, bands = cols.shape
  band = np.zeros((n, bands))
  for r in range(bands):
    band[r:, r] = cols[:n - r, r]
  return band


def _flat_band_indices(n: int, width: int) -> tuple[np.ndarray, np.ndarray]:
  """(mask, flat) for the entries (j + r, j), r < width, of an n x n F-array.

  mask[j, r] = (j + r < n) and flat holds the F-order flat indices
  (j + r) + j n of the valid entries in row-major (j, r) order, so that
  `dense.reshape(-1, order="F")[flat] = layout[mask]` writes whole column
  segments (contiguous in memory) at once.
  """
  mask = _column_mask(n, width)
  j, r = np.nonzero(mask)
  return mask, (j + r) + j * n


def _normalize_columns(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  norms = np.sqrt(np.einsum("ij,ij->i", cols, cols))
  return cols / norms[:, None], norms


def _difference_columns(cols: np.ndarray) -> np.ndarray:
  """Columns of L = C A^{-1}: L[j + r, j] = C[j + r, j] - C[j + r, j + 1].

  In column layout C[j + r, j + 1] = V[j + 1, r - 1], so L has bands + 1 bands.
  """
  n, bands = cols.shape
  out = np.zeros((n, bands + 1))
  out[:, :bands] = cols
  out[:n - 1, 1:] -= cols[1:, :]
  return out


def sqrt_a_coefficients(bands: int) -> np.ndarray:
  """c_j = binom(2j, j) / 4^j, j < bands: C = LtToep(c) satisfies C^2 = A (the power series
  of (1 - x)^(-1/2)); positive and decreasing, computed as the product of (2j - 1) / (2j)."""
  j = np.arange(1, bands)
  return np.concatenate([[1.0], np.cumprod((2 * j - 1) / (2 * j))])


def _sqrt_a_start(n: int, bands: int) -> np.ndarray:
  """Column layout of the truncated, column-normalized square root of A."""
  n, bands = _check_sizes(n, bands)
  cols = np.tile(sqrt_a_coefficients(bands), (n, 1)) * _column_mask(n, bands)
  return _normalize_columns(cols)[0]


def square_root_factorization(n: int, bands: int) -> "BandedMF":
  """The banded square root of A: C = the `bands`-banded truncation of A^(1/2) =
  LtToep(sqrt_a_coefficients) with every column scaled to unit L2 norm (the BSR of Kalinin and
  Lampert, NeurIPS 2024, arXiv 2405.13763, in the column normalization BandMF uses for
  multiple participations; BandMF's coarsest start). Closed form, no optimization."""
  return BandedMF(_columns_to_rows(_sqrt_a_start(n, bands)))


# ---------------------------------------------------------------------------
# The objective f(C) = ||A C^{-1}||_F^2 and its gradient.


def _banded_lower_inverse(lower: np.ndarray, width: int) -> np.ndarray:
  """L^{-1} for an F-ordered lower-triangular L with L[i, j] = 0 if i - j > width.

  Blocks of size s >= width make L block-bidiagonal with upper-triangular
  sub-diagonal blocks, so block row I of the inverse is
  -L_II^{-1} L_{I,I-1} (block row I-1), restricted to the columns left of
  block I: two triangular products (dtrmm) per block, n^2 s / 2 multiply-adds
  instead of dtrtri's n^3 / 6.
  """
  n = lower.shape[0]
  s = max(width, _BLOCK)
  if 2 * s >= n:
    inv, info = lapack.dtrtri(lower, lower=1, overwrite_c=0)
    if info != 0:
      raise np.linalg.LinAlgError(f"C is singular (dtrtri info={info}).")
    return inv
  inv = np.zeros((n, n), order="F")
  for a0 in range(0, n, s):
    a1 = min(a0 + s, n)
    diag, info = lapack.dtrtri(lower[a0:a1, a0:a1], lower=1)
    if info != 0:
      raise np.linalg.LinAlgError(f"C is singular (dtrtri info={info}).")
    inv[a0:a1, a0:a1] = diag
    if a0 == 0:
      continue
    prev = inv[a0 - s:a0, :a0]
    coupling = lower[a0:a1, a0 - s:a0]
    if a1 - a0 == s:  # Square, upper-triangular coupling block.
      tmp = blas.dtrmm(1.0, coupling, prev, lower=0)
    else:
      tmp = coupling @ prev
    inv[a0:a1, :a0] = blas.dtrmm(-1.0, diag, tmp, lower=1)
  return inv


class _Objective:
  """f and df/dV for column-normalized C = V / ||V_j|| (see module docstring).

  Holds the dense n x n work arrays so repeated evaluations allocate little.
  """

  def __init__(self, n: int, bands: int):
    self.n = n
    self.bands = bands
    self.mask = _column_mask(n, bands)
    self._l = np.zeros((n, n), order="F")
    self._l_flat = self._l.reshape(-1, order="F")  # A view (F-contiguous).
    self._grad = np.zeros((n, n), order="F")
    self._grad_flat = self._grad.reshape(-1, order="F")
    self._wide_mask, self._wide_index = _flat_band_indices(n, bands + 1)

  def inverse_of_l(self, cols_normalized: np.ndarray) -> np.ndarray:
    """B = L^{-1} = A C^{-1} as an F-ordered lower-triangular array."""
    lcols = _difference_columns(cols_normalized)
    self._l_flat[self._wide_index] = lcols[self._wide_mask]
    return _banded_lower_inverse(self._l, self.bands)

  def value(self, cols: np.ndarray) -> float:
    b = self.inverse_of_l(_normalize_columns(cols * self.mask)[0])
    return float(np.einsum("ij,ij->", b, b))

  def value_and_grad(self, cols: np.ndarray) -> tuple[float, np.ndarray]:
    """(f, df/dV) for the (unnormalized) column layout `cols` (n x bands)."""
    n, bands = self.n, self.bands
    cols_n, norms = _normalize_columns(cols * self.mask)
    b = self.inverse_of_l(cols_n)
    f = float(np.einsum("ij,ij->", b, b))
    p, info = lapack.dlauum(b, lower=1, overwrite_c=0)  # lower(B^T B).
    if info != 0:
      raise np.linalg.LinAlgError(f"dlauum failed (info={info}).")
    # G_L[i, j] = sum_{m <= j} P[i, m] B[j, m] for 0 <= i - j <= bands; only
    # the lower triangle of P is used (m <= j <= i), and B[j, m] = 0 for m > j.
    g = self._grad
    for j0 in range(0, n, _BLOCK):
      j1 = min(j0 + _BLOCK, n)
      i1 = min(j1 + bands, n)
      np.matmul(p[j0:i1, :j1], b[j0:j1, :j1].T, out=g[j0:i1, j0:j1])
    gl = np.zeros((n + 1, bands + 1))
    gl[1:][self._wide_mask] = self._grad_flat[self._wide_index]
    # df/dC[j + r, j] = -2 (G_L[j + r, j] - G_L[j + r, j - 1]).
    gc = -2.0 * (gl[1:, :bands] - gl[:-1, 1:]) * self.mask
    gc -= cols_n * np.einsum("ij,ij->i", cols_n, gc)[:, None]
    gc /= norms[:, None]
    return f, gc

  def gauss_newton_scale(self, cols: np.ndarray) -> tuple[np.ndarray, float]:
    """(scale, median): sqrt of the Gauss-Newton diagonal over its median.

    d^2 f / dC[i, j]^2 ~ 2 ||B[:, i]||^2 ||C^{-1}[j, :]||^2, from
    f = ||A C^{-1}||_F^2 and d(A C^{-1}) = -B dC C^{-1}; in the scaled
    variables the curvature is then ~ median everywhere.
    """
    n, bands = self.n, self.bands
    b = self.inverse_of_l(_normalize_columns(cols * self.mask)[0])
    col_sq = np.einsum("ij,ij->j", b, b)
    z = np.array(b)
    z[1:] -= b[:-1]  # C^{-1} = A^{-1} B.
    row_sq = np.einsum("ij,ij->i", z, z)
    rows = np.minimum(np.arange(n)[:, None] + np.arange(bands)[None, :], n - 1)
    h = np.where(self.mask, 2.0 * col_sq[rows] * row_sq[:, None], np.nan)
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

  def __init__(self, full: _Objective, cols: np.ndarray, tail: int):
    n, bands = full.n, full.bands
    self.n, self.bands, self.tail = n, bands, tail
    h = n - tail
    cols_n = _normalize_columns(cols * full.mask)[0]
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
    self.sub = _Objective(tail, min(bands, tail))
    self.mask = self.sub.mask

  def value_and_grad(self, tail_cols: np.ndarray) -> tuple[float, np.ndarray]:
    sub = self.sub
    cols_n, norms = _normalize_columns(tail_cols * self.mask)
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

  def __init__(self, full: _Objective, cols: np.ndarray, head: int):
    n, bands = full.n, full.bands
    self.n, self.bands, self.head = n, bands, head
    self.extra = min(bands - 1, n - head)  # b' = |T'|.
    cols_n = _normalize_columns(cols * full.mask)[0]
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
    cols_n, norms = _normalize_columns(head_cols * self.mask)
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


def _lbfgs(fun, x0: np.ndarray, mask: np.ndarray, scale: np.ndarray,
           curvature: float, max_iterations: int, tol: float) -> np.ndarray:
  """Minimizes fun (returning value and gradient) with L-BFGS, from x0.

  Optimizes the entries x0[mask] as u = x * scale (a fixed diagonal
  preconditioner) with the two-loop recursion (Nocedal & Wright, Alg. 7.4),
  the initial inverse Hessian I / curvature for the first step and
  s^T y / y^T y afterwards, and a backtracking Armijo line search with
  quadratic interpolation. Pairs with s^T y <= 0 are skipped. Stops after
  `max_iterations` iterations or when an iteration decreases f by less than
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
    # Two-loop recursion: d = -H g.
    d = -g
    alphas = []
    for s_vec, y_vec, rho in zip(reversed(s_hist), reversed(y_hist),
                                 reversed(rho_hist)):
      a = rho * float(s_vec @ d)
      blas.daxpy(y_vec, d, a=-a)
      alphas.append(a)
    d *= gamma
    for s_vec, y_vec, rho, a in zip(s_hist, y_hist, rho_hist, reversed(alphas)):
      blas.daxpy(s_vec, d, a=a - rho * float(y_vec @ d))
    slope = float(g @ d)
    if not slope < 0:  # Not a descent direction: restart from the gradient.
      s_hist, y_hist, rho_hist = [], [], []
      d = -gamma * g
      slope = float(g @ d)
      if not slope < 0:
        break
    step = 1.0
    for _ in range(30):
      u_new = u + step * d
      try:
        f_new, g_new = scaled(u_new)
      except np.linalg.LinAlgError:
        f_new, g_new = np.inf, None
      if np.isfinite(f_new) and f_new <= f + 1e-4 * step * slope:
        break
      # Minimizer of the quadratic through f, slope and f_new, safeguarded.
      if np.isfinite(f_new):
        trial = -slope * step * step / (2.0 * (f_new - f - slope * step))
        step = min(max(trial, 0.1 * step), 0.5 * step)
      else:
        step *= 0.1
    else:
      break
    s_vec = u_new - u
    y_vec = g_new - g
    sy = float(s_vec @ y_vec)
    yy = float(y_vec @ y_vec)
    if sy > 1e-12 * yy:
      s_hist.append(s_vec)
      y_hist.append(y_vec)
      rho_hist.append(1.0 / sy)
      gamma = sy / yy
      if len(s_hist) > _LBFGS_MEMORY:
        del s_hist[0], y_hist[0], rho_hist[0]
    decrease = f - f_new
    u, f, g = u_new, f_new, g_new
    small_steps = small_steps + 1 if decrease <= tol * max(abs(f), 1.0) else 0
    if small_steps >= 2:
      break
  out = np.zeros(x0.shape)
  out[mask] = u * inv_scale
  return out


def _polish_tail(objective: _Objective, cols: np.ndarray, scale: np.ndarray,
                 curvature: float, tol: float) -> np.ndarray:
  """Optimizes the last min(bands, n // 2) columns, all others fixed."""
  n, bands = objective.n, objective.bands
  tail = min(bands, n // 2)
  if tail < 2:
    return cols
  problem = _TailObjective(objective, cols, tail)
  width = problem.sub.bands
  best = _lbfgs(problem.value_and_grad, cols[n - tail:, :width], problem.mask,
                scale[n - tail:, :width], curvature, _POLISH_ITERATIONS, tol)
  out = np.array(cols)
  out[n - tail:, :width] = best * problem.mask
  return out


def _polish_head(objective: _Objective, cols: np.ndarray, scale: np.ndarray,
                 curvature: float, tol: float) -> np.ndarray:
  """Optimizes the first min(ceil(_HEAD_FACTOR bands), n // 2) columns only."""
  n, bands = objective.n, objective.bands
  head = min(math.ceil(_HEAD_FACTOR * bands), n // 2)
  if head < 2:
    return cols
  problem = _HeadObjective(objective, cols, head)
  best = _lbfgs(problem.value_and_grad, cols[:head], problem.mask,
                scale[:head], curvature, _POLISH_ITERATIONS, tol)
  out = np.array(cols)
  out[:head] = best * problem.mask
  return out


def _interpolate_columns(coarse: np.ndarray, n: int, bands: int) -> np.ndarray:
  """Coarse optimum -> fine start, as a ratio to the sqrt(A) coefficients.

  Fine column j / entry r sits at coarse coordinates scaled by nc / n and
  bc / bands (cell centred); entries outside the coarse triangle repeat the
  last valid entry of their column so the bilinear interpolation is defined.
  """
  nc, bc = coarse.shape
  ratio = _normalize_columns(coarse * _column_mask(nc, bc))[0]
  ratio /= sqrt_a_coefficients(bc)[None, :]
  for j in range(max(0, nc - bc + 1), nc):
    ratio[j, nc - j:] = ratio[j, nc - j - 1]
  jj = np.clip((np.arange(n) + 0.5) * nc / n - 0.5, 0, nc - 1)
  rr = np.clip((np.arange(bands) + 0.5) * bc / bands - 0.5, 0, bc - 1)
  grid_j, grid_r = np.meshgrid(jj, rr, indexing="ij")
  fine = scipy.ndimage.map_coordinates(ratio, [grid_j, grid_r], order=1,
                                       mode="nearest")
  fine *= sqrt_a_coefficients(bands)[None, :]
  fine *= _column_mask(n, bands)
  fine[:, 0] = np.maximum(fine[:, 0], 1e-3)
  return _normalize_columns(fine)[0]


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
      start = _sqrt_a_start(n, bands)
      max_iterations = max(max_iterations, _COARSEST_ITERATIONS)
  objective = _Objective(n, bands)
  if bands == 1:
    return objective.mask.astype(float)  # C = I is the only choice.
  scale, curvature = objective.gauss_newton_scale(start)
  cols = _polish_tail(objective, start, scale, curvature, tol)
  cols = _polish_head(objective, cols, scale, curvature, tol)
  cols = _lbfgs(objective.value_and_grad, cols, objective.mask, scale,
                curvature, max_iterations, tol)
  cols = _polish_tail(objective, cols, scale, curvature, tol)
  cols = _polish_head(objective, cols, scale, curvature, tol)
  if progress is not None:
    progress.advance(float(n) ** 3)
  return _normalize_columns(cols * objective.mask)[0]


# ---------------------------------------------------------------------------
# The mechanism.


@dataclasses.dataclass(frozen=True)
class BandedEvaluation:
  """Sensitivity (Eq. 5, b >= bands), errors and losses (Eqs. 9-10)."""
  n: int
  min_sep: int
  max_participations: int
  sensitivity: float
  max_error: float
  rms_error: float
  max_loss: float
  rms_loss: float
  message: str | None = None  # Why k was reduced (None when it fit as given).


@dataclasses.dataclass(frozen=True, eq=False)
class BandedMF:
  """A banded lower-triangular strategy matrix C (BandMF, paper 004 ref. [8]).

  band: (n, bands) array with band[t, j] = C[t, t - j] (module docstring);
    entries with t - j < 0 must be 0 and the diagonal band[:, 0] positive.
  setting: the (n, bands, min_sep, max_participations) it was optimized for
    by `optimize_banded` (None for a hand-made C).

  BandMF is defined for the n rounds it was built for only (paper 004, Sec. 4.2,
  Fig. 5: "BandMF mechanisms can only be used up to the n they are optimized
  for"); methods taking a number of rounds accept at most `n`.
  """
  band: np.ndarray
  setting: BandedSetting | None = None

  def __post_init__(self):
    band = streaming.check_band(self.band, name="band")
    n, bands = band.shape
    diag = band[:, 0]
    if not np.all(diag > 0):
      bad = int(np.flatnonzero(~(diag > 0))[0])
      raise ValueError(
          f"`band[:, 0]` (the diagonal of C) must be positive so that C is "
          f"invertible; got band[{bad}, 0]={diag[bad]!r}.")
    if self.setting is not None:
      if not isinstance(self.setting, BandedSetting):
        raise ValueError(
            f"`setting` must be a BandedSetting or None; got {self.setting!r}.")
      if (self.setting.n, self.setting.bands) != (n, bands):
        raise ValueError(
            f"`setting` (n={self.setting.n}, bands={self.setting.bands}) must "
            f"match the shape of `band` {band.shape}.")
    band = np.array(band, dtype=np.float64)
    band.setflags(write=False)
    object.__setattr__(self, "band", band)

  def __eq__(self, other: Any) -> bool:
    if not isinstance(other, BandedMF):
      return NotImplemented
    return (np.array_equal(self.band, other.band) and
            self.setting == other.setting)

  __hash__ = None  # Mutable-looking array content: not hashable.

  # -- construction ---------------------------------------------------------

  @classmethod
  def from_dense(cls, matrix: Any, bands: int | None = None,
                 setting: BandedSetting | None = None) -> "BandedMF":
    """BandedMF of a dense lower-triangular C; refuses entries outside the band.

    `bands` defaults to the smallest band count holding all non-zeros.
    """
    return cls(streaming.band_from_dense(matrix, bands, name="matrix"), setting)

  # -- structure ------------------------------------------------------------

  @property
  def n(self) -> int:
    return self.band.shape[0]

  @property
  def bands(self) -> int:
    return self.band.shape[1]

  def columns(self) -> np.ndarray:
    """Column layout: V[j, r] = C[j + r, j] (0 where j + r >= n)."""
    return _rows_to_columns(self.band)

  def dense(self) -> np.ndarray:
    """C as an (n, n) array."""
    n = self.n
    c = np.zeros((n, n))
    for r in range(self.bands):
      idx = np.arange(r, n)
      c[idx, idx - r] = self.band[r:, r]
    return c

  def column_norms(self) -> np.ndarray:
    """||C[:, j]||_2 for j = 0..n-1 (all 1 for BandMF)."""
    cols = self.columns()
    return np.sqrt(np.einsum("ij,ij->i", cols, cols))

  def _rounds(self, n: Any) -> int:
    if n is None:
      return self.n
    n = _checks.check_positive_int("n", n)
    if n > self.n:
      raise ValueError(
          f"`n` must be <= {self.n}: BandMF is not defined beyond the n={self.n} "
          f"rounds it was optimized for (paper 004, Fig. 5); got n={n}. "
          f"Optimize a BandMF for n={n} rounds instead.")
    return n

  def inverse_apply(self, z: Any) -> np.ndarray:
    """C[:m, :m]^{-1} z for z of shape (m, ...) with m <= n.

    Forward substitution over the bands (the streaming noise of Alg. 1,
    C^{-1} Z): x_t = (z_t - sum_{j=1}^{bands-1} band[t, j] x_{t-j}) / band[t, 0].
    """
    z = _checks.check_finite_array("z", z)
    if z.ndim < 1:
      raise ValueError(f"`z` must have at least one dimension (rounds); got a "
                       f"scalar {z!r}.")
    m = self._rounds(z.shape[0])
    flat = z.reshape(m, -1)
    # LAPACK's lower band storage: ab[r, j] = C[j + r, j], kd = width - 1.
    ab = np.asfortranarray(self.columns()[:m, :min(self.bands, m)].T)
    x, info = lapack.dtbtrs(ab, flat, uplo="L")
    if info != 0:
      raise np.linalg.LinAlgError(f"dtbtrs failed (info={info}).")
    return x.reshape(z.shape)

  # -- errors, sensitivity and losses ---------------------------------------

  def per_query_squared_error(self, n: int | None = None) -> np.ndarray:
    """Squared row norms of B = A C^{-1} for the first n rounds (n <= self.n).

    Rows of A C^{-1} up to round n only involve C[:n, :n] (lower-triangular).
    """
    n = self._rounds(n)
    objective = _Objective(n, min(self.bands, n))
    b = objective.inverse_of_l(self.columns()[:n, :min(self.bands, n)])
    return np.einsum("ij,ij->i", b, b)

  def max_error(self, n: int | None = None) -> float:
    """MaxError(B): the largest row norm of B = A C^{-1} (paper 004, Sec. 3.2)."""
    return float(np.sqrt(np.max(self.per_query_squared_error(n))))

  def rms_error(self, n: int | None = None) -> float:
    """RmsError(B) = ||B||_F / sqrt(n) (paper 004, Sec. 3.2)."""
    return float(np.sqrt(np.mean(self.per_query_squared_error(n))))

  def sensitivity(self, n: int | None, min_sep: int,
                  max_participations: int | None) -> float:
    """sens under Pi(min_sep, k) for the first n rounds; needs min_sep >= bands.

    With b = min_sep >= bands the columns of one pattern have disjoint row
    supports, so Eq. 5 gives sens^2 = max_pi sum_{i in pi} ||C[:, i]||^2
    exactly, for any signs of C (computed by dynamic programming over the
    columns, O(n k)); sqrt(k) for a column-normalized C. `n` is required
    (None: this C's own n); k is capped at ceil(n / b)
    (`sensitivity.feasible_participations`; None: as many as fit). For
    min_sep < bands the supports overlap: use the general bound of
    `dp_fl.mechanisms.sensitivity`.
    """
    n = self._rounds(n)
    min_sep = _checks.check_positive_int("min_sep", min_sep)
    k, _ = sensitivity.feasible_participations(n, min_sep, max_participations)
    return self._sensitivity(n, min_sep, k)

  def _sensitivity(self, n: int, min_sep: int, k: int) -> float:
    if min_sep < self.bands:
      raise ValueError(
          f"`min_sep` must be >= bands={self.bands} for the column-norm "
          f"sensitivity of a banded C; got {min_sep}. Use the general bound of "
          f"dp_fl.mechanisms.sensitivity for min_sep < bands.")
    # Column norms of the leading n x n block (columns are cut at row n).
    cols = self.columns()[:n]
    cols = cols * _column_mask(n, self.bands)
    sq = np.einsum("ij,ij->i", cols, cols)
    return math.sqrt(_max_separated_sum(sq, min_sep, k))

  def evaluate(self, n: int | None, min_sep: int,
               max_participations: int | None) -> BandedEvaluation:
    """Sensitivity, MaxError, RmsError, MaxLoss (Eq. 9) and RmsLoss (Eq. 10).

    Arguments as in `sensitivity`; the result's `message` says if k was reduced.
    """
    n = self._rounds(n)
    min_sep = _checks.check_positive_int("min_sep", min_sep)
    k, message = sensitivity.feasible_participations(n, min_sep, max_participations)
    sens = self._sensitivity(n, min_sep, k)
    err = self.per_query_squared_error(n)
    max_err = float(np.sqrt(np.max(err)))
    rms_err = float(np.sqrt(np.mean(err)))
    return BandedEvaluation(n, min_sep, k, sens, max_err, rms_err,
                            sens * max_err, sens * rms_err, message)

  def max_loss(self, n: int | None, min_sep: int,
               max_participations: int | None) -> float:
    """MaxLoss = sens * MaxError (paper 004, Eq. 9)."""
    return self.evaluate(n, min_sep, max_participations).max_loss

  def rms_loss(self, n: int | None, min_sep: int,
               max_participations: int | None) -> float:
    """RmsLoss = sens * RmsError (paper 004, Eq. 10)."""
    return self.evaluate(n, min_sep, max_participations).rms_loss

  # -- serialization --------------------------------------------------------

  def to_dict(self) -> dict[str, Any]:
    """JSON-ready dict; floats keep their exact value through json (repr)."""
    return {
        "mechanism": MECHANISM_NAME,
        "version": _JSON_VERSION,
        "band": self.band.tolist(),
        "setting": None if self.setting is None else self.setting.to_dict(),
    }

  def to_json(self) -> str:
    return json.dumps(self.to_dict())

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> "BandedMF":
    """Inverse of `to_dict`; refuses the parameters of any other mechanism."""
    if not isinstance(data, Mapping):
      raise ValueError(
          f"BandMF parameters must be a JSON object; got {type(data).__name__}.")
    mech = data.get("mechanism")
    if mech != MECHANISM_NAME:
      raise ValueError(
          f"`mechanism` must be {MECHANISM_NAME!r} to load a BandMF; got "
          f"{mech!r}. Load it with the module of that mechanism (or "
          f"dp_fl.mechanisms.catalog.from_dict).")
    version = data.get("version")
    if version != _JSON_VERSION:
      raise ValueError(
          f"`version` of the BandMF parameters must be {_JSON_VERSION}; got "
          f"{version!r}.")
    if "band" not in data:
      raise ValueError(
          f"BandMF parameters lack the field 'band'; got keys {sorted(data)}.")
    try:
      band = np.array(data["band"], dtype=np.float64)
    except (TypeError, ValueError) as e:
      raise ValueError(
          f"`band` must be a rectangular list of lists of numbers ({e}).") from e
    setting = data.get("setting")
    if setting is not None:
      if not isinstance(setting, Mapping):
        raise ValueError(
            f"`setting` must be an object or null; got {setting!r}.")
      fields = {f.name for f in dataclasses.fields(BandedSetting)}
      if set(setting) != fields:
        raise ValueError(
            f"`setting` must have exactly the keys {sorted(fields)}; got "
            f"{sorted(setting)}.")
      setting = BandedSetting(**setting)
    return cls(band, setting)

  @classmethod
  def from_json(cls, text: str) -> "BandedMF":
    if not isinstance(text, (str, bytes, bytearray)):
      raise ValueError(f"`text` must be a JSON string; got {type(text).__name__}.")
    try:
      data = json.loads(text)
    except json.JSONDecodeError as e:
      raise ValueError(f"`text` is not valid JSON ({e}).") from e
    return cls.from_dict(data)


def _max_separated_sum(values: np.ndarray, min_sep: int, k: int) -> float:
  """max over index sets pi, |pi| <= k, gaps >= min_sep, of sum values[pi].

  Dynamic programming: best[m][t] = best sum of at most m picks among
  indices >= t; picking t moves on to t + min_sep. O(n k).
  """
  n = values.size
  prev = np.zeros(n + min_sep + 1)  # m - 1 picks; zero beyond the end.
  for _ in range(k):
    cur = np.zeros(n + min_sep + 1)
    for t in range(n - 1, -1, -1):
      cur[t] = max(cur[t + 1], values[t] + prev[t + min_sep])
    prev = cur
  return float(prev[0])


# ---------------------------------------------------------------------------
# Public objective and optimizer.


def rms_loss_and_grad(band: Any, max_participations: int = 1
                      ) -> tuple[float, np.ndarray]:
  """RmsLoss of the column-normalized C built from `band`, and its gradient.

  `band` (n, bands) in the row layout of BandedMF, any non-zero column norms;
  C = band's matrix with every column scaled to unit norm, so (b >= bands)
  sens = sqrt(k) and RmsLoss = sqrt(k) * ||A C^{-1}||_F / sqrt(n) (Eq. 10).
  This is the objective `optimize_banded` minimizes; the gradient is with
  respect to the entries of `band` (0 outside the matrix).
  """
  band = _checks.check_finite_array("band", band, ndim=2)
  n, bands = _check_sizes(band.shape[0], band.shape[1])
  k = _checks.check_positive_int("max_participations", max_participations)
  cols = _rows_to_columns(band)
  if not np.all(cols[:, 0] != 0):
    raise ValueError("`band[:, 0]` (the diagonal of C) must be non-zero.")
  f, grad_cols = _Objective(n, bands).value_and_grad(cols)
  loss = math.sqrt(k * f / n)
  return loss, _columns_to_rows(grad_cols) * (k / (2.0 * n * loss))


def optimize_banded(n: int, min_sep: int, max_participations: int, *, bands: int,
                    max_iterations: int = DEFAULT_MAX_ITERATIONS,
                    tol: float = DEFAULT_TOL,
                    initial: BandedMF | None = None) -> BandedMF:
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
  n, bands = _check_sizes(n, bands)
  min_sep = _checks.check_positive_int("min_sep", min_sep)
  k, _ = sensitivity.feasible_participations(n, min_sep, max_participations)
  max_iterations = _checks.check_positive_int("max_iterations", max_iterations)
  tol = _checks.check_nonnegative("tol", tol)
  start = None
  if initial is not None:
    if not isinstance(initial, BandedMF):
      raise ValueError(f"`initial` must be a BandedMF or None; got {initial!r}.")
    if (initial.n, initial.bands) != (n, bands):
      raise ValueError(
          f"`initial` must have n={n} and bands={bands}; got n={initial.n}, "
          f"bands={initial.bands}.")
    start = _normalize_columns(initial.columns())[0]
  levels = [n] if start is not None else _level_sizes(n)
  progress = resources.Progress(f"optimizing BandMF for n={n}",
                                sum(float(m) ** 3 for m in levels))
  cols = _solve(n, bands, start, max_iterations, tol, progress)
  progress.finish()
  if not np.all(cols[:, 0] > 0):
    raise RuntimeError("BandMF optimization left a non-positive diagonal.")
  return BandedMF(_columns_to_rows(cols), BandedSetting(n, bands, min_sep, k))
