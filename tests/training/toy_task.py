"""A tiny deterministic task for training-program tests: 3-class softmax regression.

24 clients, each with 8–24 examples of 4 features drawn around a client-specific centre; the
label is the argmax of a fixed linear map, so a linear model learns it quickly.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from dp_fl.training import task as task_lib

NUM_CLIENTS = 24
_W = np.array([[1.0, -1.0, 0.5], [0.5, 1.0, -1.0], [-1.0, 0.5, 1.0], [0.2, 0.2, 0.2]],
              dtype=np.float32)


def _client_arrays(index: int):
  rng = np.random.default_rng([17, index])
  size = 8 + (index * 5) % 17
  x = (rng.normal(size=(size, 4)) + rng.normal(size=4)).astype(np.float32)
  y = np.argmax(x @ _W, axis=1).astype(np.int32)
  return x, y


class ToyClientData:
  """ClientData-like: client_ids and create_tf_dataset_for_client."""

  def __init__(self, num_clients: int = NUM_CLIENTS,
               poison_client: str | Sequence[str] | None = None):
    self.client_ids = [f"client_{i:03d}" for i in range(num_clients)]
    self._poison = ({poison_client} if isinstance(poison_client, str)
                    else set(poison_client or ()))

  def create_tf_dataset_for_client(self, client_id: str) -> tf.data.Dataset:
    x, y = _client_arrays(int(client_id.split("_")[1]))
    if client_id in self._poison:  # A client whose local training diverges.
      x = np.full_like(x, np.nan)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(4)


def _eval_dataset():
  xs, ys = zip(*(_client_arrays(1000 + i) for i in range(8)))
  return tf.data.Dataset.from_tensor_slices((np.concatenate(xs), np.concatenate(ys))).batch(32)


def _validation_dataset():
  xs, ys = zip(*(_client_arrays(2000 + i) for i in range(8)))
  return tf.data.Dataset.from_tensor_slices((np.concatenate(xs), np.concatenate(ys))).batch(32)


def _keras_model():
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)),
                              tf.keras.layers.Dense(3)])


def _wide_keras_model():
  """A 4-1024-3 network (d = 8,195): enough dimensions for canary directions to be nearly
  orthogonal to each other and to the real updates (the audit tests)."""
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)),
                              tf.keras.layers.Dense(1024, activation="relu"),
                              tf.keras.layers.Dense(3)])


def _big_keras_model():
  """A 4-2048-2048-3 network (d = 4,212,739, about the paper's 4.05M-parameter LSTM): its
  updates are model-sized (16.9 MB) while a client's step stays cheap (the cohort-memory
  test)."""
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)),
                              tf.keras.layers.Dense(2048, activation="relu"),
                              tf.keras.layers.Dense(2048, activation="relu"),
                              tf.keras.layers.Dense(3)])


def _loss():
  return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _metrics():
  return [tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")]


# The model, loss and metrics functions are module-level (the same objects in every task):
# the learning processes of a test module's runs then share one traced client work
# (`dp_fl.training.client_work.delta_client_work`).
def make_task(name: str = "toy", poison_client: str | Sequence[str] | None = None,
              num_clients: int = NUM_CLIENTS, wide: bool = False,
              big: bool = False) -> task_lib.Task:
  """The toy task; `wide` and `big` give it the larger networks above."""
  return task_lib.Task(
      name=name,
      train_data=ToyClientData(num_clients, poison_client=poison_client),
      eval_dataset_fn=_eval_dataset,
      keras_model_fn=(_big_keras_model if big else _wide_keras_model if wide
                      else _keras_model),
      loss_fn=_loss,
      metrics_fn=_metrics,
      baseline_metrics={"accuracy": 1 / 3, "unigram_accuracy": 1 / 3},
      validation_dataset_fn=_validation_dataset,
      headline_metric="accuracy",
      description="toy 3-class softmax regression")
