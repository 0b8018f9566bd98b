"""Gossip mixing matrices for D-PSGD (paper 002, Sec. 2.1) against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dp_fl.decentralized import graphs


@pytest.mark.parametrize("name,m", [("ring", 2), ("ring", 3), ("ring", 5), ("ring", 15),
                                    ("complete", 1), ("complete", 5), ("torus", 9),
                                    ("torus", 16), ("star", 6), ("isolated", 4)])
def test_every_graph_gives_a_doubly_stochastic_symmetric_matrix_on_its_edges(name, m):
  matrix = graphs.check_mixing_matrix(graphs.mixing_matrix(name, m))
  assert matrix.shape == (m, m)
  if name == "ring" and m >= 3:  # Exactly self and the two ring neighbours, 1/3 each.
    for i, j in itertools.product(range(m), repeat=2):
      expected = 1 / 3 if (i - j) % m in (0, 1, m - 1) else 0.0
      assert matrix[i, j] == pytest.approx(expected)


def test_gossip_preserves_the_average_and_reaches_consensus_at_the_spectral_rate():
  rng = np.random.default_rng(0)
  for name, m in (("ring", 7), ("torus", 9), ("star", 5)):
    matrix = graphs.mixing_matrix(name, m)
    w = rng.normal(size=(m, 4))
    mean = w.mean(axis=0)
    gap = graphs.spectral_gap(matrix)
    assert 0 < gap < 1
    disagreement = np.linalg.norm(w - mean)
    for _ in range(20):
      w = matrix @ w
      np.testing.assert_allclose(w.mean(axis=0), mean, atol=1e-12)  # Average preserved.
      new = np.linalg.norm(w - mean)
      assert new <= (1 - gap) * disagreement + 1e-12  # Contraction by the spectral gap.
      disagreement = new
  assert graphs.spectral_gap(graphs.mixing_matrix("complete", 6)) == pytest.approx(1.0)
  assert graphs.spectral_gap(graphs.mixing_matrix("isolated", 6)) == pytest.approx(0.0)


def test_metropolis_hastings_matches_its_definition_on_random_graphs():
  rng = np.random.default_rng(1)
  for _ in range(20):
    m = int(rng.integers(2, 9))
    upper = np.triu(rng.random((m, m)) < 0.5, 1)
    adjacency = upper | upper.T
    matrix = graphs.check_mixing_matrix(graphs.metropolis_hastings(adjacency))
    degree = adjacency.sum(axis=1)
    for i, j in itertools.product(range(m), repeat=2):
      if i != j:
        expected = 1 / (1 + max(degree[i], degree[j])) if adjacency[i, j] else 0.0
        assert matrix[i, j] == pytest.approx(expected)


def test_bad_inputs_fail_clearly():
  with pytest.raises(ValueError, match="one of"):
    graphs.mixing_matrix("hypercube", 4)
  with pytest.raises(ValueError, match="square >= 9"):
    graphs.mixing_matrix("torus", 10)
  with pytest.raises(ValueError, match="num_workers"):
    graphs.mixing_matrix("ring", 0)
  with pytest.raises(ValueError, match="symmetric"):
    graphs.metropolis_hastings(np.array([[0, 1], [0, 0]], dtype=bool))
  with pytest.raises(ValueError, match="rows must sum to 1"):
    graphs.check_mixing_matrix(np.array([[0.6, 0.4], [0.4, 0.5]]))
  with pytest.raises(ValueError, match="non-negative"):
    graphs.check_mixing_matrix(np.array([[1.5, -0.5], [-0.5, 1.5]]))


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
