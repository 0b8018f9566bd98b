"""scripts/worker.py: a TFF worker bound to its launcher's life, and its flag checks.

Each lifecycle test starts the launcher as a subprocess on a free port, waits for its
--ready_file, and reads the worker_binary's pid from the launcher's JSON status line. The
last test asserts that no worker_binary started for any of this module's ports is left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from scripts import worker

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_READY_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 10.0

_used_ports: set[int] = set()


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  _used_ports.add(port)
  return port


def _cli(*args: str, **kwargs) -> subprocess.Popen:
  env = dict(os.environ, PYTHONPATH=_ROOT)
  return subprocess.Popen([sys.executable, "-m", "scripts.worker", *args], cwd=_ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def _run(*args: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=_ROOT)
  return subprocess.run([sys.executable, "-m", "scripts.worker", *args], cwd=_ROOT, env=env,
                        capture_output=True, text=True, timeout=120)


def _alive(pid: int) -> bool:
  """Whether `pid` is a running (not zombie) worker_binary."""
  try:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
      state = f.read().rsplit(")", 1)[1].split()[0]
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      cmdline = f.read()
  except (FileNotFoundError, ProcessLookupError, IndexError):
    return False
  return state != "Z" and b"worker_binary" in cmdline


def _wait_gone(pid: int, timeout_s: float) -> bool:
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    if not _alive(pid):
      return True
    time.sleep(0.05)
  return not _alive(pid)


class _Launcher:
  """A running `scripts.worker --format json` and its worker_binary's pid."""

  def __init__(self, tmp_path, *extra: str):
    self.port = _free_port()
    self.ready_file = tmp_path / f"ready_{self.port}"
    self.proc = _cli(f"--port={self.port}", f"--ready_file={self.ready_file}", "--format=json",
                     "--max_concurrent_computation_calls=1", *extra)
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while not self.ready_file.exists():
      if self.proc.poll() is not None or time.monotonic() > deadline:
        self.proc.kill()
        out, err = self.proc.communicate()
        pytest.fail(f"launcher not ready (rc {self.proc.returncode}): {out}\n{err}")
      time.sleep(0.05)
    # The status line is flushed before the ready file is written.
    self.status = json.loads(self.proc.stdout.readline())
    self.worker_pid = self.status["worker_pid"]

  def finish(self, timeout_s: float) -> tuple[int, str, str]:
    out, err = self.proc.communicate(timeout=timeout_s)
    return self.proc.returncode, out, err

  def cleanup(self) -> None:
    if self.proc.poll() is None:
      self.proc.kill()
      self.proc.communicate()
    if _alive(self.worker_pid):
      os.kill(self.worker_pid, signal.SIGKILL)


@pytest.fixture
def launcher(tmp_path):
  started = []

  def start(*extra: str) -> _Launcher:
    started.append(_Launcher(tmp_path, *extra))
    return started[-1]

  yield start
  for item in started:
    item.cleanup()


def test_serves_and_sigterm_stops_worker_and_exits_interrupted(launcher):
  w = launcher()
  assert w.status["status"] == "serving"
  assert w.status["port"] == w.port
  assert w.ready_file.read_text().strip() == str(w.port)
  assert _alive(w.worker_pid)
  with socket.create_connection(("127.0.0.1", w.port), timeout=5):
    pass
  w.proc.send_signal(signal.SIGTERM)
  rc, out, err = w.finish(_STOP_TIMEOUT_S)
  assert rc == 75, err  # exits.INTERRUPTED
  assert "SIGTERM received" in err and str(w.port) in err
  assert json.loads(out.splitlines()[-1])["status"] == "stopped"
  assert _wait_gone(w.worker_pid, 2.0)
  assert not w.ready_file.exists()  # A stale ready file would claim a worker that is gone.


def test_sigint_stops_worker(launcher):
  w = launcher("--listen=0.0.0.0")
  w.proc.send_signal(signal.SIGINT)
  rc, _, err = w.finish(_STOP_TIMEOUT_S)
  assert rc == 75, err
  assert _wait_gone(w.worker_pid, 2.0)
  assert "listens on every interface" in err and "unauthenticated" in err


def test_tff_stub_reports_ready(launcher):
  grpc = pytest.importorskip("grpc")
  from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub  # pylint: disable=g-import-not-at-top
  w = launcher()
  channel = grpc.insecure_channel(f"localhost:{w.port}")
  try:
    stub = remote_executor_grpc_stub.RemoteExecutorGrpcStub(channel)
    deadline = time.monotonic() + 10
    while not stub.is_ready and time.monotonic() < deadline:
      time.sleep(0.05)
    assert stub.is_ready
  finally:
    channel.close()


def test_worker_runs_a_federated_computation(launcher):
  """A TFF client in another process (this one) runs a federated sum on the worker."""
  grpc = pytest.importorskip("grpc")
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.execution_contexts import sync_execution_context  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executors import remote_executor  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.types import placements  # pylint: disable=g-import-not-at-top
  from dp_fl.execution import runtime  # pylint: disable=g-import-not-at-top

  w = launcher()
  channel = grpc.insecure_channel(f"localhost:{w.port}")
  stub = remote_executor_grpc_stub.RemoteExecutorGrpcStub(channel)

  def stack_fn(cardinalities):
    ex = remote_executor.RemoteExecutor(stub)
    ex.set_cardinalities(cardinalities)
    return ex

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def federated_sum(values):
    return tff.federated_sum(values)

  context = sync_execution_context.SyncExecutionContext(
      executor_fn=python_executor_stacks.ResourceManagingExecutorFactory(stack_fn),
      compiler_fn=runtime.compile_for_cpp_worker,
      transform_args=tensorflow_computation.transform_args,
      transform_result=tensorflow_computation.transform_result)
  stack = context_stack_impl.context_stack
  previous = stack.current
  stack.set_default_context(context)
  try:
    assert float(federated_sum([1.0, 2.0, 3.5])) == 6.5
  finally:
    stack.set_default_context(previous)
    channel.close()


def test_sigkill_of_launcher_kills_worker(launcher):
  w = launcher()
  w.proc.kill()
  w.proc.wait(timeout=_STOP_TIMEOUT_S)
  assert _wait_gone(w.worker_pid, 5.0), "worker_binary outlived its SIGKILLed launcher"


def test_worker_death_makes_launcher_fail_naming_port(launcher):
  w = launcher()
  os.kill(w.worker_pid, signal.SIGKILL)
  rc, out, err = w.finish(_STOP_TIMEOUT_S)
  assert rc == 3, err  # exits.ENVIRONMENT, as dp_fl reports any lost worker
  assert f"port {w.port}" in err and "SIGKILL" in err
  assert json.loads(out.splitlines()[-1])["status"] == "worker_exited"


def test_a_launched_worker_passes_the_trainers_version_check_and_cleans_its_stamp(launcher):
  from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
  from dp_fl.execution import runtime  # pylint: disable=g-import-not-at-top
  w = launcher()
  assert w.status["dp_fl"] == runtime.worker_stamp()["dp_fl"]
  cwd = os.readlink(f"/proc/{w.worker_pid}/cwd")
  with open(os.path.join(cwd, runtime.WORKER_STAMP_FILE), encoding="utf-8") as f:
    assert json.load(f) == runtime.worker_stamp()
  with runtime.execution_context():
    (context,) = remote_workers.connect([f"localhost:{w.port}"], timeout_seconds=60.0)
  assert context is not None
  w.proc.send_signal(signal.SIGTERM)
  rc, _, err = w.finish(_STOP_TIMEOUT_S)
  assert rc == 75, err
  assert not os.path.exists(cwd)  # The private directory goes with the launcher.


def test_human_status_line(launcher, tmp_path):
  port = _free_port()
  ready = tmp_path / "ready"
  proc = _cli(f"--port={port}", f"--ready_file={ready}", "--max_concurrent_computation_calls=1")
  try:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
      time.sleep(0.05)
    line = proc.stdout.readline().strip()
    assert line.startswith(f"dp_fl worker: serving TFF executor on port {port} "
                           "(dp_fl 0.2.0, tensorflow-federated 0.87.0, tensorflow 2.14"), line
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=_STOP_TIMEOUT_S)
    assert proc.returncode == 75
    assert "listens on EVERY interface" in err  # The loopback default is not what it binds.
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.communicate()


@pytest.mark.parametrize("args,flag", [
    (["--port=0"], "--port"),
    (["--port=70000"], "--port"),
    (["--port=FREE", "--listen=10.1.2.3"], "--listen"),
    (["--port=FREE", "--listen=::1"], "--listen"),
    ([], "--port"),
    (["--port=FREE", "--ready_timeout_s=0"], "--ready_timeout_s"),
    (["--port=FREE", "--ready_file=/nonexistent_dir/ready"], "--ready_file"),
])
def test_bad_flags_exit_2_naming_the_flag(args, flag):
  result = _run(*(a.replace("FREE", str(_free_port())) for a in args))
  assert result.returncode == 2, result.stderr
  assert flag in result.stderr
  assert "Traceback" not in result.stderr


def test_port_in_use_exits_2():
  with socket.socket() as taken:
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    _used_ports.add(port)
    result = _run(f"--port={port}")
  assert result.returncode == 2, result.stderr
  assert "--port" in result.stderr and "already in use" in result.stderr


def test_second_worker_on_a_port_in_use_is_refused(launcher):
  # gRPC sets SO_REUSEPORT: without the trial bind a second worker_binary would share the port.
  w = launcher()
  result = _run(f"--port={w.port}")
  assert result.returncode == 2, result.stderr
  assert "already in use" in result.stderr


def test_worker_not_ready_in_time_is_stopped_and_exit_3(tmp_path):
  port = _free_port()
  result = _run(f"--port={port}", "--ready_timeout_s=0.001", f"--ready_file={tmp_path / 'r'}")
  assert result.returncode == 3, result.stderr
  assert f"port {port}" in result.stderr and "did not accept connections" in result.stderr
  assert not (tmp_path / "r").exists()


def test_describe_exit_status():
  assert worker.describe_exit_status(-9) == "signal SIGKILL (-9)"
  assert worker.describe_exit_status(1) == "exit status 1"


def test_no_worker_binary_left_for_this_modules_ports():
  """Runs last (file order): scans /proc for a worker_binary serving a port used above."""
  time.sleep(0.5)
  wanted = {f"--port={p}".encode() for p in _used_ports}
  left = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        args = f.read().split(b"\0")
    except OSError:
      continue
    if args and args[0].endswith(b"worker_binary") and wanted & set(args) and _alive(int(pid)):
      left.append((pid, args))
  assert not left, f"orphaned worker_binary processes: {left}"


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
