"""StackOverflow preprocessing: TFF's baseline pipeline, deterministic (no shuffling).

The setting of paper 004 Sec. 4.1 (Table 3), which follows its ref. [8] and TFF's
StackOverflow baseline (`tff.simulation.baselines.stackoverflow`, whose
`word_prediction_preprocessing` is used here as is): sentences cut to `sequence_length`
(20) words and mapped to token ids (`tasks.stackoverflow.vocab`). A sentence of n words
becomes [BOS, w_1, ..., w_min(n,20), EOS if n < 20], padded with 0 to 21 ids; x is ids[:-1]
and y is ids[1:] (length 20 each). BOS never occurs in y; EOS only ends sentences shorter
than 20 words.

`make_train_client_data`: the training clients (TFF's pipeline per client: an SQLite query
and the preprocessing, traced once as a function of the client id, 2–6 ms a client; see
`tasks.stackoverflow.in_memory` for the same batches from memory). `make_eval_dataset`: one
dataset of the sentences of (a sample of) clients.
"""

from __future__ import annotations

import threading
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_preprocessing

from dp_fl import _checks
from tasks.stackoverflow import database
from tasks.stackoverflow import vocab as vocab_lib

DEFAULT_SEQUENCE_LENGTH = tff.simulation.baselines.stackoverflow.DEFAULT_SEQUENCE_LENGTH  # 20
DEFAULT_EVAL_BATCH_SIZE = 64


def _preprocess_fn(vocab: Sequence[str], batch_size: int, max_elements: Optional[int],
                   num_epochs: int, sequence_length: int, num_oov_buckets: int):
  """TFF's baseline preprocessing without shuffling (ClientSpec shuffle_buffer_size=1)."""
  vocab = vocab_lib.check_vocab(vocab)
  batch_size = _checks.check_positive_int("batch_size", batch_size)
  num_epochs = _checks.check_positive_int("num_epochs", num_epochs)
  sequence_length = _checks.check_positive_int("sequence_length", sequence_length)
  num_oov_buckets = _checks.check_positive_int("num_oov_buckets", num_oov_buckets)
  if max_elements is not None:
    max_elements = _checks.check_positive_int("max_elements_per_client", max_elements)
  spec = tff.simulation.baselines.ClientSpec(
      num_epochs=num_epochs, batch_size=batch_size, max_elements=max_elements,
      shuffle_buffer_size=1)
  return word_prediction_preprocessing.create_preprocess_fn(
      spec, vocab, sequence_length=sequence_length, num_out_of_vocab_buckets=num_oov_buckets)


def _check_client_data(name: str, value: Any) -> None:
  if not isinstance(value, tff.simulation.datasets.ClientData):
    raise ValueError(f"`{name}` must be a tff.simulation.datasets.ClientData (see "
                     f"load_client_data); got {type(value).__name__}.")


def make_train_client_data(
    train: tff.simulation.datasets.ClientData, vocab: Sequence[str], batch_size: int,
    max_elements_per_client: Optional[int], *, num_epochs: int = 1,
    sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
    num_oov_buckets: int = vocab_lib.DEFAULT_NUM_OOV_BUCKETS,
) -> tff.simulation.datasets.ClientData:
  """Training clients, preprocessed as TFF's StackOverflow baseline, deterministically.

  Each client's dataset is its sentences in stored order, repeated `num_epochs` times, the
  first `max_elements_per_client` of those taken (TFF's `ClientSpec.max_elements`, counted
  after the repeat), mapped to token ids and batched into (x, y) int64 tuples of shape
  [<=batch_size, sequence_length]. No shuffling (TFF's shuffle is unseeded).

  Args:
    train: the train `ClientData` of `load_client_data`.
    vocab: the vocabulary (`load_vocab`).
    batch_size: sentences per batch.
    max_elements_per_client: cap on a client's sentences (None: no cap).
    num_epochs: passes over a client's data.
    sequence_length: words per sentence kept (20 in the paper's setting).
    num_oov_buckets: OOV buckets (1 in the paper's setting).

  Returns:
    A `ClientData` with the same `client_ids`.
  """
  _check_client_data("train", train)
  preprocess_fn = _preprocess_fn(vocab, batch_size, max_elements_per_client, num_epochs,
                                 sequence_length, num_oov_buckets)
  if isinstance(train, database.CheckedClientData):
    return TracedTrainClientData(train, preprocess_fn)
  return train.preprocess(preprocess_fn)


class TracedTrainClientData(tff.simulation.datasets.ClientData):
  """The lazy training clients, each client's dataset made by one function traced once.

  TFF's `PreprocessClientData` calls the preprocessing in Python for every dataset it makes:
  the vocabulary's lookup table and two `map`s are traced again for each client (0.11 s a
  client on a loaded 2-core machine, 0.33 s at the paper's 10,000 words: the data stage of a
  paper-scale round, issue #43). Here the dataset of a client id is a `tf.function` of the
  id, the form of TFF's `dataset_computation`: traced on first use (≈ 0.1–0.4 s), then
  2–6 ms a client, the same batches. The records are still read and checked in Python first
  (`CheckedClientData.check_clients`, once a client): a client with quarantined records
  gets the preprocessing of its good records, as before, outside the traced function.
  The dataset is a graph of the client's SQL query and the vocabulary (≈ 170 KB), so a
  remote worker reads the records from its own copy of the file.
  """

  def __init__(self, train: "database.CheckedClientData", preprocess_fn: Any):
    self._train = train
    self._preprocess_fn = preprocess_fn
    self._lock = threading.Lock()
    self._traced = None

  @property
  def client_ids(self) -> list[str]:
    return self._train.client_ids

  @property
  def element_type_structure(self):
    return self._dataset_of_id().structured_outputs.element_spec

  @property
  def serializable_dataset_fn(self):
    train_fn = self._train.serializable_dataset_fn
    return lambda client_id: self._preprocess_fn(train_fn(client_id))

  def _dataset_of_id(self):
    with self._lock:
      if self._traced is None:
        clean_fn = self._train.clean_dataset_fn
        preprocess_fn = self._preprocess_fn
        self._traced = tf.function(
            lambda client_id: preprocess_fn(clean_fn(client_id)),
            input_signature=[tf.TensorSpec([], tf.string)]).get_concrete_function()
      return self._traced

  def create_tf_dataset_for_client(self, client_id: str) -> tf.data.Dataset:
    if self._train.has_bad_records(client_id):  # Checks the id and the records first.
      return self._preprocess_fn(self._train.create_tf_dataset_for_client(client_id))
    return self._dataset_of_id()(tf.constant(client_id, tf.string))


def eval_client_ids(client_ids: Sequence[str], max_clients: Optional[int], seed: int,
                    exclude: Sequence[str] = ()) -> list[str]:
  """The sorted ids of the evaluation sample: up to `max_clients` of `client_ids` minus
  `exclude`, drawn with `seed` (all of them if `max_clients` is None or not smaller)."""
  excluded = set(exclude)
  client_ids = sorted(c for c in client_ids if c not in excluded)
  if max_clients is not None:
    max_clients = _checks.check_positive_int("max_clients", max_clients)
    if max_clients < len(client_ids):
      picked = np.random.default_rng(seed).choice(len(client_ids), size=max_clients,
                                                  replace=False)
      client_ids = [client_ids[i] for i in np.sort(picked)]
  return client_ids


def make_eval_dataset(
    client_data: tff.simulation.datasets.ClientData, vocab: Sequence[str],
    max_clients: Optional[int] = None, *, batch_size: int = DEFAULT_EVAL_BATCH_SIZE,
    max_elements_per_client: Optional[int] = None,
    sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
    num_oov_buckets: int = vocab_lib.DEFAULT_NUM_OOV_BUCKETS, seed: int = 0,
    exclude: Sequence[str] = (),
) -> tf.data.Dataset:
  """One batched (x, y) dataset of the sentences of (up to `max_clients`) clients.

  Args:
    client_data: e.g. the heldout or test `ClientData` of `load_client_data`.
    vocab: the vocabulary (`load_vocab`).
    max_clients: use this many clients, a sample drawn with `seed` and taken in sorted-id
      order (None, or more than there are: all clients).
    batch_size: sentences per batch.
    max_elements_per_client: cap on each client's sentences (None: all).
    sequence_length: words per sentence kept.
    num_oov_buckets: OOV buckets.
    seed: seed of the client sample.
    exclude: clients left out before sampling (e.g. the evaluation sample, for validation
      data disjoint from it).

  Returns:
    The dataset, deterministic: clients in sorted-id order, each one's sentences in stored
    order. From a `database.CheckedClientData` (`load_client_data`), the clients are
    checked first (counted in its quarantine) and their bad records left out.
  """
  _check_client_data("client_data", client_data)
  seed = _checks.check_nonnegative_int("seed", seed)
  client_ids = eval_client_ids(client_data.client_ids, max_clients, seed, exclude)
  if max_elements_per_client is not None:
    max_elements_per_client = _checks.check_positive_int("max_elements_per_client",
                                                         max_elements_per_client)
  take = -1 if max_elements_per_client is None else max_elements_per_client
  if isinstance(client_data, database.CheckedClientData):
    client_data.check_clients(client_ids)
  dataset_fn = client_data.serializable_dataset_fn
  sentences = tf.data.Dataset.from_tensor_slices(client_ids).flat_map(
      lambda client_id: dataset_fn(client_id).take(take))
  return _preprocess_fn(vocab, batch_size, None, 1, sequence_length,
                        num_oov_buckets)(sentences)
