"""No TFF worker_binary outlives the process that started it (dp_fl.execution.runtime).

Each case starts tests/runtime/lifecycle_program.py, which runs a federated computation on TFF's
C++ runtime, finds the worker among the program's children *by parent pid* (never by a broad
process-name search), ends the program in one of the ways a job can end, and checks that the
worker is gone and that the program's output pipe closed (an orphan would hold it open).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from dp_fl import exits
from dp_fl.execution import runtime

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_DEADLINE_SECONDS = 120


def _children(pid: int) -> list[int]:
  """Pids whose parent is `pid`, from /proc."""
  found = []
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/stat") as f:
        stat = f.read()
    except OSError:
      continue
    # Field 4 (ppid) follows the parenthesised command, which may itself contain spaces.
    ppid = int(stat.rsplit(")", 1)[1].split()[1])
    if ppid == pid:
      found.append(int(entry))
  return found


def _is_live_worker(pid: int) -> bool:
  try:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      cmdline = f.read()
    with open(f"/proc/{pid}/stat") as f:
      state = f.read().rsplit(")", 1)[1].split()[0]
  except OSError:
    return False
  return b"worker_binary" in cmdline and state != "Z"


def _wait_until_gone(pid: int, timeout: float = 15.0) -> bool:
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if not _is_live_worker(pid):
      return True
    time.sleep(0.1)
  return False


def _ignore_sigint() -> None:
  signal.signal(signal.SIGINT, signal.SIG_IGN)


def _ignored_signals(pid: int) -> int:
  with open(f"/proc/{pid}/status", encoding="ascii") as f:
    return int(next(l for l in f if l.startswith("SigIgn:")).split()[1], 16)


def _start(mode: str, sigint_ignored: bool = False) -> tuple[subprocess.Popen, int, int]:
  """Starts the program; returns it, its pid and its worker's pid once READY.

  `sigint_ignored` starts it the way a non-interactive shell starts a background job
  (`nohup cmd &`): with SIGINT ignored, which its children inherit.
  """
  env = dict(os.environ, PYTHONPATH=_ROOT)
  proc = subprocess.Popen(
      [sys.executable, "-m", "tests.runtime.lifecycle_program", mode],
      cwd=_ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, preexec_fn=_ignore_sigint if sigint_ignored else None)
  line = proc.stdout.readline()
  if not line.startswith("READY"):
    proc.kill()
    _, err = proc.communicate(timeout=_DEADLINE_SECONDS)
    pytest.fail(f"program did not get ready: {line!r}\n{err[-3000:]}")
  _, program_pid, *workers = line.split()
  assert int(program_pid) == proc.pid
  assert len(workers) == 1, line
  worker = int(workers[0])
  assert worker in _children(proc.pid), "the worker must be a child of the program"
  assert _is_live_worker(worker)
  return proc, proc.pid, worker


def _finish(proc: subprocess.Popen) -> tuple[str, str]:
  """Lets the program go on (it waits for a line) and collects its output."""
  # communicate() returns only once every holder of the pipes has closed them: an orphaned
  # worker that inherited them would make this time out.
  try:
    proc.stdin.write("go\n")
    proc.stdin.flush()
  except BrokenPipeError:  # Already killed by the test: fine.
    pass
  return proc.communicate(timeout=_DEADLINE_SECONDS)


@pytest.mark.parametrize("mode", ["exit", "raise"])
def test_worker_stops_when_program_ends(mode):
  proc, _, worker = _start(mode)
  _, err = _finish(proc)
  assert _wait_until_gone(worker)
  if mode == "exit":
    assert proc.returncode == 0, err[-3000:]
  else:
    assert proc.returncode == 1
    assert "deliberate failure" in err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_worker_stops_when_program_is_signalled(signum):
  proc, pid, worker = _start("wait")
  os.kill(pid, signum)
  _, err = _finish(proc)
  assert _wait_until_gone(worker), f"worker {worker} survived {signal.Signals(signum).name}"
  expected = {signal.SIGTERM: 128 + signal.SIGTERM, signal.SIGINT: -signal.SIGINT,  # Python re-raises SIGINT after cleanup.
              signal.SIGKILL: -signal.SIGKILL}[signum]
  assert proc.returncode == expected, err[-3000:]


def test_execution_context_stops_its_worker_on_close():
  proc, _, worker = _start("context")
  out, err = _finish(proc)
  assert proc.returncode == 0, err[-3000:]
  assert out.strip() == "CLOSED", out
  assert not _is_live_worker(worker)


@pytest.mark.parametrize("mode", ["context", "exit"])
def test_background_job_with_sigint_ignored_still_stops_its_worker(mode):
  proc, pid, worker = _start(mode, sigint_ignored=True)
  assert _ignored_signals(pid) & (1 << (signal.SIGINT - 1)), "the program must ignore SIGINT"
  assert not _ignored_signals(worker) & (1 << (signal.SIGINT - 1)), (
      "the worker must not inherit the ignored SIGINT: TFF stops it with SIGINT")
  _, err = _finish(proc)  # Times out if the exit hangs waiting for the worker.
  assert proc.returncode == 0, err[-3000:]
  assert _wait_until_gone(worker)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))



def _federated_sum():
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
  def federated_sum(values):
    return tff.federated_sum(values)

  return federated_sum


def _resident_sum():
  """A stateful process whose state lives in the worker, as training's does."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from dp_fl.execution import resident  # pylint: disable=g-import-not-at-top
  process = tff.aggregators.SumFactory().create(tff.TensorType(np.float32))
  summer = resident.ResidentProcess(process, process.initialize())
  return lambda values: float(summer.next([np.float32(v) for v in values]).outputs[0])


def _kill_workers() -> list[int]:
  pids = runtime.worker_pids()
  for pid in pids:
    os.kill(pid, signal.SIGKILL)
  for pid in pids:
    assert _wait_until_gone(pid)
  return pids


def test_a_lost_worker_is_replaced_and_the_body_rerun():
  """A worker that dies mid-run (the segfault seen under memory pressure) takes the state
  resident in it; that costs one rerun in a fresh context, not the run: the body —
  resumable, like program.run — is called again."""
  attempts, restarts, killed = [], [], []

  def body():
    attempts.append(1)
    resident_sum = _resident_sum()
    assert resident_sum([1, 2]) == 3
    if len(attempts) == 1:
      killed.extend(_kill_workers())
      resident_sum([1, 2])  # Raises: its state went with the worker.
    return runtime.worker_pids()

  live = runtime.run_with_fresh_workers(body, on_restart=restarts.append)
  assert len(attempts) == 2 and len(restarts) == 1
  assert "worker process stopped" in restarts[0] and "attempt 2 of 3" in restarts[0]
  assert killed and live and not set(killed) & set(live)
  assert not runtime.worker_pids()  # The fresh context stopped its worker too.


def test_a_worker_lost_on_the_last_attempt_is_an_environment_error_naming_the_fix():
  def body():
    resident_sum = _resident_sum()
    assert resident_sum([1, 2]) == 3
    _kill_workers()
    resident_sum([1, 2])

  with pytest.raises(Exception) as raised:
    runtime.run_with_fresh_workers(body, attempts=1, on_restart=pytest.fail)
  assert exits.is_worker_lost(raised.value)
  code, message = exits._classify(raised.value, debug=False)
  assert code == exits.ENVIRONMENT
  assert "TFF worker process stopped" in message and "rerun the same command" in message


def test_a_stateless_computation_after_a_crash_gets_a_fresh_worker():
  """TFF's ServiceManager restarts a worker it finds gone; the guard must not turn that into
  a ProcessLookupError (it did: a crashed worker was not one `shutdown_workers` stopped)."""
  federated_sum = _federated_sum()
  with runtime.execution_context():
    assert federated_sum([1, 2]) == 3
    killed = _kill_workers()
    assert federated_sum([3, 4]) == 7
    assert runtime.worker_pids() and not set(killed) & set(runtime.worker_pids())


def test_other_errors_are_not_retried():
  calls = []

  def body():
    calls.append(1)
    raise RuntimeError("a bug, not a lost worker")

  with pytest.raises(RuntimeError, match="a bug"):
    runtime.run_with_fresh_workers(body, on_restart=pytest.fail)
  assert len(calls) == 1
  assert not exits.is_worker_lost(RuntimeError("x")) and not exits.is_worker_lost(
      OSError("unavailable"))
  with pytest.raises(ValueError, match="attempts"):
    runtime.run_with_fresh_workers(lambda: None, attempts=0)


def test_a_nested_context_leaves_the_enclosing_worker_running():
  federated_sum = _federated_sum()
  with runtime.execution_context():
    assert federated_sum([1, 2]) == 3
    outer = runtime.worker_pids()
    with runtime.execution_context():
      assert federated_sum([3, 4]) == 7
      assert len(runtime.worker_pids()) == 2
    assert runtime.worker_pids() == outer
    assert federated_sum([5, 6]) == 11  # The enclosing context still works.
  assert not runtime.worker_pids()
