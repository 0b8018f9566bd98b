"""The mean estimators of paper 000's learning experiment (cpSGD, Sec. 5, Fig. 2) calibrated
to (ε, δ) over a client's participations: `none`, `gaussian` and `cpsgd` of the name → estimator
table (`dp_fl/aggregators/mean_estimators.py`'s `ESTIMATORS`, which adds TFF's distributed
discrete Gaussian and Skellam).

The estimators are `dp_fl/mechanisms/mean_estimation.py`'s. Neighbouring data sets replace one
client's vector (replace-one; the cohort size n is public); a client takes part in E rounds,
composed here; no amplification by sampling or shuffling is claimed.

| name     | calibration                                                                        |
|----------|------------------------------------------------------------------------------------|
| none     | none (no privacy)                                                                  |
| gaussian | σ of the sum: E Gaussian releases of sensitivity 2D are one Gaussian of μ = 2D√E/σ, |
|          | exact (ε, δ) (`dp_fl.accounting.zcdp`, Balle & Wang's curve)                       |
| cpsgd    | m, the fewest Binomial trials (to 0.1 %) for (ε, δ) at k levels and Thm. 4's X_max  |
|          | (`dp_fl.accounting.cpsgd.trials_for_epsilon`: the Binomial mechanism's Rényi DP with |
|          | Eq. 10's sensitivities per round, composed over E rounds); a client sends           |
|          | ⌈log₂(k + m)⌉ bits per coordinate (Thm. 3)                                         |

These calibrations are the library's math, free of TFF; the table that names them (and the
TFF-run `ddgauss` / `skellam`) sits at the aggregators layer, and neither is
`dp_fl/training/registry.py`'s: those entries build TFF aggregators for the training tier,
these are NumPy estimators for a loop over per-client gradients (`tasks/digits`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from dp_fl.accounting import cpsgd as cpsgd_accounting
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import cpsgd
from dp_fl.mechanisms import mean_estimation


@dataclasses.dataclass(frozen=True)
class Rounds:
  """What every calibration needs to know of the rounds a client takes part in.

  Attributes:
    cohort: n, clients per round.
    participations: E, the rounds each client takes part in (composed).
    clip_norm: D, the L2 norm each client's vector is clipped to (gaussian, cpsgd).
    delta: δ of the (ε, δ); also the X_max failure probability (Thm. 4).
    binomial_p: p of cpSGD's Bin(m, p) shares (paper 000: 0.5).
    dimension: d, the length of a client's vector.
  """
  cohort: int
  participations: int
  clip_norm: float
  delta: float
  binomial_p: float
  dimension: int


def calibrate_none(rounds: Rounds, epsilon: Optional[float], num_levels: Optional[int]
                   ) -> mean_estimation.PlainMean:
  del rounds, epsilon, num_levels
  return mean_estimation.PlainMean()


def calibrate_gaussian(rounds: Rounds, epsilon: Optional[float], num_levels: Optional[int]
                       ) -> mean_estimation.GaussianMean:
  """σ of the sum for (ε, δ) over E participations, replace-one sensitivity 2D per round.

  A client's E rounds are E Gaussian releases of sensitivity 2D: ρ = E (2D)² / (2σ²)-zCDP,
  exactly one Gaussian of μ = 2D√E/σ, whose exact (ε, δ) (`zcdp.epsilon_from_rho`) is
  calibrated through `zcdp.noise_multiplier_for_epsilon` with sensitivity √E and clip norm 2D.
  """
  del num_levels
  sensitivity = math.sqrt(rounds.participations)
  multiplier = zcdp.noise_multiplier_for_epsilon(sensitivity, epsilon, rounds.delta)
  guarantee = zcdp.matrix_mechanism_guarantee(sensitivity, multiplier, rounds.delta)
  if guarantee.epsilon > epsilon * (1 + 1e-9):
    raise RuntimeError(f"Gaussian calibration gave ε = {guarantee.epsilon} > {epsilon}.")
  return mean_estimation.GaussianMean(
      clip_norm=rounds.clip_norm,
      noise_std_of_sum=multiplier * 2.0 * rounds.clip_norm,
      cohort=rounds.cohort,
      guarantee={"epsilon": guarantee.epsilon, "delta": rounds.delta,
                 "participations": rounds.participations, "rho": guarantee.rho,
                 "accounting": "exact Gaussian (zCDP of E Gaussians, Balle-Wang curve)"})


def calibrate_cpsgd(rounds: Rounds, epsilon: Optional[float], num_levels: Optional[int]
                    ) -> mean_estimation.CpSgdMean:
  """m for (ε, δ) over E participations at k levels, X_max of Thm. 4; ε checked back."""
  n, delta, clip_norm, p = rounds.cohort, rounds.delta, rounds.clip_norm, rounds.binomial_p
  padded = cpsgd.padded_dimension(rounds.dimension)
  x_max = cpsgd.rotated_x_max(clip_norm, n, rounds.dimension, delta)
  trials = cpsgd_accounting.trials_for_epsilon(
      num_levels, p, x_max, clip_norm, padded, n, rounds.participations, epsilon, delta)
  guarantee = cpsgd_accounting.composed_epsilon(
      num_levels, trials, p, x_max, clip_norm, padded, n, rounds.participations, delta)
  if not guarantee.epsilon <= epsilon:
    raise RuntimeError(f"cpSGD calibration gave ε = {guarantee.epsilon} > {epsilon}.")
  protocol = cpsgd.Protocol(num_levels=num_levels, num_trials=trials, p=p, x_max=x_max,
                            clip_norm=clip_norm, rotate=True)
  return mean_estimation.CpSgdMean(
      protocol=protocol, cohort=n,
      guarantee={"epsilon": guarantee.epsilon, "delta": delta,
                 "participations": rounds.participations, "num_levels": num_levels,
                 "num_trials": trials, "x_max": x_max, "padded_dimension": padded,
                 "composition": guarantee.composition,
                 "round_epsilon": guarantee.round_epsilon,
                 "accounting": "Rényi DP of the Binomial mechanism with Eq. 10's "
                               "sensitivities per round, composed over E rounds "
                               "(dp_fl.accounting.cpsgd)"})
