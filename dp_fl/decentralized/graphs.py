"""Communication graphs and gossip mixing matrices for decentralized SGD (paper 002, Sec. 2.1).

D-PSGD (Lian et al. 2017, paper 002's baseline) averages each worker's model with its
neighbours' after every local step: W_{t+1} = M W_t (rows of W are the m workers' parameters).
The mixing matrix M must be symmetric and doubly stochastic (rows and columns sum to 1, entries
>= 0) with M_ij > 0 only for edges of the graph (and the diagonal): then the average model is
preserved by gossip, and consensus is reached at a rate set by the spectral gap 1 − |λ₂(M)|.

`mixing_matrix(name, m)` builds the named graph's M:

- `ring`: each worker averages itself and its two ring neighbours, 1/3 each (m >= 3; m = 2 is
  the single edge, 1/2 each) — D-PSGD's default;
- `complete`: M = J/m, every worker averages everyone (gossip = synchronous all-reduce);
- `torus`: a √m × √m wrap-around grid (m a square >= 9), Metropolis–Hastings weights;
- `star`: one hub, Metropolis–Hastings weights (the hub's own weight is small);
- `isolated`: M = I, no communication (independent local SGD).

`metropolis_hastings(adjacency)` gives the standard symmetric doubly stochastic weights of any
undirected graph: M_ij = 1 / (1 + max(deg i, deg j)) on edges, the rest on the diagonal.
"""

from __future__ import annotations

import math

import numpy as np

from dp_fl import _checks

GRAPHS = ("ring", "complete", "torus", "star", "isolated")


def ring_adjacency(num_workers: int) -> np.ndarray:
  """The cycle 0 – 1 – … – (m−1) – 0 (for m = 2, the single edge)."""
  m = _checks.check_positive_int("num_workers", num_workers)
  adjacency = np.zeros((m, m), dtype=bool)
  if m > 1:
    index = np.arange(m)
    adjacency[index, (index + 1) % m] = True
    adjacency[(index + 1) % m, index] = True
  return adjacency


def torus_adjacency(num_workers: int) -> np.ndarray:
  """A √m × √m wrap-around grid (m a perfect square >= 9: every node has 4 neighbours)."""
  m = _checks.check_positive_int("num_workers", num_workers)
  side = math.isqrt(m)
  if side * side != m or side < 3:
    raise ValueError(f"`graph`='torus' needs a number of workers that is a square >= 9; got "
                     f"{num_workers!r}. Use --graph=ring for other m.")
  adjacency = np.zeros((m, m), dtype=bool)
  for row in range(side):
    for col in range(side):
      node = row * side + col
      for neighbour in (row * side + (col + 1) % side, ((row + 1) % side) * side + col):
        adjacency[node, neighbour] = adjacency[neighbour, node] = True
  return adjacency


def star_adjacency(num_workers: int) -> np.ndarray:
  """Worker 0 linked to every other worker."""
  m = _checks.check_positive_int("num_workers", num_workers)
  adjacency = np.zeros((m, m), dtype=bool)
  adjacency[0, 1:] = adjacency[1:, 0] = True
  return adjacency


def metropolis_hastings(adjacency: np.ndarray) -> np.ndarray:
  """Symmetric doubly stochastic weights of an undirected graph: M_ij = 1/(1 + max(d_i, d_j))
  on edges, 1 − Σ_j M_ij on the diagonal."""
  adjacency = np.asarray(adjacency, dtype=bool)
  if adjacency.ndim != 2 or adjacency.shape[0] != adjacency.shape[1]:
    raise ValueError(f"`adjacency` must be a square matrix; got shape {adjacency.shape}.")
  if not np.array_equal(adjacency, adjacency.T) or np.any(np.diag(adjacency)):
    raise ValueError("`adjacency` must be symmetric with an empty diagonal (an undirected "
                     "graph without self-loops).")
  degree = adjacency.sum(axis=1)
  weights = np.where(adjacency, 1.0 / (1.0 + np.maximum.outer(degree, degree)), 0.0)
  weights[np.diag_indices_from(weights)] = 1.0 - weights.sum(axis=1)
  return weights


def mixing_matrix(name: str, num_workers: int) -> np.ndarray:
  """The gossip matrix M of graph `name` for `num_workers` workers (see the module docstring)."""
  m = _checks.check_positive_int("num_workers", num_workers)
  if name == "ring":
    if m < 3:
      return metropolis_hastings(ring_adjacency(m))
    matrix = np.zeros((m, m))
    index = np.arange(m)
    for shift in (-1, 0, 1):
      matrix[index, (index + shift) % m] = 1.0 / 3.0
    return matrix
  if name == "complete":
    return np.full((m, m), 1.0 / m)
  if name == "torus":
    return metropolis_hastings(torus_adjacency(m))
  if name == "star":
    return metropolis_hastings(star_adjacency(m))
  if name == "isolated":
    return np.eye(m)
  raise ValueError(f"`graph` must be one of {GRAPHS}; got {name!r}.")


def check_mixing_matrix(matrix: np.ndarray, atol: float = 1e-12) -> np.ndarray:
  """Returns `matrix` after checking it is square, non-negative, symmetric and doubly
  stochastic; ValueError naming the first property that fails."""
  matrix = np.asarray(matrix, dtype=np.float64)
  if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
    raise ValueError(f"a mixing matrix must be square; got shape {matrix.shape}.")
  if np.any(matrix < -atol):
    raise ValueError("a mixing matrix must have non-negative entries; got a minimum of "
                     f"{matrix.min():g}.")
  if not np.allclose(matrix, matrix.T, atol=atol):
    raise ValueError("a mixing matrix must be symmetric (gossip weights agreed by both ends).")
  for axis, what in ((1, "rows"), (0, "columns")):
    sums = matrix.sum(axis=axis)
    if not np.allclose(sums, 1.0, atol=atol):
      raise ValueError(f"a mixing matrix's {what} must sum to 1 (doubly stochastic); got sums "
                       f"in [{sums.min():g}, {sums.max():g}].")
  return matrix


def spectral_gap(matrix: np.ndarray) -> float:
  """1 − max(|λ₂|, |λ_m|) of a symmetric mixing matrix: the per-round contraction of the
  workers' disagreement (0 for a disconnected graph, 1 for complete averaging)."""
  eigenvalues = np.sort(np.abs(np.linalg.eigvalsh(check_mixing_matrix(matrix))))[::-1]
  return float(1.0 - eigenvalues[1]) if eigenvalues.size > 1 else 1.0
