"""The StackOverflow next-word-prediction task (paper 004, Sec. 4.1) for the training program.

Data in TFF's own SQLite format (`stackoverflow.sqlite`, read by TFF's unmodified
`load_data`): the real file from `--data_dir`, or by default the synthetic corpus of
`tasks/stackoverflow/synthetic.py` (same format, generated once and cached), or with
`corpus="real_text"` the real-text corpus of `tasks/real_text.py` (the prose of the installed
Python packages, one client per module; built once and cached). Preprocessing as
TFF's baseline (vocabulary + 1 OOV bucket, 20 words, BOS/EOS/pad, per-client cap, batches);
model: embedding → LSTM → projection → softmax over the extended vocabulary (at the paper's
sizes, 96 / 670 / 96 and vocabulary 10000: 4,050,748 parameters). Bad records of the file
are quarantined (`database.Quarantine`) and reported as the task's `data_quality`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

from dp_fl import _checks
from dp_fl.training import budget
from dp_fl.training import task as task_lib
from tasks import real_text
from tasks import sql_client_data
from tasks.stackoverflow import baselines
from tasks.stackoverflow import database
from tasks.stackoverflow import in_memory
from tasks.stackoverflow import model
from tasks.stackoverflow import preprocessing
from tasks.stackoverflow import synthetic
from tasks.stackoverflow import vocab as vocab_lib

TASK_NAME = "stackoverflow"
CORPORA = ("synthetic", "real_text")


@dataclasses.dataclass(frozen=True)
class StackOverflowSettings:
  """Data and model sizes of the task (the training flags are in TrainingConfig).

  Attributes:
    data_dir: directory holding `stackoverflow.sqlite` (TFF's format); None: the corpus
      named by `corpus`.
    corpus: without `data_dir`, "synthetic" (generated once into `synthetic_cache_dir`) or
      "real_text" (`tasks/real_text.py`, built once from the installed packages).
    word_count_file: a `stackoverflow.word_count` file for the vocabulary; None: count the
      train split once (cached next to the data).
    vocab_size, num_oov_buckets, sequence_length: TFF's baseline preprocessing.
    batch_size, max_elements_per_client: client datasets.
    embedding_size, lstm_size: the model.
    eval_clients, eval_max_elements_per_client: the held-out evaluation sample.
    synthetic_clients: train clients of the synthetic corpus (heldout/test: an eighth each).
    synthetic_cache_dir: where the synthetic corpus is cached (None: ~/.cache/dp_fl/...).
    in_memory: tokenize the train split once into memory (exactly TFF's preprocessing;
      ~0.7 ms per client dataset instead of ~100 ms through TFF's SqlClientData); for the
      full real corpus (135M sentences) use False.
  """
  data_dir: Optional[str] = None
  corpus: str = "synthetic"
  word_count_file: Optional[str] = None
  vocab_size: int = vocab_lib.DEFAULT_VOCAB_SIZE
  num_oov_buckets: int = vocab_lib.DEFAULT_NUM_OOV_BUCKETS
  sequence_length: int = preprocessing.DEFAULT_SEQUENCE_LENGTH
  batch_size: int = 16
  max_elements_per_client: int = 256
  embedding_size: int = model.PAPER_EMBEDDING_SIZE
  lstm_size: int = model.PAPER_LSTM_SIZE
  eval_clients: int = 250
  eval_max_elements_per_client: Optional[int] = None
  synthetic_clients: int = 2000
  synthetic_cache_dir: Optional[str] = None
  in_memory: bool = True

  def __post_init__(self):
    if self.corpus not in CORPORA:
      raise ValueError(f"`corpus` must be one of {CORPORA}; got {self.corpus!r}.")
    for name in ("vocab_size", "num_oov_buckets", "sequence_length", "batch_size",
                 "max_elements_per_client", "embedding_size", "lstm_size", "eval_clients",
                 "synthetic_clients"):
      _checks.check_positive_int(name, getattr(self, name))
    if self.eval_max_elements_per_client is not None:
      _checks.check_positive_int("eval_max_elements_per_client",
                                 self.eval_max_elements_per_client)


def data_directory(settings: StackOverflowSettings) -> str:
  """The directory of `stackoverflow.sqlite`: `data_dir`, or the cached corpus."""
  if settings.data_dir is not None:
    return settings.data_dir
  if settings.corpus == "real_text":
    return real_text.ensure_stackoverflow_corpus()
  config = synthetic.SyntheticConfig(
      num_train_clients=settings.synthetic_clients,
      num_heldout_clients=max(1, settings.synthetic_clients // 8),
      num_test_clients=max(1, settings.synthetic_clients // 8))
  return synthetic.ensure_corpus(config, cache_dir=settings.synthetic_cache_dir)


def check_sizes(settings: StackOverflowSettings, train_sentences: int,
                vocab_size: int) -> None:
  """Refuses model, batch and in-memory data sizes beyond the memory budget, naming the
  flags (`budget.check_task_sizes`), before any of it is allocated. `vocab_size`: the words
  the vocabulary has (at most `settings.vocab_size`)."""
  extended = vocab_lib.token_ids(vocab_size, settings.num_oov_buckets).extended_vocab_size
  parameters = model.num_trainable_parameters(
      vocab_size, settings.num_oov_buckets, embedding_size=settings.embedding_size,
      lstm_size=settings.lstm_size)
  model_flags = {"lstm_size": settings.lstm_size, "vocab_size": settings.vocab_size,
                 "embedding_size": settings.embedding_size}
  if vocab_size * settings.embedding_size > 4 * settings.lstm_size ** 2:
    model_flags = {"vocab_size": settings.vocab_size,
                   "embedding_size": settings.embedding_size, "lstm_size": settings.lstm_size}
  # Per token of a batch: embedding and projection (E), the LSTM's gates and states (6H), the
  # logits with their softmax and gradient (3 V).
  per_token = (2 * settings.embedding_size + 6 * settings.lstm_size + 3 * extended)
  parts = [budget.SizePart(
      "one batch's activations", budget.activation_bytes(
          settings.batch_size, settings.sequence_length + 1, per_token),
      {"batch_size": settings.batch_size, "sequence_length": settings.sequence_length})]
  if settings.in_memory:  # The tokenized train split, and one tokenizing chunk.
    row = 4.0 * (settings.sequence_length + 1)
    parts.append(budget.SizePart(
        f"the train split tokenized into memory ({train_sentences:,} sentences)",
        row * (train_sentences + in_memory.TOKENIZE_CHUNK),
        {"sequence_length": settings.sequence_length, "in_memory": True}))
  budget.check_task_sizes(parameters, model_flags, parts)


def _worker_checks(path: str) -> tuple:
  return (sql_client_data.worker_check(path, "the StackOverflow database"),)


def _eval_tokens(directory: str, eval_ids: list[str], settings: StackOverflowSettings) -> float:
  """The padded tokens one evaluation scores: the sample's sentences (capped at
  `eval_max_elements_per_client`) × (sequence_length + 1), from the file's metadata."""
  sizes = database.client_sizes(directory, "heldout")
  cap = settings.eval_max_elements_per_client
  sentences = sum(min(sizes.get(c, 0), cap) if cap else sizes.get(c, 0) for c in eval_ids)
  return float(sentences * (settings.sequence_length + 1))


def make_task(settings: StackOverflowSettings) -> task_lib.Task:
  """The task: train clients, held-out evaluation data, model, loss, metrics, baseline."""
  directory = data_directory(settings)
  counts = database.check_database(directory)
  vocab = vocab_lib.load_vocab(directory, settings.vocab_size, settings.word_count_file)
  vocab_size = len(vocab)
  check_sizes(settings, counts["train"]["examples"], vocab_size)
  train, heldout, _ = database.load_client_data(directory, checked=True)
  if settings.in_memory:
    train_data = in_memory.make_train_client_data_in_memory(
        directory, vocab, settings.batch_size, settings.max_elements_per_client,
        sequence_length=settings.sequence_length, num_oov_buckets=settings.num_oov_buckets,
        quarantine=train.quarantine)
  else:
    train_data = preprocessing.make_train_client_data(
        train, vocab, settings.batch_size, settings.max_elements_per_client,
        sequence_length=settings.sequence_length, num_oov_buckets=settings.num_oov_buckets)
  eval_fn = functools.partial(
      preprocessing.make_eval_dataset, heldout, vocab, settings.eval_clients,
      max_elements_per_client=settings.eval_max_elements_per_client,
      sequence_length=settings.sequence_length, num_oov_buckets=settings.num_oov_buckets)
  # Validation data (comparisons choose learning rates on it): as many other held-out
  # clients, disjoint from the evaluation sample.
  eval_ids = preprocessing.eval_client_ids(heldout.client_ids, settings.eval_clients, 0)
  validation_fn = None
  if len(heldout.client_ids) > len(eval_ids):
    validation_fn = functools.partial(
        preprocessing.make_eval_dataset, heldout, vocab, settings.eval_clients,
        max_elements_per_client=settings.eval_max_elements_per_client,
        sequence_length=settings.sequence_length, num_oov_buckets=settings.num_oov_buckets,
        seed=1, exclude=eval_ids)
  baseline = baselines.unigram_baselines(eval_fn(), vocab_size, settings.num_oov_buckets)
  validation_baseline = None
  if validation_fn is not None:
    validation_baseline = baselines.unigram_baselines(validation_fn(), vocab_size,
                                                      settings.num_oov_buckets)
  source = f"{settings.corpus} corpus" if settings.data_dir is None else directory
  return task_lib.Task(
      name=TASK_NAME,
      train_data=train_data,
      eval_dataset_fn=eval_fn,
      keras_model_fn=functools.partial(
          model.build_model, vocab_size, settings.num_oov_buckets,
          embedding_size=settings.embedding_size, lstm_size=settings.lstm_size),
      loss_fn=model.loss_fn,
      metrics_fn=functools.partial(model.metrics_fn, vocab_size, settings.num_oov_buckets),
      client_tokens=float(settings.max_elements_per_client * (settings.sequence_length + 1)),
      eval_tokens=_eval_tokens(directory, eval_ids, settings),
      baseline_metrics={f"unigram_{k}": v for k, v in baseline.items()},
      data_quality=train.quarantine.summary,
      validation_dataset_fn=validation_fn,
      validation_baseline_metrics=None if validation_baseline is None else {
          f"unigram_{k}": v for k, v in validation_baseline.items()},
      headline_metric="accuracy_without_out_of_vocab_or_end_of_sentence",
      # The lazy path's client datasets are graphs that read the file on the worker.
      worker_checks=None if settings.in_memory else functools.partial(
          _worker_checks, database.database_path(directory)),
      description=(f"StackOverflow next-word prediction ({source}; vocabulary {vocab_size} + "
                   f"{settings.num_oov_buckets} OOV, LSTM {settings.lstm_size}, "
                   f"{len(train.client_ids)} train clients)"))
