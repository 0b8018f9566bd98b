"""A paper-size StackOverflow database: sizes, chunked generation, the index check and fix."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat

import numpy as np
import pytest

from tasks import sql_client_data
from tasks.stackoverflow import database
from tasks.stackoverflow import paper_database
from tasks.stackoverflow import synthetic


@pytest.mark.parametrize("mean, sigma", [(396.6, 1.5), (81.3, 1.5), (400.0, 0.5),
                                         (2.0, 2.5)])
def test_the_median_gives_the_real_mean_after_the_cap(mean, sigma):
  median = paper_database.median_for_mean(mean, sigma)
  assert paper_database.capped_lognormal_mean(
      median, sigma, paper_database.MAX_SENTENCES) == pytest.approx(mean, rel=1e-9)
  # Against a brute-force sample of the capped log-normal.
  draws = np.minimum(median * np.exp(sigma * np.random.default_rng(0).standard_normal(
      2_000_000)), paper_database.MAX_SENTENCES)
  assert draws.mean() == pytest.approx(mean, rel=0.02)


def test_full_scale_has_tffs_split_sizes():
  config = paper_database.config_for_scale(1.0)
  assert (config.num_train_clients, config.num_heldout_clients, config.num_test_clients) == (
      342_477, 38_758, 204_088)
  estimate = paper_database.estimate(config)
  assert estimate.sentences["train"] == pytest.approx(135_818_730, rel=1e-6)
  assert estimate.sentences["test"] == pytest.approx(16_586_035, rel=1e-6)
  assert 40e9 < estimate.bytes < 70e9  # ≈ 50 GB at the measured bytes per sentence.


@pytest.mark.parametrize("scale, sigma, match", [
    (0.0, 1.5, "`scale`"), (1.5, 1.5, "`scale`"), ("0.1", 1.5, "`scale`"),
    (1e-6, 1.5, "`scale`"), (0.1, -1.0, "`sigma`"), (0.1, float("nan"), "`sigma`")])
def test_bad_scales_are_refused(scale, sigma, match):
  with pytest.raises(ValueError, match=match):
    paper_database.config_for_scale(scale, sigma)


def test_chunked_generation_is_whole_deterministic_and_sized(tmp_path, monkeypatch):
  monkeypatch.setattr(synthetic, "CHUNK_CLIENTS", 40)  # Several chunks per split.
  config = paper_database.config_for_scale(0.0005, sigma=0.5)
  seen = []
  path = synthetic.generate(config, str(tmp_path / "a"),
                            progress=lambda split, done, total: seen.append(
                                (split, done, total)))
  assert seen[-1] == ("test", config.num_test_clients, config.num_test_clients)
  assert [s for s in seen if s[0] == "train"][-1][1] == config.num_train_clients
  assert len(seen) > 3
  counts = database.check_database(str(tmp_path / "a"))
  assert counts["train"]["clients"] == config.num_train_clients == 171
  with contextlib.closing(sqlite3.connect(path)) as connection:
    sizes = {split: np.array([n for (n,) in connection.execute(
        "SELECT num_examples FROM client_metadata WHERE split_name = ?", (split,))])
             for split in database.SPLITS}
  # Chunks draw from their own streams: the second does not repeat the first's sizes.
  assert not np.array_equal(sizes["train"][:40], sizes["train"][40:80])
  # The real means, within the sample's error (sigma 0.5: ±4 standard errors).
  for split, (clients, sentences) in (("train", paper_database.TRAIN),
                                      ("test", paper_database.TEST)):
    mean = sentences / clients
    assert abs(sizes[split].mean() - mean) < 4 * 0.53 * mean / np.sqrt(len(sizes[split]))
  synthetic.generate(config, str(tmp_path / "b"))
  with open(path, "rb") as a, open(str(tmp_path / "b" / "stackoverflow.sqlite"), "rb") as b:
    assert a.read() == b.read()


def test_a_file_without_the_client_index_is_refused_and_the_script_adds_it(tmp_path, capsys):
  from scripts import index_database  # pylint: disable=g-import-not-at-top
  config = paper_database.config_for_scale(0.0002, sigma=0.5)
  bare = str(tmp_path / "bare")
  synthetic.generate(config, bare, index=False)
  with pytest.raises(ValueError) as refused:
    database.check_database(bare)
  message = str(refused.value)
  assert "no index on examples(client_id" in message
  assert f"scripts.index_database --data_dir {bare}" in message
  with contextlib.closing(sqlite3.connect(os.path.join(bare, "stackoverflow.sqlite"))) as c:
    plan = " ".join(map(str, c.execute(
        "EXPLAIN QUERY PLAN SELECT * FROM examples WHERE client_id = '00000001'")))
  assert "SCAN" in plan  # What the check prevents: a scan of the table per client.

  # Read-only in place: refused, naming --out_dir; into a copy: indexed, original untouched.
  source = os.path.join(bare, "stackoverflow.sqlite")
  os.chmod(source, stat.S_IRUSR)
  try:
    if not os.access(source, os.W_OK):  # (root can write anyway)
      assert index_database.main(["--data_dir", bare]) == 2
      assert "--out_dir" in capsys.readouterr().err
    copy = str(tmp_path / "copy")
    assert index_database.main(["--data_dir", bare, "--out_dir", copy,
                                "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["index_added"] and "synthetic_config.json" in report["copied"]
    assert database.check_database(copy)["train"]["clients"] == config.num_train_clients
    with pytest.raises(ValueError, match="no index"):
      database.check_database(bare)
  finally:
    os.chmod(source, stat.S_IRUSR | stat.S_IWUSR)
  # In place, then a second run has nothing to do.
  assert index_database.main(["--data_dir", bare, "--format", "json"]) == 0
  assert json.loads(capsys.readouterr().out)["index_added"]
  database.check_database(bare)
  assert index_database.main(["--data_dir", bare, "--format", "json"]) == 0
  again = json.loads(capsys.readouterr().out)
  assert not again["index_added"]
  assert again["existing_index"] == sql_client_data.INDEX_NAME
  assert index_database.main(["--data_dir", bare, "--out_dir", bare]) == 2
  assert "--out_dir" in capsys.readouterr().err


def test_the_script_writes_reports_and_refuses_what_cannot_fit(tmp_path, capsys,
                                                               monkeypatch):
  from scripts import make_paper_database  # pylint: disable=g-import-not-at-top
  out = str(tmp_path / "so")
  assert make_paper_database.main(["--scale", "0.0002", "--sigma", "0.5", "--out_dir", out,
                                   "--format", "json"]) == 0
  report = json.loads(capsys.readouterr().out)
  assert report["clients"]["train"] == 68 and report["index"]
  assert report["full_scale"]["sentences"] > 1.6e8
  assert report["bytes"] == os.path.getsize(os.path.join(out, "stackoverflow.sqlite"))
  database.check_database(out)
  for argv, flag in ((["--scale", "2"], "--scale"), (["--scale", "0"], "--scale"),
                     (["--scale", "0.01", "--sigma", "9"], "--sigma"),
                     (["--scale", "0.01", "--seed", "-1"], "--seed")):
    assert make_paper_database.main(argv + ["--out_dir", out]) == 2
    assert flag in capsys.readouterr().err
  target = tmp_path / "file"
  target.write_text("x")
  assert make_paper_database.main(["--scale", "0.001", "--out_dir", str(target)]) == 2
  assert "--out_dir" in capsys.readouterr().err

  class Tiny:  # pylint: disable=too-few-public-methods
    free = 10 << 20

  monkeypatch.setattr(make_paper_database.shutil, "disk_usage", lambda _: Tiny)
  assert make_paper_database.main(["--scale", "1.0", "--out_dir", str(tmp_path / "big")]) == 2
  err = capsys.readouterr().err
  assert "--out_dir" in err and "free" in err and "--scale" in err
  assert not os.path.exists(tmp_path / "big")  # Refused before anything was written.


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
