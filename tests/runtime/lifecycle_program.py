"""A tiny binary for runtime_test: runs a federated computation, then ends as told.

Usage: python -m tests.runtime.lifecycle_program {exit,raise,wait,context}
Prints `READY <own pid> <worker pid>` once the TFF worker is running, then waits for a line on
stdin before ending (so the caller can inspect the running worker first).
"""

from __future__ import annotations

import os
import sys
import time

from dp_fl.execution import runtime


def main(mode: str) -> None:
  runtime.configure_logging(0)
  runtime.install_signal_handlers()
  runtime.install_worker_guard()
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
  def federated_sum(values):
    return tff.federated_sum(values)

  if mode == "context":
    with runtime.execution_context():
      assert federated_sum([1, 2]) == 3
      print("READY", os.getpid(), *runtime.worker_pids(), flush=True)
      sys.stdin.readline()
    print("CLOSED", *runtime.worker_pids(), flush=True)
    return
  # The default context that `import tensorflow_federated` installed: only the atexit hook,
  # the signal handlers and PR_SET_PDEATHSIG stand between its worker and an orphan.
  assert federated_sum([1, 2]) == 3
  print("READY", os.getpid(), *runtime.worker_pids(), flush=True)
  sys.stdin.readline()
  if mode == "exit":
    return
  if mode == "raise":
    raise RuntimeError("deliberate failure from lifecycle_program")
  if mode == "wait":
    time.sleep(600)
    return
  raise ValueError(f"unknown mode {mode!r}")


if __name__ == "__main__":
  main(sys.argv[1])
