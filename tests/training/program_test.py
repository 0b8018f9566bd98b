"""The training program end to end on the toy task: resume, signals, outputs, privacy, errors."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dp_fl import writers
from dp_fl.execution import runtime
from dp_fl.training import checkpoints as checkpoints_lib
from dp_fl.training import program
from tests.training import toy_program
from tests.training import toy_task

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _start(root_dir, rounds, mechanism, *extra):
  env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.Popen(
      [sys.executable, "-m", "tests.training.toy_program", str(root_dir), str(rounds),
       mechanism, *extra], cwd=_ROOT, env=env, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)


def _rows(root_dir) -> int:
  path = os.path.join(root_dir, "metrics", "train.csv")
  if not os.path.exists(path):
    return 0
  return len(writers.read_csv(path))


def _wait_for_rows(proc, root_dir, rows, timeout=240.0):
  deadline = time.monotonic() + timeout
  while _rows(root_dir) < rows:
    if proc.poll() is not None:
      raise AssertionError(f"the program ended early:\n{proc.stderr.read()[-3000:]}")
    if time.monotonic() > deadline:
      proc.kill()
      raise AssertionError("the program made no progress")
    time.sleep(0.05)


def _final_arrays(root_dir):
  restored = checkpoints_lib.CheckpointManager(os.path.join(root_dir, "checkpoints")
                                               ).restore_latest()
  return restored


def test_a_run_directory_of_the_previous_version_resumes_bitwise(tmp_path):
  """testdata/legacy_toy_run was written before the settings left the config (issue #40's
  HEAD: `python -m tests.training.toy_program ROOT 2 blt --reproducible_noise_seed=3`; a flat
  config.json, a flat privacy record in its checkpoint). This version resumes it — the saved
  config reads as equal to the new one — and ends bitwise where this version's own run of
  the same two rounds ends when it continues from the legacy model state (model, optimizer,
  noise state, scheduler), with the legacy run's C (optimized for the first call's n = 2).

  The two rounds themselves are compared within float rounding only: the testdata was
  computed on another machine, whose CPU kernels (AVX2 on AMD vs AVX-512 on Intel) round
  differently — TensorFlow is not bitwise across machines, nor is BLT's optimization of C
  (on an Intel machine it ends at other parameters: mechanism.json's digest differs), so the
  fresh run takes the legacy C as `--mechanism_params` and its state after round 2."""
  legacy, fresh = tmp_path / "legacy", tmp_path / "fresh"
  shutil.copytree(os.path.join(_TESTDATA, "legacy_toy_run"), legacy)
  with open(legacy / "config.json", encoding="utf-8") as f:
    assert "mechanism_settings" not in json.load(f)  # The flat layout of the old version.
  legacy_state = _final_arrays(str(legacy))
  task = toy_task.make_task()
  legacy_c = str(tmp_path / "legacy_mechanism.json")
  shutil.copy(legacy / "mechanism.json", legacy_c)
  program.run(task, toy_program.toy_config(str(fresh), 2, "blt", reproducible_noise_seed=3,
                                           mechanism_params=legacy_c))
  fresh_state = _final_arrays(str(fresh))
  assert legacy_state.round == fresh_state.round == 2
  assert len(legacy_state.arrays) == len(fresh_state.arrays)
  for x, y in zip(legacy_state.arrays, fresh_state.arrays):
    assert x.dtype == y.dtype and x.shape == y.shape
    if np.issubdtype(x.dtype, np.floating):
      np.testing.assert_allclose(x, y, rtol=1e-3, atol=1e-3)
    else:
      np.testing.assert_array_equal(x, y)  # Seeds, round counters.
  assert legacy_state.blobs["scheduler"] == fresh_state.blobs["scheduler"]
  # This version's run, continuing from the legacy model state (its own blobs and meta).
  checkpoints_lib.CheckpointManager(os.path.join(str(fresh), "checkpoints")).save(
      2, legacy_state.arrays, fresh_state.blobs, fresh_state.meta)
  resumed = program.run(task, toy_program.toy_config(str(legacy), 3, "blt",
                                                     reproducible_noise_seed=3))
  assert resumed.resumed_from == 2 and resumed.rounds_completed == 3
  whole = program.run(task, toy_program.toy_config(str(fresh), 3, "blt",
                                                   reproducible_noise_seed=3,
                                                   mechanism_params=legacy_c))
  assert whole.resumed_from == 2
  a, b = _final_arrays(str(legacy)), _final_arrays(str(fresh))
  assert a.round == b.round == 3 and len(a.arrays) == len(b.arrays)
  for x, y in zip(a.arrays, b.arrays):
    assert x.dtype == y.dtype and np.array_equal(x, y)
  assert a.blobs["scheduler"] == b.blobs["scheduler"] and resumed.epsilon == whole.epsilon
  with open(legacy / "config.json", encoding="utf-8") as f:
    assert json.load(f)["mechanism_settings"]["blt_buffers"] == 2  # Saved in the new layout.


def test_a_checkpoint_of_another_layout_is_refused_naming_what_differs():
  # E.g. an adaptive run written before the start search: its estimator state lacks two
  # arrays. Refused before anything runs, saying so and what to do.
  template = {"model": np.zeros((2, 3), np.float32), "estimate": np.float32(1.0),
              "search_step": np.float32(2.0), "search_direction": np.float32(0.0)}
  saved = checkpoints_lib.Checkpoint(3, [np.zeros(1, np.float32), np.zeros((2, 3), np.float32)],
                                     {}, {}, "/runs/x/checkpoints/ckpt-00000003")
  with pytest.raises(ValueError, match=r"ckpt-00000003 does not fit .*2 arrays saved, 4 "
                     r"expected.*earlier dp_fl.*--clip_search_step.*another --root_dir"):
    program._restore_state(saved, template)  # pylint: disable=protected-access
  restored = program._restore_state(  # pylint: disable=protected-access
      checkpoints_lib.Checkpoint(3, [np.float32(1.0), np.ones((2, 3), np.float32),
                                     np.float32(0.0), np.float32(2.0)], {}, {}, "p"), template)
  assert np.array_equal(restored["model"], np.ones((2, 3), np.float32))


def test_sigkill_then_resume_is_bitwise_identical_to_an_uninterrupted_run(tmp_path):
  rounds = 10
  uninterrupted = tmp_path / "uninterrupted"
  # Two runs can only be compared with the same secret seeds: a research seed for both.
  result = program.run(toy_task.make_task(), toy_program.toy_config(
      str(uninterrupted), rounds, "blt", reproducible_noise_seed=11))
  assert result.rounds_completed == rounds and result.stopped == "completed"

  killed = tmp_path / "killed"
  kill_after = int(np.random.default_rng(2026).integers(2, rounds - 2))  # A "random" round.
  proc = _start(killed, rounds, "blt", "--reproducible_noise_seed=11")
  _wait_for_rows(proc, killed, kill_after)
  proc.send_signal(signal.SIGKILL)
  proc.wait(timeout=60)
  assert proc.returncode == -signal.SIGKILL
  assert _rows(killed) < rounds
  resumed = program.run(toy_task.make_task(), toy_program.toy_config(
      str(killed), rounds, "blt", reproducible_noise_seed=11))
  assert resumed.resumed_from is not None and resumed.rounds_completed == rounds

  a, b = _final_arrays(uninterrupted), _final_arrays(killed)
  assert a.round == b.round == rounds
  assert len(a.arrays) == len(b.arrays)
  for x, y in zip(a.arrays, b.arrays):  # Model, optimizer, aggregator (noise) state.
    assert x.dtype == y.dtype and np.array_equal(x, y)
  assert a.blobs["scheduler"] == b.blobs["scheduler"]  # Scheduler and ledger.
  rows = writers.read_csv(os.path.join(killed, "metrics", "train.csv"))
  assert [int(r["round"]) for r in rows] == list(range(1, rounds + 1))
  # The privacy log's rows follow the rounds (not the wall clock): the same file.
  with open(os.path.join(uninterrupted, "metrics", "privacy.csv"), encoding="utf-8") as f:
    expected = f.read()
  with open(os.path.join(killed, "metrics", "privacy.csv"), encoding="utf-8") as f:
    assert f.read() == expected


def test_adam_server_optimizer_state_is_checkpointed_and_resumes_exactly(tmp_path):
  adam = dict(server_optimizer="adam", server_learning_rate=0.05, server_adam_epsilon=1e-3,
              reproducible_noise_seed=5)
  straight = program.run(toy_task.make_task(), toy_program.toy_config(
      str(tmp_path / "straight"), 6, "dpsgd", **adam))
  assert straight.rounds_completed == 6
  split = tmp_path / "split"
  program.run(toy_task.make_task(), toy_program.toy_config(str(split), 3, "dpsgd", **adam))
  program.run(toy_task.make_task(), toy_program.toy_config(str(split), 6, "dpsgd", **adam))
  a, b = _final_arrays(tmp_path / "straight"), _final_arrays(split)
  sgdm = program.run(toy_task.make_task(), toy_program.toy_config(
      str(tmp_path / "sgdm"), 6, "dpsgd"))
  assert sgdm.rounds_completed == 6
  # Adam's two moment estimates make its state larger than SGD-with-momentum's.
  assert len(a.arrays) > len(_final_arrays(tmp_path / "sgdm").arrays)
  assert len(a.arrays) == len(b.arrays)
  for x, y in zip(a.arrays, b.arrays):
    assert np.array_equal(x, y)


def test_sigterm_checkpoints_and_exits_cleanly(tmp_path):
  proc = _start(tmp_path, 200, "dpsgd", "--checkpoint_every=50")
  _wait_for_rows(proc, tmp_path, 2)
  proc.send_signal(signal.SIGTERM)
  out, err = proc.communicate(timeout=120)
  assert proc.returncode == 0, err[-3000:]
  summary = json.loads(out.strip().splitlines()[-1])
  assert summary["stopped"] == "signal"
  done = summary["rounds_completed"]
  assert 2 <= done < 200
  latest = _final_arrays(tmp_path)
  assert latest.round == done  # Checkpointed at the round it stopped after.
  assert "SIGTERM received" in out


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
  root = tmp_path_factory.mktemp("run")
  config = toy_program.toy_config(str(root), 8, "blt", eval_every=4)
  result = program.run(toy_task.make_task(), config)
  return root, config, result


def test_metrics_csv_and_tensorboard(finished_run):
  root, _, result = finished_run
  train = writers.read_csv(os.path.join(root, "metrics", "train.csv"))
  assert [int(r["round"]) for r in train] == list(range(1, 9))
  assert {"client_work/train/loss", "aggregator/noise_stddev", "clients"} <= set(train[0])
  evals = writers.read_csv(os.path.join(root, "metrics", "eval.csv"))
  assert [int(r["round"]) for r in evals] == [4, 8]
  assert float(evals[-1]["accuracy"]) == pytest.approx(result.eval_metrics["accuracy"])
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tags = set()
  for path in glob.glob(os.path.join(root, "tensorboard", "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      tags.update(v.tag for v in event.summary.value)
  assert {"train/client_work/train/loss", "eval/accuracy", "eval/loss", "privacy/epsilon",
          "privacy/rho"} <= tags


def test_privacy_report_uses_the_realized_ledger_and_matches_the_cli(finished_run):
  root, config, result = finished_run
  with open(os.path.join(root, "privacy_report.json")) as f:
    report = json.load(f)
  with open(os.path.join(root, "summary.json")) as f:
    realized = json.load(f)["realized_participation"]
  participation = report["participation"]
  assert participation["source"] == "realized"
  assert participation["rounds"] == 8
  assert participation["max_participations"] == realized["max_participations"]
  assert participation["min_sep"] == (realized["min_separation"] or 8)
  assert participation["min_sep"] >= config.min_sep  # The scheduler's rule held.
  from scripts import privacy as privacy_cli  # pylint: disable=g-import-not-at-top
  cli = privacy_cli.matrix_mechanism(
      "blt", os.path.join(root, program.MECHANISM_FILE), 8, participation["min_sep"],
      participation["max_participations"], 2, config.noise_multiplier, None, config.delta, 0,
      None)
  assert report["epsilon"] == pytest.approx(cli["epsilon"], rel=1e-12)
  assert result.epsilon == pytest.approx(cli["epsilon"], rel=1e-12)


def test_target_epsilon_stops_before_the_budget_is_exceeded(tmp_path):
  config = toy_program.toy_config(str(tmp_path), 40, "dpsgd", noise_multiplier=2.0,
                                  target_epsilon=3.0)
  result = program.run(toy_task.make_task(), config)
  assert result.stopped == "target_epsilon"
  assert 0 < result.rounds_completed < 40
  assert result.epsilon <= 3.0
  assert "would raise ε" in result.message


def test_nonfinite_loss_stops_or_discards(tmp_path):
  # One client's data is NaN; with one client per round its round has a non-finite loss
  # (TFF drops the client's update, so the round has no finite update at all).
  poisoned = toy_task.make_task(poison_client="client_005")
  common = dict(participation="cyclic", clients_per_round=1)
  stop = program.run(poisoned, toy_program.toy_config(str(tmp_path / "stop"), 24, "none",
                                                      **common))
  assert stop.stopped == "nonfinite" and "non-finite" in stop.message
  assert stop.rounds_completed < 24
  discard = program.run(poisoned, toy_program.toy_config(
      str(tmp_path / "discard"), 24, "dpsgd", on_nonfinite="discard", **common))
  assert discard.stopped == "completed" and discard.rounds_completed == 24
  with open(os.path.join(tmp_path / "discard", "summary.json")) as f:
    summary = json.load(f)
  # Its turn comes once per 24 draws (twice if the secret permutation puts it first: the
  # discarded draw moves the schedule on); it never fills a row.
  assert summary["discarded_rounds"] in (1, 2)
  assert summary["realized_participation"]["num_participants"] == 23
  assert summary["realized_participation"]["num_rounds"] == 24


def test_bad_root_dirs_and_privacy_changes_fail_before_training(tmp_path):
  blocker = tmp_path / "a_file"
  blocker.write_text("not a directory")
  with pytest.raises(ValueError, match="not a writable directory"):
    program.run(toy_task.make_task(), toy_program.toy_config(str(blocker / "run"), 2, "dpsgd"))
  root = tmp_path / "run"
  program.run(toy_task.make_task(), toy_program.toy_config(str(root), 2, "dpsgd"))
  with pytest.raises(ValueError, match="belongs to a run of task 'toy'"):
    program.run(toy_task.make_task("other"),
                toy_program.toy_config(str(root), 2, "dpsgd", task="other"))
  with pytest.raises(ValueError, match="noise_multiplier: 0.5 -> 0.6"):
    program.run(toy_task.make_task(),
                toy_program.toy_config(str(root), 4, "dpsgd", noise_multiplier=0.6))
  # Another population (other data) with the σ a calibration would give it: the population
  # is named, not the σ (#43: it was blamed on noise_multiplier).
  with pytest.raises(ValueError, match=r"population of 24 clients, the data given now has 9"):
    program.run(toy_task.make_task(num_clients=9),
                toy_program.toy_config(str(root), 4, "dpsgd", noise_multiplier=0.6))
  # Non-privacy fields may change on resume: more rounds continue the run.
  more = program.run(toy_task.make_task(), toy_program.toy_config(str(root), 4, "dpsgd"))
  assert more.resumed_from == 2 and more.rounds_completed == 4


def test_dpfedavg_with_poisson_sampling_reports_the_sampled_guarantee(tmp_path):
  config = toy_program.toy_config(str(tmp_path), 6, "dpfedavg", participation="poisson",
                                  population_sampling_rate=0.25, noise_multiplier=1.0)
  result = program.run(toy_task.make_task(), config)
  assert result.stopped == "completed" and result.rounds_completed == 6
  with open(os.path.join(tmp_path, "privacy_report.json")) as f:
    report = json.load(f)
  assert report["mechanism"] == "dpfedavg" and report["sampling_probability"] == 0.25
  from dp_fl.accounting import dpfedavg  # pylint: disable=g-import-not-at-top
  expected = dpfedavg.dpfedavg_epsilon(toy_task.NUM_CLIENTS, 0.25 * toy_task.NUM_CLIENTS, 1.0,
                                       6, config.delta, method=dpfedavg.PLD).epsilon
  assert report["epsilon"] == pytest.approx(expected)
  assert report["epsilon"] <= report["epsilon_rdp"] <= report["epsilon_moments_accountant"]


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
