"""Compares the mechanisms at one target ε on StackOverflow (synthetic by default).

For each mechanism (default: none, clip, dpsgd, tree, bandmf, blt) the noise multiplier is
calibrated so the *planned* schedule (rounds, min-sep, max participations of the preset)
reaches the target ε at δ, the same training job runs, and the final held-out accuracy and
the ε of the *realized* participation are collected into a table (JSON + Markdown).

  ./bazelw run //tasks/stackoverflow:compare -- --calibrate_epsilon=8 --out_dir=/tmp/so_cmp
  .venv/bin/python -m tasks.stackoverflow.compare --mechanisms=dpsgd,blt --rounds=40

Every flag of tasks/stackoverflow/train.py applies (preset, data, model, training). The two
non-private rows bracket the noise's cost: `none` is plain FedAvg (no clipping), `clip`
clips each update to ζ like the private runs but adds no noise.

Unless --data_dir is given the numbers are on the SYNTHETIC corpus: they compare mechanisms
with each other, not with the paper's accuracies on the real StackOverflow data.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any, Optional, Sequence

from dp_fl import exits
from dp_fl import files
from dp_fl import runtime

DEFAULT_MECHANISMS = ("none", "clip", "dpsgd", "tree", "bandmf", "blt")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  from tasks.stackoverflow import train  # pylint: disable=g-import-not-at-top
  parser = train.build_parser()
  parser.description = __doc__.splitlines()[0]
  parser.add_argument("--mechanisms", default=",".join(DEFAULT_MECHANISMS),
                      help="comma-separated subset of none,dpsgd,tree,bandmf,blt")
  parser.add_argument("--out_dir", default=os.path.join(tempfile.gettempdir(),
                                                        "dp_fl_stackoverflow_compare"))
  parser.set_defaults(calibrate_epsilon=8.0)
  return parser.parse_args(argv)


def _markdown(rows: list[dict[str, Any]], target_epsilon: float, synthetic: bool,
              baseline: dict[str, float]) -> str:
  lines = [f"# StackOverflow: mechanisms at ε = {target_epsilon:g}", ""]
  if synthetic:
    lines += ["**Synthetic data** (tasks/stackoverflow/synthetic.py, TFF's format): these "
              "numbers compare mechanisms with each other; they are not the paper's "
              "StackOverflow accuracies.", ""]
  lines += ["| mechanism | noise multiplier | accuracy (no OOV/EOS) | accuracy | ε realized | "
            "rounds | seconds |", "| --- | --- | --- | --- | --- | --- | --- |"]
  for r in rows:
    eps = "∞ (no privacy)" if r["epsilon"] is None else f"{r['epsilon']:.3g}"
    sigma = "—" if r["noise_multiplier"] is None else f"{r['noise_multiplier']:.4g}"
    lines.append(f"| {r['mechanism']} | {sigma} | {r['accuracy_no_oov_eos']:.4f} | "
                 f"{r['accuracy']:.4f} | {eps} | {r['rounds']} | {r['seconds']:.0f} |")
  lines += ["", "Unigram baseline (always the most frequent word): " + ", ".join(
      f"{k} {v:.4f}" for k, v in baseline.items())]
  return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  runtime.configure_logging(args.verbosity)
  runtime.install_signal_handlers()
  return exits.guarded(lambda: _compare(args), debug=args.debug)


def _compare(args: argparse.Namespace) -> int:
  from dp_fl.training import program  # pylint: disable=g-import-not-at-top
  from tasks.stackoverflow import task as so_task  # pylint: disable=g-import-not-at-top
  from tasks.stackoverflow import train  # pylint: disable=g-import-not-at-top

  mechanisms = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
  unknown = [m for m in mechanisms if m not in DEFAULT_MECHANISMS]
  if unknown or not mechanisms:
    raise ValueError(f"`--mechanisms` must be a comma-separated subset of "
                     f"{DEFAULT_MECHANISMS}; got {args.mechanisms!r}.")
  if args.root_dir is not None:
    raise ValueError(f"--root_dir={args.root_dir!r} is not used by compare: it writes one run "
                     "per mechanism under --out_dir (<out_dir>/<mechanism>). Pass --out_dir.")
  if not args.calibrate_epsilon > 0 or args.calibrate_epsilon == float("inf"):
    raise ValueError(f"--calibrate_epsilon must be a finite ε > 0; got "
                     f"{args.calibrate_epsilon!r}.")
  rows = []
  try:
    settings, base = train.settings_and_config(args)
    task = so_task.make_task(settings)
    os.makedirs(args.out_dir, exist_ok=True)
    with runtime.execution_context():
      for mechanism in mechanisms:
        config = base.replace(mechanism=mechanism,
                              root_dir=os.path.join(args.out_dir, mechanism))
        if config.is_private:
          config = config.replace(noise_multiplier=program.calibrate_noise_multiplier(
              config, args.calibrate_epsilon))
        print(f"== {mechanism}: noise multiplier {config.noise_multiplier:.4g}", flush=True)
        result = program.run(task, config)
        metrics = result.eval_metrics
        rows.append({
            "mechanism": mechanism,
            "noise_multiplier": config.noise_multiplier if config.is_private else None,
            "accuracy": metrics.get("accuracy", float("nan")),
            "accuracy_no_oov_eos": metrics.get(
                "accuracy_without_out_of_vocab_or_end_of_sentence", float("nan")),
            "epsilon": result.epsilon, "delta": config.delta,
            "rounds": result.rounds_completed, "seconds": result.seconds,
        })
  except ValueError as e:  # The runs' directories are compare's --out_dir/<mechanism>.
    raise ValueError(str(e).replace("`--root_dir`", "`--out_dir`").replace(
        "--root_dir", "--out_dir")) from None
  synthetic = args.data_dir is None
  output = {"target_epsilon": args.calibrate_epsilon, "synthetic_data": synthetic,
            "preset": args.preset, "baseline": dict(task.baseline_metrics), "rows": rows}
  files.atomic_write_json(os.path.join(args.out_dir, "comparison.json"), output, indent=1)
  markdown = _markdown(rows, args.calibrate_epsilon, synthetic, dict(task.baseline_metrics))
  files.atomic_write_text(os.path.join(args.out_dir, "comparison.md"), markdown)
  print(json.dumps(output, indent=1) if args.format == "json" else markdown)
  return 0


if __name__ == "__main__":
  sys.exit(main())
