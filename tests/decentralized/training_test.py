"""One decentralized run (paper 002): schedule, communication, privacy, checkpoint/resume."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest

from dp_fl.decentralized import training


def _shards(m, n=240, seed=0):
  rng = np.random.default_rng(seed)
  centers = rng.normal(size=(4, 16))
  y = rng.integers(0, 4, size=n + 40)
  x = (centers[y] + 0.5 * rng.normal(size=(n + 40, 16))).astype(np.float32)
  return training.make_shards(x[:n], y[:n], x[n:], y[n:], (4, 4, 1), 4, m, "synthetic")


BASE = training.Settings(algorithm=training.LEASGD, num_workers=5, iterations=40,
                         batch_size=8, learning_rate=0.3, noise_multiplier=1.0,
                         loss_noise_multiplier=2.0, recategorization_interval=5, elastic=1.0,
                         eval_every=10, checkpoint_every=10)


def _weights(run_dir):
  with np.load(os.path.join(run_dir, training.CHECKPOINT)) as saved:
    return saved["weights"].copy(), saved["key"].copy()


def test_interrupted_and_resumed_equals_uninterrupted_bitwise(tmp_path):
  shards = _shards(5)
  straight = training.train(BASE, shards, str(tmp_path / "a"), reproducible_seed=7)
  training.train(BASE, shards, str(tmp_path / "b"), reproducible_seed=7, stop_after=20)
  assert _weights(str(tmp_path / "b"))[0].shape == _weights(str(tmp_path / "a"))[0].shape
  resumed = training.train(BASE, shards, str(tmp_path / "b"), reproducible_seed=7)
  assert resumed["resumed_from"] == 20
  np.testing.assert_array_equal(_weights(str(tmp_path / "a"))[0],
                                _weights(str(tmp_path / "b"))[0])
  assert resumed["history"] == straight["history"]
  rows = open(tmp_path / "b" / "metrics" / "eval.csv").read().splitlines()
  assert len(rows) == 1 + 5  # header, iterations 0, 10, 20, 30, 40: each once


def test_the_secret_key_lives_in_the_checkpoint_only(tmp_path):
  """Without a seed the key is OS entropy: two fresh runs differ, a resumed run continues with
  the checkpoint's key (two copies of one interrupted run finish identically)."""
  shards = _shards(5)
  training.train(BASE, shards, str(tmp_path / "x"), stop_after=20)
  training.train(BASE, shards, str(tmp_path / "y"), stop_after=20)
  assert not np.array_equal(_weights(str(tmp_path / "x"))[1], _weights(str(tmp_path / "y"))[1])
  shutil.copytree(tmp_path / "x", tmp_path / "x2")
  first = training.train(BASE, shards, str(tmp_path / "x"))
  second = training.train(BASE, shards, str(tmp_path / "x2"))
  np.testing.assert_array_equal(_weights(str(tmp_path / "x"))[0],
                                _weights(str(tmp_path / "x2"))[0])
  assert first["noise_key"].startswith("OS entropy")
  saved = json.loads(open(tmp_path / "x" / training.RESULT).read())
  assert "key" not in json.dumps(saved["settings"])
  assert second["history"] == first["history"]


def test_communication_counts_follow_the_schedule():
  shards = _shards(5)
  ring = training.train(dataclasses.replace(BASE, algorithm=training.D_PSGD, iterations=10),
                        shards, reproducible_seed=1)
  # Ring: every worker sends its model to its two neighbours every iteration.
  assert ring["communication"]["vectors_per_worker_per_iteration"] == 2.0
  assert ring["communication"]["scalars"] == 0
  lea = training.train(dataclasses.replace(BASE, iterations=20, communication_interval=2),
                       shards, reproducible_seed=1)
  # m = 5: 3 leaders, 2 followers -> 2 pairs, 4 vectors every τ = 2 iterations.
  assert lea["communication"]["vectors"] == 10 * 4
  # kτ = 10: two recategorizations, each 2 (m − 1) scalars.
  assert lea["communication"]["scalars"] == 2 * 2 * 4
  d = lea["model"]["parameters"]
  assert lea["communication"]["bytes_per_worker"] == pytest.approx((40 * d + 16) * 4 / 5)


def test_privacy_charges_every_iteration_and_every_loss_report():
  shards = _shards(5)
  lea = training.train(BASE, shards, reproducible_seed=1)
  dps = training.train(dataclasses.replace(BASE, algorithm=training.D_PSGD), shards,
                       reproducible_seed=1)
  assert {w["loss_releases"] for w in lea["privacy"]["workers"]} == {40 // 5}
  assert {w["loss_releases"] for w in dps["privacy"]["workers"]} == {0}
  assert {w["steps"] for w in lea["privacy"]["workers"]} == {40}
  # Same σ, same iterations: LEASGD pays more, for its loss reports.
  assert lea["privacy"]["max_epsilon"] > dps["privacy"]["max_epsilon"]
  assert lea["final"]["epsilon"] == lea["privacy"]["max_epsilon"]
  epsilons = [row["epsilon"] for row in lea["history"]]
  assert epsilons == sorted(epsilons) and epsilons[0] == 0.0
  plain = training.train(dataclasses.replace(BASE, private=False), shards, reproducible_seed=1)
  assert plain["privacy"] is None and plain["final"]["epsilon"] == float("inf")


def test_the_unnoised_training_loss_is_published_as_not_covered(tmp_path):
  # train_loss is measured on the workers' own shards without noise: a private run's result
  # and the comparison's table must say that ε does not cover it.
  from dp_fl.decentralized import comparison  # pylint: disable=g-import-not-at-top
  quick = dataclasses.replace(BASE, iterations=2, eval_every=2, checkpoint_every=2)
  result = training.train(quick, _shards(5), str(tmp_path), reproducible_seed=1,
                          jit_compile=False)
  assert "train_loss" in result["final"]
  (loss_entry,) = [e for e in result["privacy"]["not_covered"] if e.startswith("train_loss")]
  assert "without noise" in loss_entry and "NOT covered" in loss_entry
  with open(os.path.join(str(tmp_path), training.RESULT), encoding="utf-8") as f:
    assert json.load(f)["privacy"]["not_covered"] == result["privacy"]["not_covered"]
  summary = comparison.summarize({"run": result}, [5], "digits")
  assert summary["not_covered"] == result["privacy"]["not_covered"]
  assert "Not covered by ε: the training losses" in comparison.markdown(summary)


def test_non_private_training_learns():
  shards = _shards(5)
  result = training.train(dataclasses.replace(BASE, private=False, iterations=60), shards,
                          reproducible_seed=3)
  assert result["history"][-1]["train_loss"] < 0.5 * result["history"][0]["train_loss"]
  assert result["final"]["test_accuracy"] > 0.8


def test_a_finished_run_is_read_back_not_rerun(tmp_path):
  shards = _shards(5)
  first = training.train(BASE, shards, str(tmp_path), reproducible_seed=2)
  again = training.train(BASE, shards, str(tmp_path), reproducible_seed=2)
  assert again == first


def test_bad_settings_and_mismatched_resumes_fail_clearly(tmp_path):
  shards = _shards(5)
  with pytest.raises(ValueError, match="ηρ"):
    training.train(dataclasses.replace(BASE, elastic=5.0), shards)
  with pytest.raises(ValueError, match="--batch_size=60"):
    training.train(dataclasses.replace(BASE, batch_size=60), shards)
  with pytest.raises(ValueError, match="--algorithm='sgd'"):
    training.train(dataclasses.replace(BASE, algorithm="sgd"), shards)
  with pytest.raises(ValueError, match="--graph"):
    training.train(dataclasses.replace(BASE, graph="tree"), shards)
  with pytest.raises(ValueError, match="shards for --num_workers"):
    training.train(dataclasses.replace(BASE, num_workers=4), shards)
  training.train(BASE, shards, str(tmp_path), stop_after=10)
  with pytest.raises(ValueError, match="learning_rate differ"):
    training.train(dataclasses.replace(BASE, learning_rate=0.1), shards, str(tmp_path))
  (tmp_path / "broken").mkdir()
  (tmp_path / "broken" / training.CHECKPOINT).write_bytes(b"not a checkpoint")
  with pytest.raises(ValueError, match="not a readable decentralized checkpoint"):
    training.train(BASE, shards, str(tmp_path / "broken"))


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
