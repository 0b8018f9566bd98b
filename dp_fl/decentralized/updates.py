"""The update rules of decentralized DP-SGD (paper 002, Sec. 2), on stacked worker parameters.

The m workers' parameters are the rows of W (m × d). One iteration of either algorithm is

    W_{t+1} = A_t W_t − η G̃_t,                                                      (*)

with G̃_t the rows of the workers' (privatized) gradients at W_t and A_t a doubly stochastic
matrix saying who averages with whom this iteration — one matrix product for all workers:

- **D-PSGD** (Lian et al. 2017, paper 002's baseline): A_t = M, the gossip matrix of the
  communication graph (`graphs.mixing_matrix`), every iteration.
- **LEASGD** (Sec. 2.2, Eq. 3): every τ iterations each follower f is paired with a random
  leader i and both take the elastic step w_i ← w_i − ηg_i + ηρ(w_f − w_i),
  w_f ← w_f − ηg_f + ηρ(w_i − w_f): A_t has 1 − ηρ on the pair's diagonal and ηρ between them
  (1 for unpaired workers); other iterations A_t = I (local SGD). Leaders (the pool of lower
  training loss, at least as large as the followers') are re-chosen every kτ iterations.

**DP** (Sec. 2.3, Eq. 4; DP-SGD of Abadi et al.): each worker clips every per-example gradient
to L2 norm C and adds N(0, σ²C²) to their sum before dividing by its batch size L, so one
worker's iteration is the Gaussian mechanism on its own examples with sensitivity C.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from dp_fl import _checks
from dp_fl.mechanisms import cpsgd


def private_gradients(per_example: np.ndarray, clip_norm: float, noise_multiplier: float,
                      rng: Optional[np.random.Generator],
                      denominator: Optional[float] = None) -> np.ndarray:
  """DP-SGD's noisy mean per worker: (Σ_j clip(g_j) + N(0, σ²C² I)) / L.

  Args:
    per_example: (m, L, d) per-example gradients of the m workers' batches (rows of zeros for
      examples a Poisson sample did not draw).
    clip_norm: C.
    noise_multiplier: σ (0: clipping only).
    rng: the noise's generator (None only when σ = 0).
    denominator: L; default the batch axis' length. Poisson batches divide by their expected
      size, a constant, so the sensitivity stays C / L.

  Returns:
    (m, d) privatized gradients.
  """
  per_example = np.asarray(per_example, dtype=np.float64)
  if per_example.ndim != 3:
    raise ValueError(f"per-example gradients must be (workers, batch, dimension); got shape "
                     f"{per_example.shape}.")
  sigma = _checks.check_nonnegative("noise_multiplier", noise_multiplier)
  summed = cpsgd.clip_l2(per_example, clip_norm).sum(axis=1)
  if sigma:
    if rng is None:
      raise ValueError("private_gradients with noise needs a generator (`rng`).")
    summed = summed + rng.normal(0.0, sigma * clip_norm, size=summed.shape)
  if denominator is None:
    denominator = per_example.shape[1]
  return summed / _checks.check_positive("denominator", denominator)


def leader_follower_pools(losses: np.ndarray, num_leaders: Optional[int] = None
                          ) -> tuple[np.ndarray, np.ndarray]:
  """(leaders, followers): the `num_leaders` workers of lowest training loss lead (default
  ⌈m/2⌉; the leader pool is never smaller than the follower pool, Sec. 2.2)."""
  losses = np.asarray(losses, dtype=np.float64)
  m = losses.shape[0]
  if num_leaders is None:
    num_leaders = math.ceil(m / 2)
  num_leaders = _checks.check_positive_int("num_leaders", num_leaders)
  if not m - num_leaders <= num_leaders <= m:
    raise ValueError(f"`num_leaders` must be between ⌈m/2⌉ = {math.ceil(m / 2)} and m = {m} "
                     f"(leaders >= followers, paper 002 Sec. 2.2); got {num_leaders}.")
  order = np.argsort(losses, kind="stable")
  return np.sort(order[:num_leaders]), np.sort(order[num_leaders:])


def random_pairing(leaders: np.ndarray, followers: np.ndarray,
                   rng: np.random.Generator) -> list[tuple[int, int]]:
  """Each follower paired with a distinct random leader: [(leader, follower), …]."""
  if len(followers) > len(leaders):
    raise ValueError("more followers than leaders: every follower needs its own leader.")
  chosen = rng.permutation(np.asarray(leaders))[:len(followers)]
  return [(int(i), int(f)) for i, f in zip(chosen, rng.permutation(np.asarray(followers)))]


def elastic_mixing(pairs: list[tuple[int, int]], num_workers: int,
                   elastic_step: float) -> np.ndarray:
  """A_t of LEASGD's communication iteration: ηρ between paired workers, 1 − ηρ on their
  diagonal, 1 for unpaired ones (symmetric, doubly stochastic for 0 <= ηρ <= 1)."""
  step = _checks.check_nonnegative("elastic_step", elastic_step)
  if step > 1:
    raise ValueError(f"the elastic step ηρ must be <= 1 (a convex pull); got {step:g}. Lower "
                     "the learning rate or ρ.")
  matrix = np.eye(_checks.check_positive_int("num_workers", num_workers))
  seen: set[int] = set()
  for i, f in pairs:
    if i in seen or f in seen or i == f:
      raise ValueError(f"pairs must be disjoint; worker {i if i in seen else f} appears twice.")
    seen.update((i, f))
    matrix[i, i] = matrix[f, f] = 1.0 - step
    matrix[i, f] = matrix[f, i] = step
  return matrix


def step(weights: np.ndarray, gradients: np.ndarray, mixing: np.ndarray,
         learning_rate: float) -> np.ndarray:
  """(*): W_{t+1} = A W − η G for all workers at once (rows = workers)."""
  return mixing @ weights - learning_rate * gradients
