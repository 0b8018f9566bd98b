"""Trains StackOverflow next-word prediction with user-level DP (the main dp_fl job).

  ./bazelw run //tasks/stackoverflow:train                       # quick job, real text, ε = 8
  ./bazelw run //tasks/stackoverflow:train -- --mechanism=tree   # σ recalibrated to ε = 8
  ./bazelw run //tasks/stackoverflow:train -- --corpus=synthetic --noise_multiplier=0.5
  ./bazelw run //tasks/stackoverflow:train -- --preset=paper_table3 --data_dir=/data/so
  .venv/bin/python -m tasks.stackoverflow.train --root_dir=/tmp/so --rounds=50

With no flags it trains a small LSTM on the real-text corpus (the docstrings and comments of
the installed Python packages, one user per module, in TFF's SQLite format; built once and
cached — tasks/real_text.py) with BLT-DP-FTRL and the device-timer scheduler, σ calibrated
to ε = 8 at δ = 1e-5, shows progress, evaluates, and ends with the accuracy next to the
unigram baseline and the privacy report (ε at δ from the participation actually realized),
and writes the run's figures and report.md. `--preset=paper_table3` is paper 004's StackOverflow
configuration (n = 2052 rounds, 1000 clients per round, 6 epochs with min-sep 342, the
4,050,748-parameter LSTM; for the real data and a GPU machine). Every training flag of
`dp_fl.training` is available; rerunning with the same --root_dir resumes.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional, Sequence

from dp_fl.execution import runtime
from dp_fl.training import cli

TASK_FIELDS = ("data_dir", "corpus", "word_count_file", "vocab_size", "num_oov_buckets",
               "sequence_length", "batch_size", "max_elements_per_client", "embedding_size",
               "lstm_size", "eval_clients", "eval_max_elements_per_client",
               "synthetic_clients", "synthetic_cache_dir", "in_memory")

# Each preset: task settings, training settings, and training settings tuned per mechanism
# (cli.Preset). Flags given by the user override all of them.
PRESETS: dict[str, cli.Preset] = {
    # About 3 minutes on 2 CPU cores (plus ~2 minutes the first time, to build the corpus),
    # ε = 8 at δ = 1e-5, on REAL text: the real-text corpus of tasks/real_text.py (the
    # prose of the installed Python packages, one user per module, ~5400 train users).
    # A small LSTM over a 2000-word vocabulary, 50 clients per round with 32 sentences
    # each, BLT-DP-FTRL (d = 4) with the device timer. The privacy comes from a population
    # large enough that nobody takes part twice: a 20 h timer with 0.2 h rounds is a
    # min-sep of 100 = n rounds (k = 1). σ is calibrated to ε = 8 for the planned schedule
    # of whatever mechanism is chosen (--noise_multiplier overrides it). Measured: accuracy
    # without OOV/EOS 0.115 vs unigram 0.068. (`--corpus=synthetic`: 6000 synthetic users;
    # its content words are harder, 0.058 vs unigram 0.091 in 100 rounds.) Learning rates
    # were chosen per mechanism on real text (docs/RESULTS.md); `none` (unclipped) takes
    # local Adam, whose steps bound each coordinate of the update: with local SGD at rate 1
    # nothing bounds the update, server momentum 0.9 makes the step 10x that, and it
    # diverges (issue #19). With Adam, momentum 0.9 is safe (0.134 vs 0.108 without, one
    # seed at server rate 1).
    "quick": cli.Preset(
        task=dict(vocab_size=2000, embedding_size=64, lstm_size=128, batch_size=16,
                  max_elements_per_client=32, eval_clients=100,
                  eval_max_elements_per_client=32, corpus="real_text",
                  synthetic_clients=6000),
        training=dict(rounds=100, clients_per_round=50, mechanism="blt", blt_buffers=4,
                      noise_multiplier=0.96, clip_norm=1.0, participation="device_timer",
                      timer_hours=20.0, round_hours=0.2, min_sep=100,
                      client_learning_rate=1.0, server_learning_rate=1.0,
                      server_momentum=0.9, cooldown_rounds=25, eval_every=25,
                      checkpoint_every=25, delta=1e-5, noise_guard="scale"),
        per_mechanism={
            "none": dict(client_optimizer="adam", client_learning_rate=0.01),
            # Noise-free clipped updates take a 3x larger server step (content-word accuracy
            # 0.129 vs 0.080 at rate 1 on real text, 100 rounds).
            "clip": dict(server_learning_rate=3.0),
            # Independent noise (prefix-sum RMSE at ε = 8, k = 1, n = 100: DP-SGD 4.27,
            # TreeAgg 2.84, BLT 1.42) swamps updates clipped at 1: DP-SGD diverges, TreeAgg
            # stays at the unigram figure. Clipping at 0.3 with two local epochs (more progress
            # per clipped update) learns past it: 0.082 (DP-SGD) and 0.080 (TreeAgg) vs
            # unigram 0.068 on real text (docs/RESULTS.md).
            **{m: dict(clip_norm=0.3, client_epochs=2) for m in ("dpsgd", "tree")},
            # cpSGD's noise is independent too, and its analysis (the Binomial mechanism's
            # Rényi DP with replace-one sensitivities) needs more of it at one ε: at ε = 8 σ is
            # 1.55 (vs DP-SGD's 0.60) and it stays below unigram; ε = 32 (σ 0.52) learns past
            # it (docs/RESULTS.md). 256 levels: the discretization costs ≈ 1.2x in variance.
            "cpsgd": dict(clip_norm=0.3, client_epochs=2, cpsgd_levels=256),
            # cpSGD's successors (TFF's DistributedDpSumFactory, issue #45): independent noise
            # from the clients, DP-SGD's settings; 16 bits per coordinate by default.
            **{m: dict(clip_norm=0.3, client_epochs=2) for m in ("ddgauss", "skellam")},
            # DP-FedAvg is paper 001's: Poisson user sampling (expected cohort 50), amplified.
            # Its noise is independent across rounds, as DP-SGD's: ζ = 0.3 with two local
            # epochs, as DP-SGD's preset (at BLT's ζ = 1 the guard warned, model noise 19×,
            # and the run ended below unigram: content words 0.029 vs 0.068; issue #42).
            "dpfedavg": dict(participation="poisson", clip_norm=0.3, client_epochs=2),
        },
        calibrate_epsilon=8.0),
    # Paper 004, Table 3 (its ref. [8] setting): 2052 rounds, 6 epochs of 342 rounds (each
    # client once per epoch: min-sep 342, k = 6), 1000 clients per round, the paper-size
    # LSTM, server SGD with momentum 0.9 and a cooldown over the last quarter.
    "paper_table3": cli.Preset(
        task=dict(vocab_size=10000, embedding_size=96, lstm_size=670, batch_size=16,
                  max_elements_per_client=256, eval_clients=10000, in_memory=False),
        training=dict(rounds=2052, clients_per_round=1000, mechanism="blt", blt_buffers=4,
                      participation="cyclic", min_sep=342, max_participations=6,
                      clip_norm=1.0, client_learning_rate=0.5, server_learning_rate=1.0,
                      server_momentum=0.9, cooldown_rounds=513,
                      cooldown_final_fraction=0.05, eval_every=100, checkpoint_every=50,
                      delta=1e-6, noise_multiplier=1.0)),
}


def build_parser() -> argparse.ArgumentParser:
  """The binary's flags: preset, task (data, model) and every training flag."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  cli.add_binary_arguments(parser, PRESETS, "quick")
  task_group = parser.add_argument_group("task (StackOverflow data and model)")
  task_group.add_argument("--data_dir", default=None,
                          help="directory with stackoverflow.sqlite (TFF's format); default: "
                               "the corpus of --corpus")
  task_group.add_argument("--corpus", default=None, choices=("synthetic", "real_text"),
                          help="without --data_dir: the real-text corpus built from the "
                               "installed Python packages' docstrings and comments "
                               "(tasks/real_text.py; the quick preset's) or the synthetic one")
  task_group.add_argument("--word_count_file", default=None,
                          help="stackoverflow.word_count vocabulary file")
  for name in TASK_FIELDS[3:]:
    if name not in ("synthetic_cache_dir", "in_memory"):
      task_group.add_argument(f"--{name}", type=int, default=None)
  task_group.add_argument("--synthetic_cache_dir", default=None)
  task_group.add_argument("--in_memory", type=cli.parse_bool, default=None,
                          help="tokenize the train split into memory once (default for the "
                               "quick preset; false for the full real corpus)")
  cli.add_training_arguments(parser)
  return parser


def settings_and_config(args: argparse.Namespace):
  """(StackOverflowSettings, TrainingConfig) from preset < given flags; ValueError if bad."""
  from tasks.stackoverflow import task as so_task  # pylint: disable=g-import-not-at-top
  values, config = cli.task_values_and_config(args, PRESETS, TASK_FIELDS, so_task.TASK_NAME)
  return so_task.StackOverflowSettings(**values), config


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = build_parser().parse_args(argv)
  runtime.configure_logging(args.verbosity)
  runtime.install_signal_handlers()
  from tasks.stackoverflow import task as so_task  # pylint: disable=g-import-not-at-top
  return cli.run_task_binary(args, settings_and_config, so_task.make_task, PRESETS)


if __name__ == "__main__":
  sys.exit(main())
