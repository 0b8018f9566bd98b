"""The StackOverflow database on disk: TFF's SQLite format, its checks, and loading.

One file, `<data_dir>/stackoverflow.sqlite` (TFF's real file, or the synthetic one of
`tasks.stackoverflow.synthetic`, which writes this format), with the tables TFF's
`SqlClientData` reads:

    examples(split_name, client_id, serialized_example_proto)
    client_metadata(client_id, split_name, num_examples)

splits train, heldout and test, every example a serialized `tf.train.Example` with the
scalar features creation_date, score (int64), tags, title, tokens and type (bytes).

`load_client_data(data_dir)` reads it with TFF's own
`tff.simulation.datasets.stackoverflow.load_data`, after `check_database` has checked the file
so that a wrong file fails with a message naming it, instead of a download attempt or a TF
error. `open_database` is the checked read-only connection of the modules that read the
file directly (word counts, the in-memory clients).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import sqlite3
import urllib.parse
from typing import Any, Iterator, Mapping

import tensorflow as tf
import tensorflow_federated as tff

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
  path = database_path(data_dir)
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
