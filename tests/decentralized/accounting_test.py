"""Each worker's ε (paper 002, Sec. 2.3) against dp_accounting's own DP-SGD accounting."""

from __future__ import annotations

import math

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
import pytest

from dp_fl.accounting import dpfedavg
from dp_fl.decentralized import accounting


def _dp_sgd_epsilon(q, sigma, steps, delta):
  """The textbook DP-SGD accounting: T steps of the Poisson-subsampled Gaussian."""
  accountant = rdp_privacy_accountant.RdpAccountant()
  accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)),
                     steps)
  return accountant.get_epsilon(delta)


@pytest.mark.parametrize("q,sigma,steps", [(0.01, 1.1, 1000), (16 / 287, 2.0, 1000),
                                           (0.2, 4.0, 300)])
def test_a_worker_without_loss_reports_is_dp_sgd(q, sigma, steps):
  eps, order = dpfedavg.event_rdp_epsilon(accounting.worker_dp_event(q, sigma, steps), 1e-5)
  assert eps == pytest.approx(_dp_sgd_epsilon(q, sigma, steps, 1e-5), rel=1e-9)
  assert order > 1


def test_loss_reports_cost_a_joint_gaussian_between_none_and_all_at_the_joint_noise():
  q, sigma, loss_sigma, steps = 0.05, 2.0, 4.0, 500
  joint = accounting.effective_noise_multiplier(sigma, loss_sigma)
  assert joint == pytest.approx(1.0 / math.sqrt(1 / 4 + 1 / 16))
  without = dpfedavg.event_rdp_epsilon(accounting.worker_dp_event(q, sigma, steps), 1e-5)[0]
  with_reports = dpfedavg.event_rdp_epsilon(
      accounting.worker_dp_event(q, sigma, steps, 50, loss_sigma), 1e-5)[0]
  all_joint = _dp_sgd_epsilon(q, joint, steps, 1e-5)
  assert without < with_reports < all_joint


def test_the_joint_release_is_one_gaussian_of_the_combined_sensitivity():
  """(Σ clip_C g, Σ clip_B ℓ) with noise (σC, σ_ℓB): scaling each part by its noise gives unit
  noise and an L2 sensitivity of √(σ⁻² + σ_ℓ⁻²) at the worst case ‖g‖ = C, ℓ = B."""
  sigma, loss_sigma = 1.5, 3.0
  rng = np.random.default_rng(0)
  for _ in range(100):
    g = rng.normal(size=5)
    g *= rng.uniform(0, 1) / np.linalg.norm(g)  # ‖g‖ <= C = 1
    loss = rng.uniform(0, 1)                      # 0 <= ℓ <= B = 1
    scaled = np.concatenate([g / sigma, [loss / loss_sigma]])
    assert np.linalg.norm(scaled) <= 1 / accounting.effective_noise_multiplier(
        sigma, loss_sigma) + 1e-12


def test_every_worker_from_its_own_rate_and_the_max():
  run = accounting.run_privacy([300, 300, 100], 10, 2.0, 400, 1e-5)
  eps = [w.epsilon for w in run.workers]
  assert eps[0] == eps[1] < eps[2] == run.max_epsilon
  assert eps[2] == pytest.approx(_dp_sgd_epsilon(0.1, 2.0, 400, 1e-5), rel=1e-9)
  assert run.workers[2].sampling_probability == pytest.approx(0.1)
  assert run.to_json()["max_epsilon"] == run.max_epsilon


def test_bad_inputs_fail_clearly():
  with pytest.raises(ValueError, match="batch_size"):
    accounting.worker_dp_event(1.5, 1.0, 10)
  with pytest.raises(ValueError, match="loss_noise_multiplier"):
    accounting.worker_dp_event(0.1, 1.0, 10, loss_releases=2)
  with pytest.raises(ValueError, match="loss releases in"):
    accounting.worker_dp_event(0.1, 1.0, 10, loss_releases=11, loss_noise_multiplier=1.0)
  with pytest.raises(ValueError, match="noise_multiplier"):
    accounting.worker_dp_event(0.1, 0.0, 10)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
