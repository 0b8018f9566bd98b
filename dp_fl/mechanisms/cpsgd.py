"""cpSGD's distributed mean estimation in NumPy: Rot(s_k(Bin(m, p)), HA) (paper 000, Sec. 4).

n clients hold X_i ∈ R^d with ‖X_i‖₂ ≤ D (clipped). With public randomness, everyone draws the
rotation R = HA/√d' (Sec. 4.3): A a diagonal of i.i.d. Rademacher signs, H the d' × d'
Walsh–Hadamard matrix, d' the next power of 2 ≥ d (X_i zero-padded). Each client

1. rotates, X'_i = R X_i, and clips each coordinate to [−X_max, X_max];
2. quantizes each coordinate stochastically to one of k levels B(r) = −X_max + 2r X_max/(k−1)
   (Eq. 8: up with probability (x − B(r)) / (B(r+1) − B(r)), so E[level] = x) and keeps the
   level's index U_i(j) ∈ {0, …, k−1};
3. adds its own noise share T_i(j) ~ Bin(m, p) and sends the integer Y_i(j) = U_i(j) + T_i(j)
   ∈ {0, …, k−1+m}: ⌈log₂(k + m)⌉ bits per coordinate (Thm. 3).

The server only needs Σ_i Y_i, which secure aggregation computes modulo 2^b with
b = ⌈log₂(n(k−1+m) + 1)⌉ (`secure_sum_bits`; nothing wraps). The noise in the sum is
Bin(n·m, p): the server removes its mean n·m·p, maps level indices back to values, divides by
the denominator and rotates back (R⁻¹ = Rᵀ = AH/√d'). Without rotation (s_k(Bin(m, p)) of
Sec. 4.2) X_max = D.

MSE (`mse_bound`): each client's stochastic rounding has per-coordinate variance at most
w²/4 = X_max²/(k−1)² (w = 2X_max/(k−1) the level spacing), and the noise of the sum has
per-coordinate variance n·m·p(1−p)·w², so the mean over n clients has

    E‖X̂ − X̄‖² ≤ d' X_max² (1 + 4 m p(1−p)) / (n (k−1)²),

which is Thm. 3's bound at X_max = D. With rotation and X_max = D √(2 log(2nd/δ)/d) (Thm. 4)
no coordinate of any client is clipped except with probability δ (each rotated coordinate is
sub-Gaussian with variance proxy D²/d'); clipping then adds a bias of at most 2Dδ (Thm. 4) and
at most δD² to the MSE (`mse_bound`). Privacy of the protocol is in `dp_fl/accounting/cpsgd.py`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from dp_fl import _checks


def padded_dimension(dimension: int) -> int:
  """d' = the smallest power of 2 >= d (the Walsh–Hadamard transform's length)."""
  d = _checks.check_positive_int("dimension", dimension)
  return 1 << (d - 1).bit_length()


def walsh_hadamard(x: np.ndarray) -> np.ndarray:
  """H x along the last axis (Sylvester order, unnormalized: H² = d I), in O(d log d).

  The last axis must have a power-of-2 length.
  """
  x = np.asarray(x, dtype=np.float64)
  d = x.shape[-1]
  if d < 1 or d & (d - 1):
    raise ValueError(f"walsh_hadamard needs a power-of-2 length; got {d}. Pad with "
                     "`padded_dimension`.")
  lead = x.shape[:-1]
  h = 1
  while h < d:
    pairs = x.reshape(lead + (d // (2 * h), 2, h))
    x = np.stack([pairs[..., 0, :] + pairs[..., 1, :], pairs[..., 0, :] - pairs[..., 1, :]],
                 axis=-2).reshape(lead + (d,))
    h *= 2
  return x


def rademacher_signs(rng: np.random.Generator, dimension: int) -> np.ndarray:
  """The diagonal of A: d' i.i.d. ±1 (public randomness, shared by clients and server)."""
  return rng.choice(np.array([-1.0, 1.0]), size=padded_dimension(dimension))


def rotate(x: np.ndarray, signs: np.ndarray) -> np.ndarray:
  """R x = H A x / √d' for x of shape (..., d), zero-padded to d' = len(signs)."""
  x = np.asarray(x, dtype=np.float64)
  size = signs.shape[0]
  if x.shape[-1] > size:
    raise ValueError(f"x has {x.shape[-1]} coordinates but the rotation only {size}.")
  padded = np.zeros(x.shape[:-1] + (size,))
  padded[..., :x.shape[-1]] = x
  return walsh_hadamard(padded * signs) / math.sqrt(size)


def unrotate(y: np.ndarray, signs: np.ndarray, dimension: int) -> np.ndarray:
  """R⁻¹ y = A H y / √d', truncated to the first `dimension` coordinates."""
  size = signs.shape[0]
  return (signs * walsh_hadamard(y) / math.sqrt(size))[..., :dimension]


def quantize(x: np.ndarray, num_levels: int, x_max: float,
             rng: np.random.Generator) -> np.ndarray:
  """s_k of Eq. 8: each coordinate clipped to ±X_max and rounded stochastically to a level
  index in {0, …, k−1}, unbiased: E[−X_max + U w] = clip(x) with w = 2X_max/(k−1)."""
  k = _check_levels(num_levels)
  x_max = _checks.check_positive("x_max", x_max)
  position = (np.clip(x, -x_max, x_max) + x_max) * ((k - 1) / (2.0 * x_max))
  position = np.clip(position, 0.0, k - 1.0)
  low = np.minimum(np.floor(position), k - 2.0)
  up = rng.random(position.shape) < (position - low)
  return (low + up).astype(np.int64)


def level_sum_to_value_sum(level_sum: np.ndarray, count: float, num_levels: int,
                           x_max: float) -> np.ndarray:
  """Σ_i (−X_max + U_i w) from Σ_i U_i over `count` clients (w = 2X_max/(k−1))."""
  return np.asarray(level_sum, dtype=np.float64) * (2.0 * x_max / (num_levels - 1)) - (
      count * x_max)


def bits_per_coordinate(num_quantization_levels: int, num_trials: int) -> int:
  """⌈log₂(k + m)⌉ bits per coordinate per client (paper 000, Thm. 3)."""
  k = _checks.check_positive_int("num_quantization_levels", num_quantization_levels)
  m = _checks.check_nonnegative_int("num_trials", num_trials)
  return max(1, (k + m - 1).bit_length())  # Messages in {0, …, k−1+m}.


def secure_sum_bits(num_clients: int, num_levels: int, num_trials: int) -> int:
  """b = ⌈log₂(n(k−1+m) + 1)⌉: the modulus 2^b holds the largest possible sum exactly."""
  n = _checks.check_positive_int("num_clients", num_clients)
  k = _check_levels(num_levels)
  m = _checks.check_nonnegative_int("num_trials", num_trials)
  return max(1, (n * (k - 1 + m)).bit_length())


def rotated_x_max(clip_norm: float, num_clients: int, dimension: int, delta: float) -> float:
  """X_max = D √(2 log(2nd'/δ) / d'), Thm. 4's as we read it (our text of the theorem is
  garbled; this value reproduces its MSE coefficients 2 log(2nd/δ) and 8 log(2nd/δ)), and
  derived here: a rotated coordinate of a vector of norm <= D is sub-Gaussian with variance
  proxy D²/d', so it exceeds X_max with probability <= δ/(nd') and no coordinate of any client
  is clipped except with probability δ. Privacy does not depend on X_max; the bias does."""
  d = padded_dimension(dimension)
  n = _checks.check_positive_int("num_clients", num_clients)
  delta = _checks.check_delta(delta)
  return _checks.check_positive("clip_norm", clip_norm) * math.sqrt(
      2.0 * math.log(2.0 * n * d / delta) / d)


@dataclasses.dataclass(frozen=True)
class Protocol:
  """Rot(s_k(Bin(m, p)), HA) (rotate=True) or s_k(Bin(m, p)) (rotate=False).

  Attributes:
    num_levels: k >= 2 quantization levels.
    num_trials: m >= 0 Bernoulli trials of each client's noise share (0: no noise).
    p: success probability of each trial.
    x_max: X_max, the coordinate clipping bound after rotation.
    clip_norm: D, the L2 bound each client's vector is clipped to first.
    rotate: whether to apply the random rotation HA.
  """
  num_levels: int
  num_trials: int
  p: float
  x_max: float
  clip_norm: float
  rotate: bool = True

  def __post_init__(self):
    _check_levels(self.num_levels)
    _checks.check_nonnegative_int("num_trials", self.num_trials)
    _checks.check_open_unit("p", self.p)
    _checks.check_positive("x_max", self.x_max)
    _checks.check_positive("clip_norm", self.clip_norm)

  @property
  def level_spacing(self) -> float:
    """w = 2X_max / (k−1)."""
    return 2.0 * self.x_max / (self.num_levels - 1)

  @property
  def bits_per_coordinate(self) -> int:
    return bits_per_coordinate(self.num_levels, self.num_trials)

  def noise_std_of_sum(self, num_clients: int) -> float:
    """Per-coordinate std of the noise in the sum of values: w √(n m p(1−p))."""
    return self.level_spacing * math.sqrt(num_clients * self.num_trials * self.p *
                                          (1.0 - self.p))

  def encode(self, vectors: np.ndarray, rng: np.random.Generator,
             signs: Optional[np.ndarray] = None) -> np.ndarray:
    """The clients' integer messages Y_i (shape (n, d') with rotation, (n, d) without)."""
    x = clip_l2(np.atleast_2d(np.asarray(vectors, dtype=np.float64)), self.clip_norm)
    if self.rotate:
      if signs is None:
        raise ValueError("encode with rotation needs the public `signs` "
                         "(`rademacher_signs`).")
      x = rotate(x, signs)
    levels = quantize(x, self.num_levels, self.x_max, rng)
    if self.num_trials:
      levels = levels + rng.binomial(self.num_trials, self.p, size=levels.shape)
    return levels

  def decode(self, message_sum: np.ndarray, count: int, denominator: float, dimension: int,
             signs: Optional[np.ndarray] = None) -> np.ndarray:
    """The mean estimate from Σ_i Y_i over `count` clients, divided by `denominator`."""
    if self.rotate and signs is None:
      raise ValueError("decode with rotation needs the round's public `signs`.")
    levels = np.asarray(message_sum, dtype=np.float64) - count * self.num_trials * self.p
    mean = level_sum_to_value_sum(levels, count, self.num_levels, self.x_max) / denominator
    return unrotate(mean, signs, dimension) if self.rotate else mean[..., :dimension]

  def mean_estimate(self, vectors: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One run of the whole protocol on (n, d) vectors: the server's estimate of the mean."""
    vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float64))
    d = vectors.shape[1]
    # Public randomness from its own stream (the clients' dither and shares are private).
    signs = rademacher_signs(np.random.default_rng(rng.integers(2 ** 63)), d) if (
        self.rotate) else None
    return self.secure_mean(vectors, rng, signs)

  def secure_mean(self, vectors: np.ndarray, rng: np.random.Generator,
                  signs: Optional[np.ndarray] = None) -> np.ndarray:
    """The server's mean estimate of (n, d) vectors with the round's public `signs`: the
    clients encode (their dither and shares from `rng`), secure aggregation reveals the sum
    modulo 2^b (`secure_sum_bits`, nothing wraps), the server decodes it."""
    n, d = vectors.shape
    messages = self.encode(vectors, rng, signs)
    modulus = 1 << secure_sum_bits(n, self.num_levels, self.num_trials)
    total = messages.sum(axis=0) % modulus  # What secure aggregation reveals.
    return self.decode(total, n, float(n), d, signs)

  def mse_bound(self, num_clients: int, dimension: int, delta: float = 0.0) -> float:
    """E‖X̂ − X̄‖² <= d' X_max² (1 + 4mp(1−p)) / (n(k−1)²), plus with rotation the error
    coordinate clipping adds when X_max = `rotated_x_max(..., delta)`: some coordinate is
    clipped with probability <= δ, and then the mean moves by at most D, so at most δD².
    (Thm. 4 prints 4D²δ², the square of its bias bound 2Dδ; a mean squared error needs
    the error's second moment, which is δD² here. Negligible at the δ used.)"""
    n = _checks.check_positive_int("num_clients", num_clients)
    d = padded_dimension(dimension) if self.rotate else _checks.check_positive_int(
        "dimension", dimension)
    k, m, p = self.num_levels, self.num_trials, self.p
    bound = d * self.x_max ** 2 * (1.0 + 4.0 * m * p * (1.0 - p)) / (n * (k - 1) ** 2)
    if self.rotate:
      bound += delta * self.clip_norm ** 2
    return bound


def clip_l2(vectors: np.ndarray, clip_norm: float) -> np.ndarray:
  """Each vector (the last axis) scaled to L2 norm <= `clip_norm` (cpSGD's client clipping,
  DP-SGD's per-example clipping), in the input's float dtype (float64 for others).

  The bound holds in exact arithmetic for every input, not just up to rounding: the norms are
  computed in float64 (relative error <= (d/2 + 2)u, u = 2⁻⁵³, for d coordinates) and every
  vector whose computed norm exceeds clip_norm (1 − κ) is scaled to that, with
  κ = (d + 8)·2u plus the output dtype's epsilon (float32: 2⁻²³), which covers the norm's, the
  scaling's and the output's rounding. Vectors below clip_norm (1 − κ) are returned as they
  are.
  """
  clip_norm = _checks.check_positive("clip_norm", clip_norm)
  vectors = np.asarray(vectors)
  dtype = vectors.dtype if np.issubdtype(vectors.dtype, np.floating) else np.dtype(np.float64)
  wide = vectors.astype(np.float64)
  dimension = wide.shape[-1] if wide.ndim else 1
  margin = (dimension + 8) * np.finfo(np.float64).eps + (
      np.finfo(dtype).eps if dtype != np.float64 else 0.0)
  bound = clip_norm * (1.0 - margin)
  norms = np.sqrt(np.sum(np.square(wide), axis=-1, keepdims=True))
  return (wide * np.minimum(1.0, bound / np.maximum(norms, 1e-300))).astype(dtype, copy=False)


def gaussian_mse(clip_norm: float, num_clients: int, dimension: int, epsilon: float,
                 delta: float) -> float:
  """MSE of the Gaussian protocol at (ε, δ) (paper 000, Thm. 2): each client adds
  N(0, σ²I) with σ = 2D √(2 log(1.25/δ)) / (√n ε), so E = dσ²/n.

  Thm. 2 rests on the classical Gaussian-mechanism bound, proved for ε < 1; at δ = 1e-5 it
  stays conservative (σ at least the exactly calibrated one) up to ε ≈ 8.5 and is not a valid
  calibration above. It is the paper's reference, not the best Gaussian.
  """
  n = _checks.check_positive_int("num_clients", num_clients)
  sigma = (2.0 * clip_norm * math.sqrt(2.0 * math.log(1.25 / _checks.check_delta(delta)))
           / (math.sqrt(n) * _checks.check_positive("epsilon", epsilon)))
  return dimension * sigma ** 2 / n


def _check_levels(num_levels) -> int:
  k = _checks.check_positive_int("num_levels", num_levels)
  if k < 2:
    raise ValueError(f"`num_levels` (k, quantization levels) must be >= 2; got {num_levels!r}.")
  return k

