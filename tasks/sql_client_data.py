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
from typing import Optional

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
