"""Where the noise guard's limits come from: its ratios for the real-text runs of docs/RESULTS.md.

  .venv/bin/python -m scripts.noise_guard_limits [--format json]
  ./bazelw run //scripts:noise_guard_limits

For each run recorded in docs/RESULTS.md (the quick presets of both tasks and the settings the
preset searches tried: σ, ζ, the cohort, C, the server's schedule, and the outcome on real
text), computes the noise guard's ratios (`dp_fl/mechanisms/signal_to_noise.py`) with the
task's model at its seed: one round's noise over ζ, the summed updates' noise over nζ, and the
noise left in the final model over the initial model's norm. The limits of
`dp_fl/training/noise_guard.py` separate the runs that learned past unigram from those that
did not (issue #42).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional, Sequence

import numpy as np

from dp_fl import exits
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import signal_to_noise

# (run, outcome, task, mechanism (None: C = I), rounds, min_sep, k, σ, cohort, ζ, cooldown)
RUNS = (
    ("StackOverflow quick BLT (the preset)", "learns: 0.115 vs unigram 0.068", "so", "blt",
     100, 100, 1, 0.955, 50, 1.0, 25),
    ("StackOverflow BLT, 20 clients a round, min-sep 12", "diverged: loss 230", "so", "blt",
     100, 12, None, 2.34, 20, 1.0, 25),
    ("StackOverflow DP-SGD, ζ = 1", "diverged: loss 17", "so", None, 100, 100, 1, 0.6, 50,
     1.0, 25),
    ("StackOverflow DP-SGD, ζ = 0.3 (its preset)", "learns: 0.082", "so", None, 100, 100, 1,
     0.6, 50, 0.3, 25),
    ("StackOverflow TreeAgg, ζ = 1", "unigram: 0.066", "so", "tree", 100, 100, 1, 1.588, 50,
     1.0, 25),
    ("StackOverflow TreeAgg, ζ = 0.3 (its preset)", "learns: 0.080", "so", "tree", 100, 100,
     1, 1.588, 50, 0.3, 25),
    ("Reddit quick DP-FedAvg (the preset)", "learns: 0.074 vs unigram 0.064", "reddit", None,
     60, 60, 1, 0.649, 100, 1.0, 20),
    ("Reddit quick BLT (its preset)", "learns: 0.084", "reddit", "blt", 60, 30, 2, 1.477, 100,
     1.0, 20),
)


def _model(task: str):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.keras.utils.set_random_seed(0)
  if task == "so":
    from tasks.stackoverflow import model  # pylint: disable=g-import-not-at-top
    return model.build_model(2000, embedding_size=64, lstm_size=128)
  from tasks.reddit import model  # pylint: disable=g-import-not-at-top
  return model.build_model(1000, embedding_size=32, lstm_size=64)


def _rates(rounds: int, cooldown: int, final_fraction: float = 0.1) -> list[float]:
  start = rounds - cooldown
  return [1.0 if cooldown == 0 or t < start
          else 1.0 - (1.0 - final_fraction) * (t - start + 1) / cooldown
          for t in range(rounds)]


def rows() -> list[dict[str, Any]]:
  models = {task: _model(task) for task in ("so", "reddit")}
  out = []
  for name, outcome, task, mechanism, n, b, k, sigma, m, zeta, cooldown in RUNS:
    weights = [np.asarray(w) for w in models[task].trainable_weights]
    inverse = None
    if mechanism is not None:
      built = catalog.build(mechanism, rounds=n, min_sep=b, max_participations=k).mechanism
      inverse = built.streaming_noise(n).materialize(n)
    ratios = signal_to_noise.signal_to_noise(
        inverse, rounds=n, noise_multiplier=sigma, clients_per_round=m,
        model_dimension=int(sum(w.size for w in weights)), learning_rates=_rates(n, cooldown),
        momentum=0.9, initial_model_norm=float(np.sqrt(sum(np.sum(w * w) for w in weights))),
        clip_norm=zeta)
    out.append({"run": name, "outcome": outcome, "round_noise": ratios.round_noise,
                "prefix_noise": ratios.prefix_noise, "model_noise": ratios.model_noise})
  return out


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--format", choices=("table", "json"), default="table")
  exits.add_debug_flag(parser)
  args = parser.parse_args(None if argv is None else list(argv))

  def body() -> int:
    table = rows()
    if args.format == "json":
      print(json.dumps(table, indent=1))
      return exits.COMPLETED
    print("| run | outcome on real text | round noise / ζ | summed noise / nζ | "
          "model noise / ‖w₀‖ |")
    print("| --- | --- | --- | --- | --- |")
    for r in table:
      print(f"| {r['run']} | {r['outcome']} | {r['round_noise']:.3g} | "
            f"{r['prefix_noise']:.3g} | {r['model_noise']:.3g} |")
    return exits.COMPLETED

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
