"""Process-level runtime for dp_fl binaries and tests: logging and TFF execution contexts.

TFF's C++ execution context runs computations in a child process, `worker_binary`, which TFF
starts lazily with the parent's stdout/stderr and stops only from a `__del__` that often never
runs. An orphaned worker keeps the parent's pipes open, so `python prog.py | cat` never ends.
This module is the one place where dp_fl sets up execution contexts, and it guarantees that no
worker outlives the Python process that started it:

* every worker is started with `PR_SET_PDEATHSIG = SIGKILL` (Linux), so the kernel kills it even
  when the parent is SIGKILLed;
* every worker is tracked, and killed from an `atexit` hook (normal exit and uncaught exceptions)
  and when an execution context opened with `execution_context()` is closed;
* `install_signal_handlers()` turns SIGTERM (and SIGHUP) into `SystemExit`, so the cleanup above
  runs instead of the default silent death; SIGINT already raises `KeyboardInterrupt`;
* by default the worker's output goes to /dev/null rather than to the parent's pipes.

Usage in a binary (flags parsed with argparse in `main`)::

    from dp_fl.execution import runtime

    def main(argv=None):
      args = parse_args(argv)
      runtime.configure_logging(args.verbosity)
      runtime.install_signal_handlers()
      with runtime.execution_context():
        ...  # build and run TFF computations

`configure_logging` must run before TensorFlow is imported to silence TF's C++ logging; the
module itself imports neither TensorFlow nor TFF at import time.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import types
import warnings
from importlib import metadata
from typing import Any, Callable, Iterator, Optional, TypeVar

import dp_fl
from dp_fl import exits

_T = TypeVar("_T")

_PR_SET_PDEATHSIG = 1
_WORKER_STOP_TIMEOUT_SECONDS = 5.0

_lock = threading.Lock()
_workers: list[subprocess.Popen] = []
_worker_output_visible = False
_guard_installed = False


def _set_parent_death_signal() -> None:
  """Runs in the forked child before exec: SIGKILL this process when its parent dies.

  Also gives the worker the default SIGINT/SIGTERM action: a job started in the background
  by a non-interactive shell (`nohup ... &`, `cmd &` in a script) inherits SIGINT *ignored*,
  and TFF stops its worker with SIGINT and then waits for it without a time limit — the
  job would hang at exit. (`signal.signal` cannot be used here: TFF may start the worker
  from a non-main thread.)
  """
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
    libc.signal.restype = ctypes.c_void_p
    for signum in (signal.SIGINT, signal.SIGTERM):
      libc.signal(int(signum), None)  # SIG_DFL is the null handler.
  except (OSError, AttributeError):  # Not Linux: the atexit hook still applies.
    pass
  # Also leave the parent's process group, so a Ctrl-C in a terminal reaches only the parent,
  # which then shuts the worker down in order.
  os.setpgrp()


class _GuardedPopen(subprocess.Popen):
  """`subprocess.Popen` for TFF's worker: bound to the parent's life and tracked."""

  def __init__(self, args, *popen_args, **kwargs):
    kwargs["preexec_fn"] = _set_parent_death_signal
    if not _worker_output_visible:
      kwargs["stdout"] = subprocess.DEVNULL
      kwargs["stderr"] = subprocess.DEVNULL
    kwargs["stdin"] = subprocess.DEVNULL
    kwargs["close_fds"] = True
    super().__init__(args, *popen_args, **kwargs)
    with _lock:
      _workers.append(self)
      _started_worker_pids.add(self.pid)


_started_worker_pids: set[int] = set()


def start_worker_process(args: list[str], **popen_kwargs: Any) -> subprocess.Popen:
  """Starts a TFF worker (or any child that must not outlive this process) as TFF's own
  workers are started here: SIGKILLed when this process dies, in its own process group,
  stopped by `shutdown_workers` and at exit (`scripts/worker`, tests, benchmarks)."""
  return _GuardedPopen(args, **popen_kwargs)


def _guarded_subprocess_module() -> types.ModuleType:
  module = types.ModuleType("subprocess")
  module.__dict__.update(subprocess.__dict__)
  module.Popen = _GuardedPopen
  return module


def _kill_unless_already_stopped(pid: int, signum: int) -> None:
  """`os.kill` for TFF's ServiceManager: a worker that is already gone is not an error.

  Gone because `shutdown_workers` stopped it, or because it crashed — then TFF's
  ServiceManager signals it before starting a fresh one, and a ProcessLookupError there would
  turn TFF's own recovery into a failure.
  """
  try:
    os.kill(pid, signum)
  except ProcessLookupError:
    if pid not in _started_worker_pids:
      raise


def _guarded_os_module() -> types.ModuleType:
  module = types.ModuleType("os")
  module.__dict__.update(os.__dict__)
  module.kill = _kill_unless_already_stopped
  return module


def install_worker_guard() -> None:
  """Makes every TFF C++ worker started from now on (and lazily by existing contexts) guarded.

  TFF 0.87's `local_cpp_executor_factory` looks `subprocess.Popen` up in its module when it
  starts a worker, so replacing that module reference covers the default context that
  `import tensorflow_federated` installs as well as any created later. Idempotent.
  """
  global _guard_installed
  with _lock:
    if _guard_installed:
      return
    from tensorflow_federated.python.core.impl.executor_stacks import executor_factory  # pylint: disable=g-import-not-at-top
    executor_factory.subprocess = _guarded_subprocess_module()
    # TFF's ServiceManager signals its worker by pid (in __del__, and before replacing a
    # crashed one); a worker already gone would raise a spurious ProcessLookupError.
    executor_factory.os = _guarded_os_module()
    _guard_installed = True


def _shutdown_at_exit() -> None:
  """Stops our workers, then settles TFF's ServiceManager objects before shutdown.

  A ServiceManager still alive at interpreter shutdown runs its `__del__` after module
  globals are cleared and prints "Exception ignored ... 'NoneType' object has no attribute
  'Popen'" — even one that never started a worker (the default context created by
  `import tensorflow_federated`). Here, while modules are intact, any worker a manager still
  holds is stopped the way its `__del__` would, and the manager's `__del__` is retired.
  Registered when this module is imported; does nothing unless TFF was imported.
  """
  shutdown_workers()
  if "tensorflow_federated" not in sys.modules:
    return
  import gc  # pylint: disable=g-import-not-at-top
  for obj in gc.get_objects():
    kind = type(obj)
    if kind.__name__ != "ServiceManager" or not kind.__module__.endswith("executor_factory"):
      continue
    proc = getattr(obj, "_process", None)
    if isinstance(proc, subprocess.Popen) and proc.poll() is None:
      with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
      try:
        proc.wait(timeout=_WORKER_STOP_TIMEOUT_SECONDS)
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    obj._process = None  # pylint: disable=protected-access
    kind.__del__ = _settled_del  # Its own would look up the cleared `subprocess` global.


def _settled_del(self) -> None:  # pylint: disable=unused-argument
  """`__del__` of a ServiceManager whose worker `_shutdown_at_exit` already stopped."""


atexit.register(_shutdown_at_exit)


def worker_pids() -> list[int]:
  """Pids of the TFF workers this process started that are still running."""
  with _lock:
    return [p.pid for p in _workers if p.poll() is None]


def shutdown_workers(keep: frozenset = frozenset()) -> None:
  """Stops the TFF workers this process started: SIGINT, then SIGKILL after a grace period.

  Args:
    keep: Pids to leave running (an enclosing execution context's workers).
  """
  with _lock:
    workers = [p for p in _workers if p.pid not in keep]
    _workers[:] = [p for p in _workers if p.pid in keep]
  for proc in workers:
    if proc.poll() is None:
      with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
  for proc in workers:
    try:
      proc.wait(timeout=_WORKER_STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
      with contextlib.suppress(ProcessLookupError):
        proc.kill()
      proc.wait()


def compile_for_cpp_worker(computation: Any) -> Any:
  """How dp_fl's execution context compiles a computation for TFF's C++ worker: the secure-sum
  intrinsics (cpSGD's secure modular sum, dp_fl/aggregators/cpsgd.py) become plain sums —
  this runtime has no secure aggregation to run them; in production the same computation's
  sums run under secure aggregation — then TFF's native compilation."""
  from tensorflow_federated.python.core.backends.native import compiler  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.backends.test import compiler as test_compiler  # pylint: disable=g-import-not-at-top
  return compiler.desugar_and_transform_to_native(
      test_compiler.replace_secure_intrinsics_with_bodies(computation))


@contextlib.contextmanager
def execution_context(
    default_num_clients: int = 0,
    max_concurrent_computation_calls: Optional[int] = None,
) -> Iterator[None]:
  """Installs TFF's synchronous local C++ execution context for the `with` block.

  The worker is guarded (see module docstring) and stopped when the block ends, normally or by
  an exception; the previous default context is restored (contexts nest: an enclosing
  context's worker is left running).

  Args:
    default_num_clients: Number of clients assumed when a computation's arguments don't say.
    max_concurrent_computation_calls: Limit on concurrent calls in the C++ runtime; <= 0 means
      no limit; None (default) means one per CPU core. TFF's own default (no limit) runs every
      client of a round at once: on 2 cores, 10 StackOverflow-LSTM clients of 16 batches
      then took 16–42 s per round instead of a steady 17–20 s (and 1.4 s instead of 1.2 s
      at one batch each; docs/BENCHMARKS.md).

  Yields:
    None.
  """
  install_worker_guard()
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top

  stack = context_stack_impl.context_stack
  previous = stack.current
  if max_concurrent_computation_calls is None:
    max_concurrent_computation_calls = os.cpu_count() or -1
  from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.execution_contexts import sync_execution_context  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executor_stacks import executor_factory  # pylint: disable=g-import-not-at-top
  # TFF's local C++ context (as tff.backends.native builds it), compiling as
  # `compile_for_cpp_worker` does.
  context = sync_execution_context.SyncExecutionContext(
      executor_fn=executor_factory.local_cpp_executor_factory(
          default_num_clients=default_num_clients,
          max_concurrent_computation_calls=max_concurrent_computation_calls),
      compiler_fn=compile_for_cpp_worker,
      transform_args=tensorflow_computation.transform_args,
      transform_result=tensorflow_computation.transform_result)
  enclosing_workers = frozenset(worker_pids())
  stack.set_default_context(context)
  try:
    yield
  finally:
    # Workers first: dropping the context runs TFF's ServiceManager.__del__, which signals
    # its worker and waits for it with no time limit. Only this block's workers: an
    # enclosing context (e.g. a test's) keeps its own.
    shutdown_workers(keep=enclosing_workers)
    stack.set_default_context(previous)


def parse_workers(text: str) -> tuple[str, ...]:
  """`--workers` as ("host:port", ...); errors name the flag, the entry and the fix."""
  entries = [e.strip() for e in str(text).split(",") if e.strip()]
  if not entries:
    raise ValueError(f"--workers={text!r} names no worker; pass HOST:PORT[,HOST:PORT...], e.g. "
                     "--workers=localhost:8000,localhost:8001.")
  for entry in entries:
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
      raise ValueError(f"--workers: {entry!r} is not HOST:PORT with a port in 1..65535; pass "
                       "e.g. --workers=localhost:8000,10.0.0.7:8000.")
  if len(set(entries)) != len(entries):
    raise ValueError(f"--workers={text!r} lists a worker twice; list each once.")
  return tuple(entries)


DEFAULT_WORKER_TIMEOUT_SECONDS = 600.0
"""Deadline of every call to a remote worker (`--worker_timeout_seconds`)."""


@dataclasses.dataclass(frozen=True)
class TlsFiles:
  """TLS for the channels to remote workers (`--worker_tls_*`): PEM files of the CA that
  signed the workers' certificates and, for mutual TLS, this process's certificate and key.

  TFF's worker_binary serves plaintext gRPC only; TLS is terminated in front of it on the
  worker host (a sidecar such as ghostunnel, stunnel or Envoy; docs/DISTRIBUTED.md). The
  host in `--workers` must then be a name or address its certificate holds.
  """
  ca_cert: str
  client_cert: Optional[str] = None
  client_key: Optional[str] = None

  def __post_init__(self):
    if (self.client_cert is None) != (self.client_key is None):
      given = "the certificate" if self.client_key is None else "the key"
      raise ValueError("--worker_tls_client_cert and --worker_tls_client_key go together (mutual "
                       f"TLS); got only {given}. Pass both, or neither for server-authenticated "
                       "TLS.")
    for flag, path in self._files():
      _read_pem(flag, path)
    self._check_with_ssl()

  def _check_with_ssl(self) -> None:
    """Parses the files as TLS will: the CA as certificates, the client pair as a certificate
    and its matching key (a key given as the CA, a truncated PEM or a mismatched pair would
    otherwise surface only as an unreachable worker)."""
    import ssl  # pylint: disable=g-import-not-at-top
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
      context.load_verify_locations(cafile=self.ca_cert)
    except (ssl.SSLError, ValueError) as e:
      raise ValueError(f"--worker_tls_ca_cert={self.ca_cert!r} holds no usable CA certificate "
                       f"({e}); pass the PEM certificate(s) of the CA that signed the workers' "
                       "TLS certificates.") from None
    if self.client_cert is not None:
      try:
        context.load_cert_chain(self.client_cert, self.client_key)
      except (ssl.SSLError, ValueError) as e:
        raise ValueError(
            f"--worker_tls_client_cert={self.client_cert!r} and --worker_tls_client_key="
            f"{self.client_key!r} are not a matching PEM certificate and private key ({e}); "
            "pass this process's certificate and the (unencrypted) key it was issued "
            "for.") from None

  def _files(self) -> list[tuple[str, str]]:
    return [(flag, path) for flag, path in (
        ("--worker_tls_ca_cert", self.ca_cert), ("--worker_tls_client_cert", self.client_cert),
        ("--worker_tls_client_key", self.client_key)) if path is not None]

  def credentials(self) -> Any:
    """`grpc.ChannelCredentials` from the files (read now: a rotated certificate is picked up
    by the next connection)."""
    import grpc  # pylint: disable=g-import-not-at-top
    pem = {flag: _read_pem(flag, path) for flag, path in self._files()}
    return grpc.ssl_channel_credentials(
        root_certificates=pem["--worker_tls_ca_cert"],
        private_key=pem.get("--worker_tls_client_key"),
        certificate_chain=pem.get("--worker_tls_client_cert"))


def _read_pem(flag: str, path: str) -> bytes:
  try:
    with open(path, "rb") as f:
      data = f.read()
  except OSError as e:
    raise ValueError(f"{flag}={path!r} cannot be read ({e.strerror}); pass a PEM file.") from e
  if b"-----BEGIN " not in data:
    raise ValueError(f"{flag}={path!r} is not a PEM file (no '-----BEGIN' line); pass the "
                     "PEM-encoded certificate or key.")
  return data


# The version stamp a dp_fl worker carries (`scripts/worker` writes it into the worker's working
# directory, where a probe computation run on the worker reads it: `remote_workers`). TFF's
# worker_binary has no version RPC, and the graphs it runs are the client's, so this is how a
# training process learns what a remote worker runs.
WORKER_STAMP_FILE = "dp_fl_worker_stamp.json"
_STAMPED_DISTRIBUTIONS = ("tensorflow-federated", "tensorflow")


def worker_stamp() -> dict[str, str]:
  """What a worker and the training process it serves must share: the dp_fl release and the
  TFF and TensorFlow versions (the executor protocol and the kernels that run the graphs)."""
  return {"dp_fl": dp_fl.__version__,
          **{name: metadata.version(name) for name in _STAMPED_DISTRIBUTIONS}}


def write_worker_stamp(directory: str, stamp: Optional[dict[str, str]] = None) -> str:
  """Writes `stamp` (default: this process's `worker_stamp()`) as `directory/WORKER_STAMP_FILE`;
  returns its path."""
  path = os.path.join(directory, WORKER_STAMP_FILE)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(worker_stamp() if stamp is None else stamp, f, sort_keys=True)
  return path


def run_with_fresh_workers(body: Callable[[], _T], *, attempts: int = 3,
                           on_restart: Callable[[str], None] = print) -> _T:
  """Runs `body()` inside `execution_context()`; a lost worker gets a fresh context and a rerun.

  For resumable bodies only — `program.run` resumes bitwise from the run directory's last
  checkpoint (same cohorts, same noise), so a rerun releases nothing the lost attempt had not
  (its uncommitted round was never released). Any other error, or a worker lost on the last
  of `attempts`, propagates.

  Args:
    body: The work; called once per attempt, each in a fresh execution context.
    attempts: How many contexts to try (>= 1).
    on_restart: Told, in one line, of each restart.

  Returns:
    What `body` returned.
  """
  if attempts < 1:
    raise ValueError(f"`attempts` must be >= 1; got {attempts!r}.")
  for attempt in range(1, attempts + 1):
    try:
      with execution_context():
        return body()
    except Exception as e:  # pylint: disable=broad-except
      if attempt == attempts or not exits.is_worker_lost(e):
        raise
      on_restart(f"the TFF worker process stopped ({type(e).__name__}); starting a fresh one "
                 f"and resuming from the last checkpoint (attempt {attempt + 1} of {attempts})")
  raise AssertionError("unreachable")


def _raise_system_exit(signum: int, frame) -> None:  # pylint: disable=unused-argument
  # Restore the default so a second signal ends the process even if cleanup hangs.
  signal.signal(signum, signal.SIG_DFL)
  raise SystemExit(128 + signum)


def install_signal_handlers() -> None:
  """Turns SIGTERM and SIGHUP into `SystemExit(128 + signum)` in the main thread.

  `finally` blocks, context managers and `atexit` hooks then run, stopping TFF workers. Only
  call from the main thread of a binary (Python delivers signals there).
  """
  for signum in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(signum, _raise_system_exit)


def verbosity_from_flags() -> int:
  """Reads absl's own `--verbosity` (`-v`) flag as a dp_fl verbosity for `configure_logging`.

  Not given: 0 (quiet). Given: absl's -1 (warning) -> 1, 0 (info) -> 2, >= 1 (debug) -> 3.
  Call only after flags are parsed (inside `main`).
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  flag = flags.FLAGS["verbosity"]
  if not flag.present:
    return 0
  return min(3, max(1, int(flag.value) + 2))


def configure_logging(verbosity: int = 0) -> None:
  """Sets how much TensorFlow/TFF/absl log; 0 (default) keeps only errors.

  Call before TensorFlow is imported for the C++ side to take effect.

  Args:
    verbosity: 0 = quiet (Python-side errors only; TF's C++ log off), 1 = warnings (and TF's
      C++ errors), 2 = info, 3 = debug; values >= 1 also show the TFF worker's own output.
  """
  global _worker_output_visible
  if verbosity < 0:
    raise ValueError(f"`verbosity` must be >= 0; got {verbosity!r}.")
  _worker_output_visible = verbosity >= 1
  # Level 3 also hides the CUDA-plugin registration errors TF 2.14 prints on every import.
  os.environ["TF_CPP_MIN_LOG_LEVEL"] = str(max(0, 3 - verbosity))
  python_level = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO}.get(verbosity, logging.DEBUG)
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  absl_logging.set_verbosity(
      {logging.ERROR: "error", logging.WARNING: "warning", logging.INFO: "info"}.get(python_level, "debug"))
  logging.getLogger("tensorflow").setLevel(python_level)
  if verbosity == 0:
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="tensorflow.*")
  if "tensorflow" in sys.modules:
    sys.modules["tensorflow"].get_logger().setLevel(python_level)
