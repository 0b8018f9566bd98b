"""The model each client trains, as a TFF model (optionally XLA-compiled).

`model_fn(task, element_spec, jit_compile)` is the `model_fn` of TFF's learning-process
builders: it wraps the task's Keras model with `tff.learning.models.from_keras_model` (TFF
0.87's `functional_model_from_keras` fails at run time for LSTMs). With `jit_compile`, the
forward pass — and so the per-batch gradient step built on it — runs as an XLA cluster.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from dp_fl.training import task as task_lib


def model_fn(task: task_lib.Task, element_spec: Any,
             jit_compile: bool = False) -> Callable[[], Any]:
  """A no-argument function building the task's TFF model (a new one on every call)."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  def build():
    model = tff.learning.models.from_keras_model(
        task.keras_model_fn(), loss=task.loss_fn(), input_spec=element_spec,
        metrics=task.metrics_fn())
    return _xla_model_class()(model) if jit_compile else model

  return build


@functools.lru_cache(maxsize=None)
def _xla_model_class():
  """The VariableModel wrapper class (defined lazily: TFF is imported only when used)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  class XlaForwardPass(tff.learning.models.VariableModel):
    """Delegates to a Keras-backed VariableModel; the forward pass is jit-compiled."""

    def __init__(self, inner):
      self._inner = inner
      self._compiled = tf.function(inner.forward_pass, jit_compile=True)

    @property
    def trainable_variables(self):
      return self._inner.trainable_variables

    @property
    def non_trainable_variables(self):
      return self._inner.non_trainable_variables

    @property
    def local_variables(self):
      return self._inner.local_variables

    @property
    def input_spec(self):
      return self._inner.input_spec

    @tf.function
    def forward_pass(self, batch_input, training=True):
      return self._compiled(batch_input, training=training)

    @tf.function
    def predict_on_batch(self, x, training=True):
      return self._inner.predict_on_batch(x, training=training)

    @tf.function
    def report_local_unfinalized_metrics(self):
      return self._inner.report_local_unfinalized_metrics()

    def metric_finalizers(self):
      return self._inner.metric_finalizers()

    @tf.function
    def reset_metrics(self):
      return self._inner.reset_metrics()

  return XlaForwardPass
