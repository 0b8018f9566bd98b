"""tasks.reddit.synthetic: determinism, caching, and that the loader's counters see it."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tasks.reddit import data
from tasks.reddit import synthetic

_SMALL = synthetic.SyntheticConfig(num_authors=60, mean_comments_per_author=15,
                                   num_words=500, seed=4)


def test_same_config_same_bytes_other_seed_other_bytes(tmp_path):
  a = synthetic.generate(_SMALL, str(tmp_path / "a.jsonl.gz"))
  b = synthetic.generate(_SMALL, str(tmp_path / "b.jsonl.gz"))
  with open(a, "rb") as fa, open(b, "rb") as fb:
    assert fa.read() == fb.read()
  other = synthetic.SyntheticConfig(**{**_SMALL.__dict__, "seed": 5})
  c = synthetic.generate(other, str(tmp_path / "c.jsonl.gz"))
  with open(a, "rb") as fa, open(c, "rb") as fc:
    assert fa.read() != fc.read()
  assert other.fingerprint() != _SMALL.fingerprint()


def test_ensure_corpus_caches_by_fingerprint(tmp_path):
  path = synthetic.ensure_corpus(_SMALL, str(tmp_path))
  assert path == os.path.join(str(tmp_path), _SMALL.fingerprint(), synthetic.FILENAME)
  mtime = os.stat(path).st_mtime_ns
  assert synthetic.ensure_corpus(_SMALL, str(tmp_path)) == path
  assert os.stat(path).st_mtime_ns == mtime
  assert not [f for f in os.listdir(os.path.dirname(path)) if f.endswith(".tmp")]


def test_loader_reads_it_with_counters_and_heavy_tails(tmp_path):
  path = synthetic.generate(_SMALL, str(tmp_path / "a.jsonl.gz"))
  summary = data.ReadSummary()
  splits = data.split_users(data.read_comments(path, summary), summary=summary,
                            tokens_per_user=200, test_fraction=0.1, min_users=5)
  assert summary.num_malformed == _SMALL.num_malformed_lines
  assert summary.dropped["deleted_author"] > 0 and summary.dropped["automoderator"] > 0
  assert 5 <= len(splits.train) < _SMALL.num_authors and splits.num_too_small > 0
  assert splits.test


def test_next_word_is_learnable_a_bigram_fit_on_train_beats_unigram_on_test(tmp_path):
  from tasks.reddit import task as reddit_task  # pylint: disable=g-import-not-at-top
  config = dict(synthetic_authors=300, synthetic_comments_per_author=20.0)
  t = reddit_task.make_task(reddit_task.RedditSettings(
      vocab_size=500, tokens_per_user=300, eval_users=100,
      synthetic_cache_dir=str(tmp_path), prepared_cache_dir=str(tmp_path / "prepared"),
      **config))
  ids = data.token_ids(500)
  train = t.train_data
  pairs = np.concatenate([
      np.stack([x.numpy().ravel(), y.numpy().ravel()], axis=1)
      for c in train.client_ids for x, y in train.create_tf_dataset_for_client(c)])
  counts = np.zeros((ids.num_classes, ids.num_classes))
  np.add.at(counts, (pairs[:, 0], pairs[:, 1]), 1)
  successor = counts.argmax(axis=1)
  x, y = (np.concatenate([a.numpy().ravel() for a in part])
          for part in zip(*t.eval_dataset_fn()))
  counted = y != ids.pad
  bigram = np.mean((successor[x] == y)[counted] & (y[counted] != ids.unk))
  unigram = t.baseline_metrics["unigram_accuracy_top1"]
  assert bigram > 2.5 * unigram > 0


def test_bad_config_is_a_clear_error():
  with pytest.raises(ValueError, match="deleted_fraction"):
    synthetic.SyntheticConfig(deleted_fraction=1.5)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
