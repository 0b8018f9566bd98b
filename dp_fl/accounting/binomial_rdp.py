"""Approximate Rényi DP of the multi-dimensional Binomial mechanism (p = 1/2), valid at every ε.

Paper 000's Thm. 1 bounds one round of the Binomial mechanism f(D) + Z − N/2, Z_j ~ Bin(N, ½)
i.i.d., through the classical Gaussian bound Δ₂√(2 log(1.25/δ))/σ, which is proved for ε < 1
only and is far below the truth at large ε (issue #39: exact enumeration gives 16.68 where
Eq. 6 gives 15.97). Its discussion (Sec. 5) asks for "better privacy accounting for Binomial
mechanism via a moments accountant": this module is that accountant. It bounds each round's
Rényi divergences numerically, with every approximation rounded against us, and composes them
additively, so one analysis holds at every ε and for any number of rounds.

**Approximate RDP** (Bun & Steinke 2016, Def. 8.1 and Lemma 8.8, with Rényi curves in place of
ρα): a pair (P, Q) is η-approximately ε(·)-RDP if P = (1−η)P' + ηP'' and Q = (1−η)Q' + ηQ''
with D_α(P'‖Q') <= ε(α) for every order α > 1. Adaptive composition adds both ε(·) and η;
post-processing keeps them; and since the hockey-stick divergence is jointly convex,
H_{e^ε}(P‖Q) <= H_{e^ε}(P'‖Q') + η, so the composition is (ε, δ_RDP + η)-DP with ε from the
RDP conversion (Canonne, Kamath & Steinke 2020, Prop. 12; `dp_accounting`'s `compute_epsilon`).

**Lemma 1 (one shift, one trial of noise less).** Let B1(M) be the pair P = Bin(M, ½) + 1,
Q = Bin(M, ½). Conditioning P on {x <= M} and Q on {x >= 1} removes mass η = 2^−M from each,
and the conditionals P', Q' live on [1, M] with P'(x)/Q'(x) = x / (M − x + 1). The map
x -> M + 1 − x swaps P' and Q', so D_α(P'‖Q') = D_α(Q'‖P'): one computation covers both
directions. `shift_one_rdp` computes

    S(α) = Σ_{x=1}^{M} Q(x) (x / (M − x + 1))^α,   D_α(P'‖Q') = log(S / (1 − η)) / (α − 1)

exactly for M <= `FULL_ENUMERATION_TRIALS`, and above it on a window of ±12 standard
deviations with rigorous bounds for the rest: writing T(x) for the summand, its log-ratio
R(x) = log T(x+1) − log T(x) = (1−α) log((M−x)/(x+1)) + α log((M−x+1)/x) has derivative
(α−1)/(M−x) − α/(M−x+1) + (α−1)/(x+1) − α/x, which is negative for 1 <= x <= M − α + 1.
T is therefore log-concave there: beyond the window's edges each tail is at most a geometric
series in e^{R(edge)}, and the last α points (x > M − α + 1) are summed directly (log-gamma
weights, rounded up past their rounding error). Log-weights are accumulated in extended precision and
log S is rounded up by `_LOG_SUM_SLACK`.

**Lemma 2 (a shift of u is u shifts of one).** Bin(N, ½) is the sum of u independent
Bin(⌊N/u⌋, ½) and an independent rest, so the pair (Bin(N, ½) + u, Bin(N, ½)) is a
post-processing (the sum) of u copies of B1(⌊N/u⌋): it is u·η-approximately u·D_α-RDP. And
B1(M') is a post-processing of B1(M) for M' >= M (add Bin(M' − M, ½)), so a bound for M holds
for every M' >= M. As the number of trials grows this is tight: u · 2α/(N/u) = 2αu²/N, the
Gaussian mechanism's Rényi divergence at the same variance.

**Theorem (one round).** Let the d-dimensional integer shift v = f(D) − f(D') satisfy
‖v‖∞ <= Δ∞, ‖v‖₁ <= Δ₁, ‖v‖₂ <= Δ₂. Coordinates are independent, so Rényi divergences add
over coordinates: with n_u coordinates shifted by ±u (symmetry of Bin(N, ½) makes the sign
irrelevant), D_α <= Σ_u n_u c_u(α), c_u = u·D_α(B1(⌊N/u⌋)). The worst allowed shift is
bounded by the linear program

    max Σ_u n_u c_u   s.t.   Σ_u u n_u <= Δ₁,   Σ_u u² n_u <= Δ₂²,   Σ_u n_u <= d,   n >= 0,

whose value `_worst_shift_bound` certifies by a dual-feasible point (any dual-feasible point
bounds the maximum, however the solver rounded). Shifts above 16 are grouped in buckets
[lo, hi] at ratio 1.02, each charged c at its largest u and u² relaxed to its tangent at lo
(a relaxation, so the bound stays valid). A random query (cpSGD's stochastic quantization) is
a mixture of such shifts with the same weights under D and D'; joint quasi-convexity of Rényi
divergence (van Erven & Harremoës 2014, Thm. 13) and the coupling's failure probability δ_q
(`dp_fl.accounting.cpsgd`) then make the round (δ_q + Δ₁·max η)-approximately RDP.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Sequence

import numpy as np
from scipy import optimize
from scipy import special

from dp_accounting.rdp import rdp_privacy_accountant

from dp_fl import _checks

# Orders from near 1 (large ε: the conversion's best order approaches 1) to 1024 (small ε).
ORDERS = (1.01, 1.02, 1.03, 1.05, 1.075, 1.1, 1.15, 1.2, 1.3, 1.4, 1.5, 1.75, 2.0, 2.5, 3.0,
          3.5, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0,
          192.0, 256.0, 384.0, 512.0, 1024.0)

FULL_ENUMERATION_TRIALS = 4096  # At or below (or when the window does not fit): all of [1, M].
_WINDOW_STDS = 12.0  # Half-width of the summed window in standard deviations of Bin(M, ½).
_LOG_SUM_SLACK = 1e-13  # Added to log S: far above the rounding of the extended-precision sums.
_FAR_SLACK_PER_LOG_GAMMA = 1e-14  # × M log M: above float64 log-gamma's rounding at M.
_SINGLETON_SHIFTS = 16  # Shifts up to this get their own LP variable; larger ones buckets.
_BUCKET_RATIO = 1.02


def _log_failure(num_trials: int) -> float:
  return -num_trials * math.log(2.0)


def _logsumexp(values: np.ndarray, axis: int = -1) -> np.ndarray:
  top = np.max(values, axis=axis, keepdims=True)
  top = np.where(np.isfinite(top), top, 0.0)
  return (np.log(np.sum(np.exp(values - top), axis=axis)) + np.squeeze(top, axis=axis))


@functools.lru_cache(maxsize=4096)
def shift_one_rdp(num_trials: int, orders: tuple[float, ...] = ORDERS) -> np.ndarray:
  """Upper bounds on D_α(P'‖Q') of B1(M) (Lemma 1 of the module docstring), one per order.

  `num_trials` is M; the pair is η = 2^−M-approximate (`shift_one_failure`). Read-only.
  """
  m = _checks.check_positive_int("num_trials", num_trials)
  alphas = np.asarray(orders, dtype=np.float64)
  if np.any(alphas <= 1.0):
    raise ValueError(f"Rényi orders must be > 1; got {orders!r}.")
  alpha_max = float(alphas.max())
  center = max(1, m // 2)  # A mode of Bin(M, ½): every log-weight below is <= 0.
  half = int(math.ceil(_WINDOW_STDS * math.sqrt(m) / 2.0))
  lo, hi = center - half, center + half + int(math.ceil(alpha_max)) + 1
  decreasing_up_to = math.floor(m - alpha_max + 1.0)  # R decreases on [1, this].
  windowed = m > FULL_ENUMERATION_TRIALS and hi + 1 <= decreasing_up_to and lo > 1
  if not windowed:
    lo, hi = 1, m
  x = np.arange(lo, hi + 1, dtype=np.float64)
  # log Q(x) − log Q(center) by summing log(Q(y+1)/Q(y)) = log((M−y)/(y+1)) outward from the
  # center, in extended precision (the window spans up to ~10^6 steps).
  steps = np.log1p((m - 2.0 * np.arange(lo, hi, dtype=np.longdouble) - 1.0)
                   / (np.arange(lo, hi, dtype=np.longdouble) + 1.0))
  k = center - lo  # Index of the center in x.
  log_w = np.zeros(x.shape[0], dtype=np.longdouble)
  log_w[k + 1:] = np.cumsum(steps[k:])
  log_w[:k] = -np.cumsum(steps[:k][::-1])[::-1]
  log_w = log_w.astype(np.float64)
  ratio = np.log1p((2.0 * x - m - 1.0) / (m - x + 1.0))  # log(x / (M − x + 1)).
  log_terms = log_w[None, :] + alphas[:, None] * ratio[None, :]
  log_numerator = _logsumexp(log_terms)
  if windowed:
    # Geometric tails beyond both edges (T log-concave on [1, M − α + 1]).
    def log_step(y):  # R(y) for every order.
      return ((1.0 - alphas) * math.log((m - y) / (y + 1.0))
              + alphas * math.log((m - y + 1.0) / y))
    up, down = log_step(float(hi)), log_step(float(lo - 1))
    if np.any(up >= 0) or np.any(down <= 0):  # Cannot happen for orders <= M / 4.
      raise RuntimeError(f"the summed window [{lo}, {hi}] of Bin({m}, ½) misses the peak of "
                         f"an order in {orders}; use orders well below {m}.")
    upper_tail = log_terms[:, -1] + up - np.log(-np.expm1(up))
    lower_tail = log_terms[:, 0] - down - np.log(-np.expm1(-down))
    log_numerator = np.logaddexp(log_numerator, np.logaddexp(upper_tail, lower_tail))
    # Σ_win Q = Q(center)·Σ_win w <= 1, so Q(center) <= 1 / Σ_win w.
    log_s = log_numerator - _logsumexp(log_w)
    # The last (at most α) points, summed directly with absolute log-gamma weights, rounded
    # up by more than float64 log-gamma's rounding error at M.
    far_x = np.arange(decreasing_up_to + 1, m + 1, dtype=np.float64)
    if far_x.size:
      far_log_q = (special.gammaln(m + 1.0) - special.gammaln(far_x + 1.0)
                   - special.gammaln(m - far_x + 1.0) - m * math.log(2.0))
      far_ratio = np.log(far_x / (m - far_x + 1.0))
      slack = _FAR_SLACK_PER_LOG_GAMMA * (m * math.log(m) + m) + 1e-12
      far = _logsumexp(far_log_q[None, :] + alphas[:, None] * far_ratio[None, :]) + slack
      log_s = np.logaddexp(log_s, far)
  else:
    # Exact: normalize by Σ_{x=0}^{M} Q = 1 (x = 0 has log-weight log Q(0) − log Q(center)).
    log_zero = -(float(np.sum(steps[:k])) + math.log(m))  # log((M − 0)/(0 + 1)) is step 0.
    log_total = np.logaddexp(_logsumexp(log_w), log_zero)
    log_s = log_numerator - log_total
  # S >= 1 − η (Hölder: P' and Q' are probability distributions), so D_α >= 0.
  log_keep = math.log1p(-math.exp(_log_failure(m)))
  log_s = np.maximum(log_s, log_keep) + _LOG_SUM_SLACK
  rdp = (log_s - log_keep) / (alphas - 1.0)
  rdp.setflags(write=False)
  return rdp


def shift_one_failure(num_trials: int) -> float:
  """η of B1(M): 2^−M, rounded up to the smallest normal float where it underflows."""
  return max(math.exp(_log_failure(num_trials)), np.finfo(np.float64).tiny)


@dataclasses.dataclass(frozen=True)
class RoundRdp:
  """One round of the Binomial mechanism as approximate RDP.

  Attributes:
    orders: the Rényi orders α.
    rdp: an upper bound on the round's D_α for each order (inf if unbounded).
    failure: η of the round from the noise's finite support (Lemmas 1–2); the caller adds the
      failure probability of its sensitivities.
  """
  orders: tuple[float, ...]
  rdp: np.ndarray
  failure: float


def _shift_buckets(max_shift: int) -> list[tuple[int, int]]:
  """[lo, hi] integer ranges covering 1..max_shift: singletons, then `_BUCKET_RATIO`."""
  buckets, lo = [], 1
  while lo <= max_shift:
    hi = lo if lo <= _SINGLETON_SHIFTS else max(lo, int(lo * _BUCKET_RATIO))
    hi = min(hi, max_shift)
    buckets.append((lo, hi))
    lo = hi + 1
  return buckets


def _worst_shift_bound(value: np.ndarray, l1_cost: np.ndarray, l2_cost: np.ndarray,
                       l1: float, l2_squared: float, dimension: int) -> float:
  """A certified upper bound on max Σ n_j value_j s.t. Σ n_j l1_cost_j <= l1,
  Σ n_j l2_cost_j <= l2², Σ n_j <= dimension, n >= 0 (l1_cost_j >= 1)."""
  if not np.any(value > 0):
    return 0.0
  a_ub = np.vstack([l1_cost, l2_cost, np.ones_like(value)])
  b_ub = np.array([l1, l2_squared, float(dimension)])
  result = optimize.linprog(-value, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
  if result.status == 0:
    duals = np.maximum(-np.asarray(result.ineqlin.marginals, dtype=np.float64), 0.0)
  else:  # Fall back to a trivially feasible dual: the L1 constraint alone.
    duals = np.array([float(np.max(value / l1_cost)), 0.0, 0.0])
  # Repair any violated dual constraint (solver rounding) through y1: l1_cost >= 1.
  violation = float(np.max(value - duals @ a_ub))
  if violation > 0:
    duals[0] += violation
  return float(duals @ b_ub) * (1.0 + 1e-9)


def round_rdp(num_trials: int, l1_sensitivity: float, l2_sensitivity: float,
              linf_sensitivity: float, dimension: int,
              orders: Sequence[float] = ORDERS) -> RoundRdp:
  """Approximate RDP of one round of f(D) + Bin(N, ½)^d (the module's Theorem).

  Args:
    num_trials: N, trials of each coordinate's noise (the sum over clients).
    l1_sensitivity, l2_sensitivity, linf_sensitivity: Δ₁, Δ₂, Δ∞ of the integer query (in
      units of the noise's integer lattice).
    dimension: d.
    orders: Rényi orders α > 1.
  """
  n = _checks.check_positive_int("num_trials", num_trials)
  l1 = _checks.check_nonnegative("l1_sensitivity", l1_sensitivity)
  l2 = _checks.check_nonnegative("l2_sensitivity", l2_sensitivity)
  linf = _checks.check_nonnegative("linf_sensitivity", linf_sensitivity)
  d = _checks.check_positive_int("dimension", dimension)
  orders = tuple(float(a) for a in orders)
  max_shift = int(math.floor(min(linf, l1, l2) + 1e-9))
  if max_shift < 1:  # No integer shift fits: the two outputs have the same law.
    return RoundRdp(orders, np.zeros(len(orders)), 0.0)
  buckets = _shift_buckets(max_shift)
  if n // buckets[-1][1] < 1:
    return RoundRdp(orders, np.full(len(orders), math.inf), 1.0)
  l1_cost, l2_cost, per_copy = [], [], []
  failure_per_copy = 0.0
  for lo, hi in buckets:
    trials = n // hi  # Lemma 2 at the bucket's largest shift: fewest trials per copy.
    rdp = shift_one_rdp(trials, orders)
    failure_per_copy = max(failure_per_copy, shift_one_failure(trials))
    for u, l2u in ((lo, lo * lo), (hi, 2 * lo * hi - lo * lo)) if hi > lo else ((lo, lo * lo),):
      l1_cost.append(u)
      l2_cost.append(l2u)
      per_copy.append(u * rdp)
  l1_cost_a = np.asarray(l1_cost, dtype=np.float64)
  l2_cost_a = np.asarray(l2_cost, dtype=np.float64)
  values = np.asarray(per_copy)  # (variables, orders)
  bounds = np.array([
      _worst_shift_bound(values[:, i], l1_cost_a, l2_cost_a, l1, l2 * l2, d)
      for i in range(len(orders))])
  # At most Δ₁ copies of B1 in any allowed shift (Σ_j |v_j| <= Δ₁), each failing w.p. η.
  return RoundRdp(orders, bounds, min(1.0, math.floor(l1) * failure_per_copy))


def epsilon_from_rdp(orders: Sequence[float], rdp: np.ndarray, delta: float
                     ) -> tuple[float, float]:
  """(ε, best order) of an RDP curve at δ (Canonne, Kamath & Steinke 2020, Prop. 12)."""
  if delta <= 0:
    return math.inf, float("nan")
  rdp = np.asarray(rdp, dtype=np.float64)
  finite = np.isfinite(rdp)
  if not np.any(finite):
    return math.inf, float("nan")
  eps, order = rdp_privacy_accountant.compute_epsilon(
      np.asarray(orders)[finite], rdp[finite], delta)
  return float(eps), float(order)
