"""Paper 000's learning experiment (cpSGD, Sec. 5, Fig. 2) at laptop scale: accuracy vs bits.

Paper 000 trains a three-hidden-layer MLP (60 ReLU units each) on infinite MNIST, one example
per client, 10,000 clients per round, one epoch, and plots accuracy against the bits each
client sends per coordinate, for the Gaussian mechanism and for cpSGD, Rot(s_k(Bin(m, p)),
HA) (Sec. 4.3, Thm. 4), at several ε. Here: the same model (`model.Mlp`) on scikit-learn's
8 × 8 digits (1,437 training clients; MNIST IDX files with --dataset=mnist), n clients per
round, each client's update its own gradient clipped to L2 norm D, the server taking an SGD
step (with momentum) on the mean estimate of its mechanism: `none` (the plain mean),
`gaussian` (the clipped sum plus central Gaussian noise), `cpsgd` (clients' rotated,
quantized, Binomial-noised messages through secure aggregation) or its successors `ddgauss`
and `skellam` (TFF 0.87's distributed discrete Gaussian and Skellam at B bits, run by TFF
itself) — the name table is `dp_fl/aggregators/mean_estimators.py`, the NumPy estimators
`dp_fl/mechanisms/mean_estimation.py`'s and their calibration to (ε, δ) over E participations
`dp_fl/accounting/mean_estimation.py`'s.

**Epochs.** With one epoch (`--epochs 1`, the paper's protocol: per-round ε = overall ε) a
1,437-client data set gives only ⌊1437/n⌋ rounds, too few to learn; the default runs E
epochs, each client taking part once per epoch (E times in all, composed in the accounting).

**What ε covers.** Each training example is one client. Neighbouring data sets replace one
client's example by another (the cohort size n is public). Each epoch is a fresh public
permutation cut into ⌊N/n⌋ rounds of n (the N mod n left over sit that epoch out), so a
client is in at most E rounds; ε is for those E rounds composed — every model the server
computes is covered. No amplification by sampling or shuffling is claimed. The seeds are
public (reproducible research runs), so a run is not private against anyone who knows them:
ε is the mechanism's, run with secret randomness. The test images are not protected. `none`
has no privacy. The Gaussian is central DP (a trusted server adds the noise, or clients add
shares of it); cpSGD's, ddgauss's and skellam's noise is the clients' own, the server seeing
only the modular sum (secure aggregation); ddgauss and skellam draw it from unseeded
randomness, so their runs do not repeat exactly.

This is the binary (flags → `program.Settings`, `program.SweepSpec`); the training loop and the
sweep are `program.py`, the table and figure drawn from the results JSON `results.py`.

Run (writes results.json, results.md and accuracy_vs_bits.png in --out_dir):

  .venv/bin/python -m tasks.digits.experiment                 # the full sweep (ε 2,4,8)
  .venv/bin/python -m tasks.digits.experiment --epochs 1      # the paper's one-epoch protocol
  .venv/bin/python -m tasks.digits.experiment --quick --format json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Callable, Optional, Sequence

from dp_fl import _checks
from dp_fl import exits
from dp_fl import files
from dp_fl.aggregators import distributed_dp
from tasks.digits import data
from tasks.digits import model
from tasks.digits import program
from tasks.digits import results

DEFAULT_OUT_DIR = os.path.join("docs", "results", "cpsgd_digits")

FULL = dict(clients_per_round=200, epochs=5, learning_rate=0.2, momentum=0.9, clip_norm=1.0,
            delta=1e-9, binomial_p=0.5, epsilons=(2.0, 4.0, 8.0), levels=(2, 4, 16, 64),
            bits=(12, 14, 16, 18), num_seeds=3)
QUICK = dict(FULL, epochs=2, epsilons=(8.0,), levels=(16,), bits=(16,), num_seeds=1)

SETTINGS_FLAGS = {  # Settings' scalar fields as flags: (help, type, check).
    "clients_per_round": ("n, clients (= examples) per round", int,
                          _checks.check_positive_int),
    "epochs": ("E: each client takes part once per epoch; 1 is the paper's protocol", int,
               _checks.check_positive_int),
    "learning_rate": ("server SGD learning rate", float, _checks.check_positive),
    "momentum": ("server heavy-ball momentum (0: plain SGD)", float,
                 lambda name, v: _checks.check_in_range(name, v, 0.0, 0.999)),
    "clip_norm": ("D, the L2 clip of each client's gradient", float, _checks.check_positive),
    "delta": ("δ of every (ε, δ) (paper 000: 1e-9)", float,
              lambda name, v: _checks.check_delta(v, name)),
    "binomial_p": ("p of cpSGD's Bin(m, p) noise shares", float, _checks.check_open_unit),
}


# --------------------------------------------------------------------------------------------
# Flags


def _number_list(flag: str, text: str, kind: Callable[[str], Any]) -> tuple[Any, ...]:
  values = []
  for item in text.split(","):
    try:
      values.append(kind(item.strip()))
    except ValueError:
      raise ValueError(f"--{flag}={text!r}: {item.strip()!r} is not a "
                       f"{'number' if kind is float else 'whole number'}; give a comma-"
                       f"separated list such as {'2,4,8' if kind is float else '2,4,16,64'}."
                       ) from None
  if not values:
    raise ValueError(f"--{flag} is empty; give at least one value.")
  return tuple(values)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true",
                      help=f"a small sweep for tests ({QUICK['epochs']} epochs, ε = "
                           f"{','.join(f'{e:g}' for e in QUICK['epsilons'])}, k = "
                           f"{','.join(map(str, QUICK['levels']))}, B = "
                           f"{','.join(map(str, QUICK['bits']))}, 1 seed); writes "
                           "nothing unless --out_dir is given")
  parser.add_argument("--dataset", default="sklearn_digits", help=f"one of {data.DATASETS}")
  parser.add_argument("--data_dir", default=None, help="MNIST's IDX files (--dataset=mnist)")
  parser.add_argument("--test_fraction", type=float, default=0.2,
                      help="sklearn_digits: the test share of the public split")
  parser.add_argument("--split_seed", type=int, default=0,
                      help="sklearn_digits: the public seed of the train/test split")
  parser.add_argument("--mechanisms", default=",".join(program.MECHANISMS),
                      help=f"comma-separated subset of {', '.join(program.MECHANISMS)}")
  parser.add_argument("--epsilons", default=None, help="comma-separated ε targets "
                      f"(default {','.join(f'{e:g}' for e in FULL['epsilons'])})")
  parser.add_argument("--levels", default=None, help="comma-separated cpSGD quantization "
                      f"levels k (default {','.join(map(str, FULL['levels']))})")
  parser.add_argument("--bits", default=None, help="comma-separated bits per coordinate B of "
                      f"ddgauss and skellam (1..{distributed_dp.MAX_BITS}; default "
                      f"{','.join(map(str, FULL['bits']))})")
  parser.add_argument("--num_seeds", type=int, default=None,
                      help=f"seeds 0..S-1 per setting (default {FULL['num_seeds']})")
  for flag, (help_text, _, _) in SETTINGS_FLAGS.items():
    parser.add_argument(f"--{flag}", type=str, default=None,
                        help=f"{help_text} (default {FULL[flag]})")
  parser.add_argument("--hidden_layers", default=None,
                      help="comma-separated hidden widths (default "
                           f"{','.join(map(str, model.PAPER_HIDDEN_LAYERS))}, paper 000)")
  parser.add_argument("--replot", default=None, metavar="RESULTS_JSON",
                      help="rewrite results.md and the figure from a results.json (no "
                           "training) into --out_dir (default: beside it)")
  parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                      help="processes running the sweep's runs in parallel")
  parser.add_argument("--out_dir", default=None,
                      help=f"where results.json/.md and {results.FIGURE_PNG} go (default "
                           f"{DEFAULT_OUT_DIR}, relative to the repository root; none for "
                           "--quick); '' writes nothing")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  parser.add_argument("--progress", action="store_true", help="a line per finished run")
  exits.add_debug_flag(parser)
  return parser.parse_args(argv)


def _scalar(flag: str, text: Optional[str], default: Any, kind: type,
            check: Callable[[str, Any], Any]) -> Any:
  if text is None:
    return default
  try:
    value = kind(text)
  except ValueError:
    what = "number" if kind is float else "whole number"
    raise ValueError(f"--{flag}={text!r} is not a {what}; e.g. --{flag}={FULL[flag]}."
                     ) from None
  try:
    return check(flag, value)
  except ValueError as e:
    raise ValueError(f"--{flag}={text}: {e}") from None


def resolve(args: argparse.Namespace) -> tuple[program.Settings, program.SweepSpec]:
  """Flags → (Settings, SweepSpec); every bad value is a ValueError naming flag and fix."""
  preset = QUICK if args.quick else FULL
  mechanisms = tuple(m.strip() for m in args.mechanisms.split(",") if m.strip())
  unknown = [m for m in mechanisms if m not in program.MECHANISMS]
  if unknown or not mechanisms:
    raise ValueError(f"--mechanisms={args.mechanisms!r}: unknown {unknown or 'empty'}; use a "
                     f"comma-separated subset of {', '.join(program.MECHANISMS)}.")
  epsilons = (_number_list("epsilons", args.epsilons, float) if args.epsilons is not None
              else preset["epsilons"])
  for eps in epsilons:
    if not (math.isfinite(eps) and eps > 0):
      raise ValueError(f"--epsilons: {eps:g} is not a finite ε > 0; e.g. --epsilons=2,4,8.")
  levels = (_number_list("levels", args.levels, int) if args.levels is not None
            else preset["levels"])
  for k in levels:
    if k < 2:
      raise ValueError(f"--levels: k = {k} quantization levels; cpSGD needs k >= 2 "
                       "(e.g. --levels=2,4,16,64).")
  bits = _number_list("bits", args.bits, int) if args.bits is not None else preset["bits"]
  for b in bits:
    if not 1 <= b <= distributed_dp.MAX_BITS:
      raise ValueError(f"--bits: B = {b} bits per coordinate; TFF's distributed DP takes "
                       f"1..{distributed_dp.MAX_BITS} (e.g. --bits=12,14,16,18).")
  num_seeds = preset["num_seeds"] if args.num_seeds is None else args.num_seeds
  if num_seeds < 1:
    raise ValueError(f"--num_seeds={num_seeds}: give at least 1 seed.")
  scalars = {flag: _scalar(flag, getattr(args, flag), preset[flag], kind, check)
             for flag, (_, kind, check) in SETTINGS_FLAGS.items()}
  hidden = (_number_list("hidden_layers", args.hidden_layers, int)
            if args.hidden_layers is not None else model.PAPER_HIDDEN_LAYERS)
  if any(width < 1 for width in hidden):
    raise ValueError(f"--hidden_layers={args.hidden_layers!r}: widths must be >= 1 "
                     "(e.g. --hidden_layers=60,60,60).")
  settings = program.Settings(**scalars, hidden_layers=tuple(hidden))
  if args.workers < 1:
    raise ValueError(f"--workers={args.workers}: give at least 1 process.")
  return settings, program.SweepSpec(mechanisms, epsilons, levels, tuple(range(num_seeds)),
                                     bits)


def _out_dir(args: argparse.Namespace) -> Optional[str]:
  """--out_dir, relative paths against the repository (`bazel run` starts elsewhere)."""
  out_dir = args.out_dir if args.out_dir is not None else (None if args.quick
                                                           else DEFAULT_OUT_DIR)
  if not out_dir:
    return None
  return files.workspace_path(out_dir)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)

  def body() -> int:
    if args.replot:
      return results.replot(args.replot, args.out_dir or os.path.dirname(args.replot))
    settings, spec = resolve(args)
    digits = data.load(args.dataset, args.data_dir, args.test_fraction, args.split_seed)
    if settings.clients_per_round > digits.train_labels.size:
      raise ValueError(f"--clients_per_round={settings.clients_per_round} exceeds the "
                       f"{digits.train_labels.size} training clients; use at most that.")
    progress = (lambda line: print(line, file=sys.stderr, flush=True)) if args.progress \
        else None
    output = program.sweep(digits, settings, spec, workers=args.workers, progress=progress)
    out_dir = _out_dir(args)
    if out_dir:
      paths = results.write_outputs(output, out_dir)
      print(f"wrote {', '.join(paths.values())}", file=sys.stderr)
    print(json.dumps(output, indent=1) if args.format == "json" else results.markdown(output))
    return exits.COMPLETED

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
