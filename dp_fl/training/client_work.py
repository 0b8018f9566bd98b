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


def model_fn(task: task_lib.Task, element_spec: Any) -> Callable[[], Any]:
  """A no-argument function building the task's TFF model (a new one on every call)."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  def build():
    return tff.learning.models.from_keras_model(
        task.keras_model_fn(), loss=task.loss_fn(), input_spec=element_spec,
        metrics=task.metrics_fn())

  return build
