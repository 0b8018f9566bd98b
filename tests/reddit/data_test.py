"""tasks.reddit.data: parsing, counters, grouping, the 1,600-token rule, split, SQL round trip."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import json
import sqlite3

import numpy as np
import pytest

from tasks import sql_client_data
from tasks.reddit import data


def _line(author="alice", body="hello world", subreddit="r", created_utc=1, **extra):
  return json.dumps({"author": author, "body": body, "subreddit": subreddit,
                     "created_utc": created_utc, **extra})


def _write(path, lines, opener=open):
  with opener(path, "wt", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return str(path)


def _words(prefix, n):
  return " ".join(f"{prefix}{i}" for i in range(n))


def test_tokenize_lowercases_and_splits_punctuation():
  assert data.tokenize("Don't STOP!! 3.5 x") == ["don't", "stop", "!", "!", "3", ".", "5",
                                                 "x"]


def test_malformed_lines_skipped_and_counted(tmp_path):
  lines = [_line() for _ in range(6)] + [
      "{not json", "[1, 2]", json.dumps({"author": "a", "body": "b", "subreddit": "s"}),
      _line(created_utc="17"), _line(created_utc=1.5), _line(author=3),
      _line(author="x'; drop"), _line(author="[deleted]"), _line(body="[removed]"),
      _line(author="AutoModerator"), ""]
  summary = data.ReadSummary()
  comments = list(data.read_comments(_write(tmp_path / "a.jsonl", lines), summary))
  assert len(comments) == 7  # 6 plus the digit-string created_utc.
  assert comments[-1].created_utc == 17
  assert summary.malformed == {"not_json": 1, "not_object": 1, "missing_created_utc": 1,
                               "wrong_type_created_utc": 1, "wrong_type_author": 1,
                               "invalid_author": 1}
  assert summary.dropped == {"deleted_author": 1, "deleted_body": 1, "automoderator": 1}
  assert summary.lines == 16 and summary.comments == 7
  assert "6 malformed" in str(summary)


def test_automoderator_kept_on_request(tmp_path):
  path = _write(tmp_path / "a.jsonl", [_line(author="AutoModerator")])
  assert len(list(data.read_comments(path, drop_automoderator=False))) == 1


def test_mostly_garbage_file_refused_with_counts(tmp_path):
  path = _write(tmp_path / "bad.jsonl", [_line(), "x", "y", "[]"])
  with pytest.raises(ValueError, match=r"bad\.jsonl.*3 of 4.*not_json"):
    list(data.read_comments(path))
  assert len(list(data.read_comments(path, max_malformed_fraction=0.8))) == 1
  with pytest.raises(ValueError, match="max_malformed_fraction"):
    list(data.read_comments(path, max_malformed_fraction=2))
  with pytest.raises(ValueError, match="not a file"):
    list(data.read_comments(str(tmp_path / "missing.jsonl")))


@pytest.mark.parametrize("suffix,opener", [(".gz", gzip.open), (".bz2", bz2.open)])
def test_compressed_input(tmp_path, suffix, opener):
  path = _write(tmp_path / f"a.jsonl{suffix}", [_line(), _line(author="bob")], opener)
  assert [c.author for c in data.read_comments(path)] == ["alice", "bob"]


def _comments(tmp_path, lines):
  summary = data.ReadSummary()
  return data.read_comments(_write(tmp_path / "c.jsonl", lines), summary), summary


def test_grouping_filter_truncation(tmp_path):
  lines = [
      # alice: 3 posts of 6 tokens, out of time order.
      _line("alice", _words("c", 6), created_utc=30), _line("alice", _words("a", 6),
                                                             created_utc=10),
      _line("alice", _words("b", 6), created_utc=20),
      _line("bob", _words("b", 11), created_utc=5),  # 11 tokens.
      _line("carol", _words("d", 12), created_utc=1),  # 12 tokens.
      _line("[deleted]", _words("e", 50), created_utc=2)]
  comments, summary = _comments(tmp_path, lines)
  splits = data.split_users(comments, summary=summary, tokens_per_user=10,
                            test_fraction=0.0)
  assert sorted(splits.train) == ["alice", "bob", "carol"]  # [deleted] dropped.
  assert splits.summary.dropped == {"deleted_author": 1}
  assert splits.train["alice"] == [_words("a", 6).split(), _words("b", 4).split()]
  assert splits.train_truncated == {"alice": True, "bob": True, "carol": True}
  assert all(sum(map(len, p)) == 10 for p in splits.train.values())
  assert splits.test == {} and splits.num_too_small == 0
  comments, _ = _comments(tmp_path, lines)
  splits = data.split_users(comments, tokens_per_user=12, test_fraction=0.0)
  assert sorted(splits.train) == ["alice", "carol"] and splits.num_too_small == 1
  assert splits.train["alice"] == [_words("a", 6).split(), _words("b", 6).split()]
  assert splits.train_truncated == {"alice": False, "carol": False}


def test_too_few_users_is_a_clear_error(tmp_path):
  comments, _ = _comments(tmp_path, [_line("alice", _words("a", 20))])
  with pytest.raises(ValueError, match=r"Only 1 authors.*min_users=2"):
    data.split_users(comments, tokens_per_user=10, min_users=2)


def test_held_out_posts_are_random_posts_independent_of_order(tmp_path):
  lines = [_line(f"u{u}", _words("w", 5) + f" p{p}", created_utc=p)
           for u in range(5) for p in range(40)]
  a = data.split_users(_comments(tmp_path, lines)[0], tokens_per_user=20,
                       test_fraction=0.25, seed=3)
  b = data.split_users(_comments(tmp_path, lines[::-1])[0], tokens_per_user=20,
                       test_fraction=0.25, seed=3)
  assert a.train == b.train and a.test == b.test
  held = sum(len(p) for p in a.test.values())
  assert 20 <= held <= 80  # About 50 of 200 posts.
  for user, posts in a.test.items():
    train_posts = {tuple(p) for p in a.train[user]}
    assert not any(tuple(p) in train_posts for p in posts)


def test_vocab_and_windows():
  users = {"a": [["x", "y", "y"]], "b": [["z", "y", "x", "q"]]}
  vocab = data.build_vocab(users, 3)
  assert vocab == ["y", "x", "q"]  # y 3, x 2, then q before z (tie by word).
  ids = data.token_ids(3)
  assert (ids.pad, ids.unk, ids.bos, ids.eos, ids.num_classes) == (0, 4, 5, 6, 7)
  w = data.user_windows([["x", "y"], ["z", "q"]], vocab, unroll=3, last_truncated=True)
  # Stream: BOS x y EOS BOS z(UNK) q = 5 2 1 6 5 4 3.
  np.testing.assert_array_equal(w, [[5, 2, 1, 6], [6, 5, 4, 3]])
  w = data.user_windows([["x"]], vocab, unroll=3)
  np.testing.assert_array_equal(w, [[5, 2, 6, 0]])


def test_sql_client_data_round_trip(tmp_path):
  lines = [_line(f"u{u}", _words("w", 7), created_utc=p) for u in range(3)
           for p in range(6)]
  splits = data.split_users(_comments(tmp_path, lines)[0], tokens_per_user=30,
                            test_fraction=0.2)
  vocab = data.build_vocab(splits.train, 5)
  db = data.make_sql_client_data(splits, vocab, str(tmp_path / "r.sqlite"), unroll=4,
                                 vocab_size=10)
  # TFF's writer makes no index; the prepared file gets one, so a client read is a lookup
  # and not a scan of the table.
  with contextlib.closing(sqlite3.connect(db)) as connection:
    assert sql_client_data.client_index(connection) == sql_client_data.INDEX_NAME
    plan = " ".join(str(row) for row in connection.execute(
        "EXPLAIN QUERY PLAN SELECT serialized_example_proto FROM examples "
        "WHERE client_id = 'train/u0';"))
    assert sql_client_data.INDEX_NAME in plan, plan
  train = data.load_client_data(db, data.TRAIN, unroll=4)
  assert sorted(train.client_ids) == sorted(f"train/{u}" for u in splits.train)
  for user in splits.train:
    expected = data.user_windows(splits.train[user], vocab, unroll=4, vocab_size=10,
                                 last_truncated=splits.train_truncated[user])
    batches = list(data.batch_dataset(train.create_tf_dataset_for_client(f"train/{user}"),
                                      3))
    x = np.concatenate([b[0].numpy() for b in batches])
    y = np.concatenate([b[1].numpy() for b in batches])
    np.testing.assert_array_equal(x, expected[:, :-1])
    np.testing.assert_array_equal(y, expected[:, 1:])
    assert [len(b[0]) for b in batches][:1] == [min(3, len(expected))]
  test = data.load_client_data(db, data.TEST, unroll=4)
  assert sorted(test.client_ids) == sorted(f"test/{u}" for u in splits.test)
  with pytest.raises(ValueError, match="split"):
    data.load_client_data(db, "heldout")
  # The one-query reader the task uses yields exactly what TFF's reader yields.
  for split, client_data in ((data.TRAIN, train), (data.TEST, test)):
    arrays = data.read_split_arrays(db, split, unroll=4)
    assert sorted(arrays) == sorted(client_data.client_ids)
    for client_id, (x, y) in arrays.items():
      elements = list(client_data.create_tf_dataset_for_client(client_id))
      np.testing.assert_array_equal(x, np.stack([e["x"].numpy() for e in elements]))
      np.testing.assert_array_equal(y, np.stack([e["y"].numpy() for e in elements]))
  (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
  with pytest.raises(ValueError, match="not a dp_fl Reddit SqlClientData database"):
    data.read_split_arrays(str(tmp_path / "junk.sqlite"))


def test_prepare_caches(tmp_path):
  path = _write(tmp_path / "c.jsonl", [_line(f"u{u}", _words("w", 30), created_utc=p)
                                       for u in range(3) for p in range(2)])
  first = data.prepare(path, str(tmp_path / "cache"), tokens_per_user=50, vocab_size=20,
                       min_users=3)
  assert first.num_train_users == 3 and first.summary.comments == 6
  again = data.prepare(path, str(tmp_path / "cache"), tokens_per_user=50, vocab_size=20,
                       min_users=3)
  assert again.database_path == first.database_path and again.summary is None
  assert again.vocab == first.vocab
  with pytest.raises(ValueError, match="min_users=4"):
    data.prepare(path, str(tmp_path / "cache"), tokens_per_user=50, min_users=4)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
