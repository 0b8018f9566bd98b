"""The name → mean estimator table of paper 000's learning experiment (`tasks/digits`): what
`--mechanisms` accepts, each name's calibration to (ε, δ) over a client's participations.

A mean estimator turns one round's n client vectors (NumPy) into the server's estimate of
their mean (`estimate(gradients, seed, round_index)`, `describe()`):

| name     | estimator and calibration                                                           |
|----------|-------------------------------------------------------------------------------------|
| none     | the plain mean, no privacy (`dp_fl/mechanisms/mean_estimation.py`)                   |
| gaussian | central Gaussian, σ exact over E rounds (`dp_fl/accounting/mean_estimation.py`)      |
| cpsgd    | Rot(s_k(Bin(m, p)), HA), m by the Binomial mechanism's Rényi DP (the same module)    |
| ddgauss  | TFF 0.87's distributed discrete Gaussian at B bits, run by TFF itself (`NoisySums`); |
|          | z by Prop. 14 of arXiv:2102.06387 over E rounds (`distributed_dp.calibrated_setting`) |
| skellam  | TFF 0.87's distributed Skellam at B bits, likewise; z by Thm. 3.5 of arXiv:2110.04995 |

Neighbouring data sets replace one client's vector (replace-one, as paper 000; the cohort
size n is public); a client's E rounds are composed; no amplification is claimed. The table
lives at the aggregators layer because `ddgauss` and `skellam` run TFF's aggregator (the
math estimators stay free of TFF below it); `tff_context` says which runs need a TFF
execution context (`dp_fl.execution.runtime.execution_context`). This is not
`dp_fl/training/registry.py`'s table: those entries build training aggregators, these
estimate one round's mean for a NumPy loop over per-client gradients.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import numpy as np

from dp_fl.accounting import mean_estimation as mean_estimation_accounting
from dp_fl.aggregators import distributed_dp


@dataclasses.dataclass
class DistributedDpMean:
  """`ddgauss` / `skellam`: (TFF's decoded noisy sum of the n clients' vectors) / n.

  TFF's `DistributedDpSumFactory` runs the round (each client clips to D, rotates, scales,
  rounds and adds its own integer noise share; the B-bit sum modulo 2^B is decoded), one
  process per setting and its state carried from round to round (`distributed_dp.NoisySums`);
  a run starts afresh at round 0. The noise is the clients' own randomness, never the run's
  public seed: runs with these estimators are not repeatable.

  Attributes:
    setting: what TFF's factory uses (scale, bounds, noise) and its ε, calibrated over E rounds.
    clip_norm: D.
    cohort: n, the clients per round the process and the accounting assume.
    dimension: d, the length of a client's vector.
    guarantee: its (ε, δ) and how it was obtained (`describe` reports it).
  """
  setting: distributed_dp.Setting
  clip_norm: float
  cohort: int
  dimension: int
  guarantee: dict[str, Any]
  _sums: Optional[distributed_dp.NoisySums] = dataclasses.field(
      default=None, init=False, repr=False, compare=False)

  @property
  def name(self) -> str:
    return self.setting.mechanism

  def estimate(self, gradients: np.ndarray, seed: int, round_index: int) -> np.ndarray:
    del seed  # The clients' noise is secret: not drawn from the run's public seed.
    if gradients.shape != (self.cohort, self.dimension):
      raise ValueError(f"{self.name} was calibrated for {self.cohort} clients of d = "
                       f"{self.dimension}; got gradients of shape {gradients.shape}.")
    if round_index == 0 or self._sums is None:
      self._sums = distributed_dp.NoisySums(self.setting, self.dimension, self.clip_norm,
                                            self.cohort)
    return self._sums(gradients) / self.cohort

  def describe(self) -> dict[str, Any]:
    noise_std_of_sum = (np.sqrt(self.cohort) * self.setting.sampled_stddev
                        / self.setting.scale_factor)  # In the input's units (rotation is L2).
    return {**self.guarantee, "bits_per_coordinate": self.setting.bits,
            "noise_std_of_mean": float(noise_std_of_sum / self.cohort)}

  def __getstate__(self) -> dict[str, Any]:  # Sent to worker processes without TFF's process.
    return {**self.__dict__, "_sums": None}


def calibrate_distributed_dp(mechanism: str) -> Callable[..., DistributedDpMean]:
  """The calibration of `mechanism` ('ddgauss' | 'skellam') at B bits: the smallest z (to
  0.1 %) whose ε over E releases of n shares, replace-one, reaches the target, checked back.

  Raises:
    ValueError: no z reaches ε at B bits (the grid is too coarse; the message says so).
  """

  def calibrate(rounds: mean_estimation_accounting.Rounds, epsilon: Optional[float],
                bits: Optional[int]) -> DistributedDpMean:
    setting = distributed_dp.calibrated_setting(
        mechanism, epsilon, rounds.delta, rounds.cohort, rounds.dimension, bits,
        rounds.clip_norm, releases=rounds.participations, adjacency=distributed_dp.REPLACE_ONE)
    if not setting.epsilon <= epsilon:
      raise RuntimeError(f"{mechanism} calibration gave ε = {setting.epsilon} > {epsilon}.")
    return DistributedDpMean(
        setting=setting, clip_norm=rounds.clip_norm, cohort=rounds.cohort,
        dimension=rounds.dimension,
        guarantee={"epsilon": setting.epsilon, "delta": rounds.delta,
                   "participations": rounds.participations, "bits": bits,
                   "noise_multiplier": setting.noise_multiplier,
                   "scale_factor": setting.scale_factor,
                   "padded_dimension": setting.padded_dimension,
                   "rdp_order": setting.rdp_order, "composition": "rdp",
                   "accounting": (
                       "Rényi DP of the distributed discrete Gaussian (Prop. 14 of "
                       "arXiv:2102.06387)" if mechanism == "ddgauss" else
                       "Rényi DP of the distributed Skellam (Thm. 3.5 of arXiv:2110.04995)")
                   + ", replace-one sensitivities of TFF's rounded vector, composed over E "
                     "rounds (dp_fl.aggregators.distributed_dp)"})

  return calibrate


@dataclasses.dataclass(frozen=True)
class Estimator:
  """What an estimator's name means.

  Attributes:
    calibrate: (rounds, ε, the grid's value) → an estimator.
    private: whether it has an ε (swept over the ε targets).
    grid: the setting swept besides ε: "levels" (cpSGD's k), "bits" (B) or None.
    tff_context: whether its rounds run in TFF (a TFF execution context around a run).
  """
  calibrate: Callable[[mean_estimation_accounting.Rounds, Optional[float], Optional[int]],
                      Any]
  private: bool
  grid: Optional[str] = None
  tff_context: bool = False


LEVELS, BITS = "levels", "bits"
ESTIMATORS = {
    "none": Estimator(mean_estimation_accounting.calibrate_none, private=False),
    "gaussian": Estimator(mean_estimation_accounting.calibrate_gaussian, private=True),
    "cpsgd": Estimator(mean_estimation_accounting.calibrate_cpsgd, private=True, grid=LEVELS),
    "ddgauss": Estimator(calibrate_distributed_dp("ddgauss"), private=True, grid=BITS,
                         tff_context=True),
    "skellam": Estimator(calibrate_distributed_dp("skellam"), private=True, grid=BITS,
                         tff_context=True),
}
