"""No TFF worker_binary outlives the process that started it (dp_fl.runtime).

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
