"""Test oracles: references written for tests only, on dense or length-n arrays.

What the library computes fast (in closed form, by dynamic programs, from coefficients), these
compute literally, for small n: dense matrices, every participation pattern of Pi(b, k)
(paper 004, Sec. 3.1), Alg. 4 of paper 004 on materialized arrays. Tests compare the two.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from hypothesis import strategies as st
import numpy as np

from dp_fl.mechanisms import blt
from dp_fl.mechanisms import blt_optimize
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity
from dp_fl.mechanisms import tree

# pylint: disable=protected-access  (oracles reach the helpers they check against)


# ---------------------------------------------------------------------------
# Dense matrices and participation patterns.


def dense_toeplitz(coef, n: int | None = None) -> np.ndarray:
  """LtToep(coef) of size n (default len(coef)): C[i, j] = coef[i - j] for i >= j, coef
  padded with zeros (a banded C, or the band of a banded C^{-1}) or cut at n."""
  coef = np.asarray(coef, dtype=np.float64)
  n = coef.size if n is None else n
  padded = np.zeros(n)
  padded[:min(coef.size, n)] = coef[:n]
  out = np.zeros((n, n))
  for i in range(n):
    out[i:, i] = padded[:n - i]
  return out


def dense_strategy(mechanism: catalog.Mechanism, n: int) -> np.ndarray:
  """C of a catalog mechanism for n rounds (one column per round): the binary tree's C for
  TreeAgg (the C its sensitivity is of), else its lower-triangular input."""
  if isinstance(mechanism, catalog.TreeMechanism):
    return tree.binary_tree_matrix(n)
  lower = mechanism.lower_triangular_input(n)
  if "matrix" in lower:
    return np.asarray(lower["matrix"], dtype=np.float64)
  return dense_toeplitz(lower["toeplitz_coefs"], n)


def blt_coefficients(theta, omega, n: int) -> np.ndarray:
  """Eq. 2 of paper 004 literally: c_0 = 1, c_i = sum_j omega_j theta_j^(i-1)."""
  c = np.zeros(n)
  c[0] = 1.0
  for i in range(1, n):
    c[i] = sum(w * t ** (i - 1) for t, w in zip(theta, omega))
  return c


def separated_patterns(n: int, min_sep: int, k: int) -> list[tuple[int, ...]]:
  """Every non-empty pattern of Pi(b, k) in n rounds: increasing tuples of at most k rounds
  of range(n), pairwise >= b = `min_sep` apart (depth first)."""
  patterns = []

  def extend(prefix: tuple[int, ...], first: int) -> None:
    for r in range(first, n):
      patterns.append(prefix + (r,))
      if len(prefix) + 1 < k:
        extend(prefix + (r,), r + min_sep)

  extend((), 0)
  return patterns


def max_pattern_norm(c: np.ndarray, min_sep: int, k: int) -> float:
  """max over every pattern pi of Pi(b, k) of ||C u(pi)|| (one column of C per round):
  sens(C) when C^T C >= 0 (paper 004, Eq. 6), else a lower bound."""
  return max(float(np.linalg.norm(c[:, list(p)].sum(axis=1)))
             for p in separated_patterns(c.shape[1], min_sep, k))


def brute_force_sensitivity(c: np.ndarray, min_sep: int, max_participations: int) -> float:
  """max over patterns of Pi(b, k) in n = c.shape[1] rounds of ||C u||, brute force.

  Exact when C^T C >= 0 (paper 004, Eq. 6); for a signed Gram the contributions' signs are
  searched too, for patterns of at most 6 rounds (the result is then a lower bound on the
  truth, which is all a check of a guarantee needs: the guarantee must dominate it).
  """
  n = c.shape[1]
  signed = np.min(c.T @ c) < -1e-12
  best = 0.0
  for pattern in separated_patterns(n, min_sep, max_participations):
    columns = c[:, list(pattern)]
    if signed and len(pattern) <= 6:
      for signs in itertools.product((1.0, -1.0), repeat=len(pattern) - 1):
        best = max(best, float(np.linalg.norm(columns @ np.array((1.0,) + signs))))
    else:
      best = max(best, float(np.linalg.norm(columns.sum(axis=1))))
  return best


# ---------------------------------------------------------------------------
# Banded C (BandMF, BSR; paper 004 ref. [8]) as dense matrices.


def dense_from_band(band: np.ndarray) -> np.ndarray:
  """C[t, t - j] = band[t, j], literally."""
  n, bands = band.shape
  c = np.zeros((n, n))
  for t in range(n):
    for j in range(bands):
      if t - j >= 0:
        c[t, t - j] = band[t, j]
  return c


def dense_row_errors(c: np.ndarray) -> np.ndarray:
  """Squared row norms of B = A C^{-1} (Prop. 3.3's per-query errors), A = prefix sums."""
  b = np.tril(np.ones((c.shape[0], c.shape[0]))) @ np.linalg.inv(c)
  return np.sum(b * b, axis=1)


def normalize_dense_columns(c: np.ndarray) -> np.ndarray:
  """C with every column scaled to unit L2 norm."""
  return c / np.linalg.norm(c, axis=0)[None, :]


def dense_rms_loss(band: np.ndarray, k: int) -> float:
  """Eq. 10 with sens = sqrt(k) for the column-normalized C of `band`."""
  c = normalize_dense_columns(dense_from_band(band))
  return math.sqrt(k) * math.sqrt(np.mean(dense_row_errors(c)))


def random_band(n: int, bands: int, seed: int, positive: bool = False) -> np.ndarray:
  """A random (n, bands) band with a well-conditioned diagonal, entries >= 0 if `positive`."""
  rng = np.random.default_rng(seed)
  band = rng.uniform(0.0 if positive else -0.5, 1.0, size=(n, bands))
  band[:, 0] = rng.uniform(1.0, 2.0, size=n)  # Well-conditioned diagonal.
  band[np.arange(n)[:, None] < np.arange(bands)[None, :]] = 0.0
  return band


def sqrt_a_band(n: int, bands: int) -> np.ndarray:
  """Truncated LtToep(c), c_j = binom(2j, j) / 4^j (the square root of A)."""
  coef = np.array([math.comb(2 * j, j) / 4.0**j for j in range(bands)])
  band = np.tile(coef, (n, 1))
  band[np.arange(n)[:, None] < np.arange(bands)[None, :]] = 0.0
  return band


def dense_sqrt_a(n: int) -> np.ndarray:
  """A^(1/2) by brute force: the lower-triangular C = LtToep(r) with C^2 = A, solved
  coefficient by coefficient (r_0 = 1, 2 r_0 r_t = 1 - sum_{0<j<t} r_j r_{t-j})."""
  r = np.zeros(n)
  r[0] = 1.0
  for t in range(1, n):
    r[t] = (1.0 - np.dot(r[1:t], r[1:t][::-1])) / 2.0
  return dense_toeplitz(r)


def dense_bsr(n: int, p: int) -> np.ndarray:
  """BSR's C: band p of A^(1/2), every column scaled to unit norm (Kalinin & Lampert 2024)."""
  root = dense_sqrt_a(n)
  i, j = np.indices((n, n))
  return normalize_dense_columns(np.where(i - j < p, root, 0.0))


@st.composite
def band_sizes(draw, max_n: int = 24):
  """Hypothesis strategy of (n, bands), 1 <= bands <= n <= max_n."""
  n = draw(st.integers(1, max_n))
  bands = draw(st.integers(1, n))
  return n, bands


# ---------------------------------------------------------------------------
# BLT (paper 004, Alg. 4 and Prop. 3.3) on materialized length-n arrays.


def blt_dense_losses(theta, omega, n: int, min_sep: int, k: int):
  """(sens, MaxError, RmsError, squared row errors) of BLT(theta, omega) from dense C and
  B = A C^{-1}, sens by Thm. 3.1's pattern pi* = (0, b, ..., (k-1) b)."""
  c = dense_toeplitz(blt_coefficients(theta, omega, n))
  b_mat = np.tril(np.ones((n, n))) @ np.linalg.inv(c)
  sq = np.sum(b_mat ** 2, axis=1)
  u = np.zeros(n)
  u[np.arange(k) * min_sep] = 1.0
  sens = np.linalg.norm(c @ u)
  return sens, np.sqrt(sq.max()), np.sqrt(sq.mean()), sq


def interlaced_gaps(d: int, rng: np.random.Generator, smallest: float = 1e-11):
  """(gap, gap_hat) of d buffers, log-uniform in [smallest, 0.8], gap < gap_hat pairwise:
  decays interlaced as the BLT optimizer needs them (omega > 0)."""
  gaps = np.sort(np.exp(rng.uniform(np.log(smallest), np.log(0.8), size=2 * d)))
  return gaps[0::2], gaps[1::2]


def _row_dots(rows: np.ndarray, v: np.ndarray) -> np.ndarray:
  """rows @ v without BLAS (as `blt._combine`)."""
  return np.sum(rows * v[None, :], axis=1)


def _sumsq(v: np.ndarray) -> float:
  return float(np.sum(v * v))


def dlog_output_scales(gap: np.ndarray, gap_hat: np.ndarray):
  """Jacobians of log|omega_j| (Alg. 5) w.r.t. gap (d, d) and gap_hat (d, d)."""
  d = gap.size
  r = 1.0 / (gap_hat[None, :] - gap[:, None])
  diff = gap[None, :] - gap[:, None]
  eye = np.eye(d, dtype=bool)
  diff[eye] = 1.0
  q = 1.0 / diff
  q[eye] = 0.0
  d_gap = -q
  d_gap[eye] = q.sum(axis=1) - r.sum(axis=1)
  return d_gap, r


@dataclasses.dataclass
class BltLossParts:
  """What `blt_loss_from_gaps` returns: the loss err * sens, its parts, the objective with the
  log-barrier, and the objective's gradient in the gaps (None without `with_grad`)."""
  loss: float
  sens: float
  error: float
  objective: float
  grad_gap: np.ndarray
  grad_gap_hat: np.ndarray


def blt_loss_from_gaps(gap: np.ndarray, gap_hat: np.ndarray, n: int, min_sep: int,
                       k: int, loss: str, penalty_strength: float,
                       with_grad: bool = True) -> BltLossParts:
  """Alg. 4 (differentiable MaxLoss / RmsLoss of a BLT) with its gradient, O(kn).

  Alg. 4 literally, on length-n arrays: the oracle of `blt_closed_form.objective`, which
  the optimizer uses.

  Inputs are gaps 1 - theta and 1 - theta_hat (interlaced so omega > 0). The
  objective is err * sens + lambda * (-sum log theta - sum log(1 - theta)
  - sum log omega); the gradient is analytic (adjoints of the sums below).
  """
  log_omega, _ = blt._log_output_scales(gap, gap_hat)
  omega = np.exp(log_omega)  # omega > 0 by the interlacing.
  omega_hat = blt.output_scales_from_gaps(gap_hat, gap)
  m = n - 1
  p = blt._powers(gap, m)
  p_hat = blt._powers(gap_hat, m)
  # Sensitivity, Thm. 3.1: ||C u(pi*)||.
  c = blt._coef_from_gaps(gap, omega, n, p)
  c_bar = sensitivity.participation_sum(c, min_sep, k)
  sens = math.sqrt(_sumsq(c_bar))
  # Error, Prop. 3.3.
  b, geo = blt._prefix_coef_from_gaps(gap_hat, omega_hat, n, p_hat)
  if loss == "max":
    err = math.sqrt(_sumsq(b))
  else:
    wgt = blt._error_weights(n, loss)
    err = float(np.sqrt(np.sum(wgt * b * b)))
  theta = 1.0 - gap
  with np.errstate(divide="ignore", invalid="ignore"):
    penalty = -(np.sum(np.log(theta)) + np.sum(np.log(gap)) +
                np.sum(log_omega))
  value = err * sens
  objective = value + penalty_strength * penalty
  if not with_grad:
    return BltLossParts(value, sens, err, objective, None, None)
  tt = blt._exponents(m)[1:]  # s - 1 = 1..m-1 for the derivative of theta^(s-1).
  # d sens / d c_t for t >= 1 (the adjoint of u -> C u(pi*)).
  dc1 = sensitivity.participation_adjoint(c_bar, min_sep, k)[1:] / sens
  d_omega = err * _row_dots(p, dc1)
  # d c_t / d gap_j = -omega_j (t-1) theta_j^(t-2), t >= 2.
  d_gap = -err * omega * _row_dots(p[:, :m - 1], tt * dc1[1:])
  # d err / d b_t for t >= 1.
  db1 = (sens / err) * (b[1:] if loss == "max" else wgt[1:] * b[1:])
  d_omega_hat = _row_dots(geo, db1)
  # d geo[j, t-1] / d gap_hat_j = -sum_{s=2}^{t} (s-1) theta_hat^(s-2), so
  # sum_t db_t * that = -sum_{s>=2} (s-1) theta_hat^(s-2) * tail_s.
  tail = np.cumsum(db1[::-1])[::-1]  # tail[t-1] = sum_{u>=t} db_u.
  d_gap_hat = -omega_hat * _row_dots(p_hat[:, :m - 1], tt * tail[1:])
  # Penalty.
  d_gap = d_gap + penalty_strength * (1.0 / theta - 1.0 / gap)
  d_omega = d_omega - penalty_strength / omega
  # Chain rule through Alg. 5.
  lg, lgh = dlog_output_scales(gap, gap_hat)
  d_gap = d_gap + (d_omega * omega) @ lg
  d_gap_hat = d_gap_hat + (d_omega * omega) @ lgh
  lgh2, lg2 = dlog_output_scales(gap_hat, gap)
  d_gap_hat = d_gap_hat + (d_omega_hat * omega_hat) @ lgh2
  d_gap = d_gap + (d_omega_hat * omega_hat) @ lg2
  return BltLossParts(value, sens, err, objective, d_gap, d_gap_hat)


def blt_objective_materialized(y, n, min_sep, k, loss, penalty_strength):
  """Alg. 4's objective and gradient in the optimizer's ordered logits `y` (O(n) oracle of
  `blt_optimize._objectives`)."""
  gap, gap_hat, dg, dgh = blt_optimize._gaps_from_params(y)
  if (np.any(gap <= 0) or np.any(gap_hat <= gap) or
      np.any(gap_hat[1:] >= gap[:-1])):
    return np.inf, np.zeros_like(y)
  parts = blt_loss_from_gaps(gap, gap_hat, n, min_sep, k, loss, penalty_strength)
  if not np.isfinite(parts.objective):
    return np.inf, np.zeros_like(y)
  d_logits = np.empty(y.size)
  d_logits[1::2] = parts.grad_gap * dg
  d_logits[0::2] = parts.grad_gap_hat * dgh
  # logit_i = y_0 + sum_{m<=i} y_m, so dL/dy_m = sum_{i>=m} dL/dlogit_i.
  return parts.objective, np.cumsum(d_logits[::-1])[::-1].copy()


def blt_objective_at(y, n, min_sep, k, loss, penalty_strength):
  """`blt_optimize._objectives` (closed form) at the one point `y`: (value, gradient), what
  `blt_objective_materialized` is compared with."""
  values, grads = blt_optimize._objectives(y[None, :], n, min_sep, k, loss, penalty_strength)
  return float(values[0]), grads[0]


def blt_sensitivity_materialized(params: blt.Blt, n: int, min_sep: int, k: int) -> float:
  """Thm. 3.1 on the materialized coefficients, O(kn) (oracle of `Blt.sensitivity`)."""
  params._check_thm31()
  c_bar = sensitivity.participation_sum(params.coef(n), min_sep, k)
  return math.sqrt(_sumsq(c_bar))


def blt_evaluate_materialized(params: blt.Blt, n: int, min_sep: int, max_participations: int
                              ) -> blt.BltEvaluation:
  """`Blt.evaluate` on the materialized coefficients c and b, O(kn)."""
  k, message = sensitivity.feasible_participations(n, min_sep, max_participations)
  sens = blt_sensitivity_materialized(params, n, min_sep, k)
  max_sq, rms_sq = params._squared_errors_materialized(n)
  return params._evaluation(n, min_sep, k, sens, max_sq, rms_sq, message)
