"""The training program on the in-process runtime (`--runtime=xla`): every training feature."""

from __future__ import annotations

import dataclasses
import json
import os
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


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _config(root_dir, rounds, mechanism="blt", **overrides):
  values = dict(reproducible_noise_seed=11, runtime="xla")
  values.update(overrides)
  return toy_program.toy_config(str(root_dir), rounds, mechanism, **values)


def _latest(root_dir):
  return checkpoints_lib.CheckpointManager(os.path.join(root_dir, "checkpoints")
                                           ).restore_latest()


def _assert_same(a, b, exact=True):
  assert a.round == b.round and len(a.arrays) == len(b.arrays)
  for x, y in zip(a.arrays, b.arrays):
    assert x.dtype == y.dtype
    if exact:
      assert np.array_equal(x, y)
    else:
      np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
  assert a.blobs["scheduler"] == b.blobs["scheduler"]


def test_resume_within_the_xla_runtime_is_bitwise(tmp_path):
  task = toy_task.make_task()
  whole = program.run(task, _config(tmp_path / "whole", 6))
  assert whole.stopped == "completed" and whole.epsilon is not None
  split = _config(tmp_path / "split", 6)
  assert program.run(task, split, max_rounds_this_call=2).stopped == "paused"
  assert program.run(task, split).resumed_from == 2
  _assert_same(_latest(tmp_path / "whole"), _latest(tmp_path / "split"))


def test_checkpoints_move_between_runtimes(tmp_path):
  task = toy_task.make_task()
  reference = program.run(task, _config(tmp_path / "cpp", 6, runtime="tff_worker"))
  moved = tmp_path / "moved"
  program.run(task, _config(moved, 6, runtime="tff_worker"), max_rounds_this_call=3)
  resumed = program.run(task, _config(moved, 6, runtime="xla"))
  assert resumed.resumed_from == 3 and resumed.rounds_completed == 6
  _assert_same(_latest(tmp_path / "cpp"), _latest(moved), exact=False)
  assert resumed.epsilon == reference.epsilon
  # And back: an xla checkpoint resumes in the C++ worker.
  back = tmp_path / "back"
  program.run(task, _config(back, 6), max_rounds_this_call=3)
  assert program.run(task, _config(back, 6, runtime="tff_worker")).rounds_completed == 6
  _assert_same(_latest(tmp_path / "cpp"), _latest(back), exact=False)


def test_nonfinite_rounds_are_discarded_on_xla(tmp_path):
  task = toy_task.make_task(poison_client=toy_task.make_task().train_data.client_ids)
  result = program.run(task, _config(tmp_path, 4, on_nonfinite="discard", mechanism="dpsgd",
                                     participation="uniform"))
  summary = json.loads((tmp_path / "summary.json").read_text())
  # Every client diverges: five rounds in a row are discarded (no row of C), then it stops.
  assert result.stopped == "nonfinite" and result.rounds_completed == 0
  assert summary["discarded_rounds"] == 5 and "5 consecutive" in result.message
  assert _latest(tmp_path).round == 0


def test_poisson_cohorts_and_weight_projection_on_xla(tmp_path):
  def unit_norm(weights):
    return [w / max(1.0, float(np.linalg.norm(w))) for w in weights]

  task = dataclasses.replace(toy_task.make_task(), project_weights=unit_norm)
  result = program.run(task, _config(tmp_path, 5, mechanism="dpfedavg",
                                     participation="poisson", population_sampling_rate=0.3))
  assert result.stopped == "completed" and result.epsilon is not None
  rows = writers.read_csv(os.path.join(tmp_path, "metrics", "train.csv"))
  assert len({r["clients"] for r in rows}) > 1  # Cohorts of varying size.
  weights = _latest(tmp_path).arrays[:2]
  assert all(np.linalg.norm(w) <= 1.0 + 1e-6 for w in weights)


def test_sigterm_checkpoints_and_exits_on_xla(tmp_path):
  env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.Popen(
      [sys.executable, "-m", "tests.training.toy_program", str(tmp_path), "200", "blt",
       "--runtime=xla"], cwd=_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True)
  train_csv = os.path.join(tmp_path, "metrics", "train.csv")
  deadline = time.monotonic() + 240
  while not (os.path.exists(train_csv) and len(writers.read_csv(train_csv)) >= 2):
    assert proc.poll() is None, proc.stderr.read()[-3000:]
    assert time.monotonic() < deadline, "no progress"
    time.sleep(0.05)
  proc.send_signal(signal.SIGTERM)
  out, err = proc.communicate(timeout=120)
  assert proc.returncode == 0, err[-3000:]
  result = json.loads(out.strip().splitlines()[-1])
  assert result["stopped"] == "signal"
  assert _latest(tmp_path).round == result["rounds_completed"]


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
