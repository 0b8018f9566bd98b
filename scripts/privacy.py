"""Privacy accounting from the command line: matrix mechanisms, DP-FedAvg, amplification.

Matrix mechanisms (DP-FTRL) under min-separation participation (paper 004):
  ./bazelw run //scripts:privacy -- --mechanism=blt --params_in=blt.json --rounds=2000 \
      --min_sep=400 --max_participations=5 --noise_multiplier=7.379 --delta=1e-10
  (or --target_epsilon=E to calibrate the noise multiplier)

DP-FedAvg with Poisson user sampling (paper 001):
  .venv/bin/python -m scripts.privacy --sampling=poisson --population=763430 \
      --clients_per_round=5000 --rounds=5000 --noise_multiplier=1.0 --delta=1e-9

Balls-in-bins batching, σ released by Estimate-Verify-Release (paper 003, Alg. 1-2):
  .venv/bin/python -m scripts.privacy --sampling=balls_in_bins --epochs=16 \
      --batches_per_epoch=128 --mechanism=blt --target_epsilon=1 --delta=1e-5
  σ is calibrated by Monte Carlo (Alg. 2) on one seed to δ_verify / (1 + margin)
  (δ_verify = 0.8 δ by default), then verified on a fresh sample from an independent seed
  (δ̂ <= δ_verify with the sample size of Thm 2.1) and printed only if verification passes;
  otherwise the script exits with status 1 and says what to change. Seeds come from OS
  entropy unless --seed is given (reproducible research runs); both are printed.

Cyclic Poisson sampling of a banded C (BandMF, DP-SGD): --min_sep groups, each round
Poisson-samples its group (Choquette-Choo et al. 2023):
  .venv/bin/python -m scripts.privacy --sampling=cyclic_poisson --mechanism=bandmf \
      --rounds=2052 --min_sep=16 --population=342000 --clients_per_round=1000 \
      --target_epsilon=8 --delta=1e-5

Prints a table by default, JSON with --format=json; --report_out=FILE.md also writes the
App. C privacy report (matrix mechanisms).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Optional, Sequence


from dp_fl import _checks
from dp_fl import exits
from dp_fl import resources
from dp_fl.accounting import amplification
from dp_fl.accounting import balls_in_bins
from dp_fl.accounting import report as report_lib
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import catalog
from dp_fl.training import registry  # pylint: disable=unused-import  (registers every mechanism)
from dp_fl.mechanisms import sensitivity as sensitivity_lib


class VerificationFailedError(Exception):
  """Estimate-Verify-Release (paper 003, Alg. 1) returned ⊥: no σ may be released."""


DEFAULT_CALIBRATION_MARGIN = amplification.DEFAULT_CALIBRATION_MARGIN


# Valid ranges of the numeric flags: outside them a value underflows, overflows or makes the
# accountant meaningless (e.g. σ² underflowing to 0, e^ε overflowing, a δ that guarantees
# nothing). (low, high, integer, why).
FLAG_RANGES: dict[str, tuple[float, float, bool, str]] = {
    "rounds": (1, resources.MAX_ROUNDS, True, "rounds of training"),
    "min_sep": (1, resources.MAX_ROUNDS, True, "rounds between two participations"),
    "max_participations": (1, resources.MAX_ROUNDS, True, "participations per client"),
    "buffers": (1, 64, True, "BLT buffers"),
    "bands": (1, resources.MAX_ROUNDS, True, "bands of a banded C or C⁻¹"),
    "noise_multiplier": (1e-3, 1e6, False,
                         "below, σ² makes ρ = sens²/(2σ²) overflow the ε conversion; above, "
                         "ρ underflows and ε is 0 to float precision"),
    "target_epsilon": (1e-3, 700.0, False,
                       "below, σ for ε underflows the calibration; above, e^ε overflows"),
    "delta": (1e-100, 0.1, False,
              "δ is the probability the guarantee fails: above 0.1 it guarantees nothing; "
              "use e.g. 1e-5, or 1/population^1.1"),
    "population": (1, 2 ** 53, True, "users"),
    "clients_per_round": (1e-6, 2 ** 53, False, "expected clients per round"),
    "epochs": (1, 1_000_000, True, "epochs"),
    "batches_per_epoch": (1, 1_000_000, True, "bins per epoch"),
    "mc_samples": (1, 2 ** 53, True, "Monte Carlo samples"),
}


def check_flags(args: argparse.Namespace) -> None:
  """Refuses any numeric flag outside `FLAG_RANGES`, and an unwritable --report_out,
  before any work."""
  for flag, (low, high, integer, why) in FLAG_RANGES.items():
    value = getattr(args, flag)
    if value is not None:
      _checks.check_in_range(f"--{flag}", value, low, high, integer=integer, why=why)
  resources.check_writable_output("report_out", args.report_out)


def _require(sampling: str, **values: Any) -> None:
  missing = [f"--{k}" for k, v in values.items() if v is None]
  if missing:
    raise ValueError(f"{', '.join(missing)} required for --sampling={sampling}.")


def _mechanism(name: str, params_in: Optional[str], rounds: int, min_sep: int,
               max_participations: Optional[int], buffers: int, seed: int,
               bands: Optional[int] = None) -> catalog.Mechanism:
  """Loads --params_in, or builds (optimizes) the mechanism for the schedule."""
  return catalog.load_or_build(name, params_in, "`--params_in`", rounds=rounds,
                               min_sep=min_sep, max_participations=max_participations,
                               buffers=buffers, bands=bands, seed=seed).mechanism


def matrix_mechanism(name, params_in, rounds, min_sep, max_participations, buffers,
                     noise_multiplier, target_epsilon, delta, seed, report_out, bands=None
                     ) -> dict[str, Any]:
  """ρ, ε for a matrix mechanism under Π(b, k), or σ for a target ε (paper 004, Sec. 3.1).

  Calibration and the headline ρ, ε use `sens.guaranteed`, an upper bound on the true
  sensitivity; where the mechanism only has a lower bound (paper 004, Remark 3.2) it is
  reported next to it, labelled, with the (optimistic) ε it would give.
  """
  _require("min_sep", mechanism=name, rounds=rounds, min_sep=min_sep, delta=delta)
  report_lib.check_noise_or_target(noise_multiplier, target_epsilon)
  seed = 0 if seed is None else seed
  mechanism = _mechanism(name, params_in, rounds, min_sep, max_participations, buffers, seed,
                         bands)
  result = report_lib.min_sep_guarantee(mechanism, rounds, min_sep, max_participations, delta,
                                        noise_multiplier=noise_multiplier,
                                        target_epsilon=target_epsilon)
  sens, k, note = result.sensitivity, result.max_participations, result.participation_note
  exact = sens.is_exact
  guaranteed = sens.guaranteed
  guarantee, noise_multiplier = result.guarantee, result.noise_multiplier
  notes = ([note] if note else []) + [f"Sensitivity by {sens.method}."]
  if report_out:
    participation = report_lib.Participation(rounds, min_sep, k, source="configured")
    rep = report_lib.matrix_mechanism_report(mechanism, noise_multiplier, participation, delta)
    with open(report_out, "w", encoding="utf-8") as f:
      f.write(rep.to_markdown())
  out = {
      "mechanism": name, "rounds": rounds, "min_sep": min_sep, "max_participations": k,
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
  _require("poisson", population=population, clients_per_round=clients_per_round, rounds=rounds,
           noise_multiplier=noise_multiplier, delta=delta)
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


def cyclic_poisson(name, params_in, rounds, groups, population, clients_per_round, buffers,
                   noise_multiplier, target_epsilon, delta, seed, bands=None
                   ) -> dict[str, Any]:
  """ε (or σ for a target ε) of a banded C under cyclic Poisson sampling: G = --min_sep groups,
  rate q = C̃·G/K within the round's group (Choquette-Choo et al. 2023; jax_privacy's
  `amplified_bandmf_event`), next to the unamplified ε of the same schedule (min-sep G,
  k = ⌈n/G⌉: every turn taken)."""
  from dp_fl.training import amplified  # pylint: disable=g-import-not-at-top
  _require("cyclic_poisson", mechanism=name, rounds=rounds, min_sep=groups,
           population=population, clients_per_round=clients_per_round, delta=delta)
  report_lib.check_noise_or_target(noise_multiplier, target_epsilon)
  q = clients_per_round * groups / population
  if q > 1.0:
    raise ValueError(
        f"--clients_per_round={clients_per_round:g} × --min_sep={groups} / --population="
        f"{population} = {q:.4g} > 1: a group of K/G users cannot give C̃ expected clients. "
        "Lower --clients_per_round or --min_sep, or raise --population.")
  mechanism = _mechanism(name, params_in, rounds, groups, None, buffers,
                         0 if seed is None else seed, bands)
  bands = amplified.CyclicPoisson.bands(mechanism)
  if bands > groups:
    raise ValueError(f"--mechanism={name} has {bands} bands > --min_sep={groups} groups; the "
                     "cyclic Poisson analysis needs bands <= groups.")
  column_norm = mechanism.sensitivity(rounds, rounds, 1).guaranteed
  args = dict(column_norm=column_norm, sampling_probability=q, num_groups=groups,
              rounds=rounds, delta=delta)
  if noise_multiplier is None:
    noise_multiplier = amplification.cyclic_poisson_noise_multiplier(
        target_epsilon, accountant="pld", **args)
  g = amplification.cyclic_poisson_epsilon(noise_multiplier, **args)
  k = -(-rounds // groups)
  unamplified = zcdp.matrix_mechanism_guarantee(
      mechanism.sensitivity(rounds, groups, k).guaranteed, noise_multiplier, delta)
  out = {
      "mechanism": name, "bands": bands, "groups": groups, "rounds": rounds,
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


def balls_in_bins_release(name, params_in, epochs, batches_per_epoch, buffers, target_epsilon,
                          delta, mc_samples=None, seed=None, delta_verify=None,
                          calibration_margin=DEFAULT_CALIBRATION_MARGIN, bands=None
                          ) -> dict[str, Any]:
  """σ for (ε, δ) under balls-in-bins batching by Estimate-Verify-Release (paper 003).

  1. Calibrate σ (Alg. 2) on the calibration seed to δ_cal = δ_verify / (1 + margin).
  2. Verify (Alg. 1) on a fresh sample from the independent verification seed that
     δ̂(σ) <= δ_verify, with m >= `required_num_samples` so that by Thm 2.1 the release is
     (ε, δ)-DP, δ = δ_verify · τ.
  3. Release σ only if verification passed; else raise `VerificationFailedError`.

  The released σ is rounded up to 6 significant digits BEFORE verification, so the value
  printed is exactly the value verified.
  """
  _require("balls_in_bins", mechanism=name, epochs=epochs, batches_per_epoch=batches_per_epoch,
           target_epsilon=target_epsilon, delta=delta)
  if not 0.0 < delta < 1.0:
    raise ValueError(f"--delta={delta!r} must be in (0, 1): it is the released δ "
                     "(e.g. 1e-5).")
  ratio = balls_in_bins.DEFAULT_VERIFY_RATIO
  if delta_verify is None:
    delta_verify = ratio * delta
  elif not 0.0 < delta_verify < delta:
    raise ValueError(
        f"--delta_verify={delta_verify!r} must be in (0, --delta={delta!r}) (Thm 2.1: "
        f"δ = τ·δ_verify, τ > 1); omit it for the default {ratio}·δ = {ratio * delta:.4g}.")
  if not (calibration_margin >= 0.0 and math.isfinite(calibration_margin)):
    raise ValueError(f"--calibration_margin={calibration_margin!r} must be a finite number "
                     f">= 0; use e.g. {DEFAULT_CALIBRATION_MARGIN}.")
  if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
    raise ValueError(f"--seed={seed!r} must be a non-negative integer; omit it to draw the "
                     "accounting seeds from OS entropy.")
  required = balls_in_bins.required_num_samples(delta_verify, delta)
  if mc_samples is None:
    mc_samples = required
  elif mc_samples < required:
    raise ValueError(
        f"--mc_samples={mc_samples} is below the {required} Monte Carlo samples that "
        f"Estimate-Verify-Release needs at --delta={delta:g} with δ_verify={delta_verify:g} "
        f"(paper 003, Thm 2.1); omit --mc_samples (default: that minimum) or pass "
        f"--mc_samples>={required}.")
  rounds = epochs * batches_per_epoch
  monte_carlo_flags = {"batches_per_epoch": batches_per_epoch, "epochs": epochs,
                       "mc_samples": mc_samples}
  monte_carlo = lambda dense: balls_in_bins.monte_carlo_cost(
      num_bins=batches_per_epoch, num_epochs=epochs, num_samples=mc_samples, dense=dense)
  resources.require(monte_carlo(False), monte_carlo_flags)  # Before optimizing C.
  # Without amplification a client takes part once per epoch: min-sep >= 1, k = E.
  mechanism = _mechanism(name, params_in, rounds, batches_per_epoch, epochs, buffers,
                         0 if seed is None else seed, bands)
  c_input = mechanism.lower_triangular_input(rounds)
  if "matrix" in c_input:  # A dense C (BandMF) adds n x n arrays to the Monte Carlo's.
    resources.require(monte_carlo(True), monte_carlo_flags)
  pair = balls_in_bins.dominating_pair(num_bins=batches_per_epoch, num_epochs=epochs,
                                       **c_input)
  release = amplification.release_noise_multiplier(
      pair, epsilon=target_epsilon, delta=delta, delta_verify=delta_verify,
      calibration_margin=calibration_margin, num_samples=mc_samples, seed=seed)
  if not release.verified:
    # Relative Monte Carlo error of (verification - calibration) estimates, for advice.
    rel_se = math.hypot(
        release.calibration_delta_standard_error / release.calibration_delta_hat
        if release.calibration_delta_hat > 0 else 0.0,
        release.verification_delta_standard_error / release.verification_delta_hat
        if release.verification_delta_hat > 0 else 0.0)
    margin = max(2.0 * calibration_margin, math.expm1(4.0 * rel_se), 0.1)
    raise VerificationFailedError(
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
  sigma = release.noise_multiplier
  unamplified = release.noise_multiplier_without_amplification
  notes = []
  if release.calibration_delta_hat > 0 and (
      release.calibration_delta_standard_error / release.calibration_delta_hat
      > balls_in_bins.MAX_RELATIVE_STANDARD_ERROR):
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
      "mechanism": name, "epochs": epochs, "batches_per_epoch": batches_per_epoch,
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


def format_table(result: dict[str, Any]) -> str:
  rows = [(k, v) for k, v in result.items() if k not in ("notes", "guarantee")]
  width = max(len(k) for k, _ in rows)
  lines = [f"{k:<{width}}  {v:.6g}" if isinstance(v, float) else f"{k:<{width}}  {v}"
           for k, v in rows]
  if "guarantee" in result:
    lines.append(f"guarantee: {result['guarantee']}")
  return "\n".join(lines + [f"note: {n}" for n in result.get("notes", [])])


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
      "--sampling", choices=("min_sep", "poisson", "balls_in_bins", "cyclic_poisson"),
      default="min_sep",
      help="min_sep: at most k participations, >= b rounds apart (paper 004); poisson: "
           "Poisson user sampling, DP-FedAvg (paper 001); balls_in_bins: paper 003; "
           "cyclic_poisson: --min_sep groups Poisson-sampled in turn, banded C (bandmf, "
           "bsr, dpsgd)")
  parser.add_argument("--mechanism", choices=catalog.names(), default=None)
  parser.add_argument("--params_in", default=None,
                      help="mechanism parameters (JSON from scripts/mechanism)")
  parser.add_argument("--rounds", type=int, default=None, help="n (or T for DP-FedAvg)")
  parser.add_argument("--min_sep", type=int, default=None, help="b: minimum separation")
  parser.add_argument("--max_participations", type=int, default=None,
                      help="k (default ceil(n / b))")
  parser.add_argument("--buffers", type=int, default=4,
                      help="BLT buffers when optimizing (no --params_in)")
  parser.add_argument("--bands", type=int, default=None,
                      help="p: bands of C (bandmf, bsr) or C⁻¹ (bisr, bandinvmf) when building "
                           "(no --params_in; default min(b, n))")
  parser.add_argument("--noise_multiplier", type=float, default=None,
                      help="σ: noise std / clip norm (z)")
  parser.add_argument("--target_epsilon", type=float, default=None,
                      help="calibrate σ for this ε")
  parser.add_argument("--delta", type=float, default=None, help="δ")
  parser.add_argument("--population", type=int, default=None, help="K: users (Poisson)")
  parser.add_argument("--clients_per_round", type=float, default=None,
                      help="C̃: expected clients per round (Poisson)")
  parser.add_argument("--epochs", type=int, default=None, help="E: epochs (balls-in-bins)")
  parser.add_argument("--batches_per_epoch", type=int, default=None,
                      help="NB: bins per epoch (balls-in-bins)")
  parser.add_argument("--delta_verify", type=float, default=None,
                      help="balls-in-bins: verification threshold δ_verify < δ (default "
                           f"{balls_in_bins.DEFAULT_VERIFY_RATIO}·δ; Thm 2.1, paper 003)")
  parser.add_argument("--calibration_margin", type=float, default=DEFAULT_CALIBRATION_MARGIN,
                      help="balls-in-bins: calibrate σ to δ_verify / (1 + margin), leaving "
                           "room for Monte Carlo error so verification passes")
  parser.add_argument("--mc_samples", type=int, default=None,
                      help="balls-in-bins: Monte Carlo samples for calibration and for "
                           "verification each (default and minimum: what Thm 2.1 needs, "
                           "about 5.4e7 for δ = 1e-5)")
  parser.add_argument("--seed", type=int, default=None,
                      help="balls-in-bins: calibration seed for a reproducible run (the "
                           "verification seed is derived from it); default: both drawn from "
                           "OS entropy. min_sep: optimizer starts (default 0)")
  parser.add_argument("--report_out", default=None, help="write the Markdown privacy report")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  resources.add_budget_flags(parser)
  exits.add_debug_flag(parser)
  return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Exit codes as in dp_fl/exits.py: 0 released/printed, 2 bad flag (or too large for the
  budgets), 1 verification failed (no σ released), 3 environment."""
  args = parse_args(argv)

  def body() -> int:
    check_flags(args)
    if args.sampling == "min_sep":
      result = matrix_mechanism(
          args.mechanism, args.params_in, args.rounds, args.min_sep, args.max_participations,
          args.buffers, args.noise_multiplier, args.target_epsilon, args.delta, args.seed,
          args.report_out, bands=args.bands)
    elif args.sampling == "poisson":
      result = poisson(args.population, args.clients_per_round, args.rounds,
                       args.noise_multiplier, args.delta)
    elif args.sampling == "cyclic_poisson":
      result = cyclic_poisson(
          args.mechanism, args.params_in, args.rounds, args.min_sep, args.population,
          args.clients_per_round, args.buffers, args.noise_multiplier, args.target_epsilon,
          args.delta, args.seed, bands=args.bands)
    else:
      if args.noise_multiplier is not None:
        raise ValueError(
            f"--noise_multiplier={args.noise_multiplier:g} is not used with "
            "--sampling=balls_in_bins, which calibrates and verifies σ itself; drop it and "
            "pass --target_epsilon.")
      result = balls_in_bins_release(
          args.mechanism, args.params_in, args.epochs, args.batches_per_epoch, args.buffers,
          args.target_epsilon, args.delta, mc_samples=args.mc_samples, seed=args.seed,
          delta_verify=args.delta_verify, calibration_margin=args.calibration_margin,
          bands=args.bands)
    print(json.dumps(result, indent=2) if args.format == "json" else format_table(result))
    return exits.COMPLETED

  def verified_body() -> int:
    try:
      return body()
    except VerificationFailedError as e:
      print(f"error: {e}", file=sys.stderr)
      return exits.FAILED

  return exits.guarded(resources.with_budget_flags(args, verified_body), debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
