"""Tests of the real-text corpora (tasks/real_text.py) and their build script."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import textwrap

import pytest

from tasks import real_text

_LICENSE = "# Copyright 2020 The Authors. Licensed under the Apache License, Version 2.0."

_MODULE = '''
{license}
"""Tools for {topic} that every user of the {topic} package needs.

The {topic} helpers read files. They never write anything back. Each call is cheap.

>>> import {topic}
>>> {topic}.run(x=1)
"""

# The cache keeps the last {topic} result around. It is cleared on every new call.
CACHE = {{}}


def run(x):
  """Runs the {topic} step on x and returns the result.

  Args:
    x: the input value, a positive number given by the caller.
  """
  return x  # x = f(y) + g(z)
'''


def _write_package(root, name, modules=("core", "io"), license_header=True):
  package = os.path.join(root, name)
  os.makedirs(package, exist_ok=True)
  with open(os.path.join(package, "__init__.py"), "w") as f:
    f.write("")
  for module in modules:
    with open(os.path.join(package, f"{module}.py"), "w") as f:
      f.write(_MODULE.format(license=_LICENSE if license_header else "",
                             topic=f"{name} {module}"))


@pytest.fixture
def source_root(tmp_path):
  root = str(tmp_path / "site")
  for name in ("alpha", "beta", "gamma"):
    _write_package(root, name)
  with open(os.path.join(root, "alpha", "tiny.py"), "w") as f:
    f.write('"""One line only."""\n')
  with open(os.path.join(root, "alpha", "broken.py"), "w") as f:
    f.write('def f(:\n  """Never parsed."""\n')
  return root


def test_harvest_reads_docstrings_and_comments_of_each_module(source_root):
  authors = real_text.harvest([source_root])
  names = [a.name for a in authors]
  assert names == sorted(names)
  assert names == ["alpha.core", "alpha.io", "beta.core", "beta.io", "gamma.core", "gamma.io"]
  core = authors[0]
  assert core.group == "alpha"
  text = " ".join(core.paragraphs)
  assert "Tools for alpha core that every user" in text
  assert "The cache keeps the last alpha core result" in text  # a comment block
  assert "Runs the alpha core step" in text
  assert ">>>" not in text  # doctest lines dropped
  assert "x = f(y)" not in text  # code-like comment dropped
  assert "Copyright" not in text  # the licence header is in every module: boilerplate


def test_sentences_are_tokenized_like_stackoverflow(source_root):
  sentences = real_text.harvest([source_root])[0].sentences
  assert "tools for alpha core that every user of the alpha core package needs ." in sentences
  assert all(s == s.lower() and "  " not in s for s in sentences)
  assert all(len(s.split()) >= real_text.MIN_SENTENCE_TOKENS for s in sentences)


def test_packages_filter_and_missing_root(source_root, tmp_path):
  assert {a.group for a in real_text.harvest([source_root], ["beta"])} == {"beta"}
  with pytest.raises(ValueError, match="does not exist"):
    real_text.harvest([str(tmp_path / "nope")])


def test_stackoverflow_format_reads_with_the_task_loader(tmp_path):
  from tasks.stackoverflow import database  # pylint: disable=g-import-not-at-top
  root = str(tmp_path / "site")
  for i in range(40):
    _write_package(root, f"pkg{i:02d}", modules=("a", "b", "c"))
  authors = real_text.harvest([root])
  directory = str(tmp_path / "so")
  real_text.write_stackoverflow(authors, directory)
  counts = database.check_database(directory)
  train, heldout, test = database.load_client_data(directory)
  assert heldout.client_ids and train.client_ids
  assert not set(heldout.client_ids) & set(train.client_ids)  # new users
  assert set(test.client_ids) <= set(train.client_ids)  # later posts of known users
  assert len(train.client_ids) + len(heldout.client_ids) == len(authors)
  splits = real_text.stackoverflow_splits(authors)
  assert counts["train"]["examples"] == sum(map(len, splits["train"].values()))
  example = next(iter(train.create_tf_dataset_for_client(train.client_ids[0])))
  assert example["tokens"].numpy().decode() in splits["train"][train.client_ids[0]]
  assert example["tags"].numpy().decode() == train.client_ids[0].split(".")[0]


def test_reddit_format_reads_with_the_task_loader(source_root, tmp_path):
  from tasks.reddit import data  # pylint: disable=g-import-not-at-top
  authors = real_text.harvest([source_root])
  path = real_text.write_reddit(authors, str(tmp_path / "rd" / "c.jsonl.gz"))
  summary = data.ReadSummary()
  comments = list(data.read_comments([path], summary))
  assert len(comments) == sum(len(a.paragraphs) for a in authors)
  assert {c.author for c in comments} == {real_text.reddit_author(a.name) for a in authors}
  assert summary.malformed == {} or not sum(summary.malformed.values())
  assert {c.subreddit for c in comments} == {"alpha", "beta", "gamma"}
  times = [c.created_utc for c in comments]
  assert times == sorted(times)


def test_same_sources_same_bytes(source_root, tmp_path):
  authors = real_text.harvest([source_root])
  digests = []
  for i in range(2):
    path = real_text.write_reddit(authors, str(tmp_path / f"r{i}.jsonl.gz"))
    with open(path, "rb") as f:
      digests.append(hashlib.sha256(f.read()).hexdigest())
  assert digests[0] == digests[1]


def test_ensure_builds_once_and_the_fingerprint_follows_the_packages(source_root, tmp_path):
  cache = str(tmp_path / "cache")
  directory = real_text.ensure_stackoverflow_corpus(cache, [source_root])
  path = os.path.join(directory, "stackoverflow.sqlite")
  mtime = os.path.getmtime(path)
  assert real_text.ensure_stackoverflow_corpus(cache, [source_root]) == directory
  assert os.path.getmtime(path) == mtime
  other = real_text.ensure_stackoverflow_corpus(cache, [source_root], ["beta"])
  assert other != directory
  reddit = real_text.ensure_reddit_corpus(cache, [source_root])
  assert os.path.dirname(reddit) == directory and reddit.endswith(".jsonl.gz")
  assert os.path.getmtime(path) == mtime  # one harvest wrote both formats


def test_harvest_of_an_installed_package_finds_real_prose():
  # The environment's own files: what --corpus=real_text reads on every machine.
  authors = real_text.harvest(packages=["absl"])
  assert len(authors) >= 5
  sentences = [s for a in authors for s in a.sentences]
  assert len(sentences) >= 200
  words = {w for s in sentences for w in s.split()}
  assert {"the", "flag", "flags", "value"} <= words


def test_script_writes_both_formats(source_root, tmp_path, capsys):
  from scripts import build_real_text_corpus  # pylint: disable=g-import-not-at-top
  out = str(tmp_path / "out")
  code = build_real_text_corpus.main(["--out_dir", out, "--roots", source_root,
                                      "--format", "json"])
  assert code == 0
  report = json.loads(capsys.readouterr().out)
  assert report["authors"] == 6 and report["packages"] == 3
  assert os.path.exists(os.path.join(out, "stackoverflow.sqlite"))
  with gzip.open(os.path.join(out, real_text.REDDIT_FILENAME), "rt") as f:
    assert len(f.read().splitlines()) == report["reddit"]["comments"]


@pytest.mark.parametrize("argv, message", [
    (["--roots", "/nonexistent/dp_fl"], "does not exist"),
    (["--packages", "no_such_package_xyz"], "No module with at least"),
])
def test_script_names_the_bad_flag(argv, message, tmp_path, capsys):
  from scripts import build_real_text_corpus  # pylint: disable=g-import-not-at-top
  code = build_real_text_corpus.main(["--out_dir", str(tmp_path / "o")] + argv)
  assert code == 2
  assert message in capsys.readouterr().err


def test_script_refuses_an_out_dir_that_is_a_file(tmp_path, capsys):
  from scripts import build_real_text_corpus  # pylint: disable=g-import-not-at-top
  target = tmp_path / "file"
  target.write_text("x")
  assert build_real_text_corpus.main(["--out_dir", str(target)]) == 2
  assert "--out_dir" in capsys.readouterr().err


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
