"""Decentralized DP-SGD's update rules (paper 002, Sec. 2) against per-worker references."""

from __future__ import annotations

import numpy as np
import pytest

from dp_fl.decentralized import graphs
from dp_fl.decentralized import updates
from dp_fl.mechanisms import cpsgd

M, D, L = 5, 7, 4


def _per_worker_leasgd(w, g, pairs, lr, rho):
  """Eq. 3 written out worker by worker."""
  out = w - lr * g
  for i, f in pairs:
    out[i] += lr * rho * (w[f] - w[i])
    out[f] += lr * rho * (w[i] - w[f])
  return out


def test_vectorized_leasgd_step_equals_the_per_worker_rule():
  rng = np.random.default_rng(0)
  w, g = rng.normal(size=(M, D)), rng.normal(size=(M, D))
  leaders, followers = updates.leader_follower_pools(rng.random(M))
  pairs = updates.random_pairing(leaders, followers, rng)
  lr, rho = 0.1, 0.8
  mixing = graphs.check_mixing_matrix(updates.elastic_mixing(pairs, M, lr * rho))
  np.testing.assert_allclose(updates.step(w, g, mixing, lr),
                             _per_worker_leasgd(w, g, pairs, lr, rho), atol=1e-12)


def test_leasgd_without_elasticity_or_noise_is_independent_local_sgd():
  rng = np.random.default_rng(1)
  w, g = rng.normal(size=(M, D)), rng.normal(size=(M, D))
  pairs = updates.random_pairing(*updates.leader_follower_pools(rng.random(M)), rng)
  mixing = updates.elastic_mixing(pairs, M, 0.0)  # ρ = 0.
  np.testing.assert_array_equal(updates.step(w, g, mixing, 0.3), w - 0.3 * g)


def test_dpsgd_with_complete_uniform_mixing_is_synchronous_averaged_sgd():
  # With M = J/m the average model follows synchronous SGD on the averaged gradients exactly,
  # and every worker's model is that model minus its own last step's deviation (D-PSGD
  # averages, then each worker applies its gradient; Lian et al. 2017).
  rng = np.random.default_rng(2)
  w = np.tile(rng.normal(size=D), (M, 1))  # Workers start from one model.
  synchronous = w[0].copy()
  for _ in range(5):
    g = rng.normal(size=(M, D))
    w = updates.step(w, g, graphs.mixing_matrix("complete", M), 0.2)
    synchronous = synchronous - 0.2 * g.mean(axis=0)
    np.testing.assert_allclose(w.mean(axis=0), synchronous, atol=1e-12)
    np.testing.assert_allclose(w, synchronous - 0.2 * (g - g.mean(axis=0)), atol=1e-12)


def test_per_example_clipping_bounds_each_examples_contribution():
  rng = np.random.default_rng(3)
  per_example = rng.normal(scale=5.0, size=(M, L, D))
  clipped = cpsgd.clip_l2(per_example, 1.5)
  assert np.all(np.linalg.norm(clipped, axis=-1) <= 1.5 + 1e-12)
  small = rng.normal(scale=1e-3, size=(M, L, D))
  np.testing.assert_array_equal(cpsgd.clip_l2(small, 1.5), small)
  # One example changed arbitrarily moves a worker's noiseless gradient by <= 2C / L.
  other = per_example.copy()
  other[0, 0] = 1e6
  diff = (updates.private_gradients(per_example, 1.5, 0.0, None)
          - updates.private_gradients(other, 1.5, 0.0, None))
  assert np.linalg.norm(diff[0]) <= 2 * 1.5 / L + 1e-12 and np.all(diff[1:] == 0)


def test_private_gradients_add_the_stated_noise():
  rng = np.random.default_rng(4)
  zeros = np.zeros((M, L, 20000))
  noisy = updates.private_gradients(zeros, 2.0, 0.7, rng)
  # Std of the mean's noise: σC / L, estimated from 100k draws to well within 2 %.
  assert np.std(noisy) == pytest.approx(0.7 * 2.0 / L, rel=0.02)


def test_pools_and_pairing_follow_the_paper():
  losses = np.array([0.9, 0.1, 0.5, 0.3, 0.7])
  leaders, followers = updates.leader_follower_pools(losses)
  assert list(leaders) == [1, 2, 3] and list(followers) == [0, 4]  # Lower loss leads.
  pairs = updates.random_pairing(leaders, followers, np.random.default_rng(5))
  assert sorted(f for _, f in pairs) == [0, 4] and len({i for i, _ in pairs}) == 2
  with pytest.raises(ValueError, match="leaders >= followers"):
    updates.leader_follower_pools(losses, num_leaders=2)
  with pytest.raises(ValueError, match="disjoint"):
    updates.elastic_mixing([(1, 0), (1, 4)], 5, 0.1)
  with pytest.raises(ValueError, match="<= 1"):
    updates.elastic_mixing([(1, 0)], 5, 1.5)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
