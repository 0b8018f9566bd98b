"""The privacy of a planned schedule, one function per sampling analysis (`scripts/privacy`).

Each takes the mechanism (built or loaded by the caller) and the schedule, and returns the
record `scripts/privacy` prints as a table or JSON — the same analyses a training run's
accountant uses (`dp_fl/participation/schemes.py` names each scheme's analysis):

* `min_sep`: a matrix mechanism under at most k participations b apart (paper 004,
  Sec. 3.1), or σ for a target ε;
* `poisson`: DP-FedAvg with Poisson user sampling, three accountants (paper 001);
* `cyclic_poisson`: a banded C under cyclic Poisson sampling (Choquette-Choo et al. 2023),
  next to the unamplified ε of the same schedule;
* `balls_in_bins`: σ for (ε, δ) under balls-in-bins batching, released only after
  Estimate-Verify-Release (paper 003, Alg. 1-2); `check_balls_in_bins` validates its
  settings (and its cost) before any mechanism is built;
* `b_min_sep`: σ for (ε, δ), or ε for σ, under b-min-sep sampling (Dong & Ganesh 2026), the
  same release on its dominating pair, next to the unamplified min-sep guarantee.

Messages name the flags of `scripts/privacy`, whose values these are.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from dp_fl import resources
from dp_fl.accounting import amplification
from dp_fl.accounting import b_min_sep as b_min_sep_lib
from dp_fl.accounting import balls_in_bins as balls_in_bins_lib
from dp_fl.accounting import report as report_lib
from dp_fl.accounting import verification
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity as sensitivity_lib


class VerificationFailedError(Exception):
  """Estimate-Verify-Release (paper 003, Alg. 1) returned ⊥: no σ may be released."""


def min_sep(mechanism: catalog.Mechanism, rounds: int, min_sep_rounds: int,
            max_participations: Optional[int], delta: float, *,
            noise_multiplier: Optional[float], target_epsilon: Optional[float]
            ) -> dict[str, Any]:
  """ρ, ε for a matrix mechanism under Π(b, k), or σ for a target ε (paper 004, Sec. 3.1).

  Calibration and the headline ρ, ε use `sens.guaranteed`, an upper bound on the true
  sensitivity; where the mechanism only has a lower bound (paper 004, Remark 3.2) it is
  reported next to it, labelled, with the (optimistic) ε it would give.
  """
  result = report_lib.min_sep_guarantee(mechanism, rounds, min_sep_rounds, max_participations,
                                        delta, noise_multiplier=noise_multiplier,
                                        target_epsilon=target_epsilon)
  sens, k, note = result.sensitivity, result.max_participations, result.participation_note
  exact = sens.is_exact
  guaranteed = sens.guaranteed
  guarantee = result.guarantee
  notes = ([note] if note else []) + [f"Sensitivity by {sens.method}."]
  out = {
      "mechanism": mechanism.name, "rounds": rounds, "min_sep": min_sep_rounds,
      "max_participations": k,
      "noise_multiplier": guarantee.noise_multiplier, "sensitivity": guaranteed,
      "sensitivity_kind": "exact" if exact else "upper_bound",
      "sensitivity_is_lower_bound": not exact,
      "rho": guarantee.rho, "epsilon": guarantee.epsilon, "delta": guarantee.delta,
      "conversion": "exact_gaussian",
  }
  if not exact:
    lower = result.lower
    out.update({
        "sensitivity_lower_bound": sens.value,
        "sensitivity_guaranteed": guaranteed,
        "sensitivity_upper_bound_method": sens.upper_method or None,
        "epsilon_from_lower_bound": lower.epsilon,
    })
    notes.append(
        f"Sensitivity {sens.value:.6g} is only a LOWER bound ({sens.method}); σ, ρ and ε use "
        f"the guaranteed upper bound {guaranteed:.6g}"
        + (f" ({sens.upper_method})" if sens.upper_method else "")
        + f". The lower bound would give ε = {lower.epsilon:.6g} (paper 004's way of "
        "reporting TreeAgg): optimistic, not a guarantee.")
  notes.append(f"Classical conversions for comparison: ε = {guarantee.epsilon_cks:.4g} "
               f"(Canonne-Kamath-Steinke), ε = {guarantee.epsilon_bun_steinke:.4g} "
               "(Bun-Steinke ρ + 2√(ρ log 1/δ)).")
  if target_epsilon is not None:
    out["target_epsilon"] = target_epsilon
    notes.append("σ rounded up to 6 significant digits; ρ and ε are for the "
                 "σ printed.")
  out["notes"] = notes
  return out


def poisson(population, clients_per_round, rounds, noise_multiplier, delta) -> dict[str, Any]:
  """ε of DP-FedAvg with Poisson user sampling by three accountants (paper 001)."""
  rep = report_lib.dpfedavg_report(population, clients_per_round, noise_multiplier, rounds,
                                   delta)
  return {
      "population": population, "clients_per_round": clients_per_round,
      "sampling_probability": rep.sampling_probability, "rounds": rounds,
      "noise_multiplier": noise_multiplier, "delta": delta,
      "epsilon_rdp": rep.epsilon_rdp, "epsilon_pld": rep.epsilon,
      "epsilon_moments_accountant": rep.epsilon_moments_accountant,
      "pld_value_discretization_interval": rep.pld_value_discretization_interval,
      "notes": list(rep.notes),
  }


def cyclic_poisson_rate(population: int, clients_per_round: float, groups: int) -> float:
  """q = C̃·G/K, the rate within the round's group; refused above 1."""
  q = clients_per_round * groups / population
  if q > 1.0:
    raise ValueError(
        f"--clients_per_round={clients_per_round:g} × --min_sep={groups} / --population="
        f"{population} = {q:.4g} > 1: a group of K/G users cannot give C̃ expected clients. "
        "Lower --clients_per_round or --min_sep, or raise --population.")
  return q


def cyclic_poisson(mechanism: catalog.Mechanism, rounds: int, groups: int, population: int,
                   clients_per_round: float, noise_multiplier: Optional[float],
                   target_epsilon: Optional[float], delta: float) -> dict[str, Any]:
  """ε (or σ for a target ε) of a banded C under cyclic Poisson sampling: G = --min_sep groups,
  rate q = C̃·G/K within the round's group (Choquette-Choo et al. 2023; jax_privacy's
  `amplified_bandmf_event`), next to the unamplified ε of the same schedule (min-sep G,
  k = ⌈n/G⌉: every turn taken)."""
  q = cyclic_poisson_rate(population, clients_per_round, groups)
  bands = amplification.banded_bands(mechanism)
  if bands > groups:
    raise ValueError(f"--mechanism={mechanism.name} has {bands} bands > --min_sep={groups} "
                     "groups; the cyclic Poisson analysis needs bands <= groups.")
  args = amplification.cyclic_poisson_args(mechanism, sampling_probability=q,
                                           num_groups=groups, rounds=rounds, delta=delta)
  column_norm = args["column_norm"]
  if noise_multiplier is None:
    noise_multiplier = amplification.cyclic_poisson_noise_multiplier(
        target_epsilon, accountant="pld", **args)
  g = amplification.cyclic_poisson_epsilon(noise_multiplier, **args)
  k = sensitivity_lib.participation_cap(rounds, groups)
  unamplified = zcdp.matrix_mechanism_guarantee(
      mechanism.sensitivity(rounds, groups, k).guaranteed, noise_multiplier, delta)
  out = {
      "mechanism": mechanism.name, "bands": bands, "groups": groups, "rounds": rounds,
      "population": population, "clients_per_round": clients_per_round,
      "sampling_probability": q, "compositions": g.compositions,
      "column_norm": column_norm, "noise_multiplier": noise_multiplier, "delta": delta,
      "epsilon": g.epsilon, "epsilon_rdp": g.epsilon_rdp,
      "epsilon_without_amplification": unamplified.epsilon,
      "notes": [f"ε = {g.compositions} compositions of the Poisson-subsampled Gaussian with "
                f"noise multiplier σ/{column_norm:.4g}; PLD (grid "
                f"{g.pld_value_discretization_interval:g}) and RDP, the smaller reported.",
                "Holds only if each user's group is drawn at random once and every round "
                "samples its group with probability q, secretly."],
  }
  if target_epsilon is not None:
    out["target_epsilon"] = target_epsilon
  return out


def _monte_carlo_flags(epochs: int, batches_per_epoch: int, mc_samples: int
                       ) -> dict[str, int]:
  return {"batches_per_epoch": batches_per_epoch, "epochs": epochs, "mc_samples": mc_samples}


def check_balls_in_bins(epochs: int, batches_per_epoch: int, delta: float,
                        delta_verify: Optional[float], calibration_margin: float,
                        seed: Optional[int], mc_samples: Optional[int]
                        ) -> tuple[float, int, int]:
  """(δ_verify, Monte Carlo samples, the samples Thm 2.1 requires) of a balls-in-bins
  release with these settings; refuses bad ones, and a Monte Carlo over the budgets
  (`resources`), before any mechanism is built."""
  delta_verify, mc_samples, required = check_release(delta, delta_verify, calibration_margin,
                                                     seed, mc_samples)
  resources.require(balls_in_bins_lib.monte_carlo_cost(
      num_bins=batches_per_epoch, num_epochs=epochs, num_samples=mc_samples, dense=False),
                    _monte_carlo_flags(epochs, batches_per_epoch, mc_samples))
  return delta_verify, mc_samples, required


def check_release(delta: float, delta_verify: Optional[float], calibration_margin: float,
                  seed: Optional[int], mc_samples: Optional[int]) -> tuple[float, int, int]:
  """(δ_verify, Monte Carlo samples, the samples Thm 2.1 requires) of any Monte Carlo
  release (balls-in-bins, b-min-sep), refusing bad settings naming their flags."""
  if not 0.0 < delta < 1.0:
    raise ValueError(f"--delta={delta!r} must be in (0, 1): it is the released δ "
                     "(e.g. 1e-5).")
  ratio = verification.DEFAULT_VERIFY_RATIO
  if delta_verify is None:
    delta_verify = ratio * delta
  elif not 0.0 < delta_verify < delta:
    raise ValueError(
        f"--delta_verify={delta_verify!r} must be in (0, --delta={delta!r}) (Thm 2.1: "
        f"δ = τ·δ_verify, τ > 1); omit it for the default {ratio}·δ = {ratio * delta:.4g}.")
  if not (calibration_margin >= 0.0 and math.isfinite(calibration_margin)):
    raise ValueError(f"--calibration_margin={calibration_margin!r} must be a finite number "
                     f">= 0; use e.g. {amplification.DEFAULT_CALIBRATION_MARGIN}.")
  if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
    raise ValueError(f"--seed={seed!r} must be a non-negative integer; omit it to draw the "
                     "accounting seeds from OS entropy.")
  required = verification.required_num_samples(delta_verify, delta)
  if mc_samples is None:
    mc_samples = required
  elif mc_samples < required:
    raise ValueError(
        f"--mc_samples={mc_samples} is below the {required} Monte Carlo samples that "
        f"Estimate-Verify-Release needs at --delta={delta:g} with δ_verify={delta_verify:g} "
        f"(paper 003, Thm 2.1); omit --mc_samples (default: that minimum) or pass "
        f"--mc_samples>={required}.")
  return delta_verify, mc_samples, required


def _verification_failed(release: amplification.MonteCarloRelease, target_epsilon: float,
                         delta_verify: float, calibration_margin: float,
                         mc_samples: int) -> VerificationFailedError:
  """Alg. 1's ⊥, with what to change (not: retry with new seeds)."""
  # Relative Monte Carlo error of (verification - calibration) estimates, for advice.
  rel_se = math.hypot(
      release.calibration_delta_standard_error / release.calibration_delta_hat
      if release.calibration_delta_hat > 0 else 0.0,
      release.verification_delta_standard_error / release.verification_delta_hat
      if release.verification_delta_hat > 0 else 0.0)
  margin = max(2.0 * calibration_margin, math.expm1(4.0 * rel_se), 0.1)
  return VerificationFailedError(
      f"verification failed, no σ released (paper 003, Alg. 1 returned ⊥): on the fresh "
      f"verification sample (seed {release.verification_seed}, {mc_samples} samples) δ̂ = "
      f"{release.verification_delta_hat:.4g} ± "
      f"{release.verification_delta_standard_error:.2g} exceeds δ_verify = "
      f"{delta_verify:.4g} at ε = {target_epsilon:g}. The calibration target δ_cal = "
      f"{delta_verify / (1 + calibration_margin):.4g} (--calibration_margin="
      f"{calibration_margin:g}) left too little room for Monte Carlo error (relative SE ≈ "
      f"{rel_se:.2g}). Re-run with a larger margin, e.g. --calibration_margin="
      f"{math.ceil(margin * 100) / 100:g}, and/or more samples, e.g. --mc_samples="
      f"{4 * mc_samples}. Do not just retry with new seeds until it passes: every "
      f"verification attempt may wrongly pass with probability up to "
      f"{release.failure_probability:.2g}, and these add up over attempts.")


def balls_in_bins(mechanism: catalog.Mechanism, epochs: int, batches_per_epoch: int,
                  target_epsilon: float, delta: float, *, delta_verify: float,
                  mc_samples: int, required: int, seed: Optional[int],
                  calibration_margin: float) -> dict[str, Any]:
  """σ for (ε, δ) under balls-in-bins batching by Estimate-Verify-Release (paper 003).

  1. Calibrate σ (Alg. 2) on the calibration seed to δ_cal = δ_verify / (1 + margin).
  2. Verify (Alg. 1) on a fresh sample from the independent verification seed that
     δ̂(σ) <= δ_verify, with m >= `required_num_samples` so that by Thm 2.1 the release is
     (ε, δ)-DP, δ = δ_verify · τ.
  3. Release σ only if verification passed; else raise `VerificationFailedError`.

  The released σ is rounded up to 6 significant digits BEFORE verification, so the value
  printed is exactly the value verified. The settings are `check_balls_in_bins`'s.
  """
  rounds = epochs * batches_per_epoch
  if "matrix" in mechanism.lower_triangular_input(rounds):
    # A dense C (BandMF) adds n x n arrays to the Monte Carlo's.
    resources.require(balls_in_bins_lib.monte_carlo_cost(
        num_bins=batches_per_epoch, num_epochs=epochs, num_samples=mc_samples, dense=True),
                      _monte_carlo_flags(epochs, batches_per_epoch, mc_samples))
  pair = amplification.balls_in_bins_pair(mechanism, num_bins=batches_per_epoch, rounds=rounds)
  release = amplification.release_noise_multiplier(
      pair, epsilon=target_epsilon, delta=delta, delta_verify=delta_verify,
      calibration_margin=calibration_margin, num_samples=mc_samples, seed=seed)
  if not release.verified:
    raise _verification_failed(release, target_epsilon, delta_verify, calibration_margin,
                               mc_samples)
  sigma = release.noise_multiplier
  unamplified = release.noise_multiplier_without_amplification
  notes = []
  if release.calibration_delta_hat > 0 and (
      release.calibration_delta_standard_error / release.calibration_delta_hat
      > balls_in_bins_lib.MAX_RELATIVE_STANDARD_ERROR):
    notes.append(f"The calibration estimate δ̂ has a relative standard error of "
                 f"{release.calibration_delta_standard_error / release.calibration_delta_hat:.2g}"
                 "; the verification (not the calibration) is what the guarantee rests on.")
  if sigma >= unamplified:
    notes.append(
        f"Amplification does not help here: the unamplified σ = {unamplified:.6g} (fixed bins, "
        f"exact Gaussian, no Monte Carlo) is at most the released σ; prefer it.")
  if seed is not None:
    notes.append(
        f"--seed={seed} fixes the accounting randomness for reproducibility; Thm 2.1 assumes "
        "the verification seed was not chosen after seeing outcomes (no seed shopping). "
        "Omit --seed to draw both seeds from OS entropy.")
  return {
      "mechanism": mechanism.name, "epochs": epochs, "batches_per_epoch": batches_per_epoch,
      "rounds": rounds, "target_epsilon": target_epsilon, "delta": delta,
      "noise_multiplier": sigma, "released": True, "guarantee": release.guarantee(),
      "delta_verify": delta_verify, "calibration_margin": release.calibration_margin,
      "delta_calibration": delta_verify / (1.0 + release.calibration_margin),
      "mc_samples": mc_samples, "mc_samples_required": required,
      "calibration_seed": release.calibration_seed,
      "verification_seed": release.verification_seed,
      "calibration_noise_multiplier": release.calibration_value,
      "calibration_delta_hat": release.calibration_delta_hat,
      "calibration_delta_standard_error": release.calibration_delta_standard_error,
      "verification": "passed",
      "verification_delta_hat": release.verification_delta_hat,
      "verification_delta_standard_error": release.verification_delta_standard_error,
      "verification_tail_samples": release.verification_tail_samples,
      "verification_failure_probability_bound": release.failure_probability,
      "noise_multiplier_without_amplification": unamplified,
      "notes": notes,
  }


def b_min_sep(mechanism: catalog.Mechanism, sampling: b_min_sep_lib.BMinSepSampling,
              delta: float, *, target_epsilon: Optional[float],
              noise_multiplier: Optional[float], delta_verify: float, mc_samples: int,
              required: int, seed: Optional[int], calibration_margin: float) -> dict[str, Any]:
  """σ for (ε, δ) (`target_epsilon`) or ε for σ (`noise_multiplier`) under b-min-sep
  sampling, released only after Estimate-Verify-Release on both directions of adjacency;
  `VerificationFailedError` if it fails. Beside it, the unamplified guarantee of the same
  schedule: at most ⌈n/b⌉ participations b apart (paper 004)."""
  resources.require(b_min_sep_lib.monte_carlo_cost(sampling.rounds, mc_samples,
                                                   num_classes=sampling.num_classes),
                    {"rounds": sampling.rounds, "mc_samples": mc_samples})
  pair = amplification.b_min_sep_pair(mechanism, sampling)
  common = dict(delta=delta, delta_verify=delta_verify, calibration_margin=calibration_margin,
                num_samples=mc_samples, seed=seed)
  if target_epsilon is not None:
    release = amplification.release_noise_multiplier(pair, epsilon=target_epsilon, **common)
  else:
    release = amplification.release_epsilon(pair, noise_multiplier=noise_multiplier, **common)
  if not release.verified:
    raise _verification_failed(release, release.epsilon, delta_verify, calibration_margin,
                               mc_samples)
  notes = []
  if not pair.exact:
    notes.append(
        f"The {mechanism.name} mechanism's C has rows shared by rounds >= b apart, so the "
        "likelihood ratio is bounded, not computed exactly (cross terms dropped for the remove "
        "direction, bounded for the add direction): the released δ is conservative.")
  if release.epsilon >= release.epsilon_without_amplification:
    notes.append("Amplification does not help here: the unamplified min-sep guarantee is at "
                 "least as good; prefer it.")
  if seed is not None:
    notes.append(f"--seed={seed} fixes the accounting randomness for reproducibility; omit "
                 "it to draw both seeds from OS entropy.")
  availability = sampling.availability
  if availability is not None:
    notes.append(
        f"Device availability: only devices available at a round could be drawn. The "
        f"{availability.num_classes} classes of public windows were each accounted and "
        f"verified, and δ is the largest; this assumes a device's availability is independent "
        f"of its data, its check-in during a window is a secret coin of exactly probability "
        f"{availability.window_probability:g}, and the population (--population and the "
        f"time zones of --availability_seed) is public and the same with or without any one "
        f"client's data.")
  return {
      "mechanism": mechanism.name, "rounds": sampling.rounds, "min_sep": sampling.min_sep,
      "sampling_probability": sampling.sampling_probability,
      "warm_start": sampling.warm_start,
      ("stationary_participation_rate" if availability is None
       else "mean_participation_rate"): sampling.participation_rate,
      "availability": None if availability is None else dict(
          availability.to_dict(), peak_participation_rate=sampling.peak_participation_rate),
      "delta": delta, "epsilon": release.epsilon,
      "noise_multiplier": release.noise_multiplier, "solved_for": release.solved_for,
      "released": True, "guarantee": release.guarantee(),
      "exact_likelihood_ratio": pair.exact,
      "delta_verify": delta_verify, "calibration_margin": release.calibration_margin,
      "mc_samples": mc_samples, "mc_samples_required": required,
      "calibration_seed": release.calibration_seed,
      "verification_seed": release.verification_seed,
      "verification": "passed",
      "verification_delta_hat": release.verification_delta_hat,
      "verification_delta_standard_error": release.verification_delta_standard_error,
      "verification_failure_probability_bound": release.failure_probability,
      "unamplified_sensitivity": pair.sensitivity,
      "epsilon_without_amplification": release.epsilon_without_amplification,
      "noise_multiplier_without_amplification": release.noise_multiplier_without_amplification,
      "notes": notes,
  }
