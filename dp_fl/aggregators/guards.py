"""Client-update guards composed in front of the DP aggregators.

TFF's `zeroing_factory` zeroes updates whose norm exceeds a threshold, but a
NaN norm compares False with any threshold, so a client update containing
NaN would pass it (and TFF's clipping) and poison the sum and, through the
noise buffers, every later round. `nonfinite_zeroing_factory` closes that gap:
it replaces any client update with a non-finite entry by zeros and counts it.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl.aggregators import _types

COUNT_DTYPE = np.int32


def nonfinite_zeroing_factory(
    inner_agg_factory: tff.aggregators.UnweightedAggregationFactory,
) -> tff.aggregators.UnweightedAggregationFactory:
  """Wraps `inner_agg_factory`: client updates with NaN/Inf entries become zeros.

  Measurements: OrderedDict(nonfinite=<inner measurements>, nonfinite_count=<int32>).
  """
  if not isinstance(inner_agg_factory, tff.aggregators.UnweightedAggregationFactory):
    raise ValueError(
        f"`inner_agg_factory` must be a tff.aggregators.UnweightedAggregationFactory; "
        f"got {type(inner_agg_factory).__name__}.")
  return _NonFiniteZeroingFactory(inner_agg_factory)


def guard_update(value, zeroing_norm: float | None = None):
  """(update or zeros, nonfinite flag, zeroed flag) of one client's update, in TensorFlow: an
  update with a NaN/Inf entry, or (given `zeroing_norm`) an L2 norm above it (float64), is
  replaced by zeros. For aggregators that cannot nest the guard factories (TFF's distributed
  DP factory: `dp_fl/aggregators/distributed_dp.py`)."""
  leaves = _types.flatten(value)
  finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(x)) for x in leaves])
  keep, too_large = finite, tf.constant(False)
  if zeroing_norm is not None:
    norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(tf.cast(x, tf.float64))) for x in leaves]))
    too_large = tf.logical_and(finite, norm > zeroing_norm)
    keep = tf.logical_and(finite, tf.logical_not(too_large))
  guarded = [tf.where(keep, x, tf.zeros_like(x)) for x in leaves]
  return (_types.pack_as(value, guarded), tf.cast(tf.logical_not(finite), COUNT_DTYPE),
          tf.cast(too_large, COUNT_DTYPE))


class _NonFiniteZeroingFactory(tff.aggregators.UnweightedAggregationFactory):
  """See `nonfinite_zeroing_factory`."""

  def __init__(self, inner_agg_factory):
    self._inner = inner_agg_factory
    self._count_sum = tff.aggregators.SumFactory()

  def create(self, value_type):
    _types.tensor_specs(value_type)
    inner_process = self._inner.create(value_type)
    count_type = tff.TensorType(COUNT_DTYPE)
    count_process = self._count_sum.create(count_type)

    @tff.tensorflow.computation(value_type)
    def zero_if_nonfinite(value):
      guarded, nonfinite, _ = guard_update(value)
      return guarded, nonfinite

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip(collections.OrderedDict(
          inner_agg=inner_process.initialize(),
          nonfinite_count_agg=count_process.initialize()))

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      guarded, was_zeroed = tff.federated_map(zero_if_nonfinite, value)
      inner_output = inner_process.next(state.inner_agg, guarded)
      count_output = count_process.next(state.nonfinite_count_agg, was_zeroed)
      return tff.templates.MeasuredProcessOutput(
          state=tff.federated_zip(collections.OrderedDict(
              inner_agg=inner_output.state,
              nonfinite_count_agg=count_output.state)),
          result=inner_output.result,
          measurements=tff.federated_zip(collections.OrderedDict(
              nonfinite=inner_output.measurements,
              nonfinite_count=count_output.result)))

    return tff.templates.AggregationProcess(init_fn, next_fn)
