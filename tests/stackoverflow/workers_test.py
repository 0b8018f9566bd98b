"""The StackOverflow quick job across two TFF workers on loopback (`--workers`) gives the local
run's state, metrics, ledger and ε (issue #24's must-show).

The quick preset's model (2000-word vocabulary, LSTM 128) and cohorts (50 clients per round) on
real text (a small real-text corpus: the docstrings of three installed packages), BLT-DP-FTRL and
DP-FedAvg, a few rounds. The local reference is `--runtime=xla`: the same MapReduceForm
computation run in this process; with `--workers` only the clients' `work` runs on the workers,
so the results agree to float tolerance (the workers' TF kernels sum in their own order), the
noise is the same draw (a research seed makes both runs draw it alike) and the privacy ledger
is identical.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from dp_fl import exits
from dp_fl import writers
from dp_fl.training import checkpoints
from tests.runtime import loopback_workers
from tests.stackoverflow import tiny
from tasks import real_text
from tasks.stackoverflow import compare
from tasks.stackoverflow import synthetic
from tasks.stackoverflow import train

_PACKAGES = ("numpy", "absl", "keras")  # ~640 modules of real prose (as presets_test)
ROUNDS = 3


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("real_text"))
  real_text.write_stackoverflow(real_text.harvest(packages=_PACKAGES), directory)
  return directory


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
  """Two workers as scripts/worker starts them; none outlives the module."""
  with loopback_workers.pool(str(tmp_path_factory.mktemp("workers"))) as pool:
    yield loopback_workers.addresses(pool.start(2))


def _train(corpus_dir, root, mechanism, *flags):
  participation = (["--participation=poisson", "--population_sampling_rate=0.1"]
                   if mechanism == "dpfedavg" else ["--participation=uniform"])
  code = train.main([f"--data_dir={corpus_dir}", f"--root_dir={root}", f"--rounds={ROUNDS}",
                     f"--mechanism={mechanism}", "--noise_multiplier=0.96",
                     "--reproducible_noise_seed=11", "--eval_every=3", "--eval_clients=20",
                     "--checkpoint_every=1", "--cooldown_rounds=0", "--format=json",
                     *participation, *flags])
  assert code == exits.COMPLETED
  with open(os.path.join(root, "summary.json"), encoding="utf-8") as f:
    summary = json.load(f)
  state = checkpoints.CheckpointManager(os.path.join(root, "checkpoints")).restore_latest()
  metrics = writers.read_csv(os.path.join(root, "metrics", "train.csv"))
  return summary, state, metrics


@pytest.mark.parametrize("mechanism", ["blt", "dpfedavg"])
def test_the_quick_job_across_two_workers_is_the_local_run(corpus_dir, two_workers, tmp_path,
                                                             mechanism):
  local = _train(corpus_dir, tmp_path / "local", mechanism, "--runtime=xla")
  remote = _train(corpus_dir, tmp_path / "remote", mechanism, f"--workers={two_workers}")
  (local_summary, local_state, local_metrics) = local
  (remote_summary, remote_state, remote_metrics) = remote
  assert remote_summary["rounds_completed"] == local_summary["rounds_completed"] == ROUNDS
  assert json.loads((tmp_path / "remote" / "config.json").read_text())["runtime"] == "workers"
  # State: model, optimizer and the aggregator's noise state (BLT's buffers).
  assert len(local_state.arrays) == len(remote_state.arrays)
  for a, b in zip(local_state.arrays, remote_state.arrays):
    np.testing.assert_allclose(np.asarray(b, np.float64), np.asarray(a, np.float64),
                               rtol=1e-4, atol=1e-5)
  # Privacy: the same ledger (who took part in which round: the scheduler's checkpointed state,
  # participation record included, byte for byte), the same report and the same ε.
  assert remote_state.blobs["scheduler"] == local_state.blobs["scheduler"]
  assert remote_summary["epsilon"] == local_summary["epsilon"]
  assert remote_summary["realized_participation"] == local_summary["realized_participation"]
  assert ((tmp_path / "remote" / "privacy_report.json").read_text()
          == (tmp_path / "local" / "privacy_report.json").read_text())
  # Metrics, round by round.
  assert len(remote_metrics) == len(local_metrics) == ROUNDS
  for local_row, remote_row in zip(local_metrics, remote_metrics):
    assert remote_row["round"] == local_row["round"]
    assert remote_row["clients"] == local_row["clients"]
    assert float(remote_row["client_work/train/loss"]) == pytest.approx(
        float(local_row["client_work/train/loss"]), rel=1e-5)
  for key, value in local_summary["eval"].items():
    assert remote_summary["eval"][key] == pytest.approx(value, rel=1e-4, abs=1e-5)


def test_compare_across_two_workers_gives_the_local_table(two_workers, tmp_path):
  synthetic_dir = str(tmp_path / "data")
  synthetic.generate(tiny.CORPUS, synthetic_dir)

  def table(name, *flags):
    code = compare.main(["--mechanisms=blt", "--rounds=2", "--calibrate_epsilon=4",
                         f"--data_dir={synthetic_dir}", f"--out_dir={tmp_path / name}",
                         "--seeds=1", "--lr_factors=1", *tiny.FLAGS,
                         "--reproducible_noise_seed=5", *flags])
    assert code == exits.COMPLETED
    return json.loads((tmp_path / name / "comparison.json").read_text())

  local = table("local", "--runtime=xla")
  remote = table("remote", f"--workers={two_workers}")
  configs = sorted((tmp_path / "remote").glob("**/config.json"))
  assert configs and all(json.loads(p.read_text())["runtime"] == "workers" for p in configs)
  assert [r["mechanism"] for r in remote["rows"]] == [r["mechanism"] for r in local["rows"]]
  for local_row, remote_row in zip(local["rows"], remote["rows"]):
    assert remote_row["epsilon"] == local_row["epsilon"]  # The same schedule and noise.
    for key, value in local_row.items():
      if isinstance(value, float) and key not in ("epsilon", "seconds"):
        assert remote_row[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
