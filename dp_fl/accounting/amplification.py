"""Amplified privacy of DP-FTRL: balls-in-bins and b-min-sep Monte Carlo, and cyclic Poisson.

Three sampling schemes whose randomness, kept secret, makes a matrix mechanism more private
than its sensitivity under the worst-case participation says:

* **Balls-in-bins** (paper 003, Def. 3.1): every client is put into one of b bins once, round
  t uses bin t mod b. The (ε, δ) of any non-negative lower-triangular C comes from the
  dominating pair of Lemma 3.2 (`balls_in_bins.dominating_pair`) by Monte Carlo: σ (or ε) is
  calibrated on one sample (Alg. 2) and *released* only after Estimate-Verify-Release on an
  independent sample (Alg. 1, Thm. 2.1), whose failure probability is inside the δ released.
  `release_noise_multiplier` (σ for a target ε) and `release_epsilon` (ε for a given σ).
* **b-min-sep** (Dong & Ganesh 2026, arXiv 2602.09338): after taking part a client waits b − 1
  rounds, then is sampled with probability p in every round it is eligible for; the same
  release functions on its dominating pair (`b_min_sep`: both directions of adjacency, exact
  for a C whose rounds b apart share no row, a bound otherwise), `b_min_sep_pair`.
* **Cyclic Poisson** (Choquette-Choo et al. 2023, "(Amplified) Banded Matrix Factorization";
  jax_privacy's `amplified_bandmf_event`): clients split into b groups, round t samples each
  member of group t mod b independently with probability q. For a C with at most b bands,
  the columns of one client's rounds have disjoint supports, so the run is ⌈n/b⌉ compositions
  of the Poisson-subsampled Gaussian with noise multiplier σ / (max column norm of C) —
  `cyclic_poisson_epsilon`, `cyclic_poisson_noise_multiplier` (dp_accounting's PLD and RDP).
  b = 1 is DP-SGD with Poisson sampling.

Both guarantees hold only if the sampling really is as analysed and secret: a simulated draw
whose seed is public, or a production system that samples differently, voids them (the
training reports say so).
"""

from __future__ import annotations

import dataclasses
import decimal
import math
import warnings
from typing import Any, Optional

import numpy as np

from dp_fl import _checks
from dp_fl import root_finding
from dp_fl.accounting import b_min_sep
from dp_fl.accounting import balls_in_bins
from dp_fl.accounting import dpfedavg
from dp_fl.accounting import monte_carlo
from dp_fl.accounting import verification
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.mechanisms import catalog

BALLS_IN_BINS = "balls_in_bins"
CYCLIC_POISSON = "cyclic_poisson"
B_MIN_SEP = "b_min_sep"

MonteCarloPair = balls_in_bins.BallsInBinsPair | b_min_sep.BMinSepPair


def _engine(pair: MonteCarloPair) -> Any:
  """The Monte Carlo accounting module of a dominating pair (same functions in both)."""
  if isinstance(pair, b_min_sep.BMinSepPair):
    return b_min_sep
  if isinstance(pair, balls_in_bins.BallsInBinsPair):
    return balls_in_bins
  raise ValueError(f"`pair` must be a balls-in-bins or b-min-sep dominating pair; got "
                   f"{type(pair).__name__}.")

DEFAULT_CALIBRATION_MARGIN = 0.2
"""σ (or ε) is calibrated to δ_verify / (1 + margin) so the fresh verification sample passes;
the margin grows to `STANDARD_ERRORS` relative standard errors of the calibration's δ̂ when
those are larger (heavy-tailed privacy losses at the minimum sample size)."""

STANDARD_ERRORS = 4.0
_MARGIN_STEPS = 4

VERIFICATION_STANDARD_ERRORS = 2.5
"""The margin also covers this many relative standard errors of the verification's own δ̂:
at most √((1 + margin) / (m δ_verify)) at δ̂ = δ_verify / (1 + margin), since each summand is
in [0, 1] (E f² <= E f). At the minimum sample size that error is ≈ 18 % (m δ_verify ≈ 37), so a
20 % margin alone failed about one verification in ten; with it, about one in 160."""


def verification_margin(margin: float, num_samples: int, delta_verify: float) -> float:
  """The smallest margin >= `margin` covering `VERIFICATION_STANDARD_ERRORS` relative standard
  errors of a verification of `num_samples` at δ_verify (a fixed point, from above)."""
  out = margin
  for _ in range(50):
    need = VERIFICATION_STANDARD_ERRORS * math.sqrt((1.0 + out) / (num_samples * delta_verify))
    if need <= out * (1.0 + 1e-9):
      return out
    out = need
  return out

TRAINING_VERIFY_RATIO = 0.5
"""δ_verify / δ of training runs: Thm 2.1 then needs about 7× fewer samples than at 0.8
(7.5e6 instead of 5.4e7 at δ = 1e-5) for a slightly larger σ (calibrated to δ/2)."""


def round_up(x: float, digits: int = 6) -> float:
  """The smallest float printed with `digits` significant digits that is >= x."""
  q = decimal.Decimal(repr(float(x)))
  exponent = q.adjusted() - digits + 1
  up = q.quantize(decimal.Decimal(1).scaleb(exponent), rounding=decimal.ROUND_CEILING)
  out = float(up)
  return out if out >= x else math.nextafter(out, math.inf)


def accounting_seeds(seed: Optional[int]) -> tuple[int, int]:
  """(calibration seed, verification seed) of a Monte Carlo release.

  Without `seed` both are fresh, independent draws from OS entropy (128 bits each). With
  `seed` (reproducible research runs) the calibration seed is `seed` and the verification
  seed is derived from it through an independent SeedSequence child. They always differ.
  """
  if seed is None:
    cal = int(np.random.SeedSequence().entropy)
    ver = int(np.random.SeedSequence().entropy)
    while ver == cal:  # Probability 2^-128; kept so the invariant is explicit.
      ver = int(np.random.SeedSequence().entropy)
    return cal, ver
  words = np.random.SeedSequence(seed, spawn_key=(1,)).generate_state(4, np.uint32)
  ver = int.from_bytes(words.astype("<u4").tobytes(), "little")
  if ver == seed:
    raise AssertionError("unreachable: derived verification seed equals the seed")
  return seed, ver


# ---------------------------------------------------------------------------------------
# Balls-in-bins: Monte Carlo release (paper 003, Alg. 1-2).


@dataclasses.dataclass(frozen=True)
class MonteCarloRelease:
  """A balls-in-bins (ε, δ) calibrated on one Monte Carlo sample and verified on another.

  `verified` False means Alg. 1 returned ⊥: nothing amplified may be claimed (the unamplified
  guarantee still holds). `solved_for` says which of σ and ε was given and which computed.
  """
  num_bins: int
  num_epochs: int
  rounds: int
  noise_multiplier: float
  epsilon: float
  delta: float
  delta_verify: float
  verified: bool
  solved_for: str  # "noise_multiplier", "epsilon", or "verified" (both given: `release_verified`)
  num_samples: int
  required_num_samples: int
  calibration_seed: int
  verification_seed: int
  calibration_margin: float
  calibration_value: float  # σ* or ε* on the calibration sample, before rounding up
  calibration_delta_hat: float
  calibration_delta_standard_error: float
  verification_delta_hat: float
  verification_delta_standard_error: float
  verification_tail_samples: int
  failure_probability: float
  sensitivity_without_amplification: float
  epsilon_without_amplification: float  # ε at δ of the same σ with fixed bins (exact)
  noise_multiplier_without_amplification: float  # σ the same (ε, δ) needs with fixed bins
  scheme: str = BALLS_IN_BINS
  schedule: Optional[dict] = None  # b-min-sep: its sampling (num_bins, num_epochs are 0)

  def to_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    # 128-bit seeds as strings: JSON readers that parse numbers as doubles keep them exact.
    out["calibration_seed"] = str(self.calibration_seed)
    out["verification_seed"] = str(self.verification_seed)
    return out

  @classmethod
  def from_dict(cls, data: dict[str, Any]) -> "MonteCarloRelease":
    fields = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in data.items() if k in fields}
    missing = fields - set(values) - {"schedule"}
    if missing:
      raise ValueError(f"a balls-in-bins release record lacks {sorted(missing)}")
    values["calibration_seed"] = int(values["calibration_seed"])
    values["verification_seed"] = int(values["verification_seed"])
    return cls(**values)

  def guarantee(self) -> str:
    """The formal statement, or why there is none."""
    if self.scheme == B_MIN_SEP:
      s = self.schedule or {}
      batching = (f"b-min-sep sampling (b = {s.get('min_sep')}, p = "
                  f"{s.get('sampling_probability', math.nan):.4g}, "
                  f"{'warm start' if s.get('warm_start') else 'pure'}, {self.rounds} rounds)")
      pair_ref = ("the b-min-sep pair (Dong & Ganesh 2026), both directions"
                  + ("" if s.get("exact_likelihood_ratio", True) else
                     "; C's rounds b apart share rows, so its likelihood ratio is bounded "
                     "(cross terms), a conservative δ"))
    else:
      batching = (f"balls-in-bins batching ({self.num_bins} bins, {self.rounds} rounds = "
                  f"{self.num_epochs} epoch{'s' if self.num_epochs > 1 else ''})")
      pair_ref = "paper 003, Lemma 3.2"
    if not self.verified:
      return (f"No amplified guarantee: Estimate-Verify-Release (paper 003, Alg. 1) returned ⊥ "
              f"— on the verification sample δ̂ = {self.verification_delta_hat:.3g} exceeded "
              f"δ_verify = {self.delta_verify:.3g}.")
    return (f"(ε = {self.epsilon:.6g}, δ = {self.delta:g})-DP for noise multiplier "
            f"{self.noise_multiplier:.6g} under {batching} (dominating pair: {pair_ref}), "
            f"released by Estimate-Verify-Release (paper 003, Alg. 1 / Thm 2.1): a fresh sample of {self.num_samples} "
            f"privacy losses gave δ̂ = {self.verification_delta_hat:.3g} ± "
            f"{self.verification_delta_standard_error:.2g} <= δ_verify = "
            f"{self.delta_verify:.3g}; had the true δ(ε) exceeded {self.delta:g} this check "
            f"would have passed with probability <= {self.failure_probability:.3g} (Chernoff), "
            "which the δ released accounts for.")


def _check_release_args(delta: float, delta_verify: Optional[float], calibration_margin: float,
                        num_samples: Optional[int], verify_ratio: float
                        ) -> tuple[float, float, int, int]:
  d = _checks.check_open_unit("delta", delta)
  dv = verify_ratio * d if delta_verify is None else delta_verify
  dv, d = verification.check_verify_pair(dv, d)
  if not (calibration_margin >= 0.0 and math.isfinite(calibration_margin)):
    raise ValueError(f"`calibration_margin` must be a finite number >= 0; got "
                     f"{calibration_margin!r} (e.g. {DEFAULT_CALIBRATION_MARGIN}).")
  required = verification.required_num_samples(dv, d)
  m = required if num_samples is None else _checks.check_positive_int(
      "num_samples", num_samples)
  if m < required:
    raise ValueError(
        f"`num_samples` = {m} is below the {required} Monte Carlo samples Estimate-Verify-"
        f"Release needs at δ = {d:g} with δ_verify = {dv:g} (paper 003, Thm 2.1); use at "
        f"least {required}, or a smaller δ_verify / δ ratio.")
  return d, dv, m, required


def _verify(pair, sigma, epsilon, delta, delta_verify, num_samples, seed):
  return _engine(pair).estimate_verify_release(
      pair, noise_multiplier=sigma, epsilon=epsilon, delta=delta, delta_verify=delta_verify,
      num_samples=num_samples, seed=seed)


def release_noise_multiplier(pair: MonteCarloPair, *, epsilon: float,
                             delta: float, delta_verify: Optional[float] = None,
                             calibration_margin: float = DEFAULT_CALIBRATION_MARGIN,
                             num_samples: Optional[int] = None, seed: Optional[int] = None,
                             verify_ratio: float = verification.DEFAULT_VERIFY_RATIO
                             ) -> MonteCarloRelease:
  """σ for (ε, δ) under balls-in-bins or b-min-sep sampling, by Estimate-Verify-Release
  (paper 003; the b-min-sep pair's two directions, `b_min_sep`).

  1. Alg. 2 on the calibration sample: σ* with δ̂(σ*) = δ_verify / (1 + margin), the margin
     at least `verification_margin` (the verification's own error) and widened (same
     sample) to `STANDARD_ERRORS` relative standard errors of δ̂(σ*) when those exceed it;
     σ is σ* rounded up to 6 significant digits (the value printed is the value verified).
  2. Alg. 1 on an independent sample of `num_samples` (default and minimum: what Thm 2.1
     needs for δ_verify and δ): released iff δ̂(σ) <= δ_verify.

  Args:
    pair: the dominating pair (Lemma 3.2) of the mechanism's C and the bins.
    epsilon, delta: the target; δ includes the verification's failure probability.
    delta_verify: threshold (default `verify_ratio` · δ).
    calibration_margin: see step 1.
    num_samples: Monte Carlo samples of each of the two samples.
    seed: None draws both seeds from OS entropy; an int makes the release reproducible.
    verify_ratio: δ_verify / δ when `delta_verify` is None.
  """
  eps = _checks.check_positive("epsilon", epsilon)
  d, dv, m, required = _check_release_args(delta, delta_verify, calibration_margin,
                                           num_samples, verify_ratio)
  cal_seed, ver_seed = accounting_seeds(seed)
  margin = verification_margin(calibration_margin, m, dv)
  for _ in range(_MARGIN_STEPS):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", balls_in_bins.InsufficientSamplesWarning)
      cal = _engine(pair).calibrate_noise_multiplier(
          pair, epsilon=eps, delta=dv / (1.0 + margin), num_samples=m, seed=cal_seed)
    wider = _wider_margin(margin, cal.delta_hat, cal.delta_standard_error)
    if wider is None:
      break
    margin = wider
  sigma = round_up(cal.noise_multiplier)
  ver = _verify(pair, sigma, eps, d, dv, m, ver_seed)
  return _release(pair, ver, "noise_multiplier", required, (cal_seed, ver_seed), margin,
                  cal.noise_multiplier, cal.delta_hat, cal.delta_standard_error)


def release_verified(pair: MonteCarloPair, *, noise_multiplier: float,
                     epsilon: float, delta: float, delta_verify: Optional[float] = None,
                     num_samples: Optional[int] = None, seed: Optional[int] = None,
                     verify_ratio: float = verification.DEFAULT_VERIFY_RATIO
                     ) -> MonteCarloRelease:
  """(ε, δ) given in advance, verified at σ by Alg. 1 on a fresh sample (paper 003).

  For a σ calibrated earlier for the target ε (`release_noise_multiplier`, on another
  sample): Estimate-Verify-Release of that very claim, instead of `release_epsilon`'s new
  estimate of ε (which lands on either side of the target by Monte Carlo error, and above
  it by the calibration margin). The claim (ε, δ) is fixed before the verification sample
  is drawn, so Thm 2.1 applies as in `release_noise_multiplier`'s step 2; `verified` False
  is ⊥ (no amplified claim). Arguments as in `release_noise_multiplier`.
  """
  sigma = _checks.check_positive("noise_multiplier", noise_multiplier)
  eps = _checks.check_positive("epsilon", epsilon)
  d, dv, m, required = _check_release_args(delta, delta_verify, DEFAULT_CALIBRATION_MARGIN,
                                           num_samples, verify_ratio)
  seeds = accounting_seeds(seed)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", balls_in_bins.InsufficientSamplesWarning)
    ver = _verify(pair, sigma, eps, d, dv, m, seeds[1])
  # No calibration sample of its own: its calibration fields are the claim and zeros.
  return _release(pair, ver, "verified", required, seeds, 0.0, eps, 0.0, 0.0)


def _release(pair, ver, solved_for, required, seeds, margin, calibration_value,
             calibration_delta_hat, calibration_delta_standard_error) -> MonteCarloRelease:
  """The record of a release whose verification `ver` (Alg. 1) ran."""
  engine = _engine(pair)
  if engine is b_min_sep:
    scheme, bins, epochs = B_MIN_SEP, 0, 0
    schedule = dict(pair.sampling.to_dict(), exact_likelihood_ratio=pair.exact)
  else:
    scheme, schedule, bins, epochs = BALLS_IN_BINS, None, pair.num_bins, pair.num_epochs
  return MonteCarloRelease(
      scheme=scheme, schedule=schedule,
      num_bins=bins, num_epochs=epochs, rounds=pair.num_rounds,
      noise_multiplier=ver.noise_multiplier, epsilon=ver.epsilon, delta=ver.delta,
      delta_verify=ver.delta_verify, verified=ver.verified, solved_for=solved_for,
      num_samples=ver.num_samples, required_num_samples=required,
      calibration_seed=seeds[0], verification_seed=seeds[1],
      calibration_margin=margin, calibration_value=calibration_value,
      calibration_delta_hat=calibration_delta_hat,
      calibration_delta_standard_error=calibration_delta_standard_error,
      verification_delta_hat=ver.delta_hat, verification_delta_standard_error=ver.standard_error,
      verification_tail_samples=ver.num_tail_samples, failure_probability=ver.failure_probability,
      sensitivity_without_amplification=pair.sensitivity,
      epsilon_without_amplification=zcdp.matrix_mechanism_guarantee(
          pair.sensitivity, ver.noise_multiplier, ver.delta).epsilon,
      noise_multiplier_without_amplification=engine.unamplified_noise_multiplier(
          pair, epsilon=ver.epsilon, delta=ver.delta))


def _wider_margin(margin: float, delta_hat: float, standard_error: float) -> Optional[float]:
  """The margin to calibrate again with, or None when `margin` already covers
  `STANDARD_ERRORS` relative standard errors of the calibration's δ̂."""
  if delta_hat <= 0.0:
    return None
  needed = STANDARD_ERRORS * standard_error / delta_hat
  return None if margin >= needed else needed * 1.05


def release_epsilon(pair: MonteCarloPair, *, noise_multiplier: float,
                    delta: float, delta_verify: Optional[float] = None,
                    calibration_margin: float = DEFAULT_CALIBRATION_MARGIN,
                    num_samples: Optional[int] = None, seed: Optional[int] = None,
                    verify_ratio: float = verification.DEFAULT_VERIFY_RATIO
                    ) -> MonteCarloRelease:
  """ε at δ for a given σ under balls-in-bins or b-min-sep sampling, by Estimate-Verify-Release.

  The privacy losses Y of the calibration sample are drawn once at σ; ε* solves
  δ̂(ε*) = δ_verify / (1 + margin) on them (δ̂ is non-increasing in ε), ε is ε* rounded up to
  6 significant digits, and Alg. 1 verifies δ̂(ε) <= δ_verify on an independent sample.
  Arguments as in `release_noise_multiplier`.
  """
  sigma = _checks.check_positive("noise_multiplier", noise_multiplier)
  d, dv, m, required = _check_release_args(delta, delta_verify, calibration_margin,
                                           num_samples, verify_ratio)
  cal_seed, ver_seed = accounting_seeds(seed)
  unamplified = zcdp.matrix_mechanism_guarantee(pair.sensitivity, sigma, d).epsilon
  if _engine(pair) is b_min_sep:
    tails = b_min_sep.epsilon_tails(pair, noise_multiplier=sigma, num_samples=m, seed=cal_seed)
  else:
    losses = balls_in_bins.sample_privacy_loss(pair, noise_multiplier=sigma, num_samples=m,
                                               seed=cal_seed)
    tails = [losses[losses > 0.0]]
    del losses
  margin = verification_margin(calibration_margin, m, dv)
  for _ in range(_MARGIN_STEPS):
    eps_star, cal_hat, cal_se = monte_carlo.epsilon_on_tails(tails, m, dv / (1.0 + margin),
                                                             unamplified)
    wider = _wider_margin(margin, cal_hat, cal_se)
    if wider is None:
      break
    margin = wider
  del tails
  eps = round_up(max(eps_star, 1e-9))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", balls_in_bins.InsufficientSamplesWarning)
    ver = _verify(pair, sigma, eps, d, dv, m, ver_seed)
  return _release(pair, ver, "epsilon", required, (cal_seed, ver_seed), margin, eps_star,
                  cal_hat, cal_se)


def balls_in_bins_pair(mechanism: catalog.Mechanism, *, num_bins: int,
                       rounds: int) -> balls_in_bins.BallsInBinsPair:
  """The dominating pair (paper 003, Lemma 3.2) of `mechanism`'s C over n = `rounds` rounds
  of b = `num_bins` bins (E = ⌈n/b⌉ epochs, the last possibly cut short). Raises for a C
  Lemma 3.2 does not cover (not square lower-triangular, or negative entries)."""
  return balls_in_bins.dominating_pair(
      num_bins=num_bins, num_epochs=balls_in_bins.epochs_for(rounds, num_bins), rounds=rounds,
      **mechanism.lower_triangular_input(rounds))


def b_min_sep_pair(mechanism: catalog.Mechanism,
                   sampling: b_min_sep.BMinSepSampling) -> b_min_sep.BMinSepPair:
  """The b-min-sep dominating pair of `mechanism`'s C over the sampling's rounds, with the
  mechanism's own (certified) min-sep sensitivity as the unamplified bound beside it."""
  n, b = sampling.rounds, sampling.min_sep
  sens = mechanism.sensitivity(n, b, sensitivity_lib.participation_cap(n, b)).guaranteed
  return b_min_sep.dominating_pair(sampling, unamplified_sensitivity=sens,
                                   **mechanism.lower_triangular_input(n))


# ---------------------------------------------------------------------------------------
# Cyclic Poisson sampling of banded mechanisms.


@dataclasses.dataclass(frozen=True)
class CyclicPoissonGuarantee:
  """(ε, δ) of n rounds of a ≤ b-banded C under cyclic Poisson sampling with b groups.

  `epsilon` is the PLD bound (the tighter of two grids, `dpfedavg.checked_pld_epsilon`);
  `epsilon_rdp` the RDP bound of the same event, for comparison.
  """
  noise_multiplier: float
  column_norm: float
  sampling_probability: float
  num_groups: int
  rounds: int
  compositions: int
  delta: float
  epsilon: float
  epsilon_rdp: float
  pld_value_discretization_interval: float

  @property
  def effective_noise_multiplier(self) -> float:
    """σ / (max column norm): the Gaussian noise multiplier of one participation."""
    return self.noise_multiplier / self.column_norm

  def to_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    out["scheme"] = CYCLIC_POISSON
    out["effective_noise_multiplier"] = self.effective_noise_multiplier
    return out


def _cyclic_args(column_norm, sampling_probability, num_groups, rounds):
  norm = _checks.check_positive("column_norm", column_norm)
  q = _checks.check_positive("sampling_probability", sampling_probability)
  if q > 1.0:
    raise ValueError(f"`sampling_probability` must be in (0, 1]; got {sampling_probability!r}.")
  b = _checks.check_positive_int("num_groups", num_groups)
  n = _checks.check_positive_int("rounds", rounds)
  return norm, q, b, n, sensitivity_lib.participation_cap(n, b)


def cyclic_poisson_epsilon(noise_multiplier: float, *, column_norm: float,
                           sampling_probability: float, num_groups: int, rounds: int,
                           delta: float) -> CyclicPoissonGuarantee:
  """ε at δ of a C with at most `num_groups` bands under cyclic Poisson sampling.

  Each client belongs to one of b = `num_groups` groups and can only take part in the rounds
  t ≡ its group (mod b), each with probability q; the ≤ b bands make the columns of those
  rounds disjoint, so the release is the composition over ⌈n/b⌉ rounds of the Poisson-
  subsampled Gaussian with noise multiplier σ / max_t ||C[:, t]|| (Choquette-Choo et al.
  2023, Thm 4; jax_privacy `amplified_bandmf_event`). The caller checks the bands.
  """
  sigma = _checks.check_positive("noise_multiplier", noise_multiplier)
  norm, q, b, n, compositions = _cyclic_args(column_norm, sampling_probability, num_groups,
                                             rounds)
  d = _checks.check_delta(delta)
  z = sigma / norm
  pld = dpfedavg.checked_pld_epsilon(q, z, compositions, d)
  rdp, _ = dpfedavg.rdp_epsilon(q, z, compositions, d)
  return CyclicPoissonGuarantee(
      noise_multiplier=sigma, column_norm=norm, sampling_probability=q, num_groups=b,
      rounds=n, compositions=compositions, delta=d, epsilon=min(pld.epsilon, rdp),
      epsilon_rdp=rdp, pld_value_discretization_interval=pld.interval)


def cyclic_poisson_rdp_epsilon(noise_multiplier: float, *, column_norm: float,
                               sampling_probability: float, num_groups: int, rounds: int,
                               delta: float) -> float:
  """The RDP bound alone of `cyclic_poisson_epsilon` (fast; never below its ε)."""
  sigma = _checks.check_positive("noise_multiplier", noise_multiplier)
  norm, q, _, _, compositions = _cyclic_args(column_norm, sampling_probability, num_groups,
                                             rounds)
  return dpfedavg.rdp_epsilon(q, sigma / norm, compositions, _checks.check_delta(delta))[0]


def cyclic_poisson_noise_multiplier(target_epsilon: float, *, column_norm: float,
                                    sampling_probability: float, num_groups: int,
                                    rounds: int, delta: float, accountant: str = "rdp",
                                    relative_tolerance: float = 1e-9) -> float:
  """The smallest σ (rounded up; to `relative_tolerance` for RDP, 1e-4 for PLD) whose
  cyclic-Poisson ε is at most `target_epsilon`; `accountant` "rdp" (fast) or "pld" (tighter:
  a smaller σ)."""
  norm, q, _, _, compositions = _cyclic_args(column_norm, sampling_probability, num_groups,
                                             rounds)
  d = _checks.check_delta(delta)
  if accountant not in ("rdp", "pld"):
    raise ValueError(f"`accountant` must be 'rdp' or 'pld'; got {accountant!r}.")
  z = dpfedavg.smallest_noise_multiplier(
      lambda z: dpfedavg.rdp_epsilon(q, z, compositions, d)[0], target_epsilon,
      relative_tolerance)
  if accountant == "pld":
    # RDP >= PLD, so the RDP σ meets the target under PLD: bisect below it with PLD on a
    # grid of min(1e-3, q/3) — a pessimistic PLD is an upper bound on any grid, and this
    # one is 10x faster than the reports' and within ~1e-5 relative of it here.
    interval = min(1e-3, q / 3.0)
    z = dpfedavg.smallest_noise_multiplier(
        lambda z: dpfedavg.pld_epsilon(q, z, compositions, d, interval), target_epsilon,
        max(relative_tolerance, 1e-4), upper=z)
  return round_up(z * norm)


def banded_bands(mechanism: catalog.Mechanism) -> int:
  """Bands of C: 1 for DP-SGD, p for a banded C (BandMF, BSR); refused for a C that is not
  banded, whose columns the cyclic Poisson analysis cannot take as disjoint."""
  if isinstance(mechanism, catalog.DpSgdMechanism):
    return 1
  if isinstance(mechanism, catalog.BandedMechanism):
    return mechanism.banded.bands
  raise ValueError(
      f"--participation=cyclic_poisson needs a banded C (--mechanism=bandmf, bsr or dpsgd): its "
      f"analysis needs the rounds of one client to touch disjoint rows of C, which the "
      f"{mechanism.name} mechanism's C does not give. Use --participation=balls_in_bins "
      "for any C.")


def cyclic_poisson_args(mechanism: catalog.Mechanism, *, sampling_probability: float,
                        num_groups: int, rounds: int, delta: float) -> dict[str, Any]:
  """The keyword arguments of `cyclic_poisson_epsilon` and `cyclic_poisson_noise_multiplier`
  for `mechanism`'s C over n = `rounds` rounds: its largest column norm (the sensitivity of
  one participation), q, G, n, δ. The caller checks C has at most G bands (`banded_bands`)."""
  column_norm = mechanism.sensitivity(rounds, rounds, 1).guaranteed
  return dict(column_norm=column_norm, sampling_probability=sampling_probability,
              num_groups=num_groups, rounds=rounds, delta=delta)
