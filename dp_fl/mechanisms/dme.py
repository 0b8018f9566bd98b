"""Distributed mean estimation (paper 000, Sec. 4) around the cpSGD protocol, in NumPy.

n clients hold X_i ∈ R^d with ‖X_i‖₂ <= D; the server estimates X̄ = (1/n) Σ_i X_i. This
module holds what a DME study compares and runs (`scripts/cpsgd_dme`):

* `VARIANTS` — the cpSGD protocol families: Rot(s_k(Bin(m, p)), HA) at Thm. 4's X_max,
  s_k(Bin(m, p)) at X_max = D (Thm. 3), and the ablation s_k(Bin(m, p)) at Thm. 4's X_max
  without the rotation that makes that X_max safe;
* `INPUTS` — synthetic data sets of n vectors of norm D (sphere, spike, skewed);
* `shared_mean_estimates` — one run of many `cpsgd.Protocol`s of one variant on the same
  vectors, sharing the rotation, the clipping and the quantization, each estimate with exactly
  the distribution of `Protocol.mean_estimate`.

The protocol itself is `dp_fl/mechanisms/cpsgd.py`; its privacy `dp_fl/accounting/cpsgd.py`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import numpy as np

from dp_fl.mechanisms import cpsgd

# Rows of clients processed at once: about 2^19 float64 coordinates (4 MB, cache-friendly).
CHUNK_COORDINATES = 1 << 19


# ----------------------------------------------------------------------------- variants

@dataclasses.dataclass(frozen=True)
class Variant:
  """One cpSGD protocol family: whether it rotates, and which X_max it uses."""
  name: str
  label: str
  rotate: bool
  rotated_x_max: bool  # Thm. 4's X_max (True) or X_max = D (False).
  source: str

  def x_max(self, clip_norm: float, num_clients: int, dimension: int, delta: float) -> float:
    """X_max: Thm. 4's D√(2 log(2nd'/δ)/d') (`cpsgd.rotated_x_max`), or D."""
    if self.rotated_x_max:
      return cpsgd.rotated_x_max(clip_norm, num_clients, dimension, delta)
    return clip_norm

  def accounting_dimension(self, dimension: int) -> int:
    """The dimension of the integer query: d' (padded) with rotation, d without."""
    return cpsgd.padded_dimension(dimension) if self.rotate else dimension


VARIANTS = {v.name: v for v in (
    Variant("cpsgd_rot", "Rot(s_k(Bin(m,p)), HA)", True, True, "Thm. 4"),
    Variant("cpsgd_norot", "s_k(Bin(m,p)), X_max = D", False, False, "Thm. 3"),
    Variant("cpsgd_norot_small_xmax", "s_k(Bin(m,p)), Thm. 4's X_max, no rotation", False,
            True, "ablation"),
)}


# ----------------------------------------------------------------------------- inputs

def _sphere(rng: np.random.Generator, num_clients: int, dimension: int,
            norm: float) -> np.ndarray:
  out = np.empty((num_clients, dimension), np.float32)
  chunk_rows = max(1, CHUNK_COORDINATES // dimension)
  for start in range(0, num_clients, chunk_rows):
    g = rng.standard_normal((min(chunk_rows, num_clients - start), dimension))
    out[start:start + chunk_rows] = g * (norm / np.linalg.norm(g, axis=1, keepdims=True))
  return out


def _spike(rng: np.random.Generator, num_clients: int, dimension: int,
           norm: float) -> np.ndarray:
  del rng  # Deterministic.
  out = np.zeros((num_clients, dimension), np.float32)
  out[:, 0] = norm
  return out


def _skewed(rng: np.random.Generator, num_clients: int, dimension: int,
            norm: float) -> np.ndarray:
  out = _sphere(rng, num_clients, dimension, norm) * np.float32(math.sqrt(0.1))
  heavy = rng.integers(0, min(4, dimension), size=num_clients)
  out[np.arange(num_clients), heavy] += np.float32(math.sqrt(0.9) * norm)
  return out * (norm / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class InputKind:
  """A synthetic data set: `make(rng, n, d, D)` -> (n, d) float32 vectors of L2 norm D."""
  name: str
  description: str
  make: Callable[[np.random.Generator, int, int, float], np.ndarray]


INPUTS = {i.name: i for i in (
    InputKind("sphere", "uniform on the sphere of radius D (every coordinate ~ D/√d)", _sphere),
    InputKind("spike", "every client holds D·e₁ (the whole norm on one coordinate)", _spike),
    InputKind("skewed", "90% of the squared norm on one of 4 coordinates, the rest uniform "
              "on the sphere", _skewed),
)}


# ----------------------------------------------------------------------------- estimates

def shared_mean_estimates(vectors: np.ndarray, protocols: Sequence[cpsgd.Protocol],
                          rng: np.random.Generator) -> tuple[list[np.ndarray], int]:
  """One run of every protocol on (n, d) `vectors`, sharing work: the estimates, in order.

  `Protocol.mean_estimate` computed for many (k, m, p) at once: the public rotation is drawn
  once and every chunk of clients is clipped and rotated once, then quantized by s_k for every
  k (`cpsgd.quantize`, Eq. 8) and the level indices summed; for each protocol the noise of the
  sum, Σ_i Bin(m, p) = Bin(nm, p) per coordinate, is added, the sum reduced modulo 2^b (secure
  aggregation, `cpsgd.secure_sum_bits`: nothing wraps) and decoded (`Protocol.decode`). Each
  estimate has exactly the distribution of `mean_estimate`; protocols with one k share its
  quantization draw.

  The protocols must share `rotate`, `x_max` and `clip_norm` (they may differ in k, m and p).
  Also returns how many (client, coordinate) values s_k clipped to ±X_max.
  """
  first = protocols[0]
  if any((p.rotate, p.x_max, p.clip_norm) != (first.rotate, first.x_max, first.clip_norm)
         for p in protocols):
    raise ValueError("shared_mean_estimates needs protocols of one variant (same rotate, "
                     "x_max and clip_norm).")
  n, d = vectors.shape
  signs = cpsgd.rademacher_signs(rng, d) if first.rotate else None
  width = cpsgd.padded_dimension(d) if first.rotate else d
  levels = sorted({p.num_levels for p in protocols})
  level_sums = {k: np.zeros(width, np.int64) for k in levels}
  clipped = 0
  chunk_rows = max(1, CHUNK_COORDINATES // width)
  for start in range(0, n, chunk_rows):
    chunk = cpsgd.clip_l2(vectors[start:start + chunk_rows].astype(np.float64),
                          first.clip_norm)
    if signs is not None:
      chunk = cpsgd.rotate(chunk, signs)
    clipped += int(np.count_nonzero(np.abs(chunk) > first.x_max))
    for k in levels:  # s_k of every client in the chunk (Eq. 8), summed.
      level_sums[k] += cpsgd.quantize(chunk, k, first.x_max, rng).sum(axis=0)
  estimates = []
  for protocol in protocols:
    k, m = protocol.num_levels, protocol.num_trials
    noise = rng.binomial(n * m, protocol.p, size=width) if m else 0  # Σ_i Bin(m, p).
    message_sum = (level_sums[k] + noise) % (1 << cpsgd.secure_sum_bits(n, k, m))
    estimates.append(protocol.decode(message_sum, n, float(n), d, signs))
  return estimates, clipped
