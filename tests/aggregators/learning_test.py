"""The aggregators as `model_aggregator` of TFF's FedAvg: a tiny model trains with each."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl.aggregators import dp_fedavg
from dp_fl.aggregators import dp_ftrl
from tests.aggregators import reference

ROUNDS = 4
TRUE_W = np.array([[2.0], [-1.0]], np.float32)


def _client_data(seed: int) -> tf.data.Dataset:
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(16, 2)).astype(np.float32)
  y = x @ TRUE_W
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(8)


CLIENTS = [_client_data(i) for i in range(3)]


def _model_fn():
  keras_model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(2,)),
      tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
  return tff.learning.models.from_keras_model(
      keras_model, loss=tf.keras.losses.MeanSquaredError(),
      input_spec=CLIENTS[0].element_spec)


def _loss(weights) -> float:
  w = np.asarray(weights.trainable[0])
  return float(np.sum((w - TRUE_W) ** 2))


def _aggregator(preset: str):
  common = dict(clip_norm=1.0, noise_multiplier=0.05, clients_per_round=len(CLIENTS), seed=9)
  return dp_ftrl.DPFTRLFactory(reference.noise_spec(preset, ROUNDS, bands=2), **common)


def _train(process):
  state = process.initialize()
  before = _loss(process.get_model_weights(state))
  for _ in range(ROUNDS):
    output = process.next(state, CLIENTS)
    state = output.state
  return before, _loss(process.get_model_weights(state)), output.metrics


@pytest.mark.parametrize("preset", ["blt", "banded", "tree", "dpsgd"])
def test_unweighted_fed_avg_trains_with_dp_ftrl(preset):
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=1.0),
      model_aggregator=_aggregator(preset))
  before, after, metrics = _train(process)
  assert after < 0.5 * before, (preset, before, after)
  aggregator_metrics = metrics["aggregator"]
  assert aggregator_metrics["round"] == ROUNDS - 1
  assert aggregator_metrics["clients"] == len(CLIENTS)


def test_weighted_fed_avg_trains_with_dp_fedavg():
  aggregator = dp_fedavg.DPFedAvgFactory(
      clip_norm=1.0, noise_multiplier=0.05, sampling_probability=1.0,
      total_weight=float(len(CLIENTS)), example_cap=16.0, seed=4)
  process = tff.learning.algorithms.build_weighted_fed_avg(
      _model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=1.0),
      model_aggregator=aggregator)
  before, after, metrics = _train(process)
  assert after < 0.5 * before, (before, after)
  assert metrics["aggregator"]["total_weight"] == pytest.approx(len(CLIENTS))


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
