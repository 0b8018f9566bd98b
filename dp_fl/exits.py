"""Exit codes of dp_fl's binaries, and the one place an exception becomes a user's message.

| code | meaning                                                                             |
|------|-------------------------------------------------------------------------------------|
| 0    | completed: the job did all it was asked                                             |
| 1    | failed: an unexpected error (a bug); `--debug` shows the traceback. A training job  |
|      | has checkpointed its last committed round: rerunning the command resumes there.     |
| 2    | bad input: a flag, file or data value (the message names it, its value, the fix)     |
| 3    | environment: disk full, permission denied, read-only or missing directory, out of memory |
| 4    | busy: another process holds the run directory's lock (the message names its pid)     |
| 5    | stopped: the target ε was reached (`--target_epsilon`); the privacy budget is spent  |
| 6    | stopped: non-finite updates (`--on_nonfinite`); lower the learning rates             |
| 7    | stopped: no eligible client for many rounds in a row (availability, timer, cohort)   |
| 8    | audit failed (`--audit_strict`): the canaries' lower bound exceeds the accounted ε    |
| 75   | interrupted (SIGTERM/SIGINT) or paused: checkpointed; rerun the command to resume    |

75 is sysexits' EX_TEMPFAIL, which job schedulers treat as "retry later". A user mistake or
an environment problem never prints a traceback unless `--debug` is given.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import sys
import traceback
from typing import Any, Callable, Optional, TextIO

COMPLETED = 0
FAILED = 1
BAD_INPUT = 2
ENVIRONMENT = 3
BUSY = 4
TARGET_EPSILON = 5
NONFINITE = 6
NO_CLIENTS = 7
AUDIT_FAILED = 8
INTERRUPTED = 75

# Why a training run stopped (`policies.COMPLETED`, ...) -> exit code.
STOP_CODES = {"completed": COMPLETED, "target_epsilon": TARGET_EPSILON,
              "nonfinite": NONFINITE, "no_clients": NO_CLIENTS, "signal": INTERRUPTED,
              "paused": INTERRUPTED}


class BusyError(RuntimeError):
  """Another process holds a resource this one needs exclusively (a run directory)."""


class RemoteWorkerError(RuntimeError):
  """A remote TFF worker (`--workers`) failed, hung past its deadline, or cannot be reached.

  Not retried (unlike a lost local worker): the job stops naming the worker; nothing of the
  round was applied, so its last checkpoint is intact and a rerun resumes exactly.
  """

  def __init__(self, address: str, what: str):
    super().__init__(f"worker {address} {what}")
    self.address = address


def is_worker_lost(error: BaseException) -> bool:
  """Whether `error` says the TFF worker process went away mid-computation (crashed, killed).

  TFF reports a worker it can no longer reach as a `RetryableError` (over gRPC: status
  UNAVAILABLE), raised from whatever computation was running. The state the worker held (the
  training state is resident there, `dp_fl/execution/resident.py`) is lost with it; what was
  checkpointed is not (`dp_fl.execution.runtime.run_with_fresh_workers` retries on it). Never
  imports TFF: an error from a process that has not imported TFF is not TFF's.
  """
  errors = sys.modules.get("tensorflow_federated.python.core.impl.executors.executors_errors")
  if errors is not None and isinstance(error, errors.RetryableError):
    return True
  grpc = sys.modules.get("grpc")
  if grpc is not None and isinstance(error, grpc.RpcError) and callable(
      getattr(error, "code", None)):
    with contextlib.suppress(Exception):
      return error.code() == grpc.StatusCode.UNAVAILABLE
  return False


_OS_FIXES = {
    errno.ENOSPC: "free space on that disk or write somewhere else",
    errno.EDQUOT: "free space within your quota or write somewhere else",
    errno.EACCES: "make it writable (and its directory) or choose another location",
    errno.EPERM: "make it writable (and its directory) or choose another location",
    errno.EROFS: "the file system is read-only: choose a location on a writable one",
    errno.ENOENT: "check the path (a directory on it does not exist)",
    errno.ENOTDIR: "a part of the path is a file, not a directory: fix the path",
    errno.EISDIR: "the path is a directory; give a file",
}


def describe_os_error(error: OSError) -> str:
  """One line naming the file, what the OS said and the fix."""
  where = error.filename if error.filename is not None else "(no file named)"
  if getattr(error, "filename2", None):
    where = f"{where} -> {error.filename2}"
  reason = error.strerror or str(error)
  fix = _OS_FIXES.get(error.errno, "check the path and its permissions")
  return f"{reason}: {where}. Fix: {fix}."


def parse_bool(text: str) -> bool:
  """An argparse `type` for true/false flags (1/0, yes/no, on/off too)."""
  lowered = str(text).lower()
  if lowered in ("1", "true", "yes", "on"):
    return True
  if lowered in ("0", "false", "no", "off"):
    return False
  raise argparse.ArgumentTypeError(f"expected true or false; got {text!r}")


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--debug", action="store_true",
                      help="print the traceback of any error (for bug reports)")


def guarded(body: Callable[[], int], *, debug: bool = False,
            stream: Optional[TextIO] = None) -> int:
  """Runs a binary's `body` and turns what it raises into a message and an exit code.

  ValueError (a flag, file or data value) -> 2, OSError -> 3, BusyError -> 4,
  KeyboardInterrupt -> 75, anything else -> 1 ("internal error", with the exception's type).
  """
  stream = stream if stream is not None else sys.stderr
  try:
    return body()
  except BaseException as e:  # pylint: disable=broad-except
    if isinstance(e, SystemExit):
      raise
    code, message = _classify(e, debug)
    print(message, file=stream)
    if debug:
      traceback.print_exc(file=stream)
    return code


def add_report_flags(parser: argparse.ArgumentParser) -> None:
  """`--format table|json` and `--debug`: the output flags of a tool using `report_main`."""
  parser.add_argument("--format", choices=("table", "json"), default="table")
  add_debug_flag(parser)


def report_main(args: argparse.Namespace, make_report: Callable[[], Any],
                format_table: Callable[[Any], str]) -> int:
  """The body of a command-line tool that computes one report: `make_report()` under
  `guarded`, printed as JSON (`args.format == "json"`) or as `format_table(report)`."""

  def body() -> int:
    report = make_report()
    print(json.dumps(report, indent=1) if args.format == "json" else format_table(report))
    return COMPLETED

  return guarded(body, debug=args.debug)


def _classify(error: BaseException, debug: bool) -> tuple[int, str]:
  """(exit code, message) of an exception a binary's body raised."""
  if isinstance(error, KeyboardInterrupt):
    return INTERRUPTED, "interrupted."
  if isinstance(error, BusyError):
    return BUSY, f"error: {error}"
  if isinstance(error, ValueError):
    return BAD_INPUT, f"error: {error}"
  if isinstance(error, MemoryError) or type(error).__name__ == "ResourceExhaustedError":
    # An allocation the up-front estimates (dp_fl/resources.py) did not foresee.
    return ENVIRONMENT, (f"error: out of memory ({type(error).__name__}: "
                         f"{_first_line(error, 200)}). Lower the sizes that set it (model, "
                         "batch, sequence length, cohort, --rounds), or run on a machine with "
                         "more memory; the checks made before the job started did not foresee "
                         "it: please report it with --debug.")
  if isinstance(error, OSError):
    return ENVIRONMENT, f"error: {describe_os_error(error)}"
  if isinstance(error, RemoteWorkerError):
    return ENVIRONMENT, (f"error: {_first_line(error, 300)}. What was checkpointed is intact: "
                         "bring the worker back (or drop it from --workers) and rerun the same "
                         "command to resume from the last checkpoint")
  if is_worker_lost(error):
    return ENVIRONMENT, ("error: the TFF worker process stopped (crashed or was killed: "
                         f"{_first_line(error, 200)}); what was checkpointed is intact — rerun "
                         "the same command to resume from the last checkpoint (if it recurs, "
                         "check memory: `dmesg`, --memory_budget_gb)")
  return FAILED, (f"internal error: {type(error).__name__}: {_first_line(error)}"
                  + ("" if debug else
                     " (rerun with --debug for the traceback; please report it)"))


def _first_line(error: BaseException, limit: int = 500) -> str:
  text = str(error).strip().splitlines()
  line = text[0] if text else ""
  return line if len(line) <= limit else line[:limit] + "…"
