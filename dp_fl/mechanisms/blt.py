"""Buffered-linear Toeplitz (BLT) mechanisms for multi-participation DP-FTRL.

Paper 004 ("A Hassle-free Algorithm for Private Learning in Practice"), Sec. 2.4
and Sec. 3, extending Dvijotham et al. (paper 004's ref. [15]) to the
min-separation participation schema Pi(b, k).

Notation (paper 004): A is the n x n lower-triangular matrix of ones, A = B C
with C = LtToep(c) lower-triangular Toeplitz, B = A C^{-1}. A d-buffer BLT is
C = BLT(theta, omega) with buffer decays theta in (0, 1]^d and output scales
omega >= 0 (Eq. 2):

    c_0 = 1,    c_i = sum_j omega_j theta_j^(i-1)   (i >= 1).

Its inverse is again a d-buffer BLT, C^{-1} = BLT(theta_hat, omega_hat)
(Sec. 2.4, property (2)). The pair (theta, theta_hat) determines both output
scales (Alg. 5, Lemma 5.2 of Dvijotham et al.), which is how the optimizer is
parameterized (Sec. 3.3, Alg. 4).

Numerics. The optimal BLTs have decays within 1e-11 of 1 (paper 004, App. A),
so everything inside this module works with the *gaps* g = 1 - theta and
g_hat = 1 - theta_hat: differences theta_j - theta_hat_i = g_hat_i - g_j and
powers theta^t = exp(t * log1p(-g)) keep full relative precision there. The
optimizer parameterizes the interlaced decays

    0 < theta_hat_1 < theta_1 < theta_hat_2 < theta_2 < ... < theta_hat_d < theta_d < 1

by ordered logits (an unconstrained first logit plus non-negative increments,
box-bounded in L-BFGS-B), which is exactly the set of (theta, theta_hat) with
omega > 0 and theta_hat > 0; the latter gives sum(omega) = c_1 < 1 = c_0, so
the Toeplitz coefficients are positive and non-increasing and Thm. 3.1 applies.

Cost. The sensitivity (Thm. 3.1), MaxError / RmsError (Prop. 3.3) and the
optimizer's loss with its gradient are evaluated in closed form
(`blt_closed_form`: sums of geometric and arithmetico-geometric sums, O(k d^2),
independent of n), so `Blt.sensitivity`, `Blt.evaluate` and `optimize_blt`
take about as long for n = 10^6 as for n = 2000. `Blt.coef`, `inverse_coef`,
`b_coef` and `per_query_squared_error` materialize length-n arrays, and so do
the oracles `_loss_from_gaps` (Alg. 4 literally) and `Blt._evaluate_materialized`
the closed form is tested against.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
import warnings
from typing import Any, Mapping

import numpy as np
import scipy.optimize
import scipy.special

from dp_fl import _checks
from dp_fl import resources
from dp_fl.mechanisms import blt_closed_form
from dp_fl.mechanisms import sensitivity
from dp_fl.mechanisms import streaming

MECHANISM_NAME = "blt"
_JSON_VERSION = 1
LOSSES = ("max", "rms")
DEFAULT_PENALTY_STRENGTH = 1e-7  # Paper 004, Sec. 3.3 ("log-barrier ... 1e-7").
# Bounds of the ordered logits used by the optimizer: the first logit (the
# smallest decay, theta_hat_1) and each increment between consecutive decays.
# Bounds keep every decay's gap above ~1e-280 (no underflow), so the objective
# is finite on the whole box and L-BFGS-B's line search stays well-defined.
_LOGIT_RANGE = 30.0  # Smallest decay >= 1e-13 (expit(-30)), so 1 - gap > 0.
_TOTAL_LOGIT = 650.0
_MIN_INCREMENT = 1e-9
_MAX_RESTARTS = 4


class ParticipationReducedWarning(UserWarning):
  """`max_participations` exceeded ceil(n / min_sep) and was reduced to it."""


# ---------------------------------------------------------------------------
# Validation helpers.


def _check_loss(loss: Any) -> str:
  if loss not in LOSSES:
    raise ValueError(
        f"`loss` must be one of {LOSSES!r} ('max' = MaxLoss, Eq. 9; 'rms' = "
        f"RmsLoss, Eq. 10); got {loss!r}.")
  return loss


def _reduce_participations(n, min_sep, max_participations):
  """`sensitivity.feasible_participations`, its note surfaced as a ParticipationReducedWarning."""
  k, message = sensitivity.feasible_participations(n, min_sep, max_participations)
  if message is not None:
    warnings.warn(message, ParticipationReducedWarning, stacklevel=3)
  return k, message


# ---------------------------------------------------------------------------
# Alg. 5 and the inverse decays.


def _log_output_scales(gap: np.ndarray, gap_hat: np.ndarray):
  """(log|omega|, sign(omega)) of Alg. 5 in gap coordinates.

  With q(x) = prod_i (1 - theta_i x) and p(x) = prod_i (1 - theta_hat_i x), the
  generating function of BLT(theta, omega) is p(x) / q(x) (Lemma 5.2 of
  Dvijotham et al.), and the partial fractions of Alg. 5 give

      omega_j = prod_i (theta_j - theta_hat_i) / prod_{i != j} (theta_j - theta_i)
              = prod_i (g_hat_i - g_j) / prod_{i != j} (g_i - g_j).

  Summing logarithms avoids under/overflow of the products.
  """
  d = gap.size
  num = gap_hat[None, :] - gap[:, None]
  diff = gap[None, :] - gap[:, None]
  diff[np.arange(d), np.arange(d)] = 1.0
  with np.errstate(divide="ignore"):
    log_abs = (np.sum(np.log(np.abs(num)), axis=1) -
               np.sum(np.log(np.abs(diff)), axis=1))
  sign = np.prod(np.sign(num), axis=1) * np.prod(np.sign(diff), axis=1)
  return log_abs, sign


def _output_scales_from_gaps(gap: np.ndarray, gap_hat: np.ndarray) -> np.ndarray:
  """Alg. 5 in gap coordinates; see `_log_output_scales`."""
  log_abs, sign = _log_output_scales(gap, gap_hat)
  return sign * np.exp(log_abs)


def calc_output_scale(theta: Any, theta_hat: Any) -> np.ndarray:
  """Alg. 5 (calc_output_scale; Lemma 5.2 of Dvijotham et al.).

  Returns the unique omega such that C = BLT(theta, omega) has an inverse that
  is a BLT with buffer decays theta_hat. `calc_output_scale(theta_hat, theta)`
  gives the output scales omega_hat of that inverse. The decays in `theta`
  must be pairwise distinct; theta_hat_i equal to some theta_j is allowed.
  """
  theta = _checks.check_finite_array("theta", theta, ndim=1)
  theta_hat = _checks.check_finite_array("theta_hat", theta_hat, ndim=1)
  if theta.shape != theta_hat.shape or theta.size < 1:
    raise ValueError(
        f"`theta` and `theta_hat` must be non-empty and of equal length; got "
        f"{theta.size} and {theta_hat.size}.")
  if np.unique(theta).size != theta.size:
    raise ValueError(
        f"`theta` must hold pairwise distinct decays for Alg. 5; got "
        f"{theta.tolist()}. Merge equal decays (add their output scales).")
  return _output_scales_from_gaps(1.0 - theta, 1.0 - theta_hat)


def _secular(gamma: float, gap: np.ndarray, omega: np.ndarray) -> float:
  # 1 + sum_i omega_i / (lambda - theta_i) with lambda = 1 - gamma.
  return 1.0 + float(np.sum(omega / (gap - gamma)))


def _inverse_gaps(gap: np.ndarray, omega: np.ndarray) -> np.ndarray:
  """Gaps 1 - theta_hat of the inverse decays, aligned with `gap`.

  theta_hat are the eigenvalues of diag(theta) - 1 omega^T (the state
  transition of Alg. 3), i.e. the roots lambda of the secular equation
  1 + sum_i omega_i / (lambda - theta_i) = 0. For omega > 0 there is exactly
  one root between consecutive distinct decays and one below the smallest
  (interlacing); each is bracketed and found by Brent's method in the gap
  variable gamma = 1 - lambda, which keeps relative precision for decays
  near 1. Buffers with omega_j = 0, and all but one of a group of equal decays,
  get theta_hat_j = theta_j (their inverse output scale is 0).
  """
  d = gap.size
  out = gap.copy()
  active = np.flatnonzero(omega > 0)
  if active.size == 0:
    return out
  # Merge equal decays: the representative carries the summed output scale.
  uniq, inverse = np.unique(gap[active], return_inverse=True)
  w = np.zeros(uniq.size)
  np.add.at(w, inverse, omega[active])
  roots = np.empty(uniq.size)
  tiny = np.finfo(float).tiny
  for m in range(uniq.size):
    lo = uniq[m]
    hi = uniq[m + 1] if m + 1 < uniq.size else uniq[m] + np.sum(w) + 1.0
    # h -> -inf just above a pole and -> +inf below the next one.
    a = lo + max(abs(lo) * 4 * np.finfo(float).eps, tiny)
    while _secular(a, uniq, w) > 0:
      a = lo + (a - lo) * 0.5
      if a <= lo:
        break
    b_end = hi - max(abs(hi) * 4 * np.finfo(float).eps, tiny)
    fa, fb = _secular(a, uniq, w), _secular(b_end, uniq, w)
    if not fa < 0 < fb:
      # The root sits within rounding of a pole: that pole is the root.
      roots[m] = a if abs(fa) < abs(fb) else b_end
      continue
    roots[m] = scipy.optimize.brentq(_secular, a, b_end, args=(uniq, w),
                                     xtol=1e-300, rtol=4 * np.finfo(float).eps,
                                     maxiter=500)
  # Assign each root to the buffer whose decay sits just above it
  # (theta_hat_m < theta_m): root m lies in (uniq[m], uniq[m+1]) in gaps.
  taken = np.zeros(uniq.size, dtype=bool)
  for idx in active:
    m = np.searchsorted(uniq, gap[idx])
    if not taken[m]:
      out[idx] = roots[m]
      taken[m] = True
  return out


def inverse_decays(theta: Any, omega: Any) -> np.ndarray:
  """theta_hat with BLT(theta, omega)^{-1} = BLT(theta_hat, omega_hat).

  See `_inverse_gaps`; theta_hat[j] is the inverse decay interlaced just below
  theta[j] (paper 004, Sec. 2.4; Alg. 3's transition diag(theta) - 1 omega^T).
  """
  theta, omega = streaming.check_blt_parameters(theta, omega)
  return 1.0 - _inverse_gaps(1.0 - theta, omega)


# ---------------------------------------------------------------------------
# Vectorized losses (Alg. 4) and their gradients, in gap coordinates.


@functools.lru_cache(maxsize=8)
def _exponents(m: int) -> np.ndarray:
  t = np.arange(m, dtype=np.float64)
  t.setflags(write=False)
  return t


def _powers(gap: np.ndarray, m: int) -> np.ndarray:
  """(d, m) array P[j, s] = (1 - gap_j)^s for s = 0..m-1, accurate near 1.

  theta^s = exp(s * log1p(-gap)) keeps relative precision for decays near 1;
  to save exponentials s = q * r0 + r is split and theta^(q r0) * theta^r is
  formed from two short exponential tables (a few ulp of relative error).
  """
  with np.errstate(divide="ignore"):
    log_theta = np.log1p(-gap)
  # theta = 0 (gap = 1) gives 0^0 = 1 and 0^s = 0; avoid 0 * -inf.
  log_theta = np.maximum(log_theta, -1e300)
  r0 = max(1, int(math.isqrt(max(m, 1))))
  q0 = -(-m // r0)
  low = log_theta[:, None] * _exponents(r0)[None, :]
  high = log_theta[:, None] * (r0 * _exponents(q0))[None, :]
  # Flush powers below e^-200 to 0: each factor is then 0 or >= 1e-87, so
  # neither the product nor its multiples by output scales and gradients get
  # subnormal (subnormal arithmetic is ~100x slower); the dropped terms are
  # below 1e-87 relative to c_0 = 1.
  low[low < -200.0] = -np.inf
  high[high < -200.0] = -np.inf
  low = np.exp(low)
  high = np.exp(high)
  p = (high[:, :, None] * low[:, None, :]).reshape(gap.size, q0 * r0)
  return np.ascontiguousarray(p[:, :m])  # Contiguous rows for fast row ops.


def _combine(weights: np.ndarray, rows: np.ndarray) -> np.ndarray:
  """sum_j weights[j] * rows[j] without BLAS.

  The (d, n) products here have tiny d; multi-threaded BLAS gemv is no faster
  for them and stalls badly on a loaded machine, so the hot loop avoids it.
  """
  out = weights[0] * rows[0]
  for j in range(1, weights.size):
    out += weights[j] * rows[j]
  return out


def _row_dots(rows: np.ndarray, v: np.ndarray) -> np.ndarray:
  """rows @ v without BLAS (see `_combine`)."""
  return np.sum(rows * v[None, :], axis=1)


def _sumsq(v: np.ndarray) -> float:
  return float(np.sum(v * v))


def _coef_from_gaps(gap: np.ndarray, omega: np.ndarray, n: int,
                    powers: np.ndarray | None = None) -> np.ndarray:
  """Eq. 2: c_0 = 1, c_i = sum_j omega_j theta_j^(i-1)."""
  if powers is None:
    powers = _powers(gap, n - 1)
  c = np.empty(n)
  c[0] = 1.0
  c[1:] = _combine(omega, powers[:, :n - 1])
  return c


def _prefix_coef_from_gaps(gap_hat: np.ndarray, omega_hat: np.ndarray, n: int,
                           powers: np.ndarray | None = None):
  """Prop. 3.3: b_t = sum_{s<=t} c_hat_s, the coefficients of B = A C^{-1}.

  Returns (b, geo) where geo[j, t-1] = sum_{s=1}^{t} theta_hat_j^(s-1) for
  t = 1..n-1 (positive terms, so the cumulative sum is accurate).
  """
  if powers is None:
    powers = _powers(gap_hat, n - 1)
  geo = np.cumsum(powers[:, :n - 1], axis=1)
  b = np.empty(n)
  b[0] = 1.0
  b[1:] = 1.0 + _combine(omega_hat, geo)
  return b, geo


def _error_weights(n: int, loss: str) -> np.ndarray:
  if loss == "max":
    return np.ones(n)
  return (n - np.arange(n, dtype=np.float64)) / n


def _dlog_output_scales(gap: np.ndarray, gap_hat: np.ndarray):
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
class _LossParts:
  loss: float
  sens: float
  error: float
  objective: float
  grad_gap: np.ndarray
  grad_gap_hat: np.ndarray


def _loss_from_gaps(gap: np.ndarray, gap_hat: np.ndarray, n: int, min_sep: int,
                    k: int, loss: str, penalty_strength: float,
                    with_grad: bool = True) -> _LossParts:
  """Alg. 4 (differentiable MaxLoss / RmsLoss of a BLT) with its gradient, O(kn).

  The materialized test oracle of `blt_closed_form.objective`, which the
  optimizer uses.

  Inputs are gaps 1 - theta and 1 - theta_hat (interlaced so omega > 0). The
  objective is err * sens + lambda * (-sum log theta - sum log(1 - theta)
  - sum log omega); the gradient is analytic (adjoints of the sums below).
  """
  log_omega, _ = _log_output_scales(gap, gap_hat)
  omega = np.exp(log_omega)  # omega > 0 by the interlacing.
  omega_hat = _output_scales_from_gaps(gap_hat, gap)
  m = n - 1
  p = _powers(gap, m)
  p_hat = _powers(gap_hat, m)
  # Sensitivity, Thm. 3.1: ||C u(pi*)||.
  c = _coef_from_gaps(gap, omega, n, p)
  c_bar = sensitivity.participation_sum(c, min_sep, k)
  sens = math.sqrt(_sumsq(c_bar))
  # Error, Prop. 3.3.
  b, geo = _prefix_coef_from_gaps(gap_hat, omega_hat, n, p_hat)
  if loss == "max":
    err = math.sqrt(_sumsq(b))
  else:
    wgt = _error_weights(n, loss)
    err = float(np.sqrt(np.sum(wgt * b * b)))
  theta = 1.0 - gap
  with np.errstate(divide="ignore", invalid="ignore"):
    penalty = -(np.sum(np.log(theta)) + np.sum(np.log(gap)) +
                np.sum(log_omega))
  value = err * sens
  objective = value + penalty_strength * penalty
  if not with_grad:
    return _LossParts(value, sens, err, objective, None, None)
  tt = _exponents(m)[1:]  # s - 1 = 1..m-1 for the derivative of theta^(s-1).
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
  lg, lgh = _dlog_output_scales(gap, gap_hat)
  d_gap = d_gap + (d_omega * omega) @ lg
  d_gap_hat = d_gap_hat + (d_omega * omega) @ lgh
  lgh2, lg2 = _dlog_output_scales(gap_hat, gap)
  d_gap_hat = d_gap_hat + (d_omega_hat * omega_hat) @ lgh2
  d_gap = d_gap + (d_omega_hat * omega_hat) @ lg2
  return _LossParts(value, sens, err, objective, d_gap, d_gap_hat)


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


def _objective_materialized(y, n, min_sep, k, loss, penalty_strength):
  """Alg. 4's objective and gradient in the optimizer's ordered logits `y` (O(n) oracle)."""
  gap, gap_hat, dg, dgh = _gaps_from_params(y)
  if (np.any(gap <= 0) or np.any(gap_hat <= gap) or
      np.any(gap_hat[1:] >= gap[:-1])):
    return np.inf, np.zeros_like(y)
  parts = _loss_from_gaps(gap, gap_hat, n, min_sep, k, loss, penalty_strength)
  if not np.isfinite(parts.objective):
    return np.inf, np.zeros_like(y)
  d_logits = np.empty(y.size)
  d_logits[1::2] = parts.grad_gap * dg
  d_logits[0::2] = parts.grad_gap_hat * dgh
  # logit_i = y_0 + sum_{m<=i} y_m, so dL/dy_m = sum_{i>=m} dL/dlogit_i.
  return parts.objective, np.cumsum(d_logits[::-1])[::-1].copy()


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


def _objective(y, n, min_sep, k, loss, penalty_strength):
  """`_objectives` of one point `y`: (objective, gradient)."""
  obj, grad = _objectives(y[None, :], n, min_sep, k, loss, penalty_strength)
  return float(obj[0]), grad[0]


# ---------------------------------------------------------------------------
# The mechanism.


@dataclasses.dataclass(frozen=True)
class BltSetting:
  """What a BLT was optimized for: n rounds, Pi(min_sep, max_participations).

  `max_participations` is the effective k (<= ceil(n / min_sep)).
  """
  n: int
  min_sep: int
  max_participations: int
  buffers: int
  loss: str

  def __post_init__(self):
    for name in ("n", "min_sep", "max_participations", "buffers"):
      object.__setattr__(self, name,
                         _checks.check_positive_int(name, getattr(self, name)))
    _check_loss(self.loss)

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class BltEvaluation:
  """Sensitivity (Thm. 3.1), errors (Prop. 3.3) and losses (Eqs. 9-10)."""
  n: int
  min_sep: int
  max_participations: int
  sensitivity: float
  max_error: float
  rms_error: float
  max_loss: float
  rms_loss: float
  message: str | None = None


@dataclasses.dataclass(frozen=True)
class Blt:
  """C = BLT(theta, omega), a d-buffer BLT (paper 004, Eq. 2).

  theta: buffer decays in (0, 1]^d. omega: output scales >= 0.
  setting: the (n, min_sep, max_participations, buffers, loss) it was
  optimized for, when it came from `optimize_blt` (None otherwise).
  BLTs are defined for any number of rounds n.
  """
  theta: tuple[float, ...]
  omega: tuple[float, ...]
  setting: BltSetting | None = None

  def __post_init__(self):
    theta, omega = streaming.check_blt_parameters(self.theta, self.omega)
    object.__setattr__(self, "theta", tuple(float(t) for t in theta))
    object.__setattr__(self, "omega", tuple(float(w) for w in omega))
    if self.setting is not None:
      if not isinstance(self.setting, BltSetting):
        raise ValueError(
            f"`setting` must be a BltSetting or None; got {self.setting!r}.")
      if self.setting.buffers != len(self.theta):
        raise ValueError(
            f"`setting.buffers` must equal the number of buffers "
            f"len(theta)={len(self.theta)}; got {self.setting.buffers}.")

  # -- construction ---------------------------------------------------------

  @classmethod
  def from_decays(cls, theta: Any, theta_hat: Any,
                  setting: BltSetting | None = None) -> "Blt":
    """BLT(theta, calc_output_scale(theta, theta_hat)) (Alg. 5).

    Requires the interlacing theta_hat_1 < theta_1 < ... < theta_hat_d <
    theta_d (after sorting), which is equivalent to omega > 0.
    """
    omega = calc_output_scale(theta, theta_hat)
    if np.any(omega < 0):
      raise ValueError(
          f"`theta_hat`={np.asarray(theta_hat).tolist()} does not interlace "
          f"below `theta`={np.asarray(theta).tolist()} (gives omega="
          f"{omega.tolist()} with negative entries); each theta_hat must lie "
          f"between consecutive sorted theta values, the smallest below "
          f"min(theta).")
    return cls(tuple(np.asarray(theta, dtype=float)), tuple(omega), setting)

  # -- structure ------------------------------------------------------------

  @property
  def buffers(self) -> int:
    return len(self.theta)

  @property
  def theta_array(self) -> np.ndarray:
    return np.array(self.theta)

  @property
  def omega_array(self) -> np.ndarray:
    return np.array(self.omega)

  def _gaps(self) -> np.ndarray:
    return 1.0 - self.theta_array

  def _inverse_gaps_and_scales(self) -> tuple[np.ndarray, np.ndarray]:
    """(1 - theta_hat, omega_hat), see `inverse_parameters` (gaps keep full precision)."""
    gap = self._gaps()
    gap_hat = _inverse_gaps(gap, self.omega_array)
    omega_hat = np.zeros(gap.size)
    live = gap_hat != gap
    if np.any(live):
      omega_hat[live] = _output_scales_from_gaps(gap_hat[live], gap[live])
    return gap_hat, omega_hat

  def inverse_parameters(self) -> tuple[np.ndarray, np.ndarray]:
    """(theta_hat, omega_hat) with C^{-1} = BLT(theta_hat, omega_hat).

    theta_hat from the secular equation (see `inverse_decays`), omega_hat by
    Alg. 5 applied to (theta_hat, theta); buffers that do not contribute
    (omega_j = 0 or duplicated decays) get omega_hat_j = 0.
    """
    gap_hat, omega_hat = self._inverse_gaps_and_scales()
    return 1.0 - gap_hat, omega_hat

  def coef(self, n: int) -> np.ndarray:
    """First column of C = LtToep(c), c by Eq. 2 (length n)."""
    n = _checks.check_positive_int("n", n)
    return _coef_from_gaps(self._gaps(), self.omega_array, n)

  def inverse_coef(self, n: int) -> np.ndarray:
    """First column of C^{-1}: Eq. 2 applied to (theta_hat, omega_hat)."""
    n = _checks.check_positive_int("n", n)
    return _coef_from_gaps(*self._inverse_gaps_and_scales(), n)

  def b_coef(self, n: int) -> np.ndarray:
    """First column of B = A C^{-1} (Prop. 3.3: b_t = sum_{s<=t} c_hat_s)."""
    n = _checks.check_positive_int("n", n)
    return _prefix_coef_from_gaps(*self._inverse_gaps_and_scales(), n)[0]

  def per_query_squared_error(self, n: int) -> np.ndarray:
    """Squared row norms of B (Prop. 3.3): row t has sum_{s<=t} b_s^2."""
    return np.cumsum(self.b_coef(n) ** 2)

  def _squared_errors(self, n: int) -> tuple[float, float]:
    """(MaxError^2, RmsError^2) by Prop. 3.3, in closed form where it applies.

    `blt_closed_form.error_squared` (cost independent of n) needs b_s = beta_0 +
    sum_j beta_j theta_hat_j^s with theta_hat in (0, 1) and beta >= 0 (every
    BLT with omega > 0 whose inverse decays are positive); otherwise the
    coefficients b are materialized (`_squared_errors_materialized`).
    """
    gap = self._gaps()
    gap_hat, omega_hat = self._inverse_gaps_and_scales()
    live = omega_hat != 0
    gh = gap_hat[live]
    if np.all((gh > 0) & (gh < 1)):
      beta = -omega_hat[live] / gh
      if np.all(beta >= 0):
        beta0 = float(np.prod(gap[live] / gh))
        return blt_closed_form.error_squared(n, -np.log1p(-gh),
                                             np.concatenate(([beta0], beta)))
    return self._squared_errors_materialized(n)

  def _squared_errors_materialized(self, n: int) -> tuple[float, float]:
    """(MaxError^2, RmsError^2) from the materialized b (Prop. 3.3; O(n) test oracle)."""
    b = self.b_coef(n)
    return float(np.sum(b * b)), float(np.sum(_error_weights(n, "rms") * b * b))

  def max_error(self, n: int) -> float:
    """MaxError(B) = sqrt(sum_t b_t^2) (Prop. 3.3), in closed form where it applies."""
    n = _checks.check_positive_int("n", n)
    return math.sqrt(self._squared_errors(n)[0])

  def rms_error(self, n: int) -> float:
    """RmsError(B) = sqrt(sum_t (n - t) b_t^2 / n) (Prop. 3.3), in closed form where it applies."""
    n = _checks.check_positive_int("n", n)
    return math.sqrt(self._squared_errors(n)[1])

  def sensitivity(self, n: int, min_sep: int, max_participations: int) -> float:
    """sens_{Pi(b,k)}(C) = ||C u(pi*)||_2 (Thm. 3.1), in closed form: O(k d^2).

    Thm. 3.1 needs non-negative, non-increasing coefficients; for a BLT with
    theta in (0, 1] and omega >= 0 that holds iff c_1 = sum(omega) <= 1.
    k above ceil(n / min_sep) is reduced with a ParticipationReducedWarning.
    `blt_closed_form.sensitivity_squared` sums the overlaps of the k shifted
    coefficient sequences as geometric sums, without materializing them.
    """
    n = _checks.check_positive_int("n", n)
    k, _ = _reduce_participations(n, min_sep, max_participations)
    return self._sensitivity(n, min_sep, k)

  def _check_thm31(self) -> None:
    total = math.fsum(self.omega)
    if total > 1.0:
      raise ValueError(
          f"Thm. 3.1 needs non-increasing Toeplitz coefficients, i.e. "
          f"sum(omega) <= 1 = c_0; got sum(omega)={total!r} for omega="
          f"{list(self.omega)}. Use a brute-force sensitivity for this C.")

  def _sensitivity(self, n: int, min_sep: int, k: int) -> float:
    self._check_thm31()
    return math.sqrt(blt_closed_form.sensitivity_squared(n, min_sep, k, self.theta_array,
                                                         self.omega_array))

  def _sensitivity_materialized(self, n: int, min_sep: int, k: int) -> float:
    """Thm. 3.1 on the materialized coefficients, O(kn) (test oracle)."""
    self._check_thm31()
    c_bar = sensitivity.participation_sum(self.coef(n), min_sep, k)
    return math.sqrt(_sumsq(c_bar))

  def evaluate(self, n: int, min_sep: int, max_participations: int) -> BltEvaluation:
    """Sensitivity, MaxError, RmsError, MaxLoss and RmsLoss (Eqs. 9-10).

    In closed form (`blt_closed_form`, cost independent of n) where it applies
    (see `sensitivity` and `_squared_errors`).
    """
    n = _checks.check_positive_int("n", n)
    k, message = _reduce_participations(n, min_sep, max_participations)
    sens = self._sensitivity(n, min_sep, k)
    max_sq, rms_sq = self._squared_errors(n)
    return self._evaluation(n, min_sep, k, sens, max_sq, rms_sq, message)

  def _evaluate_materialized(self, n: int, min_sep: int, max_participations: int
                             ) -> BltEvaluation:
    """`evaluate` on the materialized coefficients c and b, O(kn) (test oracle)."""
    n = _checks.check_positive_int("n", n)
    k, message = _reduce_participations(n, min_sep, max_participations)
    sens = self._sensitivity_materialized(n, min_sep, k)
    max_sq, rms_sq = self._squared_errors_materialized(n)
    return self._evaluation(n, min_sep, k, sens, max_sq, rms_sq, message)

  @staticmethod
  def _evaluation(n, min_sep, k, sens, max_sq, rms_sq, message) -> BltEvaluation:
    max_err, rms_err = math.sqrt(max_sq), math.sqrt(rms_sq)
    return BltEvaluation(n, min_sep, k, sens, max_err, rms_err, sens * max_err,
                         sens * rms_err, message)

  def max_loss(self, n: int, min_sep: int, max_participations: int) -> float:
    """MaxLoss = MaxError(A C^{-1}) * sens(C) (Eq. 9)."""
    return self.evaluate(n, min_sep, max_participations).max_loss

  def rms_loss(self, n: int, min_sep: int, max_participations: int) -> float:
    """RmsLoss = RmsError(A C^{-1}) * sens(C) (Eq. 10)."""
    return self.evaluate(n, min_sep, max_participations).rms_loss

  # -- serialization --------------------------------------------------------

  def to_dict(self) -> dict[str, Any]:
    return {
        "mechanism": MECHANISM_NAME,
        "version": _JSON_VERSION,
        "theta": list(self.theta),
        "omega": list(self.omega),
        "setting": None if self.setting is None else self.setting.to_dict(),
    }

  def to_json(self) -> str:
    """JSON with theta, omega (exact float repr) and the optimized-for setting."""
    return json.dumps(self.to_dict(), indent=1)

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> "Blt":
    if not isinstance(data, Mapping):
      raise ValueError(f"BLT JSON must be an object; got {type(data).__name__}.")
    mech = data.get("mechanism")
    if mech != MECHANISM_NAME:
      raise ValueError(
          f"`mechanism` in the JSON must be {MECHANISM_NAME!r} to load a BLT; "
          f"got {mech!r}. Load it with the module of that mechanism.")
    version = data.get("version")
    if version != _JSON_VERSION:
      raise ValueError(
          f"`version` of the BLT JSON must be {_JSON_VERSION}; got {version!r}.")
    for key in ("theta", "omega"):
      if key not in data:
        raise ValueError(f"BLT JSON lacks the field {key!r}; got keys "
                         f"{sorted(data)}.")
    setting = data.get("setting")
    if setting is not None:
      if not isinstance(setting, Mapping):
        raise ValueError(f"`setting` in the BLT JSON must be an object or null; "
                         f"got {setting!r}.")
      fields = {f.name for f in dataclasses.fields(BltSetting)}
      if set(setting) != fields:
        raise ValueError(f"`setting` in the BLT JSON must have exactly the keys "
                         f"{sorted(fields)}; got {sorted(setting)}.")
      setting = BltSetting(**setting)
    return cls(data["theta"], data["omega"], setting)

  @classmethod
  def from_json(cls, text: str) -> "Blt":
    """Inverse of `to_json`; refuses JSON of any other mechanism."""
    if not isinstance(text, (str, bytes, bytearray)):
      raise ValueError(f"`text` must be a JSON string; got {type(text).__name__}.")
    try:
      data = json.loads(text)
    except json.JSONDecodeError as e:
      raise ValueError(f"`text` is not valid JSON ({e}); got {text[:80]!r}.") from e
    return cls.from_dict(data)


# ---------------------------------------------------------------------------
# Optimizer (Sec. 3.3).


@dataclasses.dataclass(frozen=True)
class BltOptimizationResult:
  """Best BLT found by `optimize_blt` and how it was found.

  `max_participations` is the effective k (capped at ceil(n / b) by
  `sensitivity.feasible_participations`), `requested_max_participations` what
  the caller asked for and `message` the reduction notice (None when k was
  feasible).
  """
  blt: Blt
  loss: str
  loss_value: float
  evaluation: BltEvaluation
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


def _setulb():
  """scipy's L-BFGS-B routine `setulb` (private module) if its signature is the
  reverse-communication one `_lbfgsb_steps` drives, else None."""
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
_LBFGSB_OPTIONS = {"gtol": 1e-12, "maxcor": 20}


def _lbfgsb_steps(x0, lower, upper, max_iterations, ftol):
  """L-BFGS-B as a generator: yields each point to evaluate, is sent (f, grad)
  there, and returns (x, f).

  Drives scipy's Fortran `setulb` with the reverse-communication loop of
  `scipy.optimize.minimize(method="L-BFGS-B")` (FG: evaluate, never twice at the
  same point; NEW_X: count an iteration; anything else: stop) and its options
  gtol=1e-12, maxcor=20, maxls=20, so the iterates are the same as that
  function's; it skips that function's per-evaluation wrappers, and lets
  `_run_together` evaluate the points of several runs in one batched call.
  """
  setulb, int_type = _SETULB
  size = x0.size
  m = _LBFGSB_OPTIONS["maxcor"]
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
  factr = ftol / np.finfo(float).eps
  gtol = _LBFGSB_OPTIONS["gtol"]
  iterations = 0
  last = None
  while True:
    setulb(m, x, lower, upper, bound_type, f, g, factr, gtol, wa, iwa, task, -1,
           csave, lsave, isave, dsave, 20)
    state = task.tobytes()
    if state.startswith(b"FG"):
      if last is None or not np.array_equal(x, last):
        last = x.copy()
        f, g = yield last
        # setulb updates g in place and needs its own contiguous float64 array.
        f, g = float(f), np.array(g, dtype=np.float64)
    elif state.startswith(b"NEW_X"):
      iterations += 1
      if iterations >= max_iterations:
        task[:] = "STOP: TOTAL NO. of ITERATIONS REACHED LIMIT"
    else:
      return x, float(f)


def _scipy_lbfgsb_steps(x0, lower, upper, max_iterations, ftol, args):
  """`_lbfgsb_steps` by `scipy.optimize.minimize` (where `setulb` is not usable): a
  generator that yields nothing, evaluating `_objective` itself."""
  res = scipy.optimize.minimize(
      _objective, x0, args=args, jac=True, method="L-BFGS-B",
      bounds=list(zip(lower, upper)),
      options={"maxiter": max_iterations, "ftol": ftol, "maxls": 20, **_LBFGSB_OPTIONS})
  return res.x, float(res.fun)
  yield  # pylint: disable=unreachable  (makes this a generator)


def _minimize_steps(y0, restarts, run):
  """Generator of L-BFGS-B runs `run(y)` (`_lbfgsb_steps`) from `y0`, restarted with
  a fresh memory while a run still improves (by more than 1e-10 relative);
  returns (y, f), f = inf if no run found a finite objective."""
  y = y0
  f = np.inf
  # L-BFGS-B can stop early on this landscape (curvature changes by orders of
  # magnitude); restarting with a fresh memory continues while it helps.
  for _ in range(restarts):
    y_new, f_new = yield from run(y)
    improved = f - f_new
    if not f_new < f:
      break
    y, f = y_new, f_new
    if improved <= 1e-10 * abs(f):
      break
  return y, f


def _run_together(runs, evaluate):
  """Results of the generators `runs` (`_minimize_steps`), advanced together.

  Each round, the points that all unfinished runs ask for are evaluated by one
  call `evaluate(points (B, p)) -> (f (B,), grad (B, p))`; every run sees
  exactly the values it would see alone (the closed-form evaluation of a row
  does not depend on the other rows, bitwise).
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


def _minimize_all(y0s, n, min_sep, k, loss, penalty_strength, max_iterations, tol,
                  restarts=_MAX_RESTARTS):
  """[(y, f)] of `_minimize_steps` from each start in `y0s` (all with the same d).

  With scipy's `setulb` the runs advance together (`_run_together`), so one
  batched closed-form evaluation serves every run per round; without it, each
  run is `scipy.optimize.minimize` in turn (the same iterates).
  """
  if not y0s:
    return []
  d2 = y0s[0].size
  max_increment = min(_LOGIT_RANGE, (_TOTAL_LOGIT - _LOGIT_RANGE) / (d2 - 1))
  lower = np.full(d2, _MIN_INCREMENT)
  upper = np.full(d2, max_increment)
  lower[0], upper[0] = -_LOGIT_RANGE, _LOGIT_RANGE
  args = (n, min_sep, k, loss, penalty_strength)
  if _SETULB is not None:
    run = lambda y: _lbfgsb_steps(y, lower, upper, max_iterations, tol)
  else:
    run = lambda y: _scipy_lbfgsb_steps(y, lower, upper, max_iterations, tol, args)
  return _run_together(
      [_minimize_steps(np.clip(y0, lower, upper), restarts, run) for y0 in y0s],
      lambda ys: _objectives(ys, *args))


def _optimizer_gaps(initial: Blt) -> tuple[np.ndarray, np.ndarray]:
  """(gap, gap_hat) of `initial` in the optimizer's order, or ValueError."""
  if not isinstance(initial, Blt):
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


def optimize_blt(n: int, min_sep: int, max_participations: int, buffers: int,
                 loss: str = "max", *, num_starts: int = 1, seed: int = 0,
                 warm_start: bool = True,
                 penalty_strength: float = DEFAULT_PENALTY_STRENGTH,
                 max_iterations: int = 1000, tol: float = 1e-12,
                 screen_iterations: int = 25, num_polished: int = 2,
                 initial: Blt | None = None,
                 ) -> BltOptimizationResult:
  """Optimizes BLT(theta, omega) for MaxLoss or RmsLoss under Pi(b, k).

  Paper 004, Sec. 3.3: minimizes Alg. 4's err * sens + log-barrier (strength
  `penalty_strength`, 1e-7 in the paper) over the pair (theta, theta_hat) with
  L-BFGS-B and analytic gradients in float64; omega then follows from Alg. 5.
  The landscape has several local optima (the paper's d >= 3 rows of Table 3
  are one), so for every d' = 1..buffers the candidates are `num_starts`
  fresh starts (log-spaced, then jittered interlaced decays; at least 3 for
  d' = 1, which is cheap) and, if `warm_start`, one start per insertion point
  of a new, nearly cancelling buffer (below, between and above the decays) into
  the best (d'-1)-buffer solution. Every candidate is screened with
  `screen_iterations` L-BFGS-B iterations; the `num_polished` best are run to
  convergence (with fresh-memory restarts while they still improve). The best
  d-buffer BLT is returned.

  The loss and its gradient are evaluated in closed form (`blt_closed_form`,
  cost independent of n), and the L-BFGS-B runs of one screening or polishing
  step advance together with one batched evaluation per round
  (`_run_together`; each run's iterates are those of a run alone): ~0.05 s for
  d = 4, whether n = 2000 or 10^6 (scripts/bench_blt.py).

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
  loss = _check_loss(loss)
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
  k, message = _reduce_participations(n, min_sep, requested)
  rng = np.random.default_rng(seed)
  # Progress in L-BFGS-B runs: per buffer count, its starts (fresh, warm at the 2d'-1
  # insertion points, the initial BLT) are screened and `num_polished` of them polished.
  runs = [(max(num_starts, 3) if d == 1 else num_starts + (2 * d - 1 if warm_start else 0))
          + (1 if initial is not None and initial.buffers == d else 0)
          for d in range(1, buffers + 1)]
  progress = resources.Progress(f"optimizing a {buffers}-buffer BLT for n={n}",
                                sum(r + min(r, num_polished) for r in runs))
  history = []
  starts = 0
  best = None
  for d in range(1, buffers + 1):
    candidates = []
    # One buffer has two parameters and is cheap: always try a few starts.
    for s in range(num_starts if d > 1 else max(num_starts, 3)):
      candidates.append(_initial_gaps(d, n, rng, jitter=s > 0))
    if initial_gaps is not None and initial.buffers == d:
      candidates.append(initial_gaps)
    if warm_start and best is not None:
      gap, gap_hat = best
      # New buffer below, between and above the existing decays (in gaps).
      edges = np.sort(np.concatenate([gap, gap_hat]))
      points = np.concatenate([[edges[0] * 0.1],
                               np.sqrt(edges[1:] * edges[:-1]),
                               [min(edges[-1] * 3.0, 0.9)]])
      for where in points:
        cand = _insert_buffer(gap, gap_hat, where)
        if cand is not None:
          candidates.append(cand)
    # Screen every start with a few iterations, then polish the best ones (the
    # runs of each step advance together, one batched evaluation per round).
    starts += len(candidates)
    screened = [(f, y) for y, f in _minimize_all(
        [_params_from_gaps(gap0, gap_hat0) for gap0, gap_hat0 in candidates],
        n, min_sep, k, loss, penalty_strength, screen_iterations, tol, restarts=1)
                if np.isfinite(f)]
    progress.advance(len(candidates))
    screened.sort(key=lambda fy: fy[0])
    stage_best = None
    polished = _minimize_all([y0 for _, y0 in screened[:num_polished]], n, min_sep, k,
                             loss, penalty_strength, max_iterations, tol)
    progress.advance(len(polished))
    for y, f in polished:
      if np.isfinite(f) and (stage_best is None or f < stage_best[0]):
        stage_best = (f, y)
    if stage_best is None:
      raise RuntimeError(f"BLT optimization found no finite loss for d={d}.")
    gap, gap_hat, _, _ = _gaps_from_params(stage_best[1])
    best = (gap, gap_hat)
    history.append((d, stage_best[0]))
  progress.finish()
  gap, gap_hat = best
  omega = _output_scales_from_gaps(gap, gap_hat)
  setting = BltSetting(n, min_sep, k, buffers, loss)
  blt = Blt(tuple(1.0 - gap), tuple(omega), setting)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", ParticipationReducedWarning)
    evaluation = blt.evaluate(n, min_sep, k)
  value = evaluation.max_loss if loss == "max" else evaluation.rms_loss
  return BltOptimizationResult(
      blt=blt, loss=loss, loss_value=value, evaluation=evaluation,
      max_participations=k, requested_max_participations=requested,
      message=message, starts=starts,
      seconds=time.perf_counter() - start_time, history=tuple(history))


# ---------------------------------------------------------------------------
# Published BLTs (paper 004, App. A), used by the accounting for Table 4.

PUBLISHED_BLTS: dict[int, Blt] = {
    100: Blt(
        theta=(0.989739971007307, 0.7352001759538236, 0.16776199983448145,
               0.1677619998016191),
        omega=(0.20502892852480875, 0.23357939425278557, 0.03479503245420878,
               0.03479509876050538),
        setting=BltSetting(n=2000, min_sep=100, max_participations=10,
                           buffers=4, loss="max")),
    400: Blt(
        theta=(0.9999999999921251, 0.9944453083640997, 0.8985923474607591,
               0.4912001418098778),
        omega=(0.0070314825502323835, 0.10613806907600574, 0.1898159060327625,
               0.1966594748073734),
        setting=BltSetting(n=4000, min_sep=400, max_participations=5,
                           buffers=4, loss="max")),
    1000: Blt(
        theta=(0.9999999999983397, 0.9973412136664378, 0.9584629472313878,
               0.6581796870749317),
        omega=(0.008657392263671862, 0.05890891298180163, 0.14548176930698697,
               0.2770117005326523),
        setting=BltSetting(n=4000, min_sep=1000, max_participations=2,
                           buffers=4, loss="max")),
}
"""Paper 004, App. A: the d=4 BLTs used in production, keyed by min_sep.

Each `setting` is the (n, min_sep, max_participations) App. A states; the
loss they were optimized for is not stated in App. A; 'max' follows Table 3
("BLTs are optimized for MaxLoss") and is what re-optimization reproduces
(see scripts/bench_blt.py).
"""
