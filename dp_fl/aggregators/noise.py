"""Streaming correlated noise C⁻¹Z in TensorFlow, one generator per mechanism.

Paper 004, Eq. 1: DP-FTRL privatizes the prefix sums A X by releasing
B (C X + ζ Z) = A (X + ζ C⁻¹ Z), so the privatized update of round t is

    Δ̃ᵗ = Σ_i Δᵢᵗ + (σζ C⁻¹ Z)_{t,:}                        (Eq. 4)

with Z an n × (model size) matrix of i.i.d. N(0, 1) entries. A generator here
produces row t of C⁻¹ Z from the round's fresh Gaussian z_t = Z_{t,:} and a
small state of model-sized buffers, entirely in TensorFlow (the aggregator's
`next` is a TFF computation):

| mechanism | C                                       | buffers (model copies) |
|-----------|-----------------------------------------|------------------------|
| BLT       | BLT(θ, ω), Eq. 2; streamed by Alg. 3     | d                      |
| BandMF    | lower-triangular, `bands` bands          | bands − 1              |
| TreeAgg   | binary tree, nodes in completion order   | ⌊log₂ n⌋ ≤ ⌈log₂ n⌉     |
| DP-SGD    | I                                        | 0                      |
| BISR, BandInvMF | C⁻¹ banded Toeplitz, `bands` bands | bands − 1              |

Fresh Gaussians come from `tf.random.stateless_normal` with a seed derived
from (seed, round index, tensor index) by `stateless_fold_in`, so the
aggregator state (seed, round, buffers) determines the rest of the noise
stream and a checkpointed state resumes it exactly.

Every generator here is built from a typed noise spec, the NumPy generator of
`dp_fl.mechanisms.streaming` (`BltNoise(streaming.BltStreamingNoise(θ, ω))`, …),
which holds the recurrence's arrays, its buffer count and `max_rounds` and
validates them: this module validates nothing but the spec's type. `from_spec`
maps a spec to its TF generator (one dict); `from_mechanism` also accepts a
`dp_fl.mechanisms.catalog.Mechanism`. The NumPy specs are the reference these
generators are tested against (tests/aggregators/noise_test.py).
"""

from __future__ import annotations

import abc
from typing import Any, Optional, Sequence

import tensorflow as tf

from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import streaming

SEED_DTYPE = tf.int64
ROUND_DTYPE = tf.int64


def round_seed(seed: tf.Tensor, round_index: tf.Tensor) -> tf.Tensor:
  """The stateless seed of round `round_index`: fold_in(seed, round)."""
  return tf.random.experimental.stateless_fold_in(
      tf.cast(seed, SEED_DTYPE), tf.cast(round_index, tf.int64))


def standard_normal(seed: tf.Tensor, round_index: tf.Tensor,
                    specs: Sequence[tf.TensorSpec]) -> list[tf.Tensor]:
  """z_t = Z_{t,:}: one N(0, 1) tensor per spec, a pure function of (seed, t).

  Tensor i of round t uses the seed fold_in(fold_in(seed, t), i), so the
  noise of different tensors and rounds is independent and reproducible.
  """
  base = round_seed(seed, round_index)
  return [
      tf.random.stateless_normal(
          spec.shape, seed=tf.random.experimental.stateless_fold_in(base, i),
          dtype=spec.dtype)
      for i, spec in enumerate(specs)
  ]


class StreamingNoise(abc.ABC):
  """Streams rows of C⁻¹Z (paper 004, Eq. 1) in TensorFlow, from a NumPy noise spec.

  A generator keeps, for every model tensor of shape `s`, one buffer tensor
  of shape `[buffers, *s]` (`buffers` may be 0). `step` maps the round's
  N(0, 1) draw `z` and the buffer to (row t of C⁻¹ Z, next buffer). `name`,
  `buffers` and `max_rounds` are the spec's.
  """

  spec_type: type = streaming.StreamingNoise

  def __init__(self, spec: streaming.StreamingNoise):
    if not isinstance(spec, self.spec_type):
      raise ValueError(
          f"`spec` of {type(self).__name__} must be a dp_fl.mechanisms.streaming."
          f"{self.spec_type.__name__} (which validates the parameters); got "
          f"{type(spec).__name__}. Build the spec there, or use noise.from_mechanism.")
    self.spec = spec

  @property
  def name(self) -> str:
    return self.spec.name

  @property
  def buffers(self) -> int:
    """Model-sized arrays in the state (paper 004, Table 1 "memory")."""
    return self.spec.buffers

  @property
  def max_rounds(self) -> Optional[int]:
    """Rounds the generator is defined for; None when any number works."""
    return self.spec.max_rounds

  def initial_buffer(self, spec: tf.TensorSpec) -> tf.Tensor:
    """Zeros of shape [buffers, *spec.shape] (S₋₁ = 0 in Alg. 3)."""
    return tf.zeros([self.buffers] + list(spec.shape), dtype=spec.dtype)

  @abc.abstractmethod
  def step(self, z: tf.Tensor, buffer: tf.Tensor,
           round_index: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(row `round_index` of C⁻¹Z, next buffer) for one model tensor."""

  def _assert_in_range(self, round_index: tf.Tensor) -> list[tf.Operation]:
    if self.max_rounds is None:
      return []
    return [tf.debugging.assert_less(
        tf.cast(round_index, tf.int64), tf.constant(self.max_rounds, tf.int64),
        message=(f"{self.name} noise was built for {self.max_rounds} rounds and is not "
                 f"defined beyond them; rebuild the aggregator for more rounds."))]


def _expand(vector: tf.Tensor, rank: int) -> tf.Tensor:
  return tf.reshape(vector, [-1] + [1] * rank)


def _weighted_sum(weights: tf.Tensor, buffer: tf.Tensor) -> tf.Tensor:
  """Σ_j weights[j] buffer[j] as one matrix-vector product (reads each buffer once)."""
  flat = tf.reshape(buffer, [tf.shape(buffer)[0], -1])
  return tf.reshape(tf.linalg.matvec(flat, weights, transpose_a=True), tf.shape(buffer)[1:])


class BltNoise(StreamingNoise):
  """C = BLT(θ, ω) (paper 004, Eq. 2), streamed by Alg. 3 with d buffers:

      ẑ_t = z_t − ωᵀ S_{t−1},    S_t = diag(θ) S_{t−1} + 1_d ẑ_t    (Eq. 3)

  Defined for any number of rounds. Built from a `streaming.BltStreamingNoise`.
  """

  spec_type = streaming.BltStreamingNoise

  def step(self, z, buffer, round_index):
    del round_index  # BLT streaming is time-invariant (Toeplitz C).
    rank = z.shape.rank
    theta = _expand(tf.constant(self.spec.theta, z.dtype), rank)
    noise = z - _weighted_sum(tf.constant(self.spec.omega, z.dtype), buffer)
    return noise, theta * buffer + noise[tf.newaxis]


class BandedNoise(StreamingNoise):
  """Banded lower-triangular C (BandMF), by forward substitution in the band:

      ẑ_t = (z_t − Σ_{k=1}^{bands−1} C[t, t−k] ẑ_{t−k}) / C[t, t]

  keeping ẑ_{t−1}, …, ẑ_{t−bands+1} (bands − 1 buffers). Refuses rounds
  beyond the n of its C (paper 004: BandMF is not defined beyond n). Built
  from a `streaming.BandedStreamingNoise` (band[t, k] = C[t, t − k]).
  """

  spec_type = streaming.BandedStreamingNoise

  def step(self, z, buffer, round_index):
    with tf.control_dependencies(self._assert_in_range(round_index)):
      row = tf.gather(tf.constant(self.spec.band, z.dtype), round_index)
    if self.buffers == 0:
      return z / row[0], buffer
    noise = (z - _weighted_sum(row[1:], buffer)) / row[0]
    return noise, tf.concat([noise[tf.newaxis], buffer[:-1]], axis=0)


class TreeNoise(StreamingNoise):
  """Online TreeAgg (Kairouz et al. 2021; paper 004 Sec. 2.3), n rounds.

  The tree node completed at round t (1-based) covers (t − 2^v, t], v the
  number of trailing zero bits of t; it gets the round's fresh Gaussian z_t.
  Taking these n nodes in completion order as the rows of C (square,
  lower-triangular) gives A = B C with B selecting the dyadic decomposition
  of [1, t] (the binary counter), so the per-round noise of online TreeAgg is
  exactly (C⁻¹Z)_t = z_t − Σ_{levels ℓ < v} (node noise stored at ℓ).
  Level ℓ is read again only if 2^{ℓ+1} ≤ n, so ⌊log₂ n⌋ buffers suffice.

  The released noise depends only on these n nodes (the binary counter never uses the
  other n − 1 nodes of the full tree): the rows of this C are a subset of the full tree's
  rows, so ||C u|| <= ||C_full u|| for every participation vector u and its sensitivity is
  at most the full tree's; accounting with the full tree (`dp_fl.mechanisms.tree`) stays
  valid.
  No variance reduction is applied (the plain binary-counter estimator).
  Built from a `streaming.TreeStreamingNoise` with `rounds` set (TF needs a
  fixed number of buffers).
  """

  spec_type = streaming.TreeStreamingNoise

  def __init__(self, spec: streaming.TreeStreamingNoise):
    super().__init__(spec)
    if spec.rounds is None:
      raise ValueError(
          "The TF online tree needs the number of rounds (it sizes the ⌊log₂ n⌋ buffers); "
          "got a TreeStreamingNoise with rounds=None. Build TreeStreamingNoise(rounds=n), or "
          "pass `rounds` to noise.from_mechanism / DPFTRLFactory.")

  def step(self, z, buffer, round_index):
    with tf.control_dependencies(self._assert_in_range(round_index)):
      t = tf.cast(round_index, tf.int64) + 1
    if self.buffers == 0:
      return z, buffer
    lowbit = tf.bitwise.bitwise_and(t, -t)
    v = tf.cast(tf.raw_ops.PopulationCount(x=lowbit - 1), tf.int64)
    levels = tf.range(self.buffers, dtype=tf.int64)
    rank = z.shape.rank
    merged = tf.cast(levels < v, z.dtype)
    written = tf.cast(tf.equal(levels, v), z.dtype)
    noise = z - _weighted_sum(merged, buffer)
    keep = _expand(1 - merged - written, rank)
    return noise, buffer * keep + _expand(written, rank) * z[tf.newaxis]


class IdentityNoise(StreamingNoise):
  """C = I (DP-SGD / DP-FedAvg without amplification): independent noise.

  Built from a `streaming.IdentityStreamingNoise`.
  """

  spec_type = streaming.IdentityStreamingNoise

  def step(self, z, buffer, round_index):
    del round_index
    return z, buffer


class BandedInverseNoise(StreamingNoise):
  """C⁻¹ banded lower-triangular Toeplitz (BISR, BandInvMF): C⁻¹'s band applied to the last
  `bands` fresh Gaussians,

      (C⁻¹ Z)_t = Σ_{j=0}^{bands−1} ĉ_j z_{t−j},

  keeping z_{t−1}, …, z_{t−bands+1} (bands − 1 buffers). Defined for any number of rounds.
  Built from a `streaming.BandedInverseStreamingNoise`.
  """

  spec_type = streaming.BandedInverseStreamingNoise

  def step(self, z, buffer, round_index):
    del round_index  # Toeplitz C⁻¹: time-invariant.
    coef = tf.constant(self.spec.inverse_coef, z.dtype)
    noise = coef[0] * z
    if self.buffers == 0:
      return noise, buffer
    noise = noise + _weighted_sum(coef[1:], buffer)
    return noise, tf.concat([z[tf.newaxis], buffer[:-1]], axis=0)


# Spec type -> TF generator: the one place a noise spec becomes TensorFlow.
_TF_GENERATORS: dict[type, type] = {
    streaming.BltStreamingNoise: BltNoise,
    streaming.BandedStreamingNoise: BandedNoise,
    streaming.TreeStreamingNoise: TreeNoise,
    streaming.IdentityStreamingNoise: IdentityNoise,
    streaming.BandedInverseStreamingNoise: BandedInverseNoise,
}


def from_spec(spec: streaming.StreamingNoise) -> StreamingNoise:
  """The TF generator of a `dp_fl.mechanisms.streaming` noise spec (same recurrence)."""
  for spec_type in type(spec).__mro__:
    if spec_type in _TF_GENERATORS:
      return _TF_GENERATORS[spec_type](spec)
  raise ValueError(
      f"`spec` must be one of the noise specs "
      f"{sorted('streaming.' + t.__name__ for t in _TF_GENERATORS)}; got "
      f"{type(spec).__name__}. A new spec needs a TF generator in noise._TF_GENERATORS.")


def from_mechanism(mechanism: Any, rounds: Optional[int] = None) -> StreamingNoise:
  """The TF streaming generator for a mechanism.

  Accepts exactly: a TF `StreamingNoise` (returned as is); a
  `dp_fl.mechanisms.streaming.StreamingNoise` spec (`from_spec`); or a
  `dp_fl.mechanisms.catalog.Mechanism`, whose `streaming_noise(rounds)` gives
  the spec (`rounds` sizes the online tree's state and is required for it;
  `tree_full` cannot stream and says so).
  """
  if isinstance(mechanism, StreamingNoise):
    return mechanism
  if isinstance(mechanism, catalog.Mechanism):
    mechanism = mechanism.streaming_noise(rounds)
  if isinstance(mechanism, streaming.StreamingNoise):
    return from_spec(mechanism)
  raise ValueError(
      f"`mechanism` must be a dp_fl.mechanisms.catalog.Mechanism, a "
      f"dp_fl.mechanisms.streaming.StreamingNoise spec (e.g. BltStreamingNoise(theta, "
      f"omega)) or a dp_fl.aggregators.noise.StreamingNoise; got "
      f"{type(mechanism).__name__} {str(mechanism)[:100]!r}.")
