"""Bad data: corrupt files and records are quarantined and counted, or a clear ValueError.

StackOverflow (TFF's SQLite format, written by `tasks.stackoverflow.synthetic` and then
damaged record by record) and Reddit (JSON lines, plain / gzip / bzip2): every fault is
either left out and counted (per file, reason and client) with the good data intact, or a
`ValueError` naming the file, the client or line, and the fix — never a raw TF error.
"""

from __future__ import annotations

import bz2
import collections
import gzip
import io
import json
import os
import shutil
import sqlite3

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl import exits
from tasks.reddit import data as reddit_data
from tasks.reddit import task as reddit_task
from tasks.stackoverflow import database
from tasks.stackoverflow import in_memory
from tasks.stackoverflow import preprocessing
from tasks.stackoverflow import synthetic
from tasks.stackoverflow import task as so_task
from tasks.stackoverflow import vocab as vocab_lib

_SMALL = synthetic.SyntheticConfig(
    num_train_clients=24, num_heldout_clients=6, num_test_clients=6, num_words=1500,
    num_topics=6, sentences_per_client_median=12.0)
_VOCAB_SIZE = 200


def _feature(value):
  if isinstance(value, int):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _example(tokens: bytes = b"a b", **overrides) -> bytes:
  features = {"creation_date": _feature(b"2010-01-08 09:34:05 UTC"), "score": _feature(3),
              "tags": _feature(b"python"), "title": _feature(b"a title"),
              "tokens": _feature(tokens), "type": _feature(b"answer")}
  features.update(overrides)
  features = {k: v for k, v in features.items() if v is not None}
  return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


# Damaged records: name -> (serialized bytes, the reason they are quarantined for).
_BAD_RECORDS = {
    "garbage": (b"\xff\xfe this is not a protocol buffer", "not_an_example"),
    "truncated": (_example(b"the code is a bug")[:-7], "not_an_example"),
    "missing_score": (_example(score=None), "missing_score"),
    "score_as_bytes": (_example(score=_feature(b"3")), "wrong_kind_score"),
    "two_tags": (_example(tags=tf.train.Feature(bytes_list=tf.train.BytesList(
        value=[b"a", b"b"]))), "not_scalar_tags"),
    "tokens_latin1": (_example("café au lait".encode("latin-1")), "tokens_not_utf8"),
    "empty": (b"", "missing_creation_date"),
}


@pytest.fixture(name="corpus_dir", scope="module")
def _corpus_dir(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("stackoverflow"))
  synthetic.generate(_SMALL, directory)
  return directory


@pytest.fixture(name="vocab", scope="module")
def _vocab(corpus_dir):
  return vocab_lib.load_vocab(corpus_dir, _VOCAB_SIZE)


def _rows(directory, client_id, split="train"):
  """(rowid, serialized example) of a client, rowid order."""
  path = os.path.join(directory, database.DATABASE_FILENAME)
  with sqlite3.connect(path) as connection:
    rows = connection.execute(
        "SELECT rowid, serialized_example_proto FROM examples WHERE client_id = ? AND "
        "split_name = ? ORDER BY rowid;", (client_id, split)).fetchall()
  connection.close()
  return [(rowid, bytes(blob)) for rowid, blob in rows]


def _damaged_copy(corpus_dir, directory, replacements):
  """A copy of the corpus with some records' bytes replaced ({rowid: bytes})."""
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, database.DATABASE_FILENAME)
  shutil.copyfile(os.path.join(corpus_dir, database.DATABASE_FILENAME), path)
  with sqlite3.connect(path) as connection:
    connection.executemany(
        "UPDATE examples SET serialized_example_proto = ? WHERE rowid = ?;",
        [(blob, rowid) for rowid, blob in replacements.items()])
  connection.close()
  return str(directory), path


def _a_client(directory, split="train", min_records=6):
  train = tff.simulation.datasets.SqlClientData(
      os.path.join(directory, database.DATABASE_FILENAME), split)
  return next(c for c in train.client_ids if len(_rows(directory, c, split)) >= min_records)


def _tokens(dataset):
  return [element["tokens"] for element in dataset.as_numpy_iterator()]


def _batches(dataset):
  return list(dataset.as_numpy_iterator())


# ---------------------------------------------------------------------------------------------
# StackOverflow: the record check.


@pytest.mark.parametrize("name", sorted(_BAD_RECORDS))
def test_check_records_names_the_reason_and_keeps_the_good_in_order(name):
  blob, reason = _BAD_RECORDS[name]
  good = [_example(f"sentence {i}".encode()) for i in range(4)]
  result = database.check_records(good[:2] + [blob] + good[2:])
  assert result.good.tolist() == [True, True, False, True, True]
  assert [p[:2] for p in result.problems] == [(2, reason)]
  assert result.tokens.tolist() == [f"sentence {i}".encode() for i in range(4)]


def test_verdict_on_a_record_does_not_depend_on_its_batch():
  good = [_example(f"s {i}".encode()) for i in range(50)]
  bad = [blob for blob, _ in _BAD_RECORDS.values()]
  mixed = database.check_records(good + bad)
  for blob in bad:
    assert not database.check_records([blob]).good[0]
  assert mixed.good.tolist() == [True] * 50 + [False] * len(bad)
  clean = database.check_records(good)
  assert clean.problems == [] and clean.tokens.tolist() == mixed.tokens.tolist()


# ---------------------------------------------------------------------------------------------
# StackOverflow: per-client datasets read lazily (TFF's pipeline).


def test_lazy_client_quarantines_bad_records_and_keeps_the_rest(corpus_dir, tmp_path):
  client_id = _a_client(corpus_dir)
  rows = _rows(corpus_dir, client_id)
  bad = {rows[1][0]: _BAD_RECORDS["garbage"][0], rows[4][0]: _BAD_RECORDS["tokens_latin1"][0]}
  directory, path = _damaged_copy(corpus_dir, tmp_path, bad)
  train, _, _ = database.load_client_data(directory)
  expected = [tf.train.Example.FromString(blob).features.feature["tokens"].bytes_list.value[0]
              for rowid, blob in rows if rowid not in bad]
  for _ in range(2):  # Made twice (two rounds): the same records, counted once.
    assert _tokens(train.create_tf_dataset_for_client(client_id)) == expected
  summary = train.quarantine.summary()
  assert summary["file"] == path
  assert summary["records_quarantined"] == {"train": 2}
  assert summary["quarantined_by_reason"] == {"not_an_example": 1, "tokens_not_utf8": 1}
  assert summary["clients"] == [{
      "split": "train", "client_id": client_id, "records": len(rows), "quarantined": 2,
      "reasons": {"not_an_example": 1, "tokens_not_utf8": 1}, "rowids": sorted(bad)}]
  assert summary["clients_checked"] == {"train": 1}
  json.dumps(summary)


def test_clean_clients_get_tffs_batches_bitwise(corpus_dir, vocab):
  checked, _, _ = database.load_client_data(corpus_dir)
  raw, _, _ = tff.simulation.datasets.stackoverflow.load_data(cache_dir=corpus_dir)
  ours = preprocessing.make_train_client_data(checked, vocab, 4, 10)
  theirs = preprocessing.make_train_client_data(raw, vocab, 4, 10)
  for client_id in checked.client_ids[:5]:
    expected = _batches(theirs.create_tf_dataset_for_client(client_id))
    got = _batches(ours.create_tf_dataset_for_client(client_id))
    assert len(got) == len(expected)
    for (x, y), (ex, ey) in zip(got, expected):
      assert x.dtype == ex.dtype and np.array_equal(x, ex) and np.array_equal(y, ey)
  assert checked.quarantine.num_quarantined() == 0


def test_lazy_clients_trace_the_preprocessing_once_and_quarantine_as_before(
    corpus_dir, vocab, tmp_path):
  # Issue #43: the per-client preprocessing is one function of the client id, traced once
  # (TFF's PreprocessClientData traces it again for every client); a client with bad records
  # still gets exactly the batches of its good records.
  client_id = _a_client(corpus_dir)
  rows = _rows(corpus_dir, client_id)
  bad = {rows[2][0]: _BAD_RECORDS["garbage"][0]}
  directory, _ = _damaged_copy(corpus_dir, tmp_path, bad)
  train, _, _ = database.load_client_data(directory)
  raw, _, _ = tff.simulation.datasets.stackoverflow.load_data(cache_dir=corpus_dir)
  preprocess_fn = preprocessing._preprocess_fn(vocab, 3, None, 1, 20, 1)  # pylint: disable=protected-access
  calls = []

  def counted(dataset):
    calls.append(1)
    return preprocess_fn(dataset)

  traced = preprocessing.TracedTrainClientData(train, counted)
  clean = [c for c in train.client_ids[:6] if c != client_id]
  for c in clean + clean:
    expected = _batches(preprocess_fn(raw.create_tf_dataset_for_client(c)))
    got = _batches(traced.create_tf_dataset_for_client(c))
    assert len(got) == len(expected) > 0
    for (x, y), (ex, ey) in zip(got, expected):
      assert np.array_equal(x, ex) and np.array_equal(y, ey)
  assert len(calls) == 1  # Traced once for all clean clients.
  kept = tf.data.Dataset.from_tensor_slices(
      [blob for rowid, blob in rows if rowid not in bad]).map(
          database._parse_record)  # pylint: disable=protected-access
  expected = _batches(preprocess_fn(kept))
  got = _batches(traced.create_tf_dataset_for_client(client_id))
  assert [x.tolist() for x, _ in got] == [x.tolist() for x, _ in expected]
  assert train.quarantine.summary()["records_quarantined"] == {"train": 1}
  assert traced.element_type_structure == preprocess_fn(
      raw.create_tf_dataset_for_client(clean[0])).element_spec
  with pytest.raises(ValueError, match="'nobody' is not a client of split 'train'"):
    traced.create_tf_dataset_for_client("nobody")
  # What a remote worker receives: a graph of the query and the vocabulary, whose size does
  # not grow with the client's records (it reads them from its own copy of the file).
  sizes = {len(_rows(directory, c)): len(tf.raw_ops.DatasetToGraphV2(
      input_dataset=tf.data.experimental.to_variant(traced.create_tf_dataset_for_client(c)),
      external_state_policy=2).numpy()) for c in clean}
  assert len(sizes) > 1 and max(sizes.values()) - min(sizes.values()) < 64, sizes
  # TFF's traceable form (a dataset_computation) gives the same batches.
  computation = tff.tensorflow.computation(traced.serializable_dataset_fn, tf.string)
  assert [x.tolist() for x, _ in _batches(computation(clean[0]))] == [
      x.tolist() for x, _ in _batches(traced.create_tf_dataset_for_client(clean[0]))]


def test_unknown_client_is_a_value_error_naming_it(corpus_dir):
  train, _, _ = database.load_client_data(corpus_dir)
  with pytest.raises(ValueError, match="'nobody' is not a client of split 'train'"):
    train.create_tf_dataset_for_client("nobody")


def test_database_damaged_after_loading_is_a_value_error_naming_file_and_client(
    corpus_dir, tmp_path):
  directory, path = _damaged_copy(corpus_dir, tmp_path, {})
  train, _, _ = database.load_client_data(directory)
  client_id = train.client_ids[3]
  with open(path, "r+b") as f:  # Overwritten mid-run (e.g. a failed copy over it).
    f.write(b"\x00" * 4096)
  with pytest.raises(ValueError) as info:
    train.create_tf_dataset_for_client(client_id)
  assert path in str(info.value) and repr(client_id) in str(info.value)
  assert "re-download" in str(info.value)


def test_eval_dataset_leaves_out_bad_heldout_records(corpus_dir, vocab, tmp_path):
  client_id = _a_client(corpus_dir, "heldout", min_records=2)
  rows = _rows(corpus_dir, client_id, "heldout")
  directory, _ = _damaged_copy(corpus_dir, tmp_path,
                               {rows[0][0]: _BAD_RECORDS["missing_score"][0]})
  _, heldout, _ = database.load_client_data(directory)
  _, clean_heldout, _ = database.load_client_data(corpus_dir)
  got = sum(len(x) for x, _ in preprocessing.make_eval_dataset(heldout, vocab)
            .as_numpy_iterator())
  expected = sum(len(x) for x, _ in preprocessing.make_eval_dataset(clean_heldout, vocab)
                 .as_numpy_iterator())
  assert got == expected - 1
  summary = heldout.quarantine.summary()
  assert summary["records_quarantined"] == {"heldout": 1}
  assert summary["clients"][0]["client_id"] == client_id
  assert summary["clients"][0]["rowids"] == [rows[0][0]]


# ---------------------------------------------------------------------------------------------
# StackOverflow: the in-memory clients.


def test_in_memory_quarantines_like_the_lazy_path(corpus_dir, vocab, tmp_path):
  client_id = _a_client(corpus_dir)
  rows = _rows(corpus_dir, client_id)
  bad = {rows[0][0]: _BAD_RECORDS["truncated"][0], rows[2][0]: _BAD_RECORDS["two_tags"][0]}
  directory, _ = _damaged_copy(corpus_dir, tmp_path, bad)
  train, _, _ = database.load_client_data(directory)
  memory = in_memory.make_train_client_data_in_memory(directory, vocab, 4, None,
                                                      quarantine=train.quarantine)
  lazy = preprocessing.make_train_client_data(database.load_client_data(directory)[0],
                                              vocab, 4, None)
  for some_id in (client_id, train.client_ids[0]):
    expected = _batches(lazy.create_tf_dataset_for_client(some_id))
    got = _batches(memory.create_tf_dataset_for_client(some_id))
    assert len(got) == len(expected)
    for (x, y), (ex, ey) in zip(got, expected):
      assert np.array_equal(x, ex) and np.array_equal(y, ey)
  assert memory.tokenized_clients.num_elements(client_id) == len(rows) - 2
  summary = train.quarantine.summary()
  assert summary["records_quarantined"] == {"train": 2}
  assert summary["clients_checked"] == {"train": len(train.client_ids)}
  assert summary["quarantined_by_reason"] == {"not_an_example": 1, "not_scalar_tags": 1}


def test_in_memory_cap_counts_good_records_in_order(corpus_dir, vocab, tmp_path):
  client_id = _a_client(corpus_dir)
  rows = _rows(corpus_dir, client_id)
  # A bad record among the first three: the cap of 3 takes the next good one instead.
  directory, _ = _damaged_copy(corpus_dir, tmp_path, {rows[1][0]: _BAD_RECORDS["empty"][0]})
  memory = in_memory.load_tokenized_clients(directory, "train", vocab,
                                            max_elements_per_client=3)
  lazy = preprocessing.make_train_client_data(database.load_client_data(directory)[0],
                                              vocab, 100, 3)
  (x, y), = _batches(lazy.create_tf_dataset_for_client(client_id))
  got_x, got_y = memory[client_id]
  assert np.array_equal(got_x, x) and np.array_equal(got_y, y) and len(x) == 3
  assert memory.quarantine.summary()["clients"][0]["rowids"] == [rows[1][0]]


def test_in_memory_split_mostly_bad_is_refused(corpus_dir, vocab, tmp_path):
  path = os.path.join(corpus_dir, database.DATABASE_FILENAME)
  with sqlite3.connect(path) as connection:
    rowids = [r for r, in connection.execute(
        "SELECT rowid FROM examples WHERE split_name = 'heldout' ORDER BY rowid;")]
  connection.close()
  bad = {rowid: _BAD_RECORDS["garbage"][0] for rowid in rowids[:len(rowids) * 3 // 4]}
  directory, damaged = _damaged_copy(corpus_dir, tmp_path, bad)
  with pytest.raises(ValueError) as info:
    in_memory.load_tokenized_clients(directory, "heldout", vocab)
  message = str(info.value)
  assert damaged in message and f"{len(bad)} of the {len(rowids)} records" in message
  assert "'heldout'" in message and f"rowid {rowids[0]}" in message
  assert "not_an_example" in message and "re-download" in message


# ---------------------------------------------------------------------------------------------
# StackOverflow: the file up front, word counts, the task.


def test_mostly_garbage_file_is_refused_up_front_with_exit_code_2(corpus_dir, tmp_path):
  path = os.path.join(corpus_dir, database.DATABASE_FILENAME)
  with sqlite3.connect(path) as connection:
    rowids = [r for r, in connection.execute(
        "SELECT rowid FROM examples WHERE split_name = 'train' ORDER BY rowid;")]
  connection.close()
  directory, damaged = _damaged_copy(
      corpus_dir, tmp_path, {r: _BAD_RECORDS["score_as_bytes"][0] for r in rowids})
  stream = io.StringIO()
  code = exits.guarded(lambda: database.load_client_data(directory), stream=stream)
  assert code == exits.BAD_INPUT
  message = stream.getvalue()
  assert message.startswith("error: ") and "Traceback" not in message
  assert damaged in message and f"rowid {rowids[0]}" in message
  assert "wrong_kind_score" in message and "score (int64)" in message


def test_a_few_bad_records_pass_the_up_front_check(corpus_dir, tmp_path, caplog):
  rowid = _rows(corpus_dir, _a_client(corpus_dir))[0][0]
  directory, path = _damaged_copy(corpus_dir, tmp_path,
                                  {rowid: _BAD_RECORDS["garbage"][0]})
  database.check_database(directory)
  assert any(path in r.getMessage() and f"rowid {rowid}" in r.getMessage()
             for r in caplog.records)


def test_missing_data_dir_is_exit_code_2_naming_it(tmp_path):
  missing = str(tmp_path / "nowhere")
  stream = io.StringIO()
  assert exits.guarded(lambda: database.load_client_data(missing),
                       stream=stream) == exits.BAD_INPUT
  assert os.path.join(missing, database.DATABASE_FILENAME) in stream.getvalue()


def test_word_counts_skip_bad_records(corpus_dir, tmp_path):
  client_id = _a_client(corpus_dir)
  rowid = _rows(corpus_dir, client_id)[2][0]
  directory, _ = _damaged_copy(corpus_dir, tmp_path / "bad",
                               {rowid: _BAD_RECORDS["tokens_latin1"][0]})
  reference, path = _damaged_copy(corpus_dir, tmp_path / "deleted", {})
  with sqlite3.connect(path) as connection:
    connection.execute("DELETE FROM examples WHERE rowid = ?;", (rowid,))
  connection.close()
  assert vocab_lib.count_train_words(directory) == vocab_lib.count_train_words(reference)


def test_stackoverflow_task_reports_data_quality(corpus_dir, tmp_path):
  client_id = _a_client(corpus_dir)
  rowid = _rows(corpus_dir, client_id)[0][0]
  directory, path = _damaged_copy(corpus_dir, tmp_path, {rowid: _BAD_RECORDS["empty"][0]})
  settings = so_task.StackOverflowSettings(data_dir=directory, vocab_size=_VOCAB_SIZE,
                                           eval_clients=3, lstm_size=8, embedding_size=8)
  task = so_task.make_task(settings)
  quality = json.loads(json.dumps(task.data_quality()))
  assert quality["file"] == path and quality["records_quarantined"]["train"] == 1
  assert quality["skipped"] == 1  # The total the program announces (data_quality.json).
  assert quality["clients"][0]["client_id"] == client_id


# ---------------------------------------------------------------------------------------------
# Reddit: compressed files, bad lines, counts.


def _line(author="alice", body="hello world", created_utc=1):
  return json.dumps({"author": author, "body": body, "subreddit": "r",
                     "created_utc": created_utc})


def _text(n=20, **kwargs):
  return "".join(_line(author=f"u{i % 3}", created_utc=i, **kwargs) + "\n" for i in range(n))


def test_bz2_name_holding_gzip_is_read_with_a_note(tmp_path):
  path = tmp_path / "RC_2015-01.bz2"
  path.write_bytes(gzip.compress(_text().encode()))
  summary = reddit_data.ReadSummary()
  assert len(list(reddit_data.read_comments(str(path), summary))) == 20
  entry = summary.per_file[str(path)]
  assert entry["format"] == "gzip" and "named as bzip2" in entry["note"]


def test_gz_name_holding_plain_text_is_read_with_a_note(tmp_path):
  path = tmp_path / "comments.jsonl.gz"
  path.write_text(_text())
  summary = reddit_data.ReadSummary()
  assert len(list(reddit_data.read_comments(str(path), summary))) == 20
  assert summary.per_file[str(path)]["format"] == "plain"
  assert "named as gzip" in summary.per_file[str(path)]["note"]


def test_plain_name_holding_bzip2_is_read(tmp_path):
  path = tmp_path / "comments.jsonl"
  path.write_bytes(bz2.compress(_text().encode()))
  summary = reddit_data.ReadSummary()
  assert len(list(reddit_data.read_comments(str(path), summary))) == 20
  assert summary.per_file[str(path)]["format"] == "bzip2"


@pytest.mark.parametrize("magic, kind", [(b"\xfd7zXZ\x00", "xz"),
                                         (b"\x28\xb5\x2f\xfd", "zstd")])
def test_archives_it_cannot_open_are_value_errors_naming_them(tmp_path, magic, kind):
  path = tmp_path / "RC_2019-01.bz2"
  path.write_bytes(magic + bytes(64))
  stream = io.StringIO()
  assert exits.guarded(lambda: list(reddit_data.read_comments(str(path))),
                       stream=stream) == exits.BAD_INPUT
  assert str(path) in stream.getvalue() and f"is a {kind} archive" in stream.getvalue()
  assert "decompress" in stream.getvalue()


def test_truncated_gzip_is_a_value_error_naming_file_and_line(tmp_path):
  blob = gzip.compress(_text(2000).encode())
  path = tmp_path / "cut.jsonl.gz"
  path.write_bytes(blob[:len(blob) // 2])
  with pytest.raises(ValueError, match="truncated or corrupt") as info:
    list(reddit_data.read_comments(str(path)))
  message = str(info.value)
  assert repr(str(path)) in message and "(gzip)" in message
  line = int(message.split("after line ")[1].split(" ")[0])
  assert 0 < line < 2000


def test_corrupt_bzip2_stream_is_a_value_error(tmp_path):
  blob = bytearray(bz2.compress(_text(2000).encode()))
  blob[len(blob) // 2:len(blob) // 2 + 64] = b"\x00" * 64
  path = tmp_path / "bad.jsonl.bz2"
  path.write_bytes(bytes(blob))
  stream = io.StringIO()
  assert exits.guarded(lambda: list(reddit_data.read_comments(str(path))),
                       stream=stream) == exits.BAD_INPUT
  assert str(path) in stream.getvalue() and "(bzip2)" in stream.getvalue()
  assert "Traceback" not in stream.getvalue()


def test_undecodable_bytes_do_not_stop_the_read(tmp_path):
  path = tmp_path / "latin1.jsonl"
  latin1 = b'{"author": "alice", "body": "caf\xe9", "subreddit": "r", "created_utc": 1}\n'
  path.write_bytes(_text(5).encode() + latin1 + b"\xff\xfe\x00garbage\n")
  summary = reddit_data.ReadSummary()
  comments = list(reddit_data.read_comments(str(path), summary))
  assert len(comments) == 6 and comments[-1].body == "caf\ufffd"
  assert summary.malformed == {"not_json": 1}


def test_missing_file_and_directory_are_value_errors(tmp_path):
  for path in (tmp_path / "missing.jsonl", tmp_path):
    stream = io.StringIO()
    assert exits.guarded(lambda p=path: list(reddit_data.read_comments(str(p))),
                         stream=stream) == exits.BAD_INPUT
    assert str(path) in stream.getvalue() and "not a file" in stream.getvalue()


def test_summary_counts_per_file_and_reason(tmp_path):
  good = tmp_path / "good.jsonl"
  good.write_text(_text(10) + _line(author="[deleted]") + "\n")
  bad = tmp_path / "bad.jsonl.gz"  # 3 of 10 lines malformed (30 %).
  bad.write_bytes(gzip.compress((_text(7) + "{oops\n[1]\n" + _line(author="a b") + "\n")
                                .encode()))
  summary = reddit_data.ReadSummary()
  comments = list(reddit_data.read_comments([str(good), str(bad)], summary))
  assert len(comments) == 17
  quality = json.loads(json.dumps(summary.as_dict()))
  assert quality["malformed_lines"] == 3 and quality["dropped_comments"] == 1
  assert quality["malformed_by_reason"] == {"invalid_author": 1, "not_json": 1,
                                            "not_object": 1}
  assert quality["per_file"][str(bad)] == {
      "format": "gzip", "lines": 10, "comments": 7, "dropped": {},
      "malformed": {"invalid_author": 1, "not_json": 1, "not_object": 1}}
  assert quality["per_file"][str(good)]["dropped"] == {"deleted_author": 1}


def _user_lines(num_users=3, posts=2):
  words = " ".join(f"w{i}" for i in range(30))
  return [_line(author=f"u{u}", body=words, created_utc=p)
          for u in range(num_users) for p in range(posts)]


def test_prepare_prints_and_saves_the_counts(tmp_path, capsys):
  path = tmp_path / "c.jsonl"
  path.write_text("\n".join(_user_lines() + ["not json", _line(author="[deleted]")]) + "\n")
  kwargs = dict(tokens_per_user=50, vocab_size=20, min_users=3)
  first = reddit_data.prepare(str(path), str(tmp_path / "cache"), **kwargs)
  err = capsys.readouterr().err
  assert "1 malformed line(s)" in err and "1 comment(s) dropped" in err
  again = reddit_data.prepare(str(path), str(tmp_path / "cache"), **kwargs)
  assert capsys.readouterr().err == ""  # Read back from the cache: nothing read again.
  assert again.summary is None and again.data_quality == json.loads(
      json.dumps(first.data_quality))
  assert again.data_quality["malformed_by_reason"] == {"not_json": 1}
  assert again.data_quality["per_file"][str(path)]["dropped"] == {"deleted_author": 1}


def test_clean_input_prints_nothing(tmp_path, capsys):
  path = tmp_path / "c.jsonl"
  path.write_text("\n".join(_user_lines()) + "\n")
  reddit_data.prepare(str(path), str(tmp_path / "cache"), tokens_per_user=50,
                      vocab_size=20, min_users=3)
  assert capsys.readouterr().err == ""


def test_damaged_cache_files_are_value_errors_with_the_fix(tmp_path):
  path = tmp_path / "c.jsonl"
  path.write_text("\n".join(_user_lines()) + "\n")
  kwargs = dict(tokens_per_user=50, vocab_size=20, min_users=3)
  prepared = reddit_data.prepare(str(path), str(tmp_path / "cache"), **kwargs)
  meta = os.path.join(os.path.dirname(prepared.database_path), "vocab.json")
  with open(meta, "w") as f:
    f.write('{"vocab": [')
  with pytest.raises(ValueError, match="not valid JSON") as info:
    reddit_data.prepare(str(path), str(tmp_path / "cache"), **kwargs)
  assert meta in str(info.value) and "delete its directory" in str(info.value)
  with sqlite3.connect(prepared.database_path) as connection:
    connection.execute("UPDATE examples SET serialized_example_proto = x'ff00ff';")
  connection.close()
  with pytest.raises(ValueError, match="delete it to rebuild") as info:
    reddit_data.read_split_arrays(prepared.database_path)
  assert prepared.database_path in str(info.value)


def test_reddit_task_reports_data_quality(tmp_path):
  path = tmp_path / "c.jsonl.bz2"
  lines = _user_lines(num_users=4, posts=4) + ["{", "[]", _line(author="AutoModerator")]
  path.write_bytes(bz2.compress(("\n".join(lines) + "\n").encode()))
  settings = reddit_task.RedditSettings(
      data_files=(str(path),), vocab_size=20, tokens_per_user=50, test_fraction=0.3,
      prepared_cache_dir=str(tmp_path / "cache"), lstm_size=8, embedding_size=8)
  task = reddit_task.make_task(settings)
  quality = json.loads(json.dumps(task.data_quality()))
  assert quality["malformed_lines"] == 2 and quality["dropped_by_reason"] == {
      "automoderator": 1}
  assert quality["skipped"] == 2  # Malformed lines; dropped comments are by design.
  assert quality["per_file"][str(path)]["format"] == "bzip2"
  assert isinstance(quality["authors_too_small"], int)
  assert collections.Counter(quality["malformed_by_reason"]) == {"not_json": 1,
                                                                 "not_object": 1}


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
