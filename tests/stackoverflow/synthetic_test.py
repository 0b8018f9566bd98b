"""tasks.stackoverflow.synthetic: TFF's format, determinism, caching, learnable structure."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sqlite3
import urllib.request

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tasks.stackoverflow import data
from tasks.stackoverflow import synthetic

_SMALL = synthetic.SyntheticConfig(
    num_train_clients=60, num_heldout_clients=20, num_test_clients=10, num_words=1500,
    num_topics=6, sentences_per_client_median=20.0)


def _sha256(path: str) -> str:
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture(name="corpus_dir", scope="module")
def _corpus_dir(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("synthetic"))
  synthetic.generate(_SMALL, directory)
  return directory


@pytest.fixture(name="no_download")
def _no_download(monkeypatch):
  def refuse(*args, **kwargs):
    raise AssertionError(f"download attempted: {args!r}")
  monkeypatch.setattr(urllib.request, "urlopen", refuse)


def test_tff_load_data_reads_it_unmodified(corpus_dir, no_download):
  del no_download
  train, heldout, test = tff.simulation.datasets.stackoverflow.load_data(cache_dir=corpus_dir)
  assert len(train.client_ids) == _SMALL.num_train_clients
  assert len(heldout.client_ids) == _SMALL.num_heldout_clients
  assert len(test.client_ids) == _SMALL.num_test_clients
  # Real splits: heldout users are new (ids divisible by 10), test users are train users.
  assert set(test.client_ids) <= set(train.client_ids)
  assert not set(heldout.client_ids) & set(train.client_ids)
  assert all(int(c) % 10 == 0 for c in heldout.client_ids)
  assert all(int(c) % 10 != 0 for c in train.client_ids)
  element = next(iter(train.create_tf_dataset_for_client(train.client_ids[0])))
  assert list(element) == ["creation_date", "score", "tags", "title", "tokens", "type"]
  assert element["score"].dtype == tf.int64 and element["tokens"].dtype == tf.string
  assert element["type"].numpy() in (b"question", b"answer")
  assert element["creation_date"].numpy().endswith(b" UTC")
  tokens = element["tokens"].numpy().decode().split(" ")
  assert tokens and all(tokens)
  dates = [e["creation_date"].numpy() for e in test.create_tf_dataset_for_client(
      test.client_ids[0])]
  assert min(dates) >= b"2018-01-01"  # Test posts are the later ones, as in the real data.


def test_metadata_matches_rows(corpus_dir, caplog):
  summary = data.check_database(corpus_dir)
  assert not [r for r in caplog.records if r.levelname == "WARNING"]
  assert {s: v["clients"] for s, v in summary.items()} == {
      "train": 60, "heldout": 20, "test": 10}
  connection = sqlite3.connect(os.path.join(corpus_dir, synthetic.DATABASE_FILENAME))
  sizes = np.array([n for (n,) in connection.execute(
      "SELECT num_examples FROM client_metadata WHERE split_name = 'train';")])
  connection.close()
  assert sizes.sum() == summary["train"]["examples"]
  assert sizes.max() > 3 * np.median(sizes)  # Heavy-tailed (log-normal) client sizes.


def test_words_are_zipfian(corpus_dir):
  counts = data.count_train_words(corpus_dir)
  assert 0.5 * _SMALL.num_words < len(counts) <= _SMALL.num_words
  assert all(w and w.isascii() and not any(c.isspace() for c in w) for w in counts)
  values = np.array(list(counts.values()))
  # Frequent words are used by nearly every client, the tail by few.
  assert values[0] >= 0.9 * _SMALL.num_train_clients and np.median(values) <= 5


def test_same_seed_same_bytes(corpus_dir, tmp_path):
  again = synthetic.generate(_SMALL, str(tmp_path / "again"))
  assert _sha256(again) == _sha256(os.path.join(corpus_dir, synthetic.DATABASE_FILENAME))
  other = synthetic.generate(dataclasses.replace(_SMALL, seed=1),
                             str(tmp_path / "other"))
  assert _sha256(other) != _sha256(again)

  def first_rows(path):
    connection = sqlite3.connect(path)
    rows = connection.execute("SELECT client_id, serialized_example_proto FROM examples "
                              "ORDER BY rowid LIMIT 20;").fetchall()
    connection.close()
    return rows
  assert first_rows(again) == first_rows(os.path.join(corpus_dir, synthetic.DATABASE_FILENAME))
  assert first_rows(other) != first_rows(again)


def test_bigram_structure_is_learnable(corpus_dir):
  train, heldout, _ = data.load_client_data(corpus_dir)
  vocab = data.load_vocab(corpus_dir, vocab_size=1000)
  assert len(vocab) == 1000
  evaluation = data.make_eval_dataset(heldout, vocab)
  unigram = data.unigram_baseline_accuracy(evaluation, len(vocab))
  bigram = data.bigram_baseline_accuracy(
      data.make_eval_dataset(train, vocab, batch_size=256), evaluation, len(vocab))
  for name in (data.ACCURACY, data.ACCURACY_WITHOUT_OOV_OR_EOS):
    assert 0.02 < unigram[name] < 0.15
    assert bigram[name] > unigram[name] + 0.08 and bigram[name] > 2 * unigram[name]


def test_ensure_corpus_caches(tmp_path, monkeypatch, no_download):
  del no_download
  directory = synthetic.ensure_corpus(_SMALL, cache_dir=str(tmp_path))
  assert directory == str(tmp_path / _SMALL.fingerprint())
  assert sorted(os.listdir(directory)) == sorted(
      [synthetic.DATABASE_FILENAME, synthetic.CONFIG_FILENAME, ".lock"])

  def fail(*args):
    raise AssertionError("generated again")
  monkeypatch.setattr(synthetic, "generate", fail)
  assert synthetic.ensure_corpus(_SMALL, cache_dir=str(tmp_path)) == directory
  other = dataclasses.replace(_SMALL, num_topics=7)
  assert synthetic.corpus_directory(other, str(tmp_path)) != directory
  with pytest.raises(AssertionError, match="generated again"):
    synthetic.ensure_corpus(other, cache_dir=str(tmp_path))
  train, _, _ = data.load_client_data(directory)
  assert len(train.client_ids) == _SMALL.num_train_clients


def test_default_cache_location():
  directory = synthetic.corpus_directory()
  assert directory == os.path.join(os.path.expanduser("~/.cache/dp_fl/stackoverflow_synthetic"),
                                   synthetic.SyntheticConfig().fingerprint())


def test_failed_generation_leaves_no_file(tmp_path, monkeypatch):
  real = synthetic._split_rows

  def fail_on_heldout(split, *args):
    if split == "heldout":
      raise KeyboardInterrupt  # As if the process were interrupted mid-way.
    return real(split, *args)
  monkeypatch.setattr(synthetic, "_split_rows", fail_on_heldout)
  with pytest.raises(KeyboardInterrupt):
    synthetic.generate(_SMALL, str(tmp_path))
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("changes, match", [
    ({"num_test_clients": 61}, "`num_test_clients` must be <= `num_train_clients`"),
    ({"seed": -1}, "`seed`"),
    ({"num_words": 50}, "`num_words` must be an integer >= "),
    ({"shared_transition_weight": 0.6, "topic_transition_weight": 0.6}, "<= 1"),
    ({"topic_concentration": 0.0}, "`topic_concentration`"),
    ({"sentences_per_post_mean": 0.5}, "`sentences_per_post_mean`"),
    ({"num_topics": 0}, "`num_topics` must be a positive integer"),
])
def test_config_validation(changes, match):
  with pytest.raises(ValueError, match=match):
    dataclasses.replace(_SMALL, **changes)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
