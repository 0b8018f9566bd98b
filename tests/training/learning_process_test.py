"""dp_fl's composed FedAvg equals TFF's builders round for round, without per-client init cost."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl.execution import runtime
from dp_fl.training import client_work
from dp_fl.training import program
from dp_fl.training import registry
from tests.training import toy_task


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def test_client_model_skips_initializers_only_for_trainable_variables():
  task = toy_task.make_task()
  spec = task.train_data.create_tf_dataset_for_client(task.train_data.client_ids[0]).element_spec
  fast = client_work.model_fn(task, spec, initialize=False)()
  real = client_work.model_fn(task, spec)()
  assert [w.shape for w in fast.trainable_variables] == [w.shape for w in real.trainable_variables]
  assert all(not np.any(w.numpy()) for w in fast.trainable_variables)
  assert any(np.any(w.numpy()) for w in real.trainable_variables)


@pytest.mark.parametrize("mechanism", ["none", "dpfedavg"])
def test_one_round_equals_tffs_fed_avg_builder(tmp_path, mechanism):
  task = toy_task.make_task()
  config = registry.make_config(
      task=task.name, root_dir=str(tmp_path), rounds=5, clients_per_round=4,
      mechanism=mechanism, noise_multiplier=1.0,
      clip_norm=10.0, participation="poisson" if mechanism == "dpfedavg" else "uniform",
      population_sampling_rate=0.25 if mechanism == "dpfedavg" else None,
      client_learning_rate=0.1, server_learning_rate=1.0, server_momentum=0.9, seed=5)
  num_clients = len(task.train_data.client_ids)
  # The same noise seed in both processes (by default each aggregator draws its own).
  aggregator = program.build_aggregator(config, program.build_mechanism(config), num_clients,
                                        noise_seed=5)
  ours = program.build_learning_process(task, config, aggregator)

  spec = task.train_data.create_tf_dataset_for_client(task.train_data.client_ids[0]).element_spec
  builder = (tff.learning.algorithms.build_weighted_fed_avg if mechanism == "dpfedavg"
             else tff.learning.algorithms.build_unweighted_fed_avg)
  reference = builder(
      client_work.model_fn(task, spec),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
      server_optimizer_fn=program._server_optimizer(config),  # pylint: disable=protected-access
      model_aggregator=program.build_aggregator(config, program.build_mechanism(config),
                                                num_clients, noise_seed=5),
      loop_implementation=tff.learning.LoopImplementation.DATASET_ITERATOR)
  assert ours.next.type_signature.is_equivalent_to(reference.next.type_signature)

  state = ours.initialize()
  initial = ours.get_model_weights(state)
  assert any(np.any(np.asarray(w)) for w in initial.trainable)  # Real initializers.
  reference_state = reference.set_model_weights(reference.initialize(), initial)
  data = [task.train_data.create_tf_dataset_for_client(c)
          for c in task.train_data.client_ids[:4]]
  for _ in range(2):
    output, reference_output = ours.next(state, data), reference.next(reference_state, data)
    state, reference_state = output.state, reference_output.state
    tf.nest.map_structure(np.testing.assert_array_equal,
                          ours.get_model_weights(state).trainable,
                          reference.get_model_weights(reference_state).trainable)
  assert output.metrics["client_work"]["train"]["loss"] == (
      reference_output.metrics["client_work"]["train"]["loss"])


def _delta_work(task, learning_rate=0.1, weighting=tff.learning.ClientWeighting.UNIFORM):
  spec = task.train_data.create_tf_dataset_for_client(task.train_data.client_ids[0]).element_spec
  return client_work.delta_client_work(task, spec, optimizer="sgd", learning_rate=learning_rate,
                                       weighting=weighting)


def test_runs_share_the_traced_client_work_only_when_it_is_the_same():
  tf.random.set_seed(3)
  work = _delta_work(toy_task.make_task())
  assert _delta_work(toy_task.make_task(poison_client="client_001")) is work  # Data only.
  assert _delta_work(toy_task.make_task(), learning_rate=0.2) is not work
  assert _delta_work(toy_task.make_task(),
                     weighting=tff.learning.ClientWeighting.NUM_EXAMPLES) is not work
  tf.random.set_seed(4)  # Op seeds traced into the graph derive from the global seed.
  assert _delta_work(toy_task.make_task()) is not work
  tf.random.set_seed(3)
  assert _delta_work(toy_task.make_task()) is work

  # Another model function, even one building the same architecture: not shared.
  def same_architecture():
    return toy_task._keras_model()  # pylint: disable=protected-access
  other = dataclasses.replace(toy_task.make_task(), keras_model_fn=same_architecture)
  assert _delta_work(other) is not work
  assert _delta_work(other) is _delta_work(other)

  # A model function whose architecture changes between calls: not shared across them.
  widths = iter([3, 5])

  def growing():
    return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)),
                                tf.keras.layers.Dense(next(widths))])
  grows = dataclasses.replace(toy_task.make_task(), keras_model_fn=growing)
  with pytest.raises(StopIteration):  # One model per key, one for the trace: a third call.
    assert _delta_work(grows) is not _delta_work(grows)


class _NoConfigScale(tf.keras.layers.Layer):
  """A custom layer with an object argument and no `get_config` (Keras cannot serialize the
  model, as the Reddit model's tied softmax, which holds its embedding layer)."""

  def __init__(self, transform, **kwargs):
    super().__init__(**kwargs)
    self.transform = transform

  def build(self, input_shape):
    self.scale = self.add_weight(name="scale", shape=(input_shape[-1],), initializer="ones")

  def call(self, inputs):
    return self.transform(inputs * self.scale)


def test_a_model_keras_cannot_serialize_is_described_by_its_layers_and_variables():
  def model(width):
    inputs = tf.keras.Input((4,))
    return tf.keras.Model(inputs, tf.keras.layers.Dense(width)(_NoConfigScale(tf.nn.relu)(inputs)))
  with pytest.raises(NotImplementedError):
    model(3).to_json()
  # pylint: disable=protected-access
  assert client_work._architecture(model(3)) == client_work._architecture(model(3))
  assert client_work._architecture(model(3)) != client_work._architecture(model(5))


def test_clip_mechanism_is_the_clipped_mean_without_noise(tmp_path):
  config = registry.make_config(
      task="toy", root_dir=str(tmp_path), rounds=5, clients_per_round=3, mechanism="clip",
      noise_multiplier=0.0, clip_norm=1.0, participation="uniform")
  value_type = tff.TensorType(np.float32, (2,))
  process = program.build_aggregator(config, program.build_mechanism(config), 3).create(
      value_type)
  updates = [np.array([3.0, 4.0], np.float32), np.array([0.3, 0.4], np.float32),
             np.array([0.0, -2.0], np.float32)]
  output = process.next(process.initialize(), updates)
  # Norms 5, 0.5 and 2 are clipped to 1, 0.5 and 1; the mean divides by the 3 clients.
  expected = (np.array([0.6, 0.8]) + np.array([0.3, 0.4]) + np.array([0.0, -1.0])) / 3
  np.testing.assert_allclose(output.result, expected, rtol=1e-6)
  clipping = output.measurements["nonfinite"]["zeroing"]
  assert clipping["clipped_count"] == 2

  # A finite update whose norm overflows float32 (a client that blew up) is zeroed, not turned
  # into NaNs by tf.clip_by_global_norm; a NaN update is zeroed too.
  blown_up = [np.array([3e38, 3e38], np.float32), np.array([np.nan, 0.0], np.float32),
              np.array([0.0, -2.0], np.float32)]
  output = process.next(process.initialize(), blown_up)
  np.testing.assert_allclose(output.result, np.array([0.0, -1.0]) / 3, rtol=1e-6)
  assert output.measurements["nonfinite"]["zeroed_count"] == 1
  assert output.measurements["nonfinite_count"] == 1


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
