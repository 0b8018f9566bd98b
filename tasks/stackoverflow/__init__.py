"""StackOverflow next-word prediction (paper 004 Sec. 4.1, Table 3): data, model, metrics.

Modules (README.md has the table, the import order and the token ids):
  database       TFF's SQLite format, its checks, loading through TFF's `load_data`
  vocab          word counts, the vocabulary, the token-id layout, accuracy masks
  preprocessing  TFF's baseline preprocessing without shuffling (train clients, eval data)
  in_memory      the same training batches from one read of the database
  baselines      unigram and bigram reference accuracies
  data           the public facade: re-exports the names of the five modules above
  synthetic      a deterministic synthetic corpus in TFF's real SQLite format
                 (`ensure_corpus()` -> a directory that
                 `tff.simulation.datasets.stackoverflow.load_data(cache_dir=...)` reads)
  model          TFF's baseline recurrent model (4,050,748 trainable parameters at the
                 paper's sizes), the pad-masked loss and the masked accuracy metrics

Notation: V = vocab_size (words, ids 1..V), B = num_oov_buckets, V + B + 3 model classes.
"""
