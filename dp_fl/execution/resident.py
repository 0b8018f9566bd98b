"""Runs a TFF learning process with its state kept inside TFF's C++ worker between rounds.

Calling `process.next(state, data)` from Python moves the whole server state into TFF's C++
worker and back out every round: for the 4.05M-parameter StackOverflow LSTM with BLT-DP-FTRL
(model, server momentum and d = 4 noise buffers, ≈ 100 MB) that is 1–2 s per round, more than
the clients' work in a short round (docs/BENCHMARKS.md). `ResidentProcess` instead drives the
worker's executor directly (the calls `tff.framework.Executor` defines — `create_value`,
`create_struct`, `create_call`, `create_selection`): the state produced by round t is fed to
round t + 1 inside the worker, and only the round's metrics cross into Python. The state is
read back (`state()`) only when Python needs it — for a checkpoint, an evaluation, or a
projection of the weights — and written in again (`set_state`) after Python changed it.

The computation run is exactly `process.next` (compiled as the installed execution context
compiles it), so results are bitwise those of calling it from Python. A cohort of another size
needs another executor in the worker (TFF builds one per set of cardinalities); the state is
then read out of the old one and written into the new one, so variable-size cohorts (Poisson
sampling) work but keep the per-round transfer cost.

Usage (inside `dp_fl.execution.runtime.execution_context()`)::

    resident = ResidentProcess(process, process.initialize())
    for round_datasets in rounds:
      result = resident.next(round_datasets)   # metrics only; the new state stays remote
      if metrics_are_fine(result.metrics):
        resident.commit(result)                # otherwise the round is simply not applied
    state = resident.state()                   # read back, e.g. to checkpoint
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Optional, Sequence

from dp_fl.execution import runtime


@dataclasses.dataclass(frozen=True)
class RoundResult:
  """One round's outcome: its outputs in Python, and the new state still in the worker.

  `outputs` are the elements of `next`'s result after the state, in order: `(metrics,)` for a
  `tff.learning.templates.LearningProcess`, `(result, measurements)` for a
  `tff.templates.AggregationProcess`; `metrics` is the first of them.
  """
  outputs: tuple[Any, ...]
  _state: Any  # RemoteValue of the state after this round.
  _executor: Any
  _executor_id: Any

  @property
  def metrics(self) -> Any:
    return self.outputs[0]


class ResidentProcess:
  """`process.next` with the state resident in TFF's C++ worker (see module docstring)."""

  def __init__(self, process: Any, state: Any):
    """Binds `process` to the installed execution context, starting from `state`.

    Args:
      process: a `tff.learning.templates.LearningProcess`, or any iterative process whose
        `next` maps `(state, client data)` to a structure whose element 0 is the new state
        (e.g. a `tff.templates.AggregationProcess`).
      state: the initial state, as `process.initialize()` or a checkpoint returns it.

    Raises:
      RuntimeError: if the installed TFF context is not an executor-backed synchronous
        context (use `dp_fl.execution.runtime.execution_context()`).
    """
    from tensorflow_federated.python.common_libs import structure  # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.execution_contexts import sync_execution_context  # pylint: disable=g-import-not-at-top

    context = context_stack_impl.context_stack.current
    if not isinstance(context, sync_execution_context.SyncExecutionContext):
      raise RuntimeError(
          "ResidentProcess needs TFF's synchronous C++ execution context; the installed "
          f"context is {type(context).__name__}. Run inside "
          "dp_fl.execution.runtime.execution_context().")
    self._factory = context.executor_factory
    self._next_type = process.next.type_signature
    parameter = self._next_type.parameter
    result = self._next_type.result
    if len(parameter) != 2 or len(result) < 2:
      raise ValueError("`process.next` must map (state, client data) to (state, ...); its type "
                       f"is {self._next_type}.")
    self._state_type, self._data_type = parameter[0], parameter[1]
    self._parameter_names = [name for name, _ in structure.iter_elements(parameter)]
    self._output_types = [result[i] for i in range(1, len(result))]
    self._compiled = runtime.compile_for_cpp_worker(process.next)
    self._loop = asyncio.new_event_loop()
    self._python_state = state
    self._remote_state = None
    self._executor = None  # The executor holding `_remote_state` (and `_functions`).
    self._executor_id = None
    self._function = None
    self.transfers = 0  # How many times the state crossed between Python and the worker.

  # -------------------------------------------------------------------------------------
  # Public API.

  def state(self) -> Any:
    """The current state as Python values (read from the worker when it is newer there)."""
    if self._python_state is None:
      self._python_state = self._run(self._read_state())
    return self._python_state

  def set_state(self, state: Any) -> None:
    """Replaces the state (e.g. after projecting the weights); written in on the next round."""
    self._python_state = state
    self._remote_state = None

  def next(self, client_data: Sequence[Any]) -> RoundResult:
    """Runs one round on `client_data` (one entry per client); the state is not yet changed.

    Args:
      client_data: the round's client datasets, as `process.next` takes them.

    Returns:
      The round's metrics (Python) and its new state (in the worker); `commit` applies it.
    """
    return self._run(self._next(list(client_data)))

  def commit(self, result: RoundResult) -> None:
    """Makes `result`'s state the current state."""
    if result._executor is not self._executor or result._executor_id != self._executor_id:  # pylint: disable=protected-access
      raise ValueError("This round result belongs to an executor the process no longer uses; "
                       "commit each round's result before running the next round.")
    self._remote_state = result._state  # pylint: disable=protected-access
    self._python_state = None

  def close(self) -> None:
    """Drops the worker-side values (the state is read back first) and the event loop."""
    if not self._loop.is_closed():
      self.state()
      self._remote_state = self._function = self._executor = None
      self._loop.close()

  # -------------------------------------------------------------------------------------
  # Worker side.

  def _run(self, coroutine):
    if self._loop.is_closed():
      raise RuntimeError("This ResidentProcess was closed.")
    return self._loop.run_until_complete(coroutine)

  async def _read_state(self):
    from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation  # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.types import type_conversions  # pylint: disable=g-import-not-at-top
    value = await self._remote_state.compute()
    self.transfers += 1
    value = type_conversions.type_to_py_container(value, self._state_type)
    return tensorflow_computation.transform_result(value)

  async def _executor_for(self, num_clients: int):
    """The worker executor for a cohort of `num_clients`, moving the state there if needed."""
    from tensorflow_federated.python.core.impl.types import placements  # pylint: disable=g-import-not-at-top
    executor = self._factory.create_executor({placements.CLIENTS: num_clients})
    executor_id = getattr(executor, "_executor_id", None)
    if executor is self._executor and executor_id == self._executor_id:
      return executor
    if self._python_state is None:  # The state lives in the executor we are leaving.
      self._python_state = await self._read_state()
    self._remote_state = self._function = None
    self._executor, self._executor_id = executor, executor_id
    return executor

  async def _next(self, client_data: list[Any]) -> RoundResult:
    from tensorflow_federated.python.common_libs import structure  # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation  # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.types import type_conversions  # pylint: disable=g-import-not-at-top
    executor = await self._executor_for(len(client_data))
    if self._function is None:
      self._function = await executor.create_value(self._compiled,
                                                   self._compiled.type_signature)
    if self._remote_state is None:
      state = tensorflow_computation.transform_args(self._python_state)
      self._remote_state = await executor.create_value(state, self._state_type)
      self.transfers += 1
    data = await executor.create_value(tensorflow_computation.transform_args(client_data),
                                       self._data_type)
    argument = await executor.create_struct(structure.Struct(
        [(self._parameter_names[0], self._remote_state), (self._parameter_names[1], data)]))
    output = await executor.create_call(self._function, argument)
    new_state = await executor.create_selection(output, 0)
    outputs = []
    for index, output_type in enumerate(self._output_types, start=1):
      value = await (await executor.create_selection(output, index)).compute()
      value = type_conversions.type_to_py_container(value, output_type)
      outputs.append(tensorflow_computation.transform_result(value))
    return RoundResult(outputs=tuple(outputs), _state=new_state, _executor=executor,
                       _executor_id=self._executor_id)
