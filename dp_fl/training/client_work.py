"""The model each client trains, as a TFF model.

`model_fn(task, element_spec)` is the `model_fn` of TFF's learning-process builders: it wraps
the task's Keras model with `tff.learning.models.from_keras_model` (TFF 0.87's
`functional_model_from_keras` fails at run time for LSTMs).

XLA (`jit_compile=True`): the model's forward pass becomes a `tf.function(jit_compile=True)`,
so the client step (forward pass and, through it, its gradient) is one XLA computation. The
attribute survives TFF's serialization, and the in-process runtime (`--runtime=xla`,
`dp_fl/execution/xla.py`) runs it through TensorFlow, which compiles it — an op XLA cannot
compile fails loudly there (`tests/runtime/xla_runtime_test.py`). TFF 0.87's C++
`worker_binary` has no XLA device and would silently *not* compile it (docs/BENCHMARKS.md,
"Training"), so the config refuses `jit_compile` with `--runtime=tff_worker`.
"""

from __future__ import annotations

import collections
import json
from typing import Any, Callable, Hashable

from dp_fl.training import task as task_lib

# Built client works, most recently used last (see `delta_client_work`).
_CLIENT_WORKS: "collections.OrderedDict[Hashable, Any]" = collections.OrderedDict()
_CLIENT_WORKS_KEPT = 8


def model_fn(task: task_lib.Task, element_spec: Any, *, initialize: bool = True,
             jit_compile: bool = False) -> Callable[[], Any]:
  """A no-argument function building the task's TFF model (a new one on every call).

  Args:
    task: the task whose Keras model, loss and metrics to wrap.
    element_spec: the element spec of a client dataset.
    initialize: False builds the trainable variables with zeros instead of running their
      initializers. For client work only: TFF's client work assigns the broadcast global
      weights to every model variable before training, so the initial values are never
      used — but TFF's runtime runs every variable initializer on every client call, and
      for the StackOverflow LSTM (orthogonal 670 x 2680 recurrent kernel, Glorot 10004 x 96
      embeddings) that costs ≈ 0.25 s per client, three times the client's own training
      step on one batch (docs/BENCHMARKS.md, "Training").
    jit_compile: make the forward pass a `tf.function(jit_compile=True)` (see above).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  def make():
    keras_model = task.keras_model_fn()
    if jit_compile:
      _unroll_recurrent_layers(keras_model)
    model = tff.learning.models.from_keras_model(
        keras_model, loss=task.loss_fn(), input_spec=element_spec,
        metrics=task.metrics_fn())
    if jit_compile:
      model.forward_pass = tf.function(model.forward_pass, jit_compile=True)
    return model

  def build():
    if initialize:
      return make()
    with tf.variable_creator_scope(_zero_initialized_trainable):
      return make()

  return build


def delta_client_work(task: task_lib.Task, element_spec: Any, *, optimizer: str,
                      learning_rate: float, weighting: Any, jit_compile: bool = False) -> Any:
  """TFF's model-delta client work for the task's model (paper 004 Alg. 1's ClientUpdate).

  The model is built with zero trainable variables (`model_fn(initialize=False)`); the loop
  iterates the dataset in a `tf.while_loop` instead of `dataset.reduce`: for recurrent models
  TFF's default DATASET_REDUCE is several times slower in the C++ runtime (100 LSTM clients:
  20 s vs 3 s per round, docs/BENCHMARKS.md).

  Tracing it is most of the cost of building a learning process (≈ 6 s for a one-layer toy
  model); the client work does not depend on the mechanism, so the processes of one
  process's runs on one task (a comparison, the tests' grids) share it. It is reused only for
  the same model, loss and metrics functions (the same objects), the same Keras architecture,
  element spec, optimizer, weighting and XLA choice, and the same global TF seed — the op
  seeds traced into the graph (e.g. a dropout layer's) derive from it. TFF computations are
  immutable, so sharing one is sharing its value.

  Args:
    task: the task whose model the clients train.
    element_spec: the element spec of a client dataset.
    optimizer: "sgd" (paper 001 Alg. 1, paper 004) or "adam" (restarted every round).
    learning_rate: the client optimizer's learning rate.
    weighting: a `tff.learning.ClientWeighting`.
    jit_compile: see `model_fn`.
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
  key = (task.keras_model_fn, task.loss_fn, task.metrics_fn,
         _architecture(task.keras_model_fn()), repr(element_spec), optimizer, float(learning_rate), str(weighting),
         bool(jit_compile), context.global_seed())
  if key in _CLIENT_WORKS:
    _CLIENT_WORKS.move_to_end(key)
    return _CLIENT_WORKS[key]
  if optimizer == "adam":
    client_optimizer = tff.learning.optimizers.build_adam(learning_rate=learning_rate)
  elif optimizer == "sgd":
    client_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=learning_rate)
  else:
    raise ValueError(f"Unknown client optimizer {optimizer!r}; use 'sgd' or 'adam'.")
  work = tff.learning.templates.build_model_delta_client_work(
      model_fn(task, element_spec, initialize=False, jit_compile=jit_compile),
      client_optimizer, weighting,
      loop_implementation=tff.learning.LoopImplementation.DATASET_ITERATOR)
  _CLIENT_WORKS[key] = work
  while len(_CLIENT_WORKS) > _CLIENT_WORKS_KEPT:
    _CLIENT_WORKS.popitem(last=False)
  return work


def _architecture(keras_model: Any) -> str:
  """The model's Keras config as canonical JSON, its layer names numbered by first use.

  Keras names layers from a process-wide counter ("dense_7"), so two builds of one model
  differ only in those names — which the functional config also uses to wire its layers. A
  model with a custom layer that has no config (`get_config` not implemented) is described by
  its layer classes and its variables' shapes and dtypes instead.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  layers = [m for m in keras_model.submodules if isinstance(m, tf.keras.layers.Layer)]
  names = {keras_model.name} | {layer.name for layer in layers}
  numbered: dict[str, str] = {}

  def canonical(value):
    if isinstance(value, dict):
      return {k: canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
      return [canonical(v) for v in value]
    if isinstance(value, str) and value in names:
      return numbered.setdefault(value, f"<layer {len(numbered)}>")
    return value

  try:
    config = json.loads(keras_model.to_json())
  except NotImplementedError:
    config = {"layers": [f"{type(m).__module__}.{type(m).__qualname__}"
                         for m in [keras_model, *layers]],
              "variables": [[v.shape.as_list(), v.dtype.name, v.trainable]
                            for v in keras_model.variables]}
  return json.dumps(canonical(config))


def _zero_initialized_trainable(next_creator, **kwargs):
  """A `tf.variable_creator_scope` creator: trainable float variables start at zero."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  initial_value = kwargs.get("initial_value")
  shape = kwargs.get("shape")
  dtype = kwargs.get("dtype")
  if (kwargs.get("trainable", True) and callable(initial_value) and shape is not None
      and tf.TensorShape(shape).is_fully_defined() and dtype is not None
      and tf.as_dtype(dtype).is_floating):
    shape, dtype = tf.TensorShape(shape), tf.as_dtype(dtype)
    kwargs["initial_value"] = lambda: tf.zeros(shape, dtype)
  return next_creator(**kwargs)


def _unroll_recurrent_layers(keras_model: Any) -> None:
  """Sets `unroll=True` on every Keras RNN layer (LSTM, GRU, RNN) of `keras_model`.

  Under a jit-compiled forward pass, an RNN's `tf.while_loop` hands its per-step
  intermediates to the gradient outside the XLA computation as TensorLists, which TF 2.14
  cannot do ("Support for TensorList crossing the XLA/TF boundary is not implemented").
  Unrolled over the (static) sequence length the same cell computations are a plain graph
  XLA compiles, forward and backward.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for layer in keras_model.submodules:
    if isinstance(layer, tf.keras.layers.RNN):
      layer.unroll = True
