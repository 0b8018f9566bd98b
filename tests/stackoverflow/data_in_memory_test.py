"""tasks.stackoverflow.data in memory: exactly the batches of TFF's per-client pipeline."""

from __future__ import annotations

import os
import sqlite3

import numpy as np
import pytest
import tensorflow as tf

from tasks.stackoverflow import data
from tasks.stackoverflow import synthetic

_LONG = " ".join(f"w{i % 7}" for i in range(27))  # 27 words: cut to the sequence length.
_TWENTY = " ".join(["the"] * 19 + ["zebra"])  # Exactly 20 words: no EOS.
# Hand-made sentences: OOV words, non-ASCII words, double/leading/trailing spaces, an empty
# sentence, sentences of exactly and more than 20 words.
_TRAIN = {
    "alice": ["the code is a bug .", "the zebra ate my café !", _LONG, "", "is  it ?"],
    "bob": [" naïve café code", _TWENTY],
    "carol": ["a", "b c d e f", "café au lait", "the the the", "zz top", "x y z", "q ."],
    "dave": ["unknown words only here"],
    "erin": ["trailing space ", _LONG + " more", "a bug", "bug a"],
}
_HELDOUT = {"frank": ["a bug .", "the gnu ."], "grace": ["is it ?"]}
_TEST = {"heidi": ["the code ."]}
_VOCAB = ["the", ".", "is", "code", "a", "bug", "café", "w0", "w1", "w2", "?"]


def _example(tokens: str) -> bytes:
  def feature(value):
    if isinstance(value, int):
      return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8")]))
  features = {"creation_date": feature("2010-01-08 09:34:05 UTC"), "score": feature(3),
              "tags": feature("python|sql"), "title": feature("a title"),
              "tokens": feature(tokens), "type": feature("answer")}
  return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def _write_interleaved(directory: str) -> None:
  """TFF's SQLite format, the clients' rows interleaved (round robin) in rowid order."""
  path = os.path.join(directory, data.DATABASE_FILENAME)
  with sqlite3.connect(path) as connection:
    connection.execute("CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT "
                       "NULL, serialized_example_proto BLOB NOT NULL);")
    connection.execute("CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name "
                       "TEXT NOT NULL, num_examples INTEGER NOT NULL);")
    for split, clients in (("train", _TRAIN), ("heldout", _HELDOUT), ("test", _TEST)):
      # Reverse-sorted ids, round robin: neither grouped by client nor in id order.
      queues = {c: list(s) for c, s in sorted(clients.items(), reverse=True)}
      while any(queues.values()):
        for client_id, queue in queues.items():
          if queue:
            connection.execute("INSERT INTO examples VALUES (?, ?, ?);",
                               (split, client_id, _example(queue.pop(0))))
      connection.executemany("INSERT INTO client_metadata VALUES (?, ?, ?);",
                             [(c, split, len(s)) for c, s in clients.items()])
    connection.execute("CREATE INDEX examples_client_split ON examples (client_id, split_name);")
  connection.close()


@pytest.fixture(name="handmade_dir", scope="module")
def _handmade_dir(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("handmade"))
  _write_interleaved(directory)
  return directory


@pytest.fixture(name="handmade_train", scope="module")
def _handmade_train(handmade_dir):
  return data.load_client_data(handmade_dir)[0]


_SMALL = synthetic.SyntheticConfig(
    num_train_clients=24, num_heldout_clients=6, num_test_clients=6, num_words=1500,
    num_topics=6, sentences_per_client_median=12.0)


@pytest.fixture(name="synthetic_dir", scope="module")
def _synthetic_dir(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("synthetic"))
  synthetic.generate(_SMALL, directory)
  return directory


def _batches(dataset):
  return list(dataset.as_numpy_iterator())


def _assert_same_clients(reference, in_memory, client_ids):
  """Same client ids, element_spec and, per client, the same batches (values, boundaries)."""
  assert in_memory.client_ids == reference.client_ids
  for client_id in client_ids:
    expected = reference.create_tf_dataset_for_client(client_id)
    got = in_memory.create_tf_dataset_for_client(client_id)
    assert got.element_spec == expected.element_spec
    expected, got = _batches(expected), _batches(got)
    assert len(got) == len(expected), client_id
    for (x, y), (ex, ey) in zip(got, expected):
      assert x.dtype == ex.dtype == np.int64 and y.dtype == np.int64
      assert np.array_equal(x, ex) and np.array_equal(y, ey), client_id


# (batch_size, max_elements_per_client, num_epochs, sequence_length, num_oov_buckets)
_SETTINGS = [(2, None, 1, 20, 1), (3, 5, 2, 4, 3), (4, 9, 3, 20, 7), (16, None, 2, 6, 2)]


@pytest.mark.parametrize("batch_size, cap, epochs, length, buckets", _SETTINGS)
def test_handmade_exactly_tff(handmade_dir, handmade_train, batch_size, cap, epochs, length,
                              buckets):
  kwargs = dict(num_epochs=epochs, sequence_length=length, num_oov_buckets=buckets)
  reference = data.make_train_client_data(handmade_train, _VOCAB, batch_size, cap, **kwargs)
  in_memory = data.make_train_client_data_in_memory(handmade_dir, _VOCAB, batch_size, cap,
                                                    **kwargs)
  assert in_memory.client_ids == sorted(_TRAIN)
  _assert_same_clients(reference, in_memory, sorted(_TRAIN))


def test_oov_words_use_tffs_hash_buckets(handmade_dir):
  """With several buckets, OOV words spread over them exactly as TF's Fingerprint64 hash."""
  ids = data.token_ids(len(_VOCAB), 7)
  clients = data.load_tokenized_clients(handmade_dir, "train", _VOCAB, num_oov_buckets=7)
  y = np.concatenate([clients[c][1] for c in clients])
  oov = y[(y > ids.vocab_size) & (y < ids.bos)]
  assert len(np.unique(oov)) >= 3
  # "zz top": both OOV; their buckets are TF's `to_hash_bucket_fast` (the table's hasher).
  x, _ = clients["carol"]
  buckets = tf.strings.to_hash_bucket_fast(["zz", "top"], 7).numpy()
  assert x[4, :4].tolist() == [ids.bos, *(len(_VOCAB) + 1 + buckets), ids.eos]


def test_synthetic_corpus_exactly_tff(synthetic_dir):
  train, heldout, _ = data.load_client_data(synthetic_dir)
  vocab = data.load_vocab(synthetic_dir, vocab_size=300)  # Small: many OOV words.
  reference = data.make_train_client_data(train, vocab, 8, 20, num_oov_buckets=2)
  in_memory = data.make_train_client_data_in_memory(synthetic_dir, vocab, 8, 20,
                                                    num_oov_buckets=2)
  assert len(in_memory.client_ids) == _SMALL.num_train_clients
  _assert_same_clients(reference, in_memory, in_memory.client_ids)
  # No cap, another split.
  reference = data.make_train_client_data(heldout, vocab, 5, None, sequence_length=12)
  in_memory = data.make_train_client_data_in_memory(synthetic_dir, vocab, 5, None,
                                                    sequence_length=12, split="heldout")
  _assert_same_clients(reference, in_memory, in_memory.client_ids[:3])


def test_tokenized_clients_mapping(handmade_dir):
  clients = data.load_tokenized_clients(handmade_dir, "train", _VOCAB,
                                        max_elements_per_client=6, num_epochs=2)
  assert list(clients) == sorted(_TRAIN) and len(clients) == len(_TRAIN)
  assert [clients.num_elements(c) for c in clients] == [
      min(6, 2 * len(_TRAIN[c])) for c in sorted(_TRAIN)]
  assert clients.total_elements == sum(min(6, 2 * len(s)) for s in _TRAIN.values())
  x, y = clients["bob"]  # 2 sentences, 2 epochs: [s0, s1, s0, s1].
  assert x.shape == y.shape == (4, 20) and x.dtype == np.int64
  assert np.array_equal(x[:2], x[2:]) and np.array_equal(x[:, 1:], y[:, :-1])
  ids = clients.ids("bob")
  assert np.array_equal(ids[:, :-1], x) and np.array_equal(ids[:, 1:], y)
  assert "bob" in clients and "nobody" not in clients and 3 not in clients
  assert clients.get("nobody") is None


@pytest.mark.parametrize("client_id", ["nobody", "frank", b"alice", 3])
def test_unknown_client_is_a_clear_value_error(handmade_dir, client_id):
  in_memory = data.make_train_client_data_in_memory(handmade_dir, _VOCAB, 2, None)
  with pytest.raises(ValueError, match="is not a client of this InMemoryClientData") as info:
    in_memory.create_tf_dataset_for_client(client_id)
  assert repr(client_id) in str(info.value) and "'alice'" in str(info.value)
  with pytest.raises(ValueError, match="is not a client of this TokenizedClients"):
    in_memory.tokenized_clients[client_id]  # pylint: disable=pointless-statement


def test_serializable_dataset_fn(handmade_dir):
  in_memory = data.make_train_client_data_in_memory(handmade_dir, _VOCAB, 3, 4, num_epochs=2)
  fn = tf.function(in_memory.serializable_dataset_fn)
  for client_id in ("alice", "bob"):
    expected = _batches(in_memory.create_tf_dataset_for_client(client_id))
    got = _batches(fn(tf.constant(client_id)))
    assert len(got) == len(expected)
    assert all(np.array_equal(g[0], e[0]) and np.array_equal(g[1], e[1])
               for g, e in zip(got, expected))
  everything = in_memory.create_tf_dataset_from_all_clients(seed=0)
  assert sum(len(x) for x, _ in everything.as_numpy_iterator()) == (
      in_memory.tokenized_clients.total_elements)
  with pytest.raises(tf.errors.InvalidArgumentError, match="not a client"):
    _batches(fn(tf.constant("nobody")))


def test_argument_errors(handmade_dir):
  with pytest.raises(ValueError, match=r"`split` must be one of \['train', 'heldout', "):
    data.load_tokenized_clients(handmade_dir, "validation", _VOCAB)
  with pytest.raises(ValueError, match="`batch_size` must be a positive integer"):
    data.make_train_client_data_in_memory(handmade_dir, _VOCAB, 0, None)
  with pytest.raises(ValueError, match="`max_elements_per_client`"):
    data.make_train_client_data_in_memory(handmade_dir, _VOCAB, 2, 0)
  with pytest.raises(ValueError, match="`num_oov_buckets`"):
    data.load_tokenized_clients(handmade_dir, "train", _VOCAB, num_oov_buckets=0)
  with pytest.raises(ValueError, match="`vocab` must hold distinct words"):
    data.load_tokenized_clients(handmade_dir, "train", ["a", "a"])
  with pytest.raises(ValueError, match="does not exist"):
    data.load_tokenized_clients(os.path.join(handmade_dir, "nope"), "train", _VOCAB)
  with pytest.raises(ValueError, match="`clients` must be a TokenizedClients"):
    data.InMemoryClientData({"a": (np.zeros((1, 20)), np.zeros((1, 20)))}, 2)


def test_example_without_tokens_is_quarantined_and_counted(tmp_path, handmade_dir):
  directory = str(tmp_path)
  path = os.path.join(directory, data.DATABASE_FILENAME)
  with open(os.path.join(handmade_dir, data.DATABASE_FILENAME), "rb") as src:
    with open(path, "wb") as dst:
      dst.write(src.read())
  bad = tf.train.Example()  # Parses, but has no `tokens` (check_database sees only row 1).
  with sqlite3.connect(path) as connection:
    rowid, client_id = connection.execute(
        "SELECT rowid, client_id FROM examples WHERE rowid = (SELECT MAX(rowid) FROM examples "
        "WHERE split_name = 'train');").fetchone()
    connection.execute("UPDATE examples SET serialized_example_proto = ? WHERE rowid = ?;",
                       (bad.SerializeToString(), rowid))
  connection.close()
  clients = data.load_tokenized_clients(directory, "train", _VOCAB)
  assert clients.num_elements(client_id) == len(_TRAIN[client_id]) - 1
  summary = clients.quarantine.summary()
  assert summary["file"] == path and summary["records_quarantined"] == {"train": 1}
  assert summary["clients"][0]["client_id"] == client_id
  assert summary["clients"][0]["rowids"] == [rowid]


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
