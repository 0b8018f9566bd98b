"""Trains Reddit next-word prediction with user-level DP (paper 001's DP-FedAvg setting).

  ./bazelw run //tasks/reddit:train                               # quick job, real text, ε = 8
  ./bazelw run //tasks/reddit:train -- --mechanism=blt               # BLT, device timer, ε = 8
  ./bazelw run //tasks/reddit:train -- --preset=paper001 --data_files=/data/RC_2015-01.bz2
  .venv/bin/python -m tasks.reddit.train --root_dir=/tmp/reddit --rounds=50

With no flags it trains a small tied-embedding LSTM on the real-text corpus as Reddit
comments (`tasks/real_text.py`; `--corpus=synthetic` for `tasks/reddit/synthetic.py`) with
DP-FedAvg and Poisson user sampling (paper 001, Algorithm 1), z calibrated to ε = 8, evaluates, and ends with AccuracyTop1 next to the
unigram baseline and the privacy report (ε at δ by PLD, with RDP and paper 001's moments
accountant alongside). `--preset=paper001` is paper 001's configuration (C̃ = 5000 expected
users per round, z = 1.0, S = 15, η = 6, B = 8, E = 1, unroll 10, 1,600 tokens per user,
vocabulary 10,000, the 1.35M-parameter model, δ = 1e-9; for the real data and a GPU). Any
other mechanism of `dp_fl.training` works through the flags; the quick preset gives the
DP-FTRL ones (`--mechanism=blt`, ...) the device-timer scheduler (DP-FedAvg itself requires
`--participation=poisson`). Rerunning with the same --root_dir resumes.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional, Sequence

from dp_fl.execution import runtime
from dp_fl.training import cli

TASK_FIELDS = ("data_files", "corpus", "vocab_size", "tokens_per_user", "test_fraction", "unroll",
               "batch_size", "embedding_size", "lstm_size", "eval_users", "eval_batch_size",
               "synthetic_authors", "synthetic_comments_per_author", "synthetic_cache_dir",
               "prepared_cache_dir")
_INT_FIELDS = ("vocab_size", "tokens_per_user", "unroll", "batch_size", "embedding_size",
               "lstm_size", "eval_users", "eval_batch_size", "synthetic_authors")

# Each preset: task settings, training settings, and training settings tuned per mechanism
# (cli.Preset). Flags given by the user override all of them.
PRESETS: dict[str, cli.Preset] = {
    # About 4 minutes on 2 CPU cores, ε = 8 at δ = 1e-6, on REAL text: the real-text corpus
    # of tasks/real_text.py as Reddit comments (~3,100 users with 300 tokens). A small
    # tied-embedding LSTM over a 1000-word vocabulary, DP-FedAvg with Poisson sampling at
    # q = 100 / population (paper 001, Alg. 1), z calibrated to ε = 8 for the population
    # (--noise_multiplier overrides it), S = 1. A 2-core quick job cannot use paper 001's
    # C̃ = 5000, so the noise is large against the update; two choices make the model learn
    # anyway (dp_fl/training/README.md): local Adam (local SGD learns this model slowly) and
    # server momentum 0.9 at rate 1.0 (0.3, tuned on the synthetic corpus, stays at the
    # constant prediction on real text: AccuracyTop1 0.054 vs unigram 0.064) with a
    # cooldown over the last 20 rounds (DP-FedAvg: 0.074 instead of 0.055 at round 60). The DP-FTRL
    # mechanisms (not Poisson-sampled) take the device timer: a 6 h timer with 0.2 h rounds
    # is a min-sep of 30 rounds (k = 2 in 60), which ~3,100 users fill with 100 per round.
    # Rates per mechanism chosen on real text (docs/RESULTS.md); `none` (unclipped) takes no
    # server momentum, which would make its step 10x an update nothing bounds (issue #19).
    "quick": cli.Preset(
        task=dict(vocab_size=1000, tokens_per_user=300, embedding_size=32, lstm_size=64,
                  synthetic_authors=4000, eval_users=300, corpus="real_text"),
        training=dict(rounds=60, clients_per_round=100, mechanism="dpfedavg",
                      participation="poisson", noise_multiplier=0.7, clip_norm=1.0,
                      client_optimizer="adam", client_learning_rate=0.01,
                      server_learning_rate=1.0, server_momentum=0.9, cooldown_rounds=20,
                      eval_every=20, checkpoint_every=20, delta=1e-6, noise_guard="scale"),
        per_mechanism={
            # Every banded/correlated DP-FTRL entry (BSR, BISR, BandInvMF included: they
            # are accounted under Poisson only group by group) takes the device timer.
            **{m: dict(participation="device_timer", timer_hours=6.0, round_hours=0.2,
                       min_sep=30)
               for m in ("blt", "bandmf", "two_band", "bsr", "bisr", "bandinvmf")},
            # cpSGD is accounted without amplification: the device timer as DP-FTRL's.
            "cpsgd": dict(participation="device_timer", timer_hours=6.0, round_hours=0.2,
                          min_sep=30, cpsgd_levels=256),
            # So are its successors (TFF's distributed discrete Gaussian and Skellam).
            **{m: dict(participation="device_timer", timer_hours=6.0, round_hours=0.2,
                       min_sep=30) for m in ("ddgauss", "skellam")},
            # Independent noise is run the way DP-SGD is (papers 003, 004): Poisson-sampled
            # (cyclic Poisson with one group) and amplified. Under the device timer (k = 2,
            # no amplification) it stays below unigram (0.057); amplified, σ 0.61 at ε = 8,
            # it learns past it (0.080 vs 0.064; docs/RESULTS.md).
            "dpsgd": dict(participation="cyclic_poisson", min_sep=1),
            # TreeAgg is not banded (no cyclic Poisson): balls-in-bins (N/m = 31 bins of ~100,
            # two epochs; paper 003) lowers its σ from 2.44 to 1.48 at ε = 8. Under the device
            # timer it stays at the constant prediction at every server rate tried (0.054).
            # min_sep = 30 as in the runs that chose it (the DP-FTRL rows' planned schedule).
            "tree": dict(participation="balls_in_bins", min_sep=30),
            "none": dict(server_momentum=0.0),
            "clip": dict(server_learning_rate=3.0),
        },
        calibrate_epsilon=8.0),
    # Paper 001 (Sec. 3, 4 and App. B): C̃ = 5000, z = 1.0, S = 15, T = 5000 rounds, δ = 1e-9
    # (its headline ε = 4.634 by the moments accountant for N = 763,430 users). Algorithm 1's
    # UserUpdateFedAvg takes local SGD steps θ ← θ − η∇ℓ with η = 6.0 (Sec. 3: "FedAvg
    # algorithm with a fixed learning rate of 6.0", B = 8, E = 1) and the server adds the
    # noised average update as is: client learning rate 6.0, server SGD with rate 1, no
    # momentum.
    "paper001": cli.Preset(
        task=dict(vocab_size=10000, tokens_per_user=1600, unroll=10, batch_size=8,
                  embedding_size=96, lstm_size=256, eval_users=10000),
        training=dict(rounds=5000, clients_per_round=5000, mechanism="dpfedavg",
                      participation="poisson", noise_multiplier=1.0, clip_norm=15.0,
                      client_learning_rate=6.0, client_epochs=1, server_learning_rate=1.0,
                      server_momentum=0.0, cooldown_rounds=0, eval_every=100,
                      checkpoint_every=50, delta=1e-9)),
}


def build_parser() -> argparse.ArgumentParser:
  """The binary's flags: preset, task (data, model) and every training flag."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  cli.add_binary_arguments(parser, PRESETS, "quick")
  task_group = parser.add_argument_group("task (Reddit data and model)")
  task_group.add_argument("--data_files", default=None,
                          help="comma-separated Reddit comments JSON-lines files (plain, .gz "
                               "or .bz2); default: the corpus of --corpus")
  task_group.add_argument("--corpus", default=None, choices=("synthetic", "real_text"),
                          help="without --data_files: the real-text corpus built from the "
                               "installed Python packages' docstrings and comments "
                               "(tasks/real_text.py; the quick preset's) or the synthetic one")
  for name in _INT_FIELDS:
    task_group.add_argument(f"--{name}", type=int, default=None)
  task_group.add_argument("--test_fraction", type=float, default=None)
  task_group.add_argument("--synthetic_comments_per_author", type=float, default=None)
  task_group.add_argument("--synthetic_cache_dir", default=None)
  task_group.add_argument("--prepared_cache_dir", default=None,
                          help="where the comments' SqlClientData conversion is cached "
                               "(default ~/.cache/dp_fl/reddit_prepared)")
  cli.add_training_arguments(parser)
  return parser


def settings_and_config(args: argparse.Namespace):
  """(RedditSettings, TrainingConfig) from preset < given flags; ValueError if bad."""
  from tasks.reddit import task as reddit_task  # pylint: disable=g-import-not-at-top
  values, config = cli.task_values_and_config(args, PRESETS, TASK_FIELDS,
                                              reddit_task.TASK_NAME)
  if isinstance(values.get("data_files"), str):
    values["data_files"] = tuple(p for p in values["data_files"].split(",") if p)
  return reddit_task.RedditSettings(**values), config


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = build_parser().parse_args(argv)
  runtime.configure_logging(args.verbosity)
  runtime.install_signal_handlers()
  from tasks.reddit import task as reddit_task  # pylint: disable=g-import-not-at-top
  return cli.run_task_binary(args, settings_and_config, reddit_task.make_task, PRESETS)


if __name__ == "__main__":
  sys.exit(main())
