"""The privacy cost of adaptive clipping: the quantile estimator's releases, composed.

Adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy, NeurIPS 2021) releases, besides the
noised updates, one noised count per round: Σᵢ (bᵢ − ½) + N(0, σ_b²) over the round's cohort
(`dp_fl/aggregators/quantile.py`). One client's term is ±½, so the count's sensitivity is

* ½ under add/remove adjacency (DP-FedAvg with Poisson sampling, paper 001): the removed
  client contributes nothing (Andrew et al., Sec. 3);
* 1 under zero-out adjacency (DP-FTRL, paper 004): the zero-out neighbour is run as a client
  with no data, whose update has norm 0 and so reports +½ against the real client's −½.

The count's noise multiplier is z_b = σ_b / sensitivity. The updates are released with their
noise scaled by the round's clip norm, so they are the unit-clip mechanism on normalised
updates (`dp_fl/aggregators/dp_ftrl.py` states the construction and its proof), and the run is
two Gaussian mechanisms on the same participations:

* with correlated noise under min-separation (DP-FTRL, ρ-zCDP): k participations of a client
  release k counts with independent noise, so the estimator is (k / (2 z_b²))-zCDP and
  ρ = sens_Π(C)² / (2σ²) + k / (2 z_b²) (zCDP composition, Bun & Steinke 2016, Lemma 2.3).
  The two are jointly one Gaussian mechanism (the counts are rows of an identity block of
  the strategy), so the exact Gaussian (ε, δ) conversion with μ = √(2ρ) remains valid;
* with Poisson sampling (DP-FedAvg): each round is one subsampled Gaussian on the pair, with
  the effective noise multiplier z = (z_Δ⁻² + z_b⁻²)^(−½) (Andrew et al., Thm. 1: a Gaussian
  mechanism on the concatenation), composed over the rounds by the Poisson accountants.

Amplified DP-FTRL analyses (balls-in-bins Monte Carlo, cyclic Poisson) are not composed here:
the registry refuses adaptive clipping with them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from dp_fl import _checks

ZERO_OUT = "zero_out"
ADD_REMOVE = "add_remove"
COUNT_SENSITIVITY = {ZERO_OUT: 1.0, ADD_REMOVE: 0.5}
"""The centred count's sensitivity under each adjacency (module docstring)."""
# The largest start-search step of the estimator (`dp_fl/aggregators/quantile.py`): ×e¹⁰
# (22,026) a round; beyond it the search only bounces between the ends of the clip norm's
# range (ln(1e16) ≈ 37) while it halves. Post-processing either way: no ε.
MAX_SEARCH_STEP = 10.0

DEFAULT_BUDGET_SHARE = 0.1
"""The estimator's default share of the privacy budget (of ρ, or of z⁻² under Poisson): Andrew
et al.'s σ_b = m/20 costs about 1 % of the budget at their cohorts of hundreds, but at the
tens of clients per round of dp_fl's presets that noise would swamp the count (σ_b/m ≈ 0.3
already at a 10 % share)."""


def _check_adjacency(adjacency: str) -> float:
  if adjacency not in COUNT_SENSITIVITY:
    raise ValueError(f"`adjacency` must be one of {tuple(COUNT_SENSITIVITY)}; got "
                     f"{adjacency!r}.")
  return COUNT_SENSITIVITY[adjacency]


def count_noise_multiplier(count_stddev: float, adjacency: str) -> float:
  """z_b = σ_b / (the count's sensitivity under `adjacency`)."""
  sensitivity = _check_adjacency(adjacency)
  return _checks.check_positive("count_stddev", count_stddev) / sensitivity


def count_stddev_of(noise_multiplier: float, adjacency: str) -> float:
  """σ_b of the count noise multiplier z_b (the inverse of `count_noise_multiplier`)."""
  return _checks.check_positive("noise_multiplier", noise_multiplier) * _check_adjacency(
      adjacency)


def estimator_rho(participations: int, count_stddev: float, adjacency: str) -> float:
  """ρ-zCDP of the counts released to a client's k participations: k / (2 z_b²)."""
  k = _checks.check_nonnegative_int("participations", participations)
  z_b = count_noise_multiplier(count_stddev, adjacency)
  return k / (2.0 * z_b * z_b)


def effective_noise_multiplier(update_noise_multiplier: float,
                               count_noise_multiplier_: float) -> float:
  """z = (z_Δ⁻² + z_b⁻²)^(−½): the Gaussian mechanism that the round's two releases are
  together (Andrew et al., Thm. 1, there with z_b = 2σ_b)."""
  z_update = _checks.check_positive("update_noise_multiplier", update_noise_multiplier)
  z_count = _checks.check_positive("count_noise_multiplier", count_noise_multiplier_)
  return (z_update ** -2 + z_count ** -2) ** -0.5


def check_budget_share(share: Any) -> float:
  """A budget share in (0, 1): the estimator's part of ρ (or of z⁻²)."""
  return _checks.check_open_unit("clip_budget_share", share)


def split_noise_multiplier(effective: float, share: float) -> tuple[float, float]:
  """(z_Δ, z_b) whose effective multiplier is `effective` with the estimator taking `share`
  of z⁻² (Andrew et al.'s split, Sec. 3: z_Δ = (z⁻² − z_b⁻²)^(−½))."""
  z = _checks.check_positive("effective", effective)
  share = check_budget_share(share)
  return z / math.sqrt(1.0 - share), z / math.sqrt(share)


def count_multiplier_for_share(update_noise_multiplier: float, share: float) -> float:
  """z_b = z_Δ √((1 − s)/s): the count's noise multiplier that takes `share` of z⁻² (of ρ
  when the updates' sensitivity² equals the count's, k, as for C = I and under Poisson)."""
  z_update = _checks.check_positive("update_noise_multiplier", update_noise_multiplier)
  share = check_budget_share(share)
  return z_update * math.sqrt((1.0 - share) / share)


@dataclasses.dataclass(frozen=True)
class EstimatorCost:
  """What the clip-norm estimator costs in a report.

  Attributes:
    target_quantile, learning_rate: γ and η of the estimator.
    count_stddev: σ_b.
    adjacency: the adjacency its sensitivity is taken under.
    count_noise_multiplier: z_b = σ_b / sensitivity.
    participations: k, the count releases of the most-participating client (DP-FTRL), or
      None under Poisson sampling (every round, subsampled).
    rho: the estimator's ρ (DP-FTRL), else None.
    share: its share of the budget: of ρ (DP-FTRL), or of z⁻² (Poisson).
  """
  target_quantile: float
  learning_rate: float
  count_stddev: float
  adjacency: str
  count_noise_multiplier: float
  participations: Any
  rho: Any
  share: float

  def describe(self) -> str:
    spent = (f"ρ = {self.rho:.4g} over {self.participations} participations, "
             if self.rho is not None else "")
    return (f"adaptive clipping to the {self.target_quantile:g} quantile (η = "
            f"{self.learning_rate:g}): noised counts with σ_b = {self.count_stddev:.4g} "
            f"(z_b = {self.count_noise_multiplier:.4g}, {self.adjacency.replace('_', '/')} "
            f"sensitivity {COUNT_SENSITIVITY[self.adjacency]:g}); {spent}"
            f"{100 * self.share:.1f} % of the privacy budget")


@dataclasses.dataclass(frozen=True)
class ClipEstimator:
  """The clip-norm estimator of a run, as its accountant sees it.

  Attributes:
    target_quantile: γ.
    learning_rate: η.
    count_stddev: σ_b, the std of the noise on the centred count.
    adjacency: ZERO_OUT (DP-FTRL) or ADD_REMOVE (DP-FedAvg), which fixes the sensitivity.
  """
  target_quantile: float
  learning_rate: float
  count_stddev: float
  adjacency: str

  def __post_init__(self):
    _checks.check_open_unit("target_quantile", self.target_quantile)
    _checks.check_positive("learning_rate", self.learning_rate)
    count_noise_multiplier(self.count_stddev, self.adjacency)

  @property
  def noise_multiplier(self) -> float:
    """z_b = σ_b / sensitivity."""
    return count_noise_multiplier(self.count_stddev, self.adjacency)

  def rho(self, participations: int) -> float:
    """ρ-zCDP of the counts released to k participations (`estimator_rho`)."""
    return estimator_rho(participations, self.count_stddev, self.adjacency)

  def cost(self, participations: Any = None, rho: Any = None, share: float = 0.0
           ) -> EstimatorCost:
    return EstimatorCost(self.target_quantile, self.learning_rate, self.count_stddev,
                         self.adjacency, self.noise_multiplier, participations, rho, share)
