"""The mean of the non-private aggregators: defined for every cohort, empty ones included.

TFF's `UnweightedMeanFactory` divides the sum by the number of clients, so a round without
clients (a scheduler found none eligible) gives 0/0 = NaN: TFF's finalizer refuses the
update ("non-finite server update") and dp_fl's loop stops the run — which is how the
non-private `none` / `clip` runs of docs/RESULTS.md "diverged" at round 47 while every DP
run, whose denominator is fixed, went on (issue #19). `cohort_mean_factory` is the mean that
never does that:

* `fixed_denominator=None`: sum / max(count, 1) — plain FedAvg's mean over the clients that
  reported, and a zero update for an empty round;
* `fixed_denominator=m`: sum / m — the estimator of the DP aggregators (DP-FTRL, paper 004
  Alg. 1: the sum over the cohort divided by the report goal m; DP-FedAvg's fixed
  denominator qN, paper 001 Alg. 1) without the noise, so a clip-only run differs from a DP
  run by the noise alone.

Measurements: OrderedDict(mean_value=<the sum's>, clients=<int32, the clients counted>).
"""

from __future__ import annotations

import collections
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl import _checks
from dp_fl.aggregators import _types

COUNT_DTYPE = np.int32


def cohort_mean_factory(fixed_denominator: Optional[float] = None
                        ) -> tff.aggregators.UnweightedAggregationFactory:
  """The mean over a round's clients (None) or the sum over a fixed `fixed_denominator` (the
  report goal m, or the expected cohort qN of Poisson sampling)."""
  if fixed_denominator is not None:
    fixed_denominator = _checks.check_positive("fixed_denominator", fixed_denominator)
  return _CohortMeanFactory(fixed_denominator)


class _CohortMeanFactory(tff.aggregators.UnweightedAggregationFactory):
  """See `cohort_mean_factory`."""

  def __init__(self, fixed_denominator: Optional[float]):
    self._fixed = fixed_denominator
    self._sum = tff.aggregators.SumFactory()

  def create(self, value_type):
    _types.tensor_specs(value_type)
    sum_process = self._sum.create(value_type)
    count_process = self._sum.create(tff.TensorType(COUNT_DTYPE))
    fixed = self._fixed

    @tff.tensorflow.computation(value_type, tff.TensorType(COUNT_DTYPE))
    def divide(value_sum, count):
      leaves = _types.flatten(value_sum)
      if fixed is None:
        denominator = tf.cast(tf.maximum(count, 1), tf.float64)
      else:
        denominator = tf.constant(fixed, tf.float64)
      return _types.pack_as(value_sum, [x / tf.cast(denominator, x.dtype) for x in leaves])

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip(collections.OrderedDict(
          value_sum=sum_process.initialize(), count_sum=count_process.initialize()))

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      sums = sum_process.next(state.value_sum, value)
      counts = count_process.next(state.count_sum, tff.federated_value(1, tff.CLIENTS))
      mean = tff.federated_map(divide, (sums.result, counts.result))
      new_state = tff.federated_zip(collections.OrderedDict(
          value_sum=sums.state, count_sum=counts.state))
      measurements = tff.federated_zip(collections.OrderedDict(
          mean_value=sums.measurements, clients=counts.result))
      return tff.templates.MeasuredProcessOutput(new_state, mean, measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)
