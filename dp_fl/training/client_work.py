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

from typing import Any, Callable

from dp_fl.training import task as task_lib


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
