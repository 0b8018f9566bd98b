"""A round's clients on TFF workers on other hosts (`--workers=HOST:PORT,...`).

TFF 0.87's server is the C++ `worker_binary` (started on each host by `scripts/worker`); a
client reaches it through `RemoteExecutor` over a gRPC channel. This module gives
`xla_runtime.MapReduceProcess` a `RemoteClientWork`: the round's client datasets are split in
contiguous chunks over the workers, each worker runs MapReduceForm's `work` (local training,
clipping — everything a client does) for its chunk as one `federated_map`, and the per-client
results come back in client order. Everything after — accumulate, merge, report, the secure
sums and `update`, i.e. the DP aggregation with its noise step and the noise state — runs once,
in the training process, exactly as locally: only the client input (model) and the clients'
data go out, only their clipped updates come back.

Faults are bounded: every RPC carries a deadline (`timeout_seconds`), so a hung worker raises
instead of blocking; a dead one fails at once (gRPC UNAVAILABLE). Either becomes a
`runtime.RemoteWorkerError` naming the worker; the training loop withdraws the round (nothing
applied or recorded), so the last checkpoint stays intact and a rerun resumes exactly.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any, Sequence

import grpc
import tensorflow_federated as tff
from tensorflow_federated.python.core.backends.native import compiler
from tensorflow_federated.python.core.environments.tensorflow_frontend import (
    tensorflow_computation)
from tensorflow_federated.python.core.impl.execution_contexts import sync_execution_context
from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks
from tensorflow_federated.python.core.impl.executors import remote_executor
from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub

from dp_fl import runtime

CONNECT_TIMEOUT_SECONDS = 30.0
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


def _context(address: str, timeout_seconds: float, connect_seconds: float) -> Any:
  """A synchronous TFF execution context whose executor is the worker at `address`."""
  channel = grpc.intercept_channel(grpc.insecure_channel(address, _CHANNEL_OPTIONS),
                                   _Deadline(timeout_seconds))
  stub = remote_executor_grpc_stub.RemoteExecutorGrpcStub(channel)
  start = time.monotonic()
  while not stub.is_ready:
    if time.monotonic() - start > connect_seconds:
      raise runtime.RemoteWorkerError(
          address, f"not reachable within {connect_seconds:g} s; start it there with "
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


def split(count: int, parts: int) -> list[tuple[int, int]]:
  """`count` items in `parts` contiguous chunks whose sizes differ by at most one, in order
  (empty chunks dropped)."""
  base, extra = divmod(count, parts)
  bounds, start = [], 0
  for i in range(parts):
    size = base + (1 if i < extra else 0)
    if size:
      bounds.append((start, start + size))
    start += size
  return bounds


class RemoteClientWork:
  """MapReduceForm `work` for a round's clients, on remote TFF workers (module docstring)."""

  def __init__(self, work: Any, addresses: Sequence[str],
               timeout_seconds: float = runtime.DEFAULT_WORKER_TIMEOUT_SECONDS,
               connect_seconds: float = CONNECT_TIMEOUT_SECONDS):
    self.addresses = tuple(addresses)
    if not self.addresses:
      raise ValueError("RemoteClientWork needs at least one worker address.")
    self.timeout_seconds = timeout_seconds
    data_type, input_type = work.type_signature.parameter

    @tff.federated_computation(tff.FederatedType(data_type, tff.CLIENTS),
                               tff.FederatedType(input_type, tff.SERVER))
    def clients_work(data, client_input):
      return tff.federated_map(work, (data, tff.federated_broadcast(client_input)))

    self._computation = clients_work
    self._contexts = [_context(a, timeout_seconds, connect_seconds) for a in self.addresses]
    self._pool = concurrent.futures.ThreadPoolExecutor(len(self.addresses))

  def __call__(self, client_data: Sequence[Any], client_input: Any) -> list[Any]:
    """Each client's `work` result (Python structures), in client order."""
    chunks = split(len(client_data), len(self.addresses))
    futures = [(self.addresses[i], self._pool.submit(
        self._contexts[i].invoke, self._computation, (list(client_data[a:b]), client_input)))
               for i, (a, b) in enumerate(chunks)]
    results: list[Any] = []
    for address, future in futures:
      try:
        results.extend(future.result())
      except Exception as e:  # pylint: disable=broad-except
        raise runtime.RemoteWorkerError(address, _describe(e, self.timeout_seconds)) from e
    return results

  def close(self) -> None:
    self._pool.shutdown(wait=False, cancel_futures=True)


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
