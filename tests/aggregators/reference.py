"""Dense NumPy references for the aggregator tests: each mechanism's C for small n.

Built independently of the streaming code in `dp_fl.aggregators.noise`, from the definitions
in paper 004: BLT coefficients (Eq. 2), a banded lower-triangular C, the online-TreeAgg tree
with nodes in completion order, and C = I for DP-SGD.
"""

from __future__ import annotations

import numpy as np

from dp_fl.mechanisms import streaming

# A 2-buffer BLT with c_1 = sum(omega) < 1 (non-increasing coefficients, Thm 3.1 applies).
BLT_THETA = (0.95, 0.6)
BLT_OMEGA = (0.3, 0.2)


def blt_dense(theta, omega, n: int) -> np.ndarray:
  """C = LtToep(c) with c_0 = 1, c_i = sum_j omega_j theta_j^(i-1) (paper 004, Eq. 2)."""
  theta, omega = np.asarray(theta, float), np.asarray(omega, float)
  c = np.ones(n)
  for i in range(1, n):
    c[i] = np.sum(omega * theta ** (i - 1))
  return np.array([[c[i - j] if i >= j else 0.0 for j in range(n)] for i in range(n)])


def banded_dense(n: int, bands: int, seed: int = 0) -> np.ndarray:
  """A column-normalized banded lower-triangular C with a positive diagonal (BandMF's shape)."""
  rng = np.random.default_rng(seed)
  c = np.zeros((n, n))
  for i in range(n):
    for j in range(max(0, i - bands + 1), i + 1):
      c[i, j] = 1.0 if i == j else rng.uniform(0.1, 0.5)
  return c / np.linalg.norm(c, axis=0)


def tree_dense(n: int) -> np.ndarray:
  """Online TreeAgg's tree: row t-1 is the node completed at round t, covering (t - 2^v, t]."""
  c = np.zeros((n, n))
  for t in range(1, n + 1):
    size = t & -t
    c[t - 1, t - size:t] = 1.0
  return c


def dense_inverse_noise(c: np.ndarray, z: np.ndarray) -> np.ndarray:
  """C^{-1} Z by a dense solve (z has one row per round)."""
  return np.linalg.solve(c, z.reshape(z.shape[0], -1)).reshape(z.shape)


PRESETS = ("blt", "banded", "tree", "dpsgd")


def noise_spec(preset: str, rounds: int, bands: int = 2) -> streaming.StreamingNoise:
  """The typed noise spec of a test preset (paper 004, Table 1), for `rounds` rounds."""
  specs = {
      "blt": lambda: streaming.BltStreamingNoise(BLT_THETA, BLT_OMEGA),
      "banded": lambda: streaming.BandedStreamingNoise(banded_dense(rounds, bands)),
      "tree": lambda: streaming.TreeStreamingNoise(rounds),
      "dpsgd": streaming.IdentityStreamingNoise,
  }
  if preset not in specs:
    raise ValueError(f"`preset` must be one of {PRESETS}; got {preset!r}.")
  return specs[preset]()
