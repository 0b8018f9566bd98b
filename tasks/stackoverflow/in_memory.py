"""StackOverflow training clients in memory: the batches of `make_train_client_data`, fast.

`make_train_client_data_in_memory` reads the database once (`load_tokenized_clients`),
tokenizes every sentence with TFF's own ops and vocabulary table (`_Tokenizer`), and keeps
the token ids (`TokenizedClients`); then each client's dataset is `from_tensor_slices` of
its arrays (`InMemoryClientData`, ~1 ms) instead of an SQLite query and TFF's preprocessing
pipeline per client and round (`tasks.stackoverflow.preprocessing.make_train_client_data`,
~0.1 s): exactly the same batches. For corpora that fit in memory.

Bad records are checked and quarantined as `tasks.stackoverflow.database.CheckedClientData`
does (`database.check_records`, counted in a `database.Quarantine`): a client's dataset holds
its good records, in order; more than `database.MAX_BAD_FRACTION` of the records read bad is
a `ValueError`.
"""

from __future__ import annotations

import collections
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl import _checks
from tasks.stackoverflow import _messages
from tasks.stackoverflow import database
from tasks.stackoverflow import preprocessing
from tasks.stackoverflow import vocab as vocab_lib

# Sentences tokenized per batched TF call (bounds the transient memory of a chunk).
TOKENIZE_CHUNK = 1 << 16


class _Tokenizer:
  """TFF's `build_to_ids_fn`, applied to many sentences at once.

  The same TF ops as TFF's per-example function (on the scalar `tokens` feature as TFF's
  parser gives it, `database.check_records`: `tf.strings.split(sep=' ')`, the first `sequence_length` words, the same
  `StaticVocabularyTable` (so OOV words get TF's own Fingerprint64 hash buckets), + 1, EOS when
  fewer than `sequence_length` words, BOS first), vectorized over a chunk; then padded with 0
  to `sequence_length + 1` ids as TFF's `padded_batch` does. Exact by construction.
  """

  def __init__(self, vocab: Sequence[str], sequence_length: int, num_oov_buckets: int):
    ids = vocab_lib.token_ids(len(vocab), num_oov_buckets)
    self._bos = ids.bos
    self._eos = ids.eos
    self._length = sequence_length
    self._dtype = np.int32 if self._eos < np.iinfo(np.int32).max else np.int64
    self._table = tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(list(vocab),
                                            tf.range(len(vocab), dtype=tf.int64)),
        num_oov_buckets=num_oov_buckets)

  def __call__(self, sentences: np.ndarray) -> np.ndarray:
    """[len(sentences), sequence_length + 1] token ids, one row per `tokens` value."""
    tokens = tf.constant(sentences, dtype=tf.string, shape=[len(sentences)])
    words = tf.strings.split(tokens, sep=" ")[:, :self._length]
    ids = (self._table.lookup(words.flat_values) + 1).numpy()
    lengths = words.row_lengths().numpy()
    out = np.zeros((len(sentences), self._length + 1), dtype=self._dtype)
    out[:, 0] = self._bos
    rows = np.repeat(np.arange(len(sentences)), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[rows, 1 + np.arange(ids.size) - starts] = ids
    short = np.flatnonzero(lengths < self._length)
    out[short, lengths[short] + 1] = self._eos
    return out


def _unknown_client(client_id: Any, client_ids: Sequence[str], what: str) -> ValueError:
  return ValueError(
      f"`client_id` {client_id!r} is not a client of this {what} ({len(client_ids)} clients, "
      f"e.g. {_messages.listed(client_ids)}); pass one of its `client_ids`.")


class TokenizedClients(Mapping[str, tuple[np.ndarray, np.ndarray]]):
  """Every client of a split, preprocessed, in memory (`load_tokenized_clients`).

  A read-only mapping client id -> (x, y): int64 arrays of shape [n, sequence_length], n the
  client's number of elements (its sentences in stored order, repeated `num_epochs` times,
  the first `max_elements_per_client` taken), row i the i-th element's x = ids[:-1] and
  y = ids[1:] (see `tasks.stackoverflow.preprocessing`): the rows `make_train_client_data`'s
  dataset yields, unbatched. Iterates over the client ids in sorted order (TFF's
  `client_ids`). Stores each used sentence once ([sentences, sequence_length + 1] int32
  ids); the arrays returned are fresh copies.
  """

  def __init__(self, client_ids: Sequence[str], rows: np.ndarray, offsets: np.ndarray,
               num_elements: np.ndarray, sequence_length: int):
    """Internal: see `load_tokenized_clients`.

    Args:
      client_ids: the client ids, sorted.
      rows: [R, sequence_length + 1] token ids of the stored sentences, client by client.
      offsets: [len(client_ids) + 1]: client i's sentences are rows[offsets[i]:offsets[i+1]].
      num_elements: [len(client_ids)]: client i's number of elements, which cycles through
        its stored sentences.
      sequence_length: the sequence length.
    """
    self._client_ids = list(client_ids)
    self._index = {client_id: i for i, client_id in enumerate(self._client_ids)}
    self._rows = rows
    self._offsets = offsets
    self._num_elements = num_elements
    self.sequence_length = sequence_length
    self.quarantine: Optional[database.Quarantine] = None  # Set by load_tokenized_clients.

  @property
  def client_ids(self) -> list[str]:
    """The client ids, sorted (a copy)."""
    return list(self._client_ids)

  def _position(self, client_id: Any) -> int:
    position = self._index.get(client_id) if isinstance(client_id, str) else None
    if position is None:
      raise _unknown_client(client_id, self._client_ids, "TokenizedClients")
    return position

  def ids(self, client_id: str) -> np.ndarray:
    """[n, sequence_length + 1] int64 token ids of `client_id`'s elements (before x/y)."""
    i = self._position(client_id)
    start, stop = int(self._offsets[i]), int(self._offsets[i + 1])
    count = int(self._num_elements[i])
    rows = self._rows[start:stop]
    if count != stop - start:  # Epochs: cycle through the sentences (count > 0 here).
      rows = rows[np.arange(count) % (stop - start)]
    return rows.astype(np.int64)

  def num_elements(self, client_id: str) -> int:
    """The number of elements (sentences, after epochs and the cap) of `client_id`."""
    return int(self._num_elements[self._position(client_id)])

  @property
  def total_elements(self) -> int:
    """The number of elements of all clients together."""
    return int(self._num_elements.sum())

  def __getitem__(self, client_id: str) -> tuple[np.ndarray, np.ndarray]:
    ids = self.ids(client_id)
    return np.ascontiguousarray(ids[:, :-1]), np.ascontiguousarray(ids[:, 1:])

  def __contains__(self, client_id: Any) -> bool:
    return isinstance(client_id, str) and client_id in self._index

  def get(self, client_id: Any, default: Any = None) -> Any:
    return self[client_id] if client_id in self else default

  def __iter__(self):
    return iter(self._client_ids)

  def __len__(self) -> int:
    return len(self._client_ids)

  def _tensors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, offsets, num_elements), which `InMemoryClientData`'s traceable fn embeds."""
    return self._rows, self._offsets, self._num_elements


def load_tokenized_clients(
    data_dir: str, split: str, vocab: Sequence[str], *,
    sequence_length: int = preprocessing.DEFAULT_SEQUENCE_LENGTH,
    num_oov_buckets: int = vocab_lib.DEFAULT_NUM_OOV_BUCKETS,
    max_elements_per_client: Optional[int] = None, num_epochs: int = 1,
    quarantine: Optional[database.Quarantine] = None,
) -> TokenizedClients:
  """Every client of `split`, tokenized exactly as `make_train_client_data`, in memory.

  Reads `<data_dir>/stackoverflow.sqlite` once with sqlite3: one scan of the split's rows of
  `examples` in rowid order, the order in which TFF's per-client query
  (`SqlClientData`: `SELECT ... WHERE client_id = ... and split_name = ...`, no ORDER BY)
  returns a client's rows, whether SQLite answers it from the (client_id, split_name) index
  or by a table scan. Clients are those of `client_metadata` (TFF's `client_ids`, sorted).
  Records are checked (`database.check_records`) and the bad ones quarantined: a client's
  elements are its good sentences (the cap counts good ones), and its bad records are
  counted in `quarantine`. Sentences beyond a client's first `max_elements_per_client`
  good ones are not parsed. Parsing and tokenization use TFF's own ops and vocabulary table,
  batched (`_Tokenizer`), so the ids, OOV hash buckets included, are TFF's.

  Memory: 4 * (sequence_length + 1) bytes per stored sentence (about 10 MB for the default
  synthetic corpus; the real train split, 135M sentences, fits only with a cap).

  Args:
    data_dir: the directory holding `stackoverflow.sqlite`.
    split: "train", "heldout" or "test".
    vocab: the vocabulary (`load_vocab`).
    sequence_length: words per sentence kept (20 in the paper's setting).
    num_oov_buckets: OOV buckets (1 in the paper's setting).
    max_elements_per_client: cap on a client's elements, counted after the epochs (TFF's
      `ClientSpec.max_elements`; None: no cap).
    num_epochs: passes over a client's sentences.
    quarantine: where to count the bad records (`load_client_data(...)[0].quarantine`, so
      that the task reports them); None: a new one, `TokenizedClients.quarantine`.

  Returns:
    The `TokenizedClients` (client id -> (x, y) int64 arrays).

  Raises:
    ValueError: bad arguments, a bad file (`database.check_database`), or more than
      `database.MAX_BAD_FRACTION` of the records read bad (the message names the file, the
      counts by reason and the first bad record's client and rowid).
  """
  vocab = vocab_lib.check_vocab(vocab)
  if split not in database.SPLITS:
    raise ValueError(f"`split` must be one of {list(database.SPLITS)}; got {split!r}.")
  sequence_length = _checks.check_positive_int("sequence_length", sequence_length)
  num_oov_buckets = _checks.check_positive_int("num_oov_buckets", num_oov_buckets)
  num_epochs = _checks.check_positive_int("num_epochs", num_epochs)
  cap = max_elements_per_client
  if cap is not None:
    cap = _checks.check_positive_int("max_elements_per_client", cap)
  if quarantine is not None and not isinstance(quarantine, database.Quarantine):
    raise ValueError(f"`quarantine` must be a database.Quarantine or None; got "
                     f"{type(quarantine).__name__}.")
  with database.open_database(data_dir) as (path, connection):
    if quarantine is None:
      quarantine = database.Quarantine(path)
    reader = _SplitReader(_Tokenizer(vocab, sequence_length, num_oov_buckets), cap, split,
                          sorted(client_id for client_id, in connection.execute(
                              "SELECT DISTINCT client_id FROM client_metadata WHERE "
                              "split_name = ?;", (split,))))
    reader.read(connection.execute(
        "SELECT rowid, client_id, serialized_example_proto FROM examples WHERE "
        "split_name = ? ORDER BY rowid;", (split,)))
    # A client whose bad records showed up after later records of it were skipped for the
    # cap (rare): read again alone, in order.
    for i in sorted(reader.short):
      reader.reread(i, connection.execute(
          "SELECT rowid, client_id, serialized_example_proto FROM examples WHERE "
          "client_id = ? AND split_name = ? ORDER BY rowid;", (reader.client_ids[i], split)))
  reader.report(path, quarantine)
  owner = np.asarray(reader.owners, dtype=np.int64)
  rows = (np.concatenate(reader.chunks) if reader.chunks
          else np.zeros((0, sequence_length + 1), dtype=np.int32))
  kept = owner >= 0
  owner, rows = owner[kept], rows[kept]
  rows = rows[np.argsort(owner, kind="stable")]  # Client by client, stored order within.
  good = np.bincount(owner, minlength=len(reader.client_ids))
  offsets = np.concatenate([[0], np.cumsum(good)])
  num_elements = good.astype(np.int64) * num_epochs
  if cap is not None:
    num_elements = np.minimum(num_elements, cap)
  clients = TokenizedClients(reader.client_ids, rows, offsets.astype(np.int64), num_elements,
                             sequence_length)
  clients.quarantine = quarantine
  return clients


class _SplitReader:
  """The state of `load_tokenized_clients`'s scan: checked, tokenized chunks by client."""

  def __init__(self, tokenize: _Tokenizer, cap: Optional[int], split: str,
               client_ids: list[str]):
    self.tokenize = tokenize
    self.cap = cap
    self.split = split
    self.client_ids = client_ids
    self.index = {client_id: i for i, client_id in enumerate(client_ids)}
    self.chunks: list[np.ndarray] = []
    self.owners: list[int] = []  # Client position of each tokenized row (-1: dropped).
    self.read_count = [0] * len(client_ids)  # Records read (checked or pending).
    self.good = [0] * len(client_ids)  # Good records found.
    self.pending = [0] * len(client_ids)  # Records read, not checked yet.
    self.skipped = [False] * len(client_ids)  # Records skipped for the cap.
    self.problems: dict[int, list[tuple[int, int, str, str]]] = {}  # i -> (pos, rowid, ...)
    self.short: set[int] = set()
    self._batch: list[tuple[int, int, int, bytes]] = []  # (client, position, rowid, blob).

  def read(self, rows: Any) -> None:
    for rowid, client_id, blob in rows:
      i = self.index.get(client_id)
      if i is None:  # Not in client_metadata: not a client for TFF either.
        continue
      if self.cap is not None and self.good[i] + self.pending[i] >= self.cap:
        self.skipped[i] = True
        continue
      self._batch.append((i, self.read_count[i], rowid, bytes(blob)))
      self.read_count[i] += 1
      self.pending[i] += 1
      if len(self._batch) == TOKENIZE_CHUNK:
        self._flush()
    self._flush()

  def _flush(self) -> None:
    if not self._batch:
      return
    batch, self._batch = self._batch, []
    result = database.check_records([blob for _, _, _, blob in batch])
    owners = [i for (i, _, _, _), ok in zip(batch, result.good) if ok]
    for i, _, _, _ in batch:
      self.pending[i] -= 1
    for i in owners:
      self.good[i] += 1
    for position, reason, detail in result.problems:
      i, client_position, rowid, _ = batch[position]
      self.problems.setdefault(i, []).append((client_position, rowid, reason, detail))
      if self.skipped[i]:
        self.short.add(i)
    if len(owners):
      self.chunks.append(self.tokenize(result.tokens))
      self.owners.extend(owners)

  def reread(self, i: int, rows: Any) -> None:
    """Replaces client `i`'s rows by all of its `rows`, then keeps its first `cap` good ones."""
    self.owners = [-1 if owner == i else owner for owner in self.owners]
    self.read_count[i] = self.good[i] = 0
    self.problems.pop(i, None)
    cap, self.cap = self.cap, None
    start = len(self.owners)
    self.read(rows)
    self.cap = cap
    for k in [k for k in range(start, len(self.owners)) if self.owners[k] == i][cap:]:
      self.owners[k] = -1
    self.good[i] = min(self.good[i], cap)

  def report(self, path: str, quarantine: database.Quarantine) -> None:
    """Counts every client in `quarantine`; refuses a split whose reads are mostly bad."""
    for i, client_id in enumerate(self.client_ids):
      quarantine.add(self.split, client_id, self.read_count[i],
                     [(p, rowid, reason) for p, rowid, reason, _ in self.problems.get(i, [])])
    bad = sum(len(p) for p in self.problems.values())
    read = sum(self.read_count)
    if bad and bad > database.MAX_BAD_FRACTION * read:
      first = min(self.problems, key=lambda i: self.problems[i][0][1])
      _, rowid, reason, detail = self.problems[first][0]
      reasons = collections.Counter(r for p in self.problems.values() for _, _, r, _ in p)
      raise ValueError(
          f"StackOverflow data file {path}: {bad} of the {read} records read from split "
          f"{self.split!r} are bad {dict(sorted(reasons.items()))}, more than "
          f"{database.MAX_BAD_FRACTION:.0%}; e.g. record rowid {rowid} of client "
          f"{self.client_ids[first]!r} {detail} ({reason}). Expected TFF's "
          f"{database.DATABASE_FILENAME}: re-download it (a synthetic corpus is regenerated "
          "once its file is deleted).")


class InMemoryClientData(tff.simulation.datasets.ClientData):
  """A `ClientData` of preprocessed clients in memory (`make_train_client_data_in_memory`).

  `create_tf_dataset_for_client(client_id)` is
  `tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)` of the client's arrays: the
  batches of `make_train_client_data` (same values, batch boundaries and element_spec), in
  about a millisecond, with a small constant dataset graph. `serializable_dataset_fn` (TFF's
  traceable form, for `dataset_computation`, `preprocess` and
  `create_tf_dataset_from_all_clients`) embeds all the clients' ids as constants.
  """

  def __init__(self, clients: TokenizedClients, batch_size: int):
    """Batches `clients` (`load_tokenized_clients`) into `batch_size` sentences."""
    if not isinstance(clients, TokenizedClients):
      raise ValueError(f"`clients` must be a TokenizedClients (see load_tokenized_clients); "
                       f"got {type(clients).__name__}.")
    self._clients = clients
    self._batch_size = _checks.check_positive_int("batch_size", batch_size)
    spec = tf.TensorSpec(shape=[None, clients.sequence_length], dtype=tf.int64)
    self._element_spec = (spec, spec)
    self._serializable_fn = None

  @property
  def client_ids(self) -> list[str]:
    return self._clients.client_ids

  @property
  def tokenized_clients(self) -> TokenizedClients:
    """The unbatched arrays."""
    return self._clients

  @property
  def batch_size(self) -> int:
    return self._batch_size

  @property
  def element_type_structure(self):
    return self._element_spec

  def create_tf_dataset_for_client(self, client_id: str) -> tf.data.Dataset:
    if client_id not in self._clients:
      raise _unknown_client(client_id, self._clients.client_ids, "InMemoryClientData")
    return tf.data.Dataset.from_tensor_slices(self._clients[client_id]).batch(
        self._batch_size)

  @property
  def serializable_dataset_fn(self):
    if self._serializable_fn is None:
      self._serializable_fn = self._make_serializable_fn()
    return self._serializable_fn

  def _make_serializable_fn(self):
    client_ids = np.asarray(self._clients.client_ids, dtype=object)
    rows, offsets, num_elements = self._clients._tensors()  # pylint: disable=protected-access
    batch_size = self._batch_size

    def dataset_fn(client_id):
      # Constants made at trace time, so the function is self-contained in any graph.
      matches = tf.where(tf.equal(tf.constant(client_ids, dtype=tf.string), client_id))
      check = tf.debugging.Assert(
          tf.equal(tf.size(matches), 1),
          ["client_id is not a client of this InMemoryClientData:", client_id])
      with tf.control_dependencies([check]):
        i = tf.reshape(matches, [-1])[0]
      offsets_t = tf.constant(offsets, dtype=tf.int64)
      start, stop = offsets_t[i], offsets_t[i + 1]
      count = tf.constant(num_elements, dtype=tf.int64)[i]
      positions = start + tf.range(count, dtype=tf.int64) % tf.maximum(stop - start, 1)
      ids = tf.cast(tf.gather(tf.constant(rows), positions), tf.int64)
      return tf.data.Dataset.from_tensor_slices((ids[:, :-1], ids[:, 1:])).batch(batch_size)

    return dataset_fn


def make_train_client_data_in_memory(
    data_dir: str, vocab: Sequence[str], batch_size: int,
    max_elements_per_client: Optional[int], *, num_epochs: int = 1,
    sequence_length: int = preprocessing.DEFAULT_SEQUENCE_LENGTH,
    num_oov_buckets: int = vocab_lib.DEFAULT_NUM_OOV_BUCKETS, split: str = "train",
    quarantine: Optional[database.Quarantine] = None,
) -> InMemoryClientData:
  """`make_train_client_data(load_client_data(data_dir)[0], ...)`, held in memory.

  The same client ids and, per client, exactly the same batches (values, batch boundaries,
  element_spec (int64, [None, sequence_length]) x and y), from one read of the database
  (`load_tokenized_clients`; about a second for the default synthetic corpus) instead of an
  SQLite query and TFF's preprocessing pipeline per client and round. For corpora that fit
  in memory (see `load_tokenized_clients`).

  Args:
    data_dir: the directory holding `stackoverflow.sqlite`.
    vocab: the vocabulary (`load_vocab`).
    batch_size: sentences per batch.
    max_elements_per_client: cap on a client's sentences, counted after the epochs (None:
      no cap).
    num_epochs: passes over a client's data.
    sequence_length: words per sentence kept (20 in the paper's setting).
    num_oov_buckets: OOV buckets (1 in the paper's setting).
    split: the split whose clients to load ("train"; "heldout" and "test" also work).
    quarantine: where to count bad records (see `load_tokenized_clients`).

  Returns:
    An `InMemoryClientData`.
  """
  batch_size = _checks.check_positive_int("batch_size", batch_size)
  clients = load_tokenized_clients(
      data_dir, split, vocab, sequence_length=sequence_length, num_oov_buckets=num_oov_buckets,
      max_elements_per_client=max_elements_per_client, num_epochs=num_epochs,
      quarantine=quarantine)
  return InMemoryClientData(clients, batch_size)
