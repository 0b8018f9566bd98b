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
scales (Alg. 5, Lemma 5.2 of Dvijotham et al.), which is how the optimizer
(`blt_optimize.optimize_blt`, Sec. 3.3, Alg. 4) is parameterized.

Numerics. The optimal BLTs have decays within 1e-11 of 1 (paper 004, App. A),
so everything inside this module works with the *gaps* g = 1 - theta and
g_hat = 1 - theta_hat: differences theta_j - theta_hat_i = g_hat_i - g_j and
powers theta^t = exp(t * log1p(-g)) keep full relative precision there.

Cost. The sensitivity (Thm. 3.1) and MaxError / RmsError (Prop. 3.3) are
evaluated in closed form (`blt_closed_form`: sums of geometric and
arithmetico-geometric sums, O(k d^2), independent of n), so `Blt.sensitivity`
and `Blt.evaluate` take about as long for n = 10^6 as for n = 2000. `Blt.coef`,
`inverse_coef`, `b_coef` and `per_query_squared_error` materialize length-n
arrays, and so do the test oracles the closed form is tested against (Alg. 4
literally, the materialized evaluation: tests/mechanisms/oracles.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import warnings
from typing import Any, Mapping

import numpy as np
import scipy.optimize

from dp_fl import _checks
from dp_fl.mechanisms import blt_closed_form
from dp_fl.mechanisms import sensitivity
from dp_fl.mechanisms import streaming

MECHANISM_NAME = "blt"
_JSON_VERSION = 1
LOSSES = ("max", "rms")


class ParticipationReducedWarning(UserWarning):
  """`max_participations` exceeded ceil(n / min_sep) and was reduced to it."""


# ---------------------------------------------------------------------------
# Validation helpers.


def check_loss(loss: Any) -> str:
  """`loss` if it is one of LOSSES, else a ValueError naming them."""
  if loss not in LOSSES:
    raise ValueError(
        f"`loss` must be one of {LOSSES!r} ('max' = MaxLoss, Eq. 9; 'rms' = "
        f"RmsLoss, Eq. 10); got {loss!r}.")
  return loss


def reduce_participations(n, min_sep, max_participations):
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


def output_scales_from_gaps(gap: np.ndarray, gap_hat: np.ndarray) -> np.ndarray:
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
  return output_scales_from_gaps(1.0 - theta, 1.0 - theta_hat)


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
# Coefficients (Eq. 2, Prop. 3.3) in gap coordinates.


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
    check_loss(self.loss)

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
  optimized for, when it came from `blt_optimize.optimize_blt` (None otherwise).
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
      omega_hat[live] = output_scales_from_gaps(gap_hat[live], gap[live])
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
    """(MaxError^2, RmsError^2) from the materialized b (Prop. 3.3, O(n)): where the closed
    form does not apply, and as its test oracle."""
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
    k, _ = reduce_participations(n, min_sep, max_participations)
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

  def evaluate(self, n: int, min_sep: int, max_participations: int) -> BltEvaluation:
    """Sensitivity, MaxError, RmsError, MaxLoss and RmsLoss (Eqs. 9-10).

    In closed form (`blt_closed_form`, cost independent of n) where it applies
    (see `sensitivity` and `_squared_errors`).
    """
    n = _checks.check_positive_int("n", n)
    k, message = reduce_participations(n, min_sep, max_participations)
    sens = self._sensitivity(n, min_sep, k)
    max_sq, rms_sq = self._squared_errors(n)
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
