"""StackOverflow reference accuracies: what a next-word model must beat.

`unigram_baseline_accuracy`: always predicting one word (by default the most frequent one);
`bigram_baseline_accuracy`: predicting each token's most frequent successor in a train set.
Both score batched (x, y) token ids (`tasks.stackoverflow.preprocessing.make_eval_dataset`)
with the accuracy metrics of the model (`tasks.stackoverflow.vocab.accuracy_masks`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from tasks.stackoverflow import vocab as vocab_lib


def _pairs(dataset: tf.data.Dataset, name: str) -> tuple[np.ndarray, np.ndarray]:
  """All (x, y) token pairs of a batched (x, y) dataset, flattened."""
  xs, ys = [], []
  for batch in dataset.as_numpy_iterator():
    if not isinstance(batch, tuple) or len(batch) != 2:
      raise ValueError(f"`{name}` must yield (x, y) batches of token ids (see "
                       f"make_eval_dataset); got an element of type {type(batch).__name__}.")
    xs.append(np.asarray(batch[0]).reshape(-1))
    ys.append(np.asarray(batch[1]).reshape(-1))
  if not ys:
    raise ValueError(f"`{name}` is empty; expected batches of (x, y) token ids.")
  return np.concatenate(xs).astype(np.int64), np.concatenate(ys).astype(np.int64)


def _check_ids(name: str, ids: vocab_lib.TokenIds, *arrays: np.ndarray) -> None:
  for array in arrays:
    if array.size and (array.min() < 0 or array.max() >= ids.extended_vocab_size):
      raise ValueError(
          f"`{name}` holds token ids outside [0, {ids.extended_vocab_size}) (vocab_size="
          f"{ids.vocab_size}, num_oov_buckets={ids.num_oov_buckets}); got ids in "
          f"[{array.min()}, {array.max()}]: was it made with another vocabulary?")


def _accuracies(predictions: np.ndarray, targets: np.ndarray,
                ids: vocab_lib.TokenIds) -> dict[str, float]:
  out = {}
  correct = predictions == targets
  for name, masked in vocab_lib.accuracy_masks(ids).items():
    keep = ~np.isin(targets, masked)
    out[name] = float(correct[keep].mean()) if keep.any() else 0.0
  return out


def _most_frequent_word(targets: np.ndarray, ids: vocab_lib.TokenIds) -> int:
  counts = np.bincount(targets, minlength=ids.extended_vocab_size)
  return 1 + int(np.argmax(counts[1:ids.vocab_size + 1]))


def best_constant_cross_entropy(targets: np.ndarray, pad: int = 0) -> float:
  """The loss of the best context-free prediction: the entropy (nats) of the empirical
  distribution of the non-pad `targets` — what the task's pad-masked cross-entropy of a model
  that ignores the context is at best (fit on these very targets). A model below it uses
  the context."""
  targets = np.asarray(targets).reshape(-1)
  counts = np.bincount(targets[targets != pad])
  counts = counts[counts > 0]
  if not counts.size:
    raise ValueError("`targets` has no non-pad token.")
  p = counts / counts.sum()
  return float(-(p * np.log(p)).sum())


def unigram_baselines(eval_dataset: tf.data.Dataset, vocab_size: int,
                      num_oov_buckets: int = vocab_lib.DEFAULT_NUM_OOV_BUCKETS
                      ) -> dict[str, float]:
  """The task's baselines from one pass over `eval_dataset`: the accuracies of
  `unigram_baseline_accuracy` and "loss", the `best_constant_cross_entropy` of its targets."""
  ids = vocab_lib.token_ids(vocab_size, num_oov_buckets)
  _, targets = _pairs(eval_dataset, "eval_dataset")
  out = _unigram_accuracies(targets, ids, None)
  out["loss"] = best_constant_cross_entropy(targets, ids.pad)
  return out


def unigram_baseline_accuracy(
    eval_dataset: tf.data.Dataset, vocab_size: int,
    num_oov_buckets: int = vocab_lib.DEFAULT_NUM_OOV_BUCKETS, token_id: Optional[int] = None,
) -> dict[str, float]:
  """Accuracies of always predicting one word: the reference a model must beat.

  Args:
    eval_dataset: batched (x, y) token ids (`make_eval_dataset`).
    vocab_size: V = len(vocab).
    num_oov_buckets: B.
    token_id: the word predicted (1..V). Default: the most frequent in-vocabulary word among
      the targets of `eval_dataset` (the best constant prediction; never pad, OOV, BOS or
      EOS).

  Returns:
    {"accuracy", "accuracy_without_out_of_vocab",
    "accuracy_without_out_of_vocab_or_end_of_sentence"} as the model's metrics of those
    names define them (`accuracy_masks`).
  """
  ids = vocab_lib.token_ids(vocab_size, num_oov_buckets)
  _, targets = _pairs(eval_dataset, "eval_dataset")
  return _unigram_accuracies(targets, ids, token_id)


def _unigram_accuracies(targets: np.ndarray, ids: vocab_lib.TokenIds,
                        token_id: Optional[int]) -> dict[str, float]:
  _check_ids("eval_dataset", ids, targets)
  if targets.max() == ids.pad:
    raise ValueError("`eval_dataset` has no target tokens (all padding).")
  if token_id is None:
    token_id = _most_frequent_word(targets, ids)
  elif (isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer))
        or not 1 <= token_id <= ids.vocab_size):
    raise ValueError(f"`token_id` must be a word id in [1, {ids.vocab_size}] or None; got "
                     f"{token_id!r}.")
  return _accuracies(np.full_like(targets, token_id), targets, ids)


def bigram_baseline_accuracy(
    train_dataset: tf.data.Dataset, eval_dataset: tf.data.Dataset, vocab_size: int,
    num_oov_buckets: int = vocab_lib.DEFAULT_NUM_OOV_BUCKETS,
) -> dict[str, float]:
  """Accuracies of a bigram predictor fit on `train_dataset`: a stronger reference.

  The predictor maps the current token (a word, an OOV bucket or BOS) to its most frequent
  next token in `train_dataset` (ties: the smaller id); tokens never seen there get the
  most frequent train word.

  Args:
    train_dataset: batched (x, y) token ids to fit on (e.g. `make_eval_dataset` of the
      train clients).
    eval_dataset: batched (x, y) token ids to score on.
    vocab_size: V = len(vocab).
    num_oov_buckets: B.

  Returns:
    The same keys as `unigram_baseline_accuracy`.
  """
  ids = vocab_lib.token_ids(vocab_size, num_oov_buckets)
  size = ids.extended_vocab_size
  train_x, train_y = _pairs(train_dataset, "train_dataset")
  eval_x, eval_y = _pairs(eval_dataset, "eval_dataset")
  _check_ids("train_dataset", ids, train_x, train_y)
  _check_ids("eval_dataset", ids, eval_x, eval_y)
  keep = train_y != ids.pad
  if not keep.any():
    raise ValueError("`train_dataset` has no target tokens (all padding).")
  codes, counts = np.unique(train_x[keep] * size + train_y[keep], return_counts=True)
  context, nxt = codes // size, codes % size
  order = np.lexsort((nxt, -counts, context))  # Per context: most frequent, then smaller id.
  context, nxt = context[order], nxt[order]
  first = np.r_[True, context[1:] != context[:-1]]
  predict = np.full(size, _most_frequent_word(train_y[keep], ids), dtype=np.int64)
  predict[context[first]] = nxt[first]
  return _accuracies(predict[eval_x], eval_y, ids)
