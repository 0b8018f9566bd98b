"""dp_fl.mechanisms.mean_estimation: each round's mean estimate against its closed form — the
plain mean, the Gaussian's clipped sum with N(0, σ²) noise, cpSGD's secure-sum round against
Thm. 3/4's MSE bound — and the seeded streams."""

from __future__ import annotations

import numpy as np
import pytest

from dp_fl.mechanisms import cpsgd
from dp_fl.mechanisms import mean_estimation

N, D = 50, 100


@pytest.fixture(scope="module")
def vectors():
  return cpsgd.clip_l2(np.random.default_rng(0).normal(size=(N, D)) * 0.2, 1.0)


def test_streams_are_distinct_per_purpose_and_index_and_reproducible():
  draw = lambda *key: mean_estimation.stream(7, *key).random(4)
  np.testing.assert_array_equal(draw(mean_estimation.SERVER, 3),
                                draw(mean_estimation.SERVER, 3))
  assert not np.array_equal(draw(mean_estimation.SERVER, 3), draw(mean_estimation.SERVER, 4))
  assert not np.array_equal(draw(mean_estimation.SERVER, 3), draw(mean_estimation.CLIENTS, 3))
  np.testing.assert_array_equal(draw(mean_estimation.INIT), draw(mean_estimation.INIT, 0))


def test_plain_mean_is_the_unclipped_mean():
  gradients = np.random.default_rng(1).normal(size=(5, 3)) * 10
  estimator = mean_estimation.PlainMean()
  np.testing.assert_array_equal(estimator.estimate(gradients, 0, 0), gradients.mean(axis=0))
  assert estimator.describe() == {"epsilon": None, "bits_per_coordinate": None,
                                  "noise_std_of_mean": 0.0}


def test_gaussian_mean_is_the_clipped_sum_plus_the_server_stream_over_n():
  gradients = np.random.default_rng(2).normal(size=(20, 30))
  estimator = mean_estimation.GaussianMean(clip_norm=0.5, noise_std_of_sum=3.0, cohort=20,
                                           guarantee={"epsilon": 1.0})
  noise = mean_estimation.stream(9, mean_estimation.SERVER, 4).normal(0.0, 3.0, 30)
  expected = (cpsgd.clip_l2(gradients, 0.5).sum(axis=0) + noise) / 20
  np.testing.assert_array_equal(estimator.estimate(gradients, 9, 4), expected)
  assert estimator.describe() == {"epsilon": 1.0, "bits_per_coordinate": None,
                                  "noise_std_of_mean": 3.0 / 20}


def test_cpsgd_round_is_unbiased_within_the_mse_bound(vectors):
  """One round's estimate of the mean of n clipped vectors: E‖X̂ − X̄‖² is at least the
  Binomial noise's d·std² (the noise is i.i.d. over the d' rotated coordinates, R is
  orthogonal, and the estimate keeps d of them) and at most Thm. 3/4's bound
  (`Protocol.mse_bound`). Averaged over 200 rounds (20,000 squared errors: the mean's
  relative std is about 1%, the 10% margins are ~10 std). m = 18 is what
  `dp_fl.accounting.mean_estimation` calibrates for ε = 8 here."""
  protocol = cpsgd.Protocol(num_levels=4, num_trials=18, p=0.5,
                            x_max=cpsgd.rotated_x_max(1.0, N, D, 1e-9), clip_norm=1.0)
  estimator = mean_estimation.CpSgdMean(protocol=protocol, cohort=N, guarantee={})
  estimates = np.array([estimator.estimate(vectors, 7, r) for r in range(200)])
  errors = np.sum((estimates - vectors.mean(0)) ** 2, axis=1)
  noise_only = D * estimator.describe()["noise_std_of_mean"] ** 2
  bound = protocol.mse_bound(N, D, delta=1e-9)
  assert 0.9 * noise_only <= np.mean(errors) <= 1.1 * bound
  bias = np.sum((estimates.mean(axis=0) - vectors.mean(0)) ** 2)
  assert bias < 0.05 * noise_only  # Unbiased: about noise_only / 200 expected.
  # The rotation's signs are public and fresh every round.
  signs = [cpsgd.rademacher_signs(mean_estimation.stream(7, mean_estimation.ROTATION, r), D)
           for r in range(2)]
  assert not np.array_equal(*signs)


def test_cpsgd_round_is_the_protocols_secure_mean_with_the_rounds_streams(vectors):
  protocol = cpsgd.Protocol(num_levels=16, num_trials=40, p=0.5, x_max=0.5, clip_norm=1.0)
  estimator = mean_estimation.CpSgdMean(protocol=protocol, cohort=N,
                                        guarantee={"epsilon": 2.0})
  signs = cpsgd.rademacher_signs(mean_estimation.stream(3, mean_estimation.ROTATION, 5), D)
  expected = protocol.secure_mean(
      vectors, mean_estimation.stream(3, mean_estimation.CLIENTS, 5), signs)
  np.testing.assert_array_equal(estimator.estimate(vectors, 3, 5), expected)
  described = estimator.describe()
  assert described["epsilon"] == 2.0
  assert described["bits_per_coordinate"] == protocol.bits_per_coordinate == 6
  assert described["noise_std_of_mean"] == protocol.noise_std_of_sum(N) / N


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
