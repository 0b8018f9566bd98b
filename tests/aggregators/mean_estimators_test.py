"""dp_fl.aggregators.mean_estimators: the name table of the digits experiment, and TFF's
distributed DP (discrete Gaussian, Skellam) as a NumPy mean estimator — calibrated over E
rounds (replace-one), run round by round in TFF, noise of the accounted size."""

from __future__ import annotations

import math
import pickle

from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
import pytest

from dp_fl.accounting import discrete_gaussian
from dp_fl.accounting import mean_estimation as mean_estimation_accounting
from dp_fl.aggregators import distributed_dp
from dp_fl.aggregators import mean_estimators
from dp_fl.execution import runtime
from dp_fl.mechanisms import mean_estimation

ROUNDS = mean_estimation_accounting.Rounds(cohort=100, participations=3, clip_norm=1.0,
                                           delta=1e-9, binomial_p=0.5, dimension=1210)


def test_the_table_names_each_estimator_and_what_it_needs():
  table = mean_estimators.ESTIMATORS
  assert list(table) == ["none", "gaussian", "cpsgd", "ddgauss", "skellam"]
  assert [e.private for e in table.values()] == [False, True, True, True, True]
  assert [e.grid for e in table.values()] == [None, None, "levels", "bits", "bits"]
  assert [e.tff_context for e in table.values()] == [False, False, False, True, True]
  assert isinstance(table["none"].calibrate(ROUNDS, None, None), mean_estimation.PlainMean)
  assert table["gaussian"].calibrate(ROUNDS, 8.0, None).name == "gaussian"
  assert table["skellam"].calibrate(ROUNDS, 8.0, 16).name == "skellam"


def _skellam_epsilon_by_hand(setting, n, releases, delta):
  """Thm. 3.5 of arXiv:2110.04995 written out (replace-one Δ = 2 × TFF's bounds, μ = n σ²),
  `releases` rounds' curves added, over integer orders 2..256."""
  l2, l1 = 2 * setting.scaled_inflated_l2, 2 * setting.scaled_l1
  mu = n * setting.sampled_stddev ** 2
  orders = np.arange(2, 257, dtype=np.float64)
  curve = [releases * (a * l2 ** 2 / (2 * mu) + min(((2 * a - 1) * l2 ** 2 + 6 * l1)
                                                    / (4 * mu ** 2), 3 * l1 / (2 * mu)))
           for a in orders]
  return rdp_privacy_accountant.compute_epsilon(orders, np.array(curve), delta)[0]


@pytest.mark.parametrize("mechanism", ["ddgauss", "skellam"])
@pytest.mark.parametrize("epsilon", [2.0, 50.0])
def test_calibration_composes_the_rounds_and_finds_the_smallest_noise(mechanism, epsilon):
  estimator = mean_estimators.ESTIMATORS[mechanism].calibrate(ROUNDS, epsilon, 16)
  setting = estimator.setting
  n, e, delta = ROUNDS.cohort, ROUNDS.participations, ROUNDS.delta
  if mechanism == "ddgauss":
    want = discrete_gaussian.composed_epsilon(
        2 * setting.scaled_inflated_l2, 2 * setting.scaled_l1, setting.sampled_stddev, n, n,
        setting.padded_dimension, e, delta)[0]
    assert setting.epsilon == pytest.approx(want, rel=1e-12)
  else:
    assert setting.epsilon <= _skellam_epsilon_by_hand(setting, n, e, delta) * (1 + 1e-12)
  assert setting.epsilon <= epsilon
  # One round alone is cheaper than E: the composition is charged.
  one_round = distributed_dp.setting_at(mechanism, setting.noise_multiplier, n, 1210, 16,
                                        delta, 1.0)
  assert one_round.epsilon < setting.epsilon
  # 0.2 % less noise misses the target: the calibration is the smallest (to 0.1 %).
  smaller = distributed_dp.setting_at(mechanism, setting.noise_multiplier / 1.002, n, 1210,
                                      16, delta, 1.0)
  assert smaller.composed_epsilon(n, n, e, delta, distributed_dp.REPLACE_ONE)[0] > epsilon
  described = estimator.describe()
  assert described["bits_per_coordinate"] == 16 and described["participations"] == e
  assert described["epsilon"] == setting.epsilon and described["composition"] == "rdp"


def test_too_few_bits_are_refused_with_the_reason():
  with pytest.raises(ValueError, match="too coarse.*use more bits"):
    mean_estimators.ESTIMATORS["ddgauss"].calibrate(ROUNDS, 2.0, 10)


@pytest.mark.parametrize("mechanism", ["ddgauss", "skellam"])
def test_estimates_are_the_mean_plus_noise_of_the_described_size(mechanism):
  rng = np.random.default_rng(0)
  rounds = mean_estimation_accounting.Rounds(cohort=20, participations=2, clip_norm=1.0,
                                             delta=1e-5, binomial_p=0.5, dimension=500)
  estimator = mean_estimators.ESTIMATORS[mechanism].calibrate(rounds, 20.0, 16)
  vectors = rng.normal(size=(20, 500))
  vectors *= 0.5 / np.linalg.norm(vectors, axis=1, keepdims=True)  # Inside the clip.
  big = vectors.copy()
  big[0] *= 10.0  # Clipped to D = 1 by TFF.
  clipped = vectors.copy()
  clipped[0] *= 2.0
  with runtime.execution_context():
    errors = [estimator.estimate(vectors, seed=0, round_index=r) - vectors.mean(axis=0)
              for r in range(3)]
    errors.append(estimator.estimate(big, seed=0, round_index=0) - clipped.mean(axis=0))
  errors = np.stack(errors)
  std = estimator.describe()["noise_std_of_mean"]
  rounding = math.sqrt(0.25 * 20) / estimator.setting.scale_factor / 20
  assert errors.std() == pytest.approx(math.hypot(std, rounding), rel=0.2)
  assert len({e.tobytes() for e in errors}) == 4  # Fresh noise each round, seed unused.
  copy = pickle.loads(pickle.dumps(estimator))  # To worker processes, without TFF's process.
  assert copy._sums is None and copy.setting == estimator.setting  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="calibrated for 20 clients of d = 500"):
    estimator.estimate(vectors[:10], seed=0, round_index=0)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
