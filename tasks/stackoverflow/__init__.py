"""StackOverflow next-word prediction (paper 004 Sec. 4.1, Table 3): data, model, metrics.

Modules:
  synthetic  a deterministic synthetic corpus in TFF's real SQLite format
             (`ensure_corpus()` -> a directory that
             `tff.simulation.datasets.stackoverflow.load_data(cache_dir=...)` reads)
  data       checked loading through TFF's `load_data`, the vocabulary (word-count files or
             counts of the train split), TFF's baseline preprocessing without shuffling,
             the token-id layout, unigram and bigram reference accuracies; an exact
             in-memory path for the training clients (`make_train_client_data_in_memory`)
  model      TFF's baseline recurrent model (4,050,748 trainable parameters at the paper's
             sizes), the pad-masked loss and the masked accuracy metrics

Notation: V = vocab_size (words, ids 1..V), B = num_oov_buckets, V + B + 3 model classes.
"""
