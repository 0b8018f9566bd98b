"""dp_fl.accounting.mean_estimation: calibration reaches ε ≤ the target (cpSGD with the fewest
trials m, the Gaussian against an independent PLD accountant); the name table's test is
tests/aggregators/mean_estimators_test.py."""

from __future__ import annotations

import dataclasses
import math

import dp_accounting
import pytest

from dp_fl.accounting import cpsgd as cpsgd_accounting
from dp_fl.accounting import mean_estimation as mean_estimation_accounting
from dp_fl.mechanisms import cpsgd
from dp_fl.mechanisms import mean_estimation

DIMENSION = 1210  # The digits MLP 64 → 16 → 10 (d' = 2,048).
ROUNDS = mean_estimation_accounting.Rounds(cohort=100, participations=3, clip_norm=1.0, delta=1e-9,
                            binomial_p=0.5, dimension=DIMENSION)


@pytest.mark.parametrize("participations", [1, 3])
@pytest.mark.parametrize("levels", [2, 16])
def test_calibrated_trials_reach_the_target_and_are_the_fewest(participations, levels):
  rounds = dataclasses.replace(ROUNDS, participations=participations)
  estimator = mean_estimation_accounting.calibrate_cpsgd(rounds, 4.0, levels)
  protocol = estimator.protocol
  assert protocol.x_max == cpsgd.rotated_x_max(1.0, 100, DIMENSION, 1e-9)

  def composed(trials):
    return cpsgd_accounting.composed_epsilon(
        levels, trials, 0.5, protocol.x_max, 1.0, 2048, 100, participations, 1e-9).epsilon

  # trials_for_epsilon returns an m within 0.1 % of the smallest (its relative_tolerance).
  slack = max(1, int(1e-3 * protocol.num_trials))
  assert composed(protocol.num_trials) <= 4.0 < composed(protocol.num_trials - slack)
  described = estimator.describe()
  assert described["epsilon"] == composed(protocol.num_trials)
  assert described["participations"] == participations
  assert described["padded_dimension"] == 2048
  assert described["bits_per_coordinate"] == math.ceil(math.log2(levels +
                                                                 protocol.num_trials))


def test_more_participations_need_more_trials():
  one = mean_estimation_accounting.calibrate_cpsgd(
      dataclasses.replace(ROUNDS, participations=1), 4.0, 16)
  three = mean_estimation_accounting.calibrate_cpsgd(ROUNDS, 4.0, 16)
  assert three.protocol.num_trials > one.protocol.num_trials


def test_many_levels_calibrate():  # The Rényi accountant has no e^ε₀ to overflow.
  estimator = mean_estimation_accounting.calibrate_cpsgd(ROUNDS, 2.0, 256)
  assert estimator.describe()["epsilon"] <= 2.0


@pytest.mark.parametrize("participations", [1, 5])
def test_gaussian_calibration_matches_an_independent_pld_accountant(participations):
  rounds = dataclasses.replace(ROUNDS, participations=participations, clip_norm=0.5)
  estimator = mean_estimation_accounting.calibrate_gaussian(rounds, 4.0, None)
  assert estimator.describe()["epsilon"] == pytest.approx(4.0, rel=1e-6)
  # E rounds, each the sum (sensitivity 2D, replace-one) plus N(0, σ²): PLD of E Gaussians.
  accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
  accountant.compose(dp_accounting.GaussianDpEvent(
      estimator.noise_std_of_sum / (2 * rounds.clip_norm)), participations)
  assert accountant.get_epsilon(1e-9) == pytest.approx(4.0, rel=0.01)
  assert estimator.describe()["noise_std_of_mean"] == estimator.noise_std_of_sum / 100


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
