"""Privacy of cpSGD, Rot(s_k(Bin(m, p)), HA) (paper 000, Sec. 4), per round and composed over
a client's participations — by the Binomial mechanism's Rényi divergences
(`dp_fl.accounting.binomial_rdp`), valid at every ε.

**Per round.** The server sees Σ_i Y_i = Σ_i U_i + Z with Z ~ Bin(n·m, ½) per coordinate
(each of the n reporting clients adds its own Bin(m, ½) share): the Binomial mechanism with
N = n·m on the integer query f = Σ_i U_i. Neighbouring cohorts differ in one client's vector
(replace-one, both of L2 norm <= D; the cohort size is public). The query is random
(stochastic quantization), so its sensitivities hold with high probability — Eq. 10 of paper
000 (our text copy of Eq. 10 is garbled; these are the arXiv version's, arXiv:1805.10559):

    a  = √d D (k−1) / X_max                     (L1 norm of the scaled difference)
    Δ∞ = k − 1,
    Δ₁ = a + √(2a log(2/δ_q)) + (4/3) log(2/δ_q),
    Δ₂ = D (k−1) / X_max + √(Δ₁ + √(2a log(2/δ_q))).

Why they hold: rotation is an isometry and clipping coordinates to ±X_max is a projection,
so two clipped, rotated vectors differ by at most 2D in L2; in level units (× (k−1)/(2X_max))
by at most b = D(k−1)/X_max in L2 and a = √d b in L1. Quantize both with the same dither
(U = ⌊P + v⌋, v ~ U[0, 1) per coordinate — a coupling with the right marginals): then
|U_j − U'_j| = ⌊Δ_j⌋ + B_j with B_j ~ Bernoulli(frac Δ_j) independent, so Bernstein's
inequality bounds Σ_j B_j and Σ_j (B_j − frac Δ_j)² by a + √(2a log(2/δ_q)) + (2/3) log(2/δ_q)
each with probability 1 − δ_q/2, which the expressions above dominate (Δ₂ via the triangle
inequality); and levels lie in {0, …, k−1}, so |U_j − U'_j| <= k − 1 always (paper 000 writes
k + 1; k − 1 is the deterministic bound). The other clients' messages are the same under both
cohorts: a common offset, i.e. a mixture with equal weights on both sides.

**Why not Thm. 1.** Paper 000's Thm. 1 (Eq. 6, `binomial.binomial_mechanism_epsilon`) rests on
the classical Gaussian bound, proved for ε < 1; at large ε it is below the true ε of the very
mechanism (issue #39: exact enumeration 16.68 vs Eq. 6's 15.97 at d = 1). It is kept, confined
to ε₀ <= 1, as a reference.

**The guarantee.** Each round is (δ_q + η)-approximately RDP with the curve of
`binomial_rdp.round_rdp` (N = n·m, the sensitivities above; η from the noise's finite
support); k rounds of a client compose adaptively by adding the curves and the failure
probabilities (Bun & Steinke 2016, Lemma 8.8), and the RDP conversion gives ε at
δ_RDP = δ − k(δ_q + η). We take k δ_q = δ/2. The rounds are charged at the smallest cohort any
round had (fewer reporting clients is less noise), k from the realized participation;
sampling is not credited (no amplification is claimed). p must be ½ (the symmetric Binomial,
the variance-maximizing choice of paper 000; the analysis uses its symmetry).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from dp_fl import _checks
from dp_fl import root_finding
from dp_fl.accounting import binomial
from dp_fl.accounting import binomial_rdp
from dp_fl.mechanisms import cpsgd as cpsgd_math

SENSITIVITY_DELTA_SHARE = 0.5  # k·δ_q = this share of δ; the RDP conversion gets the rest.
ORDERS_AROUND_BEST = 4  # Orders evaluated on each side of the Gaussian-predicted best one.


def sensitivities(num_levels: int, x_max: float, clip_norm: float, dimension: int,
                  delta: float) -> tuple[float, float, float]:
  """(Δ₁, Δ₂, Δ∞) of Eq. 10 for the level-index query, holding except with probability
  `delta` (see the module docstring)."""
  k = _checks.check_positive_int("num_levels", num_levels)
  x_max = _checks.check_positive("x_max", x_max)
  clip_norm = _checks.check_positive("clip_norm", clip_norm)
  d = _checks.check_positive_int("dimension", dimension)
  log_term = math.log(2.0 / _checks.check_delta(delta))
  a = math.sqrt(d) * clip_norm * (k - 1) / x_max
  l1 = a + math.sqrt(2.0 * a * log_term) + (4.0 / 3.0) * log_term
  l2 = clip_norm * (k - 1) / x_max + math.sqrt(l1 + math.sqrt(2.0 * a * log_term))
  return l1, l2, float(k - 1)


def check_symmetric(p: float) -> float:
  """p, which must be ½: the Rényi analysis uses the symmetry of Bin(N, ½)."""
  p = binomial.check_p(p)
  if p != 0.5:
    raise ValueError(
        f"cpSGD's privacy analysis (dp_fl/accounting/binomial_rdp.py) is for p = 1/2, the "
        f"symmetric Binomial paper 000 uses (it maximizes the noise per trial); got p = {p!r} "
        "(--cpsgd_p). Use p = 0.5.")
  return p


@dataclasses.dataclass(frozen=True)
class CpSgdGuarantee:
  """(ε, δ) of a client's k participations in cpSGD rounds, and how it was obtained.

  Attributes:
    epsilon, delta: the guarantee.
    participations: k.
    cohort: n, the (smallest) number of clients whose shares make each round's noise.
    num_trials: m, each client's Binomial trials.
    round_epsilon: ε at δ of a single round (one participation) of the same mechanism.
    order: the Rényi order that gave ε.
    sensitivities: (Δ₁, Δ₂, Δ∞) of Eq. 10 at the per-round δ_q.
    failure_probability: k(δ_q + η), the part of δ that is not the RDP conversion's.
    composition: how rounds were composed ("rdp").
    bits_per_coordinate: ⌈log₂(k_levels + m)⌉.
  """
  epsilon: float
  delta: float
  participations: int
  cohort: int
  num_trials: int
  round_epsilon: float
  order: float
  sensitivities: tuple[float, float, float]
  failure_probability: float
  composition: str
  bits_per_coordinate: int

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def _orders_near_best(rdp_per_unit: float, participations: int, delta: float
                      ) -> tuple[float, ...]:
  """The orders around the best one for a Gaussian with the same variance: the Binomial's
  curve lies just above it, so its best order is among these (any order gives a valid ε)."""
  gaussian = np.asarray(binomial_rdp.ORDERS) * rdp_per_unit * participations
  eps = [binomial_rdp.epsilon_from_rdp((a,), np.array([r]), delta)[0]
         for a, r in zip(binomial_rdp.ORDERS, gaussian)]
  best = int(np.argmin(eps))
  lo, hi = max(0, best - ORDERS_AROUND_BEST), best + ORDERS_AROUND_BEST + 1
  return binomial_rdp.ORDERS[lo:hi]


def composed_epsilon(num_levels: int, num_trials: int, p: float, x_max: float,
                     clip_norm: float, dimension: int, cohort: int, participations: int,
                     delta: float) -> CpSgdGuarantee:
  """(ε, δ) for `participations` rounds of cpSGD, each with at least `cohort` clients' noise.

  `dimension`: the d of the query — the padded d' with rotation, d without. ε = inf when no
  finite bound exists (m = 0, or fewer trials per coordinate than a shift needs).
  """
  k = _checks.check_nonnegative_int("participations", participations)
  delta = _checks.check_delta(delta)
  check_symmetric(p)
  m = _checks.check_nonnegative_int("num_trials", num_trials)
  n = _checks.check_nonnegative_int("cohort", cohort)
  bits = cpsgd_math.bits_per_coordinate(num_levels, m)
  if k == 0:
    return CpSgdGuarantee(0.0, 0.0, 0, n, m, 0.0, math.nan, (0.0, 0.0, 0.0), 0.0, "none", bits)

  def guarantee_for(rounds: int) -> tuple[float, float, tuple[float, float, float], float]:
    delta_q = SENSITIVITY_DELTA_SHARE * delta / rounds
    sens = sensitivities(num_levels, x_max, clip_norm, dimension, delta_q)
    if m == 0 or n == 0:
      return math.inf, math.nan, sens, 0.0
    trials = n * m
    orders = _orders_near_best(2.0 * sens[1] ** 2 / trials, rounds, delta / 2.0)
    per_round = binomial_rdp.round_rdp(trials, *sens, dimension, orders)
    failure = rounds * (delta_q + per_round.failure)
    if failure >= delta:
      return math.inf, math.nan, sens, failure
    eps, order = binomial_rdp.epsilon_from_rdp(orders, rounds * per_round.rdp,
                                               delta - failure)
    return eps, order, sens, failure

  eps, order, sens, failure = guarantee_for(k)
  round_eps = eps if k == 1 else guarantee_for(1)[0]
  return CpSgdGuarantee(eps, delta, k, n, m, round_eps, order, sens, failure, "rdp", bits)


def trials_for_epsilon(num_levels: int, p: float, x_max: float, clip_norm: float,
                       dimension: int, cohort: int, participations: int, epsilon: float,
                       delta: float, max_trials: int = 1 << 40,
                       relative_tolerance: float = 1e-3) -> int:
  """An m whose `composed_epsilon` is <= `epsilon`, within `relative_tolerance` of the
  smallest such m (ε decreases in m). Starts from the Gaussian with the same variance."""
  target = _checks.check_positive("epsilon", epsilon)
  check_symmetric(p)
  n = _checks.check_positive_int("cohort", cohort)

  values: dict[int, float] = {}  # ε(m) is pure and takes seconds: each m computed once.

  def eps(m):
    if m not in values:
      values[m] = composed_epsilon(num_levels, m, p, x_max, clip_norm, dimension, n,
                                   participations, delta).epsilon
    return values[m]

  def too_many(low, high):
    del low
    return (
        f"No number of Binomial trials m <= {max_trials} reaches ε = {epsilon:g} at "
        f"δ = {delta:g} for k = {num_levels} levels, X_max = {x_max:g}, d = {dimension}, "
        f"n = {cohort} (m = {high} gives ε = {eps(min(high, max_trials)):.4g}). Use a larger "
        "ε, or more clients per round.")

  # First guess: the Gaussian of the same variance N/4 is ρ-zCDP with ρ = 2kΔ₂²/N, and
  # ρ = (√(ε + log 1/δ) − √(log 1/δ))² reaches about ε.
  k = max(1, participations)
  _, l2, _ = sensitivities(num_levels, x_max, clip_norm, dimension,
                           SENSITIVITY_DELTA_SHARE * delta / k)
  rho = (math.sqrt(target + math.log(1 / delta)) - math.sqrt(math.log(1 / delta))) ** 2
  guess = min(max_trials, max(1, math.ceil(2.0 * k * l2 * l2 / rho / n)))
  # A bracket (low, high] of integers: halving from the guess while it meets the target
  # (low = 0: no m below meets it), else doubling up to max_trials.
  if eps(guess) <= target:
    low, high = root_finding.expand_down(lambda m: eps(m) <= target, guess // 2, guess,
                                         factor=2, floor=0)
  else:
    low, high = root_finding.expand_up(lambda m: eps(m) > target, guess, 2 * guess,
                                       factor=2, limit=max_trials, clamp_to_limit=True,
                                       unreachable=too_many)
  # Regula falsi on log ε against log m (smooth, nearly linear).
  return root_finding.smallest_integer(eps, target, low, high,
                                       method=root_finding.REGULA_FALSI,
                                       relative_tolerance=relative_tolerance)
