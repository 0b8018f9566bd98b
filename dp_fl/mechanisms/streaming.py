"""Streaming correlated noise: rows of C⁻¹ Z one round at a time, in NumPy (float64).

Paper 004, Eq. 1: DP-FTRL releases B (C X + ζ Z) = A (X + ζ C⁻¹ Z), so round t adds row t of
ζ C⁻¹ Z to the clipped sum (Eq. 4). A generator produces that row from the round's fresh
Gaussian z_t = Z[t] and a small state, never forming C⁻¹:

    noise = mechanism.streaming_noise()
    state = noise.init(shape)                 # shape of one model tensor
    for t in range(n):
      noise_t, state = noise.next(z[t], state)  # row t of C⁻¹ Z

| generator                 | C                               | model-sized arrays in the state |
|---------------------------|---------------------------------|---------------------------------|
| `BltStreamingNoise`       | BLT(θ, ω) (Eq. 2), by Alg. 3    | d                               |
| `BandedStreamingNoise`    | banded lower-triangular (BandMF)| bands − 1                       |
| `TreeStreamingNoise`      | online tree (Kairouz et al.)    | ⌊log₂ n⌋ ≤ ⌈log₂ n⌉             |
| `IdentityStreamingNoise`  | I (DP-SGD)                      | 0                               |

`materialize(n)` streams the unit vectors and returns the dense C⁻¹ (tests compare it with
the inverse of the dense C); `stream(z)` applies the generator to a whole Z. The TensorFlow
generators of `dp_fl.aggregators.noise` implement the same recurrences inside TFF
computations and are tested against these.

States are immutable tuples `(round_index, buffers)` with `buffers` of shape
`(state_model_copies, *shape)`; `next` never modifies its input state, so a saved state
resumes the exact noise stream.
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


class StreamingNoise(abc.ABC):
  """Streams rows of C⁻¹ Z (paper 004, Eq. 1) from fresh rows of Z."""

  name: str = ""

  @property
  @abc.abstractmethod
  def state_model_copies(self) -> int:
    """Model-sized arrays the state holds (paper 004, Table 1 "memory")."""

  @property
  def max_rounds(self) -> Optional[int]:
    """Rounds the generator is defined for; None when any number works."""
    return None

  def init(self, shape: Any) -> State:
    """The state before round 0 for one tensor of `shape` (S₋₁ = 0 in Alg. 3)."""
    return 0, np.zeros((self.state_model_copies,) + _shape(shape))

  def next(self, z: Any, state: State) -> tuple[np.ndarray, State]:
    """(row t of C⁻¹ Z, state after round t) from z = Z[t]; t is the state's round."""
    t, buffers = state
    z = np.asarray(z, dtype=np.float64)
    if z.shape != buffers.shape[1:]:
      raise ValueError(f"`z` must have the shape {buffers.shape[1:]} the state was "
                       f"initialized for; got {z.shape}.")
    if self.max_rounds is not None and t >= self.max_rounds:
      raise ValueError(
          f"round {t} is beyond the {self.max_rounds} rounds this {self.name} noise was "
          f"built for; {self.name} is not defined beyond them. Rebuild it for more rounds.")
    noise, buffers = self._step(z, buffers, t)
    return noise, (t + 1, buffers)

  @abc.abstractmethod
  def _step(self, z: np.ndarray, buffers: np.ndarray,
            t: int) -> tuple[np.ndarray, np.ndarray]:
    """(noise, next buffers) for round t; must not modify `buffers` in place."""

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

  Defined for any number of rounds; O(d·m) state for an m-parameter model.
  """

  name = "blt"

  def __init__(self, theta: Any, omega: Any):
    theta = _checks.check_finite_array("theta", theta, ndim=1)
    omega = _checks.check_finite_array("omega", omega, ndim=1)
    if theta.size == 0 or theta.shape != omega.shape:
      raise ValueError(
          f"`theta` and `omega` must be non-empty and of the same length d (the BLT "
          f"buffers); got lengths {theta.size} and {omega.size}.")
    for i, t in enumerate(theta):
      _checks.check_half_open_unit(f"theta[{i}]", t)
    for i, w in enumerate(omega):
      _checks.check_nonnegative(f"omega[{i}]", w)
    self.theta = theta
    self.omega = omega

  @property
  def state_model_copies(self) -> int:
    return int(self.theta.size)

  def _step(self, z, buffers, t):
    del t  # Toeplitz C: the recurrence is time-invariant.
    noise = z - np.tensordot(self.omega, buffers, axes=1)
    decay = self.theta.reshape((-1,) + (1,) * z.ndim)
    return noise, decay * buffers + noise[np.newaxis]


class BandedStreamingNoise(StreamingNoise):
  """Banded lower-triangular C (BandMF) by forward substitution in the band:

      ẑ_t = (z_t − Σ_{j=1}^{bands−1} C[t, t−j] ẑ_{t−j}) / C[t, t],

  keeping ẑ_{t−1}, …, ẑ_{t−bands+1}. Defined for the n rounds of its C only.
  """

  name = "bandmf"

  def __init__(self, c_matrix: Any):
    c = _checks.check_finite_array("c_matrix", c_matrix, ndim=2)
    n = c.shape[0]
    if n == 0 or c.shape != (n, n):
      raise ValueError(f"`c_matrix` must be a non-empty square matrix; got shape {c.shape}.")
    if np.any(np.triu(c, 1) != 0):
      raise ValueError("`c_matrix` must be lower-triangular (C of A = B C); it has non-zeros "
                       "above the diagonal.")
    diag = np.diag(c)
    if np.any(diag == 0):
      raise ValueError(f"`c_matrix` must have a non-zero diagonal (C invertible); zero at rows "
                       f"{np.flatnonzero(diag == 0)[:5].tolist()}.")
    rows, cols = np.nonzero(c)
    bands = int(np.max(rows - cols)) + 1
    band = np.zeros((n, bands))
    for j in range(bands):
      band[j:, j] = np.diag(c, -j)
    self.band = band  # band[t, j] = C[t, t − j].

  @property
  def bands(self) -> int:
    return int(self.band.shape[1])

  @property
  def state_model_copies(self) -> int:
    return self.bands - 1

  @property
  def max_rounds(self) -> int:
    return int(self.band.shape[0])

  def _step(self, z, buffers, t):
    row = self.band[t]
    if self.bands == 1:
      return z / row[0], buffers
    noise = (z - np.tensordot(row[1:], buffers, axes=1)) / row[0]
    return noise, np.concatenate([noise[np.newaxis], buffers[:-1]], axis=0)


class TreeStreamingNoise(StreamingNoise):
  """Online TreeAgg (Kairouz et al. 2021; paper 004, Sec. 2.3) as a square C.

  The node completed at round t (0-based) covers rounds (t + 1 − 2^v, t + 1] (1-based), v the
  number of trailing zero bits of t + 1; it gets the round's fresh Gaussian. With these nodes
  as the rows of C (`dp_fl.mechanisms.tree.online_tree_matrix`), B = A C⁻¹ is the binary
  counter and

      (C⁻¹ Z)_t = z_t − Σ_{levels ℓ < v} (latest node value stored at level ℓ).

  Level ℓ is read again only if 2^{ℓ+1} ≤ n, so ⌊log₂ n⌋ buffers suffice for n rounds.
  With `rounds=None` the generator runs for any number of rounds and the state grows to
  ⌊log₂ t⌋ + 1 levels as needed.
  """

  name = "tree"

  def __init__(self, rounds: Optional[int] = None):
    self.rounds = None if rounds is None else _checks.check_positive_int("rounds", rounds)

  @property
  def state_model_copies(self) -> int:
    if self.rounds is None:
      raise ValueError("The online tree's state size depends on the number of rounds; build "
                       "TreeStreamingNoise(rounds=n) to ask for it.")
    return self.rounds.bit_length() - 1

  @property
  def max_rounds(self) -> Optional[int]:
    return self.rounds

  def init(self, shape: Any) -> State:
    copies = 0 if self.rounds is None else self.state_model_copies
    return 0, np.zeros((copies,) + _shape(shape))

  def _step(self, z, buffers, t):
    count = t + 1
    v = (count & -count).bit_length() - 1  # Trailing zero bits of t + 1.
    noise = z - np.sum(buffers[:v], axis=0) if v else z.copy()
    if self.rounds is None and v >= buffers.shape[0]:
      grown = np.zeros((v + 1,) + buffers.shape[1:])
      grown[:buffers.shape[0]] = buffers
      buffers = grown
    if v < buffers.shape[0]:
      # The level-v node completes now; the lower levels it covers are not read again
      # before their next nodes overwrite them.
      buffers = buffers.copy()
      buffers[v] = z
    return noise, buffers


class IdentityStreamingNoise(StreamingNoise):
  """C = I (DP-SGD / DP-FedAvg): independent noise, no state."""

  name = "dpsgd"

  @property
  def state_model_copies(self) -> int:
    return 0

  def _step(self, z, buffers, t):
    del t
    return z.copy(), buffers

