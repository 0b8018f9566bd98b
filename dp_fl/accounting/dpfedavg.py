"""Privacy of DP-FedAvg / DP-FedSGD with Poisson user sampling (paper 001, Sec. 2).

Each round every one of the K users is selected independently with probability
q = C̃ / K (C̃ = expected users per round), the bounded-sensitivity estimator
(f̃_f or f̃_c, Lemma 1) is computed and Gaussian noise N(0, σ²) with σ = z · 𝕊 is added.
By Thm. 1 of paper 001 the T-round run is the T-fold composition of the Poisson-sampled
Gaussian mechanism with noise multiplier z, i.e. the dp_accounting event

    SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), T).

Three ways to turn that event into ε at δ (all are upper bounds on the true ε):

  * "moments_accountant": the original bound of Abadi et al. (2016) that paper 001 used
    for Tables 1-2. Log moments α(λ) = log E_{o~μ}[(μ(o)/μ₀(o))^λ] for the integer
    orders λ = 1..32 (μ₀ = N(0, z²), μ = (1−q)μ₀ + q N(1, z²)), composed linearly over T
    rounds and converted by ε = min_λ (T α(λ) + log(1/δ)) / λ (Abadi et al., Thm. 2).
  * "rdp": dp_accounting's RDP accountant (fractional and integer orders, the improved
    RDP -> (ε, δ) conversion of Canonne et al. / Asoodeh et al.).
  * "pld": dp_accounting's PLD accountant (pessimistic discretization, connect-the-dots).

Ordering and why: see dp_fl/accounting/README.md. In short, moments_accountant >= rdp >= pld.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

import dp_accounting
from dp_accounting.pld import privacy_loss_distribution
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
from scipy import special

from dp_fl import _checks
from dp_fl import root_finding

MOMENTS_ACCOUNTANT = "moments_accountant"
RDP = "rdp"
PLD = "pld"
METHODS = (MOMENTS_ACCOUNTANT, RDP, PLD)

# Orders λ = 1..32 of the original moments accountant (Abadi et al. 2016b implementation).
MOMENTS_ACCOUNTANT_MAX_ORDER = 32

# PLD grid: dp_accounting's default, and how finely it must resolve the per-round privacy
# loss, whose typical magnitude scales with q (see `pld_discretization_interval_for`).
_PLD_DEFAULT_INTERVAL = 1e-4
_PLD_INTERVAL_PER_Q = 1.0 / 3.0
# Ratio between the reported grid and the coarser cross-check grid.
_PLD_CHECK_FACTOR = 3.0


def _check_q(q: Any) -> float:
  x = _checks.check_finite("sampling_probability", q)
  if not 0 < x <= 1:
    raise ValueError(
        f"`sampling_probability` q must be in (0, 1]; got {q!r}. It is the expected users "
        "per round divided by the population (q = C̃ / K).")
  return x


def _check_noise_multiplier(z: Any) -> float:
  x = _checks.check_finite("noise_multiplier", z)
  if x <= 0:
    raise ValueError(
        f"`noise_multiplier` z must be > 0 (noise std σ divided by the estimator "
        f"sensitivity 𝕊); got {z!r}.")
  return x


def sensitivity_fixed_denominator(
    clip_norm: float, sampling_probability: float, total_weight: float) -> float:
  """Sensitivity of f̃_f(C) = Σ_{k∈C} w_k Δ_k / (qW): 𝕊 <= S / (qW) (paper 001, Lemma 1).

  Args:
    clip_norm: S, the bound on ||w_k Δ_k||₂.
    sampling_probability: q.
    total_weight: W = Σ_k w_k over all users (W = K for equal unit weights).
  """
  s = _checks.check_positive("clip_norm", clip_norm)
  q = _check_q(sampling_probability)
  w = _checks.check_positive("total_weight", total_weight)
  return s / (q * w)


def sensitivity_clipped_denominator(
    clip_norm: float, sampling_probability: float, min_weight: float) -> float:
  """Sensitivity of f̃_c(C) = Σ w_k Δ_k / max(qW_min, Σ w_k): 𝕊 <= 2S / (qW_min) (Lemma 1)."""
  s = _checks.check_positive("clip_norm", clip_norm)
  q = _check_q(sampling_probability)
  w = _checks.check_positive("min_weight", min_weight)
  return 2.0 * s / (q * w)


def noise_multiplier_from_noise_std(noise_std: float, sensitivity: float) -> float:
  """z = σ / 𝕊, the noise scale the accountant sees (paper 001, Thm. 1)."""
  sigma = _checks.check_positive("noise_std", noise_std)
  sens = _checks.check_positive("sensitivity", sensitivity)
  return sigma / sens


def dp_event(sampling_probability: float, noise_multiplier: float,
             rounds: int) -> dp_accounting.DpEvent:
  """T rounds of the Poisson-sampled Gaussian mechanism as a dp_accounting event (Thm. 1)."""
  q = _check_q(sampling_probability)
  z = _check_noise_multiplier(noise_multiplier)
  t = _checks.check_positive_int("rounds", rounds)
  return dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), t)


def log_moment(sampling_probability: float, noise_multiplier: float, order: int) -> float:
  """α(λ) of one round of the sampled Gaussian (Abadi et al. 2016, Sec. 3.1), exactly.

  α(λ) = log E_{o~μ₀}[(μ(o)/μ₀(o))^{λ+1}]
       = log Σ_{i=0}^{λ+1} C(λ+1, i) (1−q)^{λ+1−i} q^i exp((i² − i) / (2z²)),
  the binomial expansion of the moment used by the original implementation, written as a
  sum of positive terms and evaluated with logsumexp (no cancellation).
  """
  q = _check_q(sampling_probability)
  z = _check_noise_multiplier(noise_multiplier)
  lam = _checks.check_positive_int("order", order)
  a = lam + 1
  i = np.arange(a + 1, dtype=np.float64)
  log_binom = special.gammaln(a + 1) - special.gammaln(i + 1) - special.gammaln(a - i + 1)
  if q == 1.0:
    return float(a * (a - 1) / (2.0 * z * z))
  terms = (log_binom + (a - i) * math.log1p(-q) + i * math.log(q)
           + (i * i - i) / (2.0 * z * z))
  return float(special.logsumexp(terms))


def moments_accountant_epsilon(
    sampling_probability: float, noise_multiplier: float, rounds: int, delta: float,
    max_order: int = MOMENTS_ACCOUNTANT_MAX_ORDER) -> tuple[float, int]:
  """ε of the original moments accountant and the order λ attaining it.

  ε = min_{λ=1..max_order} (T α(λ) + log(1/δ)) / λ (Abadi et al. 2016, Thm. 2 (2)).
  Reproduces paper 001, Tables 1 and 2.
  """
  q = _check_q(sampling_probability)
  z = _check_noise_multiplier(noise_multiplier)
  t = _checks.check_positive_int("rounds", rounds)
  delta = _checks.check_delta(delta)
  max_order = _checks.check_positive_int("max_order", max_order)
  best_eps, best_order = math.inf, 0
  for lam in range(1, max_order + 1):
    eps = (t * log_moment(q, z, lam) + math.log(1.0 / delta)) / lam
    if eps < best_eps:
      best_eps, best_order = eps, lam
  return best_eps, best_order


def pld_discretization_interval_for(sampling_probability: float) -> float:
  """PLD value-discretization interval resolving a Poisson-sampled Gaussian with rate q.

  The privacy loss of one round is of order q for most outputs, so a grid coarser than q
  (dp_accounting's default 1e-4 once q <= 1e-4) rounds almost every loss value to a whole
  grid step and the pessimistic composed ε is far from converged (e.g. q = 1e-5, z = 1,
  T = 1e4: 0.0095 at 1e-4 against 0.00435 converged). We use min(1e-4, q/3): within a few
  percent of convergence in our measurements, while grids much finer than q/3 make the
  FFT composition of 1e6 rounds numerically unreliable (memory and float error).
  """
  q = _check_q(sampling_probability)
  return min(_PLD_DEFAULT_INTERVAL, q * _PLD_INTERVAL_PER_Q)


@functools.lru_cache(maxsize=16)
def _one_round_pld(sampling_probability: float, noise_multiplier: float,
                   interval: float) -> privacy_loss_distribution.PrivacyLossDistribution:
  """The PLD of one round (pessimistic, on the grid `interval`), built once per (q, z, grid):
  a run's accounting asks for every round count T, and building it is most of the cost."""
  return privacy_loss_distribution.from_gaussian_mechanism(
      standard_deviation=noise_multiplier, value_discretization_interval=interval,
      sampling_prob=sampling_probability)


def pld_epsilon(sampling_probability: float, noise_multiplier: float, rounds: int,
                delta: float, value_discretization_interval: float) -> float:
  """ε at δ of `dp_event(q, z, T)` by PLD, as dp_accounting's `PLDAccountant` composes it
  (the identity composed with the one-round PLD self-composed T times), the one-round PLD
  reused across T."""
  interval = _checks.check_positive(
      "value_discretization_interval", value_discretization_interval)
  event = dp_event(sampling_probability, noise_multiplier, rounds)
  pld = privacy_loss_distribution.identity(value_discretization_interval=interval).compose(
      _one_round_pld(event.event.sampling_probability, event.event.event.noise_multiplier,
                     interval).self_compose(event.count))
  return float(pld.get_epsilon_for_delta(_checks.check_delta(delta)))


def event_rdp_epsilon(event: dp_accounting.DpEvent, delta: float) -> tuple[float, float]:
  """ε at δ and the optimal order of any dp_accounting event by its RDP accountant (default
  orders)."""
  accountant = rdp_privacy_accountant.RdpAccountant()
  accountant.compose(event)
  eps, order = accountant.get_epsilon_and_optimal_order(_checks.check_delta(delta))
  return float(eps), float(order)


@functools.lru_cache(maxsize=64)
def _one_round_rdp(sampling_probability: float, noise_multiplier: float) -> np.ndarray:
  """RDP of one round at dp_accounting's default orders, computed once per (q, z)."""
  rdp = rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(  # pylint: disable=protected-access
      q=sampling_probability, noise_multiplier=noise_multiplier,
      orders=np.array(rdp_privacy_accountant.DEFAULT_RDP_ORDERS))
  rdp = np.asarray(rdp, dtype=np.float64)
  rdp.flags.writeable = False
  return rdp


def rdp_epsilon(sampling_probability: float, noise_multiplier: float, rounds: int,
                delta: float) -> tuple[float, float]:
  """ε at δ and the optimal order by dp_accounting's RDP accountant (default orders): T times
  the one-round RDP, as `RdpAccountant` composes `dp_event(q, z, T)`, the one-round RDP
  reused across T."""
  event = dp_event(sampling_probability, noise_multiplier, rounds)
  orders = np.array(rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
  rdp = np.zeros_like(orders, dtype=np.float64)
  rdp += event.count * _one_round_rdp(event.event.sampling_probability,
                                      event.event.event.noise_multiplier)
  eps, order = rdp_privacy_accountant.compute_epsilon(orders, rdp, _checks.check_delta(delta))
  return float(eps), float(order)


@dataclasses.dataclass(frozen=True)
class DpFedAvgGuarantee:
  """(ε, δ) of T rounds of DP-FedAvg with Poisson user sampling (paper 001, Thm. 1).

  Attributes:
    method: "moments_accountant", "rdp" or "pld".
    population: K.
    expected_clients_per_round: C̃.
    sampling_probability: q = C̃ / K.
    noise_multiplier: z = σ / 𝕊.
    rounds: T.
    delta: δ.
    epsilon: ε at δ by `method`.
    order: moment order λ (moments accountant) or RDP order α attaining ε; None for PLD.
    pld_value_discretization_interval: grid of the reported PLD ε; None otherwise.
    pld_check_epsilon: PLD ε on a 3x coarser grid. Both are pessimistic upper bounds; the
      finer one must not exceed it, else float error in the FFT composition is suspected
      and the smaller (coarser-grid) bound is reported as `epsilon`.
    pld_consistent: whether the finer grid gave the smaller ε, as it should.
  """
  method: str
  population: float
  expected_clients_per_round: float
  sampling_probability: float
  noise_multiplier: float
  rounds: int
  delta: float
  epsilon: float
  order: float | None = None
  pld_value_discretization_interval: float | None = None
  pld_check_epsilon: float | None = None
  pld_consistent: bool | None = None

  @property
  def dp_event(self) -> dp_accounting.DpEvent:
    return dp_event(self.sampling_probability, self.noise_multiplier, self.rounds)

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["dp_event"] = self.dp_event.to_named_tuple()._asdict()
    d["dp_event"]["event"] = self.dp_event.event.to_named_tuple()._asdict()
    d["dp_event"]["event"]["event"] = (
        self.dp_event.event.event.to_named_tuple()._asdict())
    return d


def dpfedavg_epsilon(
    population: float, expected_clients_per_round: float, noise_multiplier: float,
    rounds: int, delta: float, method: str = PLD,
    pld_value_discretization_interval: float | None = None) -> DpFedAvgGuarantee:
  """ε for (K, C̃, z, T, δ) of DP-FedAvg with Poisson user sampling (paper 001, Sec. 2).

  Args:
    population: K, the number of users (with equal weights, W = K).
    expected_clients_per_round: C̃ = qK, so q = C̃ / K must lie in (0, 1].
    noise_multiplier: z = σ / 𝕊 (use `noise_multiplier_from_noise_std` with the Lemma 1
      sensitivity of the estimator).
    rounds: T.
    delta: δ.
    method: "moments_accountant" (reproduces paper 001 Tables 1-2), "rdp" or "pld".
    pld_value_discretization_interval: PLD grid; default `pld_discretization_interval_for(q)`.

  Returns:
    A `DpFedAvgGuarantee`.
  """
  k = _checks.check_positive("population", population)
  c = _checks.check_positive("expected_clients_per_round", expected_clients_per_round)
  if c > k:
    raise ValueError(
        f"`expected_clients_per_round` ({expected_clients_per_round!r}) must not exceed "
        f"`population` ({population!r}); q = C̃/K must be in (0, 1].")
  q = _check_q(c / k)
  z = _check_noise_multiplier(noise_multiplier)
  t = _checks.check_positive_int("rounds", rounds)
  delta = _checks.check_delta(delta)
  common = dict(population=k, expected_clients_per_round=c, sampling_probability=q,
                noise_multiplier=z, rounds=t, delta=delta)
  if method == MOMENTS_ACCOUNTANT:
    eps, order = moments_accountant_epsilon(q, z, t, delta)
    return DpFedAvgGuarantee(method=method, epsilon=eps, order=float(order), **common)
  if method == RDP:
    eps, order = rdp_epsilon(q, z, t, delta)
    return DpFedAvgGuarantee(method=method, epsilon=eps, order=order, **common)
  if method == PLD:
    pld = checked_pld_epsilon(q, z, t, delta, pld_value_discretization_interval)
    return DpFedAvgGuarantee(
        method=method, epsilon=pld.epsilon, pld_value_discretization_interval=pld.interval,
        pld_check_epsilon=pld.check_epsilon, pld_consistent=pld.consistent, **common)
  raise ValueError(f"`method` must be one of {METHODS}; got {method!r}.")


@dataclasses.dataclass(frozen=True)
class CheckedPld:
  """The PLD ε of a Poisson-sampled Gaussian on two grids (see `checked_pld_epsilon`)."""
  epsilon: float
  interval: float
  check_epsilon: float
  consistent: bool


def checked_pld_epsilon(sampling_probability: float, noise_multiplier: float, rounds: int,
                        delta: float, interval: float | None = None) -> CheckedPld:
  """ε at δ of T rounds of the Poisson-sampled Gaussian by PLD, on the grid `interval`
  (default `pld_discretization_interval_for(q)`) and on a 3x coarser one.

  Both are pessimistic upper bounds; the finer one must not exceed the coarser, else float
  error in the FFT composition is suspected and the smaller (coarser-grid) bound is the ε.
  """
  if interval is None:
    interval = pld_discretization_interval_for(sampling_probability)
  else:
    interval = _checks.check_positive("pld_value_discretization_interval", interval)
  fine = pld_epsilon(sampling_probability, noise_multiplier, rounds, delta, interval)
  coarse = pld_epsilon(sampling_probability, noise_multiplier, rounds, delta,
                       interval * _PLD_CHECK_FACTOR)
  return CheckedPld(epsilon=min(fine, coarse), interval=interval, check_epsilon=coarse,
                    consistent=fine <= coarse * (1.0 + 1e-9) + 1e-12)


def smallest_noise_multiplier(epsilon: Callable[[float], float], target_epsilon: float,
                              relative_tolerance: float = 1e-12,
                              upper: float | None = None) -> float:
  """The smallest z (to `relative_tolerance`) with `epsilon(z)` <= `target_epsilon`, for a
  non-increasing ε(z): brackets [lo, hi] with ε(hi) <= target (doubling hi; or from `upper`,
  a z known to meet the target, halving lo), then bisects in log z and returns the upper end
  of the final bracket, so the z returned always meets the target (conservative)."""
  target = _checks.check_positive("target_epsilon", target_epsilon)
  tol = _checks.check_positive("relative_tolerance", relative_tolerance)
  short = lambda z: epsilon(z) > target
  if upper is not None:
    hi = _checks.check_positive("upper", upper)
    lo, hi = root_finding.expand_down(lambda z: epsilon(z) <= target, hi / 2.0, hi,
                                      floor=1e-6)
  else:
    lo, hi = root_finding.expand_up(
        short, 1e-3, 1.0, limit=1e6,
        unreachable=(f"`target_epsilon`={target_epsilon!r} needs a noise multiplier above "
                     "1e6; raise the target or lower the rounds / sampling rate."))
  return root_finding.bisect(short, lo, hi, relative_tolerance=tol)


def noise_multiplier_for_epsilon(
    population: float, expected_clients_per_round: float, rounds: int,
    target_epsilon: float, delta: float, method: str = RDP,
    relative_tolerance: float = 1e-12) -> float:
  """The smallest z (to `relative_tolerance`) with ε(z) <= `target_epsilon` for T rounds.

  ε(z) of the Poisson-subsampled Gaussian is non-increasing in z: the search brackets
  [lo, hi] with ε(hi) <= target (doubling hi), then bisects in log z and returns the upper end
  of the final bracket, so the z returned always meets the target (conservative).

  Args:
    population, expected_clients_per_round, rounds, delta, method: as in `dpfedavg_epsilon`.
    target_epsilon: ε to reach (> 0).
    relative_tolerance: stop when hi / lo - 1 is below it.

  Returns:
    z with `dpfedavg_epsilon(..., z, ...).epsilon <= target_epsilon`.
  """
  def epsilon(z):
    return dpfedavg_epsilon(population, expected_clients_per_round, z, rounds, delta,
                            method=method).epsilon

  return smallest_noise_multiplier(epsilon, target_epsilon, relative_tolerance)
