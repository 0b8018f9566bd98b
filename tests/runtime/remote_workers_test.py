"""--workers: rounds split over TFF worker processes (on loopback here) give the local result;
a worker that dies or hangs stops the job with an error naming it, the checkpoint intact, and
a rerun resumes; no worker process outlives the test."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl import exits
from dp_fl import runtime
from dp_fl.training import checkpoints
from dp_fl.training import program
from scripts import worker as worker_script
from tests.training import toy_program
from tests.training import toy_task

ROUNDS = 4
_QUIET = open(os.devnull, "w", encoding="utf-8")  # pylint: disable=consider-using-with


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class Worker:
  """One TFF worker_binary on loopback, bound to this process's life (as scripts/worker)."""

  def __init__(self, port=None):
    self.port = port or _free_port()
    self.process = worker_script.start_worker(worker_script.worker_binary_path(), self.port,
                                              -1)

  @property
  def address(self) -> str:
    return f"localhost:{self.port}"

  def stop(self) -> None:
    if self.process.poll() is None:
      self.process.send_signal(signal.SIGCONT)
      self.process.kill()
    self.process.wait(timeout=30)


@pytest.fixture
def workers():
  started: list[Worker] = []

  def start(count=1, port=None):
    new = [Worker(port) for _ in range(count)]
    started.extend(new)
    return new

  yield start
  for worker in started:
    worker.stop()
  for worker in started:  # No orphan: every worker we started is gone.
    assert worker.process.poll() is not None


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _run(root, mechanism, **overrides):
  extra = ({"participation": "poisson", "population_sampling_rate": 0.5}
           if mechanism == "dpfedavg" else {"participation": "uniform"})
  config = toy_program.toy_config(str(root), overrides.pop("rounds", ROUNDS), mechanism,
                                  reproducible_noise_seed=7, checkpoint_every=1,
                                  **extra, **overrides)
  result = program.run(toy_task.make_task(), config, progress_stream=_QUIET)
  return config, result


def _final_state(root):
  restored = checkpoints.CheckpointManager(os.path.join(str(root), "checkpoints")
                                           ).restore_latest()
  return [np.asarray(x, np.float64) for x in restored.arrays]


@pytest.mark.parametrize("mechanism", ["blt", "dpfedavg"])
def test_two_workers_give_the_local_result(tmp_path, workers, mechanism):
  pool = workers(2)
  local_config, local = _run(tmp_path / "local", mechanism, runtime="xla")
  remote_config, remote = _run(tmp_path / "remote", mechanism,
                               workers=",".join(w.address for w in pool))
  assert remote_config.runtime == "workers" and local.rounds_completed == ROUNDS
  assert remote.rounds_completed == ROUNDS
  for a, b in zip(_final_state(tmp_path / "local"), _final_state(tmp_path / "remote")):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  local_summary = json.loads((tmp_path / "local" / "summary.json").read_text())
  remote_summary = json.loads((tmp_path / "remote" / "summary.json").read_text())
  assert remote_summary["epsilon"] == local_summary["epsilon"]
  assert remote_summary["realized_participation"] == local_summary["realized_participation"]
  for key, value in local_summary["eval"].items():
    assert remote_summary["eval"][key] == pytest.approx(value, rel=1e-4, abs=1e-5)


def test_a_dead_worker_stops_the_job_naming_it_and_a_rerun_resumes(tmp_path, workers):
  first, second = workers(2)
  addresses = f"{first.address},{second.address}"
  _run(tmp_path, "blt", workers=addresses, rounds=2)  # Two rounds checkpointed.
  before = _final_state(tmp_path)
  second.stop()
  start = time.monotonic()
  with pytest.raises(runtime.RemoteWorkerError, match=second.address) as raised:
    _run(tmp_path, "blt", workers=addresses, worker_timeout_seconds=30.0)
  assert time.monotonic() - start < 60
  # A binary exits 3 (environment) with a message naming the worker and how to resume.
  code = exits.guarded(lambda: (_ for _ in ()).throw(raised.value), stream=_QUIET)
  assert code == exits.ENVIRONMENT
  for a, b in zip(before, _final_state(tmp_path)):  # The checkpoint is intact.
    np.testing.assert_array_equal(a, b)
  _, resumed = _run(tmp_path, "blt", workers=first.address)  # Without the dead worker.
  assert resumed.rounds_completed == ROUNDS


def test_a_hung_worker_is_detected_within_its_deadline(tmp_path, workers):
  (worker,) = workers(1)
  _run(tmp_path, "blt", workers=worker.address, rounds=2)
  worker.process.send_signal(signal.SIGSTOP)  # Alive but silent.
  start = time.monotonic()
  with pytest.raises(runtime.RemoteWorkerError, match="did not answer within 3 s"):
    _run(tmp_path, "blt", workers=worker.address, worker_timeout_seconds=3.0)
  assert time.monotonic() - start < 45


@pytest.mark.parametrize("workers_flag,runtime_flag,match", [
    ("localhost", "tff_worker", "HOST:PORT"),
    ("localhost:0", "tff_worker", "HOST:PORT"),
    ("localhost:70000", "tff_worker", "HOST:PORT"),
    ("a:1,a:1", "tff_worker", "twice"),
    (",", "tff_worker", "names no worker"),
    ("localhost:8000", "xla", "--runtime=xla cannot take it"),
    (None, "workers", "needs --workers"),
])
def test_bad_workers_flags_name_the_flag(tmp_path, workers_flag, runtime_flag, match):
  with pytest.raises(ValueError, match=match):
    toy_program.toy_config(str(tmp_path), 2, "blt", workers=workers_flag, runtime=runtime_flag)


def test_an_unreachable_worker_is_refused_naming_it(tmp_path):
  address = f"localhost:{_free_port()}"
  with pytest.raises(runtime.RemoteWorkerError, match=f"{address} not reachable"):
    from dp_fl import remote_workers  # pylint: disable=g-import-not-at-top
    work = tff.tensorflow.computation(lambda x, y: x + y, (tf.int32, tf.int32))
    remote_workers.RemoteClientWork(work, [address], connect_seconds=1.0)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
