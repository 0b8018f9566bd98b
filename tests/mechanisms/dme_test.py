"""Tests for dp_fl/mechanisms/dme.py (paper 000's distributed mean estimation around cpSGD).

The distribution test compares mean MSEs of 200 runs each with a 5-standard-error slack
(two-sided flake rate < 6e-7 per comparison, two comparisons).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dp_fl.mechanisms import cpsgd
from dp_fl.mechanisms import dme


def test_shared_estimates_have_the_distribution_of_protocol_mean_estimate():
  rng = np.random.default_rng(7)
  n, d, runs = 20, 64, 200
  vectors = dme.INPUTS["skewed"].make(rng, n, d, 1.0)
  mean = vectors.astype(np.float64).mean(axis=0)
  for rotate in (True, False):
    protocol = cpsgd.Protocol(4, 30, 0.3, 0.5, 1.0, rotate)
    fast = [np.sum((dme.shared_mean_estimates(vectors, [protocol], rng)[0][0] - mean) ** 2)
            for _ in range(runs)]
    reference = [np.sum((protocol.mean_estimate(vectors.astype(np.float64), rng) - mean) ** 2)
                 for _ in range(runs)]
    standard_error = math.sqrt((np.var(fast) + np.var(reference)) / runs)
    assert abs(np.mean(fast) - np.mean(reference)) < 5 * standard_error


def test_shared_estimates_without_noise_or_rounding_are_exact():
  """k levels that hit every value exactly and m = 0: the estimate is the mean itself."""
  vectors = np.zeros((6, 8), np.float32)
  vectors[np.arange(6), np.arange(6) % 8] = 1.0  # Each value is -1, 0 or 1: a level at k = 3.
  protocols = [cpsgd.Protocol(3, 0, 0.5, 1.0, 1.0, False)] * 2
  estimates, clipped = dme.shared_mean_estimates(vectors, protocols, np.random.default_rng(0))
  assert clipped == 0
  for estimate in estimates:
    np.testing.assert_allclose(estimate, vectors.mean(axis=0), atol=1e-12)


def test_shared_estimates_refuse_mixed_variants():
  protocols = [cpsgd.Protocol(4, 30, 0.5, 0.5, 1.0, True),
               cpsgd.Protocol(4, 30, 0.5, 0.5, 1.0, False)]
  with pytest.raises(ValueError, match="one variant"):
    dme.shared_mean_estimates(np.zeros((2, 4), np.float32), protocols,
                              np.random.default_rng(0))


@pytest.mark.parametrize("name", sorted(dme.INPUTS))
def test_inputs_have_norm_d(name):
  vectors = dme.INPUTS[name].make(np.random.default_rng(1), 50, 37, 2.5)
  assert vectors.shape == (50, 37) and vectors.dtype == np.float32
  np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 2.5, rtol=1e-5)


def test_variants_use_thm_4s_x_max_or_d():
  n, d, delta = 100, 1000, 1e-5
  rotated = cpsgd.rotated_x_max(2.0, n, d, delta)
  assert dme.VARIANTS["cpsgd_rot"].x_max(2.0, n, d, delta) == rotated
  assert dme.VARIANTS["cpsgd_norot_small_xmax"].x_max(2.0, n, d, delta) == rotated
  assert dme.VARIANTS["cpsgd_norot"].x_max(2.0, n, d, delta) == 2.0
  assert dme.VARIANTS["cpsgd_rot"].accounting_dimension(d) == 1024
  assert dme.VARIANTS["cpsgd_norot"].accounting_dimension(d) == d


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
