"""The model each client trains, as a TFF model.

`model_fn(task, element_spec)` is the `model_fn` of TFF's learning-process builders: it wraps
the task's Keras model with `tff.learning.models.from_keras_model` (TFF 0.87's
`functional_model_from_keras` fails at run time for LSTMs).

XLA: TFF 0.87 runs client work in its C++ `worker_binary`, which has no XLA device: a
`tf.function(jit_compile=True)` inside a TFF computation is silently *not* compiled (an op
XLA cannot compile runs anyway, no XLA dump appears, bits equal the uncompiled run; see
docs/BENCHMARKS.md, "Training"). `TrainingConfig(jit_compile=True)` is therefore refused
with that explanation instead of being ignored.
"""

from __future__ import annotations

from typing import Any, Callable

from dp_fl.training import task as task_lib


def model_fn(task: task_lib.Task, element_spec: Any, *,
             initialize: bool = True) -> Callable[[], Any]:
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
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  def make():
    return tff.learning.models.from_keras_model(
        task.keras_model_fn(), loss=task.loss_fn(), input_spec=element_spec,
        metrics=task.metrics_fn())

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
