"""Privacy accounting from the command line: matrix mechanisms, DP-FedAvg, balls-in-bins.

Matrix mechanisms (DP-FTRL) under min-separation participation (paper 004):
  ./bazelw run //scripts:privacy -- --mechanism=blt --params_in=blt.json --rounds=2000 \
      --min_sep=400 --max_participations=5 --noise_multiplier=7.379 --delta=1e-10
  (or --target_epsilon=E to calibrate the noise multiplier)

DP-FedAvg with Poisson user sampling (paper 001):
  .venv/bin/python -m scripts.privacy --sampling=poisson --population=763430 \
      --clients_per_round=5000 --rounds=5000 --noise_multiplier=1.0 --delta=1e-9

Balls-in-bins batching, Monte Carlo σ calibration (paper 003):
  .venv/bin/python -m scripts.privacy --sampling=balls_in_bins --epochs=16 \
      --batches_per_epoch=128 --mechanism=blt --target_epsilon=1 --delta=8e-6

Prints a table by default, JSON with --format=json; --report_out=FILE.md also writes the
App. C privacy report (matrix mechanisms).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any, Optional, Sequence

from dp_fl.accounting import balls_in_bins
from dp_fl.accounting import report as report_lib
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import catalog

def _require(sampling: str, **values: Any) -> None:
  missing = [f"--{k}" for k, v in values.items() if v is None]
  if missing:
    raise ValueError(f"{', '.join(missing)} required for --sampling={sampling}.")


def _mechanism(name: str, params_in: Optional[str], rounds: int, min_sep: int,
               max_participations: Optional[int], buffers: int, seed: int
               ) -> catalog.Mechanism:
  """Loads --params_in, or builds (optimizes) the mechanism for the schedule."""
  if params_in:
    try:
      with open(params_in) as f:
        mechanism = catalog.from_dict(json.load(f))
    except (OSError, json.JSONDecodeError) as e:
      raise ValueError(f"`--params_in` {params_in!r} is not a readable JSON file: {e}") from e
    if mechanism.name != name:
      raise ValueError(f"`--params_in` {params_in!r} holds a {mechanism.name!r} mechanism, "
                       f"not {name!r}; pass --mechanism={mechanism.name}.")
    return mechanism
  return catalog.build(name, rounds=rounds, min_sep=min_sep,
                       max_participations=max_participations, buffers=buffers,
                       seed=seed).mechanism


def matrix_mechanism(name, params_in, rounds, min_sep, max_participations, buffers,
                     noise_multiplier, target_epsilon, delta, seed, report_out
                     ) -> dict[str, Any]:
  """ρ, ε for a matrix mechanism under Π(b, k), or σ for a target ε (paper 004, Sec. 3.1)."""
  _require("min_sep", mechanism=name, rounds=rounds, min_sep=min_sep, delta=delta)
  if (noise_multiplier is None) == (target_epsilon is None):
    raise ValueError("Pass exactly one of --noise_multiplier and --target_epsilon.")
  mechanism = _mechanism(name, params_in, rounds, min_sep, max_participations, buffers, seed)
  k, note = catalog.feasible_participations(rounds, min_sep, max_participations)
  if noise_multiplier is None:
    sens = mechanism.sensitivity(rounds, min_sep, k)
    noise_multiplier = zcdp.noise_multiplier_for_epsilon(sens.value, target_epsilon, delta)
  participation = report_lib.Participation(rounds, min_sep, k, source="configured")
  rep = report_lib.matrix_mechanism_report(mechanism, noise_multiplier, participation, delta)
  if report_out:
    with open(report_out, "w") as f:
      f.write(rep.to_markdown())
  out = {
      "mechanism": name, "rounds": rounds, "min_sep": min_sep, "max_participations": k,
      "noise_multiplier": rep.noise_multiplier, "sensitivity": rep.sensitivity,
      "sensitivity_is_lower_bound": rep.sensitivity_is_lower_bound, "rho": rep.rho,
      "epsilon": rep.epsilon, "delta": rep.delta, "conversion": "exact_gaussian",
      "notes": ([note] if note else []) + list(rep.notes),
  }
  if target_epsilon is not None:
    out["target_epsilon"] = target_epsilon
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


def balls_in_bins_calibration(name, params_in, epochs, batches_per_epoch, buffers,
                              target_epsilon, delta, mc_samples, seed) -> dict[str, Any]:
  """σ for a target ε under balls-in-bins batching, by Monte Carlo (paper 003, Alg. 2)."""
  _require("balls_in_bins", mechanism=name, epochs=epochs, batches_per_epoch=batches_per_epoch,
           target_epsilon=target_epsilon, delta=delta)
  rounds = epochs * batches_per_epoch
  # Without amplification a client takes part once per epoch: min-sep >= 1, k = E.
  mechanism = _mechanism(name, params_in, rounds, batches_per_epoch, epochs, buffers, seed)
  pair = balls_in_bins.dominating_pair(num_bins=batches_per_epoch, num_epochs=epochs,
                                       **mechanism.lower_triangular_input(rounds))
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", balls_in_bins.InsufficientSamplesWarning)
    cal = balls_in_bins.calibrate_noise_multiplier(
        pair, epsilon=target_epsilon, delta=delta, num_samples=mc_samples, seed=seed)
  return {
      "mechanism": name, "epochs": epochs, "batches_per_epoch": batches_per_epoch,
      "rounds": rounds, "target_epsilon": target_epsilon, "delta": delta,
      "noise_multiplier": cal.noise_multiplier, "mc_samples": cal.num_samples,
      "standard_error": cal.noise_multiplier_standard_error,
      "delta_standard_error": cal.delta_standard_error,
      "tail_samples": cal.num_tail_samples,
      "noise_multiplier_without_amplification": cal.unamplified_noise_multiplier,
      "notes": [str(w.message) for w in caught] + [
          "Monte Carlo estimate: for a formal guarantee calibrate at δ_verify < δ and run "
          "Estimate-Verify-Release (paper 003, Alg. 1) on a fresh seed."],
  }


def format_table(result: dict[str, Any]) -> str:
  rows = [(k, v) for k, v in result.items() if k != "notes"]
  width = max(len(k) for k, _ in rows)
  lines = [f"{k:<{width}}  {v:.6g}" if isinstance(v, float) else f"{k:<{width}}  {v}"
           for k, v in rows]
  return "\n".join(lines + [f"note: {n}" for n in result.get("notes", [])])


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
      "--sampling", choices=("min_sep", "poisson", "balls_in_bins"), default="min_sep",
      help="min_sep: at most k participations, >= b rounds apart (paper 004); poisson: "
           "Poisson user sampling, DP-FedAvg (paper 001); balls_in_bins: paper 003")
  parser.add_argument("--mechanism", choices=catalog.MECHANISMS, default=None)
  parser.add_argument("--params_in", default=None,
                      help="mechanism parameters (JSON from scripts/mechanism)")
  parser.add_argument("--rounds", type=int, default=None, help="n (or T for DP-FedAvg)")
  parser.add_argument("--min_sep", type=int, default=None, help="b: minimum separation")
  parser.add_argument("--max_participations", type=int, default=None,
                      help="k (default ceil(n / b))")
  parser.add_argument("--buffers", type=int, default=4,
                      help="BLT buffers when optimizing (no --params_in)")
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
  parser.add_argument("--mc_samples", type=int, default=2**20, help="Monte Carlo samples")
  parser.add_argument("--seed", type=int, default=0,
                      help="seed (Monte Carlo sample, optimizer starts)")
  parser.add_argument("--report_out", default=None, help="write the Markdown privacy report")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  try:
    if args.sampling == "min_sep":
      result = matrix_mechanism(
          args.mechanism, args.params_in, args.rounds, args.min_sep, args.max_participations,
          args.buffers, args.noise_multiplier, args.target_epsilon, args.delta, args.seed,
          args.report_out)
    elif args.sampling == "poisson":
      result = poisson(args.population, args.clients_per_round, args.rounds,
                       args.noise_multiplier, args.delta)
    else:
      result = balls_in_bins_calibration(
          args.mechanism, args.params_in, args.epochs, args.batches_per_epoch, args.buffers,
          args.target_epsilon, args.delta, args.mc_samples, args.seed)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(json.dumps(result, indent=2) if args.format == "json" else format_table(result))
  return 0


if __name__ == "__main__":
  sys.exit(main())
