"""Reddit next-word prediction (paper 001 Sec. 3, App. B): data, synthetic data, model.

Modules:
  synthetic  a deterministic synthetic Reddit comments dump (.jsonl.gz), cached
  data       JSON-lines parsing with malformed-line counters, tokenization, grouping by
             author, the 1,600-token rule, held-out test posts, the vocabulary, id
             windows, and the cached TFF `SqlClientData`
  model      the App. B tied-embedding LSTM (1,346,528 trainable parameters), the
             unit-norm embedding projection, the pad-masked loss and AccuracyTop1

Notation: V = vocab_size; ids: pad 0, words 1..V, UNK V+1, BOS V+2, EOS V+3.
"""
