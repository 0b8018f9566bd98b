"""The Reddit binary end to end on a tiny synthetic corpus (flags → run, summary, privacy,
unit-norm tied embeddings) and paper 001's headline privacy figure for its preset."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tasks.reddit import synthetic
from tasks.reddit import train

_TINY = synthetic.SyntheticConfig(num_authors=30, mean_comments_per_author=10.0,
                                  num_words=300, num_subreddits=3)
_VOCAB, _EMBEDDING = 200, 8
_TINY_FLAGS = [f"--vocab_size={_VOCAB}", f"--embedding_size={_EMBEDDING}", "--lstm_size=8",
               "--tokens_per_user=60", "--test_fraction=0.2", "--eval_users=5",
               "--clients_per_round=4", "--eval_every=3", "--noise_multiplier=1.0",
               "--clip_norm=1.0", "--delta=1e-5", "--cooldown_rounds=0"]


@pytest.fixture(name="corpus", scope="module")
def _corpus(tmp_path_factory):
  return synthetic.generate(_TINY, str(tmp_path_factory.mktemp("reddit") / "c.jsonl.gz"))


def test_train_dpfedavg_reports_privacy_and_keeps_unit_norm_embeddings(corpus, tmp_path,
                                                                       capsys):
  root = tmp_path / "run"
  code = train.main([f"--data_files={corpus}", f"--root_dir={root}", "--rounds=3",
                     f"--prepared_cache_dir={tmp_path / 'prepared'}",
                     "--format=json", *_TINY_FLAGS])
  out = capsys.readouterr().out
  assert code == 0, out
  summary = json.loads(out[out.index("{\n"):])
  assert summary["task"] == "reddit"
  assert summary["rounds_completed"] == 3 and summary["stopped"] == "completed"
  assert "accuracy_top1" in summary["eval"]
  assert 0 < summary["baseline"]["unigram_accuracy_top1"] < 1
  report = summary["privacy_report"]
  assert summary["mechanism"] == "dpfedavg" and report["mechanism"] == "dpfedavg"
  assert report["epsilon_moments_accountant"] >= report["epsilon_rdp"] >= report["epsilon"]
  assert 0 < summary["epsilon"] < float("inf")
  for name in ("config.json", "privacy_report.md", "summary.json", "metrics/eval.csv"):
    assert os.path.exists(root / name), name
  from dp_fl.training import checkpoints  # pylint: disable=g-import-not-at-top
  restored = checkpoints.CheckpointManager(str(root / "checkpoints")).restore_latest()
  assert restored is not None and restored.round == 3
  shape = (_VOCAB + 4, _EMBEDDING)  # words + UNK/BOS/EOS/pad.
  embeddings = [a for a in restored.arrays if np.shape(a) == shape]
  assert embeddings, [np.shape(a) for a in restored.arrays]
  np.testing.assert_allclose(np.linalg.norm(embeddings[0], axis=1), 1.0, atol=1e-5)


def test_train_across_two_workers_is_the_local_run(corpus, tmp_path):
  """`--workers` in the Reddit binary: the clients on two loopback TFF workers, the DP-FedAvg
  aggregation and the unit-norm projection here; the in-process run's model and ε."""
  from dp_fl.training import checkpoints  # pylint: disable=g-import-not-at-top
  from tests.runtime import loopback_workers  # pylint: disable=g-import-not-at-top

  def run(name, *flags):
    root = tmp_path / name
    code = train.main([f"--data_files={corpus}", f"--root_dir={root}", "--rounds=2",
                       f"--prepared_cache_dir={tmp_path / 'prepared'}", "--format=json",
                       "--reproducible_noise_seed=3", *_TINY_FLAGS, *flags])
    assert code == 0
    summary = json.loads((root / "summary.json").read_text())
    return summary, checkpoints.CheckpointManager(str(root / "checkpoints")).restore_latest()

  with loopback_workers.pool(str(tmp_path / "workers")) as pool:
    remote_summary, remote = run("remote", "--workers=" + loopback_workers.addresses(
        pool.start(2)))
  local_summary, local = run("local", "--runtime=xla")
  assert remote_summary["epsilon"] == local_summary["epsilon"]
  assert remote.blobs["scheduler"] == local.blobs["scheduler"]  # The same ledger.
  for a, b in zip(local.arrays, remote.arrays):
    np.testing.assert_allclose(np.asarray(b, np.float64), np.asarray(a, np.float64),
                               rtol=1e-4, atol=1e-5)


def test_train_bad_input_is_a_clear_error(tmp_path, capsys):
  missing = tmp_path / "no_such_comments.jsonl"
  code = train.main([f"--data_files={missing}", f"--root_dir={tmp_path / 'run'}",
                     "--rounds=2", *_TINY_FLAGS])
  err = capsys.readouterr().err
  assert code == 2
  assert str(missing) in err and err.startswith("error: ") and "Traceback" not in err


@pytest.mark.parametrize("flag, value", [("lstm_size", 10 ** 6), ("unroll", 10 ** 9),
                                         ("eval_batch_size", 10 ** 9)])
def test_sizes_that_cannot_fit_are_refused_naming_the_flag(corpus, tmp_path, capsys, flag,
                                                           value):
  code = train.main([f"--data_files={corpus}", f"--root_dir={tmp_path / 'run'}", "--rounds=2",
                     *_TINY_FLAGS, f"--{flag}={value}"])
  err = capsys.readouterr().err
  assert code == 2, err
  assert f"--{flag}={value}" in err.splitlines()[0] and "--memory_budget_gb" in err


def test_paper001_preset_reproduces_the_papers_epsilon():
  from dp_fl.accounting import report as report_lib  # pylint: disable=g-import-not-at-top
  preset = train.PRESETS["paper001"].training
  assert (preset["mechanism"], preset["participation"]) == ("dpfedavg", "poisson")
  report = report_lib.dpfedavg_report(763430, preset["clients_per_round"],
                                      preset["noise_multiplier"], preset["rounds"],
                                      preset["delta"])
  assert round(report.epsilon_moments_accountant, 3) == 4.634
  assert report.epsilon <= report.epsilon_rdp < report.epsilon_moments_accountant


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
