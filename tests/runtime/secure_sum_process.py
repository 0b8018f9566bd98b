"""A toy process with TFF's three secure sums, for the runtimes' tests (in-process and workers).

Each client's value is the sum of its dataset; a round returns the bitwidth-, max_input- and
modular-bounded secure sums of the values next to their plain sum.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


def secure_sum_process(bitwidth=3, max_input=5, modulus=7):
  """A round with the three secure sums: client values come from their dataset."""
  int_type = tff.TensorType(np.int32)

  @tff.tensorflow.computation
  def init():
    return np.int32(0)

  @tff.tensorflow.computation(tff.SequenceType(int_type))
  def client_value(data):
    return data.reduce(np.int32(0), lambda a, b: a + b)

  @tff.federated_computation(tff.FederatedType(int_type, tff.SERVER),
                             tff.FederatedType(tff.SequenceType(int_type), tff.CLIENTS))
  def next_fn(state, data):
    values = tff.federated_map(client_value, data)
    bits = tff.federated_secure_sum_bitwidth(values, bitwidth)
    capped = tff.federated_secure_sum(values, max_input)
    modular = tff.backends.mapreduce.federated_secure_modular_sum(values, modulus)
    plain = tff.federated_sum(values)
    return state, tff.federated_zip(collections.OrderedDict(
        bits=bits, capped=capped, modular=modular, plain=plain))

  return tff.templates.IterativeProcess(tff.federated_computation(
      lambda: tff.federated_eval(init, tff.SERVER)), next_fn)


def datasets(values):
  """One client per value, its dataset holding that value."""
  return [tf.data.Dataset.from_tensor_slices(np.array([v], np.int32)) for v in values]
