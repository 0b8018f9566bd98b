"""One round's estimate of n clients' mean vector, in NumPy: the estimators of paper 000's
learning experiment (cpSGD, Sec. 5, Fig. 2), which a training loop over per-client gradients
calls every round.

| name     | the server's estimate of the clients' mean                                        |
|----------|-----------------------------------------------------------------------------------|
| none     | the plain mean, unclipped, no noise (the non-private reference)                     |
| gaussian | (Σ clip_D(g_i) + N(0, σ² I)) / n (paper 000, Thm. 2's baseline: central DP)         |
| cpsgd    | Rot(s_k(Bin(m, p)), HA) (Sec. 4.3, Thm. 4): each client clips, rotates by HA/√d'     |
|          | (fresh public signs each round), quantizes to k levels within ±X_max and adds its   |
|          | Bin(m, p) share; secure aggregation reveals the sum modulo 2^b, the server decodes it |

Their calibration to (ε, δ) and the name → estimator table are in
`dp_fl/accounting/mean_estimation.py`; the cpSGD protocol itself in `dp_fl/mechanisms/cpsgd.py`.

**Randomness.** One seeded stream per purpose and round (`stream`): INIT and ORDER are the
training loop's (the model's initialization, each epoch's permutation); ROTATION is public
randomness shared by the clients and the server; CLIENTS holds each client's quantization and
Binomial share; SERVER the central Gaussian noise. A run's seeds are public, so its ε is that
of the mechanism run with secret randomness.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dp_fl.mechanisms import cpsgd

INIT, ORDER, ROTATION, CLIENTS, SERVER = range(5)


def stream(seed: int, purpose: int, index: int = 0) -> np.random.Generator:
  """The generator of `purpose` (INIT, ORDER, …) at `index` (a round or an epoch)."""
  return np.random.default_rng([seed, purpose, index])


@dataclasses.dataclass(frozen=True)
class PlainMean:
  """`none`: the mean of the unclipped gradients, no noise, no privacy."""
  name: str = "none"

  def estimate(self, gradients: np.ndarray, seed: int, round_index: int) -> np.ndarray:
    del seed, round_index
    return gradients.mean(axis=0)

  def describe(self) -> dict[str, Any]:
    return {"epsilon": None, "bits_per_coordinate": None, "noise_std_of_mean": 0.0}


@dataclasses.dataclass(frozen=True)
class GaussianMean:
  """`gaussian`: (Σ clip_D(g_i) + N(0, σ² I)) / n (paper 000, Thm. 2's baseline).

  Attributes:
    clip_norm: D.
    noise_std_of_sum: σ, the std of the noise added to the sum.
    cohort: n, the clients per round (for the noise std of the mean, σ / n).
    guarantee: its (ε, δ) and how it was obtained (`describe` reports it).
  """
  clip_norm: float
  noise_std_of_sum: float
  cohort: int
  guarantee: dict[str, Any]
  name: str = "gaussian"

  def estimate(self, gradients: np.ndarray, seed: int, round_index: int) -> np.ndarray:
    total = cpsgd.clip_l2(gradients, self.clip_norm).sum(axis=0)
    noise = stream(seed, SERVER, round_index).normal(0.0, self.noise_std_of_sum, total.shape)
    return (total + noise) / gradients.shape[0]

  def describe(self) -> dict[str, Any]:
    return {**self.guarantee, "bits_per_coordinate": None,
            "noise_std_of_mean": self.noise_std_of_sum / self.cohort}


@dataclasses.dataclass(frozen=True)
class CpSgdMean:
  """`cpsgd`: Rot(s_k(Bin(m, p)), HA) of paper 000 (Sec. 4.3, Thm. 4) on the n gradients.

  Each client encodes (clip to D, rotate with the round's public signs, k-level stochastic
  quantization, + its Bin(m, p) share); secure aggregation reveals the sum modulo 2^b
  (`cpsgd.secure_sum_bits`, nothing wraps); the server decodes it (`Protocol.secure_mean`).
  """
  protocol: cpsgd.Protocol
  cohort: int
  guarantee: dict[str, Any]
  name: str = "cpsgd"

  def estimate(self, gradients: np.ndarray, seed: int, round_index: int) -> np.ndarray:
    signs = cpsgd.rademacher_signs(stream(seed, ROTATION, round_index), gradients.shape[1])
    return self.protocol.secure_mean(gradients, stream(seed, CLIENTS, round_index), signs)

  def describe(self) -> dict[str, Any]:
    return {**self.guarantee, "bits_per_coordinate": self.protocol.bits_per_coordinate,
            "noise_std_of_mean": self.protocol.noise_std_of_sum(self.cohort) / self.cohort}
