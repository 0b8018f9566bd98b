"""How rounds execute (`--runtime`): the learning process as `dp_fl.training.loop.TrainingLoop` sees it.

| `--runtime`  | where a round runs                                                           |
|--------------|------------------------------------------------------------------------------|
| `tff_worker` | TFF's C++ `worker_binary` (the default execution context; CPU only, no XLA); |
|              | the state stays in the worker between rounds (`resident.py`)                 |
| `xla`        | this process: `process.next` compiled to MapReduceForm and run by TensorFlow |
|              | on `--device` (GPU/TPU when TensorFlow sees one), XLA for `--jit_compile`    |
|              | (`xla.py`); the state stays on the device between rounds                     |
| `workers`    | as `xla`, with the clients' work on the remote TFF workers of `--workers`    |
|              | (`remote_workers.py`); the DP aggregation and its noise in this process      |

All take the same Python state (a checkpoint written by one resumes in another) and give
the loop the same interface:

    learner.next(datasets) -> (result, flat_metrics)   # the round, not yet applied
    learner.commit(result)                              # apply it
    learner.state()                                     # read back (checkpoints)
    learner.model_weights() / set_model_weights(w)      # evaluation, weight projection
    learner.close()
"""

from __future__ import annotations

import abc
import collections.abc
import dataclasses
import os
from typing import Any, Callable, Optional, Sequence

from dp_fl import writers
from dp_fl.execution import runtime as runtime_lib


def model_weights(process: Any, state: Any) -> Any:
  """The global model weights of a learning-process state, read in Python.

  `process.get_model_weights` is a TFF computation: calling it would send the whole state
  (model, optimizer and noise buffers) into TFF's worker only to select the weights.
  """
  weights = getattr(state, "global_model_weights", None)
  return weights if weights is not None else process.get_model_weights(state)


def with_model_weights(process: Any, state: Any, weights: Any) -> Any:
  """`state` with other global model weights (in Python, like `model_weights`)."""
  if hasattr(state, "global_model_weights") and hasattr(state, "_replace"):
    return state._replace(global_model_weights=weights)
  return process.set_model_weights(state, weights)


class _Learner(abc.ABC):
  """What both runtimes share: client epochs, weights in the state."""

  def __init__(self, process: Any, client_epochs: int):
    self.process = process
    self.client_epochs = client_epochs

  def _repeat(self, datasets: list[Any]) -> list[Any]:
    """Each client's dataset repeated for its epochs; in a structured client input (e.g. the
    audit's ``<data, canary>``), its datasets are."""
    if self.client_epochs <= 1:
      return datasets

    def repeat(value):
      if isinstance(value, collections.abc.Mapping):
        return type(value)((k, repeat(v)) for k, v in value.items())
      return value.repeat(self.client_epochs)

    return [repeat(ds) for ds in datasets]

  @abc.abstractmethod
  def next(self, datasets: list[Any]) -> tuple[Any, dict[str, Any]]:
    """Runs a round on the clients' datasets; (result, flat metrics), not yet applied."""

  @abc.abstractmethod
  def commit(self, result: Any) -> None:
    """Applies a round `next` returned."""

  @abc.abstractmethod
  def state(self) -> Any:
    """The learning-process state, read back into Python."""

  @abc.abstractmethod
  def set_state(self, state: Any) -> None:
    """Replaces the state (e.g. after a weight projection)."""

  def model_weights(self) -> Any:
    return model_weights(self.process, self.state())

  def set_model_weights(self, weights: Any) -> None:
    self.set_state(with_model_weights(self.process, self.state(), weights))

  def close(self) -> None:
    pass


class TffWorkerLearner(_Learner):
  """Rounds in TFF's C++ worker with the state resident there (`resident.py`; ≈ 1.5 s per
  round saved for BLT at the paper's model size)."""

  def __init__(self, process: Any, state: Any, client_epochs: int, device: str, **unused: Any):
    del device, unused  # The C++ worker has no device choice (it is built without CUDA).
    super().__init__(process, client_epochs)
    from dp_fl.execution import resident as resident_lib  # pylint: disable=g-import-not-at-top
    self.resident = resident_lib.ResidentProcess(process, state)

  def next(self, datasets: list[Any]) -> tuple[Any, dict[str, Any]]:
    result = self.resident.next(self._repeat(datasets))
    return result, writers.flatten_metrics(result.metrics)

  def commit(self, result: Any) -> None:
    self.resident.commit(result)

  def state(self) -> Any:
    return self.resident.state()

  def set_state(self, state: Any) -> None:
    self.resident.set_state(state)

  def close(self) -> None:
    self.resident.close()


class XlaLearner(_Learner):
  """Rounds in this process on `device` (`xla.py`); the state's tensors stay on the device
  and are read back only for `state()`."""

  def __init__(self, process: Any, state: Any, client_epochs: int, device: str,
               client_work: Optional[Callable[[Any], Any]] = None, **unused: Any):
    del unused
    super().__init__(process, client_epochs)
    from dp_fl.execution import xla  # pylint: disable=g-import-not-at-top
    self.device = xla.select_device(device)
    # One client per core: results do not depend on it (updates accumulate in client order).
    self.mapreduce = xla.MapReduceProcess(process, self.device,
                                          parallel_clients=os.cpu_count() or 1,
                                          client_work=client_work)
    self._leaves = self.mapreduce.state_leaves(state)
    self._state: Optional[Any] = state

  def next(self, datasets: list[Any]) -> tuple[Any, dict[str, Any]]:
    result = self.mapreduce.next(self._leaves, self._repeat(datasets))
    return result, writers.flatten_metrics(self.mapreduce.output(result.output))

  def commit(self, result: Any) -> None:
    self._leaves = result.state
    self._state = None

  def state(self) -> Any:
    if self._state is None:
      self._state = self.mapreduce.state(self._leaves)
    return self._state

  def set_state(self, state: Any) -> None:
    self._leaves = self.mapreduce.state_leaves(state)
    self._state = state


class WorkersLearner(XlaLearner):
  """Clients' work on remote TFF workers (`--workers`), the server steps — the DP aggregation,
  its noise and state — in this process on `device` (`remote_workers.py`)."""

  def __init__(self, process: Any, state: Any, client_epochs: int, device: str,
               workers: Optional[str] = None,
               worker_timeout_seconds: float = runtime_lib.DEFAULT_WORKER_TIMEOUT_SECONDS,
               worker_tls: Optional[runtime_lib.TlsFiles] = None,
               max_clients_per_call: Optional[int] = None,
               worker_checks: Sequence[Any] = (), **unused: Any):
    """`max_clients_per_call`: the most clients one call to a worker folds (None: all of
    its share of the round at once); `worker_checks`: `remote_workers.WorkerCheck`s every
    worker must pass at connect (`remote_workers.RemoteClientWork`)."""
    from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
    addresses = runtime_lib.parse_workers(workers or "")
    self._remote: Optional[Any] = None

    def client_work(form: Any) -> Any:
      self._remote = remote_workers.RemoteClientWork(
          form, addresses, worker_timeout_seconds, tls=worker_tls,
          max_clients_per_call=max_clients_per_call, checks=worker_checks)
      return self._remote

    super().__init__(process, state, client_epochs, device, client_work=client_work, **unused)

  def close(self) -> None:
    if self._remote is not None:
      self._remote.close()
    super().close()


DEVICES = ("auto", "cpu", "gpu", "tpu")
"""`--device` (runtime `xla`): auto = a GPU, else a TPU, else the CPU TensorFlow sees."""


@dataclasses.dataclass(frozen=True)
class Runtime:
  """One `--runtime` value."""
  name: str
  description: str
  learner: Callable[..., _Learner]
  jit_compile: bool  # Whether tf.function(jit_compile=True) in client work takes effect.


RUNTIMES: dict[str, Runtime] = {r.name: r for r in (
    Runtime("tff_worker", "TFF's C++ worker_binary (CPU, no XLA)", TffWorkerLearner, False),
    Runtime("workers", "clients on the remote TFF workers of --workers, the DP aggregation "
            "in this process on --device (docs/DISTRIBUTED.md)", WorkersLearner, False),
    Runtime("xla", "in-process MapReduceForm with TensorFlow on --device, XLA client step "
            "with --jit_compile", XlaLearner, True),
)}


def preflight(name: str, device: str = "auto", workers: Optional[str] = None,
              worker_timeout_seconds: float = runtime_lib.DEFAULT_WORKER_TIMEOUT_SECONDS,
              worker_tls: Optional[runtime_lib.TlsFiles] = None,
              worker_checks: Sequence[Any] = (), **unused: Any) -> None:
  """What a `--runtime` needs from the machine, checked before a run directory is written:
  the `--device` TensorFlow must see (xla, workers), and every worker of `--workers`
  reachable, of this process's versions and passing `worker_checks` (the task's: e.g. the
  same database) — connected once and let go."""
  del unused
  runtime(name)
  if name in ("xla", "workers"):
    from dp_fl.execution import xla  # pylint: disable=g-import-not-at-top
    xla.select_device(device)
  if name == "workers":
    from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
    remote_workers.connect(runtime_lib.parse_workers(workers or ""), worker_timeout_seconds,
                           tls=worker_tls, checks=worker_checks)


def runtime(name: str) -> Runtime:
  """The `--runtime` entry; unknown names fail with the known ones."""
  found = RUNTIMES.get(name)
  if found is None:
    raise ValueError(f"`runtime` must be one of {tuple(RUNTIMES)}; got {name!r}.")
  return found
