"""A round's clients on TFF workers on other hosts (`--workers=HOST:PORT,...`).

TFF 0.87's server is the C++ `worker_binary` (started on each host by `scripts/worker`); a
client reaches it through `RemoteExecutor` over a gRPC channel (plaintext, or TLS to a TLS
front end: `runtime.TlsFiles`). This module gives `xla.MapReduceProcess` a
`RemoteClientWork`: the round's client datasets are split in contiguous chunks over the
workers, and each worker runs, for its chunk, MapReduceForm's `work` (local training,
clipping — everything a client does) and folds the results with the form's `zero`,
`accumulate` and `merge` into one partial accumulator (`partial_aggregation`). The rest —
merging the workers' accumulators, `report`, the secure sums and `update`, i.e. the DP
aggregation with its noise step and the noise state — runs once, in the training process,
exactly as locally: only the client input (model) and the clients' data go out, only one
accumulator per worker comes back.

What a worker's partial reveals to the training process: the sum over its clients of each
accumulated value (for DP-FTRL and DP-FedAvg, clipped updates the trusted server sums anyway;
for cpSGD, the clients' integer messages — their quantized updates plus only *their* noise
shares — and the un-noised counts and metrics), and one bit per round saying whether some
client's secure-sum input exceeded its bound (checked on the worker; the values' maxima are
not sent). A partial over one client would be that client's message, so a round whose form
has secure sums never gives a worker fewer than `MIN_CLIENTS_PER_SECURE_PARTIAL` clients
(fewer workers are used that round); cpSGD's privacy report states what the partials carry
(`dp_fl.training.privacy.distributed_scope`).

Before any work, each worker's version is checked (`check_version`): TFF's worker_binary has no
version RPC, so `scripts/worker` starts it in a private directory holding dp_fl's version stamp
(`runtime.worker_stamp`: the dp_fl release, TFF and TensorFlow versions) and a one-client probe
computation run on the worker reads that file back. A worker of another version, or a bare
worker_binary without the stamp, is refused naming it and both versions.

Faults are bounded: every RPC carries a deadline (`timeout_seconds`), so a hung worker raises
instead of blocking; a dead one fails at once (gRPC UNAVAILABLE). Either becomes a
`exits.RemoteWorkerError` naming the worker; the training loop withdraws the round (nothing
applied or recorded), so the last checkpoint stays intact and a rerun resumes exactly.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import socket
import time
from typing import Any, Optional, Sequence

import grpc
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.backends.native import compiler
from tensorflow_federated.python.core.environments.tensorflow_frontend import (
    tensorflow_computation)
from tensorflow_federated.python.core.impl.execution_contexts import sync_execution_context
from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks
from tensorflow_federated.python.core.impl.executors import remote_executor
from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub

from dp_fl import exits
from dp_fl.execution import runtime
from dp_fl.execution import xla

CONNECT_TIMEOUT_SECONDS = 30.0
MIN_CLIENTS_PER_SECURE_PARTIAL = 2
"""With secure sums in the round (cpSGD), the fewest clients a worker folds: its partial sum is
seen by the training process, and over one client it would be that client's message."""
_MAX_MESSAGE_BYTES = 2 * 1000 * 1000 * 1000  # As TFF's own local channel.
_CHANNEL_OPTIONS = [("grpc.max_message_length", _MAX_MESSAGE_BYTES),
                    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES)]


class _Deadline(grpc.UnaryUnaryClientInterceptor):
  """Puts a deadline on every unary call of the channel (TFF's stub sets none)."""

  def __init__(self, seconds: float):
    self.seconds = seconds

  def intercept_unary_unary(self, continuation, client_call_details, request):
    return continuation(client_call_details._replace(timeout=self.seconds), request)


def _what_listens(address: str, timeout_seconds: float = 2.0) -> Optional[str]:
  """What holds `address` when gRPC gets no answer: None when nothing accepts a TCP
  connection there, else a description ("an HTTP/1.x server (HTTP/1.0 200 OK)", "a
  service that is not gRPC")."""
  host, _, port = address.rpartition(":")
  try:
    with socket.create_connection((host.strip("[]"), int(port)), timeout_seconds) as sock:
      sock.settimeout(timeout_seconds)
      try:
        sock.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
        answer = sock.recv(64)
      except OSError:
        answer = b""
  except (OSError, ValueError):
    return None
  if answer.startswith(b"HTTP/"):
    status = answer.split(b"\r\n", 1)[0].decode("ascii", "replace")
    return f"an HTTP/1.x server ({status})"
  return "a service that does not speak gRPC (e.g. a TLS port)"


def _context(address: str, timeout_seconds: float, connect_seconds: float,
             tls: Optional[runtime.TlsFiles] = None) -> Any:
  """A synchronous TFF execution context whose executor is the worker at `address`."""
  channel = (grpc.insecure_channel(address, _CHANNEL_OPTIONS) if tls is None else
             grpc.secure_channel(address, tls.credentials(), _CHANNEL_OPTIONS))
  channel = grpc.intercept_channel(channel, _Deadline(timeout_seconds))
  stub = remote_executor_grpc_stub.RemoteExecutorGrpcStub(channel)
  start = time.monotonic()
  while not stub.is_ready:
    if time.monotonic() - start > connect_seconds:
      hint = ("" if tls is None else
              " (over TLS: is a TLS front end listening there, does its certificate name "
              f"{address.rpartition(':')[0]!r} and chain to --worker_tls_ca_cert, and does it "
              "accept this client's certificate?)")
      listener = _what_listens(address) if tls is None else None
      if listener is not None:
        raise exits.RemoteWorkerError(
            address, f"is answered by {listener}, not a TFF worker (no gRPC answer within "
            f"{connect_seconds:g} s): check the address, or start the worker on a free port "
            "(`./bazelw run //scripts:worker -- --port=PORT`)")
      raise exits.RemoteWorkerError(
          address, f"not reachable within {connect_seconds:g} s{hint}; start it there with "
          "`./bazelw run //scripts:worker -- --port=PORT` (docs/DISTRIBUTED.md) or drop it from "
          "--workers")
    time.sleep(0.05)

  def executor_stack(cardinalities):
    executor = remote_executor.RemoteExecutor(stub)
    executor.set_cardinalities(cardinalities)
    return executor

  return sync_execution_context.SyncExecutionContext(
      executor_fn=python_executor_stacks.ResourceManagingExecutorFactory(
          executor_stack_fn=executor_stack),
      compiler_fn=compiler.desugar_and_transform_to_native,
      transform_args=tensorflow_computation.transform_args,
      transform_result=tensorflow_computation.transform_result)


@dataclasses.dataclass(frozen=True)
class WorkerCheck:
  """Something a worker must hold as this process does, checked at connect (`connect`).

  `computation` takes one int32 client value and returns, from that client, what the worker
  sees (e.g. the fingerprint of the database a client's dataset reads from its own disk:
  `tasks/stackoverflow/database.worker_check`); `expected` is this process's value of the
  same, `what` names it and `fix` says what to do when a worker differs.
  """
  what: str
  computation: Any
  expected: Any
  fix: str


def run_checks(address: str, context: Any, checks: Sequence[WorkerCheck]) -> None:
  """Refuses (`exits.RemoteWorkerError`) a worker on which a check fails or differs."""
  for check in checks:
    try:
      (value,) = context.invoke(check.computation, [0])
    except Exception as e:  # pylint: disable=broad-except
      first = _details(e).strip().splitlines()
      raise exits.RemoteWorkerError(
          address, f"cannot read {check.what} ({first[-1] if first else type(e).__name__}); "
          f"{check.fix}") from e
    if not _same(value, check.expected):
      raise exits.RemoteWorkerError(
          address, f"finds other data in {check.what}: {_short(value)} there, "
          f"{_short(check.expected)} in this process; {check.fix}")


def _same(a: Any, b: Any) -> bool:
  flat_a, flat_b = tf.nest.flatten(a), tf.nest.flatten(b)
  return len(flat_a) == len(flat_b) and all(
      np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(flat_a, flat_b))


def _short(value: Any) -> str:
  return ", ".join(str(np.asarray(v).tolist()) for v in tf.nest.flatten(value))


def split(count: int, parts: int, min_size: int = 1) -> list[tuple[int, int]]:
  """`count` items in at most `parts` contiguous chunks whose sizes differ by at most one, in
  order (empty chunks dropped), each of at least `min_size` items: fewer chunks when `count`
  is below `parts × min_size` (one chunk when `count` < 2 `min_size`)."""
  parts = max(1, min(parts, count // max(1, min_size)))
  base, extra = divmod(count, parts)
  bounds, start = [], 0
  for i in range(parts):
    size = base + (1 if i < extra else 0)
    if size:
      bounds.append((start, start + size))
    start += size
  return bounds


def connect(addresses: Sequence[str],
            timeout_seconds: float = runtime.DEFAULT_WORKER_TIMEOUT_SECONDS,
            connect_seconds: float = CONNECT_TIMEOUT_SECONDS,
            pool: Optional[concurrent.futures.Executor] = None,
            tls: Optional[runtime.TlsFiles] = None,
            checks: Sequence[WorkerCheck] = ()) -> list[Any]:
  """An execution context per worker address, each reachable, of this process's versions
  (`check_version`) and passing `checks` (`run_checks`: e.g. the same database), run on all
  workers at once; `exits.RemoteWorkerError` otherwise."""
  contexts = [_context(a, timeout_seconds, connect_seconds, tls) for a in addresses]
  probe = _stamp_probe()  # Traced once, here, not in each worker's thread.
  with contextlib.ExitStack() as stack:
    if pool is None:
      pool = stack.enter_context(concurrent.futures.ThreadPoolExecutor(len(contexts) or 1))
    def check(address, context):
      check_version(address, context, timeout_seconds, probe)
      run_checks(address, context, checks)

    for future in [pool.submit(check, address, context)
                   for address, context in zip(addresses, contexts)]:
      future.result()
  return contexts


def partial_aggregation(form: Any) -> Any:
  """The computation one worker runs per round: its clients' `work` folded into one
  `xla.PartialAggregate` (as a Python structure at SERVER).

      (data@CLIENTS, client_input@SERVER)
          -> <accumulator, <Σ secure inputs, out of bounds>>@SERVER

  `accumulator` is MapReduceForm's `federated_aggregate(update, zero, accumulate, merge)`
  over the worker's clients, reported as is (`report` runs once, in the training process,
  after the workers' accumulators are merged); the secure-sum inputs (cpSGD's modular
  shares, ...) are summed, and each client's value is checked against its bound here, on the
  worker: only whether some value exceeded its bound comes back (one boolean), never the
  values' maxima. So each worker sends back one accumulator-sized message per round,
  whatever its number of clients.
  """
  work = form.work
  data_type, input_type = work.type_signature.parameter
  accumulator_type = form.zero.type_signature.result
  secure_types = xla.secure_leaf_types(form)
  secure_type = tff.StructType(secure_types)
  folded_type = tff.StructType([secure_type, tff.TensorType(np.bool_)])
  upper = xla.secure_bounds(form) if secure_types else []

  @tff.tensorflow.computation(accumulator_type)
  def as_is(accumulator):
    return accumulator

  @tff.tensorflow.computation(work.type_signature.result)
  def secure_inputs(result):
    return structure.pack_sequence_as(secure_type, [
        leaf for _, part in list(structure.iter_elements(result))[1:]
        for leaf in structure.flatten(part)])

  @tff.tensorflow.computation
  def secure_zero():
    return structure.pack_sequence_as(folded_type, [
        xla.zeros(t) for t in secure_types] + [tf.constant(False)])

  def fold(sums, out_of_bounds, values, more_out_of_bounds):
    return structure.pack_sequence_as(folded_type, [
        a + b for a, b in zip(structure.flatten(sums), values)] + [
            tf.logical_or(out_of_bounds, more_out_of_bounds)])

  @tff.tensorflow.computation(folded_type, secure_type)
  def secure_accumulate(folded, value):
    values = structure.flatten(value)
    beyond = tf.reduce_any(tf.stack([tf.constant(False)] + [
        xla.exceeds(v, b) for v, b in zip(values, upper)]))
    return fold(folded[0], folded[1], values, beyond)

  @tff.tensorflow.computation(folded_type, folded_type)
  def secure_merge(a, b):
    return fold(a[0], a[1], structure.flatten(b[0]), b[1])

  @tff.tensorflow.computation(folded_type)
  def secure_report(folded):
    return folded

  @tff.federated_computation(tff.FederatedType(data_type, tff.CLIENTS),
                             tff.FederatedType(input_type, tff.SERVER))
  def fold_clients(data, client_input):
    results = tff.federated_map(work, (data, tff.federated_broadcast(client_input)))
    accumulator = tff.federated_aggregate(results[0], form.zero(), form.accumulate,
                                          form.merge, as_is)
    if not secure_types:
      return accumulator
    secure = tff.federated_aggregate(tff.federated_map(secure_inputs, results), secure_zero(),
                                     secure_accumulate, secure_merge, secure_report)
    return tff.federated_zip((accumulator, secure))

  return fold_clients


class RemoteClientWork:
  """MapReduceForm `work` for a round's clients on remote TFF workers, folded per worker
  (`partial_aggregation`; module docstring)."""

  def __init__(self, form: Any, addresses: Sequence[str],
               timeout_seconds: float = runtime.DEFAULT_WORKER_TIMEOUT_SECONDS,
               connect_seconds: float = CONNECT_TIMEOUT_SECONDS,
               tls: Optional[runtime.TlsFiles] = None,
               max_clients_per_call: Optional[int] = None,
               checks: Sequence[WorkerCheck] = ()):
    """`max_clients_per_call`: the most clients one call folds on a worker (None: a worker's
    whole share of the round in one call). TFF's worker holds every client's results of a
    call until its aggregate, so this bounds a worker's memory whatever the cohort; each
    further call costs one client input out and one accumulator back. With secure sums no
    call folds fewer than `MIN_CLIENTS_PER_SECURE_PARTIAL` clients, so one folds at most
    max(max_clients_per_call, 2 × MIN_CLIENTS_PER_SECURE_PARTIAL − 1)."""
    if max_clients_per_call is not None and (
        not isinstance(max_clients_per_call, int) or max_clients_per_call < 1):
      raise ValueError("`max_clients_per_call` must be a positive int or None; got "
                       f"{max_clients_per_call!r}.")
    self.max_clients_per_call = max_clients_per_call
    self.addresses = tuple(addresses)
    if not self.addresses:
      raise ValueError("RemoteClientWork needs at least one worker address.")
    self.timeout_seconds = timeout_seconds
    self._computation = partial_aggregation(form)
    self._merge = xla.TensorFlowFunction(form.merge)
    self._accumulator_type = form.zero.type_signature.result
    self._secure_types = xla.secure_leaf_types(form)
    self._pool = concurrent.futures.ThreadPoolExecutor(len(self.addresses))
    try:
      self._contexts = connect(self.addresses, timeout_seconds, connect_seconds, self._pool,
                               tls, checks)
    except BaseException:
      self.close()
      raise

  def __call__(self, client_data: Sequence[Any], client_input: Any
               ) -> list[xla.PartialAggregate]:
    """One `PartialAggregate` per worker that had clients, in worker order; with secure sums,
    no worker folds fewer than `MIN_CLIENTS_PER_SECURE_PARTIAL` of them (module docstring)."""
    min_size = MIN_CLIENTS_PER_SECURE_PARTIAL if self._secure_types else 1
    chunks = split(len(client_data), len(self.addresses), min_size)
    futures = [(self.addresses[i], self._pool.submit(
        self._worker_share, i, client_data[a:b], client_input, min_size))
               for i, (a, b) in enumerate(chunks)]
    partials = []
    for address, future in futures:
      try:
        partials.extend(future.result())
      except Exception as e:  # pylint: disable=broad-except
        raise exits.RemoteWorkerError(address, _describe(e, self.timeout_seconds)) from e
    return partials

  def _worker_share(self, index: int, client_data: Sequence[Any], client_input: Any,
                    min_size: int) -> list[xla.PartialAggregate]:
    """Worker `index`'s share of the round, in calls of at most `max_clients_per_call`
    clients (each of at least `min_size`), the calls' partials merged here in client order
    as they come back (one accumulator held at a time)."""
    count = len(client_data)
    calls = 1 if self.max_clients_per_call is None else -(-count // self.max_clients_per_call)
    folded = None
    for a, b in split(count, calls, min_size):
      partial = self._partial(self._contexts[index].invoke(
          self._computation, (list(client_data[a:b]), client_input)))
      folded = partial if folded is None else xla.PartialAggregate(
          self._merge(*folded.accumulator, *partial.accumulator),
          [x + y for x, y in zip(folded.secure_sums, partial.secure_sums)],
          tf.logical_or(folded.out_of_bounds, partial.out_of_bounds))
    return [folded]

  def _partial(self, folded: Any) -> xla.PartialAggregate:
    if not self._secure_types:
      return xla.PartialAggregate(
          xla.flatten(folded, self._accumulator_type), [], tf.constant(False))
    accumulator, (sums, out_of_bounds) = folded
    count = len(self._secure_types)
    sums = tf.nest.flatten(sums)
    if len(sums) != count:
      raise ValueError(f"A worker returned {len(sums)} secure sums for {count} inputs.")
    return xla.PartialAggregate(
        xla.flatten(accumulator, self._accumulator_type),
        [tf.convert_to_tensor(x) for x in sums], tf.convert_to_tensor(out_of_bounds))

  def close(self) -> None:
    self._pool.shutdown(wait=False, cancel_futures=True)


def _stamp_probe() -> Any:
  """A computation that returns, from one client on the worker, the bytes of the version stamp
  in the worker's working directory (`tf.io.read_file` runs in the worker process)."""

  @tff.tensorflow.computation(np.int32)
  def read_stamp(unused_client):
    del unused_client
    return tf.io.read_file(runtime.WORKER_STAMP_FILE)

  @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
  def probe(clients):
    return tff.federated_map(read_stamp, clients)

  return probe


def _versions(stamp: dict[str, Any]) -> str:
  return ", ".join(f"{name} {stamp.get(name, '(none)')}" for name in runtime.worker_stamp())


def check_version(address: str, context: Any,
                  timeout_seconds: float = runtime.DEFAULT_WORKER_TIMEOUT_SECONDS,
                  probe: Optional[Any] = None) -> None:
  """Refuses (`exits.RemoteWorkerError`) a worker whose version stamp is missing, unreadable
  or differs from this process's `runtime.worker_stamp()` (module docstring). `probe`: the
  `_stamp_probe()` computation, when the caller has built it already."""
  restart = ("start it with this checkout's `./bazelw run //scripts:worker -- --port=PORT` "
             "(the same requirements*.lock installed there; docs/DISTRIBUTED.md)")
  try:
    (raw,) = context.invoke(probe or _stamp_probe(), [0])
  except Exception as e:  # pylint: disable=broad-except
    if "No such file" in _details(e):
      raise exits.RemoteWorkerError(
          address, f"carries no dp_fl version stamp ({runtime.WORKER_STAMP_FILE} in its "
          "working directory): it is a bare TFF worker_binary or was started by a dp_fl older "
          f"than 0.2.0, so its versions cannot be checked; {restart}") from e
    raise exits.RemoteWorkerError(
        address, "could not run dp_fl's version check: "
        f"{_describe(e, timeout_seconds)}") from e
  try:
    theirs = json.loads(raw)
    if not isinstance(theirs, dict):
      raise ValueError("not a JSON object")
  except ValueError as e:
    raise exits.RemoteWorkerError(
        address, f"has an unreadable dp_fl version stamp ({e}: {raw[:80]!r}); {restart}") from e
  mine = runtime.worker_stamp()
  if any(theirs.get(name) != version for name, version in mine.items()):
    raise exits.RemoteWorkerError(
        address, f"runs {_versions(theirs)}, but this training process runs {_versions(mine)}; "
        "a worker must run the same dp_fl, TensorFlow Federated and TensorFlow: stop it and "
        + restart)


def _details(error: BaseException) -> str:
  """The text of `error` and of the errors it was raised from (TFF wraps gRPC's)."""
  parts = []
  while error is not None and len(parts) < 8:
    parts.append(str(error))
    error = error.__cause__ or error.__context__
  return "\n".join(parts)


def _describe(error: BaseException, timeout_seconds: float) -> str:
  code = getattr(error, "code", None)
  status = None
  if callable(code):
    try:
      status = code()
    except Exception:  # pylint: disable=broad-except
      status = None
  cause = error.__cause__ or error.__context__
  if status is None and cause is not None:  # TFF wraps gRPC errors (RetryableGRPCError).
    return _describe(cause, timeout_seconds)
  if status == grpc.StatusCode.DEADLINE_EXCEEDED:
    return (f"did not answer within {timeout_seconds:g} s (hung, overloaded, or the round "
            "needs a longer --worker_timeout_seconds)")
  if status == grpc.StatusCode.UNAVAILABLE:
    return "stopped answering (the worker process died or the network dropped)"
  return f"failed: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
