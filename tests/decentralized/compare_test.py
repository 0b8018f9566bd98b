"""//tasks/decentralized:compare and its data: the real on-disk formats, the table, the
figures, resume, and clear errors for bad flags."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from dp_fl import exits
from dp_fl.decentralized import comparison
from tasks.decentralized import cifar10
from tasks.decentralized import compare
from tasks.decentralized import data
from tasks.digits import data as digits_data

QUICK = ["--num_workers", "3", "--iterations", "20", "--eval_every", "10", "--batch_size", "8",
         "--reproducible_noise_seed", "5"]


def test_digits_shards_cover_the_training_set_once():
  shards = data.load("sklearn_digits", 5)
  assert sum(shards.shard_sizes) == 1797 - 359 and max(shards.shard_sizes) - min(
      shards.shard_sizes) <= 1
  assert shards.image_shape == (8, 8, 1) and shards.num_classes == 10
  stacked = np.concatenate([x for x, _ in shards.train])
  assert len(np.unique(stacked, axis=0)) == len(np.unique(
      digits_data.load("sklearn_digits").train_images, axis=0))


def test_mnist_idx_and_cifar10_batches_load_into_shards(tmp_path):
  rng = np.random.default_rng(0)
  mnist = tmp_path / "mnist"
  mnist.mkdir()
  for split, count in (("train", 40), ("test", 10)):
    images_name, labels_name = digits_data.MNIST_FILES[split]
    digits_data.write_idx(str(mnist / images_name),
                          rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8))
    digits_data.write_idx(str(mnist / labels_name),
                          rng.integers(0, 10, size=count, dtype=np.uint8))
  shards = data.load("mnist", 4, str(mnist))
  assert shards.shard_sizes == [10] * 4 and shards.image_shape == (28, 28, 1)
  assert shards.train[0][0].shape == (10, 784) and shards.test_x.shape == (10, 784)

  batches = tmp_path / "cifar" / cifar10.BATCHES_DIR
  batches.mkdir(parents=True)
  for name in (*cifar10.TRAIN_FILES, cifar10.TEST_FILE):
    cifar10.write_batch(str(batches / name),
                        rng.integers(0, 256, size=(6, 32, 32, 3), dtype=np.uint8),
                        rng.integers(0, 10, size=6))
  shards = data.load("cifar10", 3, str(tmp_path / "cifar"), max_train=24)
  assert sum(shards.shard_sizes) == 24 and shards.image_shape == (32, 32, 3)
  assert shards.train[0][0].shape[1] == 3072 and shards.test_y.size == 6


def test_missing_data_dir_names_the_flag():
  with pytest.raises(ValueError, match="--data_dir"):
    data.load("cifar10", 5)
  with pytest.raises(ValueError, match="--dataset='svhn'"):
    data.load("svhn", 5)


def test_the_binary_prints_table_1_writes_figures_and_resumes(tmp_path, capsys):
  out = str(tmp_path / "out")
  assert compare.main([*QUICK, "--out_dir", out]) == exits.COMPLETED
  table = capsys.readouterr().out
  assert "m=3 LEASGD acc." in table and "paper 002, MNIST" in table
  assert "faster early convergence" in table and "less epsilon for equal accuracy" in table
  for name in ("loss_vs_iterations.png", "loss_vs_vectors.png", "comparison.json",
               "comparison.md"):
    assert os.path.getsize(os.path.join(out, name)) > 0
  summary = json.loads(open(os.path.join(out, "comparison.json")).read())
  assert len(summary["rows"]) == 4
  # comparison.md is drawn from comparison.json alone, and says what the binary printed.
  assert open(os.path.join(out, "comparison.md"), encoding="utf-8").read() + "\n" == table
  private = [r for r in summary["rows"] if r["private"]]
  assert all(np.isfinite(r["epsilon"]) and r["epsilon"] > 0 for r in private)
  # Run again: every run is read back (its result.json), the same numbers come out.
  assert compare.main([*QUICK, "--out_dir", out, "--format", "json"]) == exits.COMPLETED
  again = json.loads(capsys.readouterr().out)
  assert again["rows"] == summary["rows"]
  run_dir = os.path.join(out, comparison.run_name("leasgd", 3, True))
  assert os.path.exists(os.path.join(run_dir, "metrics", "eval.csv"))


def test_the_cnn_runs_through_the_binary(tmp_path, capsys):
  assert compare.main([*QUICK, "--model", "cnn", "--algorithms", "leasgd", "--settings",
                       "private", "--out_dir", "", "--format", "json"]) == exits.COMPLETED
  summary = json.loads(capsys.readouterr().out)
  assert summary["model"]["architecture"] == "cnn" and len(summary["rows"]) == 1


@pytest.mark.parametrize("flags,message", [
    (["--num_workers", "5,x"], "--num_workers='5,x'"),
    (["--num_workers", "1"], "--num_workers='1'"),
    (["--algorithms", "leasgd,fedavg"], "unknown fedavg"),
    (["--settings", "secret"], "--settings='secret'"),
    (["--elastic", "50"], "ηρ"),
    (["--noise_multiplier", "0"], "--noise_multiplier"),
    (["--batch_size", "500"], "--batch_size=500"),
    (["--model", "resnet"], "--model='resnet'"),
    (["--dataset", "mnist"], "--data_dir"),
    (["--iterations", "0"], "--iterations"),
])
def test_bad_flags_exit_2_with_the_flag_named(flags, message, capsys):
  assert compare.main([*QUICK, "--out_dir", "", *flags]) == exits.BAD_INPUT
  err = capsys.readouterr().err
  assert message in err and "Traceback" not in err



def test_the_early_window_uses_the_first_evaluation_when_none_falls_inside():
  def result(losses):
    history = [{"iteration": i * 10, "train_loss": v, "vectors_per_worker": 2.0 * i}
               for i, v in enumerate(losses)]
    return {"iterations_done": 20, "history": history,
            "final": {"train_loss": losses[-1]}}
  results = {comparison.run_name("leasgd", 3, False): result([2.0, 1.0, 0.5]),
             comparison.run_name("d_psgd", 3, False): result([2.0, 1.5, 0.6])}
  found = comparison.claims(results, 3)["faster_early_convergence"]
  assert found["leasgd_mean_loss"] == 1.0 and found["d_psgd_mean_loss"] == 1.5
  assert found["holds"]


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
