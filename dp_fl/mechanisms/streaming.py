"""Streaming correlated noise: rows of C⁻¹ Z one round at a time, in NumPy (float64).

Paper 004, Eq. 1: DP-FTRL releases B (C X + ζ Z) = A (X + ζ C⁻¹ Z), so round t adds row t of
ζ C⁻¹ Z to the clipped sum (Eq. 4). A generator produces that row from the round's fresh
Gaussian z_t = Z[t] and a small state, never forming C⁻¹:

    noise = mechanism.streaming_noise()
    state = noise.init(shape)                 # shape of one model tensor
    for t in range(n):
      noise_t, state = noise.next(z[t], state)  # row t of C⁻¹ Z

| generator                 | C                               | `buffers` (model-sized arrays) |
|---------------------------|---------------------------------|--------------------------------|
| `BltStreamingNoise`       | BLT(θ, ω) (Eq. 2), by Alg. 3    | d                              |
| `BandedStreamingNoise`    | banded lower-triangular (BandMF)| bands − 1                      |
| `TreeStreamingNoise`      | online tree (Kairouz et al.)    | ⌊log₂ n⌋ ≤ ⌈log₂ n⌉            |
| `IdentityStreamingNoise`  | I (DP-SGD)                      | 0                              |
| `BandedInverseStreamingNoise` | C⁻¹ banded Toeplitz (BISR, BandInvMF) | bands − 1                |

These generators are also the *typed noise spec* of each mechanism: each holds the
recurrence's arrays (θ and ω; the band of C; the rounds of the tree), its `buffers` and the
rounds it is defined for (`max_rounds`), validated here and nowhere else. The TensorFlow
generators of `dp_fl.aggregators.noise` are built from these specs only (`noise.from_spec`),
implement the same recurrences inside TFF computations and are tested against them.

`materialize(n)` streams the unit vectors and returns the dense C⁻¹ (tests compare it with
the inverse of the dense C); `stream(z)` applies the generator to a whole Z.

States are immutable tuples `(round_index, state_buffers)` with `state_buffers` of shape
`(buffers, *shape)`; `next` never modifies its input state, so a saved state resumes the exact
noise stream.
"""

from __future__ import annotations

import abc
from typing import Any, Optional

import numpy as np

from dp_fl import _checks

State = tuple[int, np.ndarray]


def _shape(shape: Any) -> tuple[int, ...]:
  if isinstance(shape, (int, np.integer)):
    shape = (shape,)
  try:
    dims = tuple(int(s) for s in shape)
  except TypeError as e:
    raise ValueError(f"`shape` must be a tuple of non-negative ints; got {shape!r}.") from e
  if any(s < 0 for s in dims):
    raise ValueError(f"`shape` must be a tuple of non-negative ints; got {shape!r}.")
  return dims


# ---------------------------------------------------------------------------
# Validation of the recurrences' parameters (used by `dp_fl.mechanisms.blt` and `banded` too).


def check_blt_parameters(theta: Any, omega: Any) -> tuple[np.ndarray, np.ndarray]:
  """(θ, ω) of C = BLT(θ, ω) (paper 004, Eq. 2) as float64 arrays.

  Requires d >= 1 buffers, θ ∈ (0, 1]^d (buffer decays) and ω >= 0 (output scales).
  """
  theta = _checks.check_finite_array("theta", theta, ndim=1)
  omega = _checks.check_finite_array("omega", omega, ndim=1)
  if theta.size < 1:
    raise ValueError("`theta` must hold at least one buffer decay (d >= 1 buffers); got [].")
  if theta.shape != omega.shape:
    raise ValueError(
        f"`theta` and `omega` must have the same length d (one output scale per buffer); "
        f"got lengths {theta.size} and {omega.size}.")
  for i, t in enumerate(theta):
    _checks.check_half_open_unit(f"theta[{i}]", float(t))
  for i, w in enumerate(omega):
    _checks.check_nonnegative(f"omega[{i}]", float(w))
  return theta, omega


def band_from_dense(c_matrix: Any, bands: Optional[int] = None,
                    name: str = "c_matrix") -> np.ndarray:
  """band[t, j] = C[t, t − j] ((n, bands), 0 where t < j) of a banded lower-triangular C.

  For bands = 3, n = 4:  C = [c00 . . .; c10 c11 . .; c20 c21 c22 .; . c31 c32 c33] gives
  band = [c00 0 0; c11 c10 0; c22 c21 c20; c33 c32 c31]. `bands` defaults to the fewest
  that hold every non-zero of C; fewer are refused.
  """
  c = _checks.check_lower_triangular(name, c_matrix)
  n = c.shape[0]
  rows, cols = np.nonzero(c)
  needed = int(np.max(rows - cols)) + 1 if rows.size else 1
  if bands is None:
    bands = needed
  bands = _checks.check_positive_int("bands", bands)
  if bands > n:
    raise ValueError(
        f"`bands` must be <= n={n} (`{name}` is n x n; bands = n is a full lower-triangular "
        f"C); got {bands}.")
  if bands < needed:
    raise ValueError(
        f"`{name}` has non-zeros {needed - 1} below the diagonal, so it needs "
        f"bands >= {needed}; got bands={bands}. Pass bands >= {needed} (or omit it).")
  band = np.zeros((n, bands))
  for j in range(bands):
    band[j:, j] = np.diagonal(c, -j)
  return band


def check_band(band: Any, name: str = "band") -> np.ndarray:
  """`band` (band[t, j] = C[t, t − j], see `band_from_dense`) as a float64 (n, bands) array.

  Requires 1 <= bands <= n, zeros where t < j (outside C) and a non-zero diagonal
  band[:, 0] (C invertible).
  """
  band = _checks.check_finite_array(name, band, ndim=2)
  n, bands = band.shape
  if n < 1 or bands < 1 or bands > n:
    raise ValueError(
        f"`{name}` must have shape (n, bands) with 1 <= bands <= n; got shape {band.shape}.")
  outside = band[np.arange(n)[:, None] < np.arange(bands)[None, :]]
  if np.any(outside != 0):
    raise ValueError(
        f"`{name}[t, j]` must be 0 for t < j (C[t, t - j] lies outside the matrix); got "
        f"non-zero values {outside[outside != 0][:3].tolist()}.")
  zero = np.flatnonzero(band[:, 0] == 0)
  if zero.size:
    raise ValueError(
        f"`{name}[:, 0]` (the diagonal of C) must be non-zero so that C is invertible; got "
        f"{name}[{int(zero[0])}, 0]=0.0 ({zero.size} zero entries).")
  return band


# ---------------------------------------------------------------------------
# The generators.


def check_inverse_band(inverse_coef: Any) -> np.ndarray:
  """ĉ = (ĉ_0, …, ĉ_{p−1}), the first column of a banded lower-triangular Toeplitz C⁻¹ with
  p bands, as a float64 array: 1 <= p, finite, ĉ_0 != 0 (C⁻¹, hence C, invertible)."""
  coef = _checks.check_finite_array("inverse_coef", inverse_coef, ndim=1)
  if coef.size < 1:
    raise ValueError("`inverse_coef` must hold at least the diagonal of C⁻¹ (p >= 1 bands); "
                     "got [].")
  if coef[0] == 0:
    raise ValueError("`inverse_coef[0]` (the diagonal of C⁻¹) must be non-zero so that C⁻¹ is "
                     "invertible; got 0.0.")
  return coef


def check_rounds(rounds: Any, max_rounds: Optional[int], name: str) -> int:
  """`rounds` (a positive int) when the `name` mechanism, defined for `max_rounds` rounds
  (None: any number), covers them; else a ValueError saying how to fix it."""
  n = _checks.check_positive_int("rounds", rounds)
  if max_rounds is not None and n > max_rounds:
    raise ValueError(
        f"`rounds`={n} exceeds the {max_rounds} rounds this {name} mechanism was built for; "
        f"{name} is not defined beyond them. Rebuild it for n >= {n} or train for at most "
        f"{max_rounds} rounds.")
  return n


class StreamingNoise(abc.ABC):
  """Streams rows of C⁻¹ Z (paper 004, Eq. 1) from fresh rows of Z; a mechanism's noise spec.

  `name` is the mechanism's name (as in `dp_fl.mechanisms.catalog.MECHANISMS`).
  """

  name: str = ""

  @property
  @abc.abstractmethod
  def buffers(self) -> int:
    """Model-sized arrays the state holds (paper 004, Table 1 "memory")."""

  @property
  def max_rounds(self) -> Optional[int]:
    """Rounds the generator is defined for; None when any number works."""
    return None

  def init(self, shape: Any) -> State:
    """The state before round 0 for one tensor of `shape` (S₋₁ = 0 in Alg. 3)."""
    return 0, np.zeros((self.buffers,) + _shape(shape))

  def next(self, z: Any, state: State) -> tuple[np.ndarray, State]:
    """(row t of C⁻¹ Z, state after round t) from z = Z[t]; t is the state's round."""
    t, state_buffers = state
    z = np.asarray(z, dtype=np.float64)
    if z.shape != state_buffers.shape[1:]:
      raise ValueError(f"`z` must have the shape {state_buffers.shape[1:]} the state was "
                       f"initialized for; got {z.shape}.")
    if self.max_rounds is not None and t >= self.max_rounds:
      raise ValueError(
          f"round {t} is beyond the {self.max_rounds} rounds this {self.name} noise was "
          f"built for; {self.name} is not defined beyond them. Rebuild it for more rounds.")
    noise, state_buffers = self._step(z, state_buffers, t)
    return noise, (t + 1, state_buffers)

  @abc.abstractmethod
  def _step(self, z: np.ndarray, state_buffers: np.ndarray,
            t: int) -> tuple[np.ndarray, np.ndarray]:
    """(noise, next state buffers) for round t; must not modify `state_buffers` in place."""

  def stream(self, z: Any) -> np.ndarray:
    """C⁻¹ Z for a whole Z (rounds along axis 0), by streaming."""
    z = np.asarray(z, dtype=np.float64)
    if z.ndim < 1:
      raise ValueError(f"`z` must have a rounds axis; got a scalar {z!r}.")
    state = self.init(z.shape[1:])
    out = np.empty_like(z)
    for t in range(z.shape[0]):
      out[t], state = self.next(z[t], state)
    return out

  def materialize(self, n: int) -> np.ndarray:
    """The dense n × n C⁻¹, streamed column by column from Z = I (for tests)."""
    n = _checks.check_positive_int("n", n)
    return self.stream(np.eye(n))


class BltStreamingNoise(StreamingNoise):
  """C = BLT(θ, ω) (paper 004, Eq. 2), streamed by Alg. 3 with d buffers (Eq. 3):

      ẑ_t = z_t − ωᵀ S_{t−1},        S_t = diag(θ) S_{t−1} + 1_d ẑ_t.

  Defined for any number of rounds; O(d·m) state for an m-parameter model. θ ∈ (0, 1]^d and
  ω >= 0 (`check_blt_parameters`).
  """

  name = "blt"

  def __init__(self, theta: Any, omega: Any):
    self.theta, self.omega = check_blt_parameters(theta, omega)

  @property
  def buffers(self) -> int:
    return int(self.theta.size)

  def _step(self, z, state_buffers, t):
    del t  # Toeplitz C: the recurrence is time-invariant.
    noise = z - np.tensordot(self.omega, state_buffers, axes=1)
    decay = self.theta.reshape((-1,) + (1,) * z.ndim)
    return noise, decay * state_buffers + noise[np.newaxis]


class BandedStreamingNoise(StreamingNoise):
  """Banded lower-triangular C (BandMF) by forward substitution in the band:

      ẑ_t = (z_t − Σ_{j=1}^{bands−1} C[t, t−j] ẑ_{t−j}) / C[t, t],

  keeping ẑ_{t−1}, …, ẑ_{t−bands+1} (bands − 1 buffers). Defined for the n rounds of its C
  only (paper 004, Fig. 5). Any banded lower-triangular C with a non-zero diagonal works
  (BandMF's column-normalized C is one); `band[t, j] = C[t, t − j]`.
  """

  name = "bandmf"

  def __init__(self, c_matrix: Any, bands: Optional[int] = None):
    """From the dense n × n C; `bands` defaults to the fewest holding its non-zeros."""
    band = band_from_dense(c_matrix, bands, name="c_matrix")
    zero = np.flatnonzero(band[:, 0] == 0)
    if zero.size:
      t = int(zero[0])
      raise ValueError(
          f"`c_matrix` must have a non-zero diagonal (C invertible); got c_matrix[{t}, {t}]=0.0 "
          f"({zero.size} zero entries on the diagonal).")
    self._set_band(band)

  @classmethod
  def from_band_array(cls, band: Any) -> "BandedStreamingNoise":
    """From band[t, j] = C[t, t − j], an (n, bands) array (`check_band`)."""
    noise = cls.__new__(cls)
    noise._set_band(check_band(band, name="band"))
    return noise

  def _set_band(self, band: np.ndarray) -> None:
    band = np.array(band, dtype=np.float64)
    band.setflags(write=False)
    self.band = band  # band[t, j] = C[t, t − j].

  @property
  def bands(self) -> int:
    return int(self.band.shape[1])

  @property
  def buffers(self) -> int:
    return self.bands - 1

  @property
  def max_rounds(self) -> int:
    return int(self.band.shape[0])

  def _step(self, z, state_buffers, t):
    row = self.band[t]
    if self.bands == 1:
      return z / row[0], state_buffers
    noise = (z - np.tensordot(row[1:], state_buffers, axes=1)) / row[0]
    return noise, np.concatenate([noise[np.newaxis], state_buffers[:-1]], axis=0)


class TreeStreamingNoise(StreamingNoise):
  """Online TreeAgg (Kairouz et al. 2021; paper 004, Sec. 2.3) as a square C.

  The node completed at round t (0-based) covers rounds (t + 1 − 2^v, t + 1] (1-based), v the
  number of trailing zero bits of t + 1; it gets the round's fresh Gaussian. With these nodes
  as the rows of C (`dp_fl.mechanisms.tree.online_tree_matrix`), B = A C⁻¹ is the binary
  counter and

      (C⁻¹ Z)_t = z_t − Σ_{levels ℓ < v} (latest node value stored at level ℓ).

  Level ℓ is read again only if 2^{ℓ+1} ≤ n, so ⌊log₂ n⌋ buffers suffice for n rounds.
  With `rounds=None` the generator runs for any number of rounds and the state grows to
  ⌊log₂ t⌋ + 1 levels as needed (NumPy only: TensorFlow needs a fixed state, so the TF
  generator needs `rounds`).
  """

  name = "tree"

  def __init__(self, rounds: Optional[int] = None):
    self.rounds = None if rounds is None else _checks.check_positive_int("rounds", rounds)

  @property
  def buffers(self) -> int:
    if self.rounds is None:
      raise ValueError("The online tree's state size depends on the number of rounds; build "
                       "TreeStreamingNoise(rounds=n) to ask for it.")
    return self.rounds.bit_length() - 1

  @property
  def max_rounds(self) -> Optional[int]:
    return self.rounds

  def init(self, shape: Any) -> State:
    levels = 0 if self.rounds is None else self.buffers
    return 0, np.zeros((levels,) + _shape(shape))

  def _step(self, z, state_buffers, t):
    count = t + 1
    v = (count & -count).bit_length() - 1  # Trailing zero bits of t + 1.
    noise = z - np.sum(state_buffers[:v], axis=0) if v else z.copy()
    if self.rounds is None and v >= state_buffers.shape[0]:
      grown = np.zeros((v + 1,) + state_buffers.shape[1:])
      grown[:state_buffers.shape[0]] = state_buffers
      state_buffers = grown
    if v < state_buffers.shape[0]:
      # The level-v node completes now; the lower levels it covers are not read again
      # before their next nodes overwrite them.
      state_buffers = state_buffers.copy()
      state_buffers[v] = z
    return noise, state_buffers


class IdentityStreamingNoise(StreamingNoise):
  """C = I (DP-SGD / DP-FedAvg): independent noise, no state."""

  name = "dpsgd"

  @property
  def buffers(self) -> int:
    return 0

  def _step(self, z, state_buffers, t):
    del t
    return z.copy(), state_buffers


class BandedInverseStreamingNoise(StreamingNoise):
  """C⁻¹ = LtToep(ĉ_0, …, ĉ_{p−1}) banded lower-triangular Toeplitz (BISR and BandInvMF,
  Kalinin, McKenna, Upadhyay and Lampert 2025): the noise is C⁻¹'s band applied to the last p
  fresh Gaussians,

      (C⁻¹ Z)_t = Σ_{j=0}^{p−1} ĉ_j z_{t−j}      (z_{<0} = 0),

  keeping z_{t−1}, …, z_{t−p+1} (p − 1 buffers, O(p·m) per round for an m-parameter model).
  Toeplitz, so defined for any number of rounds; C itself (the inverse series of ĉ) is dense
  and never needed here. `check_inverse_band` validates ĉ.
  """

  name = "bisr"

  def __init__(self, inverse_coef: Any, name: str = "bisr"):
    """`name`: the mechanism's ("bisr" or "bandinvmf"), for messages."""
    self.name = name
    coef = np.array(check_inverse_band(inverse_coef))
    coef.setflags(write=False)
    self.inverse_coef = coef

  @property
  def bands(self) -> int:
    return int(self.inverse_coef.size)

  @property
  def buffers(self) -> int:
    return self.bands - 1

  def _step(self, z, state_buffers, t):
    del t  # Toeplitz C⁻¹: time-invariant.
    noise = self.inverse_coef[0] * z
    if self.buffers == 0:
      return noise, state_buffers
    noise = noise + np.tensordot(self.inverse_coef[1:], state_buffers, axes=1)
    return noise, np.concatenate([z[np.newaxis], state_buffers[:-1]], axis=0)
