"""Runs a TFF learning process in this process: `next` compiled to MapReduceForm, executed by TF.

TFF 0.87 executes computations in its C++ `worker_binary`, which is built without CUDA and
without XLA: `jit_compile` is silently ignored there and no accelerator is used
(docs/BENCHMARKS.md). This runtime compiles `process.next` once to TFF's `MapReduceForm` —
the form production cross-device stacks deploy — and runs each round with TensorFlow in this
process, on the device it is given:

    server:  client_input = prepare(state)
    clients: update_i, bitwidth_i, max_input_i, modular_i = work(data_i, client_input)
    server:  aggregate = report(merge(zero(), accumulate(... accumulate(zero(), update_1) ...)))
             secure    = Σ_i bitwidth_i  (each x <= 2^bitwidth − 1, bitwidth <= 62),
                         Σ_i max_input_i (each x <= max_input),
                         (Σ_i modular_i) mod modulus
             state, output = update(state, (aggregate, *secure))

(`tff.backends.mapreduce` package docstring; the secure sums with the semantics of TFF's own
test backend, `tff.backends.test`, which checks each client's value against the bound and
fails loudly otherwise). The bounds are checked where the clients' values are, and only one
bit per partial aggregate — "some value exceeded its bound" — reaches the server
(`PartialAggregate`): never a value's maximum, which for a worker with one client would be
that client's message. Each of the TensorFlow computations is deserialized once into a
concrete TF function (the GraphDef TFF serialized, imported into a wrapped function), and the
server state stays as tensors on the device between rounds; it is read back into Python only
when asked (`MapReduceProcess.state`). A `tf.function(jit_compile=True)` inside the client
work keeps its `_XlaMustCompile` attribute through TFF's serialization, and TensorFlow's own
runtime compiles it with XLA here (`tests/runtime/xla_runtime_test.py` checks that an op
XLA cannot compile fails loudly).

Results agree with the C++ runtime to float tolerance, not bitwise (kernels and op order
differ); the noise of the DP aggregators is a function of (seed, round) in both.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import itertools
import queue
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.impl.types import type_conversions
from tensorflow_federated.python.tensorflow_libs import serialization_utils

_MAX_SECURE_SUM_BITWIDTH = 62  # int64 sums; one bit for the carry (as TFF's test backend).

_DEVICE_KINDS = {"auto": ("GPU", "TPU"), "cpu": (), "gpu": ("GPU",), "tpu": ("TPU",)}


def select_device(choice: str = "auto") -> str:
  """The TF device name for `--device`: the first GPU/TPU TensorFlow sees, or the CPU.

  "auto" takes a GPU if there is one, else a TPU, else the CPU; "gpu"/"tpu" fail clearly when
  TensorFlow sees none (e.g. a CPU-only TensorFlow build, docs/GPU.md).
  """
  if choice not in _DEVICE_KINDS:
    raise ValueError(f"`device` must be one of {tuple(_DEVICE_KINDS)}; got {choice!r}.")
  for kind in _DEVICE_KINDS[choice]:
    found = tf.config.list_logical_devices(kind)
    if found:
      return found[0].name
  if choice in ("gpu", "tpu"):
    raise ValueError(
        f"--device={choice}: TensorFlow sees no {choice.upper()} (devices: "
        f"{[d.name for d in tf.config.list_logical_devices()]}). Install a TensorFlow build "
        "with accelerator support (docs/GPU.md) or use --device=auto.")
  return tf.config.list_logical_devices("CPU")[0].name


def _binding_leaves(binding: Any) -> list[str]:
  """Tensor names of a TFF TensorFlow binding, depth first (sequences: the variant tensor)."""
  kind = binding.WhichOneof("binding")
  if kind == "tensor":
    return [binding.tensor.tensor_name]
  if kind == "sequence":
    return [binding.sequence.variant_tensor_name]
  if kind == "struct":
    return [name for element in binding.struct.element for name in _binding_leaves(element)]
  if kind is None:
    return []
  raise ValueError(f"Unsupported TensorFlow binding {kind!r} in a TFF computation.")


_IMPORTS = itertools.count()


def _uniquify(graph_def: Any, suffix: str) -> Any:
  """`graph_def` with its functions and resources' shared names suffixed by `suffix`.

  Functions imported into this process share one registry, and resources (variables, hash
  tables) with a shared name share one resource manager: two TFF computations may hold
  different functions under the same traced name (`__inference_update_state_350`) and
  different variables under the same shared name (a metric's `total`, float in one and int64
  in the other). TFF's C++ worker isolates computations; this runtime renames, as TFF's
  `tensorflow_utils._uniquify_shared_names_with_suffix` does for shared names.
  """
  empty = itertools.count()
  for node in list(graph_def.node) + [n for f in graph_def.library.function
                                      for n in f.node_def]:
    if "shared_name" in node.attr:
      shared = node.attr["shared_name"]
      if not shared.s:  # An empty shared name must not start the new one with "_".
        shared.s = f"empty_{next(empty)}".encode("utf-8")
      shared.s += f"_{suffix}".encode("utf-8")
  renamed = {f.signature.name: f"{f.signature.name}_{suffix}" for f in graph_def.library.function}
  if not renamed:
    return graph_def

  def rename_attrs(node):
    if node.op in renamed:
      node.op = renamed[node.op]
    for value in node.attr.values():
      if value.HasField("func") and value.func.name in renamed:
        value.func.name = renamed[value.func.name]
      for func in value.list.func:
        if func.name in renamed:
          func.name = renamed[func.name]

  for node in graph_def.node:
    rename_attrs(node)
  for function in graph_def.library.function:
    function.signature.name = renamed[function.signature.name]
    for node in function.node_def:
      rename_attrs(node)
  for gradient in graph_def.library.gradient:
    gradient.function_name = renamed.get(gradient.function_name, gradient.function_name)
    gradient.gradient_func = renamed.get(gradient.gradient_func, gradient.gradient_func)
  return graph_def


def _drop_control_inputs_on(graph_def: Any, placeholders: set[str]) -> None:
  """Removes control inputs on the computation's parameter placeholders (`^arg...`).

  `import_graph_def`'s input_map replaces a placeholder's tensor, not a control dependency on
  it, so the placeholder would stay in the imported graph, unfed (TF then refuses to prune
  the function: `UnliftableError`). A placeholder has no side effects: a control dependency
  on it orders nothing. TFF's DistributedDpSumFactory, flattened (issue #45), has one.
  """
  for node in graph_def.node:
    kept = [i for i in node.input if not (i.startswith("^") and i[1:] in placeholders)]
    if len(kept) != len(node.input):
      del node.input[:]
      node.input.extend(kept)


class TensorFlowFunction:
  """One TFF TensorFlow computation as a concrete TF function over flat tensors.

  The GraphDef TFF serialized is imported once into a `tf.compat.v1.wrap_function`; calls
  take and return the leaves of the parameter and result types in TFF's order (a sequence
  leaf is the dataset's variant tensor). A computation that creates variables has an
  initialize op, which runs before every call (TFF's semantics: each call starts fresh).
  Its variables belong to this import: one instance must not run two calls at once.
  """

  def __init__(self, computation: Any, device: Optional[str] = None):
    proto = computation.get_proto(computation)
    if proto.WhichOneof("computation") != "tensorflow":
      raise ValueError(f"Expected a TensorFlow computation; got "
                       f"{proto.WhichOneof('computation')!r}.")
    spec = proto.tensorflow
    self.type_signature = computation.type_signature
    self.device = device
    graph_def = _uniquify(serialization_utils.unpack_graph_def(spec.graph_def),
                          f"dp_fl{next(_IMPORTS)}")
    inputs = _binding_leaves(spec.parameter) if spec.HasField("parameter") else []
    outputs = _binding_leaves(spec.result)
    _drop_control_inputs_on(graph_def, {name.split(":")[0] for name in inputs})
    nodes = {node.name: node for node in graph_def.node}

    def input_spec(name: str) -> tf.TensorSpec:
      attr = nodes[name.split(":")[0]].attr
      shape = tf.TensorShape(attr["shape"].shape) if "shape" in attr else None
      return tf.TensorSpec(shape, tf.as_dtype(attr["dtype"].type))

    init_op = spec.initialize_op or None
    token = spec.session_token_tensor_name or None

    def imported(*args):
      input_map = dict(zip(inputs, args))
      if token:
        input_map[token] = tf.constant("dp_fl")
      returned = tf.graph_util.import_graph_def(
          graph_def, input_map, outputs + ([init_op] if init_op else []), name="")
      return returned[:len(outputs)]

    self._input_specs = [input_spec(n) for n in inputs]
    with tf.device(device):
      wrapped = tf.compat.v1.wrap_function(imported, self._input_specs)
    graph = wrapped.graph
    self._initialize = (wrapped.prune([], [graph.get_operation_by_name(init_op)])
                        if init_op else None)
    self._call = wrapped.prune(wrapped.inputs,
                               [graph.get_tensor_by_name(name) for name in outputs])
    self.num_inputs = len(inputs)
    self.num_outputs = len(outputs)

  def __call__(self, *args: Any) -> list[tf.Tensor]:
    """Runs the computation on its input leaves (tensors, or values convertible to them).

    Calls the pruned function's flat entry point: the structured call of TF 2.14
    (`bind_function_inputs`) formats every argument with `repr` — numpy's array printing of
    each tensor — and cost 19 of the 20 ms of a call with 81 small tensors
    (docs/BENCHMARKS.md). Dtypes and shapes are checked here instead.
    """
    if len(args) != self.num_inputs:
      raise ValueError(f"Expected {self.num_inputs} tensors; got {len(args)}.")
    with tf.device(self.device):
      flat = [self._checked(i, arg) for i, arg in enumerate(args)]
      if self._initialize is not None:
        self._initialize._call_flat([], self._initialize.captured_inputs)  # pylint: disable=protected-access
      return list(self._call._call_flat(flat, self._call.captured_inputs))  # pylint: disable=protected-access

  def _checked(self, index: int, arg: Any) -> tf.Tensor:
    spec = self._input_specs[index]
    if not isinstance(arg, tf.Tensor):
      arg = tf.convert_to_tensor(arg, spec.dtype)
    if arg.dtype != spec.dtype or not spec.shape.is_compatible_with(arg.shape):
      raise ValueError(f"Input {index} of a TFF computation must be {spec}; got "
                       f"{arg.dtype.name}{arg.shape}.")
    return arg


def num_leaves(type_spec: Any) -> int:
  """Tensors (or sequences) in a TFF type."""
  if isinstance(type_spec, tff.StructType):
    return sum(num_leaves(t) for _, t in structure.iter_elements(type_spec))
  if isinstance(type_spec, tff.FederatedType):
    return num_leaves(type_spec.member)
  return 1


def flatten(value: Any, type_spec: Any) -> list[Any]:
  """The leaves of a Python value of TFF type `type_spec`, in TFF's order."""
  if isinstance(type_spec, tff.FederatedType):
    type_spec = type_spec.member
  if isinstance(type_spec, tff.StructType):
    elements = structure.to_elements(structure.from_container(value))
    return [leaf for (_, element_type), (_, element) in zip(
        structure.iter_elements(type_spec), elements) for leaf in flatten(element, element_type)]
  if isinstance(type_spec, tff.SequenceType):
    return [tf.data.experimental.to_variant(value)]
  return [value]


def pack(leaves: Sequence[Any], type_spec: Any) -> Any:
  """A Python container of TFF type `type_spec` (as TFF returns it) from its leaves."""
  if isinstance(type_spec, tff.FederatedType):
    type_spec = type_spec.member
  flat = [np.asarray(leaf) if isinstance(leaf, tf.Tensor) else leaf for leaf in leaves]
  value = structure.pack_sequence_as(type_spec, flat) if isinstance(
      type_spec, tff.StructType) else flat[0]
  return type_conversions.type_to_py_container(value, type_spec)


@dataclasses.dataclass(frozen=True)
class RoundOutput:
  """One round: the new state's leaves (on the device) and the server output's leaves."""
  state: list[tf.Tensor]
  output: list[tf.Tensor]


@dataclasses.dataclass(frozen=True)
class PartialAggregate:
  """Some clients' `work`, folded: what the server needs of them and nothing more.

  `accumulator`: MapReduceForm's accumulator over those clients (`zero`, then `accumulate`
  in client order); `secure_sums`: each secure-sum input leaf (bitwidth, then max_input, then
  modular leaves) summed over those clients; `out_of_bounds`: one boolean scalar, whether any
  of those clients' values exceeded its secure sum's bound (`secure_bounds`; false in any run
  whose aggregator is correct). That bit is all the server needs to refuse a broken
  aggregator: the values' elementwise maxima, which it received before, would reveal much
  more (over one client, that client's message). Partials are merged with MapReduceForm's
  `merge` (`MapReduceProcess.next`): one partial for in-process clients, one per worker for
  `remote_workers`.
  """
  accumulator: list[tf.Tensor]
  secure_sums: list[tf.Tensor]
  out_of_bounds: tf.Tensor


_BOUND_FUNCTIONS = ("secure_sum_bitwidth", "secure_sum_max_input", "secure_modular_sum_modulus")


def secure_leaf_types(form: Any) -> list[Any]:
  """The tensor types of the secure-sum inputs of `form.work`'s result, in `PartialAggregate`
  order (bitwidth leaves, then max_input, then modular)."""
  return [leaf for _, part in list(structure.iter_elements(form.work.type_signature.result))[1:]
          for leaf in structure.flatten(part)]


def _upper_bounds(bounds_by_kind: Sequence[Sequence[Any]]) -> list[Optional[np.ndarray]]:
  """Per secure-sum input leaf, the largest value a client may send (int64): 2^bitwidth − 1,
  max_input; None for a modular sum (TFF's test backend checks no bound there)."""
  upper = []
  for kind, bounds in enumerate(bounds_by_kind):
    for bound in bounds:
      bound = np.asarray(bound, np.int64)
      if kind == 0:
        if np.any(bound > _MAX_SECURE_SUM_BITWIDTH):
          raise ValueError(f"secure_sum_bitwidth {bound.tolist()} exceeds "
                           f"{_MAX_SECURE_SUM_BITWIDTH} (int64 sums).")
        upper.append((np.int64(1) << bound) - 1)
      elif kind == 1:
        upper.append(bound)
      else:
        upper.append(None)
  return upper


def secure_bounds(form: Any) -> list[Optional[np.ndarray]]:
  """`_upper_bounds` of `form`'s secure sums (evaluated once, here)."""
  return _upper_bounds([TensorFlowFunction(getattr(form, name))() for name in _BOUND_FUNCTIONS])


def exceeds(value: Any, bound: Optional[np.ndarray]) -> tf.Tensor:
  """Whether some entry of one client's secure-sum input `value` exceeds `bound` (a boolean
  scalar; always false without a bound)."""
  if bound is None:
    return tf.constant(False)
  return tf.reduce_any(tf.cast(value, tf.int64) > tf.constant(bound, tf.int64))


class MapReduceProcess:
  """`process.next` compiled to MapReduceForm and run in this process (module docstring).

  Clients' `work` runs on `parallel_clients` threads, each with its own imported copy of the
  computation (a copy's variables are its own: one copy must not run two clients at once);
  the updates are accumulated in client order, so results do not depend on the number of
  threads (`tests/runtime/xla_runtime_test.py`).
  """

  def __init__(self, process: Any, device: Optional[str] = None, parallel_clients: int = 1,
               client_work: Optional[Any] = None):
    """`client_work(form)`: optional factory of a callable running the clients' `work`
    elsewhere (`remote_workers.RemoteClientWork`): given the round's client datasets and the
    client input (a Python structure), it returns their `PartialAggregate`s. The server
    steps — merge, report, the secure sums and update — stay here either way."""
    if not isinstance(parallel_clients, int) or parallel_clients < 1:
      raise ValueError(f"`parallel_clients` must be a positive int; got {parallel_clients!r}.")
    self.device = device
    form = tff.backends.mapreduce.get_map_reduce_form_for_computation(process.next)
    initialize = tff.backends.mapreduce.get_state_initialization_computation(
        process.initialize)
    self.form = form
    self.state_type = process.next.type_signature.parameter[0].member
    self.output_type = process.next.type_signature.result[1].member
    functions = {name: TensorFlowFunction(getattr(form, name), device) for name in (
        "prepare", "work", "zero", "accumulate", "merge", "report", "update",
        *_BOUND_FUNCTIONS)}
    functions["initialize"] = TensorFlowFunction(initialize, device)
    self._fn = functions
    self._work_copies = queue.SimpleQueue()
    self._work_copies.put(functions["work"])
    for _ in range(parallel_clients - 1):
      self._work_copies.put(TensorFlowFunction(form.work, device))
    self._parallel_clients = parallel_clients
    self._pool = (concurrent.futures.ThreadPoolExecutor(parallel_clients)
                  if parallel_clients > 1 else None)
    self._update_leaves = num_leaves(form.work.type_signature.result[0])
    self._secure_types = secure_leaf_types(form)
    self._bounds = [functions[name]() for name in _BOUND_FUNCTIONS]
    self._upper = _upper_bounds(self._bounds)
    self._client_work = client_work(form) if client_work is not None else None

  def initialize(self) -> list[tf.Tensor]:
    """The initial state's leaves, on the device."""
    return self._fn["initialize"]()

  def state_leaves(self, state: Any) -> list[tf.Tensor]:
    """A Python state (e.g. restored from a checkpoint) as leaves on the device."""
    with tf.device(self.device):
      return [tf.identity(leaf) for leaf in flatten(state, self.state_type)]

  def state(self, leaves: Sequence[tf.Tensor]) -> Any:
    """The Python state of `leaves` (read back from the device)."""
    return pack(leaves, self.state_type)

  def output(self, leaves: Sequence[tf.Tensor]) -> Any:
    return pack(leaves, self.output_type)

  def client_input_value(self, client_input: Sequence[tf.Tensor]) -> Any:
    """`prepare`'s result as the Python structure sent to remote workers."""
    return pack(client_input, self.form.work.type_signature.parameter[1])

  def prepare(self, state: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    """The round's client input (`prepare` of the state's leaves)."""
    return self._fn["prepare"](*state)

  def next(self, state: Sequence[tf.Tensor], client_data: Sequence[Any]) -> RoundOutput:
    """One round on `client_data` (one dataset per client) from the state's leaves."""
    fn = self._fn
    client_input = self.prepare(state)
    if self._client_work is not None:
      partials = list(self._client_work(client_data, self.client_input_value(client_input)))
    else:
      partials = [self._local_partial(client_data, client_input)]
    accumulator = fn["zero"]()
    for partial in partials:
      accumulator = fn["merge"](*accumulator, *partial.accumulator)
    report = fn["report"](*accumulator)
    result = fn["update"](*state, *report, *self._secure_sums(partials))
    num_state = num_leaves(self.state_type)
    return RoundOutput(result[:num_state], result[num_state:])

  def _local_partial(self, client_data: Sequence[Any], client_input: list[tf.Tensor]
                     ) -> PartialAggregate:
    """The round's clients' `work` here, on `parallel_clients` threads, folded in client
    order whatever order the threads finish in."""
    fn = self._fn
    data_type = self.form.work.type_signature.parameter[0]

    def work(data):
      copy = self._work_copies.get()
      try:
        return copy(*flatten(data, data_type), *client_input)
      finally:
        self._work_copies.put(copy)

    outputs = (self._in_order(work, client_data) if self._pool is not None
               else map(work, client_data))
    accumulator = fn["zero"]()
    columns: list[list[tf.Tensor]] = [[] for _ in self._secure_types]
    out_of_bounds = False
    for leaves in outputs:
      accumulator = fn["accumulate"](*accumulator, *leaves[:self._update_leaves])
      for column, value, bound in zip(columns, leaves[self._update_leaves:], self._upper):
        column.append(value)
        out_of_bounds = out_of_bounds or bool(exceeds(value, bound))
    return PartialAggregate(
        accumulator,
        [tf.add_n(c) if c else zeros(t) for c, t in zip(columns, self._secure_types)],
        tf.constant(out_of_bounds))

  def _in_order(self, work: Any, client_data: Sequence[Any]) -> Any:
    """`work` of each client on the threads, yielded in client order with at most two
    clients a thread started ahead of the one being folded: a slow client does not let the
    finished updates of the rest of the cohort pile up (`Executor.map` would start them all),
    so the round's memory does not grow with the cohort (issue #43)."""
    window = 2 * self._parallel_clients
    pending: collections.deque = collections.deque()
    clients = iter(client_data)
    for data in itertools.islice(clients, window):
      pending.append(self._pool.submit(work, data))
    while pending:
      result = pending.popleft().result()
      for data in itertools.islice(clients, 1):
        pending.append(self._pool.submit(work, data))
      yield result

  def _secure_sums(self, partials: Sequence[PartialAggregate]) -> list[tf.Tensor]:
    """Σ with the bounds of `federated_secure_sum_bitwidth` / `_sum` / `_modular_sum`: no
    partial saw a client's value above its bound, the modular sum reduced."""
    if any(bool(p.out_of_bounds) for p in partials):
      bounds = "; ".join(
          f"{what} {int(np.max(np.asarray(b)))}" for kind, what in enumerate(
              ("bitwidth", "max_input")) for b in self._bounds[kind])
      raise ValueError("a client's value for a secure sum exceeds its bound"
                       + (f" ({bounds})" if bounds else "") + ": the aggregator is broken.")
    out = []
    leaf = 0
    for kind, bounds in enumerate(self._bounds):
      for bound in bounds:
        sums = [p.secure_sums[leaf] for p in partials]
        total = tf.add_n(sums) if sums else zeros(self._secure_types[leaf])
        if kind == 2:
          total = tf.math.floormod(total, tf.cast(bound, total.dtype))
        out.append(total)
        leaf += 1
    return out


def zeros(tensor_type: Any) -> tf.Tensor:
  """The sum over no client of a secure-sum input of TFF type `tensor_type`."""
  return tf.zeros(tensor_type.shape, tensor_type.dtype)
