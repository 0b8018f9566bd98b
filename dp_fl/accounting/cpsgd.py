"""Privacy of cpSGD, Rot(s_k(Bin(m, p)), HA) (paper 000, Thm. 3–4 through Thm. 1), per round and
composed over a client's participations.

**Per round.** The server sees Σ_i Y_i = Σ_i U_i + Z with Z ~ Bin(n·m, p) per coordinate
(each of the n reporting clients adds its own Bin(m, p) share), i.e. the Binomial mechanism of
Thm. 1 with N = n·m and scale s = 1 on the integer query f = Σ_i U_i. Neighbouring cohorts
differ in one client's vector (replace-one, both of L2 norm <= D; the cohort size is public).
The query is random (stochastic quantization), so its sensitivities hold with high
probability — Eq. 10 of paper 000 (our text copy of Eq. 10 is garbled; these are the arXiv
version's, arXiv:1805.10559):

    a  = √d D (k−1) / X_max                     (L1 norm of the scaled difference)
    Δ∞ = k + 1,
    Δ₁ = a + √(2a log(2/δ)) + (4/3) log(2/δ),
    Δ₂ = D (k−1) / X_max + √(Δ₁ + √(2a log(2/δ))).

Why they hold: rotation is an isometry and clipping coordinates to ±X_max is a projection,
so two clipped, rotated vectors differ by at most 2D in L2; in level units (× (k−1)/(2X_max))
by at most b = D(k−1)/X_max in L2 and a = √d b in L1. Quantize both with the same dither
(U = ⌊P + v⌋, v ~ U[0, 1) per coordinate — a coupling with the right marginals): then
|U_j − U'_j| = ⌊Δ_j⌋ + B_j with B_j ~ Bernoulli(frac Δ_j) independent, so Bernstein's
inequality bounds Σ_j B_j and Σ_j (B_j − frac Δ_j)² by a + √(2a log(2/δ)) + (2/3) log(2/δ)
each with probability 1 − δ/2, which the expressions above dominate (Δ₂ via the triangle
inequality), and |U_j − U'_j| <= k − 1 always. The failure probability δ of the coupling adds
to Thm. 1's δ: each round is (ε₀, 2δ₀)-DP (Thm. 3); we charge (ε₀, 3δ₀) as Thm. 4 does for the
rotated protocol. ε₀ is Thm. 1's (`binomial.binomial_mechanism_epsilon`), at d = d' the padded
dimension, N = n·m.

**Over rounds.** A client that took part in k rounds is covered by the better of basic
composition, (k ε₀, 3k δ₀), and advanced composition (Dwork, Rothblum & Vadhan 2010, valid
for adaptive (ε, δ) mechanisms; paper 000, Sec. 3, points to the composition theorem of its
ref. [19], Kairouz, Oh & Viswanath, whose optimal composition is tighter still):
(√(2k log(1/δ')) ε₀ + k ε₀ (e^ε₀ − 1),
3k δ₀ + δ'). We split a total δ as δ' = δ/2 and δ₀ = δ / (6k) (δ₀ = δ/(3k), δ' = 0, for basic
composition), and take the smaller ε. The rounds are charged at the smallest cohort any round
had (fewer reporting clients is less noise), k from the realized participation; sampling is
not credited (no amplification is claimed).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from dp_fl import _checks
from dp_fl.accounting import binomial

DELTA_CHARGE_PER_ROUND = 3  # Thm. 4: (ε, 3δ) per round for Rot(s_k(Bin(m, p)), HA).


def sensitivities(num_levels: int, x_max: float, clip_norm: float, dimension: int,
                  delta: float) -> tuple[float, float, float]:
  """(Δ₁, Δ₂, Δ∞) of Eq. 10 for the level-index query (see the module docstring)."""
  k = _checks.check_positive_int("num_levels", num_levels)
  x_max = _checks.check_positive("x_max", x_max)
  clip_norm = _checks.check_positive("clip_norm", clip_norm)
  d = _checks.check_positive_int("dimension", dimension)
  log_term = math.log(2.0 / _checks.check_delta(delta))
  a = math.sqrt(d) * clip_norm * (k - 1) / x_max
  l1 = a + math.sqrt(2.0 * a * log_term) + (4.0 / 3.0) * log_term
  l2 = clip_norm * (k - 1) / x_max + math.sqrt(l1 + math.sqrt(2.0 * a * log_term))
  return l1, l2, float(k + 1)


@dataclasses.dataclass(frozen=True)
class CpSgdGuarantee:
  """(ε, δ) of a client's k participations in cpSGD rounds, and how it was obtained.

  Attributes:
    epsilon, delta: the guarantee.
    participations: k.
    cohort: n, the (smallest) number of clients whose shares make each round's noise.
    round_guarantee: Thm. 1's figures for one round (ε₀ at δ₀).
    round_delta: δ charged per round, 3δ₀.
    composition: "basic" or "advanced".
    bits_per_coordinate: ⌈log₂(k_levels + m)⌉.
  """
  epsilon: float
  delta: float
  participations: int
  cohort: int
  round_guarantee: Optional[binomial.BinomialGuarantee]
  round_delta: float
  composition: str
  bits_per_coordinate: int

  def to_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    out["round_guarantee"] = (self.round_guarantee.to_dict() if self.round_guarantee
                              else None)
    return out


def round_epsilon(num_levels: int, num_trials: int, p: float, x_max: float, clip_norm: float,
                  dimension: int, cohort: int, delta0: float
                  ) -> Optional[binomial.BinomialGuarantee]:
  """Thm. 1 for one round with N = cohort · m; None where Thm. 1 does not apply (m = 0, or
  N p (1−p) below its threshold): no finite ε is claimed then."""
  if num_trials == 0 or cohort == 0:
    return None
  l1, l2, linf = sensitivities(num_levels, x_max, clip_norm, dimension, delta0)
  try:
    return binomial.binomial_mechanism_epsilon(
        cohort * num_trials, p, 1.0, l1, l2, linf, dimension, delta0,
        num_quantization_levels=num_levels)
  except ValueError:  # Thm. 1's condition on N p (1 − p) fails.
    return None


def composed_epsilon(num_levels: int, num_trials: int, p: float, x_max: float,
                     clip_norm: float, dimension: int, cohort: int, participations: int,
                     delta: float) -> CpSgdGuarantee:
  """(ε, δ) for `participations` rounds of cpSGD, each with at least `cohort` clients' noise.

  `dimension`: the d of Thm. 1 — the padded d' with rotation, d without. ε = inf when
  Thm. 1 does not apply (the message of `binomial.check_binomial_condition` says which m would).
  """
  k = _checks.check_nonnegative_int("participations", participations)
  delta = _checks.check_delta(delta)
  bits = binomial.bits_per_coordinate(num_levels, num_trials)
  if k == 0:
    return CpSgdGuarantee(0.0, 0.0, 0, cohort, None, 0.0, "none", bits)
  candidates = []
  for name, delta_prime in (("basic", 0.0), ("advanced", delta / 2.0)):
    if name == "advanced" and k == 1:
      continue
    delta0 = (delta - delta_prime) / (DELTA_CHARGE_PER_ROUND * k)
    guarantee = round_epsilon(num_levels, num_trials, p, x_max, clip_norm, dimension, cohort,
                              delta0)
    if guarantee is None:
      candidates.append((math.inf, name, None, DELTA_CHARGE_PER_ROUND * delta0))
      continue
    e0 = guarantee.epsilon
    if name == "basic":
      eps = k * e0
    elif e0 > 700.0:  # e^ε₀ overflows; advanced composition is far worse than basic there.
      eps = math.inf
    else:
      eps = math.sqrt(2.0 * k * math.log(1.0 / delta_prime)) * e0 + k * e0 * math.expm1(e0)
    candidates.append((eps, name, guarantee, DELTA_CHARGE_PER_ROUND * delta0))
  eps, name, guarantee, round_delta = min(candidates, key=lambda c: c[0])
  return CpSgdGuarantee(eps, delta, k, cohort, guarantee, round_delta, name, bits)


def trials_for_epsilon(num_levels: int, p: float, x_max: float, clip_norm: float,
                       dimension: int, cohort: int, participations: int, epsilon: float,
                       delta: float, max_trials: int = 1 << 40) -> int:
  """The smallest m whose `composed_epsilon` is <= `epsilon` (ε decreases in m)."""
  target = _checks.check_positive("epsilon", epsilon)

  def eps(m):
    return composed_epsilon(num_levels, m, p, x_max, clip_norm, dimension, cohort,
                            participations, delta).epsilon

  high = 1
  while eps(high) > target:
    high *= 2
    if high > max_trials:
      raise ValueError(
          f"No number of Binomial trials m <= {max_trials} reaches ε = {epsilon:g} at "
          f"δ = {delta:g} for k = {num_levels} levels, X_max = {x_max:g}, d = {dimension}, "
          f"n = {cohort}: the L1/L∞ terms of Thm. 1 dominate. Use more quantization levels "
          "k, a larger X_max, or a larger ε.")
  low = high // 2  # eps(low) > target (or low = 0).
  while high - low > 1:
    mid = (low + high) // 2
    if eps(mid) <= target:
      high = mid
    else:
      low = mid
  return high
