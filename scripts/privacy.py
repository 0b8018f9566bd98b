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

b-min-sep sampling (Dong & Ganesh 2026): a client waits --min_sep - 1 rounds after taking
part, then is sampled with probability p in every round it is eligible for; σ for
--target_epsilon or ε for --noise_multiplier, released by Estimate-Verify-Release on both
directions of adjacency, beside the unamplified min-sep guarantee:
  .venv/bin/python -m scripts.privacy --sampling=b_min_sep --mechanism=bandmf --rounds=64 \
      --min_sep=8 --population=1000 --clients_per_round=100 --target_epsilon=4 --delta=1e-4

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
import sys
from typing import Any, Optional, Sequence


from dp_fl import _checks
from dp_fl import exits
from dp_fl import resources
from dp_fl.accounting import amplification
from dp_fl.accounting import analyses
from dp_fl.accounting import b_min_sep as b_min_sep_lib
from dp_fl.accounting import report as report_lib
from dp_fl.accounting import verification
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import families  # pylint: disable=unused-import  (every mechanism)
from dp_fl.participation import availability as availability_lib
from dp_fl.participation import schemes

VerificationFailedError = analyses.VerificationFailedError

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
    "sampling_probability": (1e-12, 1.0, False,
                             "p, the chance an eligible client is sampled in a round"),
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
  """`analyses.min_sep` of the mechanism built for (or loaded); --report_out: the App. C
  privacy report (paper 004) of the σ printed."""
  _require(schemes.MIN_SEP, mechanism=name, rounds=rounds, min_sep=min_sep, delta=delta)
  report_lib.check_noise_or_target(noise_multiplier, target_epsilon)
  mechanism = _mechanism(name, params_in, rounds, min_sep, max_participations, buffers,
                         0 if seed is None else seed, bands)
  out = analyses.min_sep(mechanism, rounds, min_sep, max_participations, delta,
                         noise_multiplier=noise_multiplier, target_epsilon=target_epsilon)
  if report_out:
    participation = report_lib.Participation(rounds, min_sep, out["max_participations"],
                                              source="configured")
    rep = report_lib.matrix_mechanism_report(mechanism, out["noise_multiplier"],
                                             participation, delta)
    with open(report_out, "w", encoding="utf-8") as f:
      f.write(rep.to_markdown())
  return out


def poisson(population, clients_per_round, rounds, noise_multiplier, delta) -> dict[str, Any]:
  """`analyses.poisson`: DP-FedAvg with Poisson user sampling (paper 001)."""
  _require(schemes.POISSON, population=population, clients_per_round=clients_per_round,
           rounds=rounds, noise_multiplier=noise_multiplier, delta=delta)
  return analyses.poisson(population, clients_per_round, rounds, noise_multiplier, delta)


def cyclic_poisson(name, params_in, rounds, groups, population, clients_per_round, buffers,
                   noise_multiplier, target_epsilon, delta, seed, bands=None
                   ) -> dict[str, Any]:
  """`analyses.cyclic_poisson` of the banded mechanism built for G = --min_sep (or loaded)."""
  _require(amplification.CYCLIC_POISSON, mechanism=name, rounds=rounds, min_sep=groups,
           population=population, clients_per_round=clients_per_round, delta=delta)
  report_lib.check_noise_or_target(noise_multiplier, target_epsilon)
  analyses.cyclic_poisson_rate(population, clients_per_round, groups)
  mechanism = _mechanism(name, params_in, rounds, groups, None, buffers,
                         0 if seed is None else seed, bands)
  return analyses.cyclic_poisson(mechanism, rounds, groups, population, clients_per_round,
                                 noise_multiplier, target_epsilon, delta)


def balls_in_bins_release(name, params_in, epochs, batches_per_epoch, buffers, target_epsilon,
                          delta, mc_samples=None, seed=None, delta_verify=None,
                          calibration_margin=DEFAULT_CALIBRATION_MARGIN, bands=None
                          ) -> dict[str, Any]:
  """`analyses.balls_in_bins`: σ for (ε, δ) released by Estimate-Verify-Release (paper 003)
  for the mechanism built for E epochs of b bins (or loaded); `VerificationFailedError` if
  the verification fails."""
  _require(amplification.BALLS_IN_BINS, mechanism=name, epochs=epochs,
           batches_per_epoch=batches_per_epoch, target_epsilon=target_epsilon, delta=delta)
  delta_verify, mc_samples, required = analyses.check_balls_in_bins(
      epochs, batches_per_epoch, delta, delta_verify, calibration_margin, seed, mc_samples)
  # Without amplification a client takes part once per epoch: min-sep >= 1, k = E.
  mechanism = _mechanism(name, params_in, epochs * batches_per_epoch, batches_per_epoch,
                         epochs, buffers, 0 if seed is None else seed, bands)
  return analyses.balls_in_bins(
      mechanism, epochs, batches_per_epoch, target_epsilon, delta, delta_verify=delta_verify,
      mc_samples=mc_samples, required=required, seed=seed,
      calibration_margin=calibration_margin)


def _balls_in_bins(args: argparse.Namespace) -> dict[str, Any]:
  if args.noise_multiplier is not None:
    raise ValueError(
        f"--noise_multiplier={args.noise_multiplier:g} is not used with "
        "--sampling=balls_in_bins, which calibrates and verifies σ itself; drop it and "
        "pass --target_epsilon.")
  return balls_in_bins_release(
      args.mechanism, args.params_in, args.epochs, args.batches_per_epoch, args.buffers,
      args.target_epsilon, args.delta, mc_samples=args.mc_samples, seed=args.seed,
      delta_verify=args.delta_verify, calibration_margin=args.calibration_margin,
      bands=args.bands)


def b_min_sep_release(name, params_in, rounds, min_sep, delta, *, target_epsilon=None,
                      noise_multiplier=None, sampling_probability=None, population=None,
                      clients_per_round=None, warm_start=True, buffers=4, mc_samples=None,
                      seed=None, delta_verify=None,
                      calibration_margin=DEFAULT_CALIBRATION_MARGIN, bands=None,
                      availability="always", round_hours=1.0, availability_seed=0
                      ) -> dict[str, Any]:
  """`analyses.b_min_sep`: σ for --target_epsilon, or ε for --noise_multiplier, under
  b-min-sep sampling, released by Estimate-Verify-Release; the mechanism is built for at
  most ⌈n/b⌉ participations b apart (or loaded). With --availability other than always, the
  device-availability variant: the --population's simulated time zones (from the public
  --availability_seed, as a training run's --seed) put devices into classes, each accounted."""
  _require(amplification.B_MIN_SEP, mechanism=name, rounds=rounds, min_sep=min_sep,
           delta=delta)
  if (target_epsilon is None) == (noise_multiplier is None):
    raise ValueError("--sampling=b_min_sep needs exactly one of --target_epsilon (σ is "
                     "released) and --noise_multiplier (ε is released).")
  classes = None
  if availability != "always":
    if population is None:
      raise ValueError(f"--availability={availability} needs --population (the devices whose "
                       "simulated time zones are accounted).")
    classes = schemes.b_min_sep_availability(availability, population, availability_seed,
                                             rounds, round_hours)
  if sampling_probability is None:
    if population is None or clients_per_round is None:
      raise ValueError(
          "--sampling=b_min_sep needs --sampling_probability, or --population and "
          "--clients_per_round (p is then the one whose stationary expected cohort is "
          "--clients_per_round).")
    sampling_probability = schemes.b_min_sep_probability(
        clients_per_round / population, rounds, min_sep, warm_start, classes)
  sampling = b_min_sep_lib.BMinSepSampling(rounds, min_sep, sampling_probability,
                                           warm_start=warm_start, availability=classes)
  delta_verify, mc_samples, required = analyses.check_release(
      delta, delta_verify, calibration_margin, seed, mc_samples)
  mechanism = _mechanism(name, params_in, rounds, min_sep, None, buffers,
                         0 if seed is None else seed, bands)
  return analyses.b_min_sep(
      mechanism, sampling, delta, target_epsilon=target_epsilon,
      noise_multiplier=noise_multiplier, delta_verify=delta_verify, mc_samples=mc_samples,
      required=required, seed=seed, calibration_margin=calibration_margin)


# `--sampling`: each participation scheme's analysis (`schemes.Scheme.analysis`).
ANALYSES = {
    schemes.MIN_SEP: lambda a: matrix_mechanism(
        a.mechanism, a.params_in, a.rounds, a.min_sep, a.max_participations, a.buffers,
        a.noise_multiplier, a.target_epsilon, a.delta, a.seed, a.report_out, bands=a.bands),
    schemes.POISSON: lambda a: poisson(a.population, a.clients_per_round, a.rounds,
                                       a.noise_multiplier, a.delta),
    amplification.BALLS_IN_BINS: _balls_in_bins,
    amplification.B_MIN_SEP: lambda a: b_min_sep_release(
        a.mechanism, a.params_in, a.rounds, a.min_sep, a.delta,
        target_epsilon=a.target_epsilon, noise_multiplier=a.noise_multiplier,
        sampling_probability=a.sampling_probability, population=a.population,
        clients_per_round=a.clients_per_round, warm_start=a.warm_start, buffers=a.buffers,
        mc_samples=a.mc_samples, seed=a.seed, delta_verify=a.delta_verify,
        calibration_margin=a.calibration_margin, bands=a.bands,
        availability=a.availability, round_hours=a.round_hours,
        availability_seed=a.availability_seed),
    amplification.CYCLIC_POISSON: lambda a: cyclic_poisson(
        a.mechanism, a.params_in, a.rounds, a.min_sep, a.population, a.clients_per_round,
        a.buffers, a.noise_multiplier, a.target_epsilon, a.delta, a.seed, bands=a.bands),
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
      "--sampling", choices=schemes.analyses(), default=schemes.MIN_SEP,
      help="min_sep: at most k participations, >= b rounds apart (paper 004); poisson: "
           "Poisson user sampling, DP-FedAvg (paper 001); balls_in_bins: paper 003; "
           "cyclic_poisson: --min_sep groups Poisson-sampled in turn, banded C (bandmf, "
           "bsr, dpsgd); b_min_sep: a client waits --min_sep - 1 rounds after taking part, "
           "then is sampled with probability p (Dong & Ganesh 2026), any C")
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
                           f"{verification.DEFAULT_VERIFY_RATIO}·δ; Thm 2.1, paper 003)")
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
  parser.add_argument("--sampling_probability", type=float, default=None,
                      help="b_min_sep: p (default: from --population and --clients_per_round, "
                           "the p whose stationary expected cohort is --clients_per_round)")
  parser.add_argument("--warm_start", type=exits.parse_bool, default=True, metavar="BOOL",
                      help="b_min_sep: start each client's chain in its stationary law "
                           "(default true; false: everyone eligible at round 0)")
  parser.add_argument("--availability", choices=availability_lib.SIMULATED, default="always",
                      help="b-min-sep: only devices available at a round's simulated time "
                      "can be drawn (the device-availability variant; needs --population)")
  parser.add_argument("--round_hours", type=float, default=1.0,
                      help="b-min-sep with --availability: simulated hours between rounds")
  parser.add_argument("--availability_seed", type=int, default=0,
                      help="b-min-sep with --availability: the public seed of the devices' "
                      "simulated time zones (a training run's --seed)")
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
    result = ANALYSES[args.sampling](args)
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
