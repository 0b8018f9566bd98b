"""The StackOverflow binaries end to end on tiny settings: train (flags → run directory,
summary, privacy) and compare (table at one ε, marked synthetic)."""

from __future__ import annotations

import json
import os

import pytest

from tasks.stackoverflow import compare
from tasks.stackoverflow import synthetic
from tasks.stackoverflow import train
from tests.stackoverflow import tiny

_TINY = tiny.CORPUS
_TINY_FLAGS = tiny.FLAGS


@pytest.fixture(name="corpus_dir", scope="module")
def _corpus_dir(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("so"))
  synthetic.generate(_TINY, directory)
  return directory


def test_validation_data_is_disjoint_from_the_evaluation_sample(corpus_dir):
  from tasks.stackoverflow import database  # pylint: disable=g-import-not-at-top
  from tasks.stackoverflow import preprocessing  # pylint: disable=g-import-not-at-top
  from tasks.stackoverflow import task as so_task  # pylint: disable=g-import-not-at-top
  task = so_task.make_task(so_task.StackOverflowSettings(
      data_dir=corpus_dir, vocab_size=300, embedding_size=8, lstm_size=8, eval_clients=5))
  _, heldout, _ = database.load_client_data(corpus_dir)
  evaluation = preprocessing.eval_client_ids(heldout.client_ids, 5, 0)
  validation = preprocessing.eval_client_ids(heldout.client_ids, 5, 1, exclude=evaluation)
  assert len(validation) == 5 and not set(validation) & set(evaluation)
  tokens = lambda ds: sum(int((y != 0).sum()) for _, y in ds.as_numpy_iterator())
  assert tokens(task.validation_dataset_fn()) != tokens(task.eval_dataset_fn())
  assert set(task.validation_baseline_metrics) == set(task.baseline_metrics)
  assert task.headline_metric == "accuracy_without_out_of_vocab_or_end_of_sentence"


def test_train_writes_the_run_directory_and_reports_privacy(corpus_dir, tmp_path, capsys):
  root = tmp_path / "run"
  code = train.main([f"--data_dir={corpus_dir}", f"--root_dir={root}", "--rounds=4",
                     "--format=json", *_TINY_FLAGS])
  out = capsys.readouterr().out
  assert code == 0, out
  summary = json.loads(out[out.index("{\n"):])
  assert summary["rounds_completed"] == 4 and summary["stopped"] == "completed"
  assert "accuracy" in summary["eval"] and "unigram_accuracy" in summary["baseline"]
  assert summary["mechanism"] == "blt" and 0 < summary["epsilon"] < float("inf")
  assert summary["privacy_report"]["participation"]["source"] == "realized"
  for name in ("config.json", "mechanism.json", "privacy_report.md", "summary.json",
               "metrics/train.csv", "metrics/eval.csv"):
    assert os.path.exists(root / name), name


def test_calibrate_epsilon_sets_the_noise_multiplier(corpus_dir, tmp_path, capsys):
  code = train.main([f"--data_dir={corpus_dir}", f"--root_dir={tmp_path}", "--rounds=2",
                     "--calibrate_epsilon=5", "--delta=1e-5", "--mechanism=dpsgd",
                     *_TINY_FLAGS])
  captured = capsys.readouterr()
  out = captured.out
  assert code == 0, captured.err
  assert "gives ε = 5 at δ = 1e-05 for the planned schedule" in out
  with open(tmp_path / "config.json") as f:
    sigma = json.load(f)["noise_multiplier"]
  from dp_fl.accounting import zcdp  # pylint: disable=g-import-not-at-top
  assert sigma == pytest.approx(zcdp.noise_multiplier_for_epsilon(1.0, 5.0, 1e-5))


def test_train_bad_input_is_a_clear_error(tmp_path, capsys):
  code = train.main([f"--data_dir={tmp_path}", f"--root_dir={tmp_path / 'run'}",
                     "--rounds=2", *_TINY_FLAGS])
  err = capsys.readouterr().err
  assert code == 2
  assert "stackoverflow.sqlite" in err and "Traceback" not in err


@pytest.mark.parametrize("flag, value, part", [
    ("lstm_size", 10 ** 6, "parameter model"),
    ("sequence_length", 10 ** 8, "tokenized into memory"),
    ("batch_size", 10 ** 7, "activations"),
])
def test_sizes_that_cannot_fit_are_refused_naming_the_flag(corpus_dir, tmp_path, capsys, flag,
                                                           value, part):
  # Found by a hostile-input pass (#43): these ended as exit-1 MemoryError /
  # ResourceExhaustedError after minutes of loading; now refused before anything is built.
  root = tmp_path / "run"
  code = train.main([f"--data_dir={corpus_dir}", f"--root_dir={root}", "--rounds=2",
                     *_TINY_FLAGS, f"--{flag}={value}"])
  err = capsys.readouterr().err
  assert code == 2, err
  assert err.startswith(f"error: --{flag}={value}") and part in err
  assert "--memory_budget_gb" in err and "Traceback" not in err
  assert not os.listdir(root) if os.path.exists(root) else True


def test_a_job_longer_than_the_time_budget_is_refused_at_once(corpus_dir, tmp_path, capsys):
  # Found by a hostile-input pass (#43): `--rounds 1000000000` was accepted and optimized
  # for hours; the whole job is now estimated before calibration or anything else.
  root = tmp_path / "run"
  code = train.main([f"--data_dir={corpus_dir}", f"--root_dir={root}", *_TINY_FLAGS,
                     "--rounds=100000000", "--eval_every=100000000",
                     "--checkpoint_every=100000000", "--time_budget_hours=1"])
  err = capsys.readouterr().err
  assert code == 2, err
  assert err.startswith("error: --rounds=100000000") and "--time_budget_hours" in err
  assert not os.path.exists(root) or not os.listdir(root)


def test_compare_writes_a_table_marked_by_its_data(corpus_dir, tmp_path, capsys):
  code = compare.main(["--mechanisms=none,dpsgd", "--rounds=2", "--calibrate_epsilon=4",
                       f"--data_dir={corpus_dir}", f"--out_dir={tmp_path}", "--seeds=1",
                       "--lr_factors=1", *_TINY_FLAGS])
  assert code == 0, capsys.readouterr()
  with open(tmp_path / "comparison.json") as f:
    table = json.load(f)
  assert [r["mechanism"] for r in table["rows"]] == ["none", "dpsgd"]
  assert table["rows"][0]["epsilon"] is None
  assert table["rows"][1]["epsilon"] <= 4.0 + 1e-9
  assert str(corpus_dir) in table["description"]  # The data the numbers are on.
  assert table["headline_metric"] == "accuracy_without_out_of_vocab_or_end_of_sentence"
  markdown = (tmp_path / "comparison.md").read_text()
  assert "| dpsgd |" in markdown and str(corpus_dir) in markdown
  assert (tmp_path / "comparison.png").exists()


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
