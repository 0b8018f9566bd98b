"""The per-client index of TFF's SQLite client data, shared by the task data paths.

TFF's `SqlClientData` (the StackOverflow download, and the files its
`save_to_sql_client_data` writes, e.g. the Reddit task's prepared cache) keeps every record in
one table, `examples(split_name, client_id, serialized_example_proto)`, and reads a client
with `SELECT ... FROM examples WHERE client_id = ...`. TFF's writer creates no index, so
without one every client read scans the whole table: invisible on a test file, and at
StackOverflow's 168M records (≈ 50 GB) a training round of 1000 clients would read the file
1000 times. dp_fl writes its own files with the index and checks the ones it is given
(`has_client_index` at start; `add_client_index` for `scripts/index_database`).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Optional

INDEX_NAME = "examples_client_split"
CREATE_INDEX = f"CREATE INDEX IF NOT EXISTS {INDEX_NAME} ON examples (client_id, split_name);"


def client_index(connection: sqlite3.Connection) -> Optional[str]:
  """The name of an index of `examples` whose first column is `client_id` (None: none)."""
  for row in connection.execute("PRAGMA index_list('examples');").fetchall():
    name = row[1]
    columns = [info[2] for info in connection.execute(
        "SELECT * FROM pragma_index_info(?);", (name,)).fetchall()]
    if columns[:1] == ["client_id"]:
      return name
  return None


def has_client_index(connection: sqlite3.Connection) -> bool:
  return client_index(connection) is not None


def add_client_index(path: str) -> bool:
  """Adds the (client_id, split_name) index to the database at `path` (written in place);
  returns False when it already had a client index."""
  connection = sqlite3.connect(path)
  try:
    if has_client_index(connection):
      return False
    connection.execute(CREATE_INDEX)
    connection.commit()
    return True
  finally:
    connection.close()


def metadata_fingerprint(path: str) -> tuple[Any, Any, Any]:
  """(clients, examples, checksum) of the `client_metadata` table of the TFF SQLite file at
  `path`, computed by TensorFlow's SQLite reader — in this process, or on a remote TFF worker
  inside a computation (`worker_check`). The checksum is the sum, modulo 2⁶², of a 62-bit
  hash of each (client_id, split_name, num_examples) row: the same for the same rows in any
  order, another for any changed, added or removed row."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rows = tf.data.experimental.SqlDataset(
      "sqlite", path, "SELECT client_id, split_name, num_examples FROM client_metadata;",
      (tf.string, tf.string, tf.int64))
  modulus = tf.constant(2 ** 62, tf.int64)

  def fold(totals, row):
    client_id, split, examples = row
    key = tf.strings.join([client_id, split, tf.strings.as_string(examples)], "\x00")
    digest = tf.strings.to_hash_bucket_fast(key, 2 ** 62)
    return (totals[0] + 1, totals[1] + examples, (totals[2] + digest) % modulus)

  zero = tf.constant(0, tf.int64)
  return rows.reduce((zero, zero, zero), fold)


def worker_check(path: str, what: str) -> Any:
  """A `remote_workers.WorkerCheck` that a remote TFF worker reads, at `path` on its own disk,
  the file this process reads there (`metadata_fingerprint`): a client's dataset sent to a
  worker is a graph naming the file, so the worker reads the records itself (issue #43) —
  from the same path, which must hold the same data."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top

  @tff.tensorflow.computation(np.int32)
  def read(unused_client):
    del unused_client
    return metadata_fingerprint(path)

  @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
  def probe(clients):
    return tff.federated_map(read, clients)

  expected = tuple(int(x) for x in metadata_fingerprint(path))
  return remote_workers.WorkerCheck(
      f"{what} at {path} (clients, examples, checksum of client_metadata)", probe, expected,
      f"copy this process's file to {path} on the worker (the same absolute path: the "
      "clients' datasets name it), or give --data_dir as that path")
