"""--workers: rounds split over TFF worker processes (on loopback here) give the local result;
a worker that dies or hangs stops the job with an error naming it, the checkpoint intact, and
a rerun resumes; no worker process outlives the test."""

from __future__ import annotations

import http.server
import json
import os
import signal
import threading
import time

import numpy as np
import pytest
import tensorflow_federated as tff

from dp_fl import exits
from dp_fl.execution import runtime
from dp_fl.training import checkpoints
from dp_fl.training import program
from tests.runtime import loopback_workers
from tests.runtime import secure_sum_process
from tests.training import toy_program
from tests.training import toy_task

ROUNDS = 4
_QUIET = open(os.devnull, "w", encoding="utf-8")  # pylint: disable=consider-using-with


@pytest.fixture
def workers(tmp_path_factory):
  with loopback_workers.pool(str(tmp_path_factory.mktemp("workers"))) as started:
    yield started.start


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
  return [np.asarray(x, np.float64) for x in restored.arrays
          if np.asarray(x).dtype.kind not in "OSU"]  # Not TFF's DP event names.


# With the audit's canaries (issue #41) the client data is <data, canary>: the workers run
# the same client work on it.
@pytest.mark.parametrize("mechanism,canaries", [("blt", 0), ("dpfedavg", 0), ("blt", 8)])
def test_two_workers_give_the_local_result(tmp_path, workers, mechanism, canaries):
  pool = workers(2)
  local_config, local = _run(tmp_path / "local", mechanism, runtime="xla",
                             audit_canaries=canaries)
  remote_config, remote = _run(tmp_path / "remote", mechanism,
                               workers=",".join(w.address for w in pool),
                               audit_canaries=canaries)
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
  if canaries:
    assert remote.audit["num_canaries"] == canaries
    np.testing.assert_allclose(remote.audit["scores"]["all_iterates"],
                               local.audit["scores"]["all_iterates"], rtol=1e-4, atol=1e-5)


def test_distributed_dp_runs_on_two_workers_with_its_secure_sums(tmp_path, workers):
  # Issue #45: TFF's DistributedDpSumFactory (B-bit secure sums) on two workers, each folding
  # its 2 clients' messages into one partial; at B = 22 and z = 1e-3 the noise of the mean
  # is 2.5e-4 per coordinate and round, so the remote run agrees with the in-process one to
  # 1e-2 over 4 rounds (a lost partial or a wrong decoding would be off by O(1)).
  pool = workers(2)
  settings = dict(noise_multiplier=1e-3, ddp_bits=22)
  _, local = _run(tmp_path / "local", "ddgauss", runtime="xla", **settings)
  remote_config, remote = _run(tmp_path / "remote", "ddgauss",
                               workers=",".join(w.address for w in pool), **settings)
  assert remote_config.runtime == "workers" and remote.rounds_completed == ROUNDS
  assert local.rounds_completed == ROUNDS
  for a, b in zip(_final_state(tmp_path / "local"), _final_state(tmp_path / "remote")):
    if a.shape == (2,) and a[0] > 1e12:  # TFF's rotation seed: its clock at initialization.
      continue
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-2)
  report = (tmp_path / "remote" / "privacy_report.md").read_text()
  assert "released to this process by each worker" in report
  assert remote.privacy_report.epsilon == local.privacy_report.epsilon


def test_each_worker_folds_its_clients_into_one_partial_aggregate(workers):
  """Secure sums (cpSGD's modular shares) and the bounds check across workers: each worker
  returns one accumulator, one sum per secure input and one out-of-bounds bit (never the
  values' maxima), whatever its client count, and folds at least 2 clients; the totals, the
  modulus and the bounds are those of the in-process runtime."""
  from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
  from dp_fl.execution import xla  # pylint: disable=g-import-not-at-top
  pool = workers(2)
  process = secure_sum_process.secure_sum_process()
  local = xla.MapReduceProcess(process)
  remote_work = []

  def client_work(form):
    remote_work.append(remote_workers.RemoteClientWork(form, [w.address for w in pool],
                                                       timeout_seconds=60.0))
    return remote_work[0]

  remote = xla.MapReduceProcess(process, client_work=client_work)

  def sums(mapreduce, values):
    result = mapreduce.next(mapreduce.initialize(), secure_sum_process.datasets(values))
    return {k: int(v) for k, v in mapreduce.output(result.output).items()}

  for values in ([3, 5, 4], [2], [], [1, 2, 1, 0, 3]):
    assert sums(remote, values) == sums(local, values), values
  client_input = remote.client_input_value(remote.prepare(remote.initialize()))
  partials = remote_work[0](secure_sum_process.datasets([3, 5, 4, 1]), client_input)
  assert len(partials) == 2  # One per worker, not one per client.
  assert [int(x) for p in partials for x in p.secure_sums] == [3 + 5, 3 + 5, 3 + 5, 5, 5, 5]
  assert [tuple(vars(p)) for p in partials] == [
      ("accumulator", "secure_sums", "out_of_bounds")] * 2  # No maxima.
  assert [bool(p.out_of_bounds) for p in partials] == [False, False]
  # 3 clients on 2 workers would leave one alone with its message: one worker folds all.
  (partial,) = remote_work[0](secure_sum_process.datasets([3, 5, 4]), client_input)
  assert [int(x) for x in partial.secure_sums] == [12, 12, 12]
  with pytest.raises(ValueError, match="exceeds its bound .bitwidth 3"):  # 8 > 2³ − 1.
    sums(remote, [1, 1, 1, 8])
  with pytest.raises(ValueError, match="max_input 5"):
    sums(remote, [6, 1, 1, 1])
  remote_work[0].close()


def test_a_workers_share_is_sent_in_calls_of_bounded_size(workers):
  """Issue #43: TFF's worker holds every client's results of a call until its aggregate, so a
  worker's share goes in calls of at most `max_clients_per_call` clients (never fewer than 2
  with secure sums), merged here as they return: the worker still sends one partial per
  round, and the totals are the in-process runtime's."""
  from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
  from dp_fl.execution import xla  # pylint: disable=g-import-not-at-top
  (worker,) = workers(1)
  process = secure_sum_process.secure_sum_process()
  local = xla.MapReduceProcess(process)
  remote_work = []

  def client_work(form):
    remote_work.append(remote_workers.RemoteClientWork(
        form, [worker.address], timeout_seconds=60.0, max_clients_per_call=2))
    return remote_work[0]

  remote = xla.MapReduceProcess(process, client_work=client_work)
  calls = []
  context = remote_work[0]._contexts[0]  # pylint: disable=protected-access
  invoke = context.invoke
  context.invoke = lambda comp, arg: calls.append(len(arg[0])) or invoke(comp, arg)

  def sums(mapreduce, values):
    result = mapreduce.next(mapreduce.initialize(), secure_sum_process.datasets(values))
    return {k: int(v) for k, v in mapreduce.output(result.output).items()}

  # With secure sums no call folds fewer than 2 clients, so 7 clients go in 3 calls, not 4
  # (one would hold a single client's message): a call then holds up to 2 × 2 − 1.
  for values, sizes in (([3, 5, 4, 1, 2, 0, 1], [3, 2, 2]), ([1, 2, 1, 0, 3], [3, 2]),
                        ([2, 2, 1, 1], [2, 2]), ([2, 2], [2])):
    calls.clear()
    assert sums(remote, values) == sums(local, values), values
    assert calls == sizes, (values, calls)
  with pytest.raises(ValueError, match="max_clients_per_call"):
    remote_workers.RemoteClientWork(process, [worker.address], max_clients_per_call=0)
  remote_work[0].close()


def _tff_sqlite(path, sizes):
  """A TFF SqlClientData file: client c_i with sizes[i] records of split train."""
  import sqlite3  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  connection = sqlite3.connect(path)
  connection.execute("CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT "
                     "NULL, serialized_example_proto BLOB NOT NULL);")
  connection.execute("CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT "
                     "NOT NULL, num_examples INTEGER NOT NULL);")
  for i, size in enumerate(sizes):
    example = tf.train.Example(features=tf.train.Features(feature={"x": tf.train.Feature(
        float_list=tf.train.FloatList(value=[float(i)] * 16))})).SerializeToString()
    connection.executemany("INSERT INTO examples VALUES ('train', ?, ?);",
                           [(f"c_{i}", example)] * size)
    connection.execute("INSERT INTO client_metadata VALUES (?, 'train', ?);", (f"c_{i}", size))
  connection.commit()
  connection.close()


def test_workers_read_the_clients_records_themselves_from_the_same_database(tmp_path, workers,
                                                                           monkeypatch):
  """Issue #43: a lazily read client's dataset goes to a worker as a graph naming the file (its
  size does not grow with the client's records: the worker reads them from its own disk), so
  each worker is checked at connect to read the file this process reads — the same rows at
  the same absolute path — and refused naming the file otherwise."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
  from tasks import sql_client_data  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / "data.sqlite")
  _tff_sqlite(path, [1, 400, 3])
  data = tff.simulation.datasets.SqlClientData(path, "train")
  graph_bytes = {
      c: len(tf.raw_ops.DatasetToGraphV2(
          input_dataset=tf.data.experimental.to_variant(data.create_tf_dataset_for_client(c)),
          external_state_policy=2).numpy()) for c in ("c_0", "c_1")}
  assert abs(graph_bytes["c_1"] - graph_bytes["c_0"]) < 64, graph_bytes  # 400 records vs 1.
  check = sql_client_data.worker_check(path, "the test database")
  assert check.expected[:2] == (3, 404)
  (worker,) = workers(1)
  remote_workers.connect([worker.address], connect_seconds=30.0, checks=[check])
  # The worker sees another file at the path: refused, both fingerprints named.
  os.remove(path)
  _tff_sqlite(path, [1, 401, 3])
  with pytest.raises(exits.RemoteWorkerError, match=(
      rf"{worker.address} finds other data in the test database at {path} .*3, 405, .* "
      r"there, "
      r"3, 404, .* in this process; copy this process's file")):
    remote_workers.connect([worker.address], connect_seconds=30.0, checks=[check])
  # A path the worker cannot open (relative: the worker runs in its own directory).
  monkeypatch.chdir(tmp_path)
  relative = sql_client_data.worker_check("data.sqlite", "the test database")
  with pytest.raises(exits.RemoteWorkerError, match=(
      r"cannot read the test database at data.sqlite .*same absolute path")):
    remote_workers.connect([worker.address], connect_seconds=30.0, checks=[relative])


@pytest.mark.parametrize("count,parts,min_size,chunks", [
    (5, 2, 1, [(0, 3), (3, 5)]), (1, 2, 1, [(0, 1)]), (0, 3, 2, []),
    (3, 2, 2, [(0, 3)]), (1, 4, 2, [(0, 1)]), (5, 2, 2, [(0, 3), (3, 5)]),
    (5, 4, 2, [(0, 3), (3, 5)]), (8, 3, 2, [(0, 3), (3, 6), (6, 8)])])
def test_split_never_leaves_a_chunk_below_its_minimum(count, parts, min_size, chunks):
  from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
  assert remote_workers.split(count, parts, min_size) == chunks


def test_a_dead_worker_stops_the_job_naming_it_and_a_rerun_resumes(tmp_path, workers):
  first, second = workers(2)
  addresses = f"{first.address},{second.address}"
  _run(tmp_path, "blt", workers=addresses, rounds=2)  # Two rounds checkpointed.
  before = _final_state(tmp_path)
  second.stop()
  start = time.monotonic()
  with pytest.raises(exits.RemoteWorkerError, match=second.address) as raised:
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
  with pytest.raises(exits.RemoteWorkerError, match="did not answer within 3 s"):
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
  address = f"localhost:{loopback_workers.free_port()}"
  with pytest.raises(exits.RemoteWorkerError, match=f"{address} not reachable"):
    from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
    remote_workers.connect([address], connect_seconds=1.0)


def test_a_web_server_on_the_worker_port_is_named_as_such(tmp_path):
  # Found by a hostile-input pass (#43): it was reported "not reachable".
  server = http.server.HTTPServer(("localhost", 0), http.server.BaseHTTPRequestHandler)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  address = f"localhost:{server.server_address[1]}"
  try:
    from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
    with pytest.raises(exits.RemoteWorkerError, match=f"{address} is answered by an "
                       "HTTP/1.x server .*not a TFF worker"):
      remote_workers.connect([address], connect_seconds=1.0)
    # A training run against it writes nothing into its run directory.
    config = toy_program.toy_config(str(tmp_path / "run"), 2, "blt", workers=address,
                                    worker_timeout_seconds=5.0)
    with pytest.raises(exits.RemoteWorkerError):
      with runtime.execution_context():
        program.run(toy_task.make_task(num_clients=4), config)
    assert not os.path.exists(tmp_path / "run" / "config.json")
  finally:
    server.shutdown()


def _connect(worker):
  from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
  return remote_workers.connect([worker.address], connect_seconds=30.0, timeout_seconds=30.0)


def test_a_worker_of_another_version_is_refused_naming_both(workers):
  (same,) = workers(1)
  _connect(same)  # This environment's own stamp passes.
  other = dict(runtime.worker_stamp(), **{"tensorflow-federated": "0.86.0"})
  (older,) = workers(1, stamp=other)
  with pytest.raises(exits.RemoteWorkerError) as raised:
    _connect(older)
  message = str(raised.value)
  assert older.address in message and "tensorflow-federated 0.86.0" in message
  assert f"tensorflow-federated {tff.__version__}" in message and "scripts:worker" in message
  (newer_dp_fl,) = workers(1, stamp=dict(runtime.worker_stamp(), dp_fl="9.9.9"))
  with pytest.raises(exits.RemoteWorkerError, match="runs dp_fl 9.9.9"):
    _connect(newer_dp_fl)


def test_a_bare_worker_binary_without_a_stamp_is_refused(workers):
  (bare,) = workers(1, stamp=False)
  with pytest.raises(exits.RemoteWorkerError, match=f"{bare.address} carries no dp_fl "
                     "version stamp"):
    _connect(bare)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
  return loopback_workers.write_certificates(str(tmp_path_factory.mktemp("tls")))


def test_mutual_tls_to_a_worker_behind_a_tls_front(tmp_path, workers, certificates):
  from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
  (worker,) = workers(1)
  front = loopback_workers.TlsFront(worker.port, certificates["server_cert"],
                                    certificates["server_key"], client_ca=certificates["ca"])
  try:
    config, result = _run(tmp_path, "blt", workers=front.address, rounds=2,
                          worker_tls_ca_cert=certificates["ca"],
                          worker_tls_client_cert=certificates["client_cert"],
                          worker_tls_client_key=certificates["client_key"])
    assert result.rounds_completed == 2 and config.runtime_settings.worker_tls() is not None
    # Without this process's certificate the front refuses the handshake.
    with pytest.raises(exits.RemoteWorkerError, match="over TLS: is a TLS front end"):
      remote_workers.connect([front.address], connect_seconds=2.0,
                             tls=runtime.TlsFiles(certificates["ca"]))
    # A CA that did not sign the worker's certificate: no connection either.
    with pytest.raises(exits.RemoteWorkerError, match="not reachable"):
      remote_workers.connect([front.address], connect_seconds=2.0, tls=runtime.TlsFiles(
          certificates["client_cert"], certificates["client_cert"],
          certificates["client_key"]))
    # Plaintext to the TLS port is not served, and named as a port that speaks no gRPC.
    with pytest.raises(exits.RemoteWorkerError, match="does not speak gRPC .e.g. a TLS port"):
      remote_workers.connect([front.address], connect_seconds=2.0)
    assert front.handshake_failures >= 2
  finally:
    front.close()


def test_bad_tls_flags_name_the_flag(tmp_path, certificates):
  not_pem = tmp_path / "not.pem"
  not_pem.write_text("hello")
  truncated = tmp_path / "truncated.pem"
  truncated.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n")
  cases = [
      (dict(worker_tls_ca_cert=certificates["ca"]), "give --workers too"),
      (dict(workers="localhost:8000", worker_tls_client_cert=certificates["client_cert"],
            worker_tls_client_key=certificates["client_key"]), "need --worker_tls_ca_cert"),
      (dict(workers="localhost:8000", worker_tls_ca_cert=certificates["ca"],
            worker_tls_client_cert=certificates["client_cert"]), "go together"),
      (dict(workers="localhost:8000", worker_tls_ca_cert=str(tmp_path / "missing.pem")),
       "--worker_tls_ca_cert=.*missing.pem.* cannot be read"),
      (dict(workers="localhost:8000", worker_tls_ca_cert=str(not_pem)),
       "--worker_tls_ca_cert=.*not.pem.* is not a PEM file"),
      (dict(workers="localhost:8000", worker_tls_ca_cert=certificates["client_key"]),
       "--worker_tls_ca_cert=.*holds no usable CA certificate"),
      (dict(workers="localhost:8000", worker_tls_ca_cert=str(truncated)),
       "--worker_tls_ca_cert=.*holds no usable CA certificate"),
      (dict(workers="localhost:8000", worker_tls_ca_cert=certificates["ca"],
            worker_tls_client_cert=certificates["client_cert"],
            worker_tls_client_key=certificates["server_key"]),
       "are not a matching PEM certificate and private key"),
  ]
  for overrides, match in cases:
    with pytest.raises(ValueError, match=match):
      toy_program.toy_config(str(tmp_path), 2, "blt", **overrides)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
