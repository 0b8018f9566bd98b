"""LEASGD vs D-PSGD with per-worker DP-SGD (paper 002): Table 1 and Figure 2 on real digits.

Runs both algorithms for each worker count (default m = 5 and 15), non-private (plain SGD)
and private (per-example clipping to C, N(0, σ²C²) per worker and iteration, the same σ for
both algorithms), and prints Table 1's layout — test accuracy and total ε per algorithm —
next to paper 002's numbers, the communication of each run and whether the paper's three
claims hold here (`dp_fl/decentralized/comparison.py`). Writes in --out_dir: one directory
per run (checkpoint, metrics/eval.csv, TensorBoard, result.json; an interrupted comparison
resumes where it stopped, finished runs are read back), comparison.json / .md, and
loss_vs_iterations.png and loss_vs_vectors.png (Figure 2 (a) and (b)).

**Privacy.** Each worker's examples are protected (add/remove one example of its shard);
released are the models it transmits, its final model and LEASGD's noisy loss reports. ε is
every worker's by the RDP accountant (Poisson rate L/|shard|, T iterations, σ; loss reports
as a joint Gaussian) — the table shows the largest. NOT covered: the training losses
(`train_loss` in eval.csv, result.json, comparison.json/.md and the figures) are measured on
the workers' own shards without noise; keep the private runs' as private as the shards
(`accounting.NOT_COVERED`, in every private result.json). The test set is not protected. The
noise and sampling key comes from OS entropy unless --reproducible_noise_seed is given (then
anyone knowing the seed can remove the noise: research runs only).

  ./bazelw run //tasks/decentralized:compare -- --out_dir /tmp/decentralized
  .venv/bin/python -m tasks.decentralized.compare --num_workers 5 --iterations 200 \
      --format json
  .venv/bin/python -m tasks.decentralized.compare --dataset cifar10 --data_dir DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Optional, Sequence

from dp_fl import exits
from dp_fl import files
from dp_fl.decentralized import comparison
from dp_fl.decentralized import graphs
from dp_fl.decentralized import training
from tasks.decentralized import data

DEFAULT_OUT_DIR = "decentralized_compare"
# The defaults (chosen on the digits, docs/RESULTS.md "LEASGD vs D-PSGD"); MLP for the digits
# and MNIST, the CNN for CIFAR-10 as in paper 002 Sec. 4.
DEFAULTS = training.Settings(
    algorithm=training.LEASGD, num_workers=5, iterations=400, batch_size=64,
    learning_rate=0.3, clip_norm=1.0, noise_multiplier=5.0, loss_noise_multiplier=10.0,
    loss_clip=2.0, delta=1e-5, l2=1e-4, graph="ring", communication_interval=1,
    recategorization_interval=10, elastic=1.0, eval_every=20, checkpoint_every=100)


def _int_list(flag: str, text: str) -> tuple[int, ...]:
  try:
    values = tuple(int(v) for v in text.split(",") if v.strip())
  except ValueError:
    values = ()
  if not values or any(v < 2 for v in values):
    raise ValueError(f"--{flag}={text!r}: give comma-separated worker counts >= 2, e.g. 5,15.")
  return values


def _choices(flag: str, text: str, known: Sequence[str]) -> tuple[str, ...]:
  values = tuple(v.strip() for v in text.split(",") if v.strip())
  unknown = [v for v in values if v not in known]
  if not values or unknown:
    raise ValueError(f"--{flag}={text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'empty'}"
                     f"; use a comma-separated subset of {', '.join(known)}.")
  return values


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dataset", default="sklearn_digits", help=f"one of {data.DATASETS}")
  parser.add_argument("--data_dir", default=None,
                      help="MNIST's IDX files or CIFAR-10's python batches")
  parser.add_argument("--max_train", type=int, default=None,
                      help="use only the first N training examples (quick runs)")
  parser.add_argument("--split_seed", type=int, default=0,
                      help="public permutation of the train/test split and the shards")
  parser.add_argument("--model", default=None, help="mlp or cnn (default: cnn for cifar10, "
                      "else mlp)")
  parser.add_argument("--num_workers", default="5,15", help="worker counts m, e.g. 5,15")
  parser.add_argument("--algorithms", default=",".join(training.ALGORITHMS))
  parser.add_argument("--settings", default=",".join(comparison.SETTINGS),
                      help="non_private and/or private")
  d = DEFAULTS
  for flag, kind, help_text in (
      ("iterations", int, "T, iterations of every run"),
      ("batch_size", int, "L, each worker's expected Poisson batch"),
      ("learning_rate", float, "η"),
      ("clip_norm", float, "C, per-example L2 clip (private runs)"),
      ("noise_multiplier", float, "σ: gradient noise N(0, σ²C²) per worker and iteration"),
      ("loss_noise_multiplier", float, "σ_ℓ: noise on LEASGD's reported clipped loss sums"),
      ("loss_clip", float, "B: per-example losses clipped to [0, B] before reporting"),
      ("delta", float, "δ of the reported (ε, δ)"),
      ("l2", float, "λ, L2 regularization of the kernels"),
      ("communication_interval", int, "τ: LEASGD communicates every τ iterations"),
      ("recategorization_interval", int, "k: LEASGD re-chooses leaders every kτ iterations"),
      ("elastic", float, "ρ: LEASGD's elastic factor (ηρ <= 1)"),
      ("eval_every", int, "iterations between evaluations (points of the figures)"),
      ("checkpoint_every", int, "iterations between checkpoints")):
    parser.add_argument(f"--{flag}", type=kind, default=getattr(d, flag), help=help_text)
  parser.add_argument("--num_leaders", type=int, default=None, help="default ⌈m/2⌉")
  parser.add_argument("--graph", default=d.graph, help=f"D-PSGD's graph: {graphs.GRAPHS}")
  parser.add_argument("--reproducible_noise_seed", type=int, default=None,
                      help="derive the noise/sampling key from this public seed (research "
                      "runs; default: OS entropy, kept in the checkpoints only)")
  parser.add_argument("--out_dir", default=DEFAULT_OUT_DIR,
                      help="run directories, comparison.json/.md and the PNGs ('' to write "
                      "nothing; relative paths are against the repository root)")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  parser.add_argument("--progress", action="store_true", help="a line per evaluation")
  exits.add_debug_flag(parser)
  return parser.parse_args(argv)


def _out_dir(text: str) -> Optional[str]:
  if not text:
    return None
  return files.workspace_path(text)


def base_settings(args: argparse.Namespace) -> training.Settings:
  model = args.model or ("cnn" if args.dataset == "cifar10" else "mlp")
  names = [f.name for f in dataclasses.fields(training.Settings)]
  values = {k: getattr(args, k) for k in names if hasattr(args, k) and k != "num_workers"}
  settings = training.Settings(**{**values, "algorithm": training.LEASGD, "num_workers": 2,
                                  "model": model, "private": True})
  return settings.validated()


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)

  def body() -> int:
    counts = _int_list("num_workers", args.num_workers)
    algorithms = _choices("algorithms", args.algorithms, training.ALGORITHMS)
    settings = _choices("settings", args.settings, comparison.SETTINGS)
    base = base_settings(args)
    if args.max_train is not None and args.max_train < 1:
      raise ValueError(f"--max_train={args.max_train}: give a positive number of examples.")
    out_dir = _out_dir(args.out_dir)
    progress = (lambda line: print(line, file=sys.stderr, flush=True)) if args.progress \
        else None
    results = comparison.run_all(
        base, lambda m: data.load(args.dataset, m, args.data_dir, args.max_train,
                                  args.split_seed),
        counts, out_dir, algorithms=algorithms, settings=settings,
        reproducible_seed=args.reproducible_noise_seed, progress=progress)
    summary = comparison.summarize(results, counts, args.dataset)
    if out_dir:
      paths = comparison.write_outputs(summary, results, counts, out_dir)
      print(f"wrote {', '.join(paths.values())}", file=sys.stderr)
    print(json.dumps(summary, indent=1) if args.format == "json"
          else comparison.markdown(summary))
    return exits.COMPLETED

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
