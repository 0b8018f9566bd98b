"""zCDP accounting for matrix-factorization mechanisms (DP-FTRL with TreeAgg, BandMF, BLT).

A matrix mechanism releases C X + ζ Z (paper 004, Eq. 1) where Z has i.i.d. N(0, σ²)
entries and σ is the *noise multiplier* (noise standard deviation divided by the clip
norm ζ). With sens = sens_Π(C) the L2 sensitivity of C under the participation schema
(paper 004, Eq. 5-6; Thm. 3.1 for decreasing Toeplitz C), the release is one Gaussian
mechanism with effective noise multiplier σ / sens, hence

    ρ = sens² / (2 σ²)                       (ρ-zCDP, Bun & Steinke, ref. [5] of paper 004)

and its exact (ε, δ) curve is that of the Gaussian mechanism with μ = sens / σ = √(2ρ)
(Balle & Wang 2018, Thm. 8):

    δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ).

Paper 004 (Sec. 2.1, Table 4, App. C item 3a) reports ρ and the (ε, δ) obtained by PLD
accounting; for a single Gaussian the PLD of dp_accounting converges to this exact curve
(`pld_epsilon_from_rho` checks it). Two classical zCDP -> (ε, δ) conversions are given as
well, labelled, because they are what much of the literature reports:

  * "bun_steinke":  ε = ρ + 2 √(ρ log(1/δ))              (Bun & Steinke 2016, Prop. 1.3)
  * "cks":          ε = min_{α>1} αρ + [log(1/δ) + (α−1) log(1−1/α) − log α] / (α−1)
                    (Canonne, Kamath & Steinke 2020, Prop. 12 / Cor. 13)

with exact <= cks <= bun_steinke for every (ρ, δ).

All functions are pure (NumPy/SciPy + dp_accounting). Sensitivities are passed in as
numbers; they come from `dp_fl.mechanisms`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import dp_accounting
from dp_accounting.pld import pld_privacy_accountant
from scipy import optimize
from scipy import special

from dp_fl import _checks
from dp_fl import root_finding

# Conversion names, as written into results and reports.
EXACT_GAUSSIAN = "exact_gaussian"
CKS = "cks"
BUN_STEINKE = "bun_steinke"
CONVERSIONS = (EXACT_GAUSSIAN, CKS, BUN_STEINKE)

# ε above which we stop searching: e^ε overflows float64 shortly after 700.
_MAX_EPSILON = 700.0
_MAX_BRACKET = 1e6  # Largest 2ρ whose ε is searched for (beyond: σ is a mistake).


def _check_noise_multiplier(noise_multiplier: Any) -> float:
  x = _checks.check_finite("noise_multiplier", noise_multiplier)
  if x <= 0:
    raise ValueError(
        f"`noise_multiplier` must be > 0 (noise std / clip norm); got {noise_multiplier!r}. "
        "A zero noise multiplier gives no differential privacy.")
  return x


def _check_epsilon(name: str, epsilon: Any) -> float:
  x = _checks.check_finite(name, epsilon)
  if x <= 0:
    raise ValueError(f"`{name}` must be a finite number > 0; got {epsilon!r}.")
  return x


def _check_rho(name: str, rho: Any) -> float:
  x = _checks.check_finite(name, rho)
  if x <= 0:
    raise ValueError(
        f"`{name}` must be a finite number > 0 (ρ of ρ-zCDP); got {rho!r}.")
  return x


def rho_from_sensitivity(sensitivity: float, noise_multiplier: float) -> float:
  """ρ-zCDP of the matrix mechanism C X + ζ Z: ρ = sens² / (2 σ²).

  Args:
    sensitivity: L2 sensitivity sens_Π(C) of the strategy matrix for unit clip norm
      (paper 004, Eq. 6; Thm. 3.1 for decreasing Toeplitz C).
    noise_multiplier: σ, the noise standard deviation divided by the clip norm ζ.

  Returns:
    ρ such that the full release is ρ-zCDP.
  """
  sens = _checks.check_positive("sensitivity", sensitivity)
  sigma = _check_noise_multiplier(noise_multiplier)
  denominator = 2.0 * sigma * sigma  # Underflows to 0 for σ below ~1e-154.
  rho = math.inf if denominator == 0.0 else sens * sens / denominator
  if not 0.0 < rho < math.inf:
    raise ValueError(
        f"`noise_multiplier`={noise_multiplier!r} with sensitivity {sens:.6g} gives ρ = "
        f"sens² / (2σ²) = {rho!r}, which float64 cannot represent (σ² "
        f"{'underflows' if rho == math.inf else 'overflows'}); use a noise multiplier "
        "between about 1e-3 and 1e6.")
  return rho


def gaussian_delta(mu: float, epsilon: float) -> float:
  """Exact δ(ε) of the Gaussian mechanism with sensitivity/noise ratio μ (Balle & Wang, Thm. 8).

  δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ), evaluated in log space so that large ε does
  not overflow.
  """
  mu = _checks.check_positive("mu", mu)
  eps = _checks.check_nonnegative("epsilon", epsilon)
  first = special.ndtr(mu / 2.0 - eps / mu)
  second = math.exp(eps + special.log_ndtr(-mu / 2.0 - eps / mu))
  return max(float(first - second), 0.0)


def epsilon_from_rho(rho: float, delta: float) -> float:
  """Exact ε at δ of a ρ-zCDP *Gaussian* release (μ = √(2ρ)); the figure paper 004 reports.

  Solves gaussian_delta(√(2ρ), ε) = δ for ε by Brent's method; returns 0 when the
  mechanism is already (0, δ)-DP.
  """
  rho = _check_rho("rho", rho)
  delta = _checks.check_delta(delta)
  mu = math.sqrt(2.0 * rho)
  if gaussian_delta(mu, 0.0) <= delta:
    return 0.0
  hi = max(1.0, mu * mu)  # δ(μ²) is tiny: ε ≤ μ² = 2ρ unless δ is astronomically small.
  if hi > _MAX_BRACKET:
    raise ValueError(
        f"ε for rho={rho!r}, delta={delta!r} is astronomically large (of the order of 2ρ = "
        f"{hi:.3g}); increase the noise multiplier (smaller ρ).")
  # δ(ε) decreases in ε: grow the bracket [0, hi] until δ(hi) <= δ, refusing any hi beyond
  # _MAX_EPSILON before e^ε is evaluated beyond float64's range.
  _, hi = root_finding.expand_up(
      lambda e: gaussian_delta(mu, e) > delta, 0.0, hi, limit=_MAX_EPSILON,
      unreachable=(f"ε for rho={rho!r}, delta={delta!r} exceeds {_MAX_EPSILON}; increase the "
                   "noise multiplier (smaller ρ) or δ."))
  return root_finding.brent(lambda e: gaussian_delta(mu, e) - delta, 0.0, hi,
                            xtol=1e-12, rtol=1e-12)


def epsilon_from_rho_bun_steinke(rho: float, delta: float) -> float:
  """Classical conversion ε = ρ + 2 √(ρ log(1/δ)) (Bun & Steinke 2016, Prop. 1.3)."""
  rho = _check_rho("rho", rho)
  delta = _checks.check_delta(delta)
  return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def _cks_epsilon_at_order(alpha: float, rho: float, log_inv_delta: float) -> float:
  return (alpha * rho
          + (log_inv_delta + (alpha - 1.0) * math.log1p(-1.0 / alpha) - math.log(alpha))
          / (alpha - 1.0))


def epsilon_from_rho_cks(rho: float, delta: float) -> float:
  """Canonne-Kamath-Steinke conversion (2020, Prop. 12 / Cor. 13), minimized over α > 1.

  ε = min_{α>1} αρ + [log(1/δ) + (α−1) log(1−1/α) − log α] / (α−1), floored at 0.
  The objective is convex in α on (1, ∞); it is minimized with a bounded scalar search.
  """
  rho = _check_rho("rho", rho)
  delta = _checks.check_delta(delta)
  log_inv_delta = math.log(1.0 / delta)
  # The unconstrained optimum is near α* = 1 + √(log(1/δ)/ρ); search well around it.
  alpha_star = 1.0 + math.sqrt(log_inv_delta / rho)
  lo, hi = 1.0 + 1e-9, 10.0 * alpha_star + 10.0
  res = optimize.minimize_scalar(
      lambda a: _cks_epsilon_at_order(a, rho, log_inv_delta), bounds=(lo, hi),
      method="bounded", options={"xatol": 1e-10})
  return max(float(res.fun), 0.0)


def epsilon_from_rho_by_conversion(rho: float, delta: float, conversion: str) -> float:
  """ε at δ from ρ with the named conversion (one of `CONVERSIONS`)."""
  if conversion == EXACT_GAUSSIAN:
    return epsilon_from_rho(rho, delta)
  if conversion == CKS:
    return epsilon_from_rho_cks(rho, delta)
  if conversion == BUN_STEINKE:
    return epsilon_from_rho_bun_steinke(rho, delta)
  raise ValueError(
      f"`conversion` must be one of {CONVERSIONS}; got {conversion!r}.")


def gaussian_dp_event(sensitivity: float, noise_multiplier: float) -> dp_accounting.DpEvent:
  """The DpEvent of the whole matrix-mechanism release: one Gaussian with σ / sens.

  A matrix mechanism with sensitivity sens and noise multiplier σ is, for privacy, a single
  Gaussian mechanism with unit sensitivity and noise multiplier σ / sens (paper 004, Eq. 1
  and Eq. 6); dp_accounting's accountants then apply unchanged.
  """
  sens = _checks.check_positive("sensitivity", sensitivity)
  sigma = _check_noise_multiplier(noise_multiplier)
  return dp_accounting.GaussianDpEvent(noise_multiplier=sigma / sens)


def pld_epsilon_from_rho(
    rho: float, delta: float, value_discretization_interval: float = 1e-4) -> float:
  """ε at δ of the ρ-zCDP Gaussian by dp_accounting's PLD accountant (paper 004, App. C 3a).

  A pessimistic (upper-bound) estimate that converges to `epsilon_from_rho` as the
  discretization interval shrinks; used to cross-check the closed form.
  """
  rho = _check_rho("rho", rho)
  delta = _checks.check_delta(delta)
  interval = _checks.check_positive(
      "value_discretization_interval", value_discretization_interval)
  accountant = pld_privacy_accountant.PLDAccountant(
      value_discretization_interval=interval)
  accountant.compose(dp_accounting.GaussianDpEvent(
      noise_multiplier=1.0 / math.sqrt(2.0 * rho)))
  return float(accountant.get_epsilon(delta))


def rho_for_epsilon(target_epsilon: float, delta: float) -> float:
  """Largest ρ whose exact Gaussian conversion gives ε <= target_epsilon at δ.

  δ(ε) is increasing in μ for fixed ε, so the ρ with gaussian_delta(√(2ρ), ε) = δ is
  found by Brent's method on μ.
  """
  eps = _check_epsilon("target_epsilon", target_epsilon)
  delta = _checks.check_delta(delta)
  _, hi = root_finding.expand_up(
      lambda m: gaussian_delta(m, eps) < delta, 1e-12, 1.0, limit=1e6,
      unreachable=(f"No finite ρ reaches target_epsilon={target_epsilon!r} at "
                   f"delta={delta!r}."))
  mu = root_finding.brent(lambda m: gaussian_delta(m, eps) - delta, 1e-12, hi,
                          xtol=1e-14, rtol=1e-13)
  return float(mu * mu / 2.0)


def noise_multiplier_for_rho(sensitivity: float, target_rho: float) -> float:
  """Noise multiplier σ giving exactly ρ-zCDP: σ = sens / √(2ρ)."""
  sens = _checks.check_positive("sensitivity", sensitivity)
  rho = _check_rho("target_rho", target_rho)
  return sens / math.sqrt(2.0 * rho)


def noise_multiplier_for_epsilon(
    sensitivity: float, target_epsilon: float, delta: float,
    conversion: str = EXACT_GAUSSIAN) -> float:
  """Smallest noise multiplier σ with ε(σ) <= target_epsilon at δ (calibration).

  With the exact conversion this inverts δ(ε) in closed form through `rho_for_epsilon`;
  for the classical conversions ρ is found by Brent's method on the (monotone) ε(ρ).

  Args:
    sensitivity: sens_Π(C) for unit clip norm (paper 004, Eq. 6).
    target_epsilon: ε to reach.
    delta: δ of the guarantee.
    conversion: one of `CONVERSIONS`.

  Returns:
    σ = sens / √(2ρ*) where ρ* is the largest ρ meeting the target.
  """
  sens = _checks.check_positive("sensitivity", sensitivity)
  eps = _check_epsilon("target_epsilon", target_epsilon)
  delta = _checks.check_delta(delta)
  if conversion == EXACT_GAUSSIAN:
    rho = rho_for_epsilon(eps, delta)
  elif conversion in (CKS, BUN_STEINKE):
    f = lambda r: epsilon_from_rho_by_conversion(r, delta, conversion) - eps
    _, hi = root_finding.expand_up(lambda r: f(r) < 0, 1e-14, 1.0)
    rho = root_finding.brent(f, 1e-14, hi, xtol=1e-15, rtol=1e-13)
  else:
    raise ValueError(
        f"`conversion` must be one of {CONVERSIONS}; got {conversion!r}.")
  return noise_multiplier_for_rho(sens, rho)


@dataclasses.dataclass(frozen=True)
class ZcdpGuarantee:
  """DP guarantee of one matrix-mechanism training run (paper 004, Table 4 columns).

  Attributes:
    sensitivity: sens_Π(C) used (unit clip norm).
    noise_multiplier: σ (noise std / clip norm).
    rho: ρ of ρ-zCDP, sens² / (2σ²).
    delta: δ of the (ε, δ) statement.
    epsilon: exact Gaussian ε at δ (the figure paper 004 reports; conversion
      "exact_gaussian").
    epsilon_cks: ε by the Canonne-Kamath-Steinke conversion (conversion "cks").
    epsilon_bun_steinke: ε = ρ + 2√(ρ log 1/δ) (conversion "bun_steinke").
    epsilon_pld: ε from dp_accounting's PLD accountant, or None when not computed.
    pld_value_discretization_interval: PLD grid used, or None.
  """
  sensitivity: float
  noise_multiplier: float
  rho: float
  delta: float
  epsilon: float
  epsilon_cks: float
  epsilon_bun_steinke: float
  epsilon_pld: float | None = None
  pld_value_discretization_interval: float | None = None

  @property
  def dp_event(self) -> dp_accounting.DpEvent:
    """The release as a dp_accounting event (one Gaussian with σ / sens)."""
    return gaussian_dp_event(self.sensitivity, self.noise_multiplier)

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["conversion"] = EXACT_GAUSSIAN
    d["dp_event"] = self.dp_event.to_named_tuple()._asdict()
    return d


def matrix_mechanism_guarantee(
    sensitivity: float, noise_multiplier: float, delta: float,
    with_pld: bool = False,
    pld_value_discretization_interval: float = 1e-4) -> ZcdpGuarantee:
  """ρ and (ε, δ) of a matrix mechanism from its sensitivity and noise multiplier.

  Args:
    sensitivity: sens_Π(C) for unit clip norm, e.g. Thm. 3.1 of paper 004 for a BLT with
      the realized min-sep b and max participations k.
    noise_multiplier: σ.
    delta: δ (paper 004 uses 1e-10).
    with_pld: also run dp_accounting's PLD accountant (slower, a cross-check).
    pld_value_discretization_interval: PLD grid when `with_pld`.

  Returns:
    A `ZcdpGuarantee`.
  """
  rho = rho_from_sensitivity(sensitivity, noise_multiplier)
  delta = _checks.check_delta(delta)
  eps_pld = None
  interval = None
  if with_pld:
    interval = _checks.check_positive(
        "pld_value_discretization_interval", pld_value_discretization_interval)
    eps_pld = pld_epsilon_from_rho(rho, delta, interval)
  return ZcdpGuarantee(
      sensitivity=float(sensitivity),
      noise_multiplier=float(noise_multiplier),
      rho=rho,
      delta=delta,
      epsilon=epsilon_from_rho(rho, delta),
      epsilon_cks=epsilon_from_rho_cks(rho, delta),
      epsilon_bun_steinke=epsilon_from_rho_bun_steinke(rho, delta),
      epsilon_pld=eps_pld,
      pld_value_discretization_interval=interval,
  )
