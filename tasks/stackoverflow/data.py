"""StackOverflow next-word prediction data: loading, vocabulary and preprocessing.

The setting of paper 004 Sec. 4.1 (Table 3), which follows its ref. [8] and TFF's
StackOverflow baseline (`tff.simulation.baselines.stackoverflow`): a vocabulary of the
10,000 most frequent words, 1 out-of-vocabulary (OOV) bucket, sentences cut to 20 words.

Data: `load_client_data(data_dir)` reads `<data_dir>/stackoverflow.sqlite` (TFF's real file,
or the synthetic one of `tasks.stackoverflow.synthetic`) with TFF's own
`tff.simulation.datasets.stackoverflow.load_data`, after checking the file so that a wrong
file fails with a message naming it, instead of a download attempt or a TF error.

Training clients: `make_train_client_data` (TFF's pipeline per client: an SQLite query and
TFF's preprocessing each time a client's dataset is made, ~0.1 s) or, for corpora that fit
in memory, `make_train_client_data_in_memory` (one read of the database, tokenized with
TFF's own ops and vocabulary table; then each client's dataset is `from_tensor_slices` of
its arrays, ~1 ms): exactly the same batches.

Token ids (TFF's `word_prediction_preprocessing`; V = len(vocab), B = num_oov_buckets):

    0                 padding (pad)
    1 .. V            the words of the vocabulary, most frequent first (vocab[i] -> i + 1)
    V+1 .. V+B        OOV buckets (words not in the vocabulary are hashed into one)
    V+B+1             beginning of sentence (BOS)
    V+B+2             end of sentence (EOS)

so the model has V + B + 3 classes (10,004 at the paper's sizes). A sentence of n words
becomes [BOS, w_1, ..., w_min(n,20), EOS if n < 20], padded with 0 to 21 ids; x is ids[:-1]
and y is ids[1:] (length 20 each). BOS never occurs in y; EOS only ends sentences shorter
than 20 words.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import sqlite3
import urllib.parse
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
# TFF 0.87 exports only `create_word_prediction_task` (which downloads the word counts) from
# `tff.simulation.baselines.stackoverflow`; its preprocessing module is that task's
# implementation, used here as is.
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_preprocessing

from dp_fl import _checks
from dp_fl import files
from tasks.stackoverflow import synthetic

DATABASE_FILENAME = synthetic.DATABASE_FILENAME  # "stackoverflow.sqlite", as TFF names it.
SPLITS = synthetic.SPLITS  # ("train", "heldout", "test")
# Word counts computed from the train split, cached next to the database, in the format of
# TFF's `stackoverflow.word_count` ("WORD COUNT" lines, most frequent first).
TRAIN_WORD_COUNT_FILENAME = "stackoverflow.train.word_count"

DEFAULT_VOCAB_SIZE = tff.simulation.baselines.stackoverflow.DEFAULT_WORD_VOCAB_SIZE  # 10000
DEFAULT_SEQUENCE_LENGTH = tff.simulation.baselines.stackoverflow.DEFAULT_SEQUENCE_LENGTH  # 20
DEFAULT_NUM_OOV_BUCKETS = 1
DEFAULT_EVAL_BATCH_SIZE = 64

# Metric names (those of TFF's word-prediction baseline task).
NUM_TOKENS = "num_tokens"
ACCURACY = "accuracy"
ACCURACY_WITHOUT_OOV = "accuracy_without_out_of_vocab"
ACCURACY_WITHOUT_OOV_OR_EOS = "accuracy_without_out_of_vocab_or_end_of_sentence"

_SQLITE_MAGIC = b"SQLite format 3\x00"
_XZ_MAGIC = b"\xfd7zXZ\x00"
_REQUIRED_COLUMNS = {
    "examples": ("split_name", "client_id", "serialized_example_proto"),
    "client_metadata": ("client_id", "split_name", "num_examples"),
}
# The features TFF's `load_data` parses (all scalars): name -> tf.train.Feature kind.
_FEATURE_KINDS = {"creation_date": "bytes_list", "score": "int64_list", "tags": "bytes_list",
                  "title": "bytes_list", "tokens": "bytes_list", "type": "bytes_list"}
_MAX_LISTED = 5

_logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Token ids.


@dataclasses.dataclass(frozen=True)
class TokenIds:
  """The token-id layout (see the module docstring).

  Attributes:
    vocab_size: V, the number of vocabulary words (ids 1..V).
    num_oov_buckets: B, the number of OOV buckets.
    pad: the padding id, 0.
    oov: the OOV bucket ids, V+1..V+B.
    bos: the beginning-of-sentence id, V+B+1.
    eos: the end-of-sentence id, V+B+2.
  """
  vocab_size: int
  num_oov_buckets: int
  pad: int
  oov: tuple[int, ...]
  bos: int
  eos: int

  @property
  def extended_vocab_size(self) -> int:
    """Number of model classes: V + B + 3 (pad, BOS, EOS)."""
    return self.vocab_size + self.num_oov_buckets + 3


def token_ids(vocab_size: int, num_oov_buckets: int = DEFAULT_NUM_OOV_BUCKETS) -> TokenIds:
  """The token-id layout for a vocabulary of `vocab_size` words (TFF's special tokens)."""
  vocab_size = _checks.check_positive_int("vocab_size", vocab_size)
  num_oov_buckets = _checks.check_positive_int("num_oov_buckets", num_oov_buckets)
  special = word_prediction_preprocessing.get_special_tokens(vocab_size, num_oov_buckets)
  return TokenIds(vocab_size=vocab_size, num_oov_buckets=num_oov_buckets,
                  pad=int(special.padding), oov=tuple(int(t) for t in special.out_of_vocab),
                  bos=int(special.beginning_of_sentence), eos=int(special.end_of_sentence))


def accuracy_masks(ids: TokenIds) -> dict[str, tuple[int, ...]]:
  """Accuracy metric name -> the target ids it leaves out.

  `accuracy` leaves out padding; `accuracy_without_out_of_vocab` also the OOV buckets;
  `accuracy_without_out_of_vocab_or_end_of_sentence` also BOS and EOS (BOS is never a
  target, so this equals TFF's metric of that name, which masks pad, OOV and EOS).
  """
  return {
      ACCURACY: (ids.pad,),
      ACCURACY_WITHOUT_OOV: (ids.pad, *ids.oov),
      ACCURACY_WITHOUT_OOV_OR_EOS: (ids.pad, *ids.oov, ids.bos, ids.eos),
  }


# ---------------------------------------------------------------------------------------------
# The database.


def _database_path(data_dir: Any) -> str:
  """`<data_dir>/stackoverflow.sqlite`, requiring it to exist."""
  if not isinstance(data_dir, (str, os.PathLike)) or not os.fspath(data_dir):
    raise ValueError(
        "`data_dir` must be a directory path (the --data_dir flag) holding "
        f"{DATABASE_FILENAME}; got {data_dir!r}.")
  data_dir = os.path.abspath(os.path.expanduser(os.fspath(data_dir)))
  if os.path.isfile(data_dir):
    raise ValueError(
        f"`data_dir` must be the directory that holds {DATABASE_FILENAME}, not a file; got "
        f"{data_dir!r}. Pass --data_dir={os.path.dirname(data_dir)} instead.")
  path = os.path.join(data_dir, DATABASE_FILENAME)
  if not os.path.exists(path):
    raise ValueError(
        f"StackOverflow data file {path} does not exist. `data_dir` (the --data_dir flag) "
        f"must be a directory holding TFF's {DATABASE_FILENAME} (tables `examples` and "
        "`client_metadata`, splits train/heldout/test). Leave --data_dir unset to use the "
        "default synthetic corpus (tasks.stackoverflow.synthetic.ensure_corpus), or put the "
        "real file there (the lzma-decompressed https://storage.googleapis.com/"
        "tff-datasets-public/stackoverflow.sqlite.lzma).")
  return path


def _connect_read_only(path: str) -> sqlite3.Connection:
  return sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True)


def _listed(items: Sequence[Any]) -> str:
  shown = ", ".join(repr(item) for item in items[:_MAX_LISTED])
  more = len(items) - _MAX_LISTED
  return shown + (f" and {more} more" if more > 0 else "")


def _check_header(path: str) -> None:
  with open(path, "rb") as f:
    head = f.read(len(_SQLITE_MAGIC))
  if head == _SQLITE_MAGIC:
    return
  hint = ""
  if head.startswith(_XZ_MAGIC):
    hint = " It is an xz/lzma archive: decompress it (e.g. `unxz -k`) first."
  raise ValueError(
      f"StackOverflow data file {path} is not an SQLite database (it starts with "
      f"{head!r}, expected {_SQLITE_MAGIC!r}).{hint} Expected TFF's {DATABASE_FILENAME}; "
      "re-download it (a synthetic corpus is regenerated once its file is deleted).")


def _check_schema(path: str, connection: sqlite3.Connection) -> None:
  tables = {row[0] for row in connection.execute(
      "SELECT name FROM sqlite_master WHERE type = 'table';")}
  for table, required in _REQUIRED_COLUMNS.items():
    expected = f"{table}({', '.join(required)})"
    if table not in tables:
      raise ValueError(
          f"StackOverflow data file {path} has the wrong schema: no table `{table}` (it has "
          f"{sorted(tables)}). Expected TFF's tables examples(split_name, client_id, "
          "serialized_example_proto) and client_metadata(client_id, split_name, "
          "num_examples).")
    columns = {row[1] for row in connection.execute(f"PRAGMA table_info({table});")}
    missing = [c for c in required if c not in columns]
    if missing:
      raise ValueError(
          f"StackOverflow data file {path} has the wrong schema: table `{table}` lacks "
          f"column(s) {missing} (it has {sorted(columns)}). Expected {expected}.")


def _check_first_example(path: str, connection: sqlite3.Connection) -> None:
  """The first train example must parse as the tf.train.Example TFF's `load_data` expects."""
  row = connection.execute(
      "SELECT client_id, serialized_example_proto FROM examples WHERE split_name = 'train' "
      "LIMIT 1;").fetchone()
  client_id, blob = row
  expected = ("a serialized tf.train.Example with scalar features "
              + ", ".join(f"{k} ({'int64' if v == 'int64_list' else 'bytes'})"
                          for k, v in _FEATURE_KINDS.items()))
  try:
    example = tf.train.Example.FromString(bytes(blob))
  except Exception as e:  # pylint: disable=broad-except  # protobuf's DecodeError varies.
    raise ValueError(
        f"StackOverflow data file {path}: the first train example of client {client_id!r} "
        f"is not {expected} ({type(e).__name__}: {e}).") from e
  features = example.features.feature
  for name, kind in _FEATURE_KINDS.items():
    if name not in features:
      problem = f"has no feature {name!r} (it has {sorted(features)})"
    elif features[name].WhichOneof("kind") != kind:
      problem = f"has feature {name!r} of kind {features[name].WhichOneof('kind')}"
    elif len(getattr(features[name], kind).value) != 1:
      problem = (f"has {len(getattr(features[name], kind).value)} values in feature "
                 f"{name!r}")
    else:
      continue
    raise ValueError(
        f"StackOverflow data file {path}: the first train example of client {client_id!r} "
        f"{problem}; expected {expected}.")


def check_database(data_dir: str) -> dict[str, dict[str, int]]:
  """Checks `<data_dir>/stackoverflow.sqlite` against the format TFF's `load_data` reads.

  Checks, each failing with a `ValueError` that names the file and what was expected: the
  file exists; it is an SQLite database and readable (not corrupt); it has the tables and
  columns of TFF's `SqlClientData`; the split names are exactly train, heldout and test,
  each with clients; every client in `client_metadata` has `num_examples` >= 1 and rows
  in `examples` (and every client with rows is in `client_metadata`); client ids contain no
  quote (TFF splices them into SQL); the first train example parses as TFF expects.
  A `num_examples` that differs from the client's row count is logged as a warning. Costs
  one pass over the (client_id, split_name) index of `examples` (milliseconds for the
  synthetic corpus), or over the table if it has no such index.

  Args:
    data_dir: the directory holding `stackoverflow.sqlite`.

  Returns:
    Per split: {"clients": number of clients, "examples": number of examples}.
  """
  path = _database_path(data_dir)
  _check_header(path)
  try:
    connection = _connect_read_only(path)
    try:
      _check_schema(path, connection)
      metadata = connection.execute(
          "SELECT client_id, split_name, num_examples FROM client_metadata;").fetchall()
      # Uses the (client_id, split_name) index when there is one; a full scan otherwise.
      row_counts = {(client_id, split): count for client_id, split, count in connection.execute(
          "SELECT client_id, split_name, COUNT(*) FROM examples "
          "GROUP BY client_id, split_name;")}
      summary = _check_clients(path, metadata, row_counts)
      _check_first_example(path, connection)
    finally:
      connection.close()
  except sqlite3.DatabaseError as e:
    raise ValueError(
        f"StackOverflow data file {path} is corrupt or not a readable SQLite database "
        f"(sqlite3: {e}). Expected TFF's {DATABASE_FILENAME}; re-download it (a synthetic "
        "corpus is regenerated once its file is deleted).") from e
  return summary


def _check_clients(path: str, metadata: list[tuple[Any, Any, Any]],
                   row_counts: Mapping[tuple[Any, Any], int]) -> dict[str, dict[str, int]]:
  """Split names, empty clients and metadata/rows consistency."""
  expected_splits = f"exactly {list(SPLITS)}"
  split_counts = collections.Counter(split for _, split, _ in metadata)
  row_splits = collections.Counter()
  for (_, split), count in row_counts.items():
    row_splits[split] += count
  unknown = sorted({str(s) for s in split_counts} - set(SPLITS))
  if unknown:
    raise ValueError(
        f"StackOverflow data file {path} has unknown split name(s) {unknown} in table "
        f"`client_metadata` (clients per split: {dict(split_counts)}); expected "
        f"{expected_splits}.")
  unknown = sorted({str(s) for s in row_splits} - set(SPLITS))
  if unknown:
    raise ValueError(
        f"StackOverflow data file {path} has unknown split name(s) {unknown} in table "
        f"`examples` (examples per split: {dict(row_splits)}); expected {expected_splits}.")
  missing = [s for s in SPLITS if split_counts[s] == 0]
  if missing:
    raise ValueError(
        f"StackOverflow data file {path} has no clients in split(s) {missing} (clients per "
        f"split in `client_metadata`: {dict(split_counts)}); expected clients in each of "
        f"{list(SPLITS)}.")
  not_positive = [(c, s, n) for c, s, n in metadata
                  if not isinstance(n, int) or n <= 0]
  if not_positive:
    raise ValueError(
        f"StackOverflow data file {path}: {len(not_positive)} client(s) have num_examples "
        f"< 1 in `client_metadata` (client_id, split_name, num_examples): "
        f"{_listed(not_positive)}; expected every client to have at least one example.")
  listed = {(c, s) for c, s, _ in metadata}
  no_rows = sorted((key for key in listed if key not in row_counts), key=str)
  if no_rows:
    raise ValueError(
        f"StackOverflow data file {path}: {len(no_rows)} client(s) of `client_metadata` have "
        f"no rows in `examples` (client_id, split_name): {_listed(no_rows)}; expected every "
        "client to have at least one example.")
  unlisted = sorted((key for key in row_counts if key not in listed), key=str)
  if unlisted:
    raise ValueError(
        f"StackOverflow data file {path}: {len(unlisted)} client(s) have rows in `examples` "
        f"but are missing from `client_metadata` (client_id, split_name): "
        f"{_listed(unlisted)}; expected every client to be listed in `client_metadata`.")
  quoted = sorted({str(c) for c, _ in listed if "'" in str(c)})
  if quoted:
    raise ValueError(
        f"StackOverflow data file {path}: client id(s) {_listed(quoted)} contain a quote "
        "('), which TFF's SqlClientData cannot query; expected ids without quotes.")
  mismatched = [(c, s, n, row_counts[(c, s)]) for c, s, n in metadata
                if row_counts[(c, s)] != n]
  if mismatched:
    _logger.warning(
        "%s: %d client(s) have num_examples in `client_metadata` different from their rows "
        "in `examples` (client_id, split_name, num_examples, rows): %s", path,
        len(mismatched), _listed(mismatched))
  return {split: {"clients": split_counts[split], "examples": row_splits[split]}
          for split in SPLITS}


def load_client_data(
    data_dir: str,
) -> tuple[tff.simulation.datasets.ClientData, tff.simulation.datasets.ClientData,
           tff.simulation.datasets.ClientData]:
  """(train, heldout, test) client data of `<data_dir>/stackoverflow.sqlite`.

  Checks the file (`check_database`), then reads it with TFF's unmodified
  `tff.simulation.datasets.stackoverflow.load_data(cache_dir=data_dir)`, which finds the file
  and downloads nothing. Each client's dataset yields TFF's parsed examples: OrderedDicts
  with scalar `creation_date`, `score`, `tags`, `title`, `tokens` and `type`.

  Args:
    data_dir: the directory holding `stackoverflow.sqlite` (the real file, or
      `tasks.stackoverflow.synthetic.ensure_corpus()`).

  Returns:
    TFF `ClientData` for the train, heldout and test splits.
  """
  check_database(data_dir)
  data_dir = os.path.abspath(os.path.expanduser(os.fspath(data_dir)))
  return tff.simulation.datasets.stackoverflow.load_data(cache_dir=data_dir)


# ---------------------------------------------------------------------------------------------
# Vocabulary.


def read_word_counts(path: str, max_words: Optional[int] = None) -> dict[str, int]:
  """Reads a word-count file in the format of TFF's `stackoverflow.word_count`.

  Every line is `WORD COUNT`: a word without whitespace, whitespace, a non-negative integer;
  words are distinct and counts non-increasing (most frequent first). Like TFF's
  `load_word_counts`, only the first `max_words` lines are read (and checked).

  Args:
    path: the file.
    max_words: how many lines to read (all when None).

  Returns:
    word -> count, in file order.
  """
  if max_words is not None:
    max_words = _checks.check_positive_int("max_words", max_words)
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise ValueError(
        f"Word count file {path} does not exist (or is not a file). Expected a file in the "
        "format of TFF's stackoverflow.word_count ('WORD COUNT' lines, most frequent first); "
        "pass another word_count_file, or none to count the train split.")
  fmt = ("expected 'WORD COUNT' (a word without spaces, whitespace, a non-negative integer), "
         "as in TFF's stackoverflow.word_count")
  counts: dict[str, int] = {}
  previous = None
  try:
    with open(path, encoding="utf-8") as f:
      for line_number, line in enumerate(f, start=1):
        fields = line.split()
        where = f"Word count file {path}, line {line_number}"
        if len(fields) != 2:
          raise ValueError(f"{where}: {fmt}; got {line.rstrip(chr(10))!r}.")
        word, count_text = fields
        if not (count_text.isascii() and count_text.isdigit()):
          raise ValueError(f"{where}: the count must be a non-negative integer; {fmt}; got "
                           f"{line.rstrip(chr(10))!r}.")
        count = int(count_text)
        if word in counts:
          raise ValueError(f"{where}: word {word!r} repeats an earlier line; expected each "
                           "word once.")
        if previous is not None and count > previous:
          raise ValueError(f"{where}: count {count} of {word!r} exceeds the previous line's "
                           f"{previous}; expected counts in non-increasing order (most "
                           "frequent first).")
        counts[word] = count
        previous = count
        if max_words is not None and len(counts) >= max_words:
          break
  except UnicodeDecodeError as e:
    raise ValueError(f"Word count file {path} is not UTF-8 text ({e}); {fmt}.") from e
  if not counts:
    raise ValueError(f"Word count file {path} is empty; {fmt}.")
  return counts


def write_word_counts(path: str, counts: Mapping[str, int]) -> None:
  """Writes `counts` (in order) as `WORD COUNT` lines, atomically (temp file + rename)."""
  files.atomic_write_text(
      os.fspath(path), "".join(f"{word} {count}\n" for word, count in counts.items()))


def count_train_words(data_dir: str) -> dict[str, int]:
  """Word counts of the train split, as TFF's `stackoverflow.word_count` defines them.

  The count of a word is the number of train clients with at least one sentence containing
  it (ties: more occurrences first, then alphabetical). Reads the database directly
  (sqlite3 + protobuf): seconds for the synthetic corpus; use the real word-count file for
  the real data.

  Args:
    data_dir: the directory holding `stackoverflow.sqlite`.

  Returns:
    word -> count, most frequent first.
  """
  check_database(data_dir)
  path = _database_path(data_dir)
  clients: collections.Counter = collections.Counter()
  occurrences: collections.Counter = collections.Counter()
  try:
    connection = _connect_read_only(path)
    try:
      current, words = None, set()
      for client_id, blob in connection.execute(
          "SELECT client_id, serialized_example_proto FROM examples "
          "WHERE split_name = 'train' ORDER BY client_id;"):
        if client_id != current:
          clients.update(words)
          current, words = client_id, set()
        tokens = tf.train.Example.FromString(bytes(blob)).features.feature["tokens"]
        sentence = tokens.bytes_list.value[0].decode("utf-8").split(" ")
        occurrences.update(sentence)
        words.update(sentence)
      clients.update(words)
    finally:
      connection.close()
  except sqlite3.DatabaseError as e:
    raise ValueError(
        f"StackOverflow data file {path} is corrupt or not a readable SQLite database "
        f"(sqlite3: {e}); expected TFF's {DATABASE_FILENAME}.") from e
  clients.pop("", None)  # Double spaces; an empty word cannot be written as a line.
  ordered = sorted(clients, key=lambda w: (-clients[w], -occurrences[w], w))
  return {word: clients[word] for word in ordered}


def load_vocab(data_dir: str, vocab_size: int = DEFAULT_VOCAB_SIZE,
               word_count_file: Optional[str] = None) -> list[str]:
  """The `vocab_size` most frequent words: the vocabulary of the token ids.

  With `word_count_file` (e.g. TFF's real `stackoverflow.word_count`), its first
  `vocab_size` words, as TFF's `load_word_counts` (which needs a download) reads them.
  Without it, the counts of the train split (`count_train_words`), computed once and cached
  in `<data_dir>/stackoverflow.train.word_count` (same format; recomputed when the database
  is newer than the cache).

  Args:
    data_dir: the directory holding `stackoverflow.sqlite`.
    vocab_size: number of words (V; 10,000 in the paper's setting).
    word_count_file: optional word-count file.

  Returns:
    The words, most frequent first (fewer than `vocab_size` when the corpus has fewer
    distinct words: a warning is logged, and the model must use `len(vocab)`).
  """
  vocab_size = _checks.check_positive_int("vocab_size", vocab_size)
  if word_count_file is not None:
    counts = read_word_counts(word_count_file, max_words=vocab_size)
  else:
    database = _database_path(data_dir)
    cache = os.path.join(os.path.dirname(database), TRAIN_WORD_COUNT_FILENAME)
    if (os.path.isfile(cache)
        and os.stat(cache).st_mtime_ns >= os.stat(database).st_mtime_ns):
      counts = read_word_counts(cache, max_words=vocab_size)
    else:
      counts = count_train_words(data_dir)
      try:
        write_word_counts(cache, counts)
      except OSError as e:
        _logger.warning("Could not cache the train word counts in %s (%s); they will be "
                        "counted again next time.", cache, e)
  vocab = list(counts)[:vocab_size]
  if len(vocab) < vocab_size:
    _logger.warning("The vocabulary has %d words, fewer than vocab_size=%d: the corpus has no "
                    "more distinct words.", len(vocab), vocab_size)
  return vocab


# ---------------------------------------------------------------------------------------------
# Preprocessing.


def _check_vocab(vocab: Any) -> list[str]:
  if isinstance(vocab, str) or not isinstance(vocab, Sequence) or not vocab:
    raise ValueError(f"`vocab` must be a non-empty list of words (see load_vocab); got "
                     f"{type(vocab).__name__}.")
  vocab = list(vocab)
  bad = [w for w in vocab if not isinstance(w, str) or not w or any(c.isspace() for c in w)]
  if bad:
    raise ValueError(f"`vocab` must hold non-empty words without whitespace; got "
                     f"{_listed(bad)}.")
  if len(set(vocab)) != len(vocab):
    duplicates = [w for w, n in collections.Counter(vocab).items() if n > 1]
    raise ValueError(f"`vocab` must hold distinct words; got repeated {_listed(duplicates)}.")
  return vocab


def _preprocess_fn(vocab: Sequence[str], batch_size: int, max_elements: Optional[int],
                   num_epochs: int, sequence_length: int, num_oov_buckets: int):
  """TFF's baseline preprocessing without shuffling (ClientSpec shuffle_buffer_size=1)."""
  vocab = _check_vocab(vocab)
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
    num_oov_buckets: int = DEFAULT_NUM_OOV_BUCKETS,
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
  return train.preprocess(_preprocess_fn(vocab, batch_size, max_elements_per_client,
                                         num_epochs, sequence_length, num_oov_buckets))


def make_eval_dataset(
    client_data: tff.simulation.datasets.ClientData, vocab: Sequence[str],
    max_clients: Optional[int] = None, *, batch_size: int = DEFAULT_EVAL_BATCH_SIZE,
    max_elements_per_client: Optional[int] = None,
    sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
    num_oov_buckets: int = DEFAULT_NUM_OOV_BUCKETS, seed: int = 0,
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

  Returns:
    The dataset, deterministic: clients in sorted-id order, each one's sentences in stored
    order.
  """
  _check_client_data("client_data", client_data)
  seed = _checks.check_nonnegative_int("seed", seed)
  client_ids = sorted(client_data.client_ids)
  if max_clients is not None:
    max_clients = _checks.check_positive_int("max_clients", max_clients)
    if max_clients < len(client_ids):
      picked = np.random.default_rng(seed).choice(len(client_ids), size=max_clients,
                                                  replace=False)
      client_ids = [client_ids[i] for i in np.sort(picked)]
  if max_elements_per_client is not None:
    max_elements_per_client = _checks.check_positive_int("max_elements_per_client",
                                                         max_elements_per_client)
  take = -1 if max_elements_per_client is None else max_elements_per_client
  dataset_fn = client_data.serializable_dataset_fn
  sentences = tf.data.Dataset.from_tensor_slices(client_ids).flat_map(
      lambda client_id: dataset_fn(client_id).take(take))
  return _preprocess_fn(vocab, batch_size, None, 1, sequence_length,
                        num_oov_buckets)(sentences)


# ---------------------------------------------------------------------------------------------
# In-memory training clients: the same batches as `make_train_client_data`, without SQLite
# or TFF's per-client pipeline at round time.

# Sentences tokenized per batched TF call (bounds the transient memory of a chunk).
_TOKENIZE_CHUNK = 1 << 16


class _Tokenizer:
  """TFF's `build_to_ids_fn`, applied to many serialized examples at once.

  The same TF ops as TFF's per-example function (`tf.io.parse_example` of the scalar
  `tokens` feature, `tf.strings.split(sep=' ')`, the first `sequence_length` words, the same
  `StaticVocabularyTable` (so OOV words get TF's own Fingerprint64 hash buckets), + 1, EOS when
  fewer than `sequence_length` words, BOS first), vectorized over a chunk; then padded with 0
  to `sequence_length + 1` ids as TFF's `padded_batch` does. Exact by construction.
  """

  def __init__(self, vocab: Sequence[str], sequence_length: int, num_oov_buckets: int):
    special = word_prediction_preprocessing.get_special_tokens(len(vocab), num_oov_buckets)
    self._bos = int(special.beginning_of_sentence)
    self._eos = int(special.end_of_sentence)
    self._length = sequence_length
    self._dtype = np.int32 if self._eos < np.iinfo(np.int32).max else np.int64
    self._table = tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(list(vocab),
                                            tf.range(len(vocab), dtype=tf.int64)),
        num_oov_buckets=num_oov_buckets)

  def __call__(self, blobs: list[bytes]) -> np.ndarray:
    """[len(blobs), sequence_length + 1] token ids, one row per serialized example."""
    tokens = tf.io.parse_example(
        tf.constant(blobs, dtype=tf.string),
        {"tokens": tf.io.FixedLenFeature(dtype=tf.string, shape=())})["tokens"]
    words = tf.strings.split(tokens, sep=" ")[:, :self._length]
    ids = (self._table.lookup(words.flat_values) + 1).numpy()
    lengths = words.row_lengths().numpy()
    out = np.zeros((len(blobs), self._length + 1), dtype=self._dtype)
    out[:, 0] = self._bos
    rows = np.repeat(np.arange(len(blobs)), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[rows, 1 + np.arange(ids.size) - starts] = ids
    short = np.flatnonzero(lengths < self._length)
    out[short, lengths[short] + 1] = self._eos
    return out


def _unknown_client(client_id: Any, client_ids: Sequence[str], what: str) -> ValueError:
  return ValueError(
      f"`client_id` {client_id!r} is not a client of this {what} ({len(client_ids)} clients, "
      f"e.g. {_listed(client_ids)}); pass one of its `client_ids`.")


class TokenizedClients(Mapping[str, tuple[np.ndarray, np.ndarray]]):
  """Every client of a split, preprocessed, in memory (`load_tokenized_clients`).

  A read-only mapping client id -> (x, y): int64 arrays of shape [n, sequence_length], n the
  client's number of elements (its sentences in stored order, repeated `num_epochs` times,
  the first `max_elements_per_client` taken), row i the i-th element's x = ids[:-1] and
  y = ids[1:] (see the module docstring): the rows `make_train_client_data`'s dataset yields,
  unbatched. Iterates over the client ids in sorted order (TFF's `client_ids`). Stores each
  used sentence once ([sentences, sequence_length + 1] int32 ids); the arrays returned are
  fresh copies.
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
    sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
    num_oov_buckets: int = DEFAULT_NUM_OOV_BUCKETS,
    max_elements_per_client: Optional[int] = None, num_epochs: int = 1,
) -> TokenizedClients:
  """Every client of `split`, tokenized exactly as `make_train_client_data`, in memory.

  Reads `<data_dir>/stackoverflow.sqlite` once with sqlite3: one scan of the split's rows of
  `examples` in rowid order, the order in which TFF's per-client query
  (`SqlClientData`: `SELECT ... WHERE client_id = ... and split_name = ...`, no ORDER BY)
  returns a client's rows, whether SQLite answers it from the (client_id, split_name) index
  or by a table scan. Clients are those of `client_metadata` (TFF's `client_ids`, sorted).
  Sentences beyond a client's first `max_elements_per_client` are not parsed. Parsing and
  tokenization use TFF's own ops and vocabulary table, batched (`_Tokenizer`), so the ids,
  OOV hash buckets included, are TFF's.

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

  Returns:
    The `TokenizedClients` (client id -> (x, y) int64 arrays).
  """
  vocab = _check_vocab(vocab)
  if split not in SPLITS:
    raise ValueError(f"`split` must be one of {list(SPLITS)}; got {split!r}.")
  sequence_length = _checks.check_positive_int("sequence_length", sequence_length)
  num_oov_buckets = _checks.check_positive_int("num_oov_buckets", num_oov_buckets)
  num_epochs = _checks.check_positive_int("num_epochs", num_epochs)
  cap = max_elements_per_client
  if cap is not None:
    cap = _checks.check_positive_int("max_elements_per_client", cap)
  check_database(data_dir)
  path = _database_path(data_dir)
  tokenize = _Tokenizer(vocab, sequence_length, num_oov_buckets)
  chunks: list[np.ndarray] = []
  owners: list[int] = []  # The client position of every stored sentence, in row order.
  try:
    connection = _connect_read_only(path)
    try:
      client_ids = sorted(client_id for client_id, in connection.execute(
          "SELECT DISTINCT client_id FROM client_metadata WHERE split_name = ?;", (split,)))
      index = {client_id: i for i, client_id in enumerate(client_ids)}
      totals = [0] * len(client_ids)
      blobs: list[bytes] = []
      for client_id, blob in connection.execute(
          "SELECT client_id, serialized_example_proto FROM examples WHERE split_name = ? "
          "ORDER BY rowid;", (split,)):
        i = index.get(client_id)
        if i is None:  # Not in client_metadata: not a client for TFF either.
          continue
        totals[i] += 1
        if cap is not None and totals[i] > cap:
          continue
        owners.append(i)
        blobs.append(bytes(blob))
        if len(blobs) == _TOKENIZE_CHUNK:
          chunks.append(_tokenize_checked(tokenize, blobs, path, split))
          blobs = []
      if blobs:
        chunks.append(_tokenize_checked(tokenize, blobs, path, split))
    finally:
      connection.close()
  except sqlite3.DatabaseError as e:
    raise ValueError(
        f"StackOverflow data file {path} is corrupt or not a readable SQLite database "
        f"(sqlite3: {e}); expected TFF's {DATABASE_FILENAME}.") from e
  owner = np.asarray(owners, dtype=np.int64)
  rows = (np.concatenate(chunks) if chunks
          else np.zeros((0, sequence_length + 1), dtype=np.int32))
  rows = rows[np.argsort(owner, kind="stable")]  # Client by client, stored order within.
  offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=len(client_ids)))])
  num_elements = np.asarray(totals, dtype=np.int64) * num_epochs
  if cap is not None:
    num_elements = np.minimum(num_elements, cap)
  return TokenizedClients(client_ids, rows, offsets.astype(np.int64), num_elements,
                          sequence_length)


def _tokenize_checked(tokenize: _Tokenizer, blobs: list[bytes], path: str,
                      split: str) -> np.ndarray:
  try:
    return tokenize(blobs)
  except tf.errors.InvalidArgumentError as e:
    raise ValueError(
        f"StackOverflow data file {path}: an example of split {split!r} is not a serialized "
        f"tf.train.Example with a scalar bytes feature 'tokens', as TFF's load_data expects "
        f"({e.message.splitlines()[0] if e.message else type(e).__name__}).") from e


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
    sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
    num_oov_buckets: int = DEFAULT_NUM_OOV_BUCKETS, split: str = "train",
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

  Returns:
    An `InMemoryClientData`.
  """
  batch_size = _checks.check_positive_int("batch_size", batch_size)
  clients = load_tokenized_clients(
      data_dir, split, vocab, sequence_length=sequence_length, num_oov_buckets=num_oov_buckets,
      max_elements_per_client=max_elements_per_client, num_epochs=num_epochs)
  return InMemoryClientData(clients, batch_size)


# ---------------------------------------------------------------------------------------------
# Reference accuracies.


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


def _check_ids(name: str, ids: TokenIds, *arrays: np.ndarray) -> None:
  for array in arrays:
    if array.size and (array.min() < 0 or array.max() >= ids.extended_vocab_size):
      raise ValueError(
          f"`{name}` holds token ids outside [0, {ids.extended_vocab_size}) (vocab_size="
          f"{ids.vocab_size}, num_oov_buckets={ids.num_oov_buckets}); got ids in "
          f"[{array.min()}, {array.max()}]: was it made with another vocabulary?")


def _accuracies(predictions: np.ndarray, targets: np.ndarray,
                ids: TokenIds) -> dict[str, float]:
  out = {}
  correct = predictions == targets
  for name, masked in accuracy_masks(ids).items():
    keep = ~np.isin(targets, masked)
    out[name] = float(correct[keep].mean()) if keep.any() else 0.0
  return out


def _most_frequent_word(targets: np.ndarray, ids: TokenIds) -> int:
  counts = np.bincount(targets, minlength=ids.extended_vocab_size)
  return 1 + int(np.argmax(counts[1:ids.vocab_size + 1]))


def unigram_baseline_accuracy(
    eval_dataset: tf.data.Dataset, vocab_size: int,
    num_oov_buckets: int = DEFAULT_NUM_OOV_BUCKETS, token_id: Optional[int] = None,
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
  ids = token_ids(vocab_size, num_oov_buckets)
  _, targets = _pairs(eval_dataset, "eval_dataset")
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
    num_oov_buckets: int = DEFAULT_NUM_OOV_BUCKETS,
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
  ids = token_ids(vocab_size, num_oov_buckets)
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
