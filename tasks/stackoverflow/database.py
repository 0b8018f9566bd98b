"""The StackOverflow database on disk: TFF's SQLite format, its checks, and loading.

One file, `<data_dir>/stackoverflow.sqlite` (TFF's real file, or the synthetic one of
`tasks.stackoverflow.synthetic`, which writes this format), with the tables TFF's
`SqlClientData` reads:

    examples(split_name, client_id, serialized_example_proto)
    client_metadata(client_id, split_name, num_examples)

splits train, heldout and test, every example a serialized `tf.train.Example` with the
scalar features creation_date, score (int64), tags, title, tokens and type (bytes).

`write_database` writes it (the synthetic and the real-text corpora);
`load_client_data(data_dir)` reads it as TFF's own
`tff.simulation.datasets.stackoverflow.load_data` does, after `check_database` has checked the
file so that a wrong file fails with a message naming it, instead of a download attempt or a
TF error. `open_database` is the checked read-only connection of the modules that read the
file directly (word counts, the in-memory clients).

Bad records. A file whose schema is wrong, or whose first records are mostly not TFF's
examples, is refused up front (`check_database`, a `ValueError`). A few bad records in a good
file are quarantined instead: every reader checks a client's records with `check_records`
(what TFF's parser accepts, and UTF-8 `tokens`) before TF sees them, leaves the bad ones out
(the good ones keep their order) and counts them in the file's `Quarantine` (per split,
reason and client), which the task reports as its data quality. Reasons:

    not_an_example           the bytes are not a serialized tf.train.Example
    missing_<feature>        one of the six features is absent
    wrong_kind_<feature>     e.g. an int64 list where bytes are expected
    not_scalar_<feature>     not exactly one value
    tokens_not_utf8          the sentence is not UTF-8 text
    unparsable               TF's parser refuses it for another reason
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import dataclasses
import logging
import os
import sqlite3
import tempfile
import threading
import time
import urllib.parse
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl import files
from tasks import sql_client_data
from tasks.stackoverflow import _messages

DATABASE_FILENAME = "stackoverflow.sqlite"  # As TFF names it.
SPLITS = ("train", "heldout", "test")

_SQLITE_MAGIC = b"SQLite format 3\x00"
_XZ_MAGIC = b"\xfd7zXZ\x00"
_REQUIRED_COLUMNS = {
    "examples": ("split_name", "client_id", "serialized_example_proto"),
    "client_metadata": ("client_id", "split_name", "num_examples"),
}
# The features TFF's `load_data` parses (all scalars): name -> tf.train.Feature kind.
_FEATURE_KINDS = {"creation_date": "bytes_list", "score": "int64_list", "tags": "bytes_list",
                  "title": "bytes_list", "tokens": "bytes_list", "type": "bytes_list"}

# TFF's parse spec of `load_data` (`_add_proto_parsing`), built from the kinds above.
_PARSE_SPEC = collections.OrderedDict(
    (name, tf.io.FixedLenFeature(dtype=tf.int64 if kind == "int64_list" else tf.string,
                                 shape=()))
    for name, kind in _FEATURE_KINDS.items())
_EXPECTED_EXAMPLE = ("a serialized tf.train.Example with scalar features "
                     + ", ".join(f"{k} ({'int64' if v == 'int64_list' else 'bytes'})"
                                 for k, v in _FEATURE_KINDS.items())
                     + ", tokens UTF-8 text")
# A file with more bad records than this fraction of those checked is refused, not
# quarantined: it is not TFF's StackOverflow data (or it is damaged beyond use).
MAX_BAD_FRACTION = 0.5
# Records checked up front by `check_database` (the first train records, in rowid order).
SAMPLE_RECORDS = 1000

_logger = logging.getLogger(__name__)


def database_path(data_dir: Any) -> str:
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


# ---------------------------------------------------------------------------------------------
# Records: the check, the quarantine, and client data that leaves bad records out.


def _parse_records(blobs: Sequence[bytes]) -> Optional[dict[str, np.ndarray]]:
  """TFF's parse of `blobs` (one batched `tf.io.parse_example`), or None if it refuses any."""
  try:
    parsed = tf.io.parse_example(tf.constant(list(blobs), dtype=tf.string,
                                             shape=[len(blobs)]), _PARSE_SPEC)
  # TF's message quotes the record, which fails to decode when it is not UTF-8.
  except (tf.errors.InvalidArgumentError, UnicodeDecodeError):
    return None
  return {name: value.numpy() for name, value in parsed.items()}


def _refused(blobs: Sequence[bytes], positions: list[int]) -> list[int]:
  """The positions whose record TF's parser refuses (bisection: few parses for few bad)."""
  if not positions or _parse_records([blobs[i] for i in positions]) is not None:
    return []
  if len(positions) == 1:
    return positions
  middle = len(positions) // 2
  return _refused(blobs, positions[:middle]) + _refused(blobs, positions[middle:])


def _example_problem(blob: bytes) -> Optional[tuple[str, str]]:
  """(reason, what is wrong) if TFF's parse spec refuses `blob` (protobuf, in Python)."""
  try:
    example = tf.train.Example.FromString(blob)
  except Exception as e:  # pylint: disable=broad-except  # protobuf's DecodeError varies.
    return "not_an_example", (f"is not a serialized tf.train.Example ({type(e).__name__}: "
                              f"{e}; {len(blob)} bytes starting {blob[:16]!r})")
  features = example.features.feature
  for name, kind in _FEATURE_KINDS.items():
    if name not in features:
      return f"missing_{name}", f"has no feature {name!r} (it has {sorted(features)})"
    found = features[name].WhichOneof("kind")
    if found != kind:
      return f"wrong_kind_{name}", f"has feature {name!r} of kind {found}, not {kind}"
    values = len(getattr(features[name], kind).value)
    if values != 1:
      return f"not_scalar_{name}", f"has {values} values in feature {name!r}, not 1"
  return None


@dataclasses.dataclass(frozen=True)
class RecordCheck:
  """What `check_records` found.

  Attributes:
    good: [n] bool, whether each record is good.
    tokens: the `tokens` feature (bytes) of the good records, in order.
    problems: (position, reason, what is wrong) of each bad record, in order.
  """
  good: np.ndarray
  tokens: np.ndarray
  problems: list[tuple[int, str, str]]

  def reasons(self) -> collections.Counter:
    """Bad records by reason."""
    return collections.Counter(reason for _, reason, _ in self.problems)


def check_records(blobs: Sequence[bytes]) -> RecordCheck:
  """Which serialized examples TFF's StackOverflow pipeline can use, and why not the others.

  A record is good when TFF's parser (`load_data`'s spec: the six scalar features) accepts
  it and its `tokens` are UTF-8 text. One batched parse when all are good (about 2 µs a
  record); when the batch is refused, protobuf checks each record against the same spec
  and names what is wrong (about 5 µs a record), and bisection finds any other record TF's
  parser refuses. The verdict on a record never depends on the records checked with it.

  Args:
    blobs: serialized examples (`serialized_example_proto` values).

  Returns:
    The `RecordCheck`.
  """
  blobs = [bytes(blob) for blob in blobs]
  good = np.ones(len(blobs), dtype=bool)
  problems: dict[int, tuple[str, str]] = {}
  parsed = _parse_records(blobs) if blobs else {"tokens": np.zeros(0, dtype=object)}
  if parsed is None:
    # Protobuf names what is wrong (mirroring TFF's spec, ~5 µs a record); bisection finds
    # any record TF's parser refuses for another reason.
    for position, blob in enumerate(blobs):
      problem = _example_problem(blob)
      if problem is not None:
        good[position] = False
        problems[position] = problem
    for position in _refused(blobs, [int(p) for p in np.flatnonzero(good)]):
      good[position] = False
      problems[position] = ("unparsable", "is refused by TF's example parser")
    parsed = _parse_records([blob for blob, ok in zip(blobs, good) if ok])
    if parsed is None:  # Cannot happen: every subset of accepted records is accepted.
      raise RuntimeError("TF's example parser refused records it accepted before.")
  tokens = parsed["tokens"]
  positions = np.flatnonzero(good)
  utf8 = np.ones(len(tokens), dtype=bool)
  for k, sentence in enumerate(tokens):
    try:
      sentence.decode("utf-8")
    except UnicodeDecodeError as e:
      utf8[k] = False
      good[positions[k]] = False
      problems[int(positions[k])] = (
          "tokens_not_utf8", f"has tokens that are not UTF-8 text ({e.reason} at byte "
          f"{e.start}: {sentence[max(0, e.start - 8):e.start + 8]!r})")
  return RecordCheck(good=good, tokens=tokens[utf8],
                     problems=[(p, *problems[p]) for p in sorted(problems)])


class Quarantine:
  """The bad records of one database file that its readers left out, counted.

  Every reader (`CheckedClientData`, the in-memory load) adds each client it checks once,
  however often the client's dataset is made; thread-safe. `summary()` is the JSON-able
  report: totals per split, per reason, and the first `SAMPLE_CLIENTS` clients with bad
  records (their record counts, reasons and the rowids of their first bad records).
  """

  SAMPLE_CLIENTS = 20
  _SAMPLE_ROWIDS = 5

  def __init__(self, path: str):
    self.path = path
    self._lock = threading.Lock()
    self._checked: dict[str, set] = collections.defaultdict(set)
    self._records = collections.Counter()  # split -> records checked.
    self._bad_records = collections.Counter()  # split -> records quarantined.
    self._bad_clients = collections.Counter()  # split -> clients with quarantined records.
    self._reasons = collections.Counter()  # reason -> records quarantined.
    self._bad_positions: dict[str, dict[str, tuple[int, ...]]] = collections.defaultdict(dict)
    self._sample: list[dict[str, Any]] = []

  def is_checked(self, split: str, client_id: str) -> bool:
    """Whether the client's records have been checked and counted."""
    with self._lock:
      return client_id in self._checked[split]

  def add(self, split: str, client_id: str, num_records: int,
          problems: Sequence[tuple[int, int, str]]) -> None:
    """Counts a checked client: `num_records` checked, `problems` (position, rowid, reason).

    Positions are among the client's records in rowid order. A client already counted is
    not counted again.
    """
    with self._lock:
      if client_id in self._checked[split]:
        return
      self._checked[split].add(client_id)
      self._records[split] += num_records
      if not problems:
        return
      self._bad_records[split] += len(problems)
      self._bad_clients[split] += 1
      reasons = collections.Counter(reason for _, _, reason in problems)
      self._reasons.update(reasons)
      self._bad_positions[split][client_id] = tuple(p for p, _, _ in problems)
      if len(self._sample) < self.SAMPLE_CLIENTS:
        self._sample.append({
            "split": split, "client_id": client_id, "records": num_records,
            "quarantined": len(problems), "reasons": dict(sorted(reasons.items())),
            "rowids": [rowid for _, rowid, _ in problems[:self._SAMPLE_ROWIDS]]})

  def bad_positions(self, split: str) -> dict[str, tuple[int, ...]]:
    """Client id -> positions of its quarantined records, for the checked clients of `split`."""
    with self._lock:
      return dict(self._bad_positions[split])

  def num_quarantined(self) -> int:
    """Records quarantined so far, all splits."""
    with self._lock:
      return sum(self._bad_records.values())

  def summary(self) -> dict[str, Any]:
    """The JSON-able report (see the class docstring)."""
    with self._lock:
      splits = sorted(self._checked)
      return {
          "skipped": sum(self._bad_records.values()),  # Task.data_quality's total.
          "file": self.path,
          "records_checked": {s: self._records[s] for s in splits},
          "records_quarantined": {s: self._bad_records[s] for s in splits},
          "clients_checked": {s: len(self._checked[s]) for s in splits},
          "clients_with_quarantined_records": {s: self._bad_clients[s] for s in splits},
          "quarantined_by_reason": dict(sorted(self._reasons.items())),
          "clients": [dict(entry) for entry in self._sample],
          "clients_not_listed": max(0, sum(self._bad_clients.values()) - len(self._sample)),
      }


def _parse_record(blob: tf.Tensor) -> collections.OrderedDict:
  """TFF's parse of one serialized example (`load_data`'s `parse_proto`)."""
  parsed = tf.io.parse_example(blob, _PARSE_SPEC)
  return collections.OrderedDict((name, parsed[name]) for name in _PARSE_SPEC)


class CheckedClientData(tff.simulation.datasets.ClientData):
  """One split as TFF's `load_data` gives it, each client's bad records quarantined.

  `create_tf_dataset_for_client(client_id)` first reads the client's records with sqlite3
  (one indexed query, rowid order: the order of TFF's own query) and checks them
  (`check_records`; about 1 ms for a client of 100 records, next to TFF's ~100 ms dataset),
  counting the client once in the shared `Quarantine`. A client without bad records gets
  TFF's own dataset; one with bad records gets its good records, in order, parsed as TFF
  parses them. A clean client is not read again. So a bad record never reaches TF's parser
  in the middle of training.

  `serializable_dataset_fn` (TFF's traceable form) cannot check in Python: it leaves out the
  bad records of the clients checked before it is taken (call `check_clients` first, as
  `preprocessing.make_eval_dataset` does), and is TFF's own function when there are none.
  """

  def __init__(self, parsed: tff.simulation.datasets.ClientData, path: str, split: str,
               quarantine: Quarantine):
    """Internal: see `load_client_data`."""
    self._parsed = parsed
    self._path = path
    self._split = split
    self._quarantine = quarantine
    self._client_ids = list(parsed.client_ids)  # Sorted, as TFF's.

  @property
  def client_ids(self) -> list[str]:
    return self._client_ids

  @property
  def element_type_structure(self):
    return self._parsed.element_type_structure

  @property
  def quarantine(self) -> Quarantine:
    """The counts of the records left out (shared by the splits of the file)."""
    return self._quarantine

  @property
  def split(self) -> str:
    return self._split

  def _require_client(self, client_id: Any) -> None:
    ids = self._client_ids
    i = bisect.bisect_left(ids, client_id) if isinstance(client_id, str) else len(ids)
    if i == len(ids) or ids[i] != client_id:
      raise ValueError(
          f"`client_id` {client_id!r} is not a client of split {self._split!r} of "
          f"{self._path} ({len(ids)} clients, e.g. {_messages.listed(ids)}); pass one of "
          "its `client_ids`.")

  def _read_and_check(self, client_id: str) -> tuple[list[bytes], RecordCheck]:
    try:
      with contextlib.closing(_connect_read_only(self._path)) as connection:
        rows = connection.execute(
            "SELECT rowid, serialized_example_proto FROM examples WHERE client_id = ? AND "
            "split_name = ? ORDER BY rowid;", (client_id, self._split)).fetchall()
    except sqlite3.DatabaseError as e:
      raise ValueError(
          f"StackOverflow data file {self._path}: the records of client {client_id!r} "
          f"(split {self._split!r}) cannot be read (sqlite3: {e}); the file is corrupt or "
          "was changed during the run: re-download it.") from e
    blobs = [bytes(blob) for _, blob in rows]
    result = check_records(blobs)
    self._quarantine.add(self._split, client_id, len(rows),
                         [(p, rows[p][0], reason) for p, reason, _ in result.problems])
    return blobs, result

  def check_clients(self, client_ids: Sequence[str]) -> None:
    """Checks (and counts) the clients not checked yet."""
    for client_id in client_ids:
      self._require_client(client_id)
      if not self._quarantine.is_checked(self._split, client_id):
        self._read_and_check(client_id)

  def create_tf_dataset_for_client(self, client_id: str) -> tf.data.Dataset:
    self._require_client(client_id)
    if (self._quarantine.is_checked(self._split, client_id)
        and client_id not in self._quarantine.bad_positions(self._split)):
      return self._parsed.create_tf_dataset_for_client(client_id)
    blobs, result = self._read_and_check(client_id)
    if not result.problems:
      return self._parsed.create_tf_dataset_for_client(client_id)
    good = [blob for blob, ok in zip(blobs, result.good) if ok]
    return tf.data.Dataset.from_tensor_slices(
        tf.constant(good, dtype=tf.string, shape=[len(good)])).map(_parse_record)

  def has_bad_records(self, client_id: str) -> bool:
    """Whether the client (checked first if it was not) has quarantined records."""
    self.check_clients([client_id])
    return client_id in self._quarantine.bad_positions(self._split)

  @property
  def clean_dataset_fn(self):
    """TFF's own traceable dataset function: a client's dataset when it has no bad records
    (`has_bad_records`), as `create_tf_dataset_for_client` gives it."""
    return self._parsed.serializable_dataset_fn

  @property
  def serializable_dataset_fn(self):
    bad = self._quarantine.bad_positions(self._split)
    if not bad:
      return self._parsed.serializable_dataset_fn
    raw_fn = tff.simulation.datasets.SqlClientData(self._path,
                                                   self._split).serializable_dataset_fn
    keys = [f"{client_id}\x00{position}" for client_id, positions in sorted(bad.items())
            for position in positions]

    def dataset_fn(client_id):
      bad_keys = tf.constant(keys, dtype=tf.string)

      def keep(position, _):
        key = tf.strings.join([client_id, "\x00", tf.strings.as_string(position)])
        return tf.logical_not(tf.reduce_any(tf.equal(key, bad_keys)))

      return raw_fn(client_id).enumerate().filter(keep).map(
          lambda _, blob: _parse_record(blob))

    return dataset_fn


def _check_sample(path: str, connection: sqlite3.Connection) -> None:
  """The first `SAMPLE_RECORDS` train records must be mostly TFF's examples.

  More than `MAX_BAD_FRACTION` of them bad (a wrong schema, a file of garbage) is a
  `ValueError` naming the first bad record; fewer are only logged (they are quarantined
  when read).
  """
  rows = connection.execute(
      "SELECT rowid, client_id, serialized_example_proto FROM examples WHERE split_name = "
      "'train' ORDER BY rowid LIMIT ?;", (SAMPLE_RECORDS,)).fetchall()
  result = check_records([row[2] for row in rows])
  if not result.problems:
    return
  position, reason, detail = result.problems[0]
  rowid, client_id, _ = rows[position]
  first = f"record rowid {rowid} of train client {client_id!r} {detail} ({reason})"
  if len(result.problems) > MAX_BAD_FRACTION * len(rows):
    raise ValueError(
        f"StackOverflow data file {path}: {len(result.problems)} of the first {len(rows)} "
        f"train records are bad {dict(sorted(result.reasons().items()))}, e.g. {first}; "
        f"expected {_EXPECTED_EXAMPLE}. It is not TFF's {DATABASE_FILENAME} (or it is "
        "damaged): re-download it (a synthetic corpus is regenerated once its file is "
        "deleted).")
  _logger.warning("%s: %d of the first %d train records are bad (they will be quarantined "
                  "and counted), e.g. %s.", path, len(result.problems), len(rows), first)


def _check_index(path: str, connection: sqlite3.Connection,
                 metadata: Sequence[tuple[Any, Any, Any]]) -> None:
  """Refuses a file without an index on `examples(client_id, ...)` (every client read would
  scan the whole table), naming the command that adds it."""
  if sql_client_data.has_client_index(connection):
    return
  records = sum(n for _, _, n in metadata if isinstance(n, int))
  directory = os.path.dirname(path)
  raise ValueError(
      f"StackOverflow data file {path} has no index on examples(client_id, split_name) "
      f"(TFF's writer makes none): each client read would scan all {records:,} records "
      f"({os.path.getsize(path) / 1e9:.2f} GB), every round. Add it once: "
      f"`.venv/bin/python -m scripts.index_database --data_dir {directory}` (in place; the file "
      "grows by about 8 %), or with --out_dir=DIR to index a copy when the "
      "file is read-only; then pass the indexed directory as --data_dir.")


def check_database(data_dir: str) -> dict[str, dict[str, int]]:
  """Checks `<data_dir>/stackoverflow.sqlite` against the format TFF's `load_data` reads.

  Checks, each failing with a `ValueError` that names the file and what was expected: the
  file exists; it is an SQLite database and readable (not corrupt); it has the tables and
  columns of TFF's `SqlClientData`; the split names are exactly train, heldout and test,
  each with clients; every client in `client_metadata` has `num_examples` >= 1 and rows
  in `examples` (and every client with rows is in `client_metadata`); client ids contain no
  quote (TFF splices them into SQL); at most `MAX_BAD_FRACTION` of the first
  `SAMPLE_RECORDS` train records are bad (`check_records`; a few are only logged: readers
  quarantine them); `examples` has an index whose first column is `client_id` (TFF reads
  a client with `WHERE client_id = ...`: without one, every read scans the table).
  A `num_examples` that differs from the client's row count is logged as a warning. Costs
  one pass over the (client_id, split_name) index of `examples` (milliseconds for the
  synthetic corpus).

  Args:
    data_dir: the directory holding `stackoverflow.sqlite`.

  Returns:
    Per split: {"clients": number of clients, "examples": number of examples}.
  """
  path = database_path(data_dir)
  _check_header(path)
  try:
    connection = _connect_read_only(path)
    try:
      _check_schema(path, connection)
      metadata = connection.execute(
          "SELECT client_id, split_name, num_examples FROM client_metadata;").fetchall()
      _check_index(path, connection, metadata)
      # A pass over the (client_id, split_name) index.
      row_counts = {(client_id, split): count for client_id, split, count in connection.execute(
          "SELECT client_id, split_name, COUNT(*) FROM examples "
          "GROUP BY client_id, split_name;")}
      summary = _check_clients(path, metadata, row_counts)
      _check_sample(path, connection)
    finally:
      connection.close()
  except sqlite3.DatabaseError as e:
    raise ValueError(
        f"StackOverflow data file {path} is corrupt or not a readable SQLite database "
        f"(sqlite3: {e}). Expected TFF's {DATABASE_FILENAME}; re-download it (a synthetic "
        "corpus is regenerated once its file is deleted).") from e
  return summary


def client_sizes(data_dir: str, split: str) -> dict[str, int]:
  """Client id -> `num_examples` of `split`, from the file's `client_metadata` (one indexed
  read, no records)."""
  path = database_path(data_dir)
  with contextlib.closing(_connect_read_only(path)) as connection:
    return dict(connection.execute(
        "SELECT client_id, num_examples FROM client_metadata WHERE split_name = ?;",
        (split,)).fetchall())


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
        f"{_messages.listed(not_positive)}; expected every client to have at least one "
        "example.")
  listed = {(c, s) for c, s, _ in metadata}
  no_rows = sorted((key for key in listed if key not in row_counts), key=str)
  if no_rows:
    raise ValueError(
        f"StackOverflow data file {path}: {len(no_rows)} client(s) of `client_metadata` have "
        f"no rows in `examples` (client_id, split_name): {_messages.listed(no_rows)}; "
        "expected every client to have at least one example.")
  unlisted = sorted((key for key in row_counts if key not in listed), key=str)
  if unlisted:
    raise ValueError(
        f"StackOverflow data file {path}: {len(unlisted)} client(s) have rows in `examples` "
        f"but are missing from `client_metadata` (client_id, split_name): "
        f"{_messages.listed(unlisted)}; expected every client to be listed in "
        "`client_metadata`.")
  quoted = sorted({str(c) for c, _ in listed if "'" in str(c)})
  if quoted:
    raise ValueError(
        f"StackOverflow data file {path}: client id(s) {_messages.listed(quoted)} contain a "
        "quote ('), which TFF's SqlClientData cannot query; expected ids without quotes.")
  mismatched = [(c, s, n, row_counts[(c, s)]) for c, s, n in metadata
                if row_counts[(c, s)] != n]
  if mismatched:
    _logger.warning(
        "%s: %d client(s) have num_examples in `client_metadata` different from their rows "
        "in `examples` (client_id, split_name, num_examples, rows): %s", path,
        len(mismatched), _messages.listed(mismatched))
  return {split: {"clients": split_counts[split], "examples": row_splits[split]}
          for split in SPLITS}


def load_client_data(
    data_dir: str, checked: bool = False,
) -> tuple[CheckedClientData, CheckedClientData, CheckedClientData]:
  """(train, heldout, test) client data of `<data_dir>/stackoverflow.sqlite`.

  Checks the file (`check_database`), then reads it with TFF's unmodified
  `tff.simulation.datasets.stackoverflow.load_data(cache_dir=data_dir)`, which finds the file
  and downloads nothing, and wraps each split in a `CheckedClientData`, which quarantines
  bad records (the three share one `Quarantine`, `train.quarantine`). Each client's dataset
  yields TFF's parsed examples: OrderedDicts with scalar `creation_date`, `score`, `tags`,
  `title`, `tokens` and `type`; a client without bad records gets TFF's dataset itself.

  Args:
    data_dir: the directory holding `stackoverflow.sqlite` (the real file, or
      `tasks.stackoverflow.synthetic.ensure_corpus()`).
    checked: the caller has just run `check_database` on it (skips the second pass).

  Returns:
    `CheckedClientData` (TFF `ClientData`) for the train, heldout and test splits.
  """
  if not checked:
    check_database(data_dir)
  path = database_path(data_dir)
  parsed = tff.simulation.datasets.stackoverflow.load_data(cache_dir=os.path.dirname(path))
  quarantine = Quarantine(path)
  return tuple(CheckedClientData(client_data, path, split, quarantine)
               for client_data, split in zip(parsed, SPLITS))


@contextlib.contextmanager
def open_database(data_dir: str) -> Iterator[tuple[str, sqlite3.Connection]]:
  """A read-only connection to `<data_dir>/stackoverflow.sqlite`, after `check_database`.

  Yields (path, connection) and closes the connection on exit. An `sqlite3.DatabaseError`
  raised inside the `with` block (e.g. a corrupt page met while reading) becomes a
  `ValueError` naming the file.

  Args:
    data_dir: the directory holding `stackoverflow.sqlite`.

  Yields:
    The file's path and the open connection.
  """
  check_database(data_dir)
  path = database_path(data_dir)
  try:
    connection = _connect_read_only(path)
    try:
      yield path, connection
    finally:
      connection.close()
  except sqlite3.DatabaseError as e:
    raise ValueError(
        f"StackOverflow data file {path} is corrupt or not a readable SQLite database "
        f"(sqlite3: {e}); expected TFF's {DATABASE_FILENAME}.") from e


SplitRows = tuple[str, Sequence[tuple[str, str, bytes]], Sequence[tuple[str, str, int]]]


def make_example(tokens: str, *, title: str = "", tags: str = "", creation_date: str = "",
                 score: int = 0, post_type: str = "answer") -> bytes:
  """One serialized record of the format: a tf.train.Example with the six scalar features."""
  example = tf.train.Example()
  feature = example.features.feature
  for name, value in (("creation_date", creation_date), ("tags", tags), ("title", title),
                      ("tokens", tokens), ("type", post_type)):
    feature[name].bytes_list.value.append(value.encode("utf-8"))
  feature["score"].int64_list.value.append(int(score))
  return example.SerializeToString(deterministic=True)


def write_database(directory: str, split_rows: Iterator[SplitRows], summary_filename: str,
                   summary: Mapping[str, Any], index: bool = True) -> str:
  """Writes `<directory>/stackoverflow.sqlite` in TFF's format; returns its path.

  `split_rows` yields (split, `examples` rows (split, client_id, serialized example),
  `client_metadata` rows (client_id, split, num_examples)), a split's clients in one or
  more consecutive chunks. With `index`, the (client_id, split_name) index of `examples`
  that per-client reads need is built (`tasks/sql_client_data.py`). The database is
  written to a
  temporary file in `directory` and renamed into place, so a killed writer never leaves a
  partial `stackoverflow.sqlite`; `summary` plus the clients and examples per split and the
  seconds it took go to `<directory>/<summary_filename>`.
  """
  directory = os.path.abspath(os.path.expanduser(os.fspath(directory)))
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, DATABASE_FILENAME)
  start = time.monotonic()
  fd, tmp = tempfile.mkstemp(prefix=f".{DATABASE_FILENAME}.", suffix=".tmp", dir=directory)
  os.close(fd)
  summary = dict(summary, num_clients={}, num_examples={})
  try:
    connection = sqlite3.connect(tmp)
    try:
      connection.execute("PRAGMA journal_mode = OFF;")
      connection.execute("PRAGMA synchronous = OFF;")
      # The schema of TFF's `sql_client_data_utils.save_to_sql_client_data`.
      connection.execute(
          "CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, "
          "serialized_example_proto BLOB NOT NULL);")
      connection.execute(
          "CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT NOT NULL, "
          "num_examples INTEGER NOT NULL);")
      for split, examples, metadata in split_rows:
        connection.executemany(
            "INSERT INTO examples (split_name, client_id, serialized_example_proto) "
            "VALUES (?, ?, ?);", examples)
        connection.executemany(
            "INSERT INTO client_metadata (client_id, split_name, num_examples) "
            "VALUES (?, ?, ?);", metadata)
        summary["num_clients"][split] = summary["num_clients"].get(split, 0) + len(metadata)
        summary["num_examples"][split] = (summary["num_examples"].get(split, 0)
                                          + len(examples))
      if index:  # TFF's per-client query reads by (client_id, split_name).
        connection.execute(sql_client_data.CREATE_INDEX)
      connection.commit()
    finally:
      connection.close()
    with open(tmp, "rb") as f:
      os.fsync(f.fileno())
    os.chmod(tmp, 0o644)  # mkstemp makes it private; a corpus is ordinary data.
    summary["generation_seconds"] = round(time.monotonic() - start, 3)
    files.atomic_write_json(os.path.join(directory, summary_filename), summary, indent=2,
                            sort_keys=True)
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise
  return path
