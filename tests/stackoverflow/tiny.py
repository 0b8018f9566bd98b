"""The tiny synthetic StackOverflow setting the binaries' tests run on (seconds per run)."""

from __future__ import annotations

from tasks.stackoverflow import synthetic

CORPUS = synthetic.SyntheticConfig(
    num_train_clients=40, num_heldout_clients=10, num_test_clients=10, num_words=800,
    num_topics=4, sentences_per_client_median=12.0)
FLAGS = ["--vocab_size=300", "--embedding_size=8", "--lstm_size=8",
         "--max_elements_per_client=8", "--eval_clients=5", "--clients_per_round=4",
         "--cooldown_rounds=0", "--participation=min_sep_rounds", "--min_sep=3",
         "--eval_every=2"]  # No mechanism's own flag: the runs use several mechanisms.
