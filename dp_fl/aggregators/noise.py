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

Fresh Gaussians come from `tf.random.stateless_normal` with a seed derived
from (seed, round index, tensor index) by `stateless_fold_in`, so the
aggregator state (seed, round, buffers) determines the rest of the noise
stream and a checkpointed state resumes it exactly.

This module uses TensorFlow only (no TFF); `from_mechanism` adapts the
pure-NumPy mechanism objects of `dp_fl.mechanisms` (or their parameters) to
these generators without importing that package's optional modules.
"""

from __future__ import annotations

import abc
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from dp_fl import _checks

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
  """Streams rows of C⁻¹Z (paper 004, Eq. 1) in TensorFlow.

  A generator keeps, for every model tensor of shape `s`, one buffer tensor
  of shape `[buffers, *s]` (`buffers` may be 0). `step` maps the round's
  N(0, 1) draw `z` and the buffer to (row t of C⁻¹ Z, next buffer).
  """

  name: str = ""

  @property
  @abc.abstractmethod
  def buffers(self) -> int:
    """Model-sized arrays in the state (paper 004, Table 1 "memory")."""

  @property
  def max_rounds(self) -> Optional[int]:
    """Rounds the generator is defined for; None when any number works."""
    return None

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

  Defined for any number of rounds.
  """

  name = "blt"

  def __init__(self, theta: Any, omega: Any):
    theta = _checks.check_finite_array("theta", theta, ndim=1)
    omega = _checks.check_finite_array("omega", omega, ndim=1)
    if theta.size == 0 or theta.shape != omega.shape:
      raise ValueError(
          f"`theta` and `omega` must be non-empty arrays of the same length d (the BLT "
          f"buffers); got lengths {theta.size} and {omega.size}.")
    if np.any(theta <= 0) or np.any(theta > 1):
      raise ValueError(
          f"`theta` (BLT buffer decays) must lie in (0, 1]; got {theta.tolist()}.")
    self.theta = theta
    self.omega = omega

  @property
  def buffers(self) -> int:
    return int(self.theta.size)

  def step(self, z, buffer, round_index):
    del round_index  # BLT streaming is time-invariant (Toeplitz C).
    rank = z.shape.rank
    theta = _expand(tf.constant(self.theta, z.dtype), rank)
    noise = z - _weighted_sum(tf.constant(self.omega, z.dtype), buffer)
    return noise, theta * buffer + noise[tf.newaxis]


class BandedNoise(StreamingNoise):
  """Banded lower-triangular C (BandMF), by forward substitution in the band:

      ẑ_t = (z_t − Σ_{k=1}^{bands−1} C[t, t−k] ẑ_{t−k}) / C[t, t]

  keeping ẑ_{t−1}, …, ẑ_{t−bands+1} (bands − 1 buffers). Refuses rounds
  beyond the n of its C (paper 004: BandMF is not defined beyond n).
  """

  name = "bandmf"

  def __init__(self, c_matrix: Any, bands: Optional[int] = None):
    c = _checks.check_finite_array("c_matrix", c_matrix, ndim=2)
    n = c.shape[0]
    if n == 0 or c.shape != (n, n) or np.any(np.triu(c, 1) != 0):
      raise ValueError(
          f"`c_matrix` must be a non-empty square lower-triangular matrix; got shape "
          f"{c.shape}{' with entries above the diagonal' if c.shape == (n, n) else ''}.")
    diag = np.diag(c)
    if np.any(diag == 0):
      raise ValueError(
          f"`c_matrix` must have a non-zero diagonal (C must be invertible); zero at rows "
          f"{np.flatnonzero(diag == 0)[:5].tolist()}.")
    rows, cols = np.nonzero(c)
    needed = int(np.max(rows - cols)) + 1
    if bands is None:
      bands = needed
    bands = _checks.check_positive_int("bands", bands)
    if bands < needed:
      raise ValueError(
          f"`bands`={bands} but `c_matrix` has non-zeros {needed - 1} below the diagonal; "
          f"pass bands >= {needed} (or omit it).")
    band = np.zeros((n, bands))
    for k in range(bands):
      band[k:, k] = np.diag(c, -k)
    self.band = band  # band[t, k] = C[t, t − k] (0 where t − k < 0).
    self.n = n

  @classmethod
  def from_band_array(cls, band: Any) -> "BandedNoise":
    """From band[t, k] = C[t, t − k] (an (n, bands) array)."""
    band = _checks.check_finite_array("band", band, ndim=2)
    n, bands = band.shape
    c = np.zeros((n, n))
    for k in range(bands):
      if np.any(band[:k, k] != 0):
        raise ValueError(
            f"`band`[t, {k}] must be 0 for t < {k} (those entries lie outside C).")
      c += np.diag(band[k:, k], -k)
    return cls(c, bands)

  @property
  def bands(self) -> int:
    return int(self.band.shape[1])

  @property
  def buffers(self) -> int:
    return self.bands - 1

  @property
  def max_rounds(self) -> int:
    return self.n

  def step(self, z, buffer, round_index):
    with tf.control_dependencies(self._assert_in_range(round_index)):
      row = tf.gather(tf.constant(self.band, z.dtype), round_index)
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
  """

  name = "tree"

  def __init__(self, rounds: int):
    self.n = _checks.check_positive_int("rounds", rounds)

  @property
  def buffers(self) -> int:
    return self.n.bit_length() - 1

  @property
  def max_rounds(self) -> int:
    return self.n

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
  """C = I (DP-SGD / DP-FedAvg without amplification): independent noise."""

  name = "dpsgd"

  @property
  def buffers(self) -> int:
    return 0

  def step(self, z, buffer, round_index):
    del round_index
    return z, buffer


def _banded_from_object(obj: Any) -> BandedNoise:
  bands = getattr(obj, "bands", None)
  bands = bands if isinstance(bands, (int, np.integer)) else None
  for attr in ("dense", "c_matrix", "matrix"):
    value = getattr(obj, attr, None)
    if callable(value):
      value = value()
    if value is not None:
      return BandedNoise(value, bands)
  for attr in ("band_array", "band"):
    value = getattr(obj, attr, None)
    if callable(value):
      value = value()
    if value is not None:
      return BandedNoise.from_band_array(value)
  raise ValueError(
      f"Cannot read a banded C from {type(obj).__name__}: expected a `dense()` method or a "
      f"`c_matrix`/`band_array` attribute.")


def from_mechanism(mechanism: Any, rounds: Optional[int] = None) -> StreamingNoise:
  """The TF streaming generator for a `dp_fl.mechanisms` mechanism.

  Accepts a `StreamingNoise`; a `catalog.Mechanism` (blt, bandmf, tree,
  dpsgd); a `blt.Blt` or anything with `theta` and `omega`; a BandMF object
  with `dense()` (or `c_matrix` / `band_array`); a square lower-triangular
  NumPy matrix (banded C); or one of the names "tree" and "dpsgd".
  `rounds` sizes the TreeAgg state and is required for it.
  """
  if isinstance(mechanism, StreamingNoise):
    return mechanism
  if isinstance(mechanism, str):
    name = mechanism
  else:
    name = getattr(mechanism, "name", None)
  if name == "dpsgd":
    return IdentityNoise()
  if name == "tree":
    if rounds is None:
      raise ValueError("`rounds` is required for the tree mechanism: it sizes the "
                       "⌊log₂ n⌋ TreeAgg buffers; pass the number of training rounds.")
    return TreeNoise(rounds)
  if name == "tree_full":
    raise ValueError(
        "`tree_full` (TreeAgg-Full, pseudo-inverse decoding) needs every round's noise at "
        "once and cannot be streamed; use the `tree` mechanism (online TreeAgg).")
  if hasattr(mechanism, "blt"):  # catalog.BltMechanism
    mechanism = mechanism.blt
  if hasattr(mechanism, "theta") and hasattr(mechanism, "omega"):
    return BltNoise(mechanism.theta, mechanism.omega)
  if hasattr(mechanism, "banded"):  # catalog.BandedMechanism
    return _banded_from_object(mechanism.banded)
  if isinstance(mechanism, np.ndarray):
    return BandedNoise(mechanism)
  if any(hasattr(mechanism, a) for a in ("dense", "c_matrix", "band_array", "band")):
    return _banded_from_object(mechanism)
  raise ValueError(
      f"`mechanism` must be a dp_fl.mechanisms mechanism (blt, bandmf, tree, dpsgd), a "
      f"Blt, a banded C matrix or an aggregators.noise.StreamingNoise; got "
      f"{type(mechanism).__name__} {str(mechanism)[:100]!r}.")
