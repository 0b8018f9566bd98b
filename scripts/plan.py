"""Plans a private run before launch: realized min-sep, mechanisms for it, and ε per mechanism.

Paper 004, Sec. 5 ("Extrapolation", Figs. 6, 8-9): given the population, report goal, device
timer, round duration, availability and rounds, the device-timer emulation predicts the min-sep
and max participations the run will realize (next to the optimistic ⌊N/m⌋, ⌈n/b⌉); BLT (and
BandMF when n allows) is optimized for that prediction; ε is printed per mechanism at a noise
multiplier (or σ for a target ε), with ε and losses if the realized min-sep comes out lower.

  ./bazelw run //scripts:plan -- --population=16600 --report_goal=12 --rounds=2000 \
      --timer_hours=590 --round_hours=0.5 --availability=diurnal --noise_multiplier=16.1 \
      --delta=1e-10 --out_dir=plan_ptbr
  .venv/bin/python -m scripts.plan ... --target_epsilon=1 --format json

--out_dir writes plan.json, epsilon_vs_rounds.png and <mechanism>.json, the parameters to pass
as --mechanism_params to the training binaries (the table prints the full flags). The ε of
every row equals `scripts/privacy --params_in=<mechanism>.json` for the same (n, b, k, σ).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional, Sequence

from dp_fl import _checks
from dp_fl import exits
from dp_fl import files
from dp_fl import resources
from dp_fl import results
from dp_fl.mechanisms import catalog
from dp_fl.participation import availability as availability_lib
from dp_fl.planning import plan as plan_lib
from dp_fl.training import registry  # pylint: disable=unused-import  (registers every mechanism)

PLAN_JSON = "plan.json"
EPSILON_PNG = "epsilon_vs_rounds.png"


def _fractions(text: str) -> tuple[float, ...]:
  try:
    return tuple(float(x) for x in text.split(",") if x.strip())
  except ValueError as e:
    raise ValueError(f"--robustness={text!r} must be comma-separated fractions in (0, 1), "
                     "e.g. 0.9,0.75,0.5.") from e


def _mechanisms(text: str) -> tuple[str, ...]:
  names = tuple(x.strip() for x in text.split(",") if x.strip())
  unknown = [n for n in names if n not in catalog.names()]
  twice = sorted({n for n in names if names.count(n) > 1})
  if unknown or twice or not names:
    what = (f"{unknown} not among {catalog.names()}" if unknown
            else f"{twice} listed twice" if twice else "names no mechanism")
    raise ValueError(f"--mechanisms={text!r}: {what}; pass e.g. --mechanisms=blt,bandmf,tree.")
  return names


def settings_from_flags(args: argparse.Namespace) -> plan_lib.PlanSettings:
  """The flags as `PlanSettings`; errors name the flag, its value and the fix."""
  for flag, low, high, integer in (("population", 1, 2 ** 40, True),
                                   ("report_goal", 1, 2 ** 40, True),
                                   ("rounds", 1, resources.MAX_ROUNDS, True),
                                   ("trials", 1, 1000, True), ("buffers", 1, 64, True),
                                   ("timer_hours", 1e-6, 1e6, False),
                                   ("round_hours", 1e-6, 1e4, False),
                                   ("delta", 1e-100, 0.1, False),
                                   ("noise_multiplier", 1e-3, 1e6, False),
                                   ("target_epsilon", 1e-3, 700.0, False),
                                   ("bandmf_max_seconds", 1e-3, 1e7, False),
                                   ("client_tokens", 1, 1e12, False)):
    value = getattr(args, flag)
    if value is not None:
      _checks.check_in_range(f"--{flag}", value, low, high, integer=integer)
  if args.client_tokens is not None and args.model_dimension is None:
    raise ValueError(f"--client_tokens={args.client_tokens:g} estimates the job's time only "
                     "with --model_dimension (the model's parameters, e.g. 4050748 for "
                     "paper 004's LSTM); add it, or drop --client_tokens.")
  if args.report_goal > args.population:
    raise ValueError(f"--report_goal={args.report_goal} exceeds --population="
                     f"{args.population}: a round cannot take more devices than exist.")
  if (args.noise_multiplier is None) == (args.target_epsilon is None):
    raise ValueError("Pass exactly one of --noise_multiplier and --target_epsilon.")
  if args.compare is not None and args.target_epsilon is not None:
    raise ValueError(f"--compare={args.compare} has no effect with --target_epsilon (σ is "
                     "calibrated per mechanism and their noise compared); drop --compare.")
  if args.seed < 0:
    raise ValueError(f"--seed={args.seed} must be a non-negative integer (the run's public "
                     "--seed, which the simulated time zones derive from).")
  robustness = _fractions(args.robustness)
  if any(not 0.0 < f < 1.0 for f in robustness):
    raise ValueError(f"--robustness={args.robustness!r}: every fraction must lie in (0, 1), "
                     "e.g. 0.9,0.75,0.5 (min-sep 90 %, 75 %, 50 % of the prediction).")
  if args.out_dir is not None and not args.out_dir.strip():
    raise ValueError("--out_dir is empty; give a directory, or omit the flag to write nothing.")
  return plan_lib.PlanSettings(
      population=args.population, report_goal=args.report_goal, rounds=args.rounds,
      timer_hours=args.timer_hours, round_hours=args.round_hours,
      availability=args.availability, seed=args.seed, delta=args.delta,
      noise_multiplier=args.noise_multiplier, target_epsilon=args.target_epsilon,
      mechanisms=_mechanisms(args.mechanisms), buffers=args.buffers, trials=args.trials,
      robustness=robustness, bandmf_max_seconds=args.bandmf_max_seconds,
      compare=args.compare or "rms_noise", model_dimension=args.model_dimension,
      client_tokens=args.client_tokens, b_min_sep=args.b_min_sep)


def plan_data(plan: plan_lib.Plan, params: Optional[dict[str, str]]) -> dict:
  """The plan as JSON; with the written parameter files, the training flags of each trainable
  mechanism (None for one without streaming noise, e.g. tree_full)."""
  data = plan.to_dict()
  if params:
    data["mechanism_params"] = params
    data["training_flags"] = {
        m.name: (plan_lib.training_flags(plan, m, params[m.name])
                 if m.buffers is not None else None) for m in plan.mechanisms}
  return data


def write_outputs(plan: plan_lib.Plan, out_dir: str) -> dict[str, str]:
  """plan.json, the ε figure and every mechanism's parameters; returns their paths by name."""
  os.makedirs(out_dir, exist_ok=True)
  params = {}
  for mechanism in plan.mechanisms:
    path = os.path.join(out_dir, f"{mechanism.name}.json")
    files.atomic_write_json(path, mechanism.params, indent=1)
    params[mechanism.name] = path
  # compute → JSON → draw: the figure is drawn from plan.json read back.
  results.write(out_dir, plan_data(plan, params), PLAN_JSON,
                figures={EPSILON_PNG: plan_lib.epsilon_figure})
  return params


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--population", type=int, required=True, help="N: devices")
  parser.add_argument("--report_goal", type=int, required=True, help="m: clients per round")
  parser.add_argument("--rounds", type=int, required=True, help="n: planned rounds")
  parser.add_argument("--timer_hours", type=float, required=True,
                      help="T: hours before a device may take part again")
  parser.add_argument("--round_hours", type=float, default=1.0,
                      help="simulated duration of a round (the training flag of that name)")
  parser.add_argument("--availability", choices=availability_lib.SIMULATED, default="always")
  parser.add_argument("--seed", type=int, default=0,
                      help="the run's public --seed (simulated time zones)")
  parser.add_argument("--delta", type=float, default=1e-10, help="δ (paper 004: 1e-10)")
  parser.add_argument("--noise_multiplier", type=float, default=None,
                      help="σ of the first mechanism (see --compare)")
  parser.add_argument("--target_epsilon", type=float, default=None,
                      help="calibrate σ per mechanism for this ε")
  parser.add_argument("--compare", choices=plan_lib.COMPARE, default=None,
                      help="with --noise_multiplier; rms_noise (default): the other "
                           "mechanisms get the σ of equal RMS prefix-sum noise (equal utility, "
                           "paper 004 Sec. 5); noise_multiplier: all the same σ")
  parser.add_argument("--mechanisms", default=",".join(plan_lib.DEFAULT_MECHANISMS),
                      help=f"comma-separated, from {', '.join(catalog.names())}")
  parser.add_argument("--buffers", type=int, default=4, help="BLT buffers d")
  parser.add_argument("--model_dimension", type=int, default=None,
                      help="d, the model's parameters: also state each mechanism's noise "
                           "against the clipped signal and warn when it is beyond what learns")
  parser.add_argument("--client_tokens", type=float, default=None,
                      help="tokens one client trains on a round (StackOverflow: sentences × "
                           "21); with --model_dimension: the job's training time on this "
                           "machine, as the training binaries estimate it")
  parser.add_argument("--trials", type=int, default=5, help="emulation trials")
  parser.add_argument("--b_min_sep", action="store_true",
                      help="also estimate the σ each mechanism needs for its ε under b-min-sep "
                           "sampling (b = the predicted min-sep; p from N and m): what "
                           "amplification the population would buy (Monte Carlo, minutes at "
                           "thousands of rounds)")
  parser.add_argument("--robustness", default=",".join(map(str, plan_lib.DEFAULT_ROBUSTNESS)),
                      help="fractions f: also report ε and losses at min-sep ⌊f·b⌋")
  parser.add_argument("--bandmf_max_seconds", type=float, default=120.0,
                      help="skip BandMF when its estimated optimization time exceeds this")
  parser.add_argument("--out_dir", default=None,
                      help="write plan.json, epsilon_vs_rounds.png and <mechanism>.json "
                           "(relative paths: against the repository)")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  resources.add_budget_flags(parser)
  exits.add_debug_flag(parser)
  return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Exit codes as in dp_fl/exits.py: 0 planned, 2 bad flag (or too large for the budgets)."""
  args = parse_args(argv)

  def body() -> int:
    settings = settings_from_flags(args)
    out_dir = files.workspace_path(args.out_dir) if args.out_dir is not None else None
    if out_dir:
      resources.ensure_writable_dir("--out_dir", out_dir)
    plan = plan_lib.make_plan(settings)
    params = write_outputs(plan, out_dir) if out_dir else None
    if args.format == "json":
      print(json.dumps(plan_data(plan, params), indent=1))
    else:
      print(plan_lib.format_table(plan, params))
    return exits.COMPLETED

  return exits.guarded(resources.with_budget_flags(args, body), debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
