"""The Reddit next-word-prediction task of paper 001 (Sec. 3, App. B) for the training program.

Data: Reddit comments as JSON lines (`--data_files`, plain / .gz / .bz2), or by default the
synthetic corpus of `tasks/reddit/synthetic.py` (generated once and cached), or with
`corpus="real_text"` the real-text corpus of `tasks/real_text.py` (the prose of the installed
Python packages as comments, one author per module; built once and cached). `data.prepare`
converts them ONCE into a cached TFF `SqlClientData` database (comments read, grouped by
author with random posts held out for the test set, the 1,600-token rule applied, a
vocabulary counted, each user cut into (x, y) windows; `<prepared_cache_dir>/<fingerprint>/`),
and later runs read that cache. The training clients are then held in memory
(`InMemoryClientData`, loaded from the database in one query by `data.read_split_arrays`):
TFF's per-client `SqlClientData` dataset costs ~0.1 s, which dominates a round of small
clients. What reading skipped (malformed lines and dropped comments, by reason and per file;
`data.ReadSummary`) is saved with the cache and reported as the task's `data_quality`.
Model, loss and AccuracyTop1: `tasks/reddit/model.py` (tied unit-norm embeddings, re-projected
after every server update through `Task.project_weights`; 1,346,528 parameters at the paper's
sizes: vocabulary 10,000, embedding 96, LSTM 256).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Mapping, Optional

import numpy as np
import tensorflow as tf

from dp_fl import _checks
from dp_fl.training import budget
from dp_fl.training import task as task_lib
from tasks import real_text
from tasks.reddit import data
from tasks.reddit import model
from tasks.reddit import synthetic
from tasks.stackoverflow import baselines

TASK_NAME = "reddit"
METRIC_NAME = "accuracy_top1"  # model.AccuracyTop1's name.
CORPORA = ("synthetic", "real_text")


@dataclasses.dataclass(frozen=True)
class RedditSettings:
  """Data and model sizes of the task (the training flags are in TrainingConfig).

  Attributes:
    data_files: Reddit comments JSON-lines files; None: the corpus named by `corpus`.
    corpus: without `data_files`, "synthetic" (generated once into `synthetic_cache_dir`)
      or "real_text" (`tasks/real_text.py`, built once from the installed packages).
    vocab_size, tokens_per_user, test_fraction, unroll, batch_size: paper 001 App. B
      preprocessing (10,000 / 1,600 / - / 10 / 8).
    embedding_size, lstm_size: the model (96 / 256).
    eval_users: at most this many test-split users (sorted by name) form the evaluation data.
    eval_batch_size: batch size of the evaluation dataset.
    synthetic_authors, synthetic_comments_per_author: size of the synthetic corpus.
    synthetic_cache_dir: where the synthetic corpus is cached (None: ~/.cache/dp_fl/...).
    prepared_cache_dir: where the SqlClientData conversion is cached (None:
      ~/.cache/dp_fl/reddit_prepared).
    seed: seeds the held-out split.
  """
  data_files: Optional[tuple[str, ...]] = None
  corpus: str = "synthetic"
  vocab_size: int = data.PAPER_VOCAB_SIZE
  tokens_per_user: int = data.PAPER_TOKENS_PER_USER
  test_fraction: float = data.DEFAULT_TEST_FRACTION
  unroll: int = data.PAPER_UNROLL
  batch_size: int = data.PAPER_BATCH_SIZE
  embedding_size: int = model.PAPER_EMBEDDING_SIZE
  lstm_size: int = model.PAPER_LSTM_SIZE
  eval_users: int = 1000
  eval_batch_size: int = 64
  synthetic_authors: int = 200
  synthetic_comments_per_author: float = 20.0
  synthetic_cache_dir: Optional[str] = None
  prepared_cache_dir: Optional[str] = None
  seed: int = 0

  def __post_init__(self):
    if self.corpus not in CORPORA:
      raise ValueError(f"`corpus` must be one of {CORPORA}; got {self.corpus!r}.")
    for name in ("vocab_size", "tokens_per_user", "unroll", "batch_size", "embedding_size",
                 "lstm_size", "eval_users", "eval_batch_size", "synthetic_authors"):
      _checks.check_positive_int(name, getattr(self, name))
    _checks.check_positive("synthetic_comments_per_author", self.synthetic_comments_per_author)
    _checks.check_nonnegative_int("seed", self.seed)
    fraction = _checks.check_nonnegative("test_fraction", self.test_fraction)
    if fraction >= 1:
      raise ValueError(f"`test_fraction` must be in [0, 1); got {fraction!r}.")
    if isinstance(self.data_files, str):
      object.__setattr__(self, "data_files", (self.data_files,))
    elif self.data_files is not None:
      object.__setattr__(self, "data_files", tuple(self.data_files))
      if not self.data_files:
        raise ValueError("`data_files` must name at least one file, or be None for the "
                         "synthetic corpus; got [].")


class InMemoryClientData:
  """A ClientData-like view of per-user (x, y) window arrays (sorted `client_ids`)."""

  def __init__(self, arrays: Mapping[str, tuple[np.ndarray, np.ndarray]], batch_size: int):
    self._arrays = dict(arrays)
    self._batch_size = _checks.check_positive_int("batch_size", batch_size)
    self.client_ids = sorted(self._arrays)

  def create_tf_dataset_for_client(self, client_id: str) -> tf.data.Dataset:
    """The client's (x, y) windows in stored order, batched (deterministic)."""
    if client_id not in self._arrays:
      raise ValueError(f"Unknown client id {client_id!r}: not one of the "
                       f"{len(self.client_ids)} training users.")
    return tf.data.Dataset.from_tensor_slices(self._arrays[client_id]).batch(self._batch_size)

  def num_windows(self, client_id: str) -> int:
    return len(self._arrays[client_id][0])


DEFAULT_PREPARED_CACHE_DIR = os.path.join("~", ".cache", "dp_fl", "reddit_prepared")


def data_files(settings: RedditSettings) -> tuple[str, ...]:
  """The comment files: `data_files`, or the cached corpus."""
  if settings.data_files is not None:
    return settings.data_files
  if settings.corpus == "real_text":
    return (real_text.ensure_reddit_corpus(),)
  config = synthetic.SyntheticConfig(
      num_authors=settings.synthetic_authors,
      mean_comments_per_author=settings.synthetic_comments_per_author)
  return (synthetic.ensure_corpus(config, cache_dir=settings.synthetic_cache_dir),)


def unigram_accuracy(targets: np.ndarray, vocab_size: int) -> float:
  """AccuracyTop1 of always predicting the most frequent in-vocabulary target word."""
  ids = data.token_ids(vocab_size)
  targets = np.asarray(targets).ravel()
  counted = targets[targets != ids.pad]
  in_vocab = counted[(counted >= 1) & (counted <= vocab_size)]
  if not len(counted) or not len(in_vocab):
    return 0.0
  return float(np.bincount(in_vocab).max() / len(counted))


def _baselines(targets: np.ndarray, vocab_size: int) -> dict[str, float]:
  """The unigram baselines of a set of targets: AccuracyTop1 and the context-free loss."""
  return {f"unigram_{METRIC_NAME}": unigram_accuracy(targets, vocab_size),
          "unigram_loss": baselines.best_constant_cross_entropy(
              targets, data.token_ids(vocab_size).pad)}


def check_sizes(settings: RedditSettings) -> None:
  """Refuses model and batch sizes beyond the memory budget, naming the flags
  (`budget.check_task_sizes`), before any of it is allocated."""
  classes = data.token_ids(settings.vocab_size).num_classes
  parameters = model.num_trainable_parameters(
      settings.vocab_size, embedding_size=settings.embedding_size, lstm_size=settings.lstm_size)
  model_flags = {"lstm_size": settings.lstm_size, "vocab_size": settings.vocab_size,
                 "embedding_size": settings.embedding_size}
  if settings.vocab_size * settings.embedding_size > 4 * settings.lstm_size ** 2:
    model_flags = {"vocab_size": settings.vocab_size,
                   "embedding_size": settings.embedding_size, "lstm_size": settings.lstm_size}
  per_token = 2 * settings.embedding_size + 6 * settings.lstm_size + 3 * classes
  batch = max(settings.batch_size, settings.eval_batch_size)
  budget.check_task_sizes(parameters, model_flags, [budget.SizePart(
      "one batch's activations", budget.activation_bytes(batch, settings.unroll, per_token),
      {"unroll": settings.unroll, "batch_size": settings.batch_size,
       "eval_batch_size": settings.eval_batch_size})])


def make_task(settings: RedditSettings) -> task_lib.Task:
  """The task: train clients, held-out evaluation data, model, loss, metrics, baseline."""
  check_sizes(settings)
  paths = data_files(settings)
  prepared = data.prepare(
      paths, settings.prepared_cache_dir or DEFAULT_PREPARED_CACHE_DIR,
      vocab_size=settings.vocab_size, tokens_per_user=settings.tokens_per_user,
      test_fraction=settings.test_fraction, seed=settings.seed, unroll=settings.unroll)
  train = data.read_split_arrays(prepared.database_path, data.TRAIN, unroll=settings.unroll)
  test = data.read_split_arrays(prepared.database_path, data.TEST, unroll=settings.unroll)
  test_users = sorted(test)[:settings.eval_users]
  if not test_users:
    raise ValueError(
        f"The test split of {list(paths)} has no windows (test_fraction="
        f"{settings.test_fraction}); pass more comments or a larger `test_fraction`.")
  eval_x = np.concatenate([test[a][0] for a in test_users])
  eval_y = np.concatenate([test[a][1] for a in test_users])

  def eval_dataset_fn() -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((eval_x, eval_y)).batch(
        settings.eval_batch_size)

  # Validation data (comparisons choose learning rates on it): the held-out posts of as
  # many other users, disjoint from the evaluation users.
  validation_users = sorted(test)[settings.eval_users:2 * settings.eval_users]
  validation_fn, validation_baseline = None, None
  if validation_users:
    validation_x = np.concatenate([test[a][0] for a in validation_users])
    validation_y = np.concatenate([test[a][1] for a in validation_users])

    def validation_fn() -> tf.data.Dataset:
      return tf.data.Dataset.from_tensor_slices((validation_x, validation_y)).batch(
          settings.eval_batch_size)

    validation_baseline = _baselines(validation_y, settings.vocab_size)

  source = f"{settings.corpus} corpus" if settings.data_files is None else ", ".join(paths)
  return task_lib.Task(
      name=TASK_NAME,
      train_data=InMemoryClientData(train, settings.batch_size),
      eval_dataset_fn=eval_dataset_fn,
      keras_model_fn=functools.partial(
          model.build_model, settings.vocab_size, seed=settings.seed,
          embedding_size=settings.embedding_size, lstm_size=settings.lstm_size),
      loss_fn=model.loss_fn,
      metrics_fn=functools.partial(model.metrics_fn, settings.vocab_size),
      baseline_metrics=_baselines(eval_y, settings.vocab_size),
      validation_baseline_metrics=validation_baseline,
      project_weights=model.project_weights,
      data_quality=functools.partial(dict, prepared.data_quality),
      validation_dataset_fn=validation_fn,
      headline_metric=METRIC_NAME,
      client_tokens=float(settings.tokens_per_user),
      eval_tokens=float(eval_x.size),
      description=(f"Reddit next-word prediction ({source}; vocabulary "
                   f"{len(prepared.vocab)} of {settings.vocab_size} + UNK/BOS/EOS/pad, LSTM {settings.lstm_size}, "
                   f"{len(train)} train users of {settings.tokens_per_user} tokens, "
                   f"{len(eval_x)} eval windows; SqlClientData cache "
                   f"{prepared.database_path})"))
