"""Builds or loads a correlated-noise mechanism and reports its sensitivity, errors and losses.

  ./bazelw run //scripts:mechanism -- --mechanism=blt --rounds=2052 --min_sep=342 \
      --max_participations=6 --buffers=4 --format=json
  .venv/bin/python -m scripts.mechanism --mechanism=bandmf --rounds=2052 --min_sep=342

Evaluating a mechanism at settings other than those it was optimized for (`--eval_rounds`,
`--eval_min_sep`, `--eval_max_participations`) is how users check robustness (paper 004,
Figs. 3-5). `--params_out` saves the parameters as JSON; `--params_in` loads them instead of
optimizing.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional, Sequence

from dp_fl import _checks
from dp_fl import exits
from dp_fl import resources
from dp_fl.mechanisms import catalog
from dp_fl.training import registry  # pylint: disable=unused-import  (registers every mechanism)


def check_flags(args: argparse.Namespace) -> None:
  """Refuses out-of-range flags and an unwritable --params_out before any work."""
  top = resources.MAX_ROUNDS
  for flag, optional in (("rounds", False), ("min_sep", False),
                         ("max_participations", True), ("buffers", False),
                         ("bands", True), ("eval_rounds", True), ("eval_min_sep", True),
                         ("eval_max_participations", True)):
    value = getattr(args, flag)
    if not (optional and value is None):
      _checks.check_in_range(f"--{flag}", value, 1, top, integer=True)
  _checks.check_in_range("--seed", args.seed, 0, 2 ** 63 - 1, integer=True)
  resources.check_writable_output("params_out", args.params_out)
  if args.eval_rounds is not None:
    resources.require(catalog.evaluation_cost(args.mechanism, args.eval_rounds),
                      {"eval_rounds": args.eval_rounds})


def run(mechanism: str, rounds: int, min_sep: int, max_participations: Optional[int],
        buffers: int, bands: Optional[int], optimize_for: str, seed: int,
        params_in: Optional[str], params_out: Optional[str], eval_rounds: Optional[int],
        eval_min_sep: Optional[int], eval_max_participations: Optional[int]) -> dict[str, Any]:
  """Builds or loads the mechanism, evaluates it, and returns the report as a dict."""
  built = catalog.load_or_build(
      mechanism, params_in, "`--params_in`", rounds=rounds, min_sep=min_sep,
      max_participations=max_participations, buffers=buffers, bands=bands,
      optimize_for=optimize_for, seed=seed)
  evaluation = catalog.evaluate(built.mechanism, rounds, min_sep, max_participations)
  params = built.mechanism.to_dict()
  if params_out:
    catalog.save(built.mechanism, params_out)
  report = evaluation.to_dict()
  report["optimize_seconds"] = built.optimize_seconds
  report["notes"] = list(built.notes) + report["notes"]
  report["params"] = params
  if any(x is not None for x in (eval_rounds, eval_min_sep, eval_max_participations)):
    n2 = eval_rounds if eval_rounds is not None else rounds
    b2 = eval_min_sep if eval_min_sep is not None else min_sep
    report["evaluation_at"] = catalog.evaluate(
        built.mechanism, n2, b2, eval_max_participations).to_dict()
  return report


def format_table(report: dict[str, Any]) -> str:
  keys = ["mechanism", "rounds", "min_sep", "max_participations", "sensitivity",
          "sensitivity_kind", "max_error", "rms_error", "max_loss", "rms_loss",
          "buffers", "optimize_seconds"]
  rows = [(k, report[k]) for k in keys]
  if report.get("sensitivity_kind") == "lower_bound":
    rows.insert(keys.index("sensitivity_kind") + 1,
                ("sensitivity_guaranteed", report["sensitivity_guaranteed"]))
  if "evaluation_at" in report:
    ev = report["evaluation_at"]
    rows.append(("evaluated at", f"n={ev['rounds']} b={ev['min_sep']} "
                                 f"k={ev['max_participations']}"))
    rows += [(f"  {k}", ev[k]) for k in ("sensitivity", "max_loss", "rms_loss")]
  width = max(len(k) for k, _ in rows)
  lines = [f"{k:<{width}}  {v:.6g}" if isinstance(v, float) else f"{k:<{width}}  {v}"
           for k, v in rows]
  lines += [f"note: {n}" for n in report["notes"]]
  return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--mechanism", required=True, choices=catalog.names())
  parser.add_argument("--rounds", type=int, required=True,
                      help="n: rounds to build/optimize for")
  parser.add_argument("--min_sep", type=int, required=True,
                      help="b: minimum separation between participations")
  parser.add_argument("--max_participations", type=int, default=None,
                      help="k (default ceil(n / b))")
  parser.add_argument("--buffers", type=int, default=4, help="d: BLT buffers")
  parser.add_argument("--bands", type=int, default=None,
                      help="p: bands of C (bandmf, bsr) or C⁻¹ (bisr, bandinvmf); "
                           "default min(b, n)")
  parser.add_argument("--optimize_for", choices=("max", "rms"), default=None,
                      help="loss an optimized mechanism is built for (default: the one "
                           "training uses: max for blt and two_band, rms for bandinvmf; "
                           "BandMF: always rms)")
  parser.add_argument("--seed", type=int, default=0, help="seed of the optimizer's starts")
  parser.add_argument("--params_in", default=None, help="load mechanism parameters (JSON)")
  parser.add_argument("--params_out", default=None, help="save mechanism parameters (JSON)")
  parser.add_argument("--eval_rounds", type=int, default=None, help="also evaluate at n2")
  parser.add_argument("--eval_min_sep", type=int, default=None, help="... at min-sep b2")
  parser.add_argument("--eval_max_participations", type=int, default=None, help="... with k2")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  resources.add_budget_flags(parser)
  exits.add_debug_flag(parser)
  return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Exit codes as in dp_fl/exits.py: 0 done, 2 bad flag (or too large for the budgets)."""
  args = parse_args(argv)

  def body() -> int:
    check_flags(args)
    report = run(args.mechanism, args.rounds, args.min_sep, args.max_participations,
                 args.buffers, args.bands, args.optimize_for, args.seed, args.params_in,
                 args.params_out, args.eval_rounds, args.eval_min_sep,
                 args.eval_max_participations)
    print(json.dumps(report, indent=2) if args.format == "json" else format_table(report))
    return exits.COMPLETED

  return exits.guarded(resources.with_budget_flags(args, body), debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
