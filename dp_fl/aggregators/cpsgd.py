"""cpSGD, Rot(s_k(Bin(m, p)), HA), as a TFF aggregation factory (paper 000, Sec. 4.2–4.3).

Every client clips its update to L2 norm D, flattens it into one vector of d coordinates
(zero-padded to d' = 2^⌈log₂ d⌉), rotates it by R = HA/√d' — A the round's public Rademacher
diagonal, drawn from the aggregator's rotation seed and the round index, H the Walsh–Hadamard
transform in O(d' log d') — clips each coordinate to ±X_max, quantizes stochastically to k
levels (Eq. 8, unbiased), adds its own Bin(m, p) noise share and sends d' integers in
{0, …, k−1+m}. The integers are summed by TFF's `SecureModularSumFactory` modulo 2^b with
b = ⌈log₂(n_max (k−1+m) + 1)⌉, so nothing wraps for up to n_max clients; under secure
aggregation the server learns of the integer messages only that sum. That sum is the only
noised release: the counts among the measurements below are plain, un-noised sums that the
guarantee does not cover, and the privacy report names them
(`dp_fl.training.privacy.distributed_scope`). The server removes the noise mean n·m·p (n the
clients that reported), maps level indices back to values, rotates back (R⁻¹ = AH/√d') and
divides by the fixed denominator (the report goal, as the other DP aggregators do). The math,
in NumPy, is `dp_fl/mechanisms/cpsgd.py`; the privacy, `dp_fl/accounting/cpsgd.py`.

Composition (outermost first):

    nonfinite_zeroing_factory   NaN/Inf client updates -> zeros (counted)
      tff zeroing_factory       updates with L2 norm > zeroing_norm -> zeros
        L2ClippingFactory       global L2 clipping to D(1 − 1e-6), the norm in float64 (counted)
          BinomialSecureSumFactory   rotate, quantize, + Bin(m, p), secure modular sum, decode
    / clients_per_round.

The clip bound holds for every input, not only typical ones: TFF's `clipping_factory` sums
per-tensor norms in float32, and an update crafted so that the float32 sum drops small terms
ends above D(1 + 6e-6) (`tests/aggregators/cpsgd_test.py`). `L2ClippingFactory` computes the
global norm in float64 (see its docstring for the bound).

Randomness. The rotation is public randomness (seed in the state, one rotation per round).
The quantization dither and the noise share are each client's *own* randomness: drawn by the
client from OS entropy (`RandomUniformInt` with both seeds 0, so TensorFlow's global seed never
fixes them and no two clients share a stream), as the paper's trust model needs — the server
must not know any share. A consequence: unlike the DP-FTRL aggregators, a round re-run after a
crash draws fresh shares, i.e. it is a second release; `dp_fl/training/registry.py` charges
those re-runs in the privacy report.

State: OrderedDict(inner=<guards/zeroing/clipping state>, rotation=OrderedDict(seed, round)).
Measurements per round: round, clients, clipped_count, zeroed_count, nonfinite_count,
coordinates_clipped (rotated coordinates that hit ±X_max, summed over clients) — the five
counts computed from the clients' data without noise, NOT covered by the guarantee —,
noise_stddev (per-coordinate std of the noise in the sum, w √(n m p(1−p))),
bits_per_coordinate (⌈log₂(k + m)⌉ per client), secure_sum_bits (b).
"""

from __future__ import annotations

import collections
import math
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl import _checks
from dp_fl.aggregators import _types
from dp_fl.aggregators import dp_ftrl
from dp_fl.aggregators import guards
from dp_fl.aggregators import noise as noise_lib
from dp_fl.mechanisms import cpsgd as cpsgd_math

MESSAGE_DTYPE = tf.int64
MAX_SECURE_SUM_BITS = 62  # TFF's secure sums are carried in int64.
CLIP_SLACK = 1e-6  # Relative margin below D: covers float rounding (`L2ClippingFactory`).
MAX_CLIP_PARAMETERS = 2 ** 32  # Up to here the float64 norm's error is < CLIP_SLACK / 4.


def walsh_hadamard(x: tf.Tensor) -> tf.Tensor:
  """H x for a vector of power-of-2 length (Sylvester order, unnormalized), O(d log d)."""
  d = int(x.shape[0])
  h = 1
  while h < d:
    pairs = tf.reshape(x, [d // (2 * h), 2, h])
    x = tf.reshape(tf.stack([pairs[:, 0, :] + pairs[:, 1, :],
                             pairs[:, 0, :] - pairs[:, 1, :]], axis=1), [d])
    h *= 2
  return x


def rademacher_signs(seed: tf.Tensor, round_index: tf.Tensor, size: int,
                     dtype: tf.DType) -> tf.Tensor:
  """The round's public diagonal A: ±1, a pure function of (rotation seed, round)."""
  bits = tf.random.stateless_uniform([size], seed=noise_lib.round_seed(seed, round_index),
                                     minval=0, maxval=2, dtype=tf.int32)
  return tf.cast(2 * bits - 1, dtype)


def _private_seed() -> tf.Tensor:
  """Two int64 words from the executing process's OS entropy (both op seeds 0: TensorFlow
  seeds the kernel randomly, whatever the global seed)."""
  return tf.raw_ops.RandomUniformInt(
      shape=tf.constant([2], tf.int32), minval=tf.constant(np.iinfo(np.int64).min, tf.int64),
      maxval=tf.constant(np.iinfo(np.int64).max, tf.int64), seed=0, seed2=0)


def _leaves_in_type_order(value, value_type) -> list:
  """The tensors of `value` in the order of `value_type`'s members (the flat vector's order,
  which decoding packs back with `tff.structure.pack_sequence_as`)."""
  if not isinstance(value_type, tff.StructType):
    return [value]
  leaves = []
  for i, (name, member) in enumerate(tff.structure.iter_elements(value_type)):
    if isinstance(value, tff.structure.Struct):
      item = getattr(value, name) if name else value[i]
    else:
      item = value[name] if name else value[i]
    leaves.extend(_leaves_in_type_order(item, member))
  return leaves


def global_l2_norm(leaves: list[tf.Tensor]) -> tf.Tensor:
  """‖x‖₂ of all `leaves` together, in float64, whatever their dtype."""
  return tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(tf.cast(x, tf.float64))) for x in leaves]))


class L2ClippingFactory(tff.aggregators.UnweightedAggregationFactory):
  """Scales each client's update to global L2 norm <= `clip_norm`, then `inner_agg_factory`.

  The bound holds for every input of d <= `MAX_CLIP_PARAMETERS` float32 or float64 entries.
  The norm N̂ is computed in float64: the squares of float32 values are exact there (float64
  ones within u), and a sum of d non-negative terms in any order has relative error
  <= (d−1)u (u = 2⁻⁵³), so N̂ >= N (1 − (d/2 + 1)u) for the true norm N. An update with
  N̂ <= clip_norm is passed on as is (its N < clip_norm (1 + 2⁻²²)); any other is multiplied
  by clip_norm / N̂ in float64 and rounded back to its dtype (relative error <= 2⁻²⁴ for
  float32), so its true norm is at most clip_norm (1 + 2⁻²² + 2⁻²⁴ + 3u) < clip_norm
  (1 + 4e-7). `CpSgdFactory` clips to D (1 − 1e-6) and so keeps every update's norm below D,
  with room for the float64 rotation's rounding (O(log d') u). TFF's `clipping_factory` sums
  per-tensor norms in float32, which a crafted update defeats by more than 1e-6.

  Measurements: OrderedDict(clipping=<inner measurements>, clipped_count=<int32>).
  """

  def __init__(self, clip_norm: float,
               inner_agg_factory: tff.aggregators.UnweightedAggregationFactory):
    self._clip_norm = _checks.check_positive("clip_norm", clip_norm)
    self._inner = inner_agg_factory

  def create(self, value_type) -> tff.templates.AggregationProcess:
    specs = _types.tensor_specs(value_type)
    dimension = _types.num_parameters(specs)
    if dimension > MAX_CLIP_PARAMETERS:
      raise ValueError(f"L2 clipping with a float64 norm is guaranteed for at most "
                       f"{MAX_CLIP_PARAMETERS} parameters; the model has {dimension}.")
    inner_process = self._inner.create(value_type)
    bound = self._clip_norm

    @tff.tensorflow.computation(value_type)
    def clip(value):
      leaves = _types.flatten(value)
      norm = global_l2_norm(leaves)
      clipped = norm > bound
      scale = tf.where(clipped, bound / norm, tf.constant(1.0, tf.float64))
      leaves = [tf.cast(tf.cast(x, tf.float64) * scale, x.dtype) for x in leaves]
      return _types.pack_as(value, leaves), tf.cast(clipped, guards.COUNT_DTYPE)

    @tff.federated_computation()
    def init_fn():
      return inner_process.initialize()

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      clipped, was_clipped = tff.federated_map(clip, value)
      inner_output = inner_process.next(state, clipped)
      return tff.templates.MeasuredProcessOutput(
          state=inner_output.state, result=inner_output.result,
          measurements=tff.federated_zip(collections.OrderedDict(
              clipping=inner_output.measurements,
              clipped_count=tff.federated_sum(was_clipped))))

    return tff.templates.AggregationProcess(init_fn, next_fn)


class BinomialSecureSumFactory(tff.aggregators.UnweightedAggregationFactory):
  """Σ_i X_i of already-clipped updates through Rot(s_k(Bin(m, p)), HA) and a secure
  modular sum (paper 000, Sec. 4.3); returns the decoded sum (not divided)."""

  def __init__(self, protocol: cpsgd_math.Protocol, max_clients: int,
               seed: Optional[int] = None):
    self._protocol = protocol
    self._max_clients = _checks.check_positive_int("max_clients", max_clients)
    self._bits = cpsgd_math.secure_sum_bits(max_clients, protocol.num_levels,
                                            protocol.num_trials)
    if self._bits > MAX_SECURE_SUM_BITS:
      raise ValueError(
          f"cpSGD's secure sum needs {self._bits} bits for {max_clients} clients × (k−1+m) = "
          f"{protocol.num_levels - 1 + protocol.num_trials}; at most {MAX_SECURE_SUM_BITS} "
          "fit. Use fewer Binomial trials m (more noise per level: fewer --cpsgd_levels) or "
          "smaller cohorts.")
    self._seed = dp_ftrl.seed_pair(seed)

  @property
  def secure_sum_bits(self) -> int:
    return self._bits

  def create(self, value_type) -> tff.templates.AggregationProcess:
    specs = _types.tensor_specs(value_type)
    dimension = _types.num_parameters(specs)
    protocol = self._protocol
    size = cpsgd_math.padded_dimension(dimension) if protocol.rotate else dimension
    k, m, p, x_max = protocol.num_levels, protocol.num_trials, protocol.p, protocol.x_max
    spacing = protocol.level_spacing
    seed = self._seed
    message_type = tff.TensorType(MESSAGE_DTYPE.as_numpy_dtype, [size])
    modular_sum = tff.aggregators.SecureModularSumFactory(np.int64(1 << self._bits)).create(
        message_type)
    bits_per_coordinate = cpsgd_math.bits_per_coordinate(k, m)
    secure_sum_bits = self._bits
    max_clients = self._max_clients

    @tff.tensorflow.computation
    def init_rotation_state():
      return collections.OrderedDict(seed=tf.constant(seed, noise_lib.SEED_DTYPE),
                                     round=tf.constant(0, noise_lib.ROUND_DTYPE))

    rotation_type = init_rotation_state.type_signature.result

    @tff.tensorflow.computation(value_type, rotation_type)
    def encode(value, rotation):
      x = tf.concat([tf.reshape(tf.cast(v, tf.float64), [-1])
                     for v in _leaves_in_type_order(value, value_type)], axis=0)
      if protocol.rotate:
        x = tf.pad(x, [[0, size - dimension]])
        x = walsh_hadamard(rademacher_signs(rotation["seed"], rotation["round"], size,
                                            tf.float64) * x) / math.sqrt(size)
      clipped = tf.reduce_sum(tf.cast(tf.abs(x) > x_max, tf.int32))
      position = (tf.clip_by_value(x, -x_max, x_max) + x_max) / spacing
      position = tf.clip_by_value(position, 0.0, k - 1.0)
      low = tf.minimum(tf.floor(position), k - 2.0)
      private = _private_seed()
      dither = tf.random.stateless_uniform([size], seed=private, dtype=tf.float64)
      levels = tf.cast(low, MESSAGE_DTYPE) + tf.cast(dither < position - low, MESSAGE_DTYPE)
      if m:
        share = tf.random.stateless_binomial(
            [size], seed=tf.random.experimental.stateless_fold_in(private, 1),
            counts=tf.constant(float(m), tf.float64), probs=tf.constant(p, tf.float64),
            output_dtype=MESSAGE_DTYPE)
        levels = levels + share
      return levels, clipped

    @tff.tensorflow.computation(message_type, tf.int32, rotation_type)
    def decode(message_sum, count, rotation):
      wrapped = tf.debugging.assert_less_equal(
          count, max_clients, message=f"cpSGD: more clients than the {max_clients} its "
          "secure sum's modulus holds (the sum may have wrapped)")
      with tf.control_dependencies([wrapped]):
        count = tf.cast(count, tf.float64)
      levels = tf.cast(message_sum, tf.float64) - count * (m * p)
      total = levels * spacing - count * x_max
      if protocol.rotate:
        total = rademacher_signs(rotation["seed"], rotation["round"], size,
                                 tf.float64) * walsh_hadamard(total) / math.sqrt(size)
      flat = total[:dimension]
      leaves, offset = [], 0
      for spec in specs:
        n = int(np.prod(spec.shape.as_list(), dtype=np.int64))
        leaves.append(tf.cast(tf.reshape(flat[offset:offset + n], spec.shape), spec.dtype))
        offset += n
      if isinstance(value_type, tff.StructType):
        return tff.structure.pack_sequence_as(value_type, leaves)
      return leaves[0]

    @tff.tensorflow.computation(rotation_type, tf.int32)
    def advance(rotation, count):
      stddev = spacing * tf.sqrt(tf.cast(count, tf.float64) * (m * p * (1.0 - p)))
      return (collections.OrderedDict(seed=rotation["seed"], round=rotation["round"] + 1),
              tf.cast(stddev, tf.float32))

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip(collections.OrderedDict(
          rotation=tff.federated_eval(init_rotation_state, tff.SERVER),
          modular_sum=modular_sum.initialize()))

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      rotation = tff.federated_broadcast(state.rotation)
      messages, clipped = tff.federated_map(encode, (value, rotation))
      summed = modular_sum.next(state.modular_sum, messages)
      count = tff.federated_sum(tff.federated_value(1, tff.CLIENTS))
      result = tff.federated_map(decode, (summed.result, count, state.rotation))
      new_rotation, stddev = tff.federated_map(advance, (state.rotation, count))
      measurements = collections.OrderedDict(
          round=state.rotation.round,
          coordinates_clipped=tff.federated_sum(clipped),
          noise_stddev=stddev,
          bits_per_coordinate=tff.federated_value(np.int32(bits_per_coordinate), tff.SERVER),
          secure_sum_bits=tff.federated_value(np.int32(secure_sum_bits), tff.SERVER))
      return tff.templates.MeasuredProcessOutput(
          state=tff.federated_zip(collections.OrderedDict(
              rotation=new_rotation, modular_sum=summed.state)),
          result=result,
          measurements=tff.federated_zip(measurements))

    return tff.templates.AggregationProcess(init_fn, next_fn)


class CpSgdFactory(tff.aggregators.UnweightedAggregationFactory):
  """cpSGD's mean: guards, clipping to D, `BinomialSecureSumFactory`, / clients_per_round.

  Measurements per round: clients, clipped_count, zeroed_count, nonfinite_count and the
  secure-sum measurements (`BinomialSecureSumFactory`).
  """

  def __init__(self, protocol: cpsgd_math.Protocol, *, clients_per_round: int,
               max_clients: Optional[int] = None, seed: Optional[int] = None,
               zeroing_norm: Optional[float] = None):
    """Args:
      protocol: k, m, p, X_max, D and whether to rotate (`dp_fl.mechanisms.cpsgd.Protocol`).
      clients_per_round: the fixed denominator n.
      max_clients: the most clients a round may have (sizes the secure sum's modulus);
        default `clients_per_round`.
      seed: the public rotation seed; None draws one from OS entropy.
      zeroing_norm: updates with L2 norm above it are zeroed; default 1000 D.
    """
    self._protocol = protocol
    self._clients_per_round = _checks.check_positive_int("clients_per_round",
                                                         clients_per_round)
    self._sum_factory = BinomialSecureSumFactory(
        protocol, max_clients or clients_per_round, seed=seed)
    if zeroing_norm is None:
      zeroing_norm = dp_ftrl.DEFAULT_ZEROING_MULTIPLE * protocol.clip_norm
    if zeroing_norm < protocol.clip_norm:
      raise ValueError(f"`zeroing_norm`={zeroing_norm} is below the clip norm "
                       f"{protocol.clip_norm}; use zeroing_norm >= clip_norm.")
    self._zeroing_norm = float(zeroing_norm)

  @property
  def protocol(self) -> cpsgd_math.Protocol:
    return self._protocol

  @property
  def secure_sum_bits(self) -> int:
    return self._sum_factory.secure_sum_bits

  def create(self, value_type) -> tff.templates.AggregationProcess:
    _types.tensor_specs(value_type)  # Clear errors for unsupported value types.
    inner_process = guards.nonfinite_zeroing_factory(
        tff.aggregators.zeroing_factory(
            self._zeroing_norm,
            # Just below D: rounding can leave a norm slightly above the bound it was scaled
            # to (at most 4e-7 relative, `L2ClippingFactory`), never above D.
            L2ClippingFactory(self._protocol.clip_norm * (1.0 - CLIP_SLACK),
                              self._sum_factory),
            norm_order=2.0)).create(value_type)
    denominator = float(self._clients_per_round)

    @tff.tensorflow.computation(value_type)
    def divide(value_sum):
      leaves = [v / tf.constant(denominator, v.dtype) for v in _types.flatten(value_sum)]
      return _types.pack_as(value_sum, leaves)

    @tff.federated_computation()
    def init_fn():
      return inner_process.initialize()

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      inner_output = inner_process.next(state, value)
      zeroing = inner_output.measurements.nonfinite
      measurements = collections.OrderedDict(
          clients=tff.federated_sum(tff.federated_value(1, tff.CLIENTS)),
          clipped_count=zeroing.zeroing.clipped_count,
          zeroed_count=zeroing.zeroed_count,
          nonfinite_count=inner_output.measurements.nonfinite_count,
          secure_sum=zeroing.zeroing.clipping)
      return tff.templates.MeasuredProcessOutput(
          state=inner_output.state,
          result=tff.federated_map(divide, inner_output.result),
          measurements=tff.federated_zip(measurements))

    return tff.templates.AggregationProcess(init_fn, next_fn)
