"""Serves a TFF executor on this host: TFF's C++ `worker_binary`, bound to this launcher's life.

  ./bazelw run //scripts:worker -- --port=8000 [--ready_file=/tmp/w.ready] [--format json]
  .venv/bin/python -m scripts.worker --port=8000

A training process started with `--workers=host1:8000,host2:8000` (docs/DISTRIBUTED.md) sends
its round's client work to such workers over TFF's gRPC executor protocol. The server is the
`worker_binary` shipped in the tensorflow-federated wheel (`<tff>/data/worker_binary`); this
launcher adds dp_fl's lifecycle guarantees (`dp_fl/execution/runtime.py`):

* the worker is started by `runtime`'s guarded Popen: the kernel SIGKILLs it when the launcher
  dies, even by SIGKILL (`PR_SET_PDEATHSIG`), it leaves the launcher's process group (a Ctrl-C
  in a terminal reaches only the launcher), and it is stopped by `runtime.shutdown_workers`
  (SIGINT, then SIGKILL after a grace period) from a `finally` block and the `atexit` hook;
* SIGTERM or SIGINT (`docker stop`, a Kubernetes pod deletion, Ctrl-C) stops the worker and the
  launcher exits 75 (dp_fl's "interrupted": rerunning the command serves again); a second
  signal ends the launcher at once (the worker still dies with it); SIGHUP also stops it;
* a worker that dies on its own (crash, OOM killer, `kill`) makes the launcher exit 3 with a
  message naming the port and the worker's exit status — never a launcher that serves nothing;
* the worker runs in a private temporary directory holding dp_fl's version stamp (the dp_fl
  release, TFF and TensorFlow versions: `runtime.worker_stamp`); a training process reads it
  through the worker and refuses a worker of another version
  (`dp_fl/execution/remote_workers.py`).

**Network exposure (measured).** `worker_binary` has no bind-address flag and no TLS: it
listens on every interface of the host (`[::]:PORT`, dual-stack) and its gRPC channel is
unauthenticated and unencrypted. `--listen` therefore accepts only what can be honoured:
`127.0.0.1` / `localhost` (the default: the worker is *meant* for local use, and a warning says
that it is nevertheless reachable on every interface unless a firewall or a container network
restricts it) and `0.0.0.0` (every interface, on purpose: a worker host on a private network).
Any other address is refused (exit 2) rather than pretending to bind it.

Output: one status line on stdout once the worker accepts connections,

  dp_fl worker: serving TFF executor on port 8000 (dp_fl 0.2.0, tensorflow-federated 0.87.0, ...)

or, with `--format json`, one JSON object per line: that status (`"status": "serving"`, with
the worker's pid) and, when the launcher stops, a final one (`"stopped"` or `"worker_exited"`).
Warnings and errors go to stderr.

Exit codes (`dp_fl/exits.py`): 2 a bad flag (the message names it: --port outside 1..65535 or
already in use, --listen not one of the above), 3 the worker could not be started, did not
accept connections within --ready_timeout_s, or died on its own, 75 stopped by a signal.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Optional, Sequence

from dp_fl import _checks
from dp_fl import exits
from dp_fl import files
from dp_fl.execution import runtime
from dp_fl.training import policies

_LOOPBACK = ("127.0.0.1", "localhost")
_ALL_INTERFACES = "0.0.0.0"
_PROBE_INTERVAL_S = 0.1
_POLL_INTERVAL_S = 0.2


class WorkerExited(RuntimeError):
  """The worker process ended without being asked to."""

  def __init__(self, port: int, returncode: int, before_ready: bool):
    self.port = port
    self.returncode = returncode
    when = "before accepting connections" if before_ready else "unexpectedly"
    super().__init__(
        f"the TFF worker on port {port} exited {when} with {describe_exit_status(returncode)}")


class WorkerNotReady(RuntimeError):
  """The worker is running but did not accept connections in time."""


def describe_exit_status(returncode: int) -> str:
  """`Popen.returncode` in words: "exit status 1", "signal SIGKILL (-9)"."""
  if returncode < 0:
    try:
      name = signal.Signals(-returncode).name
    except ValueError:
      name = "an unknown signal"
    return f"signal {name} ({returncode})"
  return f"exit status {returncode}"


def worker_binary_path() -> str:
  """TFF's C++ executor server, `<tensorflow_federated>/data/worker_binary`, without importing
  TFF (which would load TensorFlow into this launcher for nothing)."""
  spec = importlib.util.find_spec("tensorflow_federated")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        errno.ENOENT, "tensorflow_federated is not installed in this Python environment "
        "(run ./bazelw once, or install requirements-nodeps.lock)", "tensorflow_federated")
  path = os.path.join(list(spec.submodule_search_locations)[0], "data", "worker_binary")
  if not os.access(path, os.X_OK):
    raise FileNotFoundError(
        errno.ENOENT, "TFF's worker_binary is missing or not executable (reinstall "
        "tensorflow-federated from requirements-nodeps.lock)", path)
  return path


def check_listen(listen: str) -> str:
  """`--listen` as what the worker will really do: "loopback" or "all"; ValueError otherwise."""
  if listen in _LOOPBACK:
    return "loopback"
  if listen == _ALL_INTERFACES:
    return "all"
  raise ValueError(
      f"`--listen` must be 127.0.0.1, localhost or 0.0.0.0; got {listen!r}. TFF's C++ "
      "worker_binary has no bind-address flag: it always listens on every interface of this "
      "host, so dp_fl cannot restrict it to one address. Use --listen=0.0.0.0 on a private "
      "network, or keep the default 127.0.0.1 and restrict access with a firewall, a container "
      "network or a Kubernetes NetworkPolicy (docs/DISTRIBUTED.md, Security).")


def check_port_available(port: int) -> int:
  """`--port` if no process listens on it (a trial bind on every interface, as the worker
  binds); ValueError naming the flag otherwise.

  The trial socket sets SO_REUSEADDR (sockets in TIME_WAIT do not count) but not SO_REUSEPORT:
  gRPC sets SO_REUSEPORT, so a second worker_binary would share the port of a running one and
  split its connections between them; the trial bind refuses that too.
  """
  port = _checks.check_in_range("--port", port, 1, 65535, integer=True)
  try:
    probe = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    address = ("::", port)
  except OSError:  # No IPv6 on this host: gRPC falls back to 0.0.0.0 as well.
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    address = ("0.0.0.0", port)
  with probe:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      probe.bind(address)
      probe.listen(1)
    except OSError as e:
      if e.errno == errno.EADDRINUSE:
        raise ValueError(
            f"`--port` {port} is already in use on this host (`ss -ltnp 'sport = :{port}'` "
            "names the process); stop that process or choose another port.") from None
      if e.errno in (errno.EACCES, errno.EPERM):
        raise ValueError(
            f"`--port` {port} needs privileges this user lacks (ports below 1024 need root or "
            "CAP_NET_BIND_SERVICE); choose a port >= 1024.") from None
      raise
  return port


def start_worker(binary: str, port: int, max_concurrent_computation_calls: int,
                 run_dir: str, stamp: Optional[dict[str, str]] = None) -> subprocess.Popen:
  """Starts `worker_binary` through dp_fl.execution.runtime's guarded Popen: parent-death
  SIGKILL, its own process group, tracked for `runtime.shutdown_workers` and the `atexit` hook.

  It runs in `run_dir`, where dp_fl's version stamp is written first (`stamp`, default this
  environment's `runtime.worker_stamp()`): training processes read it back through the worker
  and refuse a worker of another version (`dp_fl/execution/remote_workers.py`).

  Its log goes to this launcher's stderr (its stdout too, so that `--format json` output stays
  clean) when `runtime.configure_logging` was given a verbosity >= 1, else to /dev/null.
  """
  args = [binary, f"--port={port}",
          f"--max_concurrent_computation_calls={max_concurrent_computation_calls}"]
  runtime.write_worker_stamp(run_dir, stamp)
  # runtime's guard is the one place dp_fl binds a worker to its parent's life.
  return runtime.start_worker_process(args, stdout=sys.stderr.fileno(), cwd=run_dir)


def wait_until_ready(proc: subprocess.Popen, port: int, timeout_s: float,
                     stop: policies.StopSignal) -> bool:
  """Probes 127.0.0.1:port with TCP connects until the worker accepts one.

  Returns:
    True when it accepts; False when a stop signal arrived first.

  Raises:
    WorkerExited: It died first.
    WorkerNotReady: Still not accepting after `timeout_s` seconds.
  """
  deadline = time.monotonic() + timeout_s
  while True:
    if stop.signum is not None:
      return False
    if proc.poll() is not None:
      raise WorkerExited(port, proc.returncode, before_ready=True)
    with contextlib.suppress(OSError):
      with socket.create_connection(("127.0.0.1", port), timeout=1.0):
        return True
    if time.monotonic() > deadline:
      raise WorkerNotReady(
          f"the TFF worker on port {port} (pid {proc.pid}) did not accept connections within "
          f"--ready_timeout_s={timeout_s:g} s; it was stopped (its own log, if any, is above "
          "on stderr unless -v 0 was given).")
    time.sleep(_PROBE_INTERVAL_S)


def exposure_warning(listen_mode: str, port: int) -> str:
  """The stderr warning printed before the worker starts (docs/DISTRIBUTED.md, Security)."""
  rule = "=" * 78
  if listen_mode == "loopback":
    head = ("WARNING: --listen=127.0.0.1 cannot be honoured: TFF's worker_binary has no "
            f"bind-address flag and listens on EVERY interface of this host (*:{port}). It is "
            "reachable from any network this host is on unless a firewall or a "
            "container/cluster network restricts it.")
  else:
    head = f"WARNING: the TFF worker listens on every interface of this host (*:{port})."
  body = ("Its gRPC channel is unauthenticated and unencrypted: whoever can reach the port can "
          "run any TFF computation here and read the client data and un-noised model updates "
          "it carries. Run workers only on a private network (docs/DISTRIBUTED.md, Security).")
  return f"{rule}\n{head}\n{body}\n{rule}"


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--port", type=int, required=True,
                      help="port the worker serves on (1..65535, not in use)")
  parser.add_argument("--listen", default="127.0.0.1",
                      help="127.0.0.1/localhost (default) or 0.0.0.0; the worker binds every "
                           "interface either way (see the module docstring)")
  parser.add_argument("--max_concurrent_computation_calls", type=int, default=None,
                      help="limit on concurrent computation calls in the worker; <= 0: no "
                           "limit; default: one per CPU core (as dp_fl's local context)")
  parser.add_argument("--ready_file", default=None,
                      help="write the port to this file once the worker accepts connections "
                           "(removed again when the launcher stops)")
  parser.add_argument("--ready_timeout_s", type=float, default=120.0,
                      help="give up (exit 3) if the worker does not accept connections by then")
  parser.add_argument("--format", choices=("table", "json"), default="table",
                      help="status as a human line (default) or JSON objects, one per line")
  parser.add_argument("-v", "--verbosity", type=int, choices=(0, 1, 2, 3), default=1,
                      help="0: quiet; 1 (default): the worker's own warnings and errors on "
                           "stderr; 2: info; 3: debug")
  exits.add_debug_flag(parser)
  return parser.parse_args(argv)


def _emit(args: argparse.Namespace, human: Optional[str], status: dict[str, object]) -> None:
  """A status on stdout: `human` (if any) by default, `status` as one JSON line with json."""
  if args.format == "json":
    print(json.dumps(status), flush=True)
  elif human is not None:
    print(human, flush=True)


def serve(args: argparse.Namespace) -> int:
  """Validates the flags, starts the worker, serves until a signal or its death."""
  listen_mode = check_listen(args.listen)
  port = check_port_available(args.port)
  _checks.check_positive("--ready_timeout_s", args.ready_timeout_s)
  if args.ready_file and not os.path.isdir(os.path.dirname(os.path.abspath(args.ready_file))):
    raise ValueError(f"`--ready_file` {args.ready_file!r} is in a directory that does not "
                     "exist; create it or choose another path.")
  max_calls = args.max_concurrent_computation_calls
  if max_calls is None:
    max_calls = os.cpu_count() or -1
  max_calls = max_calls if max_calls > 0 else -1
  binary = worker_binary_path()
  versions = runtime.worker_stamp()
  print(exposure_warning(listen_mode, port), file=sys.stderr, flush=True)

  status: dict[str, object] = {
      "port": port, "listen": args.listen,
      "bound": f"*:{port} (every interface: worker_binary has no bind-address flag)",
      "launcher_pid": os.getpid(), "max_concurrent_computation_calls": max_calls,
      "dp_fl": versions["dp_fl"], "tensorflow_federated": versions["tensorflow-federated"],
      "tensorflow": versions["tensorflow"]}
  wrote_ready_file = False
  with policies.StopSignal() as stop, tempfile.TemporaryDirectory(
      prefix="dp_fl_worker_") as run_dir:
    proc = start_worker(binary, port, max_calls, run_dir)
    status["worker_pid"] = proc.pid
    try:
      try:
        ready = wait_until_ready(proc, port, args.ready_timeout_s, stop)
      except WorkerExited:
        check_port_available(port)  # Taken between the check and the worker's bind: exit 2.
        raise
      if ready:
        _emit(args, f"dp_fl worker: serving TFF executor on port {port} (dp_fl "
                    f"{versions['dp_fl']}, tensorflow-federated "
                    f"{versions['tensorflow-federated']}, tensorflow {versions['tensorflow']})",
              dict(status, status="serving"))
        if args.ready_file:
          files.atomic_write_text(args.ready_file, f"{port}\n")
          wrote_ready_file = True
        while stop.signum is None and proc.poll() is None:
          time.sleep(_POLL_INTERVAL_S)
      if stop.signum is None:
        raise WorkerExited(port, proc.returncode, before_ready=False)
      name = signal.Signals(stop.signum).name
      print(f"dp_fl worker: {name} received: stopping the TFF worker on port {port} "
            f"(pid {proc.pid})", file=sys.stderr, flush=True)
      runtime.shutdown_workers()
      _emit(args, None, dict(status, status="stopped", signal=name,
                             worker_exit=describe_exit_status(proc.returncode)))
      return exits.INTERRUPTED
    finally:
      runtime.shutdown_workers()
      if wrote_ready_file:
        with contextlib.suppress(OSError):
          os.remove(args.ready_file)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)

  def body() -> int:
    runtime.configure_logging(args.verbosity)
    runtime.install_signal_handlers()  # SIGHUP; StopSignal then takes SIGTERM and SIGINT.
    try:
      return serve(args)
    except WorkerExited as e:
      if args.format == "json":
        print(json.dumps({"status": "worker_exited", "port": e.port,
                          "worker_exit": describe_exit_status(e.returncode)}), flush=True)
      print(f"error: {e}. Its own log, if any, is above on stderr (unless -v 0 was given); "
            "if it was killed (SIGKILL), check memory (`dmesg`).", file=sys.stderr, flush=True)
      return exits.ENVIRONMENT
    except WorkerNotReady as e:
      print(f"error: {e}", file=sys.stderr, flush=True)
      return exits.ENVIRONMENT

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
