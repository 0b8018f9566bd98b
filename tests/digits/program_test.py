"""tasks.digits.program: short training runs (realized participation, learning above chance),
the sweep's runs per mechanism and its JSON summary."""

from __future__ import annotations

import pytest

from dp_fl.accounting import mean_estimation as mean_estimation_accounting
from dp_fl.aggregators import mean_estimators
from dp_fl.mechanisms import mean_estimation
from tasks.digits import data
from tasks.digits import model
from tasks.digits import program

SMALL = program.Settings(clients_per_round=100, epochs=3, learning_rate=0.2, momentum=0.9,
                         clip_norm=1.0, delta=1e-9, binomial_p=0.5, hidden_layers=(16,))
SMALL_DIMENSION = model.Mlp((64, 16, 10)).dimension  # 1,210 (d' = 2,048).


@pytest.fixture(scope="module")
def digits():
  return data.load("sklearn_digits")


def test_calibration_rounds_are_the_settings_participation():
  rounds = program.calibration_rounds(SMALL, SMALL_DIMENSION)
  assert rounds == mean_estimation_accounting.Rounds(
      cohort=100, participations=3, clip_norm=1.0, delta=1e-9, binomial_p=0.5,
      dimension=SMALL_DIMENSION)


def test_none_learns_and_cpsgd_at_a_large_epsilon_learns_above_chance(digits):
  plain = program.train(digits, SMALL, mean_estimation.PlainMean(), seed=0)
  assert plain["test_accuracy"] > 0.8
  assert plain["max_participations"] == 3 and plain["rounds"] == 3 * (1438 // 100)
  private = mean_estimation_accounting.calibrate_cpsgd(
      program.calibration_rounds(SMALL, SMALL_DIMENSION), 200.0, 16)
  result = program.train(digits, SMALL, private, seed=0)
  assert result["test_accuracy"] > 0.4  # Chance is 0.1.
  assert len(result["test_accuracy_per_epoch"]) == 3 and result["diverged_at_round"] is None


def test_distributed_dp_trains_in_tff_and_learns_above_chance(digits):
  rounds = program.calibration_rounds(SMALL, SMALL_DIMENSION)
  run = program.RunSpec("ddgauss", 200.0, None, seed=0, bits=16)
  estimator = program.calibrate(run, rounds)
  assert isinstance(estimator, mean_estimators.DistributedDpMean)
  assert estimator.setting.epsilon <= 200.0 and estimator.setting.bits == 16
  result = program.train_run(digits, SMALL, estimator, run)  # Opens TFF's context itself.
  assert result["test_accuracy"] > 0.4 and result["max_participations"] == 3


def test_run_specs_give_none_once_gaussian_per_epsilon_cpsgd_per_level_ddgauss_per_bits():
  spec = program.SweepSpec(mechanisms=("none", "gaussian", "cpsgd", "ddgauss", "skellam"),
                           epsilons=(2.0, 8.0), levels=(4, 16), seeds=(0, 1), bits=(14, 16, 18))
  groups = [run.group for run in program.run_specs(spec)]
  assert groups.count(("none", None, None, None)) == 2
  assert {g for g in groups if g[0] == "gaussian"} == {("gaussian", 2.0, None, None),
                                                      ("gaussian", 8.0, None, None)}
  assert len({g for g in groups if g[0] == "cpsgd"}) == 4
  assert {g for g in groups if g[0] == "ddgauss"} == {
      ("ddgauss", e, None, b) for e in (2.0, 8.0) for b in (14, 16, 18)}
  assert len(groups) == 2 * (1 + 2 + 4 + 6 + 6)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
