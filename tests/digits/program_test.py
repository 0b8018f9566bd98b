"""tasks.digits.program: short training runs (realized participation, learning above chance),
the sweep's runs per mechanism and its JSON summary."""

from __future__ import annotations

import pytest

from dp_fl.accounting import mean_estimation as mean_estimation_accounting
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


def test_run_specs_give_none_once_gaussian_per_epsilon_cpsgd_per_epsilon_and_level():
  spec = program.SweepSpec(mechanisms=("none", "gaussian", "cpsgd"), epsilons=(2.0, 8.0),
                           levels=(4, 16), seeds=(0, 1))
  groups = [run.group for run in program.run_specs(spec)]
  assert groups.count(("none", None, None)) == 2
  assert {g for g in groups if g[0] == "gaussian"} == {("gaussian", 2.0, None),
                                                      ("gaussian", 8.0, None)}
  assert len({g for g in groups if g[0] == "cpsgd"}) == 4 and len(groups) == 2 * (1 + 2 + 4)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
