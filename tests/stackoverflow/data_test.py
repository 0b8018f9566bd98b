"""tasks.stackoverflow.data: exact preprocessing on known sentences, vocabulary, bad inputs."""

from __future__ import annotations

import os
import sqlite3

import numpy as np
import pytest
import tensorflow as tf

from tasks import sql_client_data
from tasks.stackoverflow import data
from tasks.stackoverflow import vocab as vocab_lib

# A tiny corpus with known sentences (split -> client -> sentences).
_BOB = " ".join((["the", "code", "is", "a", "bug", "."] * 5)[:25])  # 25 words: cut to 20.
_CORPUS = {
    "train": {"alice": ["the code is a bug .", "the zebra ."], "bob": [_BOB]},
    "heldout": {"carol": ["a bug ."]},
    "test": {"dave": ["is it ?"]},
}
# Vocabulary file: V = 6 words; with B = 1: OOV 7, BOS 8, EOS 9, 10 classes.
_WORD_COUNTS = "the 9\n. 8\nis 7\ncode 6\na 5\nbug 4\n"
_VOCAB = ["the", ".", "is", "code", "a", "bug"]
_PAD, _OOV, _BOS, _EOS = 0, 7, 8, 9
_ID = {w: i + 1 for i, w in enumerate(_VOCAB)}


def _example(tokens: str, **overrides) -> bytes:
  features = {
      "creation_date": tf.train.Feature(bytes_list=tf.train.BytesList(
          value=[b"2010-01-08 09:34:05 UTC"])),
      "score": tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
      "tags": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"python|sql"])),
      "title": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"a title"])),
      "tokens": tf.train.Feature(bytes_list=tf.train.BytesList(
          value=[tokens.encode("utf-8")])),
      "type": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"answer"])),
  }
  features.update(overrides)
  features = {k: v for k, v in features.items() if v is not None}
  return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def _write_db(directory, corpus=None, metadata=None, examples_sql=None, metadata_sql=None,
              example_fn=_example):
  """Writes `corpus` in TFF's SQLite format; `metadata` overrides client_metadata rows."""
  corpus = _CORPUS if corpus is None else corpus
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, data.DATABASE_FILENAME)
  with sqlite3.connect(path) as connection:
    connection.execute(examples_sql or (
        "CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, "
        "serialized_example_proto BLOB NOT NULL);"))
    connection.execute(metadata_sql or (
        "CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT NOT NULL, "
        "num_examples INTEGER NOT NULL);"))
    rows = []
    for split, clients in corpus.items():
      for client_id, sentences in clients.items():
        for sentence in sentences:
          connection.execute("INSERT INTO examples VALUES (?, ?, ?);",
                             (split, client_id, example_fn(sentence)))
        rows.append((client_id, split, len(sentences)))
    connection.executemany("INSERT INTO client_metadata VALUES (?, ?, ?);",
                           rows if metadata is None else metadata)
    if examples_sql is None:
      connection.execute(sql_client_data.CREATE_INDEX)
  connection.close()
  return path


@pytest.fixture(name="corpus_dir", scope="module")
def _corpus_dir(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("handmade"))
  _write_db(directory)
  with open(os.path.join(directory, "vocab.word_count"), "w") as f:
    f.write(_WORD_COUNTS)
  return directory


@pytest.fixture(name="client_data", scope="module")
def _client_data(corpus_dir):
  return data.load_client_data(corpus_dir)


@pytest.fixture(name="vocab", scope="module")
def _vocab(corpus_dir):
  return data.load_vocab(corpus_dir, vocab_size=10_000,
                         word_count_file=os.path.join(corpus_dir, "vocab.word_count"))


def _ids(sentence: str, length: int = 20) -> list[int]:
  """The expected ids [BOS, words..., EOS?] padded to length + 1 (written out by hand)."""
  words = [_ID.get(w, _OOV) for w in sentence.split(" ")][:length]
  ids = [_BOS] + words + ([_EOS] if len(words) < length else [])
  return ids + [_PAD] * (length + 1 - len(ids))


def _batches(dataset):
  return [(x, y) for x, y in dataset.as_numpy_iterator()]


def test_token_id_layout_matches_tff():
  ids = data.token_ids(10_000, 1)
  assert (ids.pad, ids.oov, ids.bos, ids.eos) == (0, (10_001,), 10_002, 10_003)
  assert ids.extended_vocab_size == 10_004
  small = data.token_ids(6, 1)
  assert (small.pad, small.oov, small.bos, small.eos) == (_PAD, (_OOV,), _BOS, _EOS)
  two = data.token_ids(6, 2)
  assert (two.oov, two.bos, two.eos, two.extended_vocab_size) == ((7, 8), 9, 10, 11)


def test_vocab_from_word_count_file(vocab):
  assert vocab == _VOCAB


def test_check_database_summary(corpus_dir):
  assert data.check_database(corpus_dir) == {
      "train": {"clients": 2, "examples": 3}, "heldout": {"clients": 1, "examples": 1},
      "test": {"clients": 1, "examples": 1}}


def test_load_client_data_reads_the_splits(client_data):
  train, heldout, test = client_data
  assert (train.client_ids, heldout.client_ids, test.client_ids) == (
      ["alice", "bob"], ["carol"], ["dave"])
  first = next(iter(train.create_tf_dataset_for_client("alice")))
  assert sorted(first) == ["creation_date", "score", "tags", "title", "tokens", "type"]
  assert first["tokens"].numpy() == b"the code is a bug ."
  assert first["score"].dtype == tf.int64


def test_train_preprocessing_exact_ids(client_data, vocab):
  train, _, _ = client_data
  clients = data.make_train_client_data(train, vocab, batch_size=2,
                                        max_elements_per_client=None)
  assert clients.client_ids == ["alice", "bob"]
  (x, y), = _batches(clients.create_tf_dataset_for_client("alice"))
  assert x.dtype == np.int64 and x.shape == (2, 20) and y.shape == (2, 20)
  # "the code is a bug ." -> BOS the code is a bug . EOS, then padding.
  assert x[0].tolist() == [8, 1, 4, 3, 5, 6, 2, 9] + [0] * 12
  assert y[0].tolist() == [1, 4, 3, 5, 6, 2, 9] + [0] * 13
  # "the zebra ." -> zebra is out of vocabulary.
  assert x[1].tolist() == [8, 1, 7, 2, 9] + [0] * 15
  assert y[1].tolist() == [1, 7, 2, 9] + [0] * 16
  # 25 words: cut to 20, so no EOS; x starts with BOS, y ends with the 20th word.
  (x, y), = _batches(clients.create_tf_dataset_for_client("bob"))
  expected = _ids(_BOB)
  assert len(expected) == 21 and _EOS not in expected
  assert x[0].tolist() == expected[:-1] and y[0].tolist() == expected[1:]
  assert y[0].tolist() == [_ID[w] for w in _BOB.split(" ")[:20]]


def test_train_cap_epochs_and_batches(client_data, vocab):
  train, _, _ = client_data
  capped = data.make_train_client_data(train, vocab, batch_size=1, max_elements_per_client=1)
  batches = _batches(capped.create_tf_dataset_for_client("alice"))
  assert len(batches) == 1 and batches[0][0][0].tolist() == _ids(_CORPUS["train"]["alice"][0])[:-1]
  # Two epochs in stored order, capped after the repeat (TFF's ClientSpec.max_elements).
  repeated = data.make_train_client_data(train, vocab, batch_size=3,
                                         max_elements_per_client=None, num_epochs=2)
  xs = np.concatenate([x for x, _ in _batches(repeated.create_tf_dataset_for_client("alice"))])
  first, second = (_ids(s)[:-1] for s in _CORPUS["train"]["alice"])
  assert xs.tolist() == [first, second, first, second]
  capped = data.make_train_client_data(train, vocab, batch_size=3, max_elements_per_client=3,
                                       num_epochs=2)
  assert [len(x) for x, _ in _batches(capped.create_tf_dataset_for_client("alice"))] == [3]
  # Deterministic: the same batches every time.
  again = _batches(repeated.create_tf_dataset_for_client("alice"))
  assert np.concatenate([x for x, _ in again]).tolist() == xs.tolist()


def test_sequence_length_parameter(client_data, vocab):
  train, _, _ = client_data
  clients = data.make_train_client_data(train, vocab, batch_size=2,
                                        max_elements_per_client=None, sequence_length=4)
  (x, y), = _batches(clients.create_tf_dataset_for_client("alice"))
  assert x.tolist() == [[8, 1, 4, 3], [8, 1, 7, 2]]
  assert y.tolist() == [[1, 4, 3, 5], [1, 7, 2, 9]]


def test_eval_dataset_concatenates_clients(client_data, vocab):
  train, heldout, _ = client_data
  (x, y), = _batches(data.make_eval_dataset(train, vocab, batch_size=8))
  sentences = _CORPUS["train"]["alice"] + _CORPUS["train"]["bob"]
  assert x.tolist() == [_ids(s)[:-1] for s in sentences]
  assert y.tolist() == [_ids(s)[1:] for s in sentences]
  capped = _batches(data.make_eval_dataset(train, vocab, batch_size=8,
                                           max_elements_per_client=1))
  assert capped[0][0].tolist() == [_ids(_CORPUS["train"]["alice"][0])[:-1], _ids(_BOB)[:-1]]
  one = _batches(data.make_eval_dataset(train, vocab, max_clients=1, batch_size=8, seed=3))
  assert len(one[0][0]) in (1, 2)  # One client: bob's 1 sentence or alice's 2.
  (x, _), = _batches(data.make_eval_dataset(heldout, vocab))
  assert x.tolist() == [[8, 5, 6, 2, 9] + [0] * 15]


def test_unigram_baseline_exact(client_data, vocab):
  _, heldout, _ = client_data
  evaluation = data.make_eval_dataset(heldout, vocab)
  # Targets of "a bug ." are a bug . EOS; the best constant word is one of a/bug/. (1 hit).
  assert data.unigram_baseline_accuracy(evaluation, len(vocab)) == pytest.approx({
      data.ACCURACY: 1 / 4, data.ACCURACY_WITHOUT_OOV: 1 / 4,
      data.ACCURACY_WITHOUT_OOV_OR_EOS: 1 / 3})
  assert data.unigram_baseline_accuracy(evaluation, len(vocab), token_id=1) == {
      data.ACCURACY: 0.0, data.ACCURACY_WITHOUT_OOV: 0.0,
      data.ACCURACY_WITHOUT_OOV_OR_EOS: 0.0}
  with pytest.raises(ValueError, match="token_id"):
    data.unigram_baseline_accuracy(evaluation, len(vocab), token_id=7)


def test_unigram_baseline_loss_is_the_entropy_of_the_targets(client_data, vocab):
  from tasks.stackoverflow import baselines  # pylint: disable=g-import-not-at-top
  _, heldout, _ = client_data
  evaluation = data.make_eval_dataset(heldout, vocab)
  # Four distinct targets (a, bug, ., EOS), each once: log 4 nats.
  assert baselines.unigram_baselines(evaluation, len(vocab))["loss"] == pytest.approx(np.log(4))
  assert baselines.best_constant_cross_entropy(np.array([3, 3, 0, 5, 0])) == pytest.approx(
      -(2 / 3 * np.log(2 / 3) + 1 / 3 * np.log(1 / 3)))
  with pytest.raises(ValueError, match="no non-pad"):
    baselines.best_constant_cross_entropy(np.zeros(4, np.int64))


def test_bigram_baseline_exact(client_data, vocab):
  train, heldout, _ = client_data
  # Train: BOS->the, a->bug, bug->. always; "." is followed by "the" 3 times (bob), EOS
  # twice (alice). Heldout "a bug .": predictions the, bug, ., the vs a, bug, ., EOS.
  accuracy = data.bigram_baseline_accuracy(data.make_eval_dataset(train, vocab),
                                           data.make_eval_dataset(heldout, vocab),
                                           len(vocab))
  assert accuracy == pytest.approx({data.ACCURACY: 2 / 4, data.ACCURACY_WITHOUT_OOV: 2 / 4,
                                    data.ACCURACY_WITHOUT_OOV_OR_EOS: 2 / 3})


def test_baseline_rejects_other_vocabulary(client_data, vocab):
  _, heldout, _ = client_data
  with pytest.raises(ValueError, match="another vocabulary"):
    data.unigram_baseline_accuracy(data.make_eval_dataset(heldout, vocab), 3)


def test_vocab_counted_from_train_and_cached(tmp_path, monkeypatch):
  directory = str(tmp_path)
  _write_db(directory)
  vocab = data.load_vocab(directory, vocab_size=4)
  # Count = clients using the word (TFF's definition); ties: occurrences, then word.
  assert vocab == ["the", ".", "a", "bug"]
  cache = tmp_path / data.TRAIN_WORD_COUNT_FILENAME
  assert cache.read_text() == "the 2\n. 2\na 2\nbug 2\ncode 2\nis 2\nzebra 1\n"

  def fail(_):
    raise AssertionError("counted again")
  monkeypatch.setattr(vocab_lib, "count_train_words", fail)
  assert data.load_vocab(directory, vocab_size=10_000) == [
      "the", ".", "a", "bug", "code", "is", "zebra"]  # From the cache; heldout/test absent.
  database = tmp_path / data.DATABASE_FILENAME
  newer = os.stat(cache).st_mtime_ns + 10**9
  os.utime(database, ns=(newer, newer))
  with pytest.raises(AssertionError, match="counted again"):
    data.load_vocab(directory)  # The database changed: the cache is stale.


def test_argument_errors(client_data, vocab):
  train, _, _ = client_data
  with pytest.raises(ValueError, match="`batch_size` must be a positive integer"):
    data.make_train_client_data(train, vocab, 0, None)
  with pytest.raises(ValueError, match="`max_elements_per_client`"):
    data.make_train_client_data(train, vocab, 2, -1)
  with pytest.raises(ValueError, match="`vocab` must hold distinct words"):
    data.make_train_client_data(train, ["a", "a"], 2, None)
  with pytest.raises(ValueError, match="`train` must be a tff.simulation.datasets.ClientData"):
    data.make_train_client_data(object(), vocab, 2, None)
  with pytest.raises(ValueError, match="`max_clients`"):
    data.make_eval_dataset(train, vocab, max_clients=0)
  with pytest.raises(ValueError, match="`vocab_size`"):
    data.load_vocab("/nonexistent", vocab_size=0)


# ------------------------------------------------------------------------------------------
# Bad inputs: every error names the file and what was expected.


def _error(directory) -> str:
  with pytest.raises(ValueError) as info:
    data.load_client_data(str(directory))
  return str(info.value)


def test_missing_file(tmp_path):
  message = _error(tmp_path)
  assert str(tmp_path / data.DATABASE_FILENAME) in message
  assert "does not exist" in message and "--data_dir" in message
  assert "synthetic" in message


def test_data_dir_is_the_file(tmp_path):
  path = _write_db(str(tmp_path))
  with pytest.raises(ValueError, match="not a file"):
    data.load_client_data(path)


def test_not_sqlite(tmp_path):
  (tmp_path / data.DATABASE_FILENAME).write_bytes(b"this is not a database" * 10)
  message = _error(tmp_path)
  assert str(tmp_path / data.DATABASE_FILENAME) in message
  assert "is not an SQLite database" in message and "SQLite format 3" in message


def test_compressed_file_hint(tmp_path):
  (tmp_path / data.DATABASE_FILENAME).write_bytes(b"\xfd7zXZ\x00" + bytes(100))
  assert "decompress" in _error(tmp_path)


def test_corrupt_file(tmp_path):
  path = _write_db(str(tmp_path))
  blob = bytearray(open(path, "rb").read())
  blob[100:] = b"\xab" * (len(blob) - 100)  # Keep the header, destroy the pages.
  with open(path, "wb") as f:
    f.write(blob)
  message = _error(tmp_path)
  assert path in message and "corrupt" in message and "SQLite" in message


def test_missing_table(tmp_path):
  path = os.path.join(tmp_path, data.DATABASE_FILENAME)
  with sqlite3.connect(path) as connection:
    connection.execute("CREATE TABLE examples (split_name TEXT, client_id TEXT, "
                       "serialized_example_proto BLOB);")
  connection.close()
  message = _error(tmp_path)
  assert path in message and "wrong schema" in message
  assert "no table `client_metadata`" in message and "num_examples" in message


def test_missing_column(tmp_path):
  path = _write_db(str(tmp_path), examples_sql=(
      "CREATE TABLE examples (split_name TEXT, client_id TEXT, proto BLOB);"))
  message = _error(tmp_path)
  assert path in message and "wrong schema" in message
  assert "serialized_example_proto" in message
  assert "examples(split_name, client_id, serialized_example_proto)" in message


@pytest.mark.parametrize("renamed, found", [("heldout", "validation"), ("test", "eval")])
def test_wrong_split_names(tmp_path, renamed, found):
  corpus = {found if split == renamed else split: clients
            for split, clients in _CORPUS.items()}
  path = _write_db(str(tmp_path), corpus=corpus)
  message = _error(tmp_path)
  assert path in message and repr(found) in message
  assert "['train', 'heldout', 'test']" in message


def test_missing_split(tmp_path):
  corpus = {split: clients for split, clients in _CORPUS.items() if split != "test"}
  path = _write_db(str(tmp_path), corpus=corpus)
  message = _error(tmp_path)
  assert path in message and "no clients in split(s) ['test']" in message


def test_client_with_zero_examples(tmp_path):
  metadata = [("alice", "train", 2), ("bob", "train", 0), ("carol", "heldout", 1),
              ("dave", "test", 1)]
  path = _write_db(str(tmp_path), metadata=metadata)
  message = _error(tmp_path)
  assert path in message and "('bob', 'train', 0)" in message
  assert "at least one example" in message


def test_client_with_no_rows(tmp_path):
  corpus = {**_CORPUS, "test": {"dave": [], "erin": ["x y"]}}
  metadata = [("alice", "train", 2), ("bob", "train", 1), ("carol", "heldout", 1),
              ("dave", "test", 1), ("erin", "test", 1)]
  path = _write_db(str(tmp_path), corpus=corpus, metadata=metadata)
  message = _error(tmp_path)
  assert path in message and "no rows in `examples`" in message
  assert "('dave', 'test')" in message


def test_rows_without_metadata(tmp_path):
  metadata = [("alice", "train", 2), ("carol", "heldout", 1), ("dave", "test", 1)]
  path = _write_db(str(tmp_path), metadata=metadata)
  message = _error(tmp_path)
  assert path in message and "missing from `client_metadata`" in message
  assert "('bob', 'train')" in message


def test_example_without_expected_feature(tmp_path):
  path = _write_db(str(tmp_path), example_fn=lambda s: _example(s, score=None))
  message = _error(tmp_path)
  assert path in message and "no feature 'score'" in message and "score (int64)" in message


def test_example_not_a_proto(tmp_path):
  path = _write_db(str(tmp_path), example_fn=lambda s: b"\xff\xff\xff not a proto")
  message = _error(tmp_path)
  assert path in message and "tf.train.Example" in message


@pytest.mark.parametrize("content, line, match", [
    ("the 9\nis a 7\n", 2, "expected 'WORD COUNT'"),
    ("the 9\n\n", 2, "expected 'WORD COUNT'"),
    ("the 9\nis seven\n", 2, "non-negative integer"),
    ("the 9\nis -7\n", 2, "non-negative integer"),
    ("the 9\nis 7\nthe 5\n", 3, "repeats an earlier line"),
    ("the 9\nis 7\na 8\n", 3, "non-increasing order"),
])
def test_word_count_file_format_errors(tmp_path, content, line, match):
  path = tmp_path / "bad.word_count"
  path.write_text(content)
  with pytest.raises(ValueError, match=match) as info:
    data.load_vocab(str(tmp_path), word_count_file=str(path))
  assert f"{path}, line {line}" in str(info.value)


def test_word_count_file_missing_or_empty(tmp_path):
  with pytest.raises(ValueError, match="does not exist") as info:
    data.load_vocab(str(tmp_path), word_count_file=str(tmp_path / "nope"))
  assert str(tmp_path / "nope") in str(info.value) and "WORD COUNT" in str(info.value)
  (tmp_path / "empty").write_text("")
  with pytest.raises(ValueError, match="is empty") as info:
    data.load_vocab(str(tmp_path), word_count_file=str(tmp_path / "empty"))
  assert str(tmp_path / "empty") in str(info.value)
  (tmp_path / "binary").write_bytes(b"\xff\xfe 3\n")
  with pytest.raises(ValueError, match="not UTF-8"):
    data.load_vocab(str(tmp_path), word_count_file=str(tmp_path / "binary"))


def test_word_count_file_reads_only_vocab_size_lines(tmp_path):
  path = tmp_path / "counts"
  path.write_text("the 9\nis 7\nbroken line here\n")
  assert data.load_vocab(str(tmp_path), vocab_size=2, word_count_file=str(path)) == [
      "the", "is"]


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
